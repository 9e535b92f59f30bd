//! Batched products against a naive f64 reference, bit for bit against 2-D products item by
//! item, exact on spikes, Meta's allocations equal to the CPU's, and the errors.

use super::super::matmul;
use super::super::tests::{assert_close, events_of, tensor};
use super::*;
use crate::Device;
use proptest::prelude::*;

/// Element `(r, c)` of item `i` of a stored `[.., rows, cols]` operand, as read.
fn at(x: &[f32], o: Operand, i: usize, r: usize, c: usize) -> f64 {
    let (r, c) = if o.transposed { (c, r) } else { (r, c) };
    x[i * o.len() + r * o.cols + c] as f64
}

/// The naive product of every item, in f64.
fn reference(a: &[f32], b: &[f32], d: &Dims) -> Vec<f64> {
    let (m, k, n) = d.mkn();
    let mut out = vec![0f64; d.batch * m * n];
    for i in 0..d.batch {
        for r in 0..m {
            for c in 0..n {
                out[(i * m + r) * n + c] = (0..k).map(|l| at(a, d.a, i, r, l) * at(b, d.b, i, l, c)).sum();
            }
        }
    }
    out
}

/// Stored shapes `[lead.., rows, cols]` of `a` and `b` for `op(a)` `m x k`, `op(b)` `k x n`.
fn shapes(lead: &[usize], (m, k, n): (usize, usize, usize), t: Transposed) -> (Vec<usize>, Vec<usize>) {
    let with = |rows, cols| lead.iter().copied().chain([rows, cols]).collect::<Vec<_>>();
    let a = if t.a { with(k, m) } else { with(m, k) };
    let b = if t.b { with(n, k) } else { with(k, n) };
    (a, b)
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn products_and_gradients_match_the_naive_reference(
        lead in proptest::collection::vec(1usize..4, 0..3),
        m in 1usize..9, k in 1usize..9, n in 1usize..9,
        ta: bool, tb: bool, seed in 0u64..1000,
    ) {
        let t = Transposed { a: ta, b: tb };
        let (sa, sb) = shapes(&lead, (m, k, n), t);
        let (a, b) = (tensor(&sa, seed, Device::Cpu), tensor(&sb, seed + 1, Device::Cpu));
        let d = dims("test", a.shape(), b.shape(), t).unwrap();
        let y = batched_matmul(&a, &b, t).unwrap();
        let out_dims: Vec<usize> = lead.iter().copied().chain([m, n]).collect();
        prop_assert_eq!(y.dims(), out_dims.as_slice());
        let (av, bv) = (host(&a), host(&b));
        assert_close("product", &host(&y), &reference(&av, &bv, &d), 1e-5);

        // The gradients of sum(y * g) are the products with g, checked the same way.
        let g = tensor(&out_dims, seed + 2, Device::Cpu);
        let (ga, gb) = batched_matmul_backward(&g, &a, &b, t, (true, true)).unwrap();
        let (ga, gb) = (ga.unwrap(), gb.unwrap());
        prop_assert_eq!(ga.dims(), a.dims());
        prop_assert_eq!(gb.dims(), b.dims());
        let gv = host(&g);
        let (mut want_a, mut want_b) = (vec![0f64; av.len()], vec![0f64; bv.len()]);
        for i in 0..d.batch {
            for r in 0..m {
                for c in 0..n {
                    let gi = gv[(i * m + r) * n + c] as f64;
                    for l in 0..k {
                        // y[r, c] += op(a)[r, l] * op(b)[l, c]
                        let ia = if ta { l * m + r } else { r * k + l };
                        let ib = if tb { c * k + l } else { l * n + c };
                        want_a[i * m * k + ia] += gi * at(&bv, d.b, i, l, c);
                        want_b[i * k * n + ib] += gi * at(&av, d.a, i, r, l);
                    }
                }
            }
        }
        assert_close("grad a", &host(&ga), &want_a, 1e-5);
        assert_close("grad b", &host(&gb), &want_b, 1e-5);
    }
}

#[test]
fn every_item_has_the_bits_of_its_own_2d_product() {
    for t in [
        Transposed::default(),
        Transposed { a: true, b: false },
        Transposed { a: false, b: true },
        Transposed { a: true, b: true },
    ] {
        let (m, k, n) = (37, 53, 29);
        let (sa, sb) = shapes(&[3, 2], (m, k, n), t);
        let (a, b) = (tensor(&sa, 7, Device::Cpu), tensor(&sb, 8, Device::Cpu));
        let y = host(&batched_matmul(&a, &b, t).unwrap());
        let (av, bv) = (host(&a), host(&b));
        for i in 0..6 {
            // The item as a plain row-major product of op(a) and op(b).
            let item = |x: &[f32], rows: usize, cols: usize, tr: bool| {
                let s = &x[i * rows * cols..(i + 1) * rows * cols];
                let v: Vec<f32> = if tr {
                    (0..cols)
                        .flat_map(|c| (0..rows).map(move |r| s[r * cols + c]))
                        .collect()
                } else {
                    s.to_vec()
                };
                let (r, c) = if tr { (cols, rows) } else { (rows, cols) };
                Tensor::from_vec(v, [r, c], Device::Cpu, MemoryKind::Input).unwrap()
            };
            let (ar, ac) = (sa[2], sa[3]);
            let (br, bc) = (sb[2], sb[3]);
            let want = host(&matmul(&item(&av, ar, ac, t.a), &item(&bv, br, bc, t.b)).unwrap());
            assert_eq!(
                &y[i * m * n..(i + 1) * m * n],
                want.as_slice(),
                "item {i} of {t:?}"
            );
        }
    }
}

#[test]
fn spike_products_are_exact_counts() {
    // Attention's products of spikes: integer counts, exact in f32 whatever the order.
    let (lead, (m, k, n)) = ([2, 3], (16, 40, 16));
    let t = Transposed { a: false, b: true };
    let (sa, sb) = shapes(&lead, (m, k, n), t);
    let spikes = |dims: &[usize], seed| {
        let v: Vec<f32> = tensor(dims, seed, Device::Cpu)
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| f32::from(*x > 0.0))
            .collect();
        Tensor::from_vec(v, dims.to_vec(), Device::Cpu, MemoryKind::Input).unwrap()
    };
    let (a, b) = (spikes(&sa, 3), spikes(&sb, 4));
    let d = dims("test", a.shape(), b.shape(), t).unwrap();
    let want: Vec<f32> = reference(&host(&a), &host(&b), &d)
        .iter()
        .map(|x| *x as f32)
        .collect();
    assert_eq!(host(&batched_matmul(&a, &b, t).unwrap()), want);
}

#[test]
fn meta_allocates_what_the_cpu_allocates() {
    let t = Transposed { a: true, b: false };
    let (sa, sb) = shapes(&[4, 3], (12, 20, 9), t);
    let run = |device: Device| {
        let (a, b) = (tensor(&sa, 1, device), tensor(&sb, 2, device));
        let y = batched_matmul(&a, &b, t).unwrap();
        let g = tensor(y.dims(), 3, device);
        let (ga, gb) = batched_matmul_backward(&g, &a, &b, t, (true, false)).unwrap();
        assert!(ga.is_some() && gb.is_none());
        drop((y, ga, gb));
    };
    assert_eq!(events_of(Device::Cpu, run), events_of(Device::META, run));
}

#[test]
fn mismatched_operands_are_clear_errors() {
    let cpu = Device::Cpu;
    let t = Transposed::default();
    let err = |a: &[usize], b: &[usize], t| {
        batched_matmul(&tensor(a, 1, cpu), &tensor(b, 2, cpu), t)
            .unwrap_err()
            .to_string()
    };
    assert!(err(&[4], &[4, 2], t).contains("a of rank 2 or more"));
    assert!(err(&[2, 3, 4], &[3, 4, 5], t).contains("leading (batch) dimensions [2]"));
    assert!(err(&[2, 3, 4], &[2, 5, 6], t).contains("b with 4 rows"));
    let transposed_b = Transposed { a: false, b: true };
    assert!(err(&[2, 3, 4], &[2, 6, 5], transposed_b).contains("b with 4 columns"));
    let (a, b) = (tensor(&[2, 3, 4], 1, cpu), tensor(&[2, 4, 5], 2, cpu));
    let bad_grad = tensor(&[2, 3, 4], 3, cpu);
    let e = batched_matmul_backward(&bad_grad, &a, &b, t, (true, true)).unwrap_err();
    assert!(
        e.to_string().contains("gradient of the output's shape [2, 3, 5]"),
        "{e}"
    );
}

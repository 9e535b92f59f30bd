//! conv2d tests: against naive f64 loops on random shapes and parameters (forward and
//! backward), finite differences, Meta/CPU event streams, workspace accounting and errors.

use super::params::TARGET_COLS;
use super::*;
use crate::kernels::matmul::tests::{assert_close, central_differences, events_of, tensor};
use crate::memory::MemoryAction;
use crate::{DType, MemoryTracker};
use proptest::prelude::*;

mod chains;
mod workspace;
use workspace::expected_workspace;

/// One convolution problem: input `[b, c, h, w]`, weight `[co, c / groups, kh, kw]`.
#[derive(Debug, Clone)]
struct Case {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    co: usize,
    kh: usize,
    kw: usize,
    p: Conv2dParams,
    bias: bool,
    seed: u64,
}

impl Case {
    fn x_dims(&self) -> [usize; 4] {
        [self.b, self.c, self.h, self.w]
    }

    fn w_dims(&self) -> [usize; 4] {
        [self.co, self.c / self.p.groups, self.kh, self.kw]
    }

    fn out_hw(&self) -> [usize; 2] {
        self.p.output_hw(self.h, self.w, self.kh, self.kw).unwrap()
    }

    fn out_dims(&self) -> [usize; 4] {
        let [ho, wo] = self.out_hw();
        [self.b, self.co, ho, wo]
    }

    /// Input, weight and bias tensors on `device`.
    fn tensors(&self, device: Device) -> (Tensor, Tensor, Tensor) {
        (
            tensor(&self.x_dims(), self.seed, device),
            tensor(&self.w_dims(), self.seed ^ 1, device),
            tensor(&[self.co], self.seed ^ 2, device),
        )
    }

    /// Calls `f(output index, input index, weight index)` for every multiply-add of the
    /// convolution that does not fall into the padding.
    fn for_each_tap(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [ho, wo] = self.out_hw();
        let (cg, cog) = (self.c / self.p.groups, self.co / self.p.groups);
        let p = &self.p;
        for b in 0..self.b {
            for co in 0..self.co {
                let gi = co / cog;
                for oy in 0..ho {
                    for ox in 0..wo {
                        for cj in 0..cg {
                            for i in 0..self.kh {
                                for j in 0..self.kw {
                                    let iy = (oy * p.stride[0] + i * p.dilation[0]) as isize
                                        - p.padding[0] as isize;
                                    let ix = (ox * p.stride[1] + j * p.dilation[1]) as isize
                                        - p.padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= self.h as isize || ix >= self.w as isize {
                                        continue;
                                    }
                                    let ci = gi * cg + cj;
                                    let xi =
                                        ((b * self.c + ci) * self.h + iy as usize) * self.w + ix as usize;
                                    let wi = ((co * cg + cj) * self.kh + i) * self.kw + j;
                                    let oi = ((b * self.co + co) * ho + oy) * wo + ox;
                                    f(oi, xi, wi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Naive forward in f64.
    fn reference(&self, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
        let [b, co, ho, wo] = self.out_dims();
        let mut out = vec![0f64; b * co * ho * wo];
        if let Some(bias) = bias {
            for (i, o) in out.iter_mut().enumerate() {
                *o = bias[(i / (ho * wo)) % co] as f64;
            }
        }
        self.for_each_tap(|oi, xi, wi| out[oi] += x[xi] as f64 * w[wi] as f64);
        out
    }

    /// Naive backward in f64: gradients of x, w and b.
    fn reference_backward(&self, g: &[f32], x: &[f32], w: &[f32]) -> [Vec<f64>; 3] {
        let [_, co, ho, wo] = self.out_dims();
        let mut gx = vec![0f64; x.len()];
        let mut gw = vec![0f64; w.len()];
        let mut gb = vec![0f64; co];
        for (i, &v) in g.iter().enumerate() {
            gb[(i / (ho * wo)) % co] += v as f64;
        }
        self.for_each_tap(|oi, xi, wi| {
            gx[xi] += g[oi] as f64 * w[wi] as f64;
            gw[wi] += g[oi] as f64 * x[xi] as f64;
        });
        [gx, gw, gb]
    }

    fn geom(&self) -> ConvGeom {
        let (x, w, _) = self.tensors(Device::META);
        ConvGeom::new("test", &x, &w, &self.p).unwrap()
    }
}

/// Random small problems with random stride, padding, dilation and groups; `pointwise` forces
/// 1x1 kernels with stride 1 and no padding (the path without im2col). A third of the cases
/// are "same" convolutions (stride 1, padding `dilation * (kernel - 1) / 2`), the common case
/// with its own im2col path.
fn cases(pointwise: bool) -> impl Strategy<Value = Case> {
    (
        (1usize..=3, 1usize..=3, 1usize..=3, 1usize..=3),
        (1usize..=3, 1usize..=3),
        (
            proptest::array::uniform2(1usize..=3),
            proptest::array::uniform2(0usize..=2),
            proptest::array::uniform2(1usize..=2),
        ),
        proptest::array::uniform2(0usize..=4),
        (0..3).prop_map(|v| v == 0),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            move |((b, groups, cg, cog), (kh, kw), (stride, padding, dilation), extra, same, bias, seed)| {
                let (kh, kw, stride, padding) = if pointwise {
                    (1, 1, [1, 1], [0, 0])
                } else if same {
                    let pad = |k: usize, d: usize| d * (k - 1) / 2;
                    (kh, kw, [1, 1], [pad(kh, dilation[0]), pad(kw, dilation[1])])
                } else {
                    (kh, kw, stride, padding)
                };
                let p = Conv2dParams {
                    stride,
                    padding,
                    dilation,
                    groups,
                };
                // Smallest input whose padded size holds the dilated kernel, plus extra.
                let span =
                    |k: usize, dil: usize, pad: usize| (dil * (k - 1) + 1).saturating_sub(2 * pad).max(1);
                Case {
                    b,
                    c: groups * cg,
                    h: span(kh, dilation[0], padding[0]) + extra[0],
                    w: span(kw, dilation[1], padding[1]) + extra[1],
                    co: groups * cog,
                    kh,
                    kw,
                    p,
                    bias,
                    seed,
                }
            },
        )
}

/// Runs conv2d and conv2d_backward on `case` and compares everything with the naive loops.
fn check_against_reference(case: &Case, needs: GradNeeds) {
    let (x, w, b) = case.tensors(Device::Cpu);
    let (xv, wv, bv) = (
        x.to_vec_f32().unwrap(),
        w.to_vec_f32().unwrap(),
        b.to_vec_f32().unwrap(),
    );
    let out = conv2d(&x, &w, case.bias.then_some(&b), &case.p, 1).unwrap();
    assert_eq!(out.dims(), &case.out_dims());
    assert_eq!(out.kind(), MemoryKind::Activation);
    let want = case.reference(&xv, &wv, case.bias.then_some(bv.as_slice()));
    assert_close("conv2d", &out.to_vec_f32().unwrap(), &want, 1e-5);

    let grad = tensor(&case.out_dims(), case.seed ^ 3, Device::Cpu);
    let gv = grad.to_vec_f32().unwrap();
    let got =
        crate::kernels::testkit::conv2d_backward_with(&grad, &x, &w, case.bias, &case.p, needs).unwrap();
    let [gx, gw, gb] = case.reference_backward(&gv, &xv, &wv);
    assert_eq!(got.x.is_some(), needs.input);
    assert_eq!(got.w.is_some(), needs.weight);
    assert_eq!(got.b.is_some(), needs.bias && case.bias);
    // Weight and bias gradients sum over images and pixels: allow for the longer sums.
    let terms = (case.b * case.out_hw()[0] * case.out_hw()[1]) as f64;
    for (name, t, want, dims, tol) in [
        ("grad x", got.x, gx, x.dims(), 1e-5),
        ("grad w", got.w, gw, w.dims(), 1e-6 * terms.max(10.0)),
        ("grad b", got.b, gb, b.dims(), 1e-6),
    ] {
        if let Some(t) = t {
            assert_eq!(t.dims(), dims, "{name}");
            assert_eq!(t.kind(), MemoryKind::Gradient, "{name}");
            assert_close(name, &t.to_vec_f32().unwrap(), &want, tol);
        }
    }
}

fn needs_of((input, weight, bias): (bool, bool, bool)) -> GradNeeds {
    GradNeeds { input, weight, bias }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn conv2d_matches_naive_loops(case in cases(false), needs in any::<(bool, bool, bool)>()) {
        check_against_reference(&case, needs_of(needs));
    }

    #[test]
    fn pointwise_conv2d_matches_naive_loops(case in cases(true), needs in any::<(bool, bool, bool)>()) {
        prop_assert!(case.geom().pointwise());
        check_against_reference(&case, needs_of(needs));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// conv2d is linear in x, w and b, so central differences with a large step are exact up to
    /// rounding: the backward must be the derivative of this very forward.
    #[test]
    fn conv2d_backward_matches_finite_differences(case in cases(false)) {
        let (x, w, b) = case.tensors(Device::Cpu);
        let r = tensor(&case.out_dims(), case.seed ^ 7, Device::Cpu).to_vec_f32().unwrap();
        let loss = |x: &Tensor, w: &Tensor, b: &Tensor| -> f64 {
            let out = conv2d(x, w, Some(b), &case.p, 1).unwrap().to_vec_f32().unwrap();
            out.iter().zip(&r).map(|(&o, &r)| o as f64 * r as f64).sum()
        };
        let grad = Tensor::from_vec(r.clone(), case.out_dims(), Device::Cpu, MemoryKind::Input).unwrap();
        let g = crate::kernels::testkit::conv2d_backward_with(&grad, &x, &w, true, &case.p, GradNeeds::ALL).unwrap();
        let eps = 0.25;
        let fx = central_differences(&x, eps, |x| loss(x, &w, &b));
        let fw = central_differences(&w, eps, |w| loss(&x, w, &b));
        let fb = central_differences(&b, eps, |b| loss(&x, &w, b));
        assert_close("fd x", &g.x.unwrap().to_vec_f32().unwrap(), &fx, 1e-3);
        assert_close("fd w", &g.w.unwrap().to_vec_f32().unwrap(), &fw, 1e-3);
        assert_close("fd b", &g.b.unwrap().to_vec_f32().unwrap(), &fb, 1e-3);
    }
}

fn params(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dParams {
    Conv2dParams {
        stride: [stride; 2],
        padding: [padding; 2],
        dilation: [dilation; 2],
        groups,
    }
}

fn case(x: [usize; 4], co: usize, k: usize, p: Conv2dParams) -> Case {
    Case {
        b: x[0],
        c: x[1],
        h: x[2],
        w: x[3],
        co,
        kh: k,
        kw: k,
        p,
        bias: true,
        seed: 42,
    }
}

#[test]
fn chunks_of_several_images_with_a_partial_last_chunk() {
    // 20x20 outputs: 3 images per chunk, so 4 images make a full chunk and a partial one.
    let c = case([4, 4, 20, 20], 6, 3, params(1, 1, 1, 2));
    let g = c.geom();
    assert_eq!(g.images_per_chunk(), TARGET_COLS.div_ceil(400));
    assert_eq!(g.images_per_chunk(), 3);
    assert!(g.stage_len() > 0);
    check_against_reference(&c, GradNeeds::ALL);
}

#[test]
fn large_images_use_one_image_per_chunk_and_parallel_gemms() {
    // 34x34 outputs (> TARGET_COLS pixels): in-place GEMMs big enough to run on all threads.
    let c = case([2, 8, 36, 36], 16, 3, params(1, 0, 1, 1));
    let g = c.geom();
    assert_eq!(g.images_per_chunk(), 1);
    assert_eq!(g.stage_len(), 0);
    assert!(g.cog * g.out_pixels() * g.k() >= crate::kernels::matmul::GEMM_PAR_MIN_MACS);
    check_against_reference(&c, GradNeeds::ALL);
    let strided = case([3, 6, 40, 37], 4, 3, params(2, 2, 2, 2));
    check_against_reference(&strided, GradNeeds::ALL);
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let run = |c: &Case| {
        let (x, w, b) = c.tensors(Device::Cpu);
        let out = conv2d(&x, &w, Some(&b), &c.p, 1).unwrap();
        let g =
            crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, GradNeeds::ALL).unwrap();
        let v = |t: Option<Tensor>| t.unwrap().to_vec_f32().unwrap();
        (out.to_vec_f32().unwrap(), v(g.x), v(g.w), v(g.b))
    };
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    for c in [
        case([2, 16, 34, 34], 32, 3, params(1, 1, 1, 1)),
        case([9, 16, 9, 9], 32, 3, params(1, 1, 1, 4)),
        case([2, 64, 33, 33], 64, 1, params(1, 0, 1, 1)),
    ] {
        assert_eq!(one.install(|| run(&c)), three.install(|| run(&c)), "{c:?}");
    }
}

#[test]
fn meta_matches_cpu_shapes_and_events() {
    let all_needs = [
        GradNeeds::ALL,
        needs_of((true, false, false)),
        needs_of((false, true, false)),
        needs_of((false, false, true)),
    ];
    for c in [
        case([2, 4, 9, 9], 6, 3, params(2, 1, 1, 2)), // chunk of 2 images, staging
        case([2, 2, 40, 40], 4, 3, params(1, 1, 1, 1)), // one image per chunk
        case([3, 4, 5, 5], 8, 1, params(1, 0, 1, 2)), // pointwise, no workspace
    ] {
        let run = |dev: Device| {
            let (x, w, b) = c.tensors(dev);
            let out = conv2d(&x, &w, Some(&b), &c.p, 1).unwrap();
            assert_eq!(out.dims(), &c.out_dims());
            for needs in all_needs {
                let g =
                    crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, needs).unwrap();
                assert_eq!(
                    g.x.map(|t| t.dims().to_vec()),
                    needs.input.then(|| x.dims().to_vec())
                );
                assert_eq!(
                    g.w.map(|t| t.dims().to_vec()),
                    needs.weight.then(|| w.dims().to_vec())
                );
                assert_eq!(g.b.map(|t| t.dims().to_vec()), needs.bias.then(|| vec![c.co]));
            }
        };
        let cpu = events_of(Device::Cpu, run);
        let meta = events_of(Device::META, run);
        assert_eq!(cpu, meta, "{c:?}");
        let workspace: Vec<u64> = cpu
            .iter()
            .filter(|e| e.0 == MemoryAction::Alloc && e.2 == MemoryKind::Workspace)
            .map(|e| e.1)
            .collect();
        let g = c.geom();
        // Forward and the three backward calls that need an input or weight gradient.
        let mut want: Vec<usize> = expected_workspace(&g, None);
        for needs in &all_needs[..3] {
            want.extend(expected_workspace(&g, Some(*needs)));
        }
        let want: Vec<u64> = want.into_iter().map(|l| 4 * l as u64).collect();
        assert_eq!(workspace, want, "{c:?}");
    }
}

#[test]
fn implicit_gemm_blocks_tails_and_strided_input_gradients_match_naive_loops() {
    // 360 inner indices (two blocks), 147 columns across images (two column blocks, a partial
    // tile), 13 output channels (a partial tile of rows); then stride 2, whose input gradient
    // keeps im2col + col2im.
    for p in [params(1, 1, 1, 1), params(2, 1, 1, 1), params(1, 2, 2, 1)] {
        let c = case([3, 40, 9, 9], 13, 3, p);
        assert!(c.geom().implicit());
        check_against_reference(&c, GradNeeds::ALL);
    }
}

#[test]
fn implicit_outputs_do_not_depend_on_the_time_steps_folded() {
    let c = case([6, 5, 7, 7], 9, 3, params(1, 1, 1, 1));
    let (x, w, b) = c.tensors(Device::Cpu);
    let one = conv2d(&x, &w, Some(&b), &c.p, 1).unwrap().to_vec_f32().unwrap();
    for t in [2, 3, 6] {
        let folded = conv2d(&x, &w, Some(&b), &c.p, t).unwrap().to_vec_f32().unwrap();
        assert_eq!(one, folded, "{t} time steps");
    }
}

#[test]
fn empty_batch_gives_empty_results() {
    let c = case([0, 4, 6, 6], 4, 3, params(1, 1, 1, 1));
    let (x, w, b) = c.tensors(Device::Cpu);
    let out = conv2d(&x, &w, Some(&b), &c.p, 1).unwrap();
    assert_eq!(out.dims(), &[0, 4, 6, 6]);
    let g = crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, GradNeeds::ALL).unwrap();
    assert_eq!(g.w.unwrap().to_vec_f32().unwrap(), vec![0.0; 4 * 4 * 9]);
    assert_eq!(g.b.unwrap().to_vec_f32().unwrap(), vec![0.0; 4]);
}

#[test]
fn empty_images_with_padding_see_only_zeros() {
    // 0 x 3 images padded by 1: the output is all padding, so it is the bias.
    let mut c = case([2, 2, 0, 3], 3, 1, params(1, 1, 1, 1));
    c.w = 3;
    let (x, w, b) = c.tensors(Device::Cpu);
    let out = conv2d(&x, &w, Some(&b), &c.p, 1).unwrap();
    assert_eq!(out.dims(), &[2, 3, 2, 5]);
    let bv = b.to_vec_f32().unwrap();
    let want: Vec<f64> = (0..60).map(|i| bv[(i / 10) % 3] as f64).collect();
    assert_close("conv2d", &out.to_vec_f32().unwrap(), &want, 0.0);
    let g = crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, GradNeeds::ALL).unwrap();
    assert_eq!(g.x.unwrap().elem_count(), 0);
    assert_eq!(g.w.unwrap().to_vec_f32().unwrap(), vec![0.0; 6]);
}

#[test]
fn params_serialize_and_default_like_pytorch() {
    let p = Conv2dParams::default();
    assert_eq!(p, params(1, 0, 1, 1));
    let json = serde_json::to_string(&params(2, 1, 1, 4)).unwrap();
    assert_eq!(
        serde_json::from_str::<Conv2dParams>(&json).unwrap(),
        params(2, 1, 1, 4)
    );
    // (48 + 2 - 3) / 2 + 1 = 24; dilation 2 makes the 3x3 kernel span 5 pixels.
    assert_eq!(params(2, 1, 1, 1).output_hw(48, 47, 3, 3).unwrap(), [24, 24]);
    assert_eq!(params(1, 0, 2, 1).output_hw(5, 6, 3, 3).unwrap(), [1, 2]);
}

#[test]
fn errors_name_the_problem() {
    let dev = Device::Cpu;
    let x = tensor(&[1, 4, 5, 5], 0, dev);
    let w = tensor(&[6, 2, 3, 3], 0, dev);
    let ok = params(1, 0, 1, 2);
    let err = |x: &Tensor, w: &Tensor, b: Option<&Tensor>, p: Conv2dParams| {
        conv2d(x, w, b, &p, 1).unwrap_err().to_string()
    };
    let checks: Vec<(String, &str)> = vec![
        (err(&tensor(&[4, 5, 5], 0, dev), &w, None, ok), "rank 4 [batch"),
        (
            err(&x, &tensor(&[6, 2, 9], 0, dev), None, ok),
            "rank 4 [out_channels",
        ),
        (err(&x, &w, None, params(1, 0, 1, 3)), "groups 3 must divide"),
        (
            err(&x, &tensor(&[5, 2, 3, 3], 0, dev), None, ok),
            "output channels 5",
        ),
        (
            err(&x, &tensor(&[6, 4, 3, 3], 0, dev), None, ok),
            "[6, 2, kh, kw]",
        ),
        (
            err(&x, &tensor(&[6, 2, 7, 3], 0, dev), None, ok),
            "kernel height 7",
        ),
        (err(&x, &w, None, params(1, 0, 3, 2)), "dilation 3 spans 7"),
        (err(&x, &w, None, params(0, 0, 1, 2)), "every stride must be >= 1"),
        (
            err(&x, &w, None, params(1, 0, 0, 2)),
            "every dilation must be >= 1",
        ),
        (err(&x, &w, None, params(1, 0, 1, 0)), "groups is 0"),
        (
            err(&x, &tensor(&[6, 2, 0, 3], 0, dev), None, ok),
            "kernel height is 0",
        ),
        (
            err(
                &tensor(&[1, 0, 5, 5], 0, dev),
                &tensor(&[6, 0, 3, 3], 0, dev),
                None,
                params(1, 0, 1, 1),
            ),
            "must both be >= 1",
        ),
        (err(&x, &w, Some(&tensor(&[5], 0, dev)), ok), "bias of shape [6]"),
        (
            err(&x.to_dtype(DType::F16).unwrap(), &w, None, ok),
            "expected dtype f32, got f16",
        ),
        (
            err(&x, &tensor(&[6, 2, 3, 3], 0, Device::META), None, ok),
            "different devices",
        ),
    ];
    for (e, want) in checks {
        assert!(
            e.starts_with("conv2d") && e.contains(want),
            "{e:?} should contain {want:?}"
        );
    }
    let bad_grad = tensor(&[1, 6, 3, 4], 0, dev);
    let e = crate::kernels::testkit::conv2d_backward_with(&bad_grad, &x, &w, true, &ok, GradNeeds::ALL)
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d_backward") && e.contains("[1, 6, 3, 3]"), "{e}");
    let e = crate::kernels::testkit::conv2d_backward_with(
        &bad_grad,
        &x,
        &w,
        true,
        &params(1, 0, 1, 4),
        GradNeeds::ALL,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("groups 4 must divide"), "{e}");
    let e = Conv2dParams::default()
        .output_hw(2, 2, 3, 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("larger") || e.contains("more than the padded"), "{e}");
}

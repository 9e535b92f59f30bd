use super::*;
use crate::kernels::testkit::{
    assert_close, assert_meta_matches_cpu, central_diff, cpu, dot, tensor, values,
};
use crate::{Device, MemoryKind};
use proptest::prelude::*;

/// A random pooling case: dims `[B, C, H, W]`, parameters with padding <= kernel/2 and an input at
/// least as large as the kernel, input values, and upstream gradient values.
#[derive(Debug, Clone)]
struct Case {
    dims: [usize; 4],
    p: Pool2dParams,
    x: Vec<f32>,
    g: Vec<f32>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..3,
        1usize..3,
        [1usize..5, 1usize..5],
        [1usize..4, 1usize..4],
        [0usize..3, 0usize..3],
        [0usize..7, 0usize..30],
    )
        .prop_flat_map(|(b, c, kernel, stride, pad, extra)| {
            let padding = [pad[0].min(kernel[0] / 2), pad[1].min(kernel[1] / 2)];
            // Smallest input the kernel fits in, plus up to 6 rows and 29 columns (rows of
            // more than 8 outputs exercise the blocked max-pool update).
            let h = kernel[0].saturating_sub(2 * padding[0]).max(1) + extra[0];
            let w = kernel[1].saturating_sub(2 * padding[1]).max(1) + extra[1];
            let dims = [b, c, h, w];
            let p = Pool2dParams {
                kernel,
                stride,
                padding,
            };
            let [oh, ow] = p.output_hw([h, w]).unwrap();
            (
                Just(dims),
                Just(p),
                // Repeated values make ties (the first maximum must win).
                prop::collection::vec(
                    prop_oneof![-5.0f32..5.0, Just(1.0f32), Just(-1.0f32)],
                    b * c * h * w,
                ),
                prop::collection::vec(-2.0f32..2.0, b * c * oh * ow),
            )
        })
        .prop_map(|(dims, p, x, g)| Case { dims, p, x, g })
}

/// Naive windows in padded coordinates: for each plane, output position and in-bounds input
/// positions of its window, with the padded window size.
fn naive_windows(dims: [usize; 4], p: &Pool2dParams) -> Vec<(usize, Vec<usize>, usize)> {
    let [b, c, h, w] = dims;
    let (kh, kw, sh, sw, ph, pw) = (
        p.kernel[0],
        p.kernel[1],
        p.stride[0],
        p.stride[1],
        p.padding[0] as i64,
        p.padding[1] as i64,
    );
    let oh = (h + 2 * p.padding[0] - kh) / sh + 1;
    let ow = (w + 2 * p.padding[1] - kw) / sw + 1;
    let mut out = Vec::new();
    for plane in 0..b * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut members = Vec::new();
                let mut padded = 0;
                for dy in 0..kh {
                    for dx in 0..kw {
                        let (yy, xx) = ((oy * sh + dy) as i64 - ph, (ox * sw + dx) as i64 - pw);
                        if yy < h as i64 + ph && xx < w as i64 + pw {
                            padded += 1;
                        }
                        if yy >= 0 && xx >= 0 && yy < h as i64 && xx < w as i64 {
                            members.push(plane * h * w + yy as usize * w + xx as usize);
                        }
                    }
                }
                out.push(((plane * oh + oy) * ow + ox, members, padded));
            }
        }
    }
    out
}

fn naive_adaptive(dims: [usize; 4], out_hw: [usize; 2]) -> Vec<(usize, Vec<usize>)> {
    let [b, c, h, w] = dims;
    let [oh, ow] = out_hw;
    let mut out = Vec::new();
    for plane in 0..b * c {
        for oy in 0..oh {
            // PyTorch: start = floor(i*H/oh), end = ceil((i+1)*H/oh), in f64 to stay independent.
            let (y0, y1) = (
                (oy * h) / oh,
                ((oy + 1) as f64 * h as f64 / oh as f64).ceil() as usize,
            );
            for ox in 0..ow {
                let (x0, x1) = (
                    (ox * w) / ow,
                    ((ox + 1) as f64 * w as f64 / ow as f64).ceil() as usize,
                );
                let members = (y0..y1)
                    .flat_map(|y| (x0..x1).map(move |x| plane * h * w + y * w + x))
                    .collect();
                out.push(((plane * oh + oy) * ow + ox, members));
            }
        }
    }
    out
}

fn avg_divisor(members: &[usize], padded: usize, include_pad: bool) -> f64 {
    if include_pad {
        padded as f64
    } else {
        members.len() as f64
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn max_pool_matches_naive(
        k in case(),
        spike in any::<bool>(),
        specials in prop::collection::vec((any::<prop::sample::Index>(), prop_oneof![Just(f32::NAN), Just(f32::NEG_INFINITY)]), 0..4),
    ) {
        let mut k = k;
        for (at, v) in specials {
            let i = at.index(k.x.len());
            k.x[i] = v;
        }
        let x = cpu(&k.x, &k.dims).with_spike_flag(spike);
        let (y, idx) = max_pool2d(&x, &k.p).unwrap();
        prop_assert_eq!(y.is_spike(), spike);
        let (ys, is) = (y.to_vec_f32().unwrap(), idx.to_vec::<u32>().unwrap());
        let plane = k.dims[2] * k.dims[3];
        let mut want_gx = vec![0f64; k.x.len()];
        for (o, members, _) in naive_windows(k.dims, &k.p) {
            // PyTorch: start at -inf and the first member; take v if v > max or v is NaN.
            let (mut best, mut max) = (members[0], f32::NEG_INFINITY);
            for &j in &members {
                if k.x[j] > max || k.x[j].is_nan() {
                    best = j;
                    max = k.x[j];
                }
            }
            prop_assert_eq!(ys[o].to_bits(), max.to_bits());
            prop_assert_eq!(is[o] as usize, best % plane);
            want_gx[best] += k.g[o] as f64;
        }
        let gx = max_pool2d_backward(&cpu(&k.g, y.dims()), &idx, &k.dims).unwrap();
        prop_assert_eq!(gx.kind(), MemoryKind::Gradient);
        assert_close(&gx.to_vec_f32().unwrap(), &want_gx, 1e-6, 1e-6, "max grad");
    }

    #[test]
    fn avg_pool_matches_naive(k in case(), include_pad in any::<bool>()) {
        let y = avg_pool2d(&cpu(&k.x, &k.dims).with_spike_flag(true), &k.p, include_pad).unwrap();
        prop_assert!(!y.is_spike());
        let ys = y.to_vec_f32().unwrap();
        let mut want_y = vec![0f64; ys.len()];
        let mut want_gx = vec![0f64; k.x.len()];
        for (o, members, padded) in naive_windows(k.dims, &k.p) {
            let d = avg_divisor(&members, padded, include_pad);
            want_y[o] = members.iter().map(|&j| k.x[j] as f64).sum::<f64>() / d;
            for &j in &members {
                want_gx[j] += k.g[o] as f64 / d;
            }
        }
        assert_close(&ys, &want_y, 1e-6, 1e-6, "avg y");
        let gx = avg_pool2d_backward(&cpu(&k.g, y.dims()), &k.dims, &k.p, include_pad).unwrap();
        assert_close(&gx.to_vec_f32().unwrap(), &want_gx, 1e-6, 1e-6, "avg grad");
    }

    /// 2x2 windows side by side run their own loop; it gives the general loop's bits: the sum
    /// from 0 over window rows, each row summed in f64, zeros of either sign included.
    #[test]
    fn avg_pool_of_pairs_has_the_general_bits(
        dims in [1usize..3, 1usize..3, 2usize..9, 2usize..40],
        include_pad in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let len = dims.iter().product::<usize>();
        // Half the values zeros of either sign, so that whole windows of -0.0 occur.
        let pick = |i: usize, scale: f32| {
            let mut z = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z ^= z >> 29;
            match z % 4 {
                0 => -0.0,
                1 => 0.0,
                _ => ((z >> 8) % 20_000) as f32 / 997.0 * scale - 10.0,
            }
        };
        let x: Vec<f32> = (0..len).map(|i| pick(i, 1.0)).collect();
        let p = Pool2dParams { kernel: [2, 2], stride: [2, 2], padding: [0, 0] };
        let y = avg_pool2d(&cpu(&x, &dims), &p, include_pad).unwrap();
        let g: Vec<f32> = (0..y.elem_count()).map(|i| pick(i + len, 0.3)).collect();
        let gx = avg_pool2d_backward(&cpu(&g, y.dims()), &dims, &p, include_pad).unwrap();
        let [_, _, h, w] = dims;
        let (oh, ow) = (h / 2, w / 2);
        let mut want_y = Vec::new();
        let mut want_gx = vec![0f32; len];
        for plane in 0..dims[0] * dims[1] {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = 0f64;
                    for hh in 2 * oy..2 * oy + 2 {
                        let row = &x[plane * h * w + hh * w + 2 * ox..][..2];
                        sum += row.iter().map(|&v| v as f64).sum::<f64>();
                    }
                    want_y.push((sum / 4.0) as f32);
                    let v = (g[(plane * oh + oy) * ow + ox] as f64 / 4.0) as f32;
                    for hh in 2 * oy..2 * oy + 2 {
                        for d in &mut want_gx[plane * h * w + hh * w + 2 * ox..][..2] {
                            *d += v;
                        }
                    }
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&y.to_vec_f32().unwrap()), bits(&want_y));
        prop_assert_eq!(bits(&gx.to_vec_f32().unwrap()), bits(&want_gx));
    }

    #[test]
    fn adaptive_pool_matches_naive(k in case(), oh in 1usize..6, ow in 1usize..6) {
        let y = adaptive_avg_pool2d(&cpu(&k.x, &k.dims), [oh, ow]).unwrap();
        prop_assert_eq!(y.dims(), &[k.dims[0], k.dims[1], oh, ow]);
        let ys = y.to_vec_f32().unwrap();
        let g = values(ys.len(), 5);
        let mut want_y = vec![0f64; ys.len()];
        let mut want_gx = vec![0f64; k.x.len()];
        for (o, members) in naive_adaptive(k.dims, [oh, ow]) {
            let d = members.len() as f64;
            want_y[o] = members.iter().map(|&j| k.x[j] as f64).sum::<f64>() / d;
            for &j in &members {
                want_gx[j] += g[o] as f64 / d;
            }
        }
        assert_close(&ys, &want_y, 1e-6, 1e-6, "adaptive y");
        let gx = adaptive_avg_pool2d_backward(&cpu(&g, y.dims()), &k.dims).unwrap();
        assert_close(&gx.to_vec_f32().unwrap(), &want_gx, 1e-6, 1e-6, "adaptive grad");
    }
}

#[test]
fn max_pool_backward_routes_to_the_argmax() {
    // One 4x4 plane, 2x2 windows with stride 1: the 9 at (1, 1) is the maximum of all four
    // windows that contain it and receives the sum of their gradients.
    #[rustfmt::skip]
    let x = [
        0.0, 1.0, 0.0, 2.0,
        3.0, 9.0, 0.0, 0.0,
        0.0, 0.0, 4.0, 0.0,
        5.0, 0.0, 0.0, 6.0,
    ];
    let p = Pool2dParams {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [0, 0],
    };
    let (y, idx) = max_pool2d(&cpu(&x, &[1, 1, 4, 4]), &p).unwrap();
    assert_eq!(
        y.to_vec_f32().unwrap(),
        vec![9.0, 9.0, 2.0, 9.0, 9.0, 4.0, 5.0, 4.0, 6.0]
    );
    assert_eq!(idx.to_vec::<u32>().unwrap(), vec![5, 5, 3, 5, 5, 10, 12, 10, 15]);
    let g: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let gx = max_pool2d_backward(&cpu(&g, &[1, 1, 3, 3]), &idx, &[1, 1, 4, 4]).unwrap();
    let mut want = vec![0.0f32; 16];
    want[5] = 1.0 + 2.0 + 4.0 + 5.0;
    want[3] = 3.0;
    want[10] = 6.0 + 8.0;
    want[12] = 7.0;
    want[15] = 9.0;
    assert_eq!(gx.to_vec_f32().unwrap(), want);
}

#[test]
fn max_pool_nan_and_padding_follow_pytorch() {
    let p = Pool2dParams {
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
    };
    let x = [1.0, f32::NAN, 2.0, 3.0];
    let (y, idx) = max_pool2d(&cpu(&x, &[1, 1, 2, 2]), &p).unwrap();
    assert!(y.to_vec_f32().unwrap()[0].is_nan());
    assert_eq!(idx.to_vec::<u32>().unwrap(), vec![1]);
    // All padding-adjacent values negative: padding never wins.
    let (y, _) = max_pool2d(&cpu(&[-3.0, -1.0, -2.0, -4.0], &[1, 1, 2, 2]), &p).unwrap();
    assert_eq!(y.to_vec_f32().unwrap(), vec![-1.0]);
}

#[test]
fn smooth_backwards_match_finite_differences() {
    let dims = [1, 2, 5, 6];
    let x = values(60, 31);
    let p = Pool2dParams {
        kernel: [3, 2],
        stride: [2, 1],
        padding: [1, 1],
    };
    for include_pad in [false, true] {
        let y = avg_pool2d(&cpu(&x, &dims), &p, include_pad).unwrap();
        let r = values(y.elem_count(), 32);
        let fd = central_diff(&x, 1e-2, |v| {
            dot(
                &avg_pool2d(&cpu(v, &dims), &p, include_pad)
                    .unwrap()
                    .to_vec_f32()
                    .unwrap(),
                &r,
            )
        });
        let g = avg_pool2d_backward(&cpu(&r, y.dims()), &dims, &p, include_pad).unwrap();
        assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-3, 1e-4, "avg backward");
    }
    let r = values(2 * 3 * 4, 33);
    let fd = central_diff(&x, 1e-2, |v| {
        dot(
            &adaptive_avg_pool2d(&cpu(v, &dims), [3, 4])
                .unwrap()
                .to_vec_f32()
                .unwrap(),
            &r,
        )
    });
    let g = adaptive_avg_pool2d_backward(&cpu(&r, &[1, 2, 3, 4]), &dims).unwrap();
    assert_close(&g.to_vec_f32().unwrap(), &fd, 1e-3, 1e-4, "adaptive backward");
}

#[test]
fn meta_records_the_same_events_as_cpu() {
    assert_meta_matches_cpu(|dev| {
        let dims = [4, 8, 12, 12];
        let x = tensor(values(4 * 8 * 144, 1), &dims, dev).with_spike_flag(true);
        let p = Pool2dParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
        };
        let (y, idx) = max_pool2d(&x, &p).unwrap();
        assert!(y.is_spike());
        let g = tensor(values(y.elem_count(), 2), y.dims(), dev);
        let gx = max_pool2d_backward(&g, &idx, &dims).unwrap();
        let p3 = Pool2dParams {
            kernel: [3, 3],
            stride: [1, 2],
            padding: [1, 1],
        };
        let a = avg_pool2d(&x, &p3, false).unwrap();
        let ga = avg_pool2d_backward(
            &tensor(values(a.elem_count(), 3), a.dims(), dev),
            &dims,
            &p3,
            false,
        )
        .unwrap();
        let ad = adaptive_avg_pool2d(&x, [5, 1]).unwrap();
        let gad =
            adaptive_avg_pool2d_backward(&tensor(values(ad.elem_count(), 4), ad.dims(), dev), &dims).unwrap();
        [&y, &idx, &gx, &a, &ga, &ad, &gad]
            .iter()
            .map(|t| t.dims().to_vec())
            .collect()
    });
}

#[test]
fn params_serialize_and_report_output_sizes() {
    let p = Pool2dParams {
        kernel: [3, 2],
        stride: [2, 2],
        padding: [1, 0],
    };
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Pool2dParams>(&json).unwrap(), p);
    assert_eq!(p.output_hw([48, 48]).unwrap(), [24, 24]);
    assert_eq!(p.output_hw([5, 3]).unwrap(), [3, 1]);
}

#[test]
fn errors_name_the_problem() {
    let x = cpu(&values(2 * 3 * 4 * 4, 1), &[2, 3, 4, 4]);
    let e = |p: Pool2dParams| max_pool2d(&x, &p).unwrap_err().to_string();
    let msg = e(Pool2dParams {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [2, 0],
    });
    assert!(
        msg.contains("max_pool2d") && msg.contains("padding 2") && msg.contains("0..=1"),
        "{msg}"
    );
    let msg = e(Pool2dParams {
        kernel: [0, 2],
        stride: [1, 1],
        padding: [0, 0],
    });
    assert!(msg.contains("at least 1"), "{msg}");
    let msg = e(Pool2dParams {
        kernel: [2, 2],
        stride: [1, 0],
        padding: [0, 0],
    });
    assert!(msg.contains("at least 1"), "{msg}");
    let msg = e(Pool2dParams {
        kernel: [5, 2],
        stride: [1, 1],
        padding: [0, 0],
    });
    assert!(msg.contains("smaller than the kernel size 5"), "{msg}");
    let p = Pool2dParams {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
    };
    let msg = avg_pool2d(&cpu(&[0.0; 16], &[4, 4]), &p, true)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("[B, C, H, W]"), "{msg}");
    let msg = avg_pool2d(&x.to_dtype(crate::DType::BF16).unwrap(), &p, true)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("expected dtype f32, got bf16"), "{msg}");
    let (y, idx) = max_pool2d(&x, &p).unwrap();
    let g = cpu(&values(y.elem_count(), 2), y.dims());
    let bad_idx = tensor(vec![16u32; y.elem_count()], y.dims(), Device::Cpu);
    let msg = max_pool2d_backward(&g, &bad_idx, &[2, 3, 4, 4])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("index 16 at position 0") && msg.contains("0..16"),
        "{msg}"
    );
    let msg = max_pool2d_backward(&g, &y, &[2, 3, 4, 4])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("expected dtype u32, got f32"), "{msg}");
    let msg = max_pool2d_backward(&g, &idx, &[2, 4, 4, 4])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("grad_y of shape [2, 4, oh, ow]"), "{msg}");
    let msg = avg_pool2d_backward(&g, &[2, 3, 6, 4], &p, true)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("[2, 3, 3, 2]") && msg.contains("got [2, 3, 2, 2]"),
        "{msg}"
    );
    let msg = adaptive_avg_pool2d(&x, [0, 2]).unwrap_err().to_string();
    assert!(msg.contains("at least 1x1"), "{msg}");
    let msg = adaptive_avg_pool2d_backward(&g, &[2, 3, 4])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("[B, C, H, W]"), "{msg}");
    let msg = adaptive_avg_pool2d(&cpu(&[], &[1, 1, 0, 3]), [1, 1])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("H, W >= 1"), "{msg}");
}

//! conv2d workspace accounting: the buffers each call takes, by the target's documented rules,
//! and their release before the call returns.

use super::*;

/// The workspace buffers (elements, in allocation order) of the forward (`needs` None) or of a
/// backward call of `g` on the CPU, by the target's documented rules: im2col columns and
/// staging for grouped convolutions and for input gradients that are not convolutions
/// themselves, the flipped weights for those that are, nothing else for implicit GEMMs.
pub(super) fn expected_workspace(g: &ConvGeom, needs: Option<GradNeeds>) -> Vec<usize> {
    let im2col = || {
        if g.pointwise() {
            vec![]
        } else {
            [g.col_len(), g.stage_len()]
                .into_iter()
                .filter(|&l| l > 0)
                .collect()
        }
    };
    match needs {
        None if g.implicit() => vec![],
        None => im2col(),
        Some(n) if g.implicit() => {
            let conv = g.p.stride == [1, 1]
                && g.p.dilation == [1, 1]
                && g.p.padding[0] < g.kh
                && g.p.padding[1] < g.kw;
            match (n.input, conv) {
                (false, _) => vec![],
                (true, true) => vec![g.co * g.k()],
                (true, false) => im2col(),
            }
        }
        Some(n) if n.input || n.weight => im2col(),
        Some(_) => vec![],
    }
}

#[test]
fn workspace_is_sized_by_shapes_and_freed_before_return() {
    let tracker = MemoryTracker::new(Device::Cpu);
    let _guard = MemoryTracker::install(tracker.clone());
    let peak_of = |f: &mut dyn FnMut()| {
        tracker.reset_peak();
        f();
        let ws = tracker.stats().kind(MemoryKind::Workspace);
        assert_eq!(ws.current, 0, "workspace freed before return");
        ws.peak
    };
    // Grouped: 144 pixels per image: 8 images (capped by the batch) of 16 / 2 * 9 rows per
    // group, and the staging.
    let c = case([8, 16, 12, 12], 32, 3, params(1, 1, 1, 2));
    let g = c.geom();
    assert!(!g.implicit());
    let (x, w, b) = c.tensors(Device::Cpu);
    let mut out = None;
    let fwd = peak_of(&mut || out = Some(conv2d(&x, &w, Some(&b), &c.p, 1).unwrap()));
    assert_eq!(g.images_per_chunk(), 8);
    assert_eq!(fwd, 4 * (16 * 9 * 8 * 144 + 32 * 8 * 144) as u64);
    let out = out.unwrap();
    peak_of(&mut || {
        crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, GradNeeds::ALL).unwrap();
    });
    // One group: no workspace forward; the input gradient flips the weights.
    let c = case([8, 16, 12, 12], 32, 3, params(1, 1, 1, 1));
    assert!(c.geom().implicit());
    let (x, w, b) = c.tensors(Device::Cpu);
    let mut out = None;
    assert_eq!(
        peak_of(&mut || out = Some(conv2d(&x, &w, Some(&b), &c.p, 1).unwrap())),
        0
    );
    let out = out.unwrap();
    let bwd = peak_of(&mut || {
        crate::kernels::testkit::conv2d_backward_with(&out, &x, &w, true, &c.p, GradNeeds::ALL).unwrap();
    });
    assert_eq!(bwd, 4 * w.elem_count() as u64);
}

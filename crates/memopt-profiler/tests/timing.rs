//! The timing profiler measures every module in every phase it runs in, nested times are
//! consistent run by run, and the report serialises.

use memopt_checkpoint::{Plan, Policy};
use memopt_core::{Device, Phase};
use memopt_profiler::timing::TimingReport;
use memopt_profiler::{TimingProfiler, Workload};

fn report() -> (Workload, TimingReport) {
    let workload = Workload::zoo_small("toy-if", 4).unwrap();
    let plan = Plan::from_entries([("1", Policy::CHECKPOINT)]);
    let r = TimingProfiler::new(1, 3)
        .profile(&workload, &plan, Device::Cpu)
        .unwrap();
    (workload, r)
}

#[test]
fn every_module_is_timed_in_every_phase_it_runs_in() {
    let (workload, r) = report();
    assert_eq!((r.warmup_runs, r.runs, r.step_samples_ms.len()), (1, 3, 3));
    let model = workload.build_model(Device::META).unwrap();
    for info in model.modules() {
        let fwd = r
            .module(&info.path, Phase::Forward)
            .unwrap_or_else(|| panic!("{} forward", info.path));
        assert_eq!(fwd.samples_ms.len(), 3);
        assert!(fwd.median_ms > 0.0, "{}", info.path);
        assert_eq!(fwd.module_type, info.type_name);
        if info.type_name == "Linear" {
            assert!(
                r.median_ms(&info.path, Phase::Backward) > 0.0,
                "{} backward",
                info.path
            );
        }
        // The root's recompute figures cover every recomputation.
        let under_checkpoint = info.path.is_empty() || info.path == "1" || info.path.starts_with("1.");
        assert_eq!(
            r.module(&info.path, Phase::Recompute).is_some(),
            under_checkpoint,
            "{} recompute",
            info.path
        );
    }
    assert!(r.median_ms("", Phase::Optimizer) > 0.0);
    assert!(
        r.module("", Phase::Setup).is_none(),
        "time outside the step is not reported"
    );
    assert_eq!(r.module("0", Phase::Forward).unwrap().visits, 1);
    assert_eq!(r.module("1", Phase::Recompute).unwrap().visits, 1);
}

/// A parent's time includes its children's in every run, so its median is at least each
/// child's; the phases of a step are disjoint stretches of it.
#[test]
fn nested_times_are_consistent_run_by_run() {
    let (_, r) = report();
    for m in &r.modules {
        let Some((parent, _)) =
            m.path
                .rsplit_once('.')
                .or(if m.path.is_empty() { None } else { Some(("", "")) })
        else {
            continue;
        };
        let p = r
            .module(parent, m.phase)
            .unwrap_or_else(|| panic!("parent of {} {}", m.path, m.phase));
        for (c, pt) in m.samples_ms.iter().zip(&p.samples_ms) {
            assert!(c <= pt, "{} {}: {c} ms > parent {pt} ms", m.path, m.phase);
        }
        assert!(m.median_ms <= p.median_ms);
    }
    // Coverage is checked on the best run: on a shared machine a preemption between two phases
    // of one run (a step of a few ms) lengthens the step alone, which says nothing of coverage.
    let mut best_cover = 0f64;
    for i in 0..r.runs {
        let phases: f64 = [
            Phase::Forward,
            Phase::Backward,
            Phase::Recompute,
            Phase::Optimizer,
        ]
        .iter()
        .filter_map(|&ph| r.module("", ph))
        .map(|m| m.samples_ms[i])
        .sum();
        assert!(
            phases <= r.step_samples_ms[i] + 1e-9,
            "run {i}: phases {phases} > step"
        );
        best_cover = best_cover.max(phases / r.step_samples_ms[i].max(f64::MIN_POSITIVE));
    }
    assert!(best_cover >= 0.5, "phases cover the step: at best {best_cover}");
}

#[test]
fn timing_reports_serialise_and_reject_zero_runs() {
    let (workload, r) = report();
    let back = TimingReport::from_json(&r.to_json()).unwrap();
    assert_eq!(back, r);
    assert!(r.to_string().contains("recompute"));
    let err = TimingProfiler::new(0, 0)
        .profile(&workload, &Plan::store_all(), Device::Cpu)
        .unwrap_err();
    assert!(err.to_string().contains("at least one run"));
}

/// Plans timed in turns on one model get one report each, in the order given, with the plan's
/// own phases (only the checkpointing plan recomputes) and one sample per round.
#[test]
fn plans_timed_in_turns_get_a_report_each() {
    let workload = Workload::zoo_small("toy-if", 4).unwrap();
    let ckpt = Plan::from_entries([("1", Policy::CHECKPOINT)]);
    let reports = TimingProfiler::new(1, 3)
        .profile_plans(&workload, &[ckpt.clone(), Plan::store_all()], Device::Cpu)
        .unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!((&reports[0].plan, &reports[1].plan), (&ckpt, &Plan::store_all()));
    assert!(reports[0].module("1", Phase::Recompute).is_some());
    assert!(reports[1].module("1", Phase::Recompute).is_none());
    for r in &reports {
        assert_eq!(r.step_samples_ms.len(), 3);
        assert!(r.median_ms("1", Phase::Forward) > 0.0);
    }
    let err = TimingProfiler::new(1, 3)
        .profile_plans(&workload, &[], Device::Cpu)
        .unwrap_err();
    assert!(err.to_string().contains("at least one plan"), "{err}");
}

/// A compressor's packing and unpacking are timed on a spike tensor of the shape asked.
#[test]
fn codecs_are_timed_on_the_shape_asked() {
    use memopt_compress::CompressorKind;
    let t = TimingProfiler::new(1, 3)
        .profile_codec(CompressorKind::BitSpike, &[4, 8, 64, 32], Device::Cpu)
        .unwrap();
    assert_eq!(
        (t.compressor, t.shape.as_slice()),
        (CompressorKind::BitSpike, &[4, 8, 64, 32][..])
    );
    assert_eq!(t.input_bytes, 4 * 8 * 64 * 32 * 4);
    assert!(t.compress_ms > 0.0 && t.decompress_ms > 0.0, "{t:?}");
    let err = TimingProfiler::new(0, 0)
        .profile_codec(CompressorKind::U8, &[8], Device::Cpu)
        .unwrap_err();
    assert!(err.to_string().contains("at least one run"));
}

//! Running steps and timing them.

use super::recorder::{KeyTime, TimingRecorder};
use super::report::{ModuleTiming, TimingReport, median};
use crate::Result;
use crate::error::ProfilerError;
use crate::workload::{StepSession, Workload};
use memopt_checkpoint::Plan;
use memopt_core::{Device, Phase};
use std::collections::HashMap;
use std::time::Instant;

/// Times training steps per module and phase: `warmup` runs are discarded, then the median of
/// `runs` is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingProfiler {
    /// Runs discarded first (caches, allocator, thread pool).
    pub warmup: usize,
    /// Runs measured (at least 1).
    pub runs: usize,
}

impl Default for TimingProfiler {
    /// One warm-up run, five measured.
    fn default() -> Self {
        TimingProfiler { warmup: 1, runs: 5 }
    }
}

impl TimingProfiler {
    /// `warmup` discarded runs, then `runs` measured ones.
    pub fn new(warmup: usize, runs: usize) -> Self {
        TimingProfiler { warmup, runs }
    }

    /// Builds `workload` on `device` under `plan` and times its steps.
    pub fn profile(&self, workload: &Workload, plan: &Plan, device: Device) -> Result<TimingReport> {
        let mut session = workload.instantiate(device, plan)?;
        self.profile_session(&mut session, &workload.describe())
    }

    /// Times the steps of an existing session (each run is a training step: parameters change).
    pub fn profile_session(&self, session: &mut StepSession, workload: &str) -> Result<TimingReport> {
        if self.runs == 0 {
            return Err(ProfilerError::Invalid(
                "the timing profiler needs at least one run".into(),
            ));
        }
        for _ in 0..self.warmup {
            session.step()?;
        }
        let mut order: Vec<(String, Phase)> = Vec::new();
        let mut samples: HashMap<(String, Phase), (Vec<f64>, u64)> = HashMap::new();
        let mut steps = Vec::with_capacity(self.runs);
        let device = session.model().device();
        for run in 0..self.runs {
            let recorder = TimingRecorder::start(device)?;
            let t0 = Instant::now();
            let stepped = session.step();
            let host_ms = t0.elapsed().as_secs_f64() * 1e3;
            let times = recorder.finish()?;
            stepped?;
            // On a GPU the step is the GPU's time from the first mark to the last (the host
            // only queues kernels); on the CPU, the host's.
            steps.push(match device {
                Device::Cuda(_) => times.span.as_secs_f64() * 1e3,
                _ => host_ms,
            });
            for KeyTime {
                path,
                phase,
                time,
                visits,
            } in times.keys
            {
                if phase == Phase::Setup {
                    continue;
                }
                let key = (path, phase);
                let entry = samples.entry(key.clone()).or_insert_with(|| {
                    order.push(key);
                    (vec![0.0; run], 0)
                });
                entry.0.push(time.as_secs_f64() * 1e3);
                entry.1 = visits;
            }
            // A key seen in an earlier run but not in this one took no time in it.
            for (v, _) in samples.values_mut() {
                v.resize(run + 1, 0.0);
            }
        }
        let types: HashMap<String, &'static str> = session
            .model()
            .modules()
            .into_iter()
            .map(|m| (m.path, m.type_name))
            .collect();
        let modules = order
            .into_iter()
            .map(|key| {
                let (v, visits) = samples.remove(&key).unwrap_or_default();
                let (path, phase) = key;
                ModuleTiming {
                    module_type: types.get(&path).copied().unwrap_or("").to_string(),
                    path,
                    phase,
                    visits,
                    median_ms: median(&v),
                    min_ms: v.iter().copied().fold(f64::INFINITY, f64::min),
                    max_ms: v.iter().copied().fold(0.0, f64::max),
                    samples_ms: v,
                }
            })
            .collect();
        Ok(TimingReport {
            workload: workload.to_string(),
            device: session.model().device(),
            plan: session.model().plan(),
            warmup_runs: self.warmup,
            runs: self.runs,
            step_ms: median(&steps),
            step_samples_ms: steps,
            modules,
        })
    }
}

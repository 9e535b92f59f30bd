//! Running steps and timing them: one plan, or several plans in turns on one model.

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

/// The samples of one plan, run after run.
#[derive(Default)]
struct Samples {
    order: Vec<(String, Phase)>,
    keys: HashMap<(String, Phase), (Vec<f64>, u64)>,
    steps: Vec<f64>,
}

impl Samples {
    /// Runs one timed step of `session` as run number `run` (counted from 0) of this plan.
    fn record(&mut self, session: &mut StepSession, run: usize) -> Result<()> {
        let device = session.model().device();
        let recorder = TimingRecorder::start(device)?;
        let t0 = Instant::now();
        let stepped = session.step();
        let host_ms = t0.elapsed().as_secs_f64() * 1e3;
        let times = recorder.finish()?;
        stepped?;
        // On a GPU the step is the GPU's time from the first mark to the last (the host only
        // queues kernels); on the CPU, the host's.
        self.steps.push(match device {
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
            let order = &mut self.order;
            let entry = self.keys.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                (vec![0.0; run], 0)
            });
            entry.0.push(time.as_secs_f64() * 1e3);
            entry.1 = visits;
        }
        // A key seen in an earlier run but not in this one took no time in it.
        for (v, _) in self.keys.values_mut() {
            v.resize(run + 1, 0.0);
        }
        Ok(())
    }

    fn report(
        mut self,
        profiler: &TimingProfiler,
        session: &StepSession,
        workload: &str,
        plan: Plan,
    ) -> TimingReport {
        let types: HashMap<String, &'static str> = session
            .model()
            .modules()
            .into_iter()
            .map(|m| (m.path, m.type_name))
            .collect();
        let modules = std::mem::take(&mut self.order)
            .into_iter()
            .map(|key| {
                let (v, visits) = self.keys.remove(&key).unwrap_or_default();
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
        TimingReport {
            workload: workload.to_string(),
            device: session.model().device(),
            plan,
            warmup_runs: profiler.warmup,
            runs: profiler.runs,
            step_ms: median(&self.steps),
            step_samples_ms: self.steps,
            modules,
        }
    }
}

impl TimingProfiler {
    /// `warmup` discarded runs, then `runs` measured ones.
    pub fn new(warmup: usize, runs: usize) -> Self {
        TimingProfiler { warmup, runs }
    }

    fn check_runs(&self) -> Result<()> {
        if self.runs == 0 {
            return Err(ProfilerError::Invalid(
                "the timing profiler needs at least one run".into(),
            ));
        }
        Ok(())
    }

    /// Builds `workload` on `device` under `plan` and times its steps.
    pub fn profile(&self, workload: &Workload, plan: &Plan, device: Device) -> Result<TimingReport> {
        let mut session = workload.instantiate(device, plan)?;
        self.profile_session(&mut session, &workload.describe())
    }

    /// Times the steps of an existing session under its current plan (each run is a training
    /// step: parameters change).
    pub fn profile_session(&self, session: &mut StepSession, workload: &str) -> Result<TimingReport> {
        self.check_runs()?;
        for _ in 0..self.warmup {
            session.step()?;
        }
        let mut samples = Samples::default();
        for run in 0..self.runs {
            samples.record(session, run)?;
        }
        let plan = session.model().plan();
        Ok(samples.report(self, session, workload, plan))
    }

    /// Times several plans of `workload` in turns on one model on `device`: every round runs
    /// one step of each plan, in the order given (after `warmup` such rounds), so that a change
    /// of the machine's load during the measurement reaches every plan alike. One report per
    /// plan, in the order given; the `i`-th sample of every report comes from the same round,
    /// so ratios of samples of the same round are the least noisy comparison of two plans.
    /// The model's parameters train through all of it (the same steps for every plan), and its
    /// memory pool is shared: each plan's steps start with the blocks the previous plan left
    /// cached, as steps of a training loop do. Errors when `plans` is empty or a plan does not
    /// apply to the model.
    pub fn profile_plans(
        &self,
        workload: &Workload,
        plans: &[Plan],
        device: Device,
    ) -> Result<Vec<TimingReport>> {
        self.check_runs()?;
        let Some(first) = plans.first() else {
            return Err(ProfilerError::Invalid(
                "profile_plans needs at least one plan to time".into(),
            ));
        };
        let mut session = workload.instantiate(device, first)?;
        for _ in 0..self.warmup {
            for plan in plans {
                session.apply_plan(plan)?;
                session.step()?;
            }
        }
        let mut samples: Vec<Samples> = plans.iter().map(|_| Samples::default()).collect();
        for run in 0..self.runs {
            for (plan, s) in plans.iter().zip(samples.iter_mut()) {
                session.apply_plan(plan)?;
                s.record(&mut session, run)?;
            }
        }
        let workload = workload.describe();
        Ok(samples
            .into_iter()
            .zip(plans)
            .map(|(s, plan)| s.report(self, &session, &workload, plan.clone()))
            .collect())
    }
}

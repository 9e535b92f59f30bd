//! A planning session: one workload, its exact estimator, its cost model and its chain model,
//! shared by the strategies.

use crate::builder::{OptionSpace, chain_models_on_threads};
use crate::chain::{ChainModel, plan_of};
use crate::dp::pareto_front;
use crate::parallel::measure_threads;
use crate::report::{PipelineSummary, PlanReport};
use crate::sites::{Site, discover};
use crate::{Result, SearchError};
use memopt_checkpoint::{Model, Plan};
use memopt_core::{DType, MemoryKind, MemoryTracker, Tensor};
use memopt_profiler::cost::Throughput;
use memopt_profiler::{AllocatorLevels, CostModel, Estimator, Workload};
use std::sync::Arc;
use std::time::Instant;

/// Everything the strategies need about one workload: the exact estimator (Meta steps), the
/// cost model (time), the segments and their measured chain model.
///
/// The chain model, [`Self::peak`], [`Self::exact_peak`] and [`Self::baseline_peak_bytes`]
/// count *requested* bytes, which add up buffer by buffer, so the chain is exact.
/// Allocated and reserved bytes depend on the caching allocator's history (a cached block
/// reused whole keeps its unsplit remainder, up to 1 MiB, in the allocated count; segments
/// are 2 MiB, 20 MiB or the block's size) and do not compose; [`Self::exact_peaks`] and
/// [`Self::baseline_peaks`] give all three levels of a Meta step, which replays the
/// allocator.
pub struct PlanningSession {
    workload: Workload,
    estimator: Estimator,
    cost: CostModel,
    model: Model,
    root: Site,
    chain: Arc<ChainModel>,
    /// The chain models of the option space's variants (without poolings split off,
    /// [`OptionSpace::split_poolings`]; without spike counts, [`OptionSpace::spike_counts`]),
    /// where the model has something they change and the chain model is exact.
    variants: Vec<Arc<ChainModel>>,
    baseline: AllocatorLevels,
    chain_exact: bool,
    exact_front: Option<Vec<ExactCandidate>>,
    /// Whether its plans update each parameter in backward ([`OptionSpace::update_in_backward`]).
    update_in_backward: bool,
    setup_ms: f64,
    /// Start of the current planning (see [`PlanningSession::report`]).
    clock: Instant,
}

/// A plan from the chain model's Pareto front with its exact peaks.
#[derive(Debug, Clone)]
pub struct ExactCandidate {
    /// The plan.
    pub plan: Plan,
    /// Its exact requested peak from a Meta step, in bytes.
    pub peak: u64,
    /// Its exact requested, allocated and reserved peaks from the same Meta step, in bytes.
    pub peaks: AllocatorLevels,
    /// Its predicted extra time over storing everything, in ms.
    pub extra_ms: f64,
}

impl PlanningSession {
    /// A session with the default option space and this machine's default throughputs.
    pub fn new(workload: &Workload) -> Result<Self> {
        let cost = CostModel::from_workload(workload, Throughput::cpu_default())?;
        Self::with(workload, OptionSpace::default(), cost)
    }

    /// A session with an explicit option space and cost model (e.g. one calibrated by a
    /// timing profile).
    pub fn with(workload: &Workload, space: OptionSpace, cost: CostModel) -> Result<Self> {
        let started = Instant::now();
        let mut estimator = Estimator::new(workload)?;
        let (model, root, chain) = {
            let _own = MemoryTracker::install(MemoryTracker::new(workload.meta_device()));
            let model = workload.build_model(workload.meta_device())?;
            let input = Tensor::zeros(
                model.spec().input_dims(workload.batch_size),
                DType::F32,
                workload.meta_device(),
                MemoryKind::Input,
            )?
            .with_spike_flag(model.spike_input());
            let root = discover(&model, &input)?;
            let chains = chain_models_on_threads(
                workload,
                &model,
                &root,
                workload.batch_size,
                estimator.persistent_bytes(),
                &space,
                &cost,
                measure_threads(),
            )?;
            (model, root, chains)
        };
        let mut chains = chain.into_iter();
        let chain = chains
            .next()
            .ok_or_else(|| SearchError::Internal("no chain model was built".into()))?;
        // The baseline stores everything and updates after backward, as training does
        // without memopt; the chain models are exact if they give the peak of storing
        // everything in the session's step.
        let baseline = estimator.peaks(&Plan::store_all())?;
        let store_all = Plan {
            update_in_backward: space.update_in_backward,
            ..Plan::store_all()
        };
        let store_all_peak = estimator.peaks(&store_all)?.requested_bytes;
        let exact = |c: &ChainModel| -> Result<bool> {
            Ok(match c.select(&store_all) {
                Some(p) => c.peak(&p)? == store_all_peak,
                None => false,
            })
        };
        let chain_exact = exact(&chain)?;
        let mut variants = Vec::new();
        if chain_exact {
            for c in chains {
                if exact(&c)? {
                    variants.push(Arc::new(c));
                }
            }
        }
        Ok(PlanningSession {
            workload: workload.clone(),
            estimator,
            cost,
            model,
            root,
            chain: Arc::new(chain),
            variants,
            baseline,
            chain_exact,
            exact_front: None,
            update_in_backward: space.update_in_backward,
            setup_ms: started.elapsed().as_secs_f64() * 1e3,
            clock: Instant::now(),
        })
    }

    /// The workload planned for.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The model (on Meta).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The root site and its parts.
    pub fn sites(&self) -> &Site {
        &self.root
    }

    /// The chain model.
    pub fn chain(&self) -> &ChainModel {
        &self.chain
    }

    /// Every chain model the session plans on: [`Self::chain`], then, when the model has a
    /// link that starts with a pooling, the chain model that does not split it off
    /// ([`OptionSpace::split_poolings`]: it holds runs of that link's own links from the
    /// pooling on, which the split one cannot), and when it has pooled spikes, each of those
    /// without spike counts ([`OptionSpace::spike_counts`]). Strategies plan on each and keep
    /// the better plan.
    pub fn chains(&self) -> Vec<&ChainModel> {
        std::iter::once(&*self.chain)
            .chain(self.variants.iter().map(|c| &**c))
            .collect()
    }

    /// [`Self::chains`], shared: for searches that keep their plans while the session runs
    /// Meta steps.
    pub(crate) fn shared_chains(&self) -> Vec<Arc<ChainModel>> {
        std::iter::once(Arc::clone(&self.chain))
            .chain(self.variants.iter().cloned())
            .collect()
    }

    /// The cost model.
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// Requested peak of a step storing everything, in bytes (exact).
    pub fn baseline_peak_bytes(&self) -> u64 {
        self.baseline.requested_bytes
    }

    /// Requested, allocated and reserved peaks of a step storing everything, in bytes (exact).
    pub fn baseline_peaks(&self) -> AllocatorLevels {
        self.baseline
    }

    /// Whether the chain model reproduces the exact baseline peak (it then predicts every plan
    /// it can express exactly; otherwise every evaluation goes to the estimator).
    pub fn chain_is_exact(&self) -> bool {
        self.chain_exact
    }

    /// Time spent building the session (estimator, measurements), in ms.
    pub fn setup_ms(&self) -> f64 {
        self.setup_ms
    }

    /// The exact requested peak of `plan`, from a Meta step, in bytes.
    pub fn exact_peak(&mut self, plan: &Plan) -> Result<u64> {
        Ok(self.exact_peaks(plan)?.requested_bytes)
    }

    /// Whether the session's plans update each parameter in backward
    /// ([`OptionSpace::update_in_backward`]).
    pub fn updates_in_backward(&self) -> bool {
        self.update_in_backward
    }

    /// `plan` as this session plans it: updating in backward or not as the session does
    /// (strategies build plans from entries; the session gives them its step).
    pub fn planned(&self, plan: &Plan) -> Plan {
        Plan {
            update_in_backward: self.update_in_backward,
            ..plan.clone()
        }
    }

    /// The exact requested, allocated and reserved peaks of `plan` (in the session's step,
    /// [`Self::planned`]), from a Meta step that replays the caching allocator (the reserved
    /// peak equals a CPU step's), in bytes.
    pub fn exact_peaks(&mut self, plan: &Plan) -> Result<AllocatorLevels> {
        Ok(self.estimator.peaks(&self.planned(plan))?)
    }

    /// The exact peaks of `plan` on a device of `limit` bytes: its caching allocator releases
    /// its cached segments at the limit and retries, as PyTorch's does on a full device
    /// ([`memopt_core::MemoryTracker::set_reserve_limit`]); `None` when the step does not fit.
    pub fn exact_peaks_within(&mut self, plan: &Plan, limit: u64) -> Result<Option<AllocatorLevels>> {
        Ok(self.estimator.peaks_within(&self.planned(plan), limit)?)
    }

    /// The requested peak of `plan` in bytes: from the chain model when it expresses the plan and is exact,
    /// otherwise from a Meta step.
    pub fn peak(&mut self, plan: &Plan) -> Result<u64> {
        if self.chain_exact {
            for chain in self.chains() {
                if let Some(choice) = chain.select(plan) {
                    return chain.peak(&choice);
                }
            }
        }
        self.exact_peak(plan)
    }

    /// The plans on the chain model's Pareto front of (peak, extra time), each with its exact
    /// peak from a Meta step, plus storing everything. Strategies choose from these when the
    /// chain model is not exact ([`Self::chain_is_exact`]), so that an inexact prediction never
    /// decides feasibility. Computed once per session.
    pub fn exact_front(&mut self) -> Result<&[ExactCandidate]> {
        if self.exact_front.is_none() {
            let mut plans: Vec<(Plan, f64)> = pareto_front(&self.chain)?
                .iter()
                .map(|s| (plan_of(&s.plan), s.extra_ms))
                .collect();
            plans.push((Plan::store_all(), 0.0));
            let mut front = Vec::with_capacity(plans.len());
            for (plan, extra_ms) in plans {
                let peaks = self.exact_peaks(&plan)?;
                front.push(ExactCandidate {
                    plan,
                    peak: peaks.requested_bytes,
                    peaks,
                    extra_ms,
                });
            }
            self.exact_front = Some(front);
        }
        Ok(self.exact_front.as_deref().unwrap_or_default())
    }

    /// Predicted extra time of `plan` as a fraction of the baseline step.
    pub fn overhead(&self, plan: &Plan) -> f64 {
        self.cost.plan_overhead(plan)
    }

    /// Runs `strategy` on this session, timing it from here ([`PlanReport::planning_ms`]).
    pub fn plan(&mut self, strategy: &dyn crate::Strategy) -> Result<PlanReport> {
        self.clock = Instant::now();
        strategy.plan(self)
    }

    /// Verifies `plan` with a Meta step and writes the report of `strategy` (its name). The
    /// planning time is measured from the latest of: the end of the session's setup, the
    /// previous report, and the start of [`Self::plan`].
    pub fn report(&mut self, strategy: &str, plan: Plan) -> Result<PlanReport> {
        let started = self.clock;
        self.report_timed(strategy, plan, started, None)
    }

    /// [`Self::report`] with an explicit start and a pipeline summary.
    pub(crate) fn report_timed(
        &mut self,
        strategy: &str,
        plan: Plan,
        started: Instant,
        summary: Option<PipelineSummary>,
    ) -> Result<PlanReport> {
        let plan = self.planned(&plan);
        let planned = self.exact_peaks(&plan)?;
        let host_peak_bytes = self.estimator.host_peak_bytes();
        let selected = self
            .chains()
            .into_iter()
            .find_map(|c| c.select(&plan).map(|choice| c.peak(&choice)));
        if let Some(predicted) = selected
            && self.chain_exact
        {
            let predicted = predicted?;
            if predicted != planned.requested_bytes {
                return Err(SearchError::Internal(format!(
                    "the chain model predicted {predicted} bytes for a plan whose exact peak is {}",
                    planned.requested_bytes
                )));
            }
        }
        let spec = self.model.spec();
        let report = PlanReport {
            model: self.workload.name().to_string(),
            batch: self.workload.batch_size,
            timesteps: spec.time_steps,
            strategy: strategy.to_string(),
            baseline_peak_bytes: self.baseline.requested_bytes,
            planned_peak_bytes: planned.requested_bytes,
            baseline_peaks: self.baseline,
            planned_peaks: planned,
            host_peak_bytes,
            budget: None,
            predicted_overhead: self.overhead(&plan),
            planning_ms: started.elapsed().as_secs_f64() * 1e3,
            plan,
            summary,
        };
        self.clock = Instant::now();
        Ok(report)
    }
}

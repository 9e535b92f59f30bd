//! SpikingJelly's memory-optimization pipeline, with every peak computed exactly instead of
//! measured by a training step in a subprocess.

use super::Strategy;
use super::budget::Budget;
use super::groups::{Block, Blocks};
use crate::chain::{ChainNode, ChainSegment};
use crate::report::{BudgetKind, PipelineStep, PipelineSummary, PlanReport, mib};
use crate::session::PlanningSession;
use crate::sites::Site;
use crate::{Result, SearchError};
use memopt_checkpoint::policy::PLAN_VERSION;
use memopt_checkpoint::{Plan, PlanEntry, Policy};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Instant;

/// Presets of how far the pipeline goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Level 1: wrap blocks only.
    Safe,
    /// Level 3: wrap, one spatial split pass, temporal splits.
    Balanced,
    /// Level 4: everything, then unwrap what does not help.
    Memory,
    /// Level 4, repeating spatial splits until none helps and trying every chunk count.
    Exhaustive,
}

/// What level 4 favours when unwrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefer {
    /// Unwrap a segment when the peak rises by at most 5% of the baseline.
    Speed,
    /// Unwrap a segment when the peak does not rise.
    Balanced,
    /// Never unwrap.
    Memory,
}

/// SpikingJelly's pipeline: level 1 wraps the blocks (checkpoint, bit-packed spike inputs);
/// level 2 splits the heaviest wrapped segment into its children, kept only if the peak
/// strictly falls; level 3 doubles the time chunks of wrapped segments while the peak falls;
/// level 4 unwraps the slowest segments while the peak does not rise (see [`Prefer`]).
#[derive(Debug, Clone, Copy)]
pub struct Pipeline {
    /// Highest level run (0..=4).
    pub level: u8,
    /// Preset (overrides `level` and the search effort when set).
    pub profile: Option<Profile>,
    /// What unwrapping favours.
    pub prefer: Prefer,
    /// Wrap at most this many blocks, those with the largest inputs.
    pub max_wrapped: Option<usize>,
    /// Wrap at most this fraction of the blocks, those with the largest inputs.
    pub wrap_ratio: Option<f64>,
    /// Stop wrapping once the peak of [`Self::budget_kind`] is within this budget.
    pub checkpoint_budget: Option<Budget>,
    /// The peak `checkpoint_budget` bounds (reserved by default, checked with a Meta step).
    pub budget_kind: BudgetKind,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline {
            level: 4,
            profile: None,
            prefer: Prefer::Balanced,
            max_wrapped: None,
            wrap_ratio: None,
            checkpoint_budget: None,
            budget_kind: BudgetKind::Reserved,
        }
    }
}

struct Run<'s> {
    session: &'s mut PlanningSession,
    heaviness: Heaviness,
    entries: Vec<PlanEntry>,
    peak: u64,
    summary: PipelineSummary,
}

impl Run<'_> {
    fn plan_of(entries: &[PlanEntry]) -> Plan {
        Plan {
            update_in_backward: false,
            version: PLAN_VERSION,
            entries: entries.to_vec(),
        }
    }

    /// Evaluates `candidate`; keeps it when `accept(new, old)` holds.
    fn try_step(
        &mut self,
        level: u8,
        action: String,
        candidate: Vec<PlanEntry>,
        accept: impl Fn(u64, u64) -> bool,
    ) -> Result<bool> {
        let peak = match self.session.peak(&Self::plan_of(&candidate)) {
            Ok(p) => p,
            Err(SearchError::Checkpoint(e)) => {
                self.summary.steps.push(PipelineStep {
                    level,
                    action,
                    applied: false,
                    reason: format!("rejected: {e}"),
                    peak_bytes: self.peak,
                });
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let applied = accept(peak, self.peak);
        self.summary.steps.push(PipelineStep {
            level,
            action,
            applied,
            reason: format!("peak {} -> {}", mib(self.peak), mib(peak)),
            peak_bytes: peak,
        });
        if applied {
            self.entries = candidate;
            self.peak = peak;
        }
        Ok(applied)
    }

    /// Whether the current plan's exact peak of `kind` is at most `budget` bytes. Allocated
    /// and reserved bytes are never below requested ones, so a plan over the budget in
    /// requested bytes (the chain's figure) is over it without a Meta step.
    fn fits(&mut self, kind: BudgetKind, budget: u64) -> Result<bool> {
        if self.peak > budget {
            return Ok(false);
        }
        let peaks = self.session.exact_peaks(&Self::plan_of(&self.entries))?;
        Ok(kind.of(&peaks) <= budget)
    }

    /// The heaviness of an entry: its segment's peak during backward, from the chain model
    /// (0 for a segment or option the model does not have).
    fn heaviness(&self, e: &PlanEntry) -> u64 {
        self.heaviness
            .get(&(e.path.clone(), e.children))
            .and_then(|options| options.iter().find(|(p, _)| *p == e.policy))
            .map_or(0, |(_, peak)| *peak)
    }
}

/// Each segment's options and their peaks during backward, by (path, children).
type Heaviness = HashMap<(String, Option<[usize; 2]>), Vec<(Policy, u64)>>;

/// [`Heaviness`] of a chain model's segments, the first in walking order kept when two share a
/// key: each node's own segment, then its runs, then its parts (built once: looking each entry
/// up by walking the model made a long chain's pipeline quadratic).
fn heaviness_of(nodes: &[ChainNode]) -> Heaviness {
    fn add(out: &mut Heaviness, seg: &ChainSegment) {
        out.entry((seg.path.clone(), seg.children))
            .or_insert_with(|| seg.options.iter().map(|o| (o.policy, o.backward_peak)).collect());
    }
    fn walk(nodes: &[ChainNode], out: &mut Heaviness) {
        for n in nodes {
            add(out, n.segment());
            if let ChainNode::Splittable { parts, runs, .. } = n {
                for r in runs {
                    add(out, r);
                }
                walk(parts, out);
            }
        }
    }
    let mut out = HashMap::new();
    walk(nodes, &mut out);
    out
}

fn find_site<'a>(root: &'a Site, path: &str) -> Option<&'a Site> {
    root.walk()
        .into_iter()
        .find(|s| s.path == path && s.run.is_none())
}

impl Pipeline {
    fn effective(&self) -> (u8, bool) {
        match self.profile {
            Some(Profile::Safe) => (1, false),
            Some(Profile::Balanced) => (3, false),
            Some(Profile::Memory) => (4, false),
            Some(Profile::Exhaustive) => (4, true),
            None => (self.level.min(4), false),
        }
    }
}

impl Strategy for Pipeline {
    fn name(&self) -> String {
        "pipeline".into()
    }

    fn plan(&self, session: &mut PlanningSession) -> Result<PlanReport> {
        let started = Instant::now();
        let (level, exhaustive) = self.effective();
        let baseline = session.baseline_peak_bytes();
        let kind = self.budget_kind;
        let budget = self
            .checkpoint_budget
            .map(|b| b.bytes(kind.of(&session.baseline_peaks())))
            .transpose()?;
        if let Some(r) = self.wrap_ratio
            && !(0.0..=1.0).contains(&r)
        {
            return Err(SearchError::InvalidSetting(format!(
                "the wrap ratio is the fraction of blocks to wrap, from 0 to 1 (0.5 = half); got {r}"
            )));
        }
        let root = session.sites().clone();
        let time_steps = session.model().spec().time_steps;
        let heaviness = heaviness_of(&session.chain().nodes);
        let mut run = Run {
            session,
            heaviness,
            entries: Vec::new(),
            peak: baseline,
            summary: PipelineSummary::default(),
        };

        // Level 1: wrap the blocks, largest inputs first. A block is a run of layers ending with
        // one that holds a neuron ("[pool] conv-bn-LIF" in a flat model, or a whole residual
        // block); layers after the last neuron (pooling, classifier heads) stay stored.
        if level >= 1 {
            let all = Blocks::of(&root);
            let mut blocks: Vec<&Block> = all.iter().collect();
            blocks.sort_by_key(|b| std::cmp::Reverse(b.input_bytes));
            let mut limit = blocks.len();
            if let Some(m) = self.max_wrapped {
                limit = limit.min(m);
            }
            if let Some(r) = self.wrap_ratio {
                limit = limit.min((blocks.len() as f64 * r).ceil() as usize);
            }
            for block in blocks.into_iter().take(limit) {
                if let Some(b) = budget
                    && run.fits(kind, b)?
                {
                    break;
                }
                let entries = all.entries(block, Policy::CHECKPOINT);
                let name = entries
                    .iter()
                    .map(PlanEntry::target)
                    .collect::<Vec<_>>()
                    .join(", ");
                let mut candidate = run.entries.clone();
                candidate.extend(entries);
                if run.try_step(1, format!("wrap {name}"), candidate, |_, _| true)? {
                    run.summary.wrapped += 1;
                }
            }
        }

        // Level 2: split the heaviest wrapped segment into its children while the peak falls.
        if level >= 2 {
            let mut tried: Vec<String> = Vec::new();
            loop {
                let heaviest = run
                    .entries
                    .iter()
                    .filter(|e| e.children.is_none() && !tried.contains(&e.path))
                    .filter(|e| find_site(&root, &e.path).is_some_and(|s| !s.parts.is_empty()))
                    .max_by_key(|e| run.heaviness(e))
                    .cloned();
                let Some(e) = heaviest else { break };
                tried.push(e.path.clone());
                let site = find_site(&root, &e.path)
                    .ok_or_else(|| SearchError::Internal(format!("no site {}", e.path)))?;
                let mut candidate: Vec<PlanEntry> =
                    run.entries.iter().filter(|x| **x != e).cloned().collect();
                candidate.extend(site.parts.iter().map(|p| PlanEntry {
                    path: p.path.clone(),
                    children: None,
                    into_next: 0,
                    policy: e.policy,
                }));
                if run.try_step(2, format!("split {}", e.path), candidate, |new, old| new < old)? {
                    run.summary.split += 1;
                } else if !exhaustive {
                    break;
                }
            }
        }

        // Level 3: double the time chunks of wrapped segments while the peak falls.
        if level >= 3 {
            let mut order = run.entries.clone();
            // Each key is a lookup that copies the entry's path: computed once per entry.
            order.sort_by_cached_key(|e| std::cmp::Reverse(run.heaviness(e)));
            for e in order {
                let Policy::Checkpoint { compressor, .. } = e.policy else {
                    continue;
                };
                let separable = match e.children {
                    None => find_site(&root, &e.path).is_some_and(|s| s.time_separable),
                    Some(_) => false,
                };
                if !separable {
                    continue;
                }
                let mut current = e.clone();
                let mut chunks = 2;
                let mut changed = false;
                while chunks <= time_steps {
                    let next = PlanEntry {
                        policy: Policy::checkpoint(compressor, chunks),
                        ..current.clone()
                    };
                    let candidate: Vec<PlanEntry> = run
                        .entries
                        .iter()
                        .map(|x| if *x == current { next.clone() } else { x.clone() })
                        .collect();
                    if run.try_step(3, format!("chunk {} x{chunks}", e.path), candidate, |new, old| {
                        new < old
                    })? {
                        current = next;
                        changed = true;
                    } else if !exhaustive {
                        break;
                    }
                    chunks *= 2;
                }
                run.summary.chunked += usize::from(changed);
            }
        }

        // Level 4: unwrap the slowest segments while the peak does not rise.
        if level >= 4 && self.prefer != Prefer::Memory {
            let slack = if self.prefer == Prefer::Speed {
                baseline / 20
            } else {
                0
            };
            let mut order = run.entries.clone();
            order.sort_by(|a, b| {
                let cost = |e: &PlanEntry| {
                    run.session
                        .cost()
                        .plan_extra_ms(&Run::plan_of(std::slice::from_ref(e)))
                };
                cost(b).total_cmp(&cost(a))
            });
            for e in order {
                let candidate: Vec<PlanEntry> = run.entries.iter().filter(|x| **x != e).cloned().collect();
                if run.try_step(4, format!("unwrap {}", e.path), candidate, |new, old| {
                    new <= old + slack
                })? {
                    run.summary.unwrapped += 1;
                }
            }
        }

        if run.peak > baseline {
            let kept = std::mem::take(&mut run.entries);
            run.summary.steps.push(PipelineStep {
                level,
                action: format!("revert {} entries", kept.len()),
                applied: true,
                reason: format!(
                    "the plan peaks at {}, above the baseline {}",
                    mib(run.peak),
                    mib(baseline)
                ),
                peak_bytes: baseline,
            });
            run.peak = baseline;
        }
        let plan = Run::plan_of(&run.entries);
        let overhead = run.session.overhead(&plan);
        let peak = run.peak;
        run.summary.recommendation = recommendation(level, baseline, peak, overhead);
        let summary = run.summary;
        session_report(run.session, plan, started, summary)
    }
}

fn session_report(
    session: &mut PlanningSession,
    plan: Plan,
    started: Instant,
    summary: PipelineSummary,
) -> Result<PlanReport> {
    session.report_timed("pipeline", plan, started, Some(summary))
}

fn recommendation(level: u8, baseline: u64, peak: u64, overhead: f64) -> String {
    let ratio = baseline as f64 / peak.max(1) as f64;
    let headline = format!(
        "peak {} ({ratio:.2}x below the baseline {}) at {:.1}% predicted overhead",
        mib(peak),
        mib(baseline),
        overhead * 100.0
    );
    let advice = if level < 4 {
        "raise the level (or use the exhaustive profile) to look for more"
    } else if overhead > 0.2 {
        "the budget strategy finds the cheapest plan for a given peak"
    } else {
        "the min-memory strategy gives the least peak any plan reaches"
    };
    format!("{headline}; {advice}")
}

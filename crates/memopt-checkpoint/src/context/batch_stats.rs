//! What a chunked segment tells its training BatchNorms while it runs its passes: the
//! whole-batch statistics it computed (by BatchNorm path), the statistics pass in progress
//! (forward: the first BatchNorm without statistics adds its chunk's sums and stops the chunk),
//! and the gradient-sums pass in progress (backward: the BatchNorm being summed adds its
//! chunk's gradient sums and the tape stops after it).
//!
//! Only the chunked segment that computed a BatchNorm's statistics (its "driver", in
//! `policy/chunk_passes.rs`) runs passes for it; segments nested inside find the statistics
//! given and run as if the BatchNorm were elementwise.

use crate::{CheckpointError, Result};
use memopt_core::kernels::{self, BatchNormGradSums, BatchNormStatSums, BatchNormStats, RunningStats};
use memopt_core::{ModulePath, Tensor};
use std::collections::BTreeMap;

/// The whole-batch statistics of one BatchNorm, given by the chunked segment that computed
/// them.
pub(crate) struct GivenStats {
    pub(crate) stats: BatchNormStats,
    /// The gradient sums over the whole batch, once its gradient-sums pass has run.
    grad_sums: Option<BatchNormGradSums>,
    /// Whether the weight and bias gradients were returned (once per step).
    params_done: bool,
    /// Values per channel normalised since the count was last reset (a check that the
    /// BatchNorm runs once per chunk).
    normalized: usize,
}

/// How a training BatchNorm finishes its statistics (captured when it adds its first sums).
struct Finish {
    running: Option<(Tensor, Tensor)>,
    momentum: f32,
    eps: f32,
}

/// A forward statistics pass: the BatchNorm that stopped the chunks, and its sums so far.
#[derive(Default)]
pub(crate) struct StatsPass {
    target: Option<ModulePath>,
    sums: Option<BatchNormStatSums>,
    finish: Option<Finish>,
}

/// A backward gradient-sums pass for `target`.
struct GradPass {
    target: ModulePath,
    sums: Option<BatchNormGradSums>,
    /// Whether the current chunk's backward reached the target (the tape then stops).
    reached: bool,
}

/// The chunked-BatchNorm state of a [`crate::Cx`].
#[derive(Default)]
pub(crate) struct BatchStats {
    given: BTreeMap<ModulePath, GivenStats>,
    stats_pass: Option<StatsPass>,
    grad_pass: Option<GradPass>,
}

fn internal(path: &ModulePath, message: String) -> CheckpointError {
    CheckpointError::Module {
        path: path.to_string(),
        module: "BatchNorm".into(),
        message,
    }
}

impl BatchStats {
    /// The given statistics of the BatchNorm at `path`, counting `values` per channel
    /// normalised with them.
    pub(crate) fn normalize_with(&mut self, path: &ModulePath, values: usize) -> Option<BatchNormStats> {
        let g = self.given.get_mut(path)?;
        g.normalized = g.normalized.saturating_add(values);
        Some(g.stats.clone())
    }

    /// Whether the BatchNorm at `path` has given statistics.
    pub(crate) fn is_given(&self, path: &ModulePath) -> bool {
        self.given.contains_key(path)
    }

    /// Gives the statistics of the BatchNorm at `path` (to itself and nested segments).
    pub(crate) fn give(&mut self, path: ModulePath, stats: BatchNormStats) {
        self.given.insert(
            path,
            GivenStats {
                stats,
                grad_sums: None,
                params_done: false,
                normalized: 0,
            },
        );
    }

    /// The BatchNorms whose statistics are given, in path order.
    pub(crate) fn given_paths(&self) -> Vec<ModulePath> {
        self.given.keys().cloned().collect()
    }

    /// Takes back every statistic given except those of `kept` (the paths given before a
    /// segment's frame, from [`BatchStats::given_paths`]).
    pub(crate) fn keep_given(&mut self, kept: &[ModulePath]) {
        self.given.retain(|p, _| kept.binary_search(p).is_ok());
    }

    /// Resets the normalised-values counts of `paths`.
    pub(crate) fn reset_counts<'a>(&mut self, paths: impl IntoIterator<Item = &'a ModulePath>) {
        for p in paths {
            if let Some(g) = self.given.get_mut(p) {
                g.normalized = 0;
            }
        }
    }

    /// Checks that each BatchNorm at `paths` normalised exactly the values its statistics are
    /// over since its count was reset (so it ran once per chunk).
    pub(crate) fn check_counts<'a>(&self, paths: impl IntoIterator<Item = &'a ModulePath>) -> Result<()> {
        for p in paths {
            let Some(g) = self.given.get(p) else { continue };
            if g.normalized != g.stats.count {
                return Err(internal(
                    p,
                    format!(
                        "normalised {} values per channel over the chunks, but its statistics are over {}: a BatchNorm \
                         that runs more than once per step cannot be chunked over time; checkpoint its segment with \
                         chunks = 1",
                        g.normalized, g.stats.count
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Starts a forward statistics pass.
    pub(crate) fn begin_stats_pass(&mut self) {
        self.stats_pass = Some(StatsPass::default());
    }

    /// Whether a statistics pass is in progress.
    pub(crate) fn in_stats_pass(&self) -> bool {
        self.stats_pass.is_some()
    }

    /// Adds the chunk input `x` of the BatchNorm at `path` to the pass's sums (the first
    /// BatchNorm without statistics a chunk reaches; every chunk must reach the same one); the
    /// chunk then stops ([`crate::Stop::StatisticsGathered`]). `running` is `None` while
    /// recomputing.
    pub(crate) fn add_stat_sums(
        &mut self,
        path: &ModulePath,
        x: &Tensor,
        running: Option<(&Tensor, &Tensor)>,
        (momentum, eps): (f32, f32),
    ) -> Result<()> {
        let Some(pass) = self.stats_pass.as_mut() else {
            return Err(internal(path, "no statistics pass is in progress".into()));
        };
        match &pass.target {
            Some(t) if t != path => {
                return Err(internal(
                    path,
                    format!(
                        "a chunk reached this BatchNorm first, another chunk reached '{t}' first: chunked segments need \
                         every chunk to run the same modules"
                    ),
                ));
            }
            Some(_) => {}
            None => {
                pass.target = Some(path.clone());
                pass.finish = Some(Finish {
                    running: running.map(|(m, v)| (m.clone(), v.clone())),
                    momentum,
                    eps,
                });
            }
        }
        pass.sums = Some(kernels::batch_norm_stat_sums(x, pass.sums.take())?);
        Ok(())
    }

    /// Ends the statistics pass: the BatchNorm that stopped its chunks and its statistics
    /// (its running statistics updated once, unless it was recomputing), or `None` when no
    /// chunk stopped.
    pub(crate) fn end_stats_pass(&mut self) -> Result<Option<(ModulePath, BatchNormStats)>> {
        let Some(StatsPass { target, sums, finish }) = self.stats_pass.take() else {
            return Ok(None);
        };
        let (Some(target), Some(sums), Some(finish)) = (target, sums, finish) else {
            return Ok(None);
        };
        let running = finish
            .running
            .as_ref()
            .map(|(mean, var)| RunningStats { mean, var });
        let stats = kernels::batch_norm_stats_finish(&sums, running, finish.momentum, finish.eps)?;
        Ok(Some((target, stats)))
    }

    /// Abandons a statistics pass (after an error).
    pub(crate) fn abandon_stats_pass(&mut self) {
        self.stats_pass = None;
    }

    /// Starts the gradient-sums pass of the BatchNorm at `target`.
    pub(crate) fn begin_grad_pass(&mut self, target: ModulePath) -> Result<()> {
        if let Some(p) = &self.grad_pass {
            return Err(internal(
                &target,
                format!("a gradient-sums pass for '{}' is already in progress", p.target),
            ));
        }
        self.grad_pass = Some(GradPass {
            target,
            sums: None,
            reached: false,
        });
        Ok(())
    }

    /// Whether a gradient-sums pass is in progress.
    pub(crate) fn in_grad_pass(&self) -> bool {
        self.grad_pass.is_some()
    }

    /// Whether `path` is the BatchNorm of the gradient-sums pass in progress.
    pub(crate) fn is_grad_target(&self, path: &ModulePath) -> bool {
        self.grad_pass.as_ref().is_some_and(|p| &p.target == path)
    }

    /// Adds a chunk's output gradient `g` and input `x` of the pass's BatchNorm to its sums
    /// and marks the target reached (the tape stops after it).
    pub(crate) fn add_grad_sums(&mut self, g: &Tensor, x: &Tensor, mean: &Tensor) -> Result<()> {
        let Some(pass) = self.grad_pass.as_mut() else {
            return Err(CheckpointError::Autograd(
                "no gradient-sums pass is in progress".into(),
            ));
        };
        pass.sums = Some(kernels::batch_norm_grad_sums(g, x, mean, pass.sums.take())?);
        pass.reached = true;
        Ok(())
    }

    /// Whether the current chunk's backward reached the pass's BatchNorm.
    pub(crate) fn reached(&self) -> bool {
        self.grad_pass.as_ref().is_some_and(|p| p.reached)
    }

    /// Sets whether the current chunk's backward reached the pass's BatchNorm.
    pub(crate) fn set_reached(&mut self, reached: bool) {
        if let Some(p) = self.grad_pass.as_mut() {
            p.reached = reached;
        }
    }

    /// Ends the gradient-sums pass and stores its sums with the target's statistics; they must
    /// cover the whole batch, or no gradient reached the BatchNorm at all.
    pub(crate) fn end_grad_pass(&mut self) -> Result<()> {
        let Some(GradPass { target, sums, .. }) = self.grad_pass.take() else {
            return Ok(());
        };
        let Some(given) = self.given.get_mut(&target) else {
            return Err(internal(
                &target,
                "gradient sums for a BatchNorm without statistics".into(),
            ));
        };
        if let Some(s) = &sums
            && s.count() != given.stats.count
        {
            return Err(internal(
                &target,
                format!(
                    "the output gradient reached {} of its {} values per channel: chunked BatchNorm needs a gradient \
                     for every time chunk or none; checkpoint its segment with chunks = 1",
                    s.count(),
                    given.stats.count
                ),
            ));
        }
        given.grad_sums = sums;
        Ok(())
    }

    /// Abandons a gradient-sums pass (after an error).
    pub(crate) fn abandon_grad_pass(&mut self) {
        self.grad_pass = None;
    }

    /// The gradient sums of the BatchNorm at `path` and whether its weight and bias gradients
    /// are still to be returned (they are then marked returned: once per step, in the last
    /// pass).
    pub(crate) fn grad_sums(
        &mut self,
        path: &ModulePath,
        want_params: bool,
    ) -> Result<(&BatchNormGradSums, bool)> {
        let Some(given) = self.given.get_mut(path) else {
            return Err(internal(
                path,
                "backward of a chunked BatchNorm without statistics".into(),
            ));
        };
        let params = want_params && !given.params_done;
        given.params_done |= params;
        match &given.grad_sums {
            Some(s) => Ok((s, params)),
            None => Err(internal(
                path,
                "its backward ran before its gradient sums over the whole batch were computed".into(),
            )),
        }
    }
}

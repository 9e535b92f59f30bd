//! Pricing recomputation: one more forward of a segment's modules (the leaf that ends the
//! segment at its own factor), the chunk replays of replayed boundary states, and the passes a
//! time-chunked segment runs for its training BatchNorms.

use super::collect::ModuleCostEntry;
use super::model::{CostModel, within};
use memopt_checkpoint::{BatchNormInputs, Policy, time_spans};
use memopt_core::ModulePath;

impl CostModel {
    /// The leaf modules at or below `paths` (a segment's), in module order.
    fn leaves_under<'a>(&'a self, paths: &'a [String]) -> impl Iterator<Item = &'a ModuleCostEntry> + 'a {
        self.modules
            .iter()
            .filter(move |m| m.leaf && paths.iter().any(|p| within(&m.path, p)))
    }

    /// The recomputation of `e`, in milliseconds: at the forward factor when its outputs are
    /// read, at [`TypeFactors::recompute_last`] when it ends its segment (`last`).
    pub(super) fn entry_recompute_ms(&self, e: &ModuleCostEntry, last: bool) -> f64 {
        let f = self.factors_of(e);
        self.raw_ms(e) * if last { f.recompute_last } else { f.forward }
    }

    /// The leaf that ends a segment covering `paths` (a module, or consecutive children, in
    /// order): the last path's module, then the child whose outputs are its parent's, down to
    /// a leaf. `None` when a module on the way ends with an op of its own (or the cost model
    /// was saved without [`ModuleCostEntry::ends_parent`]).
    pub(super) fn segment_last_leaf(&self, paths: &[String]) -> Option<&ModuleCostEntry> {
        let last = paths.last()?;
        let mut e = self.modules.iter().find(|m| &m.path == last)?;
        while !e.leaf {
            let parent = ModulePath::from(e.path.as_str());
            e = e.children.iter().find_map(|name| {
                let child = parent.child(name);
                self.modules
                    .iter()
                    .find(|m| m.ends_parent && m.path == child.as_str())
            })?;
        }
        Some(e)
    }

    /// One recomputation of the segment covering `paths`, in milliseconds: every module under
    /// them at its forward factor, the leaf that ends the segment at its
    /// [`TypeFactors::recompute_last`].
    pub(super) fn segment_recompute_ms(&self, paths: &[String]) -> f64 {
        let last = self.segment_last_leaf(paths).map(|e| e.path.as_str());
        self.modules
            .iter()
            .filter(|m| paths.iter().any(|p| within(&m.path, p)))
            .map(|m| self.entry_recompute_ms(m, Some(m.path.as_str()) == last))
            .sum()
    }

    /// The chunk replays of a segment (the modules under `paths`) whose boundary states are
    /// not all kept ([`ChunkBoundaries::Replayed`](memopt_checkpoint::ChunkBoundaries::Replayed), [`ChunkBoundaries::KeptEvery`](memopt_checkpoint::ChunkBoundaries::KeptEvery)), in
    /// milliseconds: in each backward pass, chunk `i` first runs the chunks since its replay
    /// origin `j` ([`ChunkBoundaries::replay_origin`](memopt_checkpoint::ChunkBoundaries::replay_origin)) forward again, so a pass replays
    /// `sum(start of chunk i - start of chunk j) / T` of the segment's forward (for replayed
    /// boundaries `(k - 1) / 2` for `k` equal chunks; equal chunks when T is unknown),
    /// priced at each leaf's forward factor (a replay's outputs are read). The passes are the backward proper and, for a
    /// segment that computes its BatchNorm statistics itself (`computes_statistics`: not
    /// nested in another chunked segment), one gradient-sums pass per training BatchNorm.
    pub(super) fn boundary_replays_ms(
        &self,
        paths: &[String],
        policy: Policy,
        computes_statistics: bool,
    ) -> f64 {
        let share = self.replay_share(policy);
        if share == 0.0 {
            return 0.0;
        }
        let forward: f64 = self
            .leaves_under(paths)
            .map(|m| self.entry_recompute_ms(m, false))
            .sum();
        self.backward_passes(paths, computes_statistics) as f64 * share * forward
    }

    /// The passes over its chunks a chunked segment (the modules under `paths`) runs in
    /// backward: the backward proper and, when it computes its BatchNorm statistics itself,
    /// one gradient-sums pass per training BatchNorm.
    fn backward_passes(&self, paths: &[String], computes_statistics: bool) -> usize {
        let batch_norms = self
            .leaves_under(paths)
            .filter(|m| m.module_type.starts_with("BatchNorm"))
            .count();
        1 + if computes_statistics { batch_norms } else { 0 }
    }

    /// How many times the backward of a segment (the modules under `paths`) under `policy`
    /// restores its whole saved input: once without chunks; in time chunks, once per backward
    /// pass ([`Self::backward_passes`]), and replayed boundaries re-read the chunks before
    /// each chunk again (the share of [`Self::boundary_replays_ms`]). An offloaded payload
    /// comes back from host memory each time.
    pub(super) fn saved_input_restores(
        &self,
        paths: &[String],
        policy: Policy,
        computes_statistics: bool,
    ) -> f64 {
        if policy.chunks() <= 1 {
            return 1.0;
        }
        let passes = self.backward_passes(paths, computes_statistics) as f64;
        passes * (1.0 + self.replay_share(policy))
    }

    /// The copies of an offloaded segment's kept boundary states (the modules under `paths`
    /// under `policy`), in milliseconds: in `k` time chunks, the states of the boundaries it
    /// keeps (`k - 1` with kept boundaries, [`ChunkBoundaries::kept_boundaries`](memopt_checkpoint::ChunkBoundaries::kept_boundaries);
    /// [`ModuleCostEntry::state_bytes`] each) go to host memory once and come back once per
    /// backward pass ([`Self::backward_passes`]). Nothing without chunks or offloading,
    /// nothing with replayed boundaries (no boundary state is kept), and nothing
    /// where the host is the device ([`CostModel::separate_host`]: the states stay). The first
    /// chunk's states are the segment's entry states, which a segment at the start of the step
    /// does not have (one nested in a chunked segment does; not counted).
    pub(super) fn offloaded_states_ms(
        &self,
        paths: &[String],
        policy: Policy,
        computes_statistics: bool,
    ) -> f64 {
        let chunks = policy.chunks();
        let kept = policy.boundaries().kept_boundaries(chunks);
        if !self.separate_host || !policy.offloads() || chunks <= 1 || kept == 0 {
            return 0.0;
        }
        let per_boundary: u64 = self.leaves_under(paths).map(|m| m.state_bytes).sum();
        let bytes = per_boundary.saturating_mul(kept as u64);
        self.host_copies_ms(bytes, self.backward_passes(paths, computes_statistics) as f64)
    }

    /// The share of the segment's forward that boundary replays run again per backward pass
    /// (0 with kept boundaries): `sum(start of chunk i - start of its replay origin) / T`, for
    /// replayed boundaries `sum(start of chunk i) / T`; equal chunks when T is unknown
    /// (`(k - 1) / 2` for `k` replayed chunks).
    fn replay_share(&self, policy: Policy) -> f64 {
        let (chunks, boundaries) = (policy.chunks(), policy.boundaries());
        if chunks <= 1 || boundaries.kept_boundaries(chunks) == chunks - 1 {
            return 0.0;
        }
        if self.time_steps >= chunks {
            let spans = time_spans(self.time_steps, chunks);
            let replayed: usize = (0..chunks)
                .map(|i| spans[i].start - spans[boundaries.replay_origin(i)].start)
                .sum();
            replayed as f64 / self.time_steps as f64
        } else {
            let replayed: usize = (0..chunks).map(|i| i - boundaries.replay_origin(i)).sum();
            replayed as f64 / chunks as f64
        }
    }

    /// The extra passes of a segment (the modules under `paths`) run in time chunks, for its
    /// training BatchNorms (`memopt_checkpoint`'s `policy/chunk_passes.rs`), in milliseconds:
    /// per BatchNorm a statistics pass in forward (the leaves up to it, once more) and a
    /// gradient-sums pass in backward (the whole segment's forward once more, and the backward
    /// of the BatchNorm and the leaves after it). The forward passes are recomputations priced
    /// at each type's forward factor, the whole segment's with its last leaf at its recompute
    /// factor ([`TypeFactors::recompute_last`]); the backward ones at the backward factor. Leaves
    /// in module order stand for the order in which they run. Zero without BatchNorm. With
    /// [`BatchNormInputs::Kept`] every forward pass after the first statistics pass (the later
    /// statistics passes and the pass giving the outputs, one per BatchNorm) skips the leaves
    /// before the first BatchNorm: that many forwards of them fewer.
    pub(super) fn batch_norm_passes_ms(&self, paths: &[String], policy: Policy) -> f64 {
        let leaves: Vec<&ModuleCostEntry> = self.leaves_under(paths).collect();
        let forward: Vec<f64> = leaves.iter().map(|m| self.entry_recompute_ms(m, false)).collect();
        let last = self.segment_last_leaf(paths).map(|e| e.path.as_str());
        let whole: f64 = leaves
            .iter()
            .map(|m| self.entry_recompute_ms(m, Some(m.path.as_str()) == last))
            .sum();
        let batch_norms: Vec<usize> = leaves
            .iter()
            .enumerate()
            .filter(|(_, m)| m.module_type.starts_with("BatchNorm"))
            .map(|(i, _)| i)
            .collect();
        let passes: f64 = batch_norms
            .iter()
            .map(|&i| {
                let statistics: f64 = forward[..=i].iter().sum();
                let sums: f64 = leaves[i..].iter().map(|m| self.entry_backward_ms(m)).sum();
                statistics + whole + sums
            })
            .sum();
        let skipped = match (policy.batch_norm_inputs(), batch_norms.first()) {
            (BatchNormInputs::Kept, Some(&first)) => {
                batch_norms.len() as f64 * forward[..first].iter().sum::<f64>()
            }
            _ => 0.0,
        };
        passes - skipped
    }
}

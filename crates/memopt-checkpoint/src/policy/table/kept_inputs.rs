//! Plans keeping a chunked segment's BatchNorm inputs ([`BatchNormInputs::Kept`]): no other
//! recomputed entry may lie on the way to that segment's first BatchNorm.

use super::PolicyTable;
use super::RunShape;
use crate::module::{Module, find_module};
use crate::policy::segment::Segment;
use crate::policy::{BatchNormInputs, Policy};
use crate::{CheckpointError, Result};
use memopt_core::ModulePath;

impl PolicyTable {
    /// Rejects a recomputed entry inside a segment that keeps its BatchNorm inputs
    /// ([`BatchNormInputs::Kept`]) on the way to that segment's first BatchNorm: before it (the
    /// later passes skip those modules, so it would save stand-ins), or the BatchNorm or a
    /// module enclosing it (its own forward would run the BatchNorm, out of the segment's
    /// reach).
    pub(super) fn check_kept_batch_norm_inputs(&self, root: &dyn Module, run: RunShape) -> Result<()> {
        let kept = |p: &Policy| p.batch_norm_inputs() == BatchNormInputs::Kept;
        if !self.map.values().any(kept) && !self.ranges.values().flatten().any(|r| kept(&r.policy)) {
            // Most plans (every one a planner measures but a few) keep none: nothing to walk.
            return Ok(());
        }
        let segments = self.segments(root);
        for (target, segment, path, policy) in &segments {
            if !kept(policy) {
                continue;
            }
            let Ok(way) = segment.batch_norm_inputs_keepable(path, run.training) else {
                continue;
            };
            let inside = segments.iter().find(|(other_target, other, other_path, p)| {
                other_target != target
                    && p.recomputes()
                    && other.module_paths(other_path).iter().any(|m| way.contains(m))
            });
            if let Some((other, ..)) = inside {
                return Err(CheckpointError::InvalidPlan(format!(
                    "{target} keeps its BatchNorm inputs, so its later forward passes skip the layers before its \
                     first BatchNorm, but {other} is recomputed on the way to that BatchNorm; drop \
                     \"batch_norm_inputs\" or that entry's policy"
                )));
            }
        }
        Ok(())
    }

    /// Every entry with a policy as a segment: how plans name it, the segment, the scope path
    /// it runs in and its policy.
    fn segments<'r>(&self, root: &'r dyn Module) -> Vec<(String, Segment<'r>, ModulePath, Policy)> {
        let mut out = Vec::new();
        for (path, policy) in &self.map {
            if let Some(m) = find_module(root, path) {
                out.push((
                    format!("'{path}'"),
                    Segment::Module(m),
                    ModulePath::from(&**path),
                    *policy,
                ));
            }
        }
        for (path, runs) in &self.ranges {
            let Some(parent) = find_module(root, path) else {
                continue;
            };
            for r in runs {
                let segment = Segment::Children {
                    parent,
                    start: r.start,
                    end: r.end,
                    into_next: r.into_next,
                };
                let target = crate::policy::run_target(path, Some([r.start, r.end]), r.into_next);
                out.push((target, segment, ModulePath::from(&**path), r.policy));
            }
        }
        out
    }
}

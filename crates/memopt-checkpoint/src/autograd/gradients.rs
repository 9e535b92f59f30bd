//! Accumulated parameter gradients of one step.

use crate::param::ParamId;
use crate::{CheckpointError, Result};
use memopt_core::{DType, Device, MemoryKind, Tensor};
use std::collections::{BTreeMap, BTreeSet};

/// Parameter gradients, created as zeros on a parameter's first contribution and accumulated in
/// place afterwards. Every contribution goes through the same accumulator, so the order of
/// floating-point additions is the same whatever memory policy produced it. A gradient can be
/// declared final (by the update in backward, [`crate::Plan::update_in_backward`]): no contribution may
/// follow.
#[derive(Debug, Default)]
pub struct Gradients {
    map: BTreeMap<ParamId, Tensor>,
    finals: BTreeSet<ParamId>,
}

impl Gradients {
    /// The gradient of a parameter, if it received any.
    pub fn get(&self, id: ParamId) -> Option<&Tensor> {
        self.map.get(&id)
    }

    /// Number of parameters with a gradient.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no parameter has a gradient.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All gradients by parameter id.
    pub fn iter(&self) -> impl Iterator<Item = (ParamId, &Tensor)> {
        self.map.iter().map(|(k, v)| (*k, v))
    }

    /// The accumulator of parameter `id` of shape `dims` on `device`, created as zeros (kind
    /// gradient) on first use.
    /// An error for a parameter whose gradient was declared final.
    pub fn accumulator(&mut self, id: ParamId, dims: &[usize], device: Device) -> Result<Tensor> {
        if self.finals.contains(&id) {
            return Err(CheckpointError::Autograd(format!(
                "parameter {id:?} received a gradient after its last reader's backward had run \
                 (its update in backward was already applied)"
            )));
        }
        if let Some(t) = self.map.get(&id) {
            return Ok(t.clone());
        }
        let t = Tensor::zeros(dims, DType::F32, device, MemoryKind::Gradient)?;
        self.map.insert(id, t.clone());
        Ok(t)
    }

    /// Declares the gradient of `id` final and returns it: taken out when `keep` is false (the
    /// caller's handle is then the last), left in place (and in [`Gradients::iter`]) when true.
    /// `None` for a parameter that received no gradient.
    pub(crate) fn finalize(&mut self, id: ParamId, keep: bool) -> Option<Tensor> {
        let g = if keep {
            self.map.get(&id).cloned()
        } else {
            self.map.remove(&id)
        }?;
        self.finals.insert(id);
        Some(g)
    }

    /// Whether the gradient of `id` was declared final (the update in backward applied to it).
    pub fn is_final(&self, id: ParamId) -> bool {
        self.finals.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_gradient_takes_no_further_contribution() {
        let mut g = Gradients::default();
        let id = ParamId(7);
        g.accumulator(id, &[2], Device::META).unwrap();
        let kept = g.finalize(id, true).expect("a gradient");
        assert_eq!(kept.dims(), [2]);
        assert!(g.is_final(id) && g.get(id).is_some(), "kept for the caller");
        let err = g.accumulator(id, &[2], Device::META).unwrap_err().to_string();
        assert!(err.contains("after its last reader"), "{err}");
        let other = ParamId(8);
        g.accumulator(other, &[3], Device::META).unwrap();
        assert!(
            g.finalize(other, false).is_some() && g.get(other).is_none(),
            "taken out"
        );
        assert!(
            g.finalize(ParamId(9), false).is_none(),
            "no gradient, nothing final"
        );
    }
}

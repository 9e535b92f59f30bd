//! Accumulated parameter gradients of one step.

use crate::Result;
use crate::param::ParamId;
use memopt_core::{DType, Device, MemoryKind, Tensor};
use std::collections::BTreeMap;

/// Parameter gradients, created as zeros on a parameter's first contribution and accumulated in
/// place afterwards. Every contribution goes through the same accumulator, so the order of
/// floating-point additions is the same whatever memory policy produced it.
#[derive(Debug, Default)]
pub struct Gradients {
    map: BTreeMap<ParamId, Tensor>,
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
    pub fn accumulator(&mut self, id: ParamId, dims: &[usize], device: Device) -> Result<Tensor> {
        if let Some(t) = self.map.get(&id) {
            return Ok(t.clone());
        }
        let t = Tensor::zeros(dims, DType::F32, device, MemoryKind::Gradient)?;
        self.map.insert(id, t.clone());
        Ok(t)
    }
}

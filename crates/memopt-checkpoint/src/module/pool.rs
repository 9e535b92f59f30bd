//! Pooling layers.

use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::{fold_time, one_input, unfold_time};
use super::{Module, PlannerHints};
use crate::Forward;
use crate::autograd::Var;
use crate::context::Cx;
use crate::ops;
use memopt_core::Shape;
use memopt_core::kernels::Pool2dParams;

/// Which pooling a [`Pool2d`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// Maximum over each window (keeps spikes binary).
    Max(Pool2dParams),
    /// Average over each window.
    Avg(Pool2dParams),
    /// Average over windows that cover the input with this output size.
    AdaptiveAvg([usize; 2]),
}

/// 2-D pooling; `[T, N, C, H, W]` inputs fold `T` into the batch.
#[derive(Debug)]
pub struct Pool2d {
    kind: PoolKind,
}

impl Pool2d {
    /// `MaxPool2d(kernel, stride, padding)`.
    pub fn max(kernel: usize, stride: usize, padding: usize) -> Self {
        Pool2d {
            kind: PoolKind::Max(square(kernel, stride, padding)),
        }
    }

    /// `AvgPool2d(kernel, stride, padding)`.
    pub fn avg(kernel: usize, stride: usize, padding: usize) -> Self {
        Pool2d {
            kind: PoolKind::Avg(square(kernel, stride, padding)),
        }
    }

    /// `AdaptiveAvgPool2d((h, w))`.
    pub fn adaptive_avg(out_hw: [usize; 2]) -> Self {
        Pool2d {
            kind: PoolKind::AdaptiveAvg(out_hw),
        }
    }

    /// What it pools.
    pub fn kind(&self) -> PoolKind {
        self.kind
    }
}

fn square(kernel: usize, stride: usize, padding: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel; 2],
        stride: [stride; 2],
        padding: [padding; 2],
    }
}

impl Module for Pool2d {
    fn type_name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max(_) => "MaxPool2d",
            PoolKind::Avg(_) => "AvgPool2d",
            PoolKind::AdaptiveAvg(_) => "AdaptiveAvgPool2d",
        }
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let (x, folded) = fold_time(cx, &x, 4, self.type_name(), "C, H, W")?;
        let y = match &self.kind {
            PoolKind::Max(p) => ops::max_pool2d(cx, &x, p)?,
            PoolKind::Avg(p) => ops::avg_pool2d(cx, &x, p)?,
            PoolKind::AdaptiveAvg(hw) => ops::adaptive_avg_pool2d(cx, &x, *hw)?,
        };
        Ok(vec![unfold_time(cx, y, folded)?])
    }
}

impl PlannerHints for Pool2d {
    fn config_key(&self) -> Option<String> {
        Some(format!("{:?}", self.kind))
    }

    /// One FLOP per window element of each output (every input element for adaptive
    /// pooling); bytes of input and output, plus the u32 argmax indices of max pooling.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        let out = elems(outputs);
        let (flops, index_bytes) = match &self.kind {
            PoolKind::Max(p) => (out * (p.kernel[0] * p.kernel[1]) as u64, 4 * out),
            PoolKind::Avg(p) => (out * (p.kernel[0] * p.kernel[1]) as u64, 0),
            PoolKind::AdaptiveAvg(_) => (elems(inputs), 0),
        };
        Some(ModuleCost {
            flops,
            bytes: f32_bytes(inputs) + f32_bytes(outputs) + index_bytes,
        })
    }
}

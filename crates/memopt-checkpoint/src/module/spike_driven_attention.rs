//! Spike-driven self-attention as SpikingJelly 2.0 builds it (`layer/attention.py`,
//! `SpikeDrivenSelfAttention`), over images `[T, N, C, H, W]`.

use super::batch_norm::BatchNorm;
use super::conv::Conv2d;
use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::{flatten_from, one_input};
use super::init::Init;
use super::neuron::Neuron;
use super::{Module, PlannerHints, transformer_lif};
use crate::autograd::Var;
use crate::context::Cx;
use crate::{CheckpointError, Forward, Result, ops};
use memopt_core::Shape;
use memopt_core::kernels::Conv2dParams;

/// `SpikeDrivenSelfAttention(dim, num_heads)`: `x + proj_bn(proj_conv(Q * attn_lif(sum_L(K *
/// V))))`, where `Q`, `K` and `V` are a 1x1 Conv2d (no bias), a BatchNorm2d and a LIF of
/// `shortcut_lif(x)`, and the sum runs over the `L = H * W` positions of each channel. The
/// heads only group channels (nothing mixes them), so the result does not depend on their
/// number. Children in SpikingJelly's order and names: `shortcut_lif`, `q_conv`, `q_bn`,
/// `q_lif`, `k_*`, `v_*`, `attn_lif` (threshold 0.5), `proj_conv` (1x1 with bias), `proj_bn`;
/// every LIF has tau 2 and `detach_reset`.
#[derive(Debug)]
pub struct SpikeDrivenSelfAttention {
    heads: usize,
    shortcut_lif: Neuron,
    q: Branch,
    k: Branch,
    v: Branch,
    attn_lif: Neuron,
    proj_conv: Conv2d,
    proj_bn: BatchNorm,
}

/// A 1x1 convolution, BatchNorm and LIF making `Q`, `K` or `V`.
#[derive(Debug)]
struct Branch {
    conv: Conv2d,
    bn: BatchNorm,
    lif: Neuron,
}

impl Branch {
    fn new(init: &mut Init, dim: usize) -> Result<Self> {
        Ok(Branch {
            conv: Conv2d::new(init, dim, dim, 1, Conv2dParams::default(), false)?,
            bn: BatchNorm::new_2d(init, dim)?,
            lif: transformer_lif(init, 1.0)?,
        })
    }

    /// `[T, N, C, H, W]` -> spikes as tokens `[T, N, C, H * W]`.
    fn run<'m>(&'m self, cx: &mut Cx<'m>, name: &str, x: Var) -> Forward<Var> {
        let y = cx.call1(&format!("{name}_conv"), &self.conv, x)?;
        let y = cx.call1(&format!("{name}_bn"), &self.bn, y)?;
        let y = cx.call1(&format!("{name}_lif"), &self.lif, y)?;
        Ok(flatten_from(cx, &y, 3)?)
    }
}

impl SpikeDrivenSelfAttention {
    /// Attention over `dim` channels in `heads` heads (`dim` divisible by `heads`).
    pub fn new(init: &mut Init, dim: usize, heads: usize) -> Result<Self> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(CheckpointError::InvalidInput(format!(
                "SpikeDrivenSelfAttention needs a dimension divisible by the number of heads, got dim {dim} and {heads} heads"
            )));
        }
        Ok(SpikeDrivenSelfAttention {
            heads,
            shortcut_lif: transformer_lif(init, 1.0)?,
            q: Branch::new(init, dim)?,
            k: Branch::new(init, dim)?,
            v: Branch::new(init, dim)?,
            attn_lif: transformer_lif(init, 0.5)?,
            proj_conv: Conv2d::new(init, dim, dim, 1, Conv2dParams::default(), true)?,
            proj_bn: BatchNorm::new_2d(init, dim)?,
        })
    }
}

impl Module for SpikeDrivenSelfAttention {
    fn type_name(&self) -> &'static str {
        "SpikeDrivenSelfAttention"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        let d = x.dims().to_vec();
        if d.len() != 5 {
            let message = format!("expected [T, N, C, H, W], got {}", x.shape());
            return Err(CheckpointError::in_module(self.type_name(), message).into());
        }
        let s = cx.call1("shortcut_lif", &self.shortcut_lif, x.clone())?;
        let q = self.q.run(cx, "q", s.clone())?;
        let k = self.k.run(cx, "k", s.clone())?;
        let v = self.v.run(cx, "v", s)?;
        // sum over the positions of K * V: [T, N, C, L] -> [T, N, C]; spikes, so exact sums.
        let kv = ops::mul(cx, &k, &v)?;
        drop((k, v));
        let kv = ops::sum_dim(cx, &kv, 3)?;
        let kv = cx.call1("attn_lif", &self.attn_lif, kv)?;
        let y = ops::scale_rows(cx, &q, &kv)?;
        drop((q, kv));
        let y = ops::reshape(cx, &y, d)?;
        let y = cx.call1("proj_conv", &self.proj_conv, y)?;
        let y = cx.call1("proj_bn", &self.proj_bn, y)?;
        Ok(vec![cx.final_op(|cx| ops::add(cx, &x, y))?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("shortcut_lif".into(), &self.shortcut_lif),
            ("q_conv".into(), &self.q.conv),
            ("q_bn".into(), &self.q.bn),
            ("q_lif".into(), &self.q.lif),
            ("k_conv".into(), &self.k.conv),
            ("k_bn".into(), &self.k.bn),
            ("k_lif".into(), &self.k.lif),
            ("v_conv".into(), &self.v.conv),
            ("v_bn".into(), &self.v.bn),
            ("v_lif".into(), &self.v.lif),
            ("attn_lif".into(), &self.attn_lif),
            ("proj_conv".into(), &self.proj_conv),
            ("proj_bn".into(), &self.proj_bn),
        ]
    }
}

impl PlannerHints for SpikeDrivenSelfAttention {
    fn config_key(&self) -> Option<String> {
        Some(format!("heads={}", self.heads))
    }

    /// Its own work only (the children cost theirs): `K * V`, its sum over the positions, the
    /// row scale of `Q` and the residual add, about one FLOP per element each, over the
    /// `[T, N, C, H, W]` output.
    fn cost(&self, _inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        Some(ModuleCost {
            flops: elems(outputs).saturating_mul(4),
            bytes: f32_bytes(outputs).saturating_mul(8),
        })
    }
}

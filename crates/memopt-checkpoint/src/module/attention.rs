//! Spiking self-attention as SpikingJelly 2.0 builds it (`layer/attention.py`,
//! `SpikingSelfAttention`), over tokens `[T, N, C, L]`.

use super::batch_norm::BatchNorm;
use super::conv::Conv1d;
use super::cost::{ModuleCost, elems, f32_bytes};
use super::fold::one_input;
use super::init::Init;
use super::neuron::Neuron;
use super::sequential::Sequential;
use super::{Module, PlannerHints};
use crate::autograd::Var;
use crate::context::Cx;
use crate::{CheckpointError, Forward, Result, ops};
use memopt_core::Shape;
use memopt_core::kernels::{NeuronConfig, Transposed};

/// The scale of the attention products (SpikingJelly's `self.scale`).
const SCALE: f32 = 0.125;

/// `SpikingSelfAttention(dim, num_heads)`: a 1x1 Conv1d + BatchNorm1d makes `Q, K, V` from
/// the tokens, a LIF fires them, each head computes `(V K^T) Q * 0.125` (`[C/heads, L]` per
/// head), a LIF with threshold 0.5 fires that, and a 1x1 Conv1d + BatchNorm1d + LIF projects
/// it. Children and parameter names are SpikingJelly's: `qkv_conv_bn` (`0` Conv1d, `1`
/// BatchNorm1d), `qkv_lif`, `attn_lif`, `proj_conv_bn`, `proj_lif`; every LIF has tau 2 and
/// `detach_reset`. With [`SpikingSelfAttention::residual`] it returns `x + attention(x)`.
#[derive(Debug)]
pub struct SpikingSelfAttention {
    heads: usize,
    residual: bool,
    qkv_conv_bn: Sequential,
    qkv_lif: Neuron,
    attn_lif: Neuron,
    proj_conv_bn: Sequential,
    proj_lif: Neuron,
}

/// The LIF of SpikingJelly's spiking transformers: tau 2, `detach_reset`, the threshold given.
pub fn transformer_lif(init: &mut Init, v_threshold: f32) -> Result<Neuron> {
    let cfg = NeuronConfig {
        v_threshold,
        detach_reset: true,
        ..NeuronConfig::lif(2.0)
    };
    Neuron::new(init, cfg, 2.0)
}

/// `SeqToANNContainer(Conv1d(in, out, 1, bias=False), BatchNorm1d(out))` over tokens.
pub fn conv1x1_bn(init: &mut Init, in_ch: usize, out_ch: usize) -> Result<Sequential> {
    Ok(Sequential::new()
        .push(Conv1d::new(
            init,
            in_ch,
            out_ch,
            1,
            ops::Conv1dParams::default(),
            false,
        )?)
        .push(BatchNorm::new_1d_tokens(init, out_ch)?))
}

impl SpikingSelfAttention {
    /// Attention over `dim` channels in `heads` heads (`dim` divisible by `heads`).
    pub fn new(init: &mut Init, dim: usize, heads: usize) -> Result<Self> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(CheckpointError::InvalidInput(format!(
                "SpikingSelfAttention needs a dimension divisible by the number of heads, got dim {dim} and {heads} heads"
            )));
        }
        let triple = dim.checked_mul(3).ok_or_else(|| {
            CheckpointError::InvalidInput(format!("SpikingSelfAttention dimension {dim} is too large"))
        })?;
        Ok(SpikingSelfAttention {
            heads,
            residual: false,
            qkv_conv_bn: conv1x1_bn(init, dim, triple)?,
            qkv_lif: transformer_lif(init, 1.0)?,
            attn_lif: transformer_lif(init, 0.5)?,
            proj_conv_bn: conv1x1_bn(init, dim, dim)?,
            proj_lif: transformer_lif(init, 1.0)?,
        })
    }

    /// The same attention returning `x + attention(x)`: a transformer block's skip connection,
    /// carried by the attention so that the block's children (attention, MLP) form a chain.
    pub fn residual(mut self) -> Self {
        self.residual = true;
        self
    }

    /// Heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// `(V K^T) Q * 0.125` per head of the spikes `qkv [T, N, 3C, L]`, as `[T, N, C, L]`.
    fn products<'m>(&self, cx: &mut Cx<'m>, qkv: &Var) -> Result<Var> {
        let d = qkv.dims().to_vec();
        let [t, n, c3, l] = d[..] else {
            return Err(self.error(format!("expected tokens [T, N, C, L], got {}", qkv.shape())));
        };
        let c = c3 / 3;
        let parts = ops::split(cx, qkv, 2, &[c, c, c])?;
        // Items [T, N * heads, C/heads, L]: time first, so that the GPU's batched products
        // make one call per time step (the same calls in time chunks).
        let per_head = vec![t, n * self.heads, c / self.heads, l];
        let [q, k, v] = [0, 1, 2].map(|i| ops::reshape(cx, &parts[i], per_head.clone()));
        let (q, k, v) = (q?, k?, v?);
        drop(parts);
        let vk = ops::batched_matmul(cx, &v, &k, Transposed { a: false, b: true })?;
        let y = ops::batched_matmul(cx, &vk, &q, Transposed::default())?;
        let y = ops::scale(cx, &y, SCALE)?;
        ops::reshape(cx, &y, vec![t, n, c, l])
    }

    fn error(&self, message: String) -> CheckpointError {
        CheckpointError::in_module(self.type_name(), message)
    }
}

impl Module for SpikingSelfAttention {
    fn type_name(&self) -> &'static str {
        "SpikingSelfAttention"
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        let x = one_input(inputs, self.type_name())?;
        if x.dims().len() != 4 {
            return Err(self
                .error(format!("expected tokens [T, N, C, L], got {}", x.shape()))
                .into());
        }
        let qkv = cx.call1("qkv_conv_bn", &self.qkv_conv_bn, x.clone())?;
        let qkv = cx.call1("qkv_lif", &self.qkv_lif, qkv)?;
        let y = self.products(cx, &qkv)?;
        drop(qkv);
        let y = cx.call1("attn_lif", &self.attn_lif, y)?;
        let y = cx.call1("proj_conv_bn", &self.proj_conv_bn, y)?;
        if !self.residual {
            return Ok(vec![cx.final_op(|cx| cx.call1("proj_lif", &self.proj_lif, y))?]);
        }
        let y = cx.call1("proj_lif", &self.proj_lif, y)?;
        Ok(vec![cx.final_op(|cx| ops::add(cx, &x, y))?])
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("qkv_conv_bn".into(), &self.qkv_conv_bn),
            ("qkv_lif".into(), &self.qkv_lif),
            ("attn_lif".into(), &self.attn_lif),
            ("proj_conv_bn".into(), &self.proj_conv_bn),
            ("proj_lif".into(), &self.proj_lif),
        ]
    }
}

impl PlannerHints for SpikingSelfAttention {
    fn config_key(&self) -> Option<String> {
        Some(format!("heads={} residual={}", self.heads, self.residual))
    }

    /// The products only (the children cost their own): per item of `[C/heads, L]` (`d =
    /// C/heads`), `V K^T` and `(V K^T) Q` are `d² · L` multiply-adds (`2 · d² · L` FLOPs)
    /// each; the split copies `Q, K, V`.
    fn cost(&self, inputs: &[Shape], outputs: &[Shape]) -> Option<ModuleCost> {
        let tokens = inputs.first()?;
        let [_, _, c, _] = tokens.dims() else { return None };
        let head_dim = (*c / self.heads.max(1)) as u64;
        let products = elems(outputs).saturating_mul(head_dim).saturating_mul(4);
        Some(ModuleCost {
            flops: products,
            bytes: f32_bytes(outputs).saturating_mul(6),
        })
    }
}

//! The CUDA C kernels of the training step (the CPU kernels of [`crate::kernels`], ported op
//! by op), one concept per file under `cuda/kernels/`, each prefixed with the shared prelude
//! (`prelude.cuh`: integer types, grid-stride loops, the CPU's f64 summation order), and their
//! typed launchers. Each kernel is named once, on the line that gives its parameters as its
//! `.cu` declares them: that line makes the source's kernel list, its
//! [`KernelTable`](super::KernelTable) and its launch function. CI compares every table with
//! the `.param` list of the kernel's `.entry` in the PTX NVRTC produces
//! (`tests/nvrtc_kernels.rs`), and the CUDA half of every op launches through these functions
//! only, so a launch with the wrong count or kind of arguments does not compile.
//!
//! Every source is compiled by NVRTC with `--fmad=false` and without fast math (see
//! [`super::compile_ptx`]), so products and sums round as the CPU's do; sums use the CPU's
//! blocks and order. Kernels take pointers already offset to their view's first element.

use super::{KernelSource, kernel_table};

/// Every table, one per source of [`kernel_sources`], in the same order.
pub fn kernel_tables() -> [&'static super::KernelTable; 9] {
    [
        &elementwise::TABLE,
        &reduce::TABLE,
        &loss::TABLE,
        &optim::TABLE,
        &batch_norm::TABLE,
        &pool::TABLE,
        &dropout::TABLE,
        &conv::TABLE,
        &neuron::TABLE,
    ]
}

kernel_table! {
    /// Elementwise ops and their backward functions, accumulation, copies, fills, broadcasts.
    pub static ELEMENTWISE = "elementwise.cu";
    /// Launchers of [`ELEMENTWISE`].
    pub mod elementwise {
        ew_add(a: Ptr, b: Ptr, out: Ptr, n: U64);
        ew_mul(a: Ptr, b: Ptr, out: Ptr, n: U64);
        ew_scale(x: Ptr, s: F32, out: Ptr, n: U64);
        ew_relu(x: Ptr, out: Ptr, n: U64);
        ew_sigmoid(x: Ptr, out: Ptr, n: U64);
        ew_relu_backward(g: Ptr, x: Ptr, out: Ptr, n: U64);
        ew_sigmoid_backward(g: Ptr, y: Ptr, out: Ptr, n: U64);
        ew_add_assign(acc: Ptr, x: Ptr, n: U64);
        ew_assign(dst: Ptr, src: Ptr, n: U64);
        ew_fill(x: Ptr, v: F32, n: U64);
        broadcast_dim(g: Ptr, out: Ptr, outer: U64, size: U64, inner: U64, scale: F32);
        broadcast_scalar(g: Ptr, out: Ptr, n: U64, scale: F32);
        copy_rows(src: Ptr, dst: Ptr, rows: U64, len: U64, src_pitch: U64, dst_pitch: U64);
        row_scale(x: Ptr, s: Ptr, out: Ptr, n: U64, inner: U64);
    }
}

kernel_table! {
    /// Sums and means over everything or one dimension, in the CPU's f64 blocks.
    pub static REDUCE = "reduce.cu";
    /// Launchers of [`REDUCE`].
    pub mod reduce {
        sum_blocks(x: Ptr, n: U64, block: U64, parts: Ptr, factor: F64, out: Ptr);
        reduce_parts(parts: Ptr, count: U64, factor: F64, divisor: F64, out: Ptr);
        sum_rows(x: Ptr, outer: U64, d: U64, factor: F64, out: Ptr);
        sum_columns(x: Ptr, outer: U64, d: U64, inner: U64, factor: F64, out: Ptr);
    }
}

kernel_table! {
    /// Cross-entropy and mean squared error, forward and backward.
    pub static LOSS = "loss.cu";
    /// Launchers of [`LOSS`].
    pub mod loss {
        ce_blocks(logits: Ptr, labels: Ptr, n: U64, c: U64, rows_per_block: U64, parts: Ptr, out: Ptr);
        ce_backward(g: Ptr, logits: Ptr, labels: Ptr, n: U64, c: U64, out: Ptr);
        mse_blocks(p: Ptr, t: Ptr, n: U64, block: U64, parts: Ptr, out: Ptr);
        mse_backward(g: Ptr, p: Ptr, t: Ptr, n: U64, out: Ptr);
    }
}

kernel_table! {
    /// SGD (plain, momentum, Nesterov) and Adam steps in place.
    pub static OPTIM = "optim.cu";
    /// Launchers of [`OPTIM`].
    pub mod optim {
        sgd_plain(p: Ptr, g: Ptr, n: U64, lr: F32, wd: F32);
        sgd_momentum(p: Ptr, g: Ptr, buf: Ptr, n: U64, lr: F32, momentum: F32, dampening: F32, wd: F32, nesterov: I32, first_step: I32);
        adam(p: Ptr, g: Ptr, m: Ptr, v: Ptr, n: U64, step_size: F32, bc2_sqrt: F32, beta2: F32, eps: F32, wd: F32, w1: F32, w2: F32);
    }
}

kernel_table! {
    /// BatchNorm: training statistics, running-statistics update, normalisation, evaluation
    /// mode, and the backward (weight, bias and input gradients).
    pub static BATCH_NORM = "batch_norm.cu";
    /// Launchers of [`BATCH_NORM`].
    pub mod batch_norm {
        bn_set_shift(x: Ptr, s: U64, c: U64, shift: Ptr);
        bn_stat_plane_sums(x: Ptr, planes: U64, s: U64, c: U64, shift: Ptr, part: Ptr);
        bn_fold_pairs(part: Ptr, b: U64, c: U64, descending: U64, from_zero: U64, first: Ptr, second: Ptr);
        bn_finish(shift: Ptr, s1: Ptr, s2: Ptr, c: U64, m: F64, eps: F32, save_mean: Ptr, save_invstd: Ptr, running_mean: Ptr, running_var: Ptr, momentum: F32);
        bn_normalize(x: Ptr, planes: U64, s: U64, c: U64, save_mean: Ptr, save_invstd: Ptr, weight: Ptr, bias: Ptr, y: Ptr);
        bn_eval(x: Ptr, planes: U64, s: U64, c: U64, running_mean: Ptr, running_var: Ptr, weight: Ptr, bias: Ptr, eps: F32, y: Ptr);
        bn_backward_plane_sums(g: Ptr, x: Ptr, planes: U64, s: U64, c: U64, save_mean: Ptr, part: Ptr);
        bn_param_grads(sum_g: Ptr, dot: Ptr, c: U64, save_invstd: Ptr, grad_weight: Ptr, grad_bias: Ptr);
        bn_backward_input(g: Ptr, x: Ptr, planes: U64, s: U64, c: U64, save_mean: Ptr, save_invstd: Ptr, weight: Ptr, sum_g: Ptr, dot: Ptr, m: F64, gx: Ptr);
    }
}

kernel_table! {
    /// Max, average and adaptive average 2-D pooling, forward and backward.
    pub static POOL = "pool.cu";
    /// Launchers of [`POOL`].
    pub mod pool {
        max_pool2d(x: Ptr, g: PoolGeom, y: Ptr, idx: Ptr);
        max_pool2d_backward(gy: Ptr, idx: Ptr, planes: U64, in_plane: U64, out_plane: U64, gx: Ptr);
        avg_pool2d(x: Ptr, g: PoolGeom, count_include_pad: I32, y: Ptr);
        avg_pool2d_backward(gy: Ptr, g: PoolGeom, count_include_pad: I32, gx: Ptr);
        adaptive_avg_pool2d(x: Ptr, planes: U64, h: U64, w: U64, oh: U64, ow: U64, y: Ptr);
        adaptive_avg_pool2d_backward(gy: Ptr, planes: U64, h: U64, w: U64, oh: U64, ow: U64, gx: Ptr);
    }
}

kernel_table! {
    /// Dropout masks from the CPU's Philox4x32-10 stream, and uniform fills.
    pub static DROPOUT = "dropout.cu";
    /// Launchers of [`DROPOUT`].
    pub mod dropout {
        dropout_mask(x: Ptr, n: U64, seed: U64, offset: U64, period: U64, p: F32, scale: F32, out: Ptr);
        fill_uniform(out: Ptr, n: U64, seed: U64, offset: U64, low: F32, high: F32);
    }
}

kernel_table! {
    /// im2col / col2im, staging transposes, bias fills and bias gradients around the GEMMs.
    pub static CONV = "conv.cu";
    /// Launchers of [`CONV`].
    pub mod conv {
        im2col(x: Ptr, g: ConvGeom, n: U64, col: Ptr);
        col2im(col: Ptr, g: ConvGeom, n: U64, gx: Ptr);
        stage_grad(grad: Ptr, n: U64, co: U64, pix: U64, stage: Ptr);
        unstage(stage: Ptr, n: U64, co: U64, pix: U64, bias: Ptr, out: Ptr);
        fill_bias_rows(dst: Ptr, rows: U64, len: U64, bias: Ptr, channels: U64);
        conv_bias_grad(grad: Ptr, b: U64, co: U64, pix: U64, gb: Ptr, accumulate: I32);
        column_sums(src: Ptr, rows: U64, cols: U64, out: Ptr, accumulate: I32);
    }
}

kernel_table! {
    /// Multi-step IF / LIF / PLIF forward and backward over all T, each surrogate.
    pub static NEURON = "neuron.cu";
    /// Launchers of [`NEURON`].
    pub mod neuron {
        plif_w_grad(partials: Ptr, chunks: U64, steps: U64, dk_dw: F32, gw: Ptr);
        neuron_forward_if_hard(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_forward_if_soft(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_forward_decay_hard(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_forward_decay_soft(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_forward_nodecay_hard(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_forward_nodecay_soft(x: Ptr, steps: U64, n: U64, v_init: Ptr, k: F32, vr: F32, vth: F32, spikes: Ptr, h_seq: Ptr, v_final: Ptr);
        neuron_backward_hard_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr);
        neuron_backward_soft_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr);
        neuron_backward_hard_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr);
        neuron_backward_soft_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr);
        plif_backward_hard_decay_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_soft_decay_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_hard_nodecay_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_soft_nodecay_sigmoid(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_hard_decay_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_soft_decay_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_hard_nodecay_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
        plif_backward_soft_nodecay_atan(grad_spikes: Ptr, grad_v_final: Ptr, h_seq: Ptr, v_init: Ptr, steps: U64, n: U64, c: NeuronConsts, grad_x: Ptr, grad_v_init: Ptr, partials: Ptr);
    }
}

/// Every kernel source of the training step (memopt-core's; memopt-compress has its own).
pub fn kernel_sources() -> [&'static KernelSource; 9] {
    [
        &ELEMENTWISE,
        &REDUCE,
        &LOSS,
        &OPTIM,
        &BATCH_NORM,
        &POOL,
        &DROPOUT,
        &CONV,
        &NEURON,
    ]
}

//! The CUDA C sources of the training step's kernels (the CPU kernels of [`crate::kernels`],
//! ported op by op), one concept per file under `cuda/kernels/`, each prefixed with the shared
//! prelude (`prelude.cuh`: integer types, grid-stride loops, the CPU's f64 summation order).
//!
//! Every source is compiled by NVRTC with `--fmad=false` and without fast math (see
//! [`super::compile_ptx`]), so products and sums round as the CPU's do; sums use the CPU's
//! blocks and order. Kernels take pointers already offset to their view's first element.

use super::KernelSource;

/// Declares a kernel source made of the prelude and one file of `cuda/kernels/`.
macro_rules! source {
    ($(#[$doc:meta])* $name:ident, $file:literal, [$($k:literal),* $(,)?]) => {
        $(#[$doc])*
        pub static $name: KernelSource = KernelSource {
            name: $file,
            source: concat!(include_str!("kernels/prelude.cuh"), include_str!(concat!("kernels/", $file))),
            kernels: &[$($k),*],
        };
    };
}

source!(
    /// Elementwise ops and their backward functions, accumulation, copies, fills, broadcasts.
    ELEMENTWISE,
    "elementwise.cu",
    [
        "ew_add",
        "ew_mul",
        "ew_scale",
        "ew_relu",
        "ew_sigmoid",
        "ew_relu_backward",
        "ew_sigmoid_backward",
        "ew_add_assign",
        "ew_assign",
        "ew_fill",
        "broadcast_dim",
        "broadcast_scalar",
    ]
);

source!(
    /// Sums and means over everything or one dimension, in the CPU's f64 blocks.
    REDUCE,
    "reduce.cu",
    ["sum_blocks", "reduce_parts", "sum_rows", "sum_columns"]
);

source!(
    /// Cross-entropy and mean squared error, forward and backward.
    LOSS,
    "loss.cu",
    ["ce_blocks", "ce_backward", "mse_blocks", "mse_backward"]
);

source!(
    /// SGD (plain, momentum, Nesterov) and Adam steps in place.
    OPTIM,
    "optim.cu",
    ["sgd_plain", "sgd_momentum", "adam"]
);

source!(
    /// BatchNorm: training statistics, running-statistics update, normalisation, evaluation
    /// mode, and the backward (weight, bias and input gradients).
    BATCH_NORM,
    "batch_norm.cu",
    [
        "bn_set_shift",
        "bn_stat_plane_sums",
        "bn_fold_pairs",
        "bn_finish",
        "bn_normalize",
        "bn_eval",
        "bn_backward_plane_sums",
        "bn_param_grads",
        "bn_backward_input",
    ]
);

source!(
    /// Max, average and adaptive average 2-D pooling, forward and backward.
    POOL,
    "pool.cu",
    [
        "max_pool2d",
        "max_pool2d_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool2d_backward",
    ]
);

source!(
    /// Dropout masks from the CPU's Philox4x32-10 stream, and uniform fills.
    DROPOUT,
    "dropout.cu",
    ["dropout_mask", "fill_uniform"]
);

source!(
    /// im2col / col2im, staging transposes, bias fills and bias gradients around the GEMMs.
    CONV,
    "conv.cu",
    [
        "im2col",
        "col2im",
        "stage_grad",
        "unstage",
        "fill_bias_rows",
        "conv_bias_grad",
        "column_sums",
    ]
);

source!(
    /// Multi-step IF / LIF / PLIF forward and backward over all T, each surrogate.
    NEURON,
    "neuron.cu",
    [
        "neuron_forward_if_hard",
        "neuron_forward_if_soft",
        "neuron_forward_decay_hard",
        "neuron_forward_decay_soft",
        "neuron_forward_nodecay_hard",
        "neuron_forward_nodecay_soft",
        "neuron_backward_hard_sigmoid",
        "neuron_backward_soft_sigmoid",
        "neuron_backward_hard_atan",
        "neuron_backward_soft_atan",
        "plif_backward_hard_decay_sigmoid",
        "plif_backward_soft_decay_sigmoid",
        "plif_backward_hard_nodecay_sigmoid",
        "plif_backward_soft_nodecay_sigmoid",
        "plif_backward_hard_decay_atan",
        "plif_backward_soft_decay_atan",
        "plif_backward_hard_nodecay_atan",
        "plif_backward_soft_nodecay_atan",
        "plif_w_grad",
    ]
);

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

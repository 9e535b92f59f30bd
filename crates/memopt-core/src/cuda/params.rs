//! Kernel parameters passed by value as C structs: the Rust mirror of each `struct` of
//! `cuda/kernels/*.cu`, field for field (`#[repr(C)]`, same order and types). CI checks each
//! one's size and alignment against the `.param .align A .b8 name[S]` NVRTC declares.

use cudarc::driver::DeviceRepr;

/// `PoolGeom` of `pool.cu`: planes (N*C), input and output sizes, window, stride, padding.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub struct PoolGeom {
    pub planes: u64,
    pub h: u64,
    pub w: u64,
    pub oh: u64,
    pub ow: u64,
    pub kh: i64,
    pub kw: i64,
    pub sh: i64,
    pub sw: i64,
    pub ph: i64,
    pub pw: i64,
}

/// `ConvGeom` of `conv.cu`: input channels and size, kernel, output size, stride, padding,
/// dilation.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub struct ConvGeom {
    pub c: u64,
    pub h: u64,
    pub w: u64,
    pub kh: u64,
    pub kw: u64,
    pub ho: u64,
    pub wo: u64,
    pub sh: i64,
    pub sw: i64,
    pub ph: i64,
    pub pw: i64,
    pub dh: i64,
    pub dw: i64,
}

/// `NeuronBackwardConsts` of `neuron.cu`: the constants of a neuron's backward through time.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub struct NeuronBackwardConsts {
    pub dh_dv: f32,
    pub dh_dx: f32,
    pub vth: f32,
    pub vr: f32,
    pub reset_grad: f32,
    pub k: f32,
    pub alpha: f32,
}

// SAFETY: plain #[repr(C)] structs of integers and floats, laid out as the CUDA structs they
// mirror (sizes and alignments checked against the PTX in CI).
unsafe impl DeviceRepr for PoolGeom {}
unsafe impl DeviceRepr for ConvGeom {}
unsafe impl DeviceRepr for NeuronBackwardConsts {}

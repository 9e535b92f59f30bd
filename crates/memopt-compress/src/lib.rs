//! memopt-compress: compress saved activations losslessly. Spikes (values in {0, 1}) shrink 32x
//! with [`BitSpike`] (1 bit per value, numpy `packbits(bitorder='little')` layout), 4x with
//! [`BoolU8`], or to their ones' indices with [`SparseCompressor`]; pooled spikes (averages of
//! spikes) shrink 4x with [`SpikeCounts`]; [`NullCompressor`] keeps the tensor, and the lossy
//! [`Half`] compressors are opt-in only.
//!
//! Every payload is tracked storage of kind [`memopt_core::MemoryKind::Packed`], and every
//! compressor allocates on the Meta device exactly what it allocates on the CPU, so planners can
//! account for compression without data ([`Compressor::packed_size`] gives the size from the
//! shape alone; only [`SparseCompressor`]'s depends on the data, and it says so). Binary
//! compressors check their input is binary unless it carries the spike flag. BitSpike and
//! Bool/U8 and spike counts also run on CUDA tensors through CUDA C kernels compiled at run time by NVRTC.
//!
//! ```
//! use memopt_compress::{CompressorKind, PackedSize};
//! use memopt_core::{Device, MemoryKind, Tensor};
//!
//! let x = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [3, 3],
//!                          Device::Cpu, MemoryKind::Activation).unwrap();
//! let bits = CompressorKind::BitSpike.build();
//! assert_eq!(bits.packed_size(x.shape(), x.dtype()), PackedSize::Exact(2));
//! let packed = bits.compress(&x).unwrap();
//! assert_eq!(packed.payload().to_vec::<u8>().unwrap(), vec![0b1000_1101, 0b0000_0001]);
//! let y = bits.decompress(&packed).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
//! // Non-binary data is an error, never silently corrupted.
//! let z = Tensor::full([4], 0.5, Device::Cpu, MemoryKind::Activation).unwrap();
//! assert!(bits.compress(&z).unwrap_err().to_string().contains("element 0"));
//! ```
#![warn(missing_docs)]

mod binary;
mod bitspike;
mod bool_u8;
mod compressor;
pub mod cpu;
pub mod cuda;
mod error;
mod half;
mod kind;
mod null;
mod packed;
mod sparse;
mod spike_counts;
mod spikes;

pub use bitspike::BitSpike;
pub use bool_u8::BoolU8;
pub use compressor::Compressor;
pub use error::{CompressError, Result};
pub use half::Half;
pub use kind::{CompressorKind, PackedSize};
pub use null::NullCompressor;
pub use packed::Packed;
pub use sparse::{SparseCompressor, sparse_index_bytes};
pub use spike_counts::SpikeCounts;
pub use spikes::PackedSpikes;

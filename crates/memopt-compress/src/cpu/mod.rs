//! CPU kernels on plain slices: bit packing, byte packing, spike counts, sparse indices and the
//! binary check.
//! They work on the raw bits of f32/f16/bf16 values (see [`SpikeElem`]), so one code path serves
//! every dtype and the checks are exact: a value is zero when its magnitude bits are zero (+0.0
//! or -0.0) and one when its bits equal those of 1.0.

mod bits;
mod bytes;
mod counts;
#[cfg(target_arch = "x86_64")]
mod simd;
mod sparse;
mod word;

pub use bits::{pack_bits, unpack_bits};
pub use bytes::{pack_bytes, unpack_bytes};
pub use counts::{count_of, mean_of, pack_counts, unpack_counts};
pub use sparse::{IndexBuf, chunk_count, count_ones, fill_indices, scatter_ones};
pub use word::{SpikeElem, SpikeWord, first_non_binary};

/// Values below which loops stay on the calling thread (threads do not pay below this).
pub(crate) const PAR_THRESHOLD: usize = 1 << 19;

/// Values per parallel task (a multiple of 64, so chunks split at whole bytes and words).
pub(crate) const CHUNK: usize = 1 << 16;

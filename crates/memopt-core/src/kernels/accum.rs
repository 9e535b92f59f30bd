//! Deterministic accumulation for reductions: f64 sums with a fixed association order, and
//! tracked f64 workspace for partial sums that are computed in parallel and combined in index
//! order. Results never depend on the number of threads.

use crate::backend::CudaBackend;
use crate::backend::{Init, Target};
use crate::cuda::{CudaPtr, LaunchConfig, blocks, grid_for, launchers};
use crate::{Device, KernelBuffer, Result};
use rayon::prelude::*;
use std::ops::Range;

/// Elements summed serially per block by the CPU backend (its [`Target::sum_block`]); also the
/// CPU's grain for parallel fills.
pub(crate) const BLOCK: usize = Target::Cpu.sum_block();

/// Tracked workspace of f64 values. The tracker's dtypes have no f64, so the buffer is an i64
/// buffer of the same size (8 bytes per value) viewed as f64.
pub(crate) struct F64Workspace(KernelBuffer<i64>);

impl F64Workspace {
    /// `len` f64 values on `device`, recorded as workspace, starting as `init` says.
    pub(crate) fn new(op: &'static str, device: Device, len: usize, init: Init) -> Result<Self> {
        Ok(F64Workspace(KernelBuffer::workspace(op, device, len, init)?))
    }

    /// The values in host memory, for the CPU half of an op.
    pub(crate) fn host_mut(&mut self) -> Result<&mut [f64]> {
        // i64 and f64 have the same size and alignment and every bit pattern is valid for both,
        // so the cast cannot fail.
        Ok(bytemuck::cast_slice_mut::<i64, f64>(self.0.host_mut()?))
    }

    /// The device address of the first value, for the CUDA half of an op.
    pub(crate) fn cuda_ptr(&mut self) -> Result<CudaPtr> {
        self.0.cuda_ptr()
    }
}

/// Combines eight lane sums in a fixed tree order.
#[inline]
fn combine(acc: [f64; 8]) -> f64 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `sum f(x)` over a slice in f64, with eight independent lanes (so the loop vectorises) combined
/// in a fixed order: the result is a pure function of the slice.
#[inline]
pub(crate) fn sum_map_f64(xs: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&x| f(x)).sum();
    for c in chunks {
        for k in 0..8 {
            acc[k] += f(c[k]);
        }
    }
    combine(acc) + tail
}

/// `sum x` over a slice in f64 (see [`sum_map_f64`]).
#[inline]
pub(crate) fn sum_f64(xs: &[f32]) -> f64 {
    sum_map_f64(xs, |x| x as f64)
}

/// `sum f(a, b)` over two slices of equal length in f64 (see [`sum_map_f64`]).
#[inline]
pub(crate) fn sum_zip_f64(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f64) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f64; 8];
    let split = n - n % 8;
    for (ca, cb) in a[..split].chunks_exact(8).zip(b[..split].chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += f(ca[k], cb[k]);
        }
    }
    let tail: f64 = a[split..].iter().zip(&b[split..]).map(|(&x, &y)| f(x, y)).sum();
    combine(acc) + tail
}

/// A sum over `0..n` split into fixed blocks of `block` indices. With more than one block, the
/// block sums are computed in parallel into tracked f64 workspace and added in block order;
/// the workspace size depends only on `n` and `block`, so Meta and CPU allocate alike.
pub(crate) struct BlockedSum {
    n: usize,
    block: usize,
    ws: Option<F64Workspace>,
}

impl BlockedSum {
    /// Prepares a sum over `n` indices in blocks of `block` (at least 1); allocates the
    /// workspace when there is more than one block.
    pub(crate) fn new(op: &'static str, device: Device, n: usize, block: usize) -> Result<Self> {
        let block = block.max(1);
        let blocks = n.div_ceil(block);
        let ws = if blocks > 1 {
            // Every block writes its own partial before the partials are added.
            Some(F64Workspace::new(op, device, blocks, Init::Overwritten)?)
        } else {
            None
        };
        Ok(BlockedSum { n, block, ws })
    }

    /// Indices per block.
    pub(crate) fn block(&self) -> usize {
        self.block
    }

    /// The device address of the f64 partials (one per block), or `None` when there is a
    /// single block and so no workspace: the CUDA half of an op then writes its result directly.
    pub(crate) fn cuda_parts(&mut self) -> Result<Option<CudaPtr>> {
        self.ws.as_mut().map(F64Workspace::cuda_ptr).transpose()
    }

    /// The CUDA half of the sum: `per_block(parts, grid)` launches the kernel that writes one
    /// f64 part per block (`parts` is null with one block: the kernel then writes `out` itself),
    /// on a grid of `lanes_per_block` threads per block (8 for the group-of-8 kernels, 1 for
    /// one thread per block); with several blocks `reduce_parts` then adds the parts in block
    /// order and writes `out[0] = (sum * factor / divisor) as f32`. Grids depend on `n` only.
    pub(crate) fn run_cuda(
        &mut self,
        gpu: CudaBackend,
        lanes_per_block: u64,
        per_block: impl FnOnce(CudaPtr, LaunchConfig) -> Result<()>,
        (factor, divisor): (f64, f64),
        out: CudaPtr,
    ) -> Result<()> {
        let count = (self.n as u64).div_ceil(self.block as u64);
        match self.cuda_parts()? {
            Some(parts) => {
                per_block(parts, grid_for(count * lanes_per_block))?;
                launchers::reduce::reduce_parts(gpu, blocks(1), parts, count, factor, divisor, out)
            }
            None => per_block(CudaPtr(0), grid_for(lanes_per_block)),
        }
    }

    /// `sum over blocks of block_sum(range)`, blocks added in order. The CPU half of an op.
    pub(crate) fn run(&mut self, block_sum: impl Fn(Range<usize>) -> f64 + Sync) -> Result<f64> {
        let (n, block) = (self.n, self.block);
        Ok(match self.ws.as_mut().map(F64Workspace::host_mut).transpose()? {
            Some(parts) => {
                parts.par_iter_mut().enumerate().for_each(|(b, p)| {
                    *p = block_sum(b * block..((b + 1) * block).min(n));
                });
                parts.iter().sum()
            }
            None => block_sum(0..n),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_match_f64_references_and_blocks_combine_in_order() {
        let xs: Vec<f32> = (0..1003).map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5).collect();
        let want: f64 = xs.iter().map(|&x| x as f64).sum();
        assert!((sum_f64(&xs) - want).abs() < 1e-12);
        let sq: f64 = xs.iter().map(|&x| (x as f64).powi(2)).sum();
        assert!((sum_map_f64(&xs, |x| (x as f64).powi(2)) - sq).abs() < 1e-12);
        let dot: f64 = xs.iter().zip(&xs).map(|(&a, &b)| a as f64 * b as f64).sum();
        assert!((sum_zip_f64(&xs, &xs, |a, b| a as f64 * b as f64) - dot).abs() < 1e-12);

        let mut s = BlockedSum::new("test", Device::Cpu, xs.len(), 100).unwrap();
        let got = s.run(|r| sum_f64(&xs[r])).unwrap();
        assert!((got - want).abs() < 1e-12);
        let mut one = BlockedSum::new("test", Device::Cpu, 5, 100).unwrap();
        assert!(one.ws.is_none());
        assert_eq!(one.run(|r| r.len() as f64).unwrap(), 5.0);
    }

    #[test]
    fn workspace_is_tracked_as_eight_bytes_per_value() {
        let tracker = crate::MemoryTracker::new(Device::META);
        let _g = crate::MemoryTracker::install(tracker.clone());
        let s = BlockedSum::new("test", Device::META, 10_001, 1000).unwrap();
        assert_eq!(tracker.current_bytes(), 11 * 8);
        drop(s);
        assert_eq!(tracker.current_bytes(), 0);
    }
}

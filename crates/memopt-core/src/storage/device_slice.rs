//! A typed view of GPU memory that knows who owns it: a block of a CUDA tracker's caching
//! allocator (given back to the pool when dropped) or a cudarc allocation of its own.

use crate::memory::DeviceBlock;
use crate::{CoreError, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

#[derive(Debug)]
enum Owner {
    /// Memory of the pool: `None` for an empty slice (no block, null address).
    Pool(#[allow(dead_code)] Option<DeviceBlock>),
    /// Memory cudarc allocated for this slice alone, freed by cudarc.
    Own,
}

/// `len` elements of `T` in GPU memory, dereferencing to cudarc's [`CudaSlice`] (so kernels
/// launch with it as with any slice). Tensors' memory is a block of the GPU tracker's caching
/// allocator: dropping the slice gives the block back to the pool, never to the driver (the
/// pool's segments are freed by `empty_cache`). A slice built from a [`CudaSlice`] owns that
/// allocation and frees it as cudarc does.
#[derive(Debug)]
pub struct DeviceSlice<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    owner: Owner,
}

impl<T> DeviceSlice<T> {
    /// `len` elements over `block` (`None` only for `len == 0`), on `stream`, the GPU's one
    /// stream. The bytes are as the block holds them (zero when fresh, else earlier values).
    pub(crate) fn in_block(stream: &Arc<CudaStream>, block: Option<DeviceBlock>, len: usize) -> Result<Self> {
        let need = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| CoreError::invalid("DeviceSlice", "size overflows"))? as u64;
        let (ptr, room) = block.as_ref().map_or((0, 0), |b| (b.device_ptr(), b.bytes()));
        if need > room {
            return Err(CoreError::invalid(
                "DeviceSlice",
                format!("a block of {room} bytes cannot hold {len} elements ({need} bytes)"),
            ));
        }
        // SAFETY: `ptr` addresses at least `len * size_of::<T>()` bytes (checked above) that
        // the block reserves for this slice alone until it is dropped; the slice never frees
        // them (it is leaked in `drop`). Every `T` memopt stores is plain bits, so any content
        // of the block is a valid value. The context does not track events (one stream per
        // GPU), so no event is created here.
        let slice = unsafe { stream.upgrade_device_ptr::<T>(ptr, len) };
        Ok(DeviceSlice {
            slice: ManuallyDrop::new(slice),
            owner: Owner::Pool(block),
        })
    }

    /// Whether the memory is a block of the caching allocator (else a cudarc allocation of
    /// its own, outside the pool).
    pub fn is_pooled(&self) -> bool {
        matches!(self.owner, Owner::Pool(_))
    }
}

impl<T> From<CudaSlice<T>> for DeviceSlice<T> {
    /// Wraps a cudarc allocation; it stays outside the caching allocator and is freed when
    /// the slice drops.
    fn from(slice: CudaSlice<T>) -> Self {
        DeviceSlice {
            slice: ManuallyDrop::new(slice),
            owner: Owner::Own,
        }
    }
}

impl<T> Deref for DeviceSlice<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for DeviceSlice<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for DeviceSlice<T> {
    fn drop(&mut self) {
        // SAFETY: `slice` is taken exactly once, here; it is not used afterwards.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        match self.owner {
            // The pool owns the memory: forget the address (the block goes back to the pool
            // when `owner` drops, right after this).
            Owner::Pool(_) => {
                slice.leak();
            }
            Owner::Own => drop(slice),
        }
    }
}

//! A typed view of GPU memory in a block of a CUDA tracker's caching allocator, given back to
//! the pool (never to the driver) when dropped.

use crate::memory::DeviceBlock;
use crate::{CoreError, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// `len` elements of `T` in GPU memory, dereferencing to cudarc's [`CudaSlice`] (so kernels
/// launch with it as with any slice). The memory is a block of the GPU tracker's caching
/// allocator: dropping the slice gives the block back to the pool, never to the driver (the
/// pool's segments are freed by `empty_cache`).
#[derive(Debug)]
pub struct DeviceSlice<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    // Owns the block (`None` for an empty slice: no block, null address); dropped after the
    // slice has forgotten the address.
    _block: Option<DeviceBlock>,
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
            _block: block,
        })
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
        // The pool owns the memory: forget the address (the block goes back to the pool when
        // `_block` drops, right after this).
        slice.leak();
    }
}

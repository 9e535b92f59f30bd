//! A typed host buffer: either a plain `Vec` or a block of the CPU caching allocator.

use crate::memory::HostBlock;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// (Sealed: public in a private module.) Element types for which every bit pattern of their size is a valid value, so a zero-filled
/// or copied block is initialised memory of that type.
pub trait PlainBits: Copy {}
impl PlainBits for f32 {}
impl PlainBits for half::f16 {}
impl PlainBits for half::bf16 {}
impl PlainBits for u8 {}
impl PlainBits for u32 {}
impl PlainBits for i64 {}

enum Repr<T> {
    Heap(Vec<T>),
    Pooled {
        ptr: NonNull<T>,
        len: usize,
        _block: HostBlock,
    },
}

/// `len` elements of `T` in host memory. Buffers of tensors live in blocks of the CPU tracker's
/// caching allocator (the block returns to the cache when the buffer drops); buffers built from
/// a `Vec` (clones, conversions) keep it. Dereferences to a slice either way.
pub struct HostBuf<T> {
    repr: Repr<T>,
}

// SAFETY: a pooled buffer owns its block exclusively (see `HostBlock`), like a `Vec` owns its
// allocation; sending or sharing it is as safe as for `Vec<T>`.
unsafe impl<T: Send> Send for HostBuf<T> {}
// SAFETY: as above; `&HostBuf` only gives `&[T]`.
unsafe impl<T: Sync> Sync for HostBuf<T> {}

impl<T: PlainBits> HostBuf<T> {
    /// `len` zeros in `block`, filled only when the block is not known to be zero already.
    /// The block must hold at least `len` elements.
    pub(crate) fn zeroed_in(block: HostBlock, len: usize) -> Self {
        let bytes = len * size_of::<T>();
        assert!(bytes as u64 <= block.bytes(), "block too small for the buffer");
        if !block.is_zeroed() {
            // SAFETY: the block is exclusively ours and holds at least `bytes` bytes.
            unsafe { std::ptr::write_bytes(block.ptr().as_ptr(), 0, bytes) };
        }
        Self::as_is_in(block, len)
    }

    /// `len` elements over `block`'s bytes as they are; the block must hold at least `len`
    /// elements. Every byte of a host segment is initialised: mappings start zeroed and only
    /// values of `PlainBits` types are ever written into them, any bit pattern of which is a
    /// valid `T`. Blocks are 512-byte aligned, more than any `T` needs.
    pub(crate) fn as_is_in(block: HostBlock, len: usize) -> Self {
        let bytes = len * size_of::<T>();
        assert!(bytes as u64 <= block.bytes(), "block too small for the buffer");
        let ptr = block.ptr().cast::<T>();
        HostBuf {
            repr: Repr::Pooled {
                ptr,
                len,
                _block: block,
            },
        }
    }

    /// A copy of `data` in `block`, which must hold at least `data.len()` elements.
    pub(crate) fn copied_in(block: HostBlock, data: &[T]) -> Self {
        let bytes = std::mem::size_of_val(data);
        assert!(bytes as u64 <= block.bytes(), "block too small for the buffer");
        let ptr = block.ptr().cast::<T>();
        // SAFETY: the block is exclusively ours, holds `data.len()` elements and cannot overlap
        // `data`, which lives in another buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), data.len()) };
        HostBuf {
            repr: Repr::Pooled {
                ptr,
                len: data.len(),
                _block: block,
            },
        }
    }
}

impl<T: Clone> HostBuf<T> {
    /// The elements as a `Vec`: the buffer itself when it is one, else a copy.
    pub fn into_vec(self) -> Vec<T> {
        match self.repr {
            Repr::Heap(v) => v,
            Repr::Pooled { .. } => self.to_vec(),
        }
    }
}

impl<T> From<Vec<T>> for HostBuf<T> {
    fn from(v: Vec<T>) -> Self {
        HostBuf { repr: Repr::Heap(v) }
    }
}

impl<T> Deref for HostBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Heap(v) => v,
            // SAFETY: `ptr` points to `len` initialised elements owned by this buffer.
            Repr::Pooled { ptr, len, .. } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl<T> DerefMut for HostBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.repr {
            Repr::Heap(v) => v,
            // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
            Repr::Pooled { ptr, len, .. } => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), *len) },
        }
    }
}

impl<T: Clone> Clone for HostBuf<T> {
    fn clone(&self) -> Self {
        HostBuf::from(self.to_vec())
    }
}

impl<T: PartialEq> PartialEq for HostBuf<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: fmt::Debug> fmt::Debug for HostBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

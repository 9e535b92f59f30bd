//! The tensor: a shape, a dtype and a view into shared tracked storage.

mod access;
mod convert;
mod create;
mod pending;

pub use access::{DataRead, DataWrite, KernelBuffer};
pub use create::host_vec_with_capacity;
pub use pending::PendingTensor;

/// What is known about a tensor's values, from the op that made it (never from its data, so
/// every device, Meta included, knows the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KnownValues {
    /// Nothing.
    #[default]
    Any,
    /// Every value is 0 or 1 (the spike flag).
    Spikes,
    /// Every value is `c / window` for a whole count `c` in `0..=window` of spikes, computed as
    /// `((c as f64) / (window as f64)) as f32`: an average pooling of f32 spikes over windows of
    /// `window` elements, none padded (`1 <= window <= 255`).
    PooledSpikes {
        /// Spikes per value.
        window: u16,
    },
}

impl KnownValues {
    /// From its two parts as descriptions record them: the spike flag, and the window of
    /// pooled spikes (ignored when the flag is set).
    pub fn from_parts(is_spike: bool, pooled_spike_window: Option<u16>) -> KnownValues {
        match (is_spike, pooled_spike_window) {
            (true, _) => KnownValues::Spikes,
            (false, Some(window)) => KnownValues::PooledSpikes { window },
            (false, None) => KnownValues::Any,
        }
    }

    /// The spikes each value averages, for [`KnownValues::PooledSpikes`].
    pub fn pooled_spike_window(self) -> Option<u16> {
        match self {
            KnownValues::PooledSpikes { window } => Some(window),
            _ => None,
        }
    }
}

use crate::memory::MemoryKind;
use crate::storage::Storage;
use crate::{CoreError, DType, Device, Result, Shape};
use std::sync::Arc;

/// A contiguous row-major tensor. Clones are cheap (one reference count) and share storage;
/// reshapes and time slices ([`Tensor::narrow0`]) are views into the same storage.
///
/// Its [`KnownValues`] record what is known about its values: spikes (every value 0 or 1;
/// spiking neurons set it and ops that keep it true — reshape, max pooling, multiplying
/// spikes — propagate it), or pooled spikes (every value the mean of a fixed number of spikes,
/// as average pooling of spikes makes). Exact compressors rely on them.
///
/// A tensor made by [`Tensor::unmaterialised`] has a shape, a dtype and a device but no
/// elements: it stands for a value nobody reads (a recomputed segment's output, of which only
/// the gradient is needed), and every read or write of it is an error on every device.
#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

struct TensorInner {
    storage: Arc<Storage>,
    shape: Shape,
    /// First element of this view within the storage.
    offset: usize,
    values: KnownValues,
    /// False for [`Tensor::unmaterialised`] stand-ins (and their views): no elements behind them.
    materialised: bool,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({}, {}, {}{})",
            self.shape(),
            self.dtype(),
            self.device(),
            match self.known_values() {
                KnownValues::Any => String::new(),
                KnownValues::Spikes => ", spike".into(),
                KnownValues::PooledSpikes { window } => format!(", mean of {window} spikes"),
            }
        )
    }
}

impl Tensor {
    /// A tensor viewing all of `storage` with `shape`.
    pub fn from_storage(storage: Arc<Storage>, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.checked_elem_count() != Some(storage.len()) {
            return Err(CoreError::shape(
                "Tensor::from_storage",
                format!("a shape with {} elements", storage.len()),
                &shape,
            ));
        }
        Ok(Tensor(Arc::new(TensorInner {
            storage,
            shape,
            offset: 0,
            values: KnownValues::Any,
            materialised: true,
        })))
    }

    fn view(&self, shape: Shape, offset: usize, values: KnownValues) -> Tensor {
        Tensor(Arc::new(TensorInner {
            storage: self.0.storage.clone(),
            shape,
            offset,
            values,
            materialised: self.0.materialised,
        }))
    }

    /// A stand-in of `shape`, `dtype` and `device` with no elements: the output of an op that
    /// was asked not to materialise it because nobody reads it (a recomputed segment's output,
    /// whose gradient is all backward needs). It keeps shape, spike flag and views (reshape,
    /// [`Tensor::narrow0`]) like any tensor; reading or writing it ([`Tensor::read`],
    /// [`Tensor::write`], host copies) is [`CoreError::Unmaterialised`] on every device, Meta
    /// included. Its storage holds 0 elements: its allocation is recorded as 0 bytes, on Meta as
    /// on the device it stands in for.
    pub fn unmaterialised(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        let shape = shape.into();
        shape.elem_count_for("Tensor::unmaterialised")?;
        let storage = Storage::for_overwrite(dtype, 0, device, MemoryKind::Activation)?;
        Ok(Tensor(Arc::new(TensorInner {
            storage: Arc::new(storage),
            shape,
            offset: 0,
            values: KnownValues::Any,
            materialised: false,
        })))
    }

    /// False for an [`Tensor::unmaterialised`] stand-in (or a view of one): it has no elements.
    pub fn is_materialised(&self) -> bool {
        self.0.materialised
    }

    /// [`CoreError::Unmaterialised`] for a stand-in, which op `op` cannot read or write.
    pub fn expect_materialised(&self, op: &'static str) -> Result<()> {
        if self.0.materialised {
            return Ok(());
        }
        Err(CoreError::Unmaterialised {
            op,
            shape: self.shape().clone(),
        })
    }

    /// Shape.
    pub fn shape(&self) -> &Shape {
        &self.0.shape
    }

    /// Dimensions.
    pub fn dims(&self) -> &[usize] {
        self.0.shape.dims()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.shape.rank()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.0.shape.elem_count()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype()
    }

    /// Device.
    pub fn device(&self) -> Device {
        self.0.storage.device()
    }

    /// Whether every value is known to be 0 or 1.
    pub fn is_spike(&self) -> bool {
        self.0.values == KnownValues::Spikes
    }

    /// The same data with the spike flag set to `is_spike` (`false`: nothing is known, also
    /// not [`KnownValues::PooledSpikes`]). Setting it on data that is not binary is the caller's
    /// promise; compressors trust it.
    pub fn with_spike_flag(&self, is_spike: bool) -> Tensor {
        let values = match is_spike {
            true => KnownValues::Spikes,
            false => KnownValues::Any,
        };
        self.view(self.0.shape.clone(), self.0.offset, values)
    }

    /// What is known about the values.
    pub fn known_values(&self) -> KnownValues {
        self.0.values
    }

    /// The same data with `values` known about it. Claiming more than is true is the caller's
    /// promise; compressors trust it.
    pub fn with_known_values(&self, values: KnownValues) -> Tensor {
        self.view(self.0.shape.clone(), self.0.offset, values)
    }

    /// The number of spikes each value is the mean of, when the values are known to be
    /// [`KnownValues::PooledSpikes`].
    pub fn pooled_spike_window(&self) -> Option<u16> {
        self.0.values.pooled_spike_window()
    }

    /// The storage behind the view.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.0.storage
    }

    /// Offset of the first element of this view in its storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.0.offset
    }

    /// Bytes of this view's elements (not of the whole storage).
    pub fn view_bytes(&self) -> u64 {
        (self.elem_count() * self.dtype().size_in_bytes()) as u64
    }

    /// Whether two tensors share storage.
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// Whether this handle is the only reference to its view and to its storage, so that an
    /// in-place update cannot be observed through another handle.
    pub fn is_exclusive(&self) -> bool {
        Arc::strong_count(&self.0) == 1 && Arc::strong_count(&self.0.storage) == 1
    }

    /// Whether two handles are the same tensor view (same storage, offset and shape).
    pub fn same_view(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.same_storage(other) && self.0.offset == other.0.offset && self.0.shape == other.0.shape)
    }

    /// Kind of the storage as recorded by the tracker.
    pub fn kind(&self) -> MemoryKind {
        self.0.storage.allocation().kind()
    }

    /// Re-tags the storage (e.g. activation -> saved for backward); the tracker records the move
    /// of its bytes between kinds.
    pub fn set_kind(&self, kind: MemoryKind) {
        self.0.storage.allocation().retag(kind);
    }

    /// A view with another shape of the same element count. Keeps the spike flag.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.checked_elem_count() != Some(self.elem_count()) {
            return Err(CoreError::shape(
                "reshape",
                format!(
                    "a shape with {} elements (from {})",
                    self.elem_count(),
                    self.shape()
                ),
                &shape,
            ));
        }
        Ok(self.view(shape, self.0.offset, self.0.values))
    }

    /// A view of `len` entries of dimension 0 starting at `start` (a time slice of `[T, ...]`).
    pub fn narrow0(&self, start: usize, len: usize) -> Result<Tensor> {
        let Some(&d0) = self.dims().first() else {
            return Err(CoreError::invalid("narrow0", "cannot slice a scalar"));
        };
        if start.checked_add(len).is_none_or(|end| end > d0) {
            return Err(CoreError::invalid(
                "narrow0",
                format!(
                    "range {start}..{} is outside dimension 0 of size {d0}",
                    start.saturating_add(len)
                ),
            ));
        }
        let inner = self.shape().inner_count();
        Ok(self.view(
            self.shape().with_dim0(len),
            self.0.offset + start * inner,
            self.0.values,
        ))
    }

    /// Checks that the tensor has dtype `dtype`.
    pub fn expect_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if self.dtype() == dtype {
            return Ok(());
        }
        let hint = if dtype == DType::F32 && self.dtype().is_float() {
            "; kernels compute in f32: convert with to_dtype(F32) first".to_string()
        } else {
            String::new()
        };
        Err(CoreError::DTypeMismatch {
            op,
            expected: dtype,
            got: self.dtype(),
            hint,
        })
    }

    /// Checks that `other` is on the same device.
    pub fn expect_same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() == other.device() {
            Ok(())
        } else {
            Err(CoreError::DeviceMismatch {
                op,
                a: self.device(),
                b: other.device(),
            })
        }
    }
}

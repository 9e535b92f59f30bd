//! A value flowing through a forward pass, with its identity on the tape.

use crate::Result;
use memopt_compress::{Packed, PackedSpikes};
use memopt_core::kernels::Operand;
use memopt_core::{DType, Device, KnownValues, Shape, Tensor};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifier of a value recorded on a tape, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub(crate) u64);

static NEXT_VAR: AtomicU64 = AtomicU64::new(0);

impl VarId {
    pub(crate) fn fresh() -> VarId {
        VarId(NEXT_VAR.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a value holds: a tensor, f32 spikes kept bit-packed, or pooled spikes kept as spike
/// counts.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// A tensor.
    Dense(Tensor),
    /// Bit-packed f32 spikes.
    Packed(PackedSpikes),
    /// Pooled spikes as spike counts ([`memopt_compress::CompressorKind::SpikeCounts`]).
    Counts(Packed),
}

/// A value in the forward pass: a tensor and, when gradients flow to it, its id on the tape.
/// Constants (inputs without gradient, anything computed while not recording) have no id.
///
/// A value may hold f32 spikes bit-packed ([`PackedSpikes`]): a checkpointed segment's restored
/// input. Convolution and linear layers read it one time step at a time (and keep it packed for
/// their backward), reshapes keep it packed, and every other op unpacks it on demand through
/// [`Var::tensor`], for as long as that op holds the result. Pooled spikes restored from spike
/// counts stay counts likewise: every op reads them decompressed whole, and convolution and
/// linear layers keep the counts (not the decompressed tensor) for their backward.
#[derive(Debug, Clone)]
pub struct Var {
    value: Value,
    id: Option<VarId>,
}

impl Var {
    /// A value that needs no gradient.
    pub fn constant(tensor: Tensor) -> Var {
        Var {
            value: Value::Dense(tensor),
            id: None,
        }
    }

    pub(crate) fn tracked(tensor: Tensor, id: VarId) -> Var {
        Var {
            value: Value::Dense(tensor),
            id: Some(id),
        }
    }

    /// Pooled spikes kept as spike counts (`counts` made by [`memopt_compress::CompressorKind::SpikeCounts`]),
    /// with its tape id when gradients flow to it.
    pub(crate) fn counts(counts: Packed, id: Option<VarId>) -> Var {
        Var {
            value: Value::Counts(counts),
            id,
        }
    }

    /// A bit-packed spike value, with its tape id when gradients flow to it.
    pub(crate) fn packed(spikes: PackedSpikes, id: Option<VarId>) -> Var {
        Var {
            value: Value::Packed(spikes),
            id,
        }
    }

    /// The value as a tensor: borrowed when it is one, unpacked into a new tensor (kind
    /// activation, spike flag set) when it holds packed spikes, decompressed (pooled spikes
    /// known) when it holds spike counts.
    pub fn tensor(&self) -> Result<Cow<'_, Tensor>> {
        Ok(match &self.value {
            Value::Dense(t) => Cow::Borrowed(t),
            Value::Packed(p) => Cow::Owned(p.unpack()?),
            Value::Counts(p) => Cow::Owned(p.decompress()?),
        })
    }

    /// The value as a tensor, consuming it (unpacked when it holds packed spikes).
    pub fn into_tensor(self) -> Result<Tensor> {
        Ok(match self.value {
            Value::Dense(t) => t,
            Value::Packed(p) => p.unpack()?,
            Value::Counts(p) => p.decompress()?,
        })
    }

    /// What the value holds.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    /// The same value, with the same tape id, holding a tensor: packed spikes are unpacked into
    /// a new tensor (kind activation), a tensor is shared. For a module that reads its input
    /// with several ops other than convolution and linear layers: one unpack instead of one per
    /// op.
    pub fn unpacked(&self) -> Result<Var> {
        Ok(Var {
            value: Value::Dense(self.tensor()?.into_owned()),
            id: self.id,
        })
    }

    /// The tensor, when the value holds one (not packed spikes).
    pub fn as_dense(&self) -> Option<&Tensor> {
        match &self.value {
            Value::Dense(t) => Some(t),
            Value::Packed(_) | Value::Counts(_) => None,
        }
    }

    /// The packed spikes, when the value holds them.
    pub fn as_packed(&self) -> Option<&PackedSpikes> {
        match &self.value {
            Value::Packed(p) => Some(p),
            Value::Dense(_) | Value::Counts(_) => None,
        }
    }

    /// The spike counts, when the value holds them (a checkpointed segment's restored input).
    pub(crate) fn as_counts(&self) -> Option<&Packed> {
        match &self.value {
            Value::Counts(p) => Some(p),
            Value::Dense(_) | Value::Packed(_) => None,
        }
    }

    /// The same values with another shape, as a constant (a view: packed spikes stay packed).
    pub(crate) fn reshaped(&self, shape: Shape) -> Result<Var> {
        let value = match &self.value {
            Value::Dense(t) => Value::Dense(t.reshape(shape)?),
            Value::Packed(p) => Value::Packed(p.reshape(shape)?),
            Value::Counts(p) => Value::Counts(p.reshape(shape)?),
        };
        Ok(Var { value, id: None })
    }

    /// The value as a constant (no tape id), consuming it: no other handle to its tensor is
    /// made, so the value is freed where the constant is.
    pub(crate) fn into_constant(self) -> Var {
        Var { id: None, ..self }
    }

    /// Entries `start .. start + len` of dimension 0 (a time slice of `[T, ...]`) as a constant
    /// view: packed spikes stay packed.
    pub(crate) fn narrow0(&self, start: usize, len: usize) -> Result<Var> {
        let value = match &self.value {
            Value::Dense(t) => Value::Dense(t.narrow0(start, len)?),
            Value::Packed(p) => Value::Packed(p.narrow0(start, len)?),
            Value::Counts(p) => Value::Dense(p.decompress()?.narrow0(start, len)?),
        };
        Ok(Var { value, id: None })
    }

    /// The same value with tape id `id`.
    pub(crate) fn with_id(self, id: VarId) -> Var {
        Var { id: Some(id), ..self }
    }

    /// The same value's stand-in: an unmaterialised tensor ([`Tensor::unmaterialised`]) of the
    /// same shape, dtype, device and spike flag, with the same tape id. Dropping the original
    /// handle then frees its bytes; reading the stand-in is an error on every device.
    pub(crate) fn released(self) -> Result<Var> {
        let stand_in = Tensor::unmaterialised(self.shape().clone(), self.dtype(), self.device())?
            .with_known_values(self.known_values());
        Ok(Var {
            value: Value::Dense(stand_in),
            id: self.id,
        })
    }

    /// The tape id, if gradients flow to this value.
    pub fn id(&self) -> Option<VarId> {
        self.id
    }

    /// Whether gradients flow to this value.
    pub fn requires_grad(&self) -> bool {
        self.id.is_some()
    }

    /// Shape of the value.
    pub fn shape(&self) -> &Shape {
        match &self.value {
            Value::Dense(t) => t.shape(),
            Value::Packed(p) => p.shape(),
            Value::Counts(p) => p.shape(),
        }
    }

    /// Dimensions of the value.
    pub fn dims(&self) -> &[usize] {
        self.shape().dims()
    }

    /// Bytes the value holds: its tensor's view (none for an unmaterialised stand-in), or the
    /// whole payload of packed spikes or spike counts (shared by every view of it).
    pub fn held_bytes(&self) -> u64 {
        match &self.value {
            Value::Dense(t) if !t.is_materialised() => 0,
            Value::Dense(t) => t.view_bytes(),
            Value::Packed(p) => p.payload().view_bytes(),
            Value::Counts(p) => p.payload_bytes(),
        }
    }

    /// Element type of the value (f32 for packed spikes, which unpack to f32).
    pub fn dtype(&self) -> DType {
        match &self.value {
            Value::Dense(t) => t.dtype(),
            Value::Packed(_) => DType::F32,
            Value::Counts(p) => p.dtype(),
        }
    }

    /// Device of the value.
    pub fn device(&self) -> Device {
        match &self.value {
            Value::Dense(t) => t.device(),
            Value::Packed(p) => p.device(),
            Value::Counts(p) => p.device(),
        }
    }

    /// Whether the values are known to be spikes (always for packed spikes).
    pub fn is_spike(&self) -> bool {
        match &self.value {
            Value::Dense(t) => t.is_spike(),
            Value::Packed(_) => true,
            Value::Counts(_) => false,
        }
    }

    /// What is known about the values (spikes for packed spikes).
    pub fn known_values(&self) -> KnownValues {
        match &self.value {
            Value::Dense(t) => t.known_values(),
            Value::Packed(_) => KnownValues::Spikes,
            Value::Counts(p) => p.known_values(),
        }
    }
}

/// A value an op may write its result over: lent (`&var`, only read) or handed over (`var`).
/// A handed-over value whose tensor nothing else holds (no saved copy, no other handle) may
/// hold the result in place ([`Operand`]); which happens depends only on handles, so Meta and
/// the CPU allocate alike. A call site chooses by giving up its value.
#[derive(Debug)]
pub enum VarArg<'a> {
    /// Borrowed: read, never written.
    Lent(&'a Var),
    /// Owned by the op: its tensor may hold the result.
    Given(Var),
}

impl<'a> VarArg<'a> {
    /// The value, however it was passed.
    pub fn var(&self) -> &Var {
        match self {
            VarArg::Lent(v) => v,
            VarArg::Given(v) => v,
        }
    }

    /// The tensor as a kernel operand (handed over when the value was). Packed spikes are
    /// unpacked into a new tensor that nothing else holds, handed over either way.
    pub fn into_operand(self) -> Result<Operand<'a>> {
        Ok(match self {
            VarArg::Lent(v) => match v.as_dense() {
                Some(t) => Operand::Lent(t),
                None => Operand::Given(v.tensor()?.into_owned()),
            },
            VarArg::Given(v) => Operand::Given(v.into_tensor()?),
        })
    }
}

impl<'a> From<&'a Var> for VarArg<'a> {
    fn from(v: &'a Var) -> Self {
        VarArg::Lent(v)
    }
}

impl From<Var> for VarArg<'_> {
    fn from(v: Var) -> Self {
        VarArg::Given(v)
    }
}

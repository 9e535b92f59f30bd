//! A tensor argument that a kernel may reuse as its output buffer.

use crate::Tensor;

/// A tensor argument of a kernel that can write its result in place: lent (`&Tensor`, only
/// read) or handed over (`Tensor`). A handed-over tensor that is the only handle to all of its
/// storage ([`Operand::reusable`]) gets the result written over it and no new buffer is
/// allocated. The decision depends only on handles, never on data, so Meta and CPU still
/// allocate identically, and results are bit-identical either way.
///
/// `&tensor` and `tensor` both convert, so a call site chooses reuse by giving up its handle.
#[derive(Debug)]
pub enum Operand<'a> {
    /// Borrowed: read, never written.
    Lent(&'a Tensor),
    /// Owned by the call: its storage may hold the result.
    Given(Tensor),
}

impl Operand<'_> {
    /// The tensor, however it was passed.
    pub fn tensor(&self) -> &Tensor {
        match self {
            Operand::Lent(t) => t,
            Operand::Given(t) => t,
        }
    }

    /// Whether the kernel may overwrite the tensor: handed over, spanning its whole storage,
    /// and the only handle to it.
    pub fn reusable(&self) -> bool {
        match self {
            Operand::Lent(_) => false,
            Operand::Given(t) => {
                t.storage_offset() == 0 && t.elem_count() == t.storage().len() && t.is_exclusive()
            }
        }
    }

    /// The handed-over tensor, when there is one.
    pub(crate) fn into_given(self) -> Option<Tensor> {
        match self {
            Operand::Lent(_) => None,
            Operand::Given(t) => Some(t),
        }
    }
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Lent(t)
    }
}

impl From<Tensor> for Operand<'_> {
    fn from(t: Tensor) -> Self {
        Operand::Given(t)
    }
}

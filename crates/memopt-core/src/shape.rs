//! Tensor shapes (row-major, contiguous).

use serde::{Deserialize, Serialize};

/// The dimensions of a tensor, outermost first. A shape with no dimensions is a scalar with one
/// element.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    /// The scalar shape `[]`.
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar). Shapes built by [`crate::Tensor`] constructors are
    /// checked with [`Shape::checked_elem_count`], so this cannot overflow for a tensor's shape.
    pub fn elem_count(&self) -> usize {
        self.0.iter().product()
    }

    /// Number of elements, or `None` when the product overflows `usize`.
    pub fn checked_elem_count(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Number of elements, or an error naming `op` when the shape is too large to address.
    pub fn elem_count_for(&self, op: &'static str) -> crate::Result<usize> {
        self.checked_elem_count().ok_or_else(|| {
            crate::CoreError::invalid(
                op,
                format!("shape {self} has more elements than fit in the address space"),
            )
        })
    }

    /// Dimension `i`, or `None` when `i >= rank`.
    pub fn dim(&self, i: usize) -> Option<usize> {
        self.0.get(i).copied()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.0[i + 1];
        }
        strides
    }

    /// Number of elements after dimension 0 (1 for scalars and 1-D shapes).
    pub fn inner_count(&self) -> usize {
        self.0.iter().skip(1).product()
    }

    /// The shape with dimension 0 replaced by `n` (the shape of a time slice or chunk).
    pub fn with_dim0(&self, n: usize) -> Shape {
        let mut d = self.0.clone();
        if let Some(first) = d.first_mut() {
            *first = n;
        }
        Shape(d)
    }

    /// The shape with its first two dimensions merged (`[T, N, ...]` -> `[T*N, ...]`).
    pub fn merge_first_two(&self) -> Option<Shape> {
        if self.0.len() < 2 {
            return None;
        }
        let mut d = Vec::with_capacity(self.0.len() - 1);
        d.push(self.0[0] * self.0[1]);
        d.extend_from_slice(&self.0[2..]);
        Some(Shape(d))
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}

impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}

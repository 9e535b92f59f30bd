//! Row-major f32 GEMM on top of the `gemm` crate, shared by matmul, linear and conv2d.
//!
//! [`gemm_f32`] checks every index bound before handing raw pointers to `gemm::gemm`, so its
//! callers stay in safe code; a bound violation is a bug in the caller and panics.

use gemm::Parallelism;

/// Multiply-adds (`m * n * k`) below which a product runs on the calling thread: under this, the
/// cost of waking rayon workers exceeds the work (about 100^3).
pub(crate) const GEMM_PAR_MIN_MACS: usize = 1 << 20;

/// How a product may use threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GemmPar {
    /// On all rayon threads when the product has at least [`GEMM_PAR_MIN_MACS`] multiply-adds,
    /// on the calling thread below.
    Auto,
    /// Always on the calling thread (the caller already runs products in parallel).
    Serial,
}

impl GemmPar {
    /// The choice for a product of `macs` multiply-adds that the caller may either run alone
    /// (big products, parallel inside) or run many of in parallel (small products): `Auto` for
    /// big ones, `Serial` for small ones. Depends on the size only, never on the thread count.
    pub(crate) fn for_size(macs: usize) -> GemmPar {
        if macs >= GEMM_PAR_MIN_MACS {
            GemmPar::Auto
        } else {
            GemmPar::Serial
        }
    }
}

/// A read-only matrix view: element `(i, j)` is `data[i * rs + j * cs]`, strides in elements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> MatRef<'a> {
    /// `rows x cols` row-major matrix at the start of `data` (row stride `cols`).
    pub(crate) fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// `rows x cols` matrix with row stride `rs` and column stride `cs` (elements).
    pub(crate) fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }

    /// The transpose (same data, strides swapped).
    pub(crate) fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Whether every element lies inside `data`.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// `dst = a * b` (or `dst += a * b` with `accumulate`), where `dst` is `a.rows x b.cols` with row
/// stride `dst_rs` and unit column stride. Panics if `a.cols != b.rows`, if a view reaches
/// outside its slice or if `dst_rs < b.cols` (rows would overlap): callers validate shapes first,
/// so a panic here is a bug in the caller, never a user error.
pub(crate) fn gemm_f32(
    dst: &mut [f32],
    dst_rs: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    par: GemmPar,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "gemm_f32: inner dimensions differ");
    assert!(
        a.in_bounds() && b.in_bounds(),
        "gemm_f32: operand view out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst_rs >= n && (m - 1) * dst_rs + n <= dst.len(),
        "gemm_f32: destination view out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(dst_rs).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = match par {
        GemmPar::Auto if m * n * k >= GEMM_PAR_MIN_MACS => Parallelism::Rayon(rayon::current_num_threads()),
        _ => Parallelism::None,
    };
    // SAFETY: the asserts above prove that every element (i, j) of the three m x k, k x n and
    // m x n views lies inside its slice; `dst` is borrowed mutably, so it does not alias `a` or
    // `b`; distinct destination elements do not overlap because dst_rs >= n and the column
    // stride is 1. Strides fit in isize because they index into live slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: MatRef, b: MatRef) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    out[i * n + j] += a.data[i * a.rs + l * a.cs] as f64 * b.data[l * b.rs + j * b.cs] as f64;
                }
            }
        }
        out
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn strided_transposed_accumulating_products_match_naive() {
        for &(m, n, k) in &[(3, 5, 7), (1, 1, 1), (64, 80, 300), (130, 17, 9)] {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            // a as a transposed column-major view, b row-major.
            let at = MatRef::row_major(&a, k, m).t();
            let bv = MatRef::row_major(&b, k, n);
            let want = naive(m, n, k, at, bv);
            for par in [GemmPar::Auto, GemmPar::Serial] {
                // dst rows padded to n + 2 to check the row stride.
                let mut dst = vec![1.0f32; m * (n + 2)];
                gemm_f32(&mut dst, n + 2, at, bv, true, par);
                for i in 0..m {
                    for j in 0..n {
                        let got = dst[i * (n + 2) + j] as f64;
                        assert!(
                            (got - 1.0 - want[i * n + j]).abs() < 1e-4 * k as f64,
                            "{m}x{n}x{k}"
                        );
                    }
                    assert_eq!(dst[i * (n + 2) + n], 1.0, "padding untouched");
                }
                gemm_f32(&mut dst, n + 2, at, bv, false, par);
                for i in 0..m {
                    for j in 0..n {
                        let got = dst[i * (n + 2) + j] as f64;
                        assert!((got - want[i * n + j]).abs() < 1e-4 * k as f64);
                    }
                }
            }
        }
    }

    #[test]
    fn empty_inner_dimension_zeroes_or_keeps() {
        let mut dst = vec![3.0f32; 6];
        let a = MatRef::row_major(&[], 2, 0);
        let b = MatRef::row_major(&[], 0, 3);
        gemm_f32(&mut dst, 3, a, b, true, GemmPar::Auto);
        assert_eq!(dst, vec![3.0; 6]);
        gemm_f32(&mut dst, 3, a, b, false, GemmPar::Auto);
        assert_eq!(dst, vec![0.0; 6]);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_views_panic_instead_of_reading_past_the_slice() {
        let a = [0f32; 5];
        let mut dst = [0f32; 4];
        gemm_f32(
            &mut dst,
            2,
            MatRef::row_major(&a, 2, 3),
            MatRef::row_major(&a, 3, 2),
            false,
            GemmPar::Serial,
        );
    }
}

//! Surrogate gradients of the Heaviside firing function, as in SpikingJelly's `surrogate.py`.

use serde::{Deserialize, Serialize};

/// The surrogate function whose derivative replaces the Heaviside step's in backward.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Surrogate {
    /// `sigmoid(alpha * x)`: derivative `alpha * sg * (1 - sg)` with `sg = sigmoid(alpha * x)`.
    Sigmoid {
        /// Steepness (> 0); SpikingJelly's default is 4.
        alpha: f32,
    },
    /// `atan(pi/2 * alpha * x) / pi + 1/2`: derivative `alpha / 2 / (1 + (pi/2 * alpha * x)^2)`.
    ATan {
        /// Steepness (> 0); SpikingJelly's default is 2.
        alpha: f32,
    },
}

impl Default for Surrogate {
    /// SpikingJelly's default surrogate, `Sigmoid { alpha: 4.0 }`.
    fn default() -> Self {
        Surrogate::Sigmoid { alpha: 4.0 }
    }
}

impl Surrogate {
    /// Derivative of the surrogate at `x = h - v_threshold` (`h` the membrane potential before
    /// firing), exactly as the neuron kernels use it.
    pub fn grad(self, x: f32) -> f32 {
        match self {
            Surrogate::Sigmoid { alpha } => sigmoid_grad(alpha, x),
            Surrogate::ATan { alpha } => atan_grad(alpha, x),
        }
    }

    /// The steepness parameter.
    pub fn alpha(self) -> f32 {
        match self {
            Surrogate::Sigmoid { alpha } | Surrogate::ATan { alpha } => alpha,
        }
    }
}

/// `alpha * sg * (1 - sg)` with `sg = sigmoid(alpha * x)`, computed as
/// `alpha * e / (1 + e)^2` with `e = exp(-|alpha * x|)` (the same value, as `sg * (1 - sg)` is
/// even in `x`, without overflow or cancellation). Branch-free and vectorizable.
#[inline(always)]
pub(super) fn sigmoid_grad(alpha: f32, x: f32) -> f32 {
    let e = exp_nonpositive(-(alpha * x).abs());
    let d = 1.0 + e;
    alpha * e / (d * d)
}

/// `alpha / 2 / (1 + (pi/2 * alpha * x)^2)`.
#[inline(always)]
pub(super) fn atan_grad(alpha: f32, x: f32) -> f32 {
    let u = std::f32::consts::FRAC_PI_2 * alpha * x;
    alpha * 0.5 / (1.0 + u * u)
}

/// `exp(x)` for `x <= 0` (NaN stays NaN), within 1e-7 relative; arguments below -87 give
/// `exp(-87)` (about 1.6e-38, so the absolute error stays below that). Plain arithmetic, fused
/// multiply-adds and bit operations only, so that loops calling it vectorize (no libm call):
/// Cody-Waite reduction `x = n ln2 + r`, `|r| <= ln2 / 2`, with fused multiply-adds, and a
/// degree-6 polynomial for `exp(r)` (Chebyshev fit of `(exp(r) - 1) / r`, so that `exp(0)` is
/// exactly 1).
///
/// Every step is one IEEE operation with one rounding (`mul_add` is a fused multiply-add in
/// every build: an FMA instruction where the CPU has one, else the correctly rounded libm
/// `fmaf`), so the baseline and the AVX2+FMA builds agree bit for bit, and so does the CUDA
/// kernel (`exp_nonpositive` in `cuda/kernels/neuron.cu`, the same steps with `fmaf`).
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 * 2^23: adding it rounds to the nearest integer, which lands in the low mantissa bits.
    const SHIFT: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // The lower clamp only: callers pass `-|y|` (<= 0 or NaN), and NaN compares false.
    let x = if x < -87.0 { -87.0 } else { x };
    let shifted = x.mul_add(LOG2E, SHIFT);
    let n = shifted - SHIFT;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = 1.393_364_2e-3_f32;
    p = p.mul_add(r, 8.369_149e-3);
    p = p.mul_add(r, 4.166_646_7e-2);
    p = p.mul_add(r, 0.166_665_05);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    let e_r = p.mul_add(r, 1.0);
    // n is an integer in [-126, 0]; its two's complement value is the difference of the bits,
    // and 2^n, with n + 127 in [1, 127], a normal float.
    let n_int = shifted.to_bits().wrapping_sub(SHIFT.to_bits()) as i32;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    e_r * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_accurate_on_its_domain() {
        let mut worst = 0f64;
        let mut x = 0f32;
        while x > -87.0 {
            let got = exp_nonpositive(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x -= 0.001_37;
        }
        assert!(worst < 1.5e-7, "worst relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(-1000.0) < 2e-38);
        assert!(exp_nonpositive(f32::NEG_INFINITY) < 2e-38);
    }

    #[test]
    fn surrogate_derivatives_match_their_definitions() {
        for &alpha in &[0.5f32, 2.0, 4.0, 7.5] {
            for i in -400..=400 {
                let x = i as f32 * 0.01;
                let (a, xd) = (alpha as f64, x as f64);
                let sg = 1.0 / (1.0 + (-a * xd).exp());
                let want = a * sg * (1.0 - sg);
                let got = Surrogate::Sigmoid { alpha }.grad(x) as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * want.max(1e-3),
                    "sigmoid {alpha} {x}: {got} {want}"
                );
                let u = std::f64::consts::FRAC_PI_2 * a * xd;
                let want = a / 2.0 / (1.0 + u * u);
                let got = Surrogate::ATan { alpha }.grad(x) as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * want,
                    "atan {alpha} {x}: {got} {want}"
                );
            }
        }
        assert_eq!(Surrogate::default(), Surrogate::Sigmoid { alpha: 4.0 });
        assert_eq!(Surrogate::Sigmoid { alpha: 4.0 }.grad(0.0), 1.0);
        assert_eq!(Surrogate::ATan { alpha: 2.0 }.grad(0.0), 1.0);
    }
}

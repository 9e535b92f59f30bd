//! Shared by the GEMM/conv benches: the VGG-like problem and a plain GEMM baseline.

// Each bench target compiles this module and uses a subset of it.
#![allow(dead_code)]

use memopt_core::kernels::Conv2dParams;
use memopt_core::{Device, MemoryKind, Philox, Tensor};

/// A 3x3 convolution layer with padding 1: input `[b, c, hw, hw]`, `co` output channels.
#[derive(Debug, Clone, Copy)]
pub struct Layer {
    pub b: usize,
    pub c: usize,
    pub hw: usize,
    pub co: usize,
}

/// The VGG-like layer the target is set on: x = [8, 128, 48, 48], 128 -> 256.
pub const VGG: Layer = Layer {
    b: 8,
    c: 128,
    hw: 48,
    co: 256,
};

impl Layer {
    /// Parses `b,c,hw,co`.
    pub fn parse(s: &str) -> Option<Layer> {
        let v: Vec<usize> = s
            .split(',')
            .map(|t| t.trim().parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [b, c, hw, co] => Some(Layer { b, c, hw, co }),
            _ => None,
        }
    }

    /// GEMM sizes `(m, n, k)` of one product and the number of products: one per image when an
    /// image has at least 1024 output pixels (as conv2d does), else one over the whole batch.
    pub fn gemm_sizes(&self) -> ((usize, usize, usize), usize) {
        let (pix, k) = (self.hw * self.hw, self.c * 9);
        if pix >= 1024 {
            ((self.co, pix, k), self.b)
        } else {
            ((self.co, self.b * pix, k), 1)
        }
    }

    /// Floating-point operations of the forward.
    pub fn forward_flops(&self) -> u64 {
        let ((m, n, k), count) = self.gemm_sizes();
        count as u64 * flops(m, n, k)
    }

    /// Floating-point operations of the backward (weight and input gradients).
    pub fn backward_flops(&self) -> u64 {
        2 * self.forward_flops()
    }

    /// The three products of the layer, each with its repeat count: forward `W x cols`, weight
    /// gradient `grad x cols^T`, input gradient `W^T x grad`.
    pub fn gemms(&self) -> [(String, Gemm, usize); 3] {
        let ((m, n, k), count) = self.gemm_sizes();
        [
            (
                format!("forward W[{m},{k}] x cols[{k},{n}]"),
                Gemm::new(m, n, k, false, false),
                count,
            ),
            (
                format!("grad_w grad[{m},{n}] x cols^T[{n},{k}]"),
                Gemm::new(m, k, n, false, true),
                count,
            ),
            (
                format!("grad_x W^T[{k},{m}] x grad[{m},{n}]"),
                Gemm::new(k, n, m, true, false),
                count,
            ),
        ]
    }

    /// Seeded tensors of the layer.
    pub fn tensors(&self) -> Tensors {
        let mut rng = Philox::new(7);
        let Layer { b, c, hw, co } = *self;
        Tensors {
            x: rand(&[b, c, hw, hw], &mut rng),
            w: rand(&[co, c, 3, 3], &mut rng),
            b: rand(&[co], &mut rng),
            grad: rand(&[b, co, hw, hw], &mut rng),
            p: Conv2dParams {
                padding: [1, 1],
                ..Default::default()
            },
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Layer { b, c, hw, co } = self;
        write!(f, "x=[{b}, {c}, {hw}, {hw}] 3x3 pad 1 -> {co}")
    }
}

/// Floating-point operations of an `m x n x k` product (2 per multiply-add).
pub fn flops(m: usize, n: usize, k: usize) -> u64 {
    2 * (m * n * k) as u64
}

/// Input, weight, bias and an output gradient of a layer.
pub struct Tensors {
    pub x: Tensor,
    pub w: Tensor,
    pub b: Tensor,
    pub grad: Tensor,
    pub p: Conv2dParams,
}

/// Uniform values in [-1, 1) of `dims`.
pub fn rand(dims: &[usize], rng: &mut Philox) -> Tensor {
    Tensor::rand_uniform(dims.to_vec(), -1.0, 1.0, rng, Device::Cpu, MemoryKind::Input).unwrap()
}

/// One product `dst [m, n] = a [m, k] x b [k, n]` on a preallocated output, operands given by
/// their row and column strides (elements), all rayon threads: the baseline conv2d is held to.
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    a: Vec<f32>,
    a_strides: (usize, usize),
    b: Vec<f32>,
    b_strides: (usize, usize),
    dst: Vec<f32>,
}

impl Gemm {
    /// Operands with seeded values; `a_t` / `b_t` store a / b transposed (as conv2d's backward
    /// reads W^T and columns^T).
    pub fn new(m: usize, n: usize, k: usize, a_t: bool, b_t: bool) -> Self {
        let mut rng = Philox::new(11);
        let v = |len: usize, rng: &mut Philox| rand(&[len], rng).to_vec_f32().unwrap();
        Gemm {
            m,
            n,
            k,
            a: v(m * k, &mut rng),
            a_strides: if a_t { (1, m) } else { (k, 1) },
            b: v(k * n, &mut rng),
            b_strides: if b_t { (1, k) } else { (n, 1) },
            dst: vec![0.0; m * n],
        }
    }

    /// Floating-point operations of one product.
    pub fn flops(&self) -> u64 {
        flops(self.m, self.n, self.k)
    }

    /// Runs the product once.
    pub fn run(&mut self) {
        let (m, n, k) = (self.m, self.n, self.k);
        let ((a_rs, a_cs), (b_rs, b_cs)) = (self.a_strides, self.b_strides);
        // The vectors hold exactly m*k and k*n elements and the strides are those of a
        // (possibly transposed) dense matrix, so every index is in bounds; dst is m*n, owned.
        assert!(self.a.len() == m * k && self.b.len() == k * n && self.dst.len() == m * n);
        // SAFETY: see the assert above; dst does not alias a or b.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                self.dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                self.a.as_ptr(),
                a_cs as isize,
                a_rs as isize,
                self.b.as_ptr(),
                b_cs as isize,
                b_rs as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(rayon::current_num_threads()),
            );
        }
    }
}

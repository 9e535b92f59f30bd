// Elementwise kernels and their backward functions (kernels/elementwise.rs, reduce.rs
// broadcasts): one thread per element, grid-stride. Pointers are already offset to the first
// element of each (contiguous) view.

extern "C" __global__ void ew_add(const float* a, const float* b, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = a[i] + b[i]; }
}

// Also the backward of mul (grad * other).
extern "C" __global__ void ew_mul(const float* a, const float* b, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = a[i] * b[i]; }
}

// Also the backward of scale (grad * s).
extern "C" __global__ void ew_scale(const float* x, float s, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = x[i] * s; }
}

// f32::max(v, 0.0): NaN gives 0 (Rust's max returns the non-NaN operand), as fmaxf does.
extern "C" __global__ void ew_relu(const float* x, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = fmaxf(x[i], 0.0f); }
}

// 1 / (1 + exp(-x)); expf is within 2 ulp of the CPU's libm (not bit-identical).
extern "C" __global__ void ew_sigmoid(const float* x, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = 1.0f / (1.0f + expf(-x[i])); }
}

extern "C" __global__ void ew_relu_backward(const float* g, const float* x, float* out, u64 n) {
    FOR_EACH(i, n) { out[i] = x[i] > 0.0f ? g[i] : 0.0f; }
}

// grad * y * (1 - y), left to right as on the CPU.
extern "C" __global__ void ew_sigmoid_backward(const float* g, const float* y, float* out, u64 n) {
    FOR_EACH(i, n) {
        const float s = y[i];
        out[i] = g[i] * s * (1.0f - s);
    }
}

// acc += x (gradient accumulation in place).
extern "C" __global__ void ew_add_assign(float* acc, const float* x, u64 n) {
    FOR_EACH(i, n) { acc[i] = acc[i] + x[i]; }
}

// dst = src (a time slice of a preallocated tensor, a copy of a view).
extern "C" __global__ void ew_assign(float* dst, const float* src, u64 n) {
    FOR_EACH(i, n) { dst[i] = src[i]; }
}

extern "C" __global__ void ew_fill(float* x, float v, u64 n) {
    FOR_EACH(i, n) { x[i] = v; }
}

// Backward of sum_dim / mean_dim: out[o, j, i] = g[o, i] * scale over [outer, size, inner].
extern "C" __global__ void broadcast_dim(const float* g, float* out, u64 outer, u64 size,
                                         u64 inner, float scale) {
    const u64 n = outer * size * inner;
    FOR_EACH(idx, n) {
        const u64 i = idx % inner;
        const u64 o = idx / (inner * size);
        out[idx] = g[o * inner + i] * scale;
    }
}

// Backward of sum_all / mean_all: the one value g[0] * scale everywhere.
extern "C" __global__ void broadcast_scalar(const float* g, float* out, u64 n, float scale) {
    const float v = g[0] * scale;
    FOR_EACH(i, n) { out[i] = v; }
}

// Rows of len elements from src (rows src_pitch apart) to dst (rows dst_pitch apart): the
// parts of split_dim and the concatenation of cat_dim.
extern "C" __global__ void copy_rows(const float* src, float* dst, u64 rows, u64 len,
                                     u64 src_pitch, u64 dst_pitch) {
    FOR_EACH(idx, rows * len) {
        const u64 r = idx / len;
        const u64 i = idx - r * len;
        dst[r * dst_pitch + i] = src[r * src_pitch + i];
    }
}

// Rows of inner values, each times its own factor: out[i] = x[i] * s[i / inner].
extern "C" __global__ void row_scale(const float* x, const float* s, float* out, u64 n, u64 inner) {
    FOR_EACH(i, n) { out[i] = x[i] * s[i / inner]; }
}

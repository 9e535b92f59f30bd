// Losses (kernels/loss.rs): cross-entropy over [N, C] logits with i64 labels, and mean squared
// error; f64 sums in the CPU's blocks. Labels are validated on the host before launch.

// (max, ln(sum exp(v - max))) of one row, as log_sum_exp: the max folds from -inf with
// f32::max (NaN-ignoring, as fmaxf), the exponentials add from -0.0 in order.
__device__ __forceinline__ void log_sum_exp(const float* row, u64 c, double* max_out,
                                            double* lse_out) {
    float m = -F32_INFINITY;
    for (u64 j = 0; j < c; ++j) {
        m = fmaxf(m, row[j]);
    }
    const double max = (double)m;
    double sum = -0.0;
    for (u64 j = 0; j < c; ++j) {
        sum += exp((double)row[j] - max);
    }
    *max_out = max;
    *lse_out = log(sum);
}

// parts[b] = sum over rows b*rows_per_block .. of (max + lse - row[label]), rows in order from
// -0.0; one thread per block of rows (BlockedSum with block = max(sum_block / C, 1) rows). With one
// block (no workspace, parts null) out[0] = (sum / n) as f32 directly.
extern "C" __global__ void ce_blocks(const float* logits, const i64* labels, u64 n, u64 c,
                                     u64 rows_per_block, double* parts, float* out) {
    // Without a workspace there is one block, even for n = 0 (the CPU then gives 0/0 = NaN).
    const u64 blocks = parts ? (n + rows_per_block - 1) / rows_per_block : 1;
    FOR_EACH(b, blocks) {
        const u64 lo = b * rows_per_block;
        const u64 hi = min(lo + rows_per_block, n);
        double s = -0.0;
        for (u64 i = lo; i < hi; ++i) {
            const float* row = logits + i * c;
            double max, lse;
            log_sum_exp(row, c, &max, &lse);
            s += max + lse - (double)row[labels[i]];
        }
        if (parts) {
            parts[b] = s;
        } else {
            out[0] = (float)(s / (double)n);
        }
    }
}

// Gradient of the mean cross-entropy: out = (softmax - onehot) * g / n, per row.
extern "C" __global__ void ce_backward(const float* g, const float* logits, const i64* labels,
                                       u64 n, u64 c, float* out) {
    const double scale = (double)g[0] / (double)n;
    FOR_EACH(i, n) {
        const float* row = logits + i * c;
        double max, lse;
        log_sum_exp(row, c, &max, &lse);
        const i64 label = labels[i];
        for (u64 j = 0; j < c; ++j) {
            const double p = exp((double)row[j] - max - lse);
            const double t = (i64)j == label ? 1.0 : 0.0;
            out[i * c + j] = (float)((p - t) * scale);
        }
    }
}

// parts[b] = sum of (p - t)^2 in f64 over block b of `block` values (group8 order); with one
// block (no workspace, parts null) out[0] = (sum / n) as f32 directly.
extern "C" __global__ void mse_blocks(const float* p, const float* t, u64 n, u64 block,
                                      double* parts, float* out) {
    // Without a workspace there is one block, even for n = 0 (NaN for a mean, as the CPU).
    const u64 blocks = parts ? (n + block - 1) / block : 1;
    FOR_EACH_GROUP8(b, blocks) {
        const u64 lo = b * block;
        const u64 len = b < blocks ? min(block, n - lo) : 0;
        const double s = group8_sum(len, [&](u64 i) {
            const double d = (double)p[lo + i] - (double)t[lo + i];
            return d * d;
        });
        if (b < blocks && (threadIdx.x & 7u) == 0) {
            if (parts) {
                parts[b] = s;
            } else {
                out[0] = (float)(s / (double)n);
            }
        }
    }
}

// k * (p - t) with k = (2 g / n) rounded to f32, as the CPU.
extern "C" __global__ void mse_backward(const float* g, const float* p, const float* t, u64 n,
                                        float* out) {
    const float k = (float)(2.0 * (double)g[0] / (double)n);
    FOR_EACH(i, n) { out[i] = k * (p[i] - t[i]); }
}

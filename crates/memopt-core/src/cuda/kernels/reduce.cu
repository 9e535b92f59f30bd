// Reductions (kernels/reduce.rs, accum.rs): sums in f64, in the CPU's blocks and order.
//
// sum_all / mean_all: BlockedSum over blocks of Target::sum_block() values (4096 on CUDA, 16384
// on the CPU; passed as `block`): each block summed by a group of 8 lanes (group8_sum, the CPU's
// in-block order), the per-block f64 parts stored in the tracked workspace and
// added one by one in block order (from -0.0) by reduce_parts. With one block there is no
// workspace: the group writes the result directly.

// parts[b] = sum of x[b*block .. min((b+1)*block, n)] (f64), for b < blocks = ceil(n / block).
// With one block the CPU has no workspace: parts is null and the group writes
// out[0] = (sum * factor) as f32 directly.
extern "C" __global__ void sum_blocks(const float* x, u64 n, u64 block, double* parts,
                                      double factor, float* out) {
    // Without a workspace there is one block, even for n = 0 (NaN for a mean, as the CPU).
    const u64 blocks = parts ? (n + block - 1) / block : 1;
    FOR_EACH_GROUP8(b, blocks) {
        const u64 lo = b * block;
        const u64 len = b < blocks ? min(block, n - lo) : 0;
        const double s = group8_sum(len, [&](u64 i) { return (double)x[lo + i]; });
        if (b < blocks && (threadIdx.x & 7u) == 0) {
            if (parts) {
                parts[b] = s;
            } else {
                out[0] = (float)(s * factor);
            }
        }
    }
}

// out[0] = (sum of parts in order from -0.0, times factor, divided by divisor) as f32: sums and
// means over everything multiply by factor = 1/n (divisor 1), the losses divide by n
// (factor 1), exactly as their CPU kernels. One thread.
extern "C" __global__ void reduce_parts(const double* parts, u64 count, double factor,
                                        double divisor, float* out) {
    if (global_index() == 0) {
        out[0] = (float)(seq_sum(count, [&](u64 i) { return parts[i]; }) * factor / divisor);
    }
}

// sum_dim / mean_dim over x = [outer, d, inner] with inner == 1: each output is the f64 sum of
// a contiguous row of d values in group8 order.
extern "C" __global__ void sum_rows(const float* x, u64 outer, u64 d, double factor, float* out) {
    FOR_EACH_GROUP8(o, outer) {
        const u64 len = o < outer ? d : 0;
        const double s = group8_sum(len, [&](u64 j) { return (double)x[o * d + j]; });
        if (o < outer && (threadIdx.x & 7u) == 0) {
            out[o] = (float)(s * factor);
        }
    }
}

// sum_dim / mean_dim with inner > 1: each output (o, i) adds x[o, j, i] for j = 0..d in order
// from +0.0 (the CPU's tile accumulators).
extern "C" __global__ void sum_columns(const float* x, u64 outer, u64 d, u64 inner, double factor,
                                       float* out) {
    FOR_EACH(idx, outer * inner) {
        const u64 o = idx / inner, i = idx % inner;
        const float* src = x + o * d * inner + i;
        double acc = 0.0;
        for (u64 j = 0; j < d; ++j) {
            acc += (double)src[j * inner];
        }
        out[idx] = (float)(acc * factor);
    }
}

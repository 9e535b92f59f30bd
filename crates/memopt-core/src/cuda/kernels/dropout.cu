// Dropout and its backward (kernels/dropout.rs) with the CPU's Philox4x32-10 stream (rng.rs):
// element i uses value offset + (i mod period) of stream `seed`, uniform = (bits >> 8) * 2^-24,
// kept (times 1 / (1 - p)) when uniform >= p. The same state gives the same mask on any device.

__device__ __forceinline__ void philox4x32_10(u32 c[4], u32 k0, u32 k1) {
    const u32 M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += W0;
            k1 += W1;
        }
        const u64 p0 = (u64)M0 * c[0];
        const u64 p1 = (u64)M1 * c[2];
        const u32 hi0 = (u32)(p0 >> 32), lo0 = (u32)p0;
        const u32 hi1 = (u32)(p1 >> 32), lo1 = (u32)p1;
        const u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

// The 32 random bits of stream position `pos` (wrapping u64) under key `seed`.
__device__ __forceinline__ u32 philox_bits(u64 seed, u64 pos) {
    const u64 block = pos / 4;
    u32 c[4] = {(u32)block, (u32)(block >> 32), 0u, 0u};
    philox4x32_10(c, (u32)seed, (u32)(seed >> 32));
    return c[pos % 4];
}

// out = x * (u >= p ? scale : 0); the backward applies the same mask to the gradient.
extern "C" __global__ void dropout_mask(const float* x, u64 n, u64 seed, u64 offset, u64 period,
                                        float p, float scale, float* out) {
    FOR_EACH(i, n) {
        const u64 pos = offset + i % period;
        const float u = (float)(philox_bits(seed, pos) >> 8) * (1.0f / 16777216.0f);
        out[i] = x[i] * (u >= p ? scale : 0.0f);
    }
}

// Uniform values in [low, high) from position `offset` of stream `seed` (rng::fill_uniform):
// low + (high - low) * u.
extern "C" __global__ void fill_uniform(float* out, u64 n, u64 seed, u64 offset, float low,
                                        float high) {
    const float scale = high - low;
    FOR_EACH(i, n) {
        const float u = (float)(philox_bits(seed, offset + i) >> 8) * (1.0f / 16777216.0f);
        out[i] = low + scale * u;
    }
}

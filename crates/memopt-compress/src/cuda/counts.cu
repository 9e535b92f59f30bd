// Spike counts of pooled spikes, compiled at run time by NVRTC: one byte per f32 value, the
// count c of spikes it averages over `window`. Pack rounds v * window half away from zero as the CPU does (exact: v is the f32
// nearest c / window); unpack computes the mean as average pooling does, the double quotient
// rounded to float (IEEE division and rounding, as on the CPU).

typedef unsigned char u8;
typedef unsigned long long u64;

extern "C" __global__ void counts_pack_f32(const float* x, u64 n, double window, u8* out) {
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (u8)round((double)x[i] * window);
    }
}

extern "C" __global__ void counts_unpack_f32(const u8* in, u64 n, double window, float* out) {
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (float)((double)in[i] / window);
    }
}

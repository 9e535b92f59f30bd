// Shared by every memopt CUDA source (prepended at build time with concat!): integer types,
// grid-stride loops and the f64 sums in the CPU's order.
//
// Determinism rules for every kernel: no floating-point atomics; grid sizes depend only on
// shapes; every sum is a fixed tree, the same one the CPU kernel uses; compiled without fast
// math and with --fmad=false, so a*b+c rounds twice exactly as the CPU does. Launch every kernel
// with a block size that is a multiple of 32 (the group-of-8 sums use whole warps).

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Global thread index and grid stride, 64-bit.
__device__ __forceinline__ u64 global_index() {
    return blockIdx.x * (u64)blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_stride() {
    return gridDim.x * (u64)blockDim.x;
}
#define FOR_EACH(i, n) for (u64 i = global_index(); i < (n); i += grid_stride())

// The CPU's sum_map_f64 (kernels/accum.rs) by a group of 8 lanes of one warp: lane k of the
// group adds f(8j + k) for every whole chunk j, in order, from +0.0; the eight accumulators
// combine as ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)); the ragged tail is added one value at a time
// from -0.0 (Rust's Iterator::sum) and added last. Every lane of the warp must call it (a group
// without work passes n = 0); every lane of the group gets the sum.
template <typename F>
__device__ __forceinline__ double group8_sum(u64 n, F f) {
    const u32 lane = threadIdx.x & 31u;
    const u32 k = lane & 7u;
    const u32 base = lane & ~7u;
    const u64 full = n / 8;
    double acc = 0.0;
    for (u64 j = 0; j < full; ++j) {
        acc += f(8 * j + k);
    }
    double a[8];
#pragma unroll
    for (u32 q = 0; q < 8; ++q) {
        a[q] = __shfl_sync(0xffffffffu, acc, base + q);
    }
    const double s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    double tail = -0.0;
    for (u64 i = full * 8; i < n; ++i) {
        tail += f(i);
    }
    return s + tail;
}

// Segment `seg` handled by this group of 8 lanes, when each warp takes 4 segments:
// global group index.
__device__ __forceinline__ u64 group8_index() {
    return global_index() >> 3;
}
__device__ __forceinline__ u64 group8_stride() {
    return grid_stride() >> 3;
}
// Loop over segments by groups of 8 lanes; the bound is rounded so that whole warps iterate
// together (group8_sum needs all 32 lanes). Inside, `seg < segs` says whether the group has work.
#define FOR_EACH_GROUP8(seg, segs)                                                              \
    for (u64 seg = group8_index(), seg##_end = ((segs) + 3) / 4 * 4; seg < seg##_end;         \
         seg += group8_stride())

// A sequential f64 sum from -0.0 (Rust's Iterator::sum), one thread.
template <typename F>
__device__ __forceinline__ double seq_sum(u64 n, F f) {
    double s = -0.0;
    for (u64 i = 0; i < n; ++i) {
        s += f(i);
    }
    return s;
}

// +infinity as f32 (NVRTC has no <math.h> INFINITY).
#define F32_INFINITY __int_as_float(0x7f800000)

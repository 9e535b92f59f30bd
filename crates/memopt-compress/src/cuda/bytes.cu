// Bool/U8 pack and unpack for f32, f16 and bf16 values, compiled at run time by NVRTC: one byte
// (0 or 1) per value. Values are handled as raw bits exactly as in bitspike.cu: the byte is
// "value is not zero"; with `check`, the smallest index of a value other than 0 and 1 is
// atomicMin'ed into *first_bad (which the host set to ~0).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

template <typename W, W ABS, W ONE>
__device__ __forceinline__ void pack_impl(const W* __restrict__ x, u64 n, u8* __restrict__ out,
                                          int check, u64* __restrict__ first_bad) {
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        const W v = x[i];
        const bool nz = (v & ABS) != 0;
        if (check && nz && v != ONE) {
            atomicMin(first_bad, i);
        }
        out[i] = nz ? 1 : 0;
    }
}

template <typename W, W ONE>
__device__ __forceinline__ void unpack_impl(const u8* __restrict__ in, u64 n, W* __restrict__ out) {
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = in[i] ? ONE : (W)0;
    }
}

extern "C" __global__ void bytes_pack_f32(const u32* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u32, 0x7FFFFFFFu, 0x3F800000u>(x, n, out, check, first_bad);
}
extern "C" __global__ void bytes_pack_f16(const u16* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u16, (u16)0x7FFF, (u16)0x3C00>(x, n, out, check, first_bad);
}
extern "C" __global__ void bytes_pack_bf16(const u16* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u16, (u16)0x7FFF, (u16)0x3F80>(x, n, out, check, first_bad);
}
extern "C" __global__ void bytes_unpack_f32(const u8* in, u64 n, u32* out) {
    unpack_impl<u32, 0x3F800000u>(in, n, out);
}
extern "C" __global__ void bytes_unpack_f16(const u8* in, u64 n, u16* out) {
    unpack_impl<u16, (u16)0x3C00>(in, n, out);
}
extern "C" __global__ void bytes_unpack_bf16(const u8* in, u64 n, u16* out) {
    unpack_impl<u16, (u16)0x3F80>(in, n, out);
}

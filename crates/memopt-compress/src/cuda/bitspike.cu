// BitSpike pack and unpack for f32, f16 and bf16 values, compiled at run time by NVRTC.
//
// Format (numpy packbits(bitorder='little')): value 8j+i (row-major) is bit i (LSB first) of
// byte j; the last byte is zero-padded. Values are handled as raw bits, so no CUDA header is
// needed: a value is zero when its magnitude bits are zero (+0.0 or -0.0) and one when its bits
// equal those of 1.0. The bit stored is "value is not zero", exactly as on the CPU.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Each warp packs 8 groups of 32 values (256 values, 32 bytes) per iteration: lane l loads value
// base + 32 j + l for j = 0..7 (coalesced), one ballot per group gives 32 bits in value order,
// and lanes 0..7 store the 8 words (32 contiguous bytes). On a little-endian GPU, byte k of the
// word for values 32w..32w+31 holds values 32w+8k..32w+8k+7 in bits 0..7: the numpy layout.
// With `check`, the smallest index of a value other than 0 and 1 is atomicMin'ed into
// *first_bad (which the host set to ~0).
template <typename W, W ABS, W ONE>
__device__ __forceinline__ void pack_impl(const W* __restrict__ x, u64 n, u8* __restrict__ out,
                                          int check, u64* __restrict__ first_bad) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5;
    const u64 warps = (gridDim.x * (u64)blockDim.x) >> 5;
    const u64 nbytes = (n + 7) >> 3;
    // `base` is the same for all lanes of a warp, so every lane reaches every ballot.
    for (u64 base = warp * 256; base < n; base += warps * 256) {
        u32 mine = 0;
#pragma unroll
        for (u32 j = 0; j < 8; ++j) {
            const u64 i = base + 32u * j + lane;
            bool nz = false;
            if (i < n) {
                const W v = x[i];
                nz = (v & ABS) != 0;
                if (check && nz && v != ONE) {
                    atomicMin(first_bad, i);
                }
            }
            const u32 bits = __ballot_sync(0xffffffffu, nz);
            if (lane == j) {
                mine = bits;
            }
        }
        if (lane < 8) {
            const u64 b = (base >> 3) + 4u * lane;  // first byte of this lane's word
            if (b + 4 <= nbytes) {
                *reinterpret_cast<u32*>(out + b) = mine;
            } else {
                for (u32 k = 0; b + k < nbytes; ++k) {
                    out[b + k] = (u8)(mine >> (8u * k));
                }
            }
        }
    }
}

// One thread per packed byte: writes its 8 values with 16-byte stores (the output buffer is a
// fresh allocation, so value 8b is 16-byte aligned for both 4- and 2-byte values).
__device__ __forceinline__ void store8(u32* out, const u32 v[8]) {
    uint4* o = reinterpret_cast<uint4*>(out);
    o[0] = make_uint4(v[0], v[1], v[2], v[3]);
    o[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void store8(u16* out, const u16 v[8]) {
    *reinterpret_cast<uint4*>(out) =
        make_uint4(v[0] | ((u32)v[1] << 16), v[2] | ((u32)v[3] << 16),
                   v[4] | ((u32)v[5] << 16), v[6] | ((u32)v[7] << 16));
}

template <typename W, W ONE>
__device__ __forceinline__ void unpack_impl(const u8* __restrict__ in, u64 n, W* __restrict__ out) {
    const u64 nbytes = (n + 7) >> 3;
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 b = blockIdx.x * (u64)blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const u32 byte = in[b];
        const u64 i0 = b * 8;
        if (i0 + 8 <= n) {
            W v[8];
#pragma unroll
            for (u32 k = 0; k < 8; ++k) {
                v[k] = ((byte >> k) & 1u) ? ONE : (W)0;
            }
            store8(out + i0, v);
        } else {
            for (u32 k = 0; i0 + k < n; ++k) {
                out[i0 + k] = ((byte >> k) & 1u) ? ONE : (W)0;
            }
        }
    }
}

extern "C" __global__ void bitspike_pack_f32(const u32* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u32, 0x7FFFFFFFu, 0x3F800000u>(x, n, out, check, first_bad);
}
extern "C" __global__ void bitspike_pack_f16(const u16* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u16, (u16)0x7FFF, (u16)0x3C00>(x, n, out, check, first_bad);
}
extern "C" __global__ void bitspike_pack_bf16(const u16* x, u64 n, u8* out, int check, u64* first_bad) {
    pack_impl<u16, (u16)0x7FFF, (u16)0x3F80>(x, n, out, check, first_bad);
}
extern "C" __global__ void bitspike_unpack_f32(const u8* in, u64 n, u32* out) {
    unpack_impl<u32, 0x3F800000u>(in, n, out);
}
extern "C" __global__ void bitspike_unpack_f16(const u8* in, u64 n, u16* out) {
    unpack_impl<u16, (u16)0x3C00>(in, n, out);
}
extern "C" __global__ void bitspike_unpack_bf16(const u8* in, u64 n, u16* out) {
    unpack_impl<u16, (u16)0x3F80>(in, n, out);
}

// Values first .. first + n of the bit stream `in` (bit j is bit j % 8 of byte j / 8) as f32,
// for spans that do not start on a byte (a time step of a layer's packed input whose step size
// is not a multiple of 8): one thread per value, grid-stride.
extern "C" __global__ void bitspike_unpack_span_f32(const u8* __restrict__ in, u64 first, u64 n,
                                                    u32* __restrict__ out) {
    const u64 stride = gridDim.x * (u64)blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        const u64 j = first + i;
        out[i] = ((in[j >> 3] >> (j & 7u)) & 1u) ? 0x3F800000u : 0u;
    }
}

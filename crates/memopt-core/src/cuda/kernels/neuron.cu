// Multi-step IF / LIF / PLIF neurons (kernels/neuron/): one kernel over all T, the membrane
// state (forward) or its gradient (backward) in registers, the arithmetic of the CPU kernel in
// the same order (compiled with --fmad=false, so results are bit-identical).
//
// Forward, per neuron i (x, spikes, h_seq are [T, n]; states [n]):
//   H = charge(V, X[t]); S = H >= vth; V = reset(H, S); h_seq[t] = H; spikes[t] = S.
// With h_seq == x (in place), each potential overwrites the input it was charged from. A null
// h_seq keeps no potentials; a null spikes writes no spikes (a forward for backward only).

enum { CHARGE_IF = 0, CHARGE_DECAY = 1, CHARGE_NO_DECAY = 2 };

template <int CHARGE>
__device__ __forceinline__ float charge(float v, float x, float k, float vr) {
    if (CHARGE == CHARGE_IF) return x + v;
    if (CHARGE == CHARGE_DECAY) return (x - (v - vr)) * k + v;
    return (x - k * (v - vr)) + v;
}

__device__ __forceinline__ float fire(float h, float vth) { return h >= vth ? 1.0f : 0.0f; }

template <bool HARD>
__device__ __forceinline__ float reset(float h, float s, float vth, float vr) {
    return HARD ? h * (1.0f - s) + vr * s : h - vth * s;
}

template <int CHARGE, bool HARD>
__device__ __forceinline__ void forward(const float* x, u64 steps, u64 n, const float* v_init,
                                        float k, float vr, float vth, float* spikes, float* h_seq,
                                        float* v_final) {
    FOR_EACH(i, n) {
        float v = v_init ? v_init[i] : vr;
        for (u64 t = 0; t < steps; ++t) {
            const u64 at = t * n + i;
            const float h = charge<CHARGE>(v, x[at], k, vr);
            const float s = fire(h, vth);
            if (h_seq) h_seq[at] = h;
            if (spikes) spikes[at] = s;
            v = reset<HARD>(h, s, vth, vr);
        }
        v_final[i] = v;
    }
}

#define NEURON_FORWARD(name, CHARGE, HARD)                                                     \
    extern "C" __global__ void name(const float* x, u64 steps, u64 n, const float* v_init,    \
                                    float k, float vr, float vth, float* spikes, float* h_seq, \
                                    float* v_final) {                                          \
        forward<CHARGE, HARD>(x, steps, n, v_init, k, vr, vth, spikes, h_seq, v_final);        \
    }
NEURON_FORWARD(neuron_forward_if_hard, CHARGE_IF, true)
NEURON_FORWARD(neuron_forward_if_soft, CHARGE_IF, false)
NEURON_FORWARD(neuron_forward_decay_hard, CHARGE_DECAY, true)
NEURON_FORWARD(neuron_forward_decay_soft, CHARGE_DECAY, false)
NEURON_FORWARD(neuron_forward_nodecay_hard, CHARGE_NO_DECAY, true)
NEURON_FORWARD(neuron_forward_nodecay_soft, CHARGE_NO_DECAY, false)

// --- surrogates (neuron/surrogate.rs), bit for bit ---

// exp(x) for x <= 0 (below -87 clamped to -87): Cody-Waite reduction with fused multiply-adds
// and a degree-6 polynomial, each step one IEEE operation as in surrogate.rs (explicit fmaf
// calls are fused under --fmad=false too, and round once as Rust's mul_add does).
__device__ __forceinline__ float exp_nonpositive(float x) {
    const float LOG2E = 1.44269502f;
    const float SHIFT = 12582912.0f;
    const float LN2_HI = 0.693359375f;
    const float LN2_LO = -2.12194440e-4f;
    // The lower clamp only (callers pass -|y|); NaN compares false and passes through.
    x = x < -87.0f ? -87.0f : x;
    const float shifted = fmaf(x, LOG2E, SHIFT);
    const float nf = shifted - SHIFT;
    float r = fmaf(nf, -LN2_HI, x);
    r = fmaf(nf, -LN2_LO, r);
    float p = 1.3933642e-3f;
    p = fmaf(p, r, 8.369149e-3f);
    p = fmaf(p, r, 4.1666467e-2f);
    p = fmaf(p, r, 0.16666505f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    const float e_r = fmaf(p, r, 1.0f);
    const int n_int = (int)(__float_as_uint(shifted) - __float_as_uint(SHIFT));
    return e_r * __uint_as_float((u32)(n_int + 127) << 23);
}

enum { SG_SIGMOID = 0, SG_ATAN = 1 };

template <int SG>
__device__ __forceinline__ float surrogate(float alpha, float x) {
    if (SG == SG_SIGMOID) {
        const float e = exp_nonpositive(-fabsf(alpha * x));
        const float d = 1.0f + e;
        return alpha * e / (d * d);
    }
    const float u = 1.57079637f * alpha * x;  // FRAC_PI_2 as f32
    return alpha * 0.5f / (1.0f + u * u);
}

// --- backward through time ---

enum { DECAY_GRAD_NONE = 0, DECAY_GRAD_INPUT = 1, DECAY_GRAD_NO_INPUT = 2 };

struct NeuronBackwardConsts {
    float dh_dv, dh_dx, vth, vr, reset_grad, k, alpha;
};

template <bool HARD>
__device__ __forceinline__ float grad_h(float gv, float gs, float h, float sg,
                                        const NeuronBackwardConsts& c) {
    const float dv_dh = HARD ? (1.0f - fire(h, c.vth)) + (c.vr - h) * sg * c.reset_grad
                             : 1.0f - c.vth * sg * c.reset_grad;
    return gv * dv_dh + gs * sg;
}

template <int DG>
__device__ __forceinline__ float dh_dk(float h, float vprev, const NeuronBackwardConsts& c) {
    if (DG == DECAY_GRAD_INPUT) return (h - vprev) / c.k;
    if (DG == DECAY_GRAD_NO_INPUT) return c.vr - vprev;
    return 0.0f;
}

// IF and LIF: one thread per neuron, t from T-1 down to 0. grad_x may equal grad_spikes (in
// place: each gradient is read just before it is overwritten).
template <bool HARD, int SG>
__device__ __forceinline__ void backward_plain(const float* grad_spikes, const float* grad_v_final,
                                               const float* h_seq, u64 steps, u64 n,
                                               NeuronBackwardConsts c, float* grad_x,
                                               float* grad_v_init) {
    FOR_EACH(i, n) {
        float gv = grad_v_final ? grad_v_final[i] : 0.0f;
        for (u64 t = steps; t-- > 0;) {
            const u64 at = t * n + i;
            const float h = h_seq[at];
            const float gs = grad_spikes[at];
            const float gh = grad_h<HARD>(gv, gs, h, surrogate<SG>(c.alpha, h - c.vth), c);
            grad_x[at] = gh * c.dh_dx;
            gv = gh * c.dh_dv;
        }
        if (grad_v_init) grad_v_init[i] = gv;
    }
}

// PLIF partial sums are per (block of neurons, t): Target::Cuda.neuron_block() = 1024 neurons,
// one thread block of 256 threads x 4 neurons; the CPU sums the same blocks (eight per chunk
// of 8192 neurons, side by side) in the same order, so the PLIF parameter's gradient is bit
// for bit the CPU's.
#define NEURON_CHUNK 1024
#define PLIF_THREADS 256
#define PLIF_PER_THREAD (NEURON_CHUNK / PLIF_THREADS)

// PLIF: one block of 256 threads per chunk of 1024 neurons (launch exactly ceil(n / 1024)
// blocks of 256 threads); neuron start + tid + 256 q is handled by thread tid. Per time step
// the per-neuron dL/dH * dH/dk land in shared memory and thread 0 adds them in neuron order in
// f64 from -0.0, as the CPU does per chunk: partials[chunk * steps + t].
template <bool HARD, int DG, int SG>
__device__ __forceinline__ void backward_plif(const float* grad_spikes, const float* grad_v_final,
                                              const float* h_seq, const float* v_init, u64 steps,
                                              u64 n, NeuronBackwardConsts c, float* grad_x,
                                              float* grad_v_init, float* partials) {
    __shared__ float acc[NEURON_CHUNK];
    const u64 chunk = blockIdx.x;
    const u64 start = chunk * NEURON_CHUNK;
    const u64 len = min((u64)NEURON_CHUNK, n - start);
    float gv[PLIF_PER_THREAD];
#pragma unroll
    for (int q = 0; q < PLIF_PER_THREAD; ++q) {
        const u64 j = threadIdx.x + (u64)PLIF_THREADS * q;
        gv[q] = (j < len && grad_v_final) ? grad_v_final[start + j] : 0.0f;
    }
    for (u64 t = steps; t-- > 0;) {
#pragma unroll
        for (int q = 0; q < PLIF_PER_THREAD; ++q) {
            const u64 j = threadIdx.x + (u64)PLIF_THREADS * q;
            if (j >= len) continue;
            const u64 i = start + j;
            const u64 at = t * n + i;
            float vprev;
            if (t > 0) {
                const float hp = h_seq[at - n];
                vprev = reset<HARD>(hp, fire(hp, c.vth), c.vth, c.vr);
            } else {
                vprev = v_init ? v_init[i] : c.vr;
            }
            const float h = h_seq[at];
            const float gs = grad_spikes[at];
            const float gh = grad_h<HARD>(gv[q], gs, h, surrogate<SG>(c.alpha, h - c.vth), c);
            grad_x[at] = gh * c.dh_dx;
            gv[q] = gh * c.dh_dv;
            acc[j] = gh * dh_dk<DG>(h, vprev, c);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double s = -0.0;
            for (u64 j = 0; j < len; ++j) s += (double)acc[j];
            partials[chunk * steps + t] = (float)s;
        }
        __syncthreads();
    }
    if (grad_v_init) {
#pragma unroll
        for (int q = 0; q < PLIF_PER_THREAD; ++q) {
            const u64 j = threadIdx.x + (u64)PLIF_THREADS * q;
            if (j < len) grad_v_init[start + j] = gv[q];
        }
    }
}

#define NEURON_BACKWARD(name, HARD, SG)                                                         \
    extern "C" __global__ void name(const float* grad_spikes, const float* grad_v_final,       \
                                    const float* h_seq, u64 steps, u64 n,                      \
                                    NeuronBackwardConsts c, float* grad_x, float* grad_v_init) { \
        backward_plain<HARD, SG>(grad_spikes, grad_v_final, h_seq, steps, n, c, grad_x,        \
                                 grad_v_init);                                                 \
    }
NEURON_BACKWARD(neuron_backward_hard_sigmoid, true, SG_SIGMOID)
NEURON_BACKWARD(neuron_backward_soft_sigmoid, false, SG_SIGMOID)
NEURON_BACKWARD(neuron_backward_hard_atan, true, SG_ATAN)
NEURON_BACKWARD(neuron_backward_soft_atan, false, SG_ATAN)

#define PLIF_BACKWARD(name, HARD, DG, SG)                                                       \
    extern "C" __global__ void __launch_bounds__(PLIF_THREADS)                                 \
        name(const float* grad_spikes, const float* grad_v_final, const float* h_seq,          \
             const float* v_init, u64 steps, u64 n, NeuronBackwardConsts c, float* grad_x,     \
             float* grad_v_init, float* partials) {                                            \
        backward_plif<HARD, DG, SG>(grad_spikes, grad_v_final, h_seq, v_init, steps, n, c,     \
                                    grad_x, grad_v_init, partials);                            \
    }
PLIF_BACKWARD(plif_backward_hard_decay_sigmoid, true, DECAY_GRAD_INPUT, SG_SIGMOID)
PLIF_BACKWARD(plif_backward_soft_decay_sigmoid, false, DECAY_GRAD_INPUT, SG_SIGMOID)
PLIF_BACKWARD(plif_backward_hard_nodecay_sigmoid, true, DECAY_GRAD_NO_INPUT, SG_SIGMOID)
PLIF_BACKWARD(plif_backward_soft_nodecay_sigmoid, false, DECAY_GRAD_NO_INPUT, SG_SIGMOID)
PLIF_BACKWARD(plif_backward_hard_decay_atan, true, DECAY_GRAD_INPUT, SG_ATAN)
PLIF_BACKWARD(plif_backward_soft_decay_atan, false, DECAY_GRAD_INPUT, SG_ATAN)
PLIF_BACKWARD(plif_backward_hard_nodecay_atan, true, DECAY_GRAD_NO_INPUT, SG_ATAN)
PLIF_BACKWARD(plif_backward_soft_nodecay_atan, false, DECAY_GRAD_NO_INPUT, SG_ATAN)

// The PLIF parameter's gradient: for t from T-1 down, the chunk partials of step t added in
// chunk order (f64 from -0.0), times dk/dw, rounded and added to gw[0]. One thread.
extern "C" __global__ void plif_w_grad(const float* partials, u64 chunks, u64 steps, float dk_dw,
                                       float* gw) {
    if (global_index() != 0) return;
    for (u64 t = steps; t-- > 0;) {
        double s = -0.0;
        for (u64 ch = 0; ch < chunks; ++ch) s += (double)partials[ch * steps + t];
        gw[0] += (float)(s * (double)dk_dw);
    }
}

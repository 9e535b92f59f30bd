// Optimizer steps in place (kernels/optim.rs), torch.optim semantics, one thread per element.
// Scalars derived in f64 on the host (Adam's step size and sqrt of the bias correction) are
// passed in, computed exactly as the CPU computes them.

extern "C" __global__ void sgd_plain(float* p, const float* g, u64 n, float lr, float wd) {
    FOR_EACH(i, n) {
        const float gi = wd != 0.0f ? g[i] + wd * p[i] : g[i];
        p[i] += -lr * gi;
    }
}

extern "C" __global__ void sgd_momentum(float* p, const float* g, float* buf, u64 n, float lr,
                                        float momentum, float dampening, float wd, int nesterov,
                                        int first_step) {
    const float keep = 1.0f - dampening;
    FOR_EACH(i, n) {
        const float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
        const float b = first_step ? d : buf[i] * momentum + keep * d;
        buf[i] = b;
        const float step = nesterov ? d + momentum * b : b;
        p[i] += -lr * step;
    }
}

// torch.lerp's two-sided formula.
__device__ __forceinline__ float lerp_torch(float start, float end, float weight) {
    return fabsf(weight) < 0.5f ? start + weight * (end - start)
                                : end - (end - start) * (1.0f - weight);
}

extern "C" __global__ void adam(float* p, const float* g, float* m, float* v, u64 n,
                                float step_size, float bc2_sqrt, float beta2, float eps,
                                float wd, float w1, float w2) {
    FOR_EACH(i, n) {
        const float gi = wd != 0.0f ? g[i] + wd * p[i] : g[i];
        const float mi = lerp_torch(m[i], gi, w1);
        const float vi = v[i] * beta2 + w2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = __fsqrt_rn(vi) / bc2_sqrt + eps;
        p[i] += -step_size * (mi / denom);
    }
}

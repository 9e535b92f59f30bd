// Batch normalisation (kernels/batch_norm/): x is B*C contiguous planes of S values, plane p
// belongs to channel p % C. Per-plane f64 sums (group8 order) go to the tracked workspace, then
// per channel they are added in batch order from +0.0, exactly as the CPU.

// part[p] = sum of the plane (mean == null) or of (x - mean[p % C])^2 (f64).
extern "C" __global__ void bn_plane_sums(const float* x, u64 planes, u64 s, u64 c,
                                         const double* mean, double* part) {
    FOR_EACH_GROUP8(p, planes) {
        const u64 len = p < planes ? s : 0;
        const float* xp = x + p * s;
        double v;
        if (mean == nullptr) {
            v = group8_sum(len, [&](u64 i) { return (double)xp[i]; });
        } else {
            const double mu = p < planes ? mean[p % c] : 0.0;
            v = group8_sum(len, [&](u64 i) {
                const double d = (double)xp[i] - mu;
                return d * d;
            });
        }
        if (p < planes && (threadIdx.x & 7u) == 0) {
            part[p] = v;
        }
    }
}

// out[ch] = (sum over b of part[(b*C + ch) * stride + lane], from +0.0 in batch order) / m;
// `stride`/`lane` select one of interleaved sums (1/0 for forward, 2/0 or 2/1 for backward).
// `m` = 0 means "do not divide".
extern "C" __global__ void bn_channel_sums(const double* part, u64 b, u64 c, u64 stride, u64 lane,
                                           double m, double* out) {
    FOR_EACH(ch, c) {
        double acc = 0.0;
        for (u64 r = 0; r < b; ++r) {
            acc += part[(r * c + ch) * stride + lane];
        }
        out[ch] = m != 0.0 ? acc / m : acc;
    }
}

// Saved statistics and the running-statistics update (running_mean == null: none).
extern "C" __global__ void bn_finish(const double* mean, const double* var, u64 c, float eps,
                                     float* save_mean, float* save_invstd, float* running_mean,
                                     float* running_var, float momentum, double unbias) {
    FOR_EACH(ch, c) {
        save_mean[ch] = (float)mean[ch];
        save_invstd[ch] = (float)(1.0 / sqrt(var[ch] + (double)eps));
        if (running_mean != nullptr) {
            const double mo = (double)momentum;
            running_mean[ch] = (float)((1.0 - mo) * (double)running_mean[ch] + mo * mean[ch]);
            running_var[ch] =
                (float)((1.0 - mo) * (double)running_var[ch] + mo * var[ch] * unbias);
        }
    }
}

// y = (x - mean) * (invstd * weight) + bias (weight/bias null: 1/0).
extern "C" __global__ void bn_normalize(const float* x, u64 planes, u64 s, u64 c,
                                        const float* save_mean, const float* save_invstd,
                                        const float* weight, const float* bias, float* y) {
    FOR_EACH(i, planes * s) {
        const u64 ch = (i / s) % c;
        const float scale = save_invstd[ch] * (weight ? weight[ch] : 1.0f);
        const float shift = bias ? bias[ch] : 0.0f;
        y[i] = (x[i] - save_mean[ch]) * scale + shift;
    }
}

// Evaluation mode: running statistics, the scale computed in f64 as on the CPU.
extern "C" __global__ void bn_eval(const float* x, u64 planes, u64 s, u64 c,
                                   const float* running_mean, const float* running_var,
                                   const float* weight, const float* bias, float eps, float* y) {
    FOR_EACH(i, planes * s) {
        const u64 ch = (i / s) % c;
        const double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
        const float scale = (float)(invstd * (double)(weight ? weight[ch] : 1.0f));
        const float shift = bias ? bias[ch] : 0.0f;
        y[i] = (x[i] - running_mean[ch]) * scale + shift;
    }
}

// Backward, per plane: part[2p] = sum g, part[2p+1] = sum g * (x - mean) (sum_zip_f64 order).
extern "C" __global__ void bn_backward_plane_sums(const float* g, const float* x, u64 planes, u64 s,
                                                  u64 c, const float* save_mean, double* part) {
    FOR_EACH_GROUP8(p, planes) {
        const u64 len = p < planes ? s : 0;
        const float* gp = g + p * s;
        const float* xp = x + p * s;
        const double mu = p < planes ? (double)save_mean[p % c] : 0.0;
        const double sg = group8_sum(len, [&](u64 i) { return (double)gp[i]; });
        const double dot =
            group8_sum(len, [&](u64 i) { return (double)gp[i] * ((double)xp[i] - mu); });
        if (p < planes && (threadIdx.x & 7u) == 0) {
            part[2 * p] = sg;
            part[2 * p + 1] = dot;
        }
    }
}

// Weight and bias gradients from the per-channel sums (either may be null).
extern "C" __global__ void bn_param_grads(const double* sum_g, const double* dot, u64 c,
                                          const float* save_invstd, float* grad_weight,
                                          float* grad_bias) {
    FOR_EACH(ch, c) {
        if (grad_bias) grad_bias[ch] = (float)sum_g[ch];
        if (grad_weight) grad_weight[ch] = (float)(dot[ch] * (double)save_invstd[ch]);
    }
}

// Input gradient; gx may be g itself (written over the output gradient, element by element).
extern "C" __global__ void bn_backward_input(const float* g, const float* x, u64 planes, u64 s,
                                             u64 c, const float* save_mean,
                                             const float* save_invstd, const float* weight,
                                             const double* sum_g, const double* dot, double m,
                                             float* gx) {
    FOR_EACH(i, planes * s) {
        const u64 ch = (i / s) % c;
        const double invstd = (double)save_invstd[ch];
        const float a = (float)(invstd * (double)(weight ? weight[ch] : 1.0f));
        const float mean_g = (float)(sum_g[ch] / m);
        const float k = (float)(dot[ch] * invstd * invstd / m);
        gx[i] = a * (g[i] - mean_g - (x[i] - save_mean[ch]) * k);
    }
}

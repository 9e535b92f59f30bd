// Batch normalisation (kernels/batch_norm/): x is B*C contiguous planes of S values, plane p
// belongs to channel p % C. Per-plane f64 sums (group8 order) go to the tracked workspace, then
// per channel they are folded one sample after the other onto the running sums, exactly as the
// CPU (kernels/batch_norm/sums.rs): ascending samples for the statistics, descending for the
// backward sums, so a batch folds as its consecutive parts do.

// shift[ch] = the first value of sample 0's plane of channel ch.
extern "C" __global__ void bn_set_shift(const float* x, u64 s, u64 c, double* shift) {
    FOR_EACH(ch, c) {
        shift[ch] = (double)x[ch * s];
    }
}

// part[2p] = sum(x - shift), part[2p+1] = sum((x - shift)^2) over plane p (f64).
extern "C" __global__ void bn_stat_plane_sums(const float* x, u64 planes, u64 s, u64 c,
                                              const double* shift, double* part) {
    FOR_EACH_GROUP8(p, planes) {
        const u64 len = p < planes ? s : 0;
        const float* xp = x + (p < planes ? p * s : 0);
        const double k = p < planes ? shift[p % c] : 0.0;
        const double s1 = group8_sum(len, [&](u64 i) { return (double)xp[i] - k; });
        const double s2 = group8_sum(len, [&](u64 i) {
            const double d = (double)xp[i] - k;
            return d * d;
        });
        if (p < planes && (threadIdx.x & 7u) == 0) {
            part[2 * p] = s1;
            part[2 * p + 1] = s2;
        }
    }
}

// first[ch] += part[2 (r*C + ch)], second[ch] += part[2 (r*C + ch) + 1] for the b samples r,
// ascending or (descending != 0) descending; from_zero != 0 starts from +0.0 instead of the
// current sums.
extern "C" __global__ void bn_fold_pairs(const double* part, u64 b, u64 c, u64 descending,
                                         u64 from_zero, double* first, double* second) {
    FOR_EACH(ch, c) {
        double a0 = from_zero ? 0.0 : first[ch];
        double a1 = from_zero ? 0.0 : second[ch];
        for (u64 i = 0; i < b; ++i) {
            const u64 r = descending ? b - 1 - i : i;
            a0 += part[2 * (r * c + ch)];
            a1 += part[2 * (r * c + ch) + 1];
        }
        first[ch] = a0;
        second[ch] = a1;
    }
}

// Saved statistics from the shifted sums over m values, and the running-statistics update
// (running_mean == null: none).
extern "C" __global__ void bn_finish(const double* shift, const double* s1, const double* s2, u64 c,
                                     double m, float eps, float* save_mean, float* save_invstd,
                                     float* running_mean, float* running_var, float momentum) {
    FOR_EACH(ch, c) {
        const double d = s1[ch] / m;
        const double mean = shift[ch] + d;
        const double var = fmax(s2[ch] / m - d * d, 0.0);
        save_mean[ch] = (float)mean;
        save_invstd[ch] = (float)(1.0 / sqrt(var + (double)eps));
        if (running_mean != nullptr) {
            const double mo = (double)momentum;
            const double unbias = m / (m - 1.0);
            running_mean[ch] = (float)((1.0 - mo) * (double)running_mean[ch] + mo * mean);
            running_var[ch] =
                (float)((1.0 - mo) * (double)running_var[ch] + mo * var * unbias);
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

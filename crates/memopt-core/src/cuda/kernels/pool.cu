// 2-D pooling over [B, C, H, W] planes (kernels/pool/), floor mode, PyTorch semantics. Forward:
// one thread per output value. Backward: where windows overlap, every input value adds its
// contributions in the CPU's order (output row-major), so results are bit-identical.

// Window of output position o along one axis: in-bounds [lo, hi) and the padded size.
__device__ __forceinline__ void pool_window(i64 o, i64 k, i64 s, i64 p, i64 n, i64* lo, i64* hi,
                                            i64* padded) {
    const i64 start = o * s - p;
    const i64 end_padded = min(start + k, n + p);
    *lo = max(start, (i64)0);
    *hi = min(start + k, n);
    *padded = end_padded - start;
}

struct PoolGeom {
    u64 planes, h, w, oh, ow;
    i64 kh, kw, sh, sw, ph, pw;
};

// Max pooling with the argmax index in the plane: starts from -inf at the window's first
// in-bounds position, visits the window row-major, takes v when v > best or v is NaN.
extern "C" __global__ void max_pool2d(const float* x, PoolGeom g, float* y, u32* idx) {
    FOR_EACH(i, g.planes * g.oh * g.ow) {
        const u64 plane = i / (g.oh * g.ow);
        const i64 oy = (i / g.ow) % g.oh, ox = i % g.ow;
        i64 h0, h1, w0, w1, pad;
        pool_window(oy, g.kh, g.sh, g.ph, g.h, &h0, &h1, &pad);
        pool_window(ox, g.kw, g.sw, g.pw, g.w, &w0, &w1, &pad);
        const float* xp = x + plane * g.h * g.w;
        float best = -F32_INFINITY;
        u32 at = (u32)(h0 * g.w + w0);
        for (i64 hh = h0; hh < h1; ++hh) {
            for (i64 ww = w0; ww < w1; ++ww) {
                const float v = xp[hh * g.w + ww];
                if (v > best || v != v) {
                    best = v;
                    at = (u32)(hh * g.w + ww);
                }
            }
        }
        y[i] = best;
        idx[i] = at;
    }
}

// Backward of max pooling: one thread per plane zeroes its input-gradient plane and adds each
// output gradient at its index, in output order (indices are checked on the host).
extern "C" __global__ void max_pool2d_backward(const float* gy, const u32* idx, u64 planes,
                                               u64 in_plane, u64 out_plane, float* gx) {
    FOR_EACH(p, planes) {
        float* o = gx + p * in_plane;
        for (u64 j = 0; j < in_plane; ++j) o[j] = 0.0f;
        const float* gp = gy + p * out_plane;
        const u32* ip = idx + p * out_plane;
        for (u64 j = 0; j < out_plane; ++j) o[ip[j]] += gp[j];
    }
}

// Sum of the in-bounds window, f64: each window row summed from -0.0 and added to +0.0.
__device__ __forceinline__ double window_sum(const float* xp, u64 w, i64 h0, i64 h1, i64 w0,
                                             i64 w1) {
    double sum = 0.0;
    for (i64 hh = h0; hh < h1; ++hh) {
        double row = -0.0;
        for (i64 ww = w0; ww < w1; ++ww) row += (double)xp[hh * w + ww];
        sum += row;
    }
    return sum;
}

extern "C" __global__ void avg_pool2d(const float* x, PoolGeom g, int count_include_pad,
                                      float* y) {
    FOR_EACH(i, g.planes * g.oh * g.ow) {
        const u64 plane = i / (g.oh * g.ow);
        const i64 oy = (i / g.ow) % g.oh, ox = i % g.ow;
        i64 h0, h1, hp, w0, w1, wp;
        pool_window(oy, g.kh, g.sh, g.ph, g.h, &h0, &h1, &hp);
        pool_window(ox, g.kw, g.sw, g.pw, g.w, &w0, &w1, &wp);
        const double div = count_include_pad ? (double)(hp * wp) : (double)((h1 - h0) * (w1 - w0));
        y[i] = (float)(window_sum(x + plane * g.h * g.w, g.w, h0, h1, w0, w1) / div);
    }
}

// Output positions along one axis whose window contains input position t: [first, last].
__device__ __forceinline__ void covering(i64 t, i64 k, i64 s, i64 p, i64 out, i64* first,
                                         i64* last) {
    // o*s - p <= t < o*s - p + k  <=>  (t + p - k) / s < o <= (t + p) / s
    const i64 hi = (t + p) / s;
    const i64 num = t + p - k + 1;
    const i64 lo = num <= 0 ? 0 : (num + s - 1) / s;
    *first = lo;
    *last = min(hi, out - 1);
}

// Backward of average pooling: each input value gathers (g / divisor) rounded to f32 from the
// windows covering it, in output row-major order, from +0.0.
extern "C" __global__ void avg_pool2d_backward(const float* gy, PoolGeom g, int count_include_pad,
                                               float* gx) {
    FOR_EACH(i, g.planes * g.h * g.w) {
        const u64 plane = i / (g.h * g.w);
        const i64 iy = (i / g.w) % g.h, ix = i % g.w;
        i64 oy0, oy1, ox0, ox1;
        covering(iy, g.kh, g.sh, g.ph, g.oh, &oy0, &oy1);
        covering(ix, g.kw, g.sw, g.pw, g.ow, &ox0, &ox1);
        const float* gp = gy + plane * g.oh * g.ow;
        float acc = 0.0f;
        for (i64 oy = oy0; oy <= oy1; ++oy) {
            i64 h0, h1, hp;
            pool_window(oy, g.kh, g.sh, g.ph, g.h, &h0, &h1, &hp);
            for (i64 ox = ox0; ox <= ox1; ++ox) {
                i64 w0, w1, wp;
                pool_window(ox, g.kw, g.sw, g.pw, g.w, &w0, &w1, &wp);
                const double div =
                    count_include_pad ? (double)(hp * wp) : (double)((h1 - h0) * (w1 - w0));
                acc += (float)((double)gp[oy * g.ow + ox] / div);
            }
        }
        gx[i] = acc;
    }
}

// Adaptive window [i*n/out, ceil((i+1)*n/out)).
__device__ __forceinline__ void adaptive_window(u64 i, u64 n, u64 out, u64* lo, u64* hi) {
    *lo = i * n / out;
    *hi = ((i + 1) * n + out - 1) / out;
}

extern "C" __global__ void adaptive_avg_pool2d(const float* x, u64 planes, u64 h, u64 w, u64 oh,
                                               u64 ow, float* y) {
    FOR_EACH(i, planes * oh * ow) {
        const u64 plane = i / (oh * ow);
        const u64 oy = (i / ow) % oh, ox = i % ow;
        u64 h0, h1, w0, w1;
        adaptive_window(oy, h, oh, &h0, &h1);
        adaptive_window(ox, w, ow, &w0, &w1);
        const double s = window_sum(x + plane * h * w, w, (i64)h0, (i64)h1, (i64)w0, (i64)w1);
        y[i] = (float)(s / (double)((h1 - h0) * (w1 - w0)));
    }
}

// Backward: gathers over the adaptive windows covering each input value, in output order.
// Windows of consecutive outputs are monotone, so the covering outputs are a contiguous range;
// each candidate is checked against its window.
extern "C" __global__ void adaptive_avg_pool2d_backward(const float* gy, u64 planes, u64 h, u64 w,
                                                        u64 oh, u64 ow, float* gx) {
    FOR_EACH(i, planes * h * w) {
        const u64 plane = i / (h * w);
        const u64 iy = (i / w) % h, ix = i % w;
        // First output whose window may contain iy: floor(iy * oh / h) - 1 at most one before.
        const u64 oy_from = iy * oh / h > 0 ? iy * oh / h - 1 : 0;
        const u64 ox_from = ix * ow / w > 0 ? ix * ow / w - 1 : 0;
        const float* gp = gy + plane * oh * ow;
        float acc = 0.0f;
        for (u64 oy = oy_from; oy < oh; ++oy) {
            u64 h0, h1;
            adaptive_window(oy, h, oh, &h0, &h1);
            if (h0 > iy) break;
            if (iy >= h1) continue;
            for (u64 ox = ox_from; ox < ow; ++ox) {
                u64 w0, w1;
                adaptive_window(ox, w, ow, &w0, &w1);
                if (w0 > ix) break;
                if (ix >= w1) continue;
                acc += (float)((double)gp[oy * ow + ox] / (double)((h1 - h0) * (w1 - w0)));
            }
        }
        gx[i] = acc;
    }
}

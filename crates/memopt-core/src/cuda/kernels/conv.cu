// Convolution helpers around the cuBLAS GEMMs (kernels/conv/): im2col, col2im, the staging
// transposes of chunked images, bias fills and bias gradients; linear's column sums.
//
// The column matrix of n images has C*KH*KW rows; row (ci, i, j) holds the input under tap
// (i, j) of channel ci for every output pixel of every image (column img*HO*WO + oy*WO + ox),
// zero in the padding.

struct ConvGeom {
    u64 c, h, w, kh, kw, ho, wo;
    i64 sh, sw, ph, pw, dh, dw;
};

extern "C" __global__ void im2col(const float* x, ConvGeom g, u64 n, float* col) {
    const u64 pix = g.ho * g.wo, ncols = n * pix, taps = g.kh * g.kw;
    FOR_EACH(idx, g.c * taps * ncols) {
        const u64 r = idx / ncols, q = idx % ncols;
        const u64 ci = r / taps, t = r % taps;
        const u64 img = q / pix, oy = (q % pix) / g.wo, ox = q % g.wo;
        const i64 iy = (i64)oy * g.sh + (i64)(t / g.kw) * g.dh - g.ph;
        const i64 ix = (i64)ox * g.sw + (i64)(t % g.kw) * g.dw - g.pw;
        float v = 0.0f;
        if (iy >= 0 && iy < (i64)g.h && ix >= 0 && ix < (i64)g.w) {
            v = x[((img * g.c + ci) * g.h + iy) * g.w + ix];
        }
        col[idx] = v;
    }
}

// Adjoint of im2col: each input value gathers its taps in tap order from +0.0 (the CPU's
// scatter order: taps outer, one contribution per tap).
extern "C" __global__ void col2im(const float* col, ConvGeom g, u64 n, float* gx) {
    const u64 pix = g.ho * g.wo, ncols = n * pix, taps = g.kh * g.kw;
    FOR_EACH(idx, n * g.c * g.h * g.w) {
        const u64 plane = idx / (g.h * g.w);
        const u64 img = plane / g.c, ci = plane % g.c;
        const i64 iy = (idx / g.w) % g.h, ix = idx % g.w;
        float acc = 0.0f;
        for (u64 t = 0; t < taps; ++t) {
            const i64 ny = iy + g.ph - (i64)(t / g.kw) * g.dh;
            const i64 nx = ix + g.pw - (i64)(t % g.kw) * g.dw;
            if (ny < 0 || nx < 0 || ny % g.sh != 0 || nx % g.sw != 0) continue;
            const i64 oy = ny / g.sh, ox = nx / g.sw;
            if (oy >= (i64)g.ho || ox >= (i64)g.wo) continue;
            acc += col[(ci * taps + t) * ncols + img * pix + oy * g.wo + ox];
        }
        gx[idx] = acc;
    }
}

// [n, co, pix] images -> [co, n * pix] staging matrix (the output gradient of a chunk).
extern "C" __global__ void stage_grad(const float* grad, u64 n, u64 co, u64 pix, float* stage) {
    FOR_EACH(idx, n * co * pix) {
        const u64 ch = idx / (n * pix), img = (idx / pix) % n, q = idx % pix;
        stage[idx] = grad[(img * co + ch) * pix + q];
    }
}

// [co, n * pix] staging matrix -> [n, co, pix] output, plus the bias (null: none).
extern "C" __global__ void unstage(const float* stage, u64 n, u64 co, u64 pix, const float* bias,
                                   float* out) {
    FOR_EACH(idx, n * co * pix) {
        const u64 img = idx / (co * pix), ch = (idx / pix) % co, q = idx % pix;
        const float s = stage[ch * n * pix + img * pix + q];
        out[idx] = bias ? s + bias[ch] : s;
    }
}

// Rows of `len` values, row r filled with bias[r % channels] (before a GEMM with beta = 1).
extern "C" __global__ void fill_bias_rows(float* dst, u64 rows, u64 len, const float* bias,
                                          u64 channels) {
    FOR_EACH(idx, rows * len) { dst[idx] = bias[(idx / len) % channels]; }
}

// conv bias gradient: gb[c] = sum over images b of (sum of plane (b, c) from -0.0), from +0.0;
// with `accumulate`, added to gb (the accumulator of the time-step loop, as f32 after rounding).
extern "C" __global__ void conv_bias_grad(const float* grad, u64 b, u64 co, u64 pix, float* gb,
                                          int accumulate) {
    FOR_EACH(ch, co) {
        double acc = 0.0;
        for (u64 img = 0; img < b; ++img) {
            const float* plane = grad + (img * co + ch) * pix;
            acc += seq_sum(pix, [&](u64 i) { return (double)plane[i]; });
        }
        gb[ch] = accumulate ? gb[ch] + (float)acc : (float)acc;
    }
}

// linear bias gradient: out[j] = sum over rows of src[r, j] from +0.0 in row order; with
// `accumulate`, added to out after rounding to f32.
extern "C" __global__ void column_sums(const float* src, u64 rows, u64 cols, float* out,
                                       int accumulate) {
    FOR_EACH(j, cols) {
        double acc = 0.0;
        for (u64 r = 0; r < rows; ++r) acc += (double)src[r * cols + j];
        out[j] = accumulate ? out[j] + (float)acc : (float)acc;
    }
}

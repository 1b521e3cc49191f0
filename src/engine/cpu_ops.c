/* cpu_ops: the CPU reference kernels. Plain loops, and OpenBLAS for every
 * matrix product. See cpu_ops.h. */
#include "engine/cpu_ops.h"

#include <assert.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

const float cpu_imagenet_mean[3] = { 0.485f, 0.456f, 0.406f };
const float cpu_imagenet_std[3] = { 0.229f, 0.224f, 0.225f };

void cpu_conv_shape_finish(cpu_conv_shape_t *s) {
        s->ho = (s->h + 2 * s->pad - s->kh) / s->stride + 1;
        s->wo = (s->w + 2 * s->pad - s->kw) / s->stride + 1;
}

static int cpu_conv_is_pointwise(const cpu_conv_shape_t *s) {
        return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
}

static size_t cpu_conv_col_elems_per_sample(const cpu_conv_shape_t *s) {
        return (size_t)s->ho * s->wo * s->kh * s->kw * s->cin;
}

size_t cpu_conv2d_workspace_elems(const cpu_conv_shape_t *s, int samples_per_chunk) {
        if (cpu_conv_is_pointwise(s))
                return 0;
        return (size_t)samples_per_chunk * cpu_conv_col_elems_per_sample(s);
}

int cpu_conv2d_chunk_samples(const cpu_conv_shape_t *s, size_t cap_elems) {
        size_t per = cpu_conv_col_elems_per_sample(s), g = per ? cap_elems / per : (size_t)s->n;

        if (g < 1)
                g = 1;
        if (g > (size_t)s->n)
                g = (size_t)s->n;
        return (int)g;
}

void cpu_im2col(const cpu_conv_shape_t *s, const float *in, float *col) {
        size_t row_len = (size_t)s->kh * s->kw * s->cin;

        for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                        float *row = col + ((size_t)oy * s->wo + ox) * row_len;

                        for (int ky = 0; ky < s->kh; ky++) {
                                int iy = oy * s->stride - s->pad + ky;

                                for (int kx = 0; kx < s->kw; kx++) {
                                        int ix = ox * s->stride - s->pad + kx;
                                        float *dst = row + ((size_t)ky * s->kw + kx) * s->cin;

                                        if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                                memset(dst, 0, (size_t)s->cin * sizeof(float));
                                        else
                                                memcpy(dst, in + ((size_t)iy * s->w + ix) * s->cin,
                                                       (size_t)s->cin * sizeof(float));
                                }
                        }
                }
}

/* The GEMM's C matrix before it accumulates: out (rows, cout) = bias
 * broadcast, plus the residual when there is one. Adding them here, in the
 * one pass that must write C anyway, leaves only the ReLU for afterwards. */
static void cpu_gemm_init(size_t rows, int cout, const float *bias, const float *residual, float *out) {
        for (size_t r = 0; r < rows; r++) {
                float *o = out + r * (size_t)cout;

                if (residual) {
                        const float *res = residual + r * (size_t)cout;

                        for (int c = 0; c < cout; c++)
                                o[c] = res[c] + bias[c];
                } else {
                        memcpy(o, bias, (size_t)cout * sizeof(float));
                }
        }
}

static void cpu_relu(size_t n, float *x) {
        for (size_t i = 0; i < n; i++)
                x[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void cpu_conv2d(const cpu_conv_shape_t *s, const float *in, const float *w, const float *bias,
                const float *residual, int relu, float *out, float *workspace, size_t workspace_elems) {
        size_t rows_per_sample = (size_t)s->ho * s->wo, k = (size_t)s->kh * s->kw * s->cin;
        size_t in_per_sample = (size_t)s->h * s->w * s->cin, out_per_sample = rows_per_sample * s->cout;

        assert(out != in && (!residual || out != residual));
        /* out = bias + residual, then the GEMM accumulates into it (beta = 1). */
        cpu_gemm_init((size_t)s->n * rows_per_sample, s->cout, bias, residual, out);
        if (cpu_conv_is_pointwise(s)) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)((size_t)s->n * rows_per_sample), s->cout,
                            s->cin, 1.0f, in, s->cin, w, s->cin, 1.0f, out, s->cout);
        } else {
                int chunk = cpu_conv2d_chunk_samples(s, workspace_elems);

                assert(cpu_conv2d_workspace_elems(s, chunk) <= workspace_elems);
                for (int n0 = 0; n0 < s->n; n0 += chunk) {
                        int g = s->n - n0 < chunk ? s->n - n0 : chunk;

                        for (int i = 0; i < g; i++)
                                cpu_im2col(s, in + (size_t)(n0 + i) * in_per_sample,
                                           workspace + (size_t)i * rows_per_sample * k);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(g * rows_per_sample), s->cout,
                                    (int)k, 1.0f, workspace, (int)k, w, (int)k, 1.0f,
                                    out + (size_t)n0 * out_per_sample, s->cout);
                }
        }
        if (relu)
                cpu_relu((size_t)s->n * out_per_sample, out);
}

void cpu_maxpool(const cpu_conv_shape_t *s, const float *in, float *out) {
        assert(s->cout == s->cin);
        for (int n = 0; n < s->n; n++)
                for (int oy = 0; oy < s->ho; oy++)
                        for (int ox = 0; ox < s->wo; ox++) {
                                float *o = out + (((size_t)n * s->ho + oy) * s->wo + ox) * s->cin;

                                for (int c = 0; c < s->cin; c++)
                                        o[c] = -FLT_MAX;
                                for (int ky = 0; ky < s->kh; ky++) {
                                        int iy = oy * s->stride - s->pad + ky;

                                        if (iy < 0 || iy >= s->h)
                                                continue;
                                        for (int kx = 0; kx < s->kw; kx++) {
                                                int ix = ox * s->stride - s->pad + kx;
                                                const float *p;

                                                if (ix < 0 || ix >= s->w)
                                                        continue;
                                                p = in + (((size_t)n * s->h + iy) * s->w + ix) * s->cin;
                                                for (int c = 0; c < s->cin; c++)
                                                        if (p[c] > o[c])
                                                                o[c] = p[c];
                                        }
                                }
                        }
}

void cpu_global_avgpool(int n, int h, int w, int c, const float *in, float *out) {
        size_t hw = (size_t)h * w;

        for (int b = 0; b < n; b++) {
                const float *p = in + (size_t)b * hw * c;
                float *o = out + (size_t)b * c;

                for (int ch = 0; ch < c; ch++)
                        o[ch] = 0.0f;
                for (size_t i = 0; i < hw; i++)
                        for (int ch = 0; ch < c; ch++)
                                o[ch] += p[i * c + ch];
                for (int ch = 0; ch < c; ch++)
                        o[ch] /= (float)hw;
        }
}

void cpu_fc(int n, int k, int m, const float *in, const float *w, const float *bias, float *out) {
        cpu_gemm_init((size_t)n, m, bias, NULL, out);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, in, k, w, k, 1.0f, out, m);
}

void cpu_softmax(int n, int m, const float *in, float *out) {
        for (int b = 0; b < n; b++) {
                const float *x = in + (size_t)b * m;
                float *y = out + (size_t)b * m, mx = x[0];
                double sum = 0.0;

                for (int i = 1; i < m; i++)
                        if (x[i] > mx)
                                mx = x[i];
                for (int i = 0; i < m; i++) {
                        y[i] = expf(x[i] - mx);
                        sum += y[i];
                }
                for (int i = 0; i < m; i++)
                        y[i] = (float)(y[i] / sum);
        }
}

int cpu_head_row(const float *logits, int classes, int k, engine_topk_t *out) {
        float mx = -INFINITY, sum = 0.0f;
        double dsum = 0.0;

        for (int i = 0; i < classes; i++)
                mx = fmaxf(mx, logits[i]);
        for (int i = 0; i < classes; i++)
                sum += expf(logits[i] - mx);
        if (!isfinite(mx) || !isfinite(sum)) {
                for (int j = 0; j < k; j++)
                        out[j] = (engine_topk_t){ .cls = ENGINE_TOPK_NONFINITE, .score = NAN };
                return 0;
        }
        /* Softmax is monotonic: rank the probabilities as cpu_softmax gives
         * them, without a (classes) buffer, by ranking expf(x - max) (the
         * same order, the same ties) and dividing the k winners by the sum. */
        for (int i = 0; i < classes; i++)
                dsum += expf(logits[i] - mx);
        cpu_topk_map(classes, k, logits, mx, out);
        for (int j = 0; j < k; j++)
                out[j].score = (float)(out[j].score / dsum);
        return 1;
}

/* The best k of f(x[i]), f = identity or expf(x[i] - sub): insertion into a
 * sorted list of the best k so far. A later index never displaces an equal
 * value, so ties go to the lower index. */
static void cpu_topk_of(int m, int k, const float *x, int use_exp, float sub, engine_topk_t *out) {
        int n = 0;

        assert(k >= 1 && k <= m);
        for (int i = 0; i < m; i++) {
                float v = use_exp ? expf(x[i] - sub) : x[i];
                int pos;

                if (n == k && !(v > out[k - 1].score))
                        continue;
                pos = n < k ? n++ : k - 1;
                while (pos > 0 && v > out[pos - 1].score) {
                        out[pos] = out[pos - 1];
                        pos--;
                }
                out[pos].cls = i;
                out[pos].score = v;
        }
}

void cpu_topk(int m, int k, const float *x, engine_topk_t *out) {
        cpu_topk_of(m, k, x, 0, 0.0f, out);
}

void cpu_topk_map(int m, int k, const float *x, float mx, engine_topk_t *out) {
        cpu_topk_of(m, k, x, 1, mx, out);
}

void cpu_preprocess_rgb8(const uint8_t *hwc, float *out) {
        size_t pixels = (size_t)MODEL_IN_H * MODEL_IN_W;

        for (size_t p = 0; p < pixels; p++)
                for (int c = 0; c < 3; c++)
                        out[p * 3 + c] = (hwc[p * 3 + c] / 255.0f - cpu_imagenet_mean[c]) / cpu_imagenet_std[c];
}

void cpu_preprocess_f32_chw(const void *chw_le, float *out) {
        size_t pixels = (size_t)MODEL_IN_H * MODEL_IN_W;
        const unsigned char *src = chw_le;

        /* x86 and arm64 are little-endian: a memcpy per element reads the
         * possibly unaligned float as it is stored. */
        for (int c = 0; c < 3; c++)
                for (size_t p = 0; p < pixels; p++)
                        memcpy(&out[p * 3 + c], src + ((size_t)c * pixels + p) * sizeof(float), sizeof(float));
}

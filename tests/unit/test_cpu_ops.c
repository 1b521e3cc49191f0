/* Unit tests of cpu_ops: each kernel against a naive reference written
 * independently here (direct loops in double, different index order), on
 * random shapes with odd sizes, strides 1 and 2, and padding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "unit.h"

#define R50_CLASSES 1000        /* model_random: ResNet-50 with ImageNet's classes */

static float *ops_random(size_t n, uint64_t *seed) {
        float *p = malloc(n * sizeof(float));

        for (size_t i = 0; i < n; i++)
                p[i] = unit_rand_float(seed);
        return p;
}

static double ops_rel_l2(const float *a, const double *ref, size_t n) {
        double num = 0, den = 0;

        for (size_t i = 0; i < n; i++) {
                num += (a[i] - ref[i]) * (a[i] - ref[i]);
                den += ref[i] * ref[i];
        }
        return sqrt(num / (den > 0 ? den : 1));
}

/* Direct convolution, output-stationary, in double. */
static void ops_conv_naive(const cpu_conv_shape_t *s, const float *in, const float *w, const float *bias,
                           const float *residual, int relu, double *out) {
        for (int n = 0; n < s->n; n++)
                for (int o = 0; o < s->cout; o++)
                        for (int oy = 0; oy < s->ho; oy++)
                                for (int ox = 0; ox < s->wo; ox++) {
                                        size_t oi = (((size_t)n * s->ho + oy) * s->wo + ox) * s->cout + o;
                                        double acc = bias[o];

                                        for (int c = 0; c < s->cin; c++)
                                                for (int ky = 0; ky < s->kh; ky++)
                                                        for (int kx = 0; kx < s->kw; kx++) {
                                                                int iy = oy * s->stride + ky - s->pad;
                                                                int ix = ox * s->stride + kx - s->pad;

                                                                if (iy < 0 || ix < 0 || iy >= s->h || ix >= s->w)
                                                                        continue;
                                                                acc += (double)in[(((size_t)n * s->h + iy) * s->w + ix) * s->cin + c] *
                                                                       w[(((size_t)o * s->kh + ky) * s->kw + kx) * s->cin + c];
                                                        }
                                        if (residual)
                                                acc += residual[oi];
                                        out[oi] = relu && acc < 0 ? 0 : acc;
                                }
}

static void ops_check_conv(cpu_conv_shape_t s, int with_residual, int relu, size_t ws_cap, uint64_t seed) {
        size_t in_n, w_n, out_n, ws_n;
        float *in, *w, *bias, *res = NULL, *out, *ws;
        double *ref;
        int chunk;

        cpu_conv_shape_finish(&s);
        in_n = (size_t)s.n * s.h * s.w * s.cin;
        w_n = (size_t)s.cout * s.kh * s.kw * s.cin;
        out_n = (size_t)s.n * s.ho * s.wo * s.cout;
        in = ops_random(in_n, &seed);
        w = ops_random(w_n, &seed);
        bias = ops_random((size_t)s.cout, &seed);
        if (with_residual)
                res = ops_random(out_n, &seed);
        chunk = cpu_conv2d_chunk_samples(&s, ws_cap);
        ws_n = cpu_conv2d_workspace_elems(&s, chunk);
        ws = malloc((ws_n ? ws_n : 1) * sizeof(float));
        out = malloc(out_n * sizeof(float));
        for (size_t i = 0; i < out_n; i++)
                out[i] = NAN;   /* poisoned: an unwritten element fails */
        ref = malloc(out_n * sizeof(double));
        cpu_conv2d(&s, in, w, bias, res, relu, out, ws, ws_n);
        ops_conv_naive(&s, in, w, bias, res, relu, ref);
        CU_ASSERT(ops_rel_l2(out, ref, out_n) < 1e-5);
        for (size_t i = 0; i < out_n; i++)
                if (!isfinite(out[i])) {
                        CU_FAIL("unwritten or non-finite output");
                        break;
                }
        free(in), free(w), free(bias), free(res), free(out), free(ws), free(ref);
}

static void test_cpu_ops_conv_matches_direct(void) {
        /* n, h, w, cin, cout, kh, kw, stride, pad */
        ops_check_conv((cpu_conv_shape_t){ 2, 9, 7, 5, 6, 3, 3, 1, 1 }, 0, 1, 1 << 20, 1);
        ops_check_conv((cpu_conv_shape_t){ 3, 11, 13, 3, 8, 7, 7, 2, 3 }, 0, 1, 1 << 20, 2);
        ops_check_conv((cpu_conv_shape_t){ 2, 8, 8, 16, 12, 1, 1, 1, 0 }, 1, 1, 1 << 20, 3);     /* pointwise + residual */
        ops_check_conv((cpu_conv_shape_t){ 2, 9, 9, 6, 10, 1, 1, 2, 0 }, 0, 0, 1 << 20, 4);      /* strided 1x1 */
        ops_check_conv((cpu_conv_shape_t){ 1, 6, 5, 4, 3, 3, 3, 2, 1 }, 1, 0, 1 << 20, 5);
        ops_check_conv((cpu_conv_shape_t){ 1, 5, 5, 2, 2, 5, 5, 1, 0 }, 0, 1, 1 << 20, 6);       /* kernel = input */
}

static void test_cpu_ops_conv_chunks_the_workspace(void) {
        /* A cap of one sample's im2col forces 4 chunks; the result must not change. */
        cpu_conv_shape_t s = { 4, 7, 7, 3, 5, 3, 3, 1, 1 };

        cpu_conv_shape_finish(&s);
        CU_ASSERT_EQUAL(cpu_conv2d_chunk_samples(&s, cpu_conv2d_workspace_elems(&s, 1)), 1);
        CU_ASSERT_EQUAL(cpu_conv2d_chunk_samples(&s, 1), 1);
        CU_ASSERT_EQUAL(cpu_conv2d_chunk_samples(&s, (size_t)1 << 30), 4);
        ops_check_conv((cpu_conv_shape_t){ 4, 7, 7, 3, 5, 3, 3, 1, 1 }, 1, 1, 7 * 7 * 27, 7);
        ops_check_conv((cpu_conv_shape_t){ 5, 10, 10, 4, 6, 3, 3, 2, 1 }, 0, 1, 2 * 5 * 5 * 36, 8);
}

static void test_cpu_ops_im2col_layout(void) {
        /* 1 channel 3x3 input 1..9, 2x2 kernel, stride 1, pad 0: rows are windows. */
        cpu_conv_shape_t s = { 1, 3, 3, 1, 1, 2, 2, 1, 0 };
        float in[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, col[16];
        const float want[16] = { 1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9 };

        cpu_conv_shape_finish(&s);
        CU_ASSERT_EQUAL(s.ho, 2);
        cpu_im2col(&s, in, col);
        CU_ASSERT_EQUAL(memcmp(col, want, sizeof(want)), 0);
}

static void test_cpu_ops_maxpool(void) {
        cpu_conv_shape_t s = { 2, 9, 8, 3, 3, 3, 3, 2, 1 };
        uint64_t seed = 11;
        float *in, *out;

        cpu_conv_shape_finish(&s);
        CU_ASSERT_EQUAL(s.ho, 5);
        CU_ASSERT_EQUAL(s.wo, 4);
        in = ops_random((size_t)2 * 9 * 8 * 3, &seed);
        out = malloc((size_t)2 * 5 * 4 * 3 * sizeof(float));
        cpu_maxpool(&s, in, out);
        for (int n = 0; n < 2; n++)
                for (int c = 0; c < 3; c++)
                        for (int oy = 0; oy < 5; oy++)
                                for (int ox = 0; ox < 4; ox++) {
                                        /* the window clipped to the image */
                                        int y0 = oy * 2 - 1 < 0 ? 0 : oy * 2 - 1, y1 = oy * 2 + 1 > 8 ? 8 : oy * 2 + 1;
                                        int x0 = ox * 2 - 1 < 0 ? 0 : ox * 2 - 1, x1 = ox * 2 + 1 > 7 ? 7 : ox * 2 + 1;
                                        float best = -INFINITY;

                                        for (int y = y0; y <= y1; y++)
                                                for (int x = x0; x <= x1; x++) {
                                                        float v = in[((n * 9 + y) * 8 + x) * 3 + c];
                                                        best = v > best ? v : best;
                                                }
                                        CU_ASSERT_EQUAL(out[((n * 5 + oy) * 4 + ox) * 3 + c], best);
                                }
        free(in);
        free(out);
}

static void test_cpu_ops_avgpool_and_fc(void) {
        uint64_t seed = 12;
        float *in = ops_random((size_t)2 * 3 * 5 * 7, &seed), out[14];
        float *x = ops_random(2 * 9, &seed), *w = ops_random(4 * 9, &seed), *b = ops_random(4, &seed), y[8];

        cpu_global_avgpool(2, 3, 5, 7, in, out);
        for (int n = 0; n < 2; n++)
                for (int c = 0; c < 7; c++) {
                        double sum = 0;

                        for (int p = 0; p < 15; p++)
                                sum += in[(n * 15 + p) * 7 + c];
                        CU_ASSERT_DOUBLE_EQUAL(out[n * 7 + c], sum / 15, 1e-6);
                }
        cpu_fc(2, 9, 4, x, w, b, y);
        for (int n = 0; n < 2; n++)
                for (int m = 0; m < 4; m++) {
                        double acc = b[m];

                        for (int k = 0; k < 9; k++)
                                acc += (double)x[n * 9 + k] * w[m * 9 + k];
                        CU_ASSERT_DOUBLE_EQUAL(y[n * 4 + m], acc, 1e-5);
                }
        free(in), free(x), free(w), free(b);
}

static void test_cpu_ops_softmax(void) {
        float x[6] = { 1, 2, 3, 1000, 1001, 999 }, y[6];

        cpu_softmax(2, 3, x, y);
        /* exp(0), exp(1), exp(2) over their sum; large values must not overflow. */
        CU_ASSERT_DOUBLE_EQUAL(y[0], exp(1) / (exp(1) + exp(2) + exp(3)), 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(y[2], exp(3) / (exp(1) + exp(2) + exp(3)), 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(y[4], exp(2) / (exp(1) + exp(2) + exp(0)), 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(y[3] + y[4] + y[5], 1.0, 1e-6);
}

static int ops_cmp_desc(const void *a, const void *b, void *x) {
        float va = ((const float *)x)[*(const int *)a], vb = ((const float *)x)[*(const int *)b];

        if (va != vb)
                return va > vb ? -1 : 1;
        return *(const int *)a - *(const int *)b;
}

static void test_cpu_ops_topk(void) {
        uint64_t seed = 13;
        float *x = ops_random(1000, &seed);
        int idx[1000];
        engine_topk_t top[1000];

        x[17] = x[400] = 5.0f;  /* a tie: the lower index first */
        for (int i = 0; i < 1000; i++)
                idx[i] = i;
        qsort_r(idx, 1000, sizeof(int), ops_cmp_desc, x);
        for (int k = 1; k <= 1000; k = k * 3 + 1) {
                cpu_topk(1000, k, x, top);
                for (int i = 0; i < k; i++) {
                        CU_ASSERT_EQUAL(top[i].cls, idx[i]);
                        CU_ASSERT_EQUAL(top[i].score, x[idx[i]]);
                }
        }
        cpu_topk(1000, 1000, x, top);
        CU_ASSERT_EQUAL(top[999].cls, idx[999]);
        CU_ASSERT_EQUAL(top[0].cls, 17);
        CU_ASSERT_EQUAL(top[1].cls, 400);
        free(x);
}

/* The head's non-finite rule: a NaN or +inf logit, or a row of -inf, has no
 * max/sum to rank by and is marked; a single -inf logit is just a class of
 * probability 0. */
static void test_cpu_ops_head_row_marks_nonfinite(void) {
        float x[R50_CLASSES], probs[R50_CLASSES];
        engine_topk_t top[4], ref[4];
        struct {
                int at;
                float v;
                int finite;
        } cases[] = { { -1, 0, 1 }, { 500, NAN, 0 }, { 3, INFINITY, 0 }, { 10, -INFINITY, 1 }, { -2, -INFINITY, 0 } };

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                for (int i = 0; i < R50_CLASSES; i++)
                        x[i] = cases[c].at == -2 ? -INFINITY : (float)((i * 37) % 101) / 10.0f;
                if (cases[c].at >= 0)
                        x[cases[c].at] = cases[c].v;
                CU_ASSERT_EQUAL(cpu_head_row(x, R50_CLASSES, 4, top), cases[c].finite);
                CU_ASSERT_EQUAL(engine_topk_is_finite(top), cases[c].finite);
                if (cases[c].finite) {
                        cpu_softmax(1, R50_CLASSES, x, probs);
                        cpu_topk(R50_CLASSES, 4, probs, ref);
                        CU_ASSERT_EQUAL(memcmp(top, ref, sizeof(ref)), 0);
                } else {
                        for (int j = 0; j < 4; j++) {
                                CU_ASSERT_EQUAL(top[j].cls, ENGINE_TOPK_NONFINITE);
                                CU_ASSERT(isnan(top[j].score));
                        }
                }
        }
}

static void test_cpu_ops_preprocess(void) {
        uint8_t *rgb = calloc(224 * 224 * 3, 1);
        float *chw = malloc(sizeof(float) * 3 * 224 * 224), *out = malloc(sizeof(float) * 3 * 224 * 224);

        rgb[0] = 255;                   /* pixel (0,0) red */
        rgb[(5 * 224 + 7) * 3 + 2] = 51; /* pixel (5,7) blue = 0.2 */
        cpu_preprocess_rgb8(rgb, out);
        CU_ASSERT_DOUBLE_EQUAL(out[0], (1.0 - 0.485) / 0.229, 1e-5);
        CU_ASSERT_DOUBLE_EQUAL(out[1], (0.0 - 0.456) / 0.224, 1e-5);
        CU_ASSERT_DOUBLE_EQUAL(out[(5 * 224 + 7) * 3 + 2], (0.2 - 0.406) / 0.225, 1e-5);
        for (int c = 0; c < 3; c++)
                for (int p = 0; p < 224 * 224; p++)
                        chw[c * 224 * 224 + p] = (float)(c * 1000000 + p);
        cpu_preprocess_f32_chw(chw, out);
        CU_ASSERT_EQUAL(out[(10 * 224 + 20) * 3 + 2], (float)(2 * 1000000 + 10 * 224 + 20));
        CU_ASSERT_EQUAL(out[1], (float)1000000);
        free(rgb), free(chw), free(out);
}

int test_cpu_ops_register(void) {
        static CU_TestInfo tests[] = {
                { "conv_matches_direct", test_cpu_ops_conv_matches_direct },
                { "conv_chunks_the_workspace", test_cpu_ops_conv_chunks_the_workspace },
                { "im2col_layout", test_cpu_ops_im2col_layout },
                { "maxpool", test_cpu_ops_maxpool },
                { "avgpool_and_fc", test_cpu_ops_avgpool_and_fc },
                { "softmax", test_cpu_ops_softmax },
                { "topk", test_cpu_ops_topk },
                { "head_row_marks_nonfinite", test_cpu_ops_head_row_marks_nonfinite },
                { "preprocess", test_cpu_ops_preprocess },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("cpu_ops", tests);
}

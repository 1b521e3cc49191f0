/* cpu_ops: the CPU reference kernels, in plain C.
 *
 * Each is a readable loop or one OpenBLAS call; speed comes from cblas_sgemm,
 * not from clever code. The CPU engine runs the network with them, and the
 * GPU tests hold every CUDA kernel against them. All activations are NHWC
 * fp32; weights are (cout, kh, kw, cin) fp32 as model_ folds them.
 * Nothing here allocates: scratch memory is passed in. */
#ifndef INFERD_CPU_OPS_H
#define INFERD_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* Geometry of one convolution (also used for max pooling). */
typedef struct cpu_conv_shape {
        int n;                  /* batch */
        int h, w, cin;          /* input (n, h, w, cin) */
        int cout, kh, kw, stride, pad;
        int ho, wo;             /* output (n, ho, wo, cout) */
} cpu_conv_shape_t;

/* ho/wo from the rest: (h + 2*pad - kh) / stride + 1. */
void cpu_conv_shape_finish(cpu_conv_shape_t *s);

/* Floats of im2col scratch that cpu_conv2d needs for samples_per_chunk samples
 * at a time; 0 for a 1x1 stride-1 unpadded convolution, which needs none. */
size_t cpu_conv2d_workspace_elems(const cpu_conv_shape_t *s, int samples_per_chunk);

/* How many samples cpu_conv2d processes per im2col chunk, given a scratch
 * cap in floats (at least 1 sample, at most s->n). */
int cpu_conv2d_chunk_samples(const cpu_conv_shape_t *s, size_t cap_elems);

/* Rows of one sample, gathered for a GEMM:
 * in (h, w, cin) -> col (ho * wo, kh * kw * cin), zero where padded. */
void cpu_im2col(const cpu_conv_shape_t *s, const float *in, float *col);

/* out = relu?( conv(in, w) + bias + residual ), by im2col + cblas_sgemm.
 * in (n, h, w, cin); w (cout, kh, kw, cin); bias (cout); residual
 * (n, ho, wo, cout) or NULL; out (n, ho, wo, cout), which must not alias in
 * or residual. workspace holds workspace_elems floats (see above). */
void cpu_conv2d(const cpu_conv_shape_t *s, const float *in, const float *w, const float *bias,
                const float *residual, int relu, float *out, float *workspace, size_t workspace_elems);

/* Max pooling over kh x kw windows (padding never wins): in (n, h, w, c) -> out (n, ho, wo, c);
 * s->cout == s->cin. */
void cpu_maxpool(const cpu_conv_shape_t *s, const float *in, float *out);

/* Global average pool: in (n, h, w, c) -> out (n, c). */
void cpu_global_avgpool(int n, int h, int w, int c, const float *in, float *out);

/* Fully connected: in (n, k), w (m, k), bias (m) -> out (n, m). */
void cpu_fc(int n, int k, int m, const float *in, const float *w, const float *bias, float *out);

/* Softmax of each row: in (n, m) -> out (n, m); in == out is allowed. */
void cpu_softmax(int n, int m, const float *in, float *out);

/* The k largest of x (m), by descending value, ties to the lower index. */
void cpu_topk(int m, int k, const float *x, engine_topk_t *out);

/* The best k of expf(x[i] - mx) over x (m), as cpu_topk ranks them; the
 * scores are those unnormalised values. */
void cpu_topk_map(int m, int k, const float *x, float mx, engine_topk_t *out);

/* The head of one row of logits (classes) as both engines define it: when the
 * row's max (fmaxf over the row, which passes over NaN, as the CUDA head's
 * reduction does) or its sum of expf(x - max) is not finite, every entry of
 * out (k) becomes { ENGINE_TOPK_NONFINITE, NaN } and 0 is returned;
 * otherwise out holds the top k of the softmax (cpu_softmax, cpu_topk) and 1
 * is returned. */
int cpu_head_row(const float *logits, int classes, int k, engine_topk_t *out);

/* One record to the network input (224, 224, 3) fp32 NHWC:
 * rgb8 (224, 224, 3) uint8 HWC -> (x / 255 - mean) / std, torchvision's
 * constants; f32 CHW (3, 224, 224), already normalised -> transposed. */
void cpu_preprocess_rgb8(const uint8_t *hwc, float *out);
void cpu_preprocess_f32_chw(const void *chw_le, float *out);

/* torchvision's normalisation constants, shared with the CUDA kernels. */
extern const float cpu_imagenet_mean[3];
extern const float cpu_imagenet_std[3];

#endif

/* cuda_kernels: the launchers of the hand-written kernels (one .cu each).
 *
 * Each launcher owns its grid arithmetic, asserts what it relies on, checks
 * the launch and returns 0 or -EIO with CUDA's message. All enqueue on the
 * given stream and never synchronise, so they can be captured in a CUDA
 * graph. Activations are NHWC in the precision p (fp32, fp16 or bf16
 * storage; the kernels compute in fp32). Shapes are per call (n = batch).
 * The GEMMs are in cuda_gemm.h. */
#ifndef INFERD_CUDA_KERNELS_H
#define INFERD_CUDA_KERNELS_H

#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "engine/engine.h"
#include "core/errbuf.h"
#include "core/plan.h"
}

/* preprocess.cu: n raw records -> the network input.
 * records: packed by format (engine/pack.h), record i at offsets[i] (n int64,
 * multiples of 256); formats (n) int32: RECORD_RGB8 (224, 224, 3) uint8 HWC
 * -> (x/255 - mean)/std, RECORD_F32_CHW (3, 224, 224) fp32 -> transposed,
 * anything else (a padded bucket row, whose offset is not read) -> zeros;
 * out (n, 224, 224, 3) in p. */
int cuda_preprocess(cudaStream_t s, precision_t p, const uint8_t *records, const int32_t *formats,
                    const int64_t *offsets, int n, void *out, errbuf_t *err);

/* im2col.cu: in (n, h, w, cin) -> col (n * ho * wo, k_pad) in p, column
 * (ky * kw + kx) * cin + ci (the weights' (cout, kh, kw, cin) order), zeros
 * where the window leaves the image and in columns kh * kw * cin .. k_pad-1. */
int cuda_im2col(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int cin, int kh, int kw,
                int stride, int pad, int ho, int wo, int k_pad, void *col, errbuf_t *err);

/* pool.cu: max pooling in (n, h, w, c) -> out (n, ho, wo, c) over k x k
 * windows (padding never wins); global average pooling in (n, h, w, c) ->
 * out (n, c), and, when features is not NULL, the same means in fp32 to
 * features (n, c) (the embeddings). */
int cuda_maxpool(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int c, int k, int stride,
                 int pad, int ho, int wo, void *out, errbuf_t *err);
int cuda_avgpool(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int c, void *out,
                 float *features, errbuf_t *err);

/* residual.cu: d (elems) <- relu(d + res) in p, elementwise: the residual
 * add of a bottleneck block when the GEMM does not fuse it (the BIAS
 * epilogue then this). */
int cuda_add_relu(cudaStream_t s, precision_t p, void *d, const void *res, long long elems, errbuf_t *err);

/* Whether this build has code the current device can run: asks the driver
 * for a kernel's attributes, which fails with cudaErrorNoKernelImageForDevice
 * (or cudaErrorInvalidDeviceFunction) when neither the SASS nor the PTX in
 * the binary fits it. Returns 0 or -ENOTSUP with a sentence. pool.cu. */
int cuda_kernels_loadable(int cc_major, int cc_minor, errbuf_t *err);

/* head.cu: softmax of each row of logits (n, classes) fp32, and its top_k
 * classes by descending probability, ties to the lower index:
 * out (n, top_k) engine_topk_t. 1 <= top_k <= min(classes, 1000). A row whose max or sum
 * is not finite gets { ENGINE_TOPK_NONFINITE, NaN } in all top_k entries
 * (engine.h). */
int cuda_head(cudaStream_t s, const float *logits, int n, int classes, int top_k, engine_topk_t *out,
              errbuf_t *err);

#endif

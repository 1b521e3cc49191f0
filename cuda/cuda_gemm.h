/* cuda_gemm: the one GEMM shape of the engine, through cuBLASLt.
 *
 * Every convolution (after im2col, or straight on the NHWC activations for
 * a 1x1 stride-1 conv) and the FC are
 *
 *   D (m, n) = relu?( A (m, k) . W (n, k)^T + bias (n) + C (m, n) )
 *
 * with A, D and C row-major (NHWC rows: m = batch * ho * wo pixels, k =
 * kh * kw * cin, n = cout) and W the folded weights (cout, kh, kw, cin). The
 * bias and ReLU are cuBLASLt's fused epilogue, the residual comes in through
 * C with beta = 1. Storage is the precision, or fp32 D/C/bias (the FC's
 * logits); the compute type is CUBLAS_COMPUTE_32F always, which is true fp32
 * for fp32 storage (never TF32). The workspace is explicit: cuBLASLt
 * allocates nothing. The algorithm comes from cuBLASLt's heuristic, asked at
 * each call: the engine calls this while capturing its graphs at open, so
 * the choice is made once per (layer, bucket). Not a general BLAS wrapper. */
#ifndef INFERD_CUDA_GEMM_H
#define INFERD_CUDA_GEMM_H

#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/errbuf.h"
#include "core/plan.h"
}

typedef struct cuda_gemm {
        int64_t m, n, k;
        precision_t ab;         /* storage of A and W */
        int d_fp32;             /* D, C and bias are fp32 (else the precision ab) */
        const void *a;          /* (m, k), row stride lda elements */
        int64_t lda;
        const void *w;          /* (n, k) contiguous */
        const void *bias;       /* (n), or NULL */
        const void *c;          /* (m, n) residual, or NULL */
        void *d;                /* (m, n); must not alias a or w; may not alias c either */
        int relu;
} cuda_gemm_t;

/* Enqueues g on stream s. Returns 0, -ENOTSUP when cuBLASLt offers no
 * algorithm for the shape, or -EIO with cuBLASLt's message. */
int cuda_gemm_run(cublasLtHandle_t lt, cudaStream_t s, const cuda_gemm_t *g, void *workspace,
                  size_t workspace_bytes, errbuf_t *err);

#endif

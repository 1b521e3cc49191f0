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
 * allocates nothing.
 *
 * Planning is split from enqueueing. A plan (cuBLASLt's descriptors and
 * the chosen algorithm with its workspace size) is made the first time a
 * (key, shape) is run, and that first run must happen outside any stream
 * capture: the engine's warm-up runs every (layer, bucket) once before it
 * captures. Inside a capture only cublasLtMatmul runs, with the cached
 * algorithm and the very descriptors of the warm-up, so the graphs run
 * exactly the algorithms the warm-up ran; a capture that meets a shape with
 * no plan fails (-EBUSY) instead of asking the heuristic there. Not a
 * general BLAS wrapper. */
#ifndef INFERD_CUDA_GEMM_H
#define INFERD_CUDA_GEMM_H

#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda_check.h"

extern "C" {
#include "core/plan.h"
}

/* CUDA_GOTO (cuda_check.h) for a cuBLASLt status. */
#define LT_GOTO(call, what)                                                                             \
        do {                                                                                            \
                cublasStatus_t s_ = (call);                                                             \
                if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
                        r = CUDA_EIO_((what), "cuBLASLt: ", cublasLtGetStatusString(s_),                \
                                      cublasLtGetStatusName(s_));                                       \
                        goto fail;                                                                      \
                }                                                                                       \
        } while (0)

/* Algorithms asked of the heuristic per plan; the first that cublasLtMatmul
 * accepts in the planning run is kept. */
#define CUDA_GEMM_ALGOS 4

typedef struct cuda_gemm {
        int64_t m, n, k;
        precision_t ab;         /* storage of A and W */
        int d_fp32;             /* D, C and bias are fp32 (else the precision ab) */
        int bias_fp32;          /* with !d_fp32: the bias is fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) */
        const void *a;          /* (m, k), row stride lda elements */
        int64_t lda;
        const void *w;          /* (n, k) contiguous */
        const void *bias;       /* (n), or NULL */
        const void *c;          /* (m, n) residual, or NULL */
        void *d;                /* (m, n); must not alias a or w; may not alias c either */
        int relu;
} cuda_gemm_t;

/* The plans of one engine, keyed by the caller's key (the op index) and the
 * shape. Host memory only; never touched by the device. */
typedef struct cuda_gemm_cache cuda_gemm_cache_t;

typedef struct cuda_gemm_stats {
        int plans;              /* plans cached */
        int uncached;           /* plans made and dropped because the cache was full (outside capture only) */
        int heuristic_calls;    /* cublasLtMatmulAlgoGetHeuristic calls, all outside capture */
        int algo_fallbacks;     /* plans whose first algorithm cublasLtMatmul refused, and a later one ran */
} cuda_gemm_stats_t;

/* A cache of up to capacity plans. Returns 0 or -ENOMEM. */
int cuda_gemm_cache_new(cuda_gemm_cache_t **ret, int capacity);
void cuda_gemm_cache_free(cuda_gemm_cache_t *cache);
void cuda_gemm_cache_stats(const cuda_gemm_cache_t *cache, cuda_gemm_stats_t *st);

/* Enqueues g on stream s with the plan of (key, g's shape). Without one it
 * plans first: asks the heuristic for up to CUDA_GEMM_ALGOS algorithms and
 * keeps the first that cublasLtMatmul accepts (that call is this run's
 * GEMM). Planning is refused while s is capturing. Returns 0; -EBUSY when s
 * is capturing and no plan exists; -ENOTSUP when cuBLASLt offers no
 * algorithm, or refuses every one it offered, for the shape (the sentence
 * names it); -EIO with cuBLASLt's or CUDA's message. */
int cuda_gemm_run(cuda_gemm_cache_t *cache, cublasLtHandle_t lt, cudaStream_t s, int key, const cuda_gemm_t *g,
                  void *workspace, size_t workspace_bytes, errbuf_t *err);

#endif

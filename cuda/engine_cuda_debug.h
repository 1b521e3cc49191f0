/* engine_cuda_debug: single-step access to the CUDA engine, for the GPU tests.
 *
 * tests/gpu holds every CUDA kernel against the CPU reference (cpu_ops.h)
 * one layer at a time, and checks the device memory the plan promised. These
 * two functions give it that access on an opened CUDA engine (engine_open
 * with BACKEND_CUDA) without exposing the engine's internals.
 *
 * This is not part of the daemon's path: nothing here is captured in a graph,
 * and it is not thread-safe against submit/reap. Plain C, C linkage. In a
 * build without nvcc these symbols do not exist (the GPU tests are not built
 * there either). */
#ifndef INFERD_ENGINE_CUDA_DEBUG_H
#define INFERD_ENGINE_CUDA_DEBUG_H

#include <stdint.h>

/* C headers: C linkage when a .cu file includes them. */
#ifdef __cplusplus
extern "C" {
#endif

#include "engine/engine.h"
#include "core/errbuf.h"
#include "core/model.h"
#include "core/record.h"

#define ENGINE_CUDA_OP_PREPROCESS (-1)
#define ENGINE_CUDA_OP_HEAD (-2)

/* Runs one step outside the graphs on the engine's stream and waits.
 *
 * op >= 0 is model op index op (conv/maxpool/avgpool/fc): host_in is
 * (n, in tensor elems) fp32, host_residual (n, out elems) fp32 or NULL (only
 * for ops with a residual), host_out receives (n, out elems) fp32; the device
 * output is poisoned (all bits 1: NaN in every precision) before the op so an
 * unwritten element shows.
 *
 * ENGINE_CUDA_OP_PREPROCESS: host_in is n records of RECORD_MAX_BYTES each
 * (record i at i * RECORD_MAX_BYTES) with formats[] given (RECORD_RGB8 or
 * RECORD_F32_CHW; any other format is a padding row, which must come out
 * zero), host_out receives (n, 224*224*3) fp32 NHWC. The step packs them by
 * format into slot 0's staging as submit does (engine/pack.h), and refuses
 * (-EINVAL) a set whose packed bytes exceed a slot's.
 *
 * ENGINE_CUDA_OP_HEAD: host_in is logits (n, classes) fp32, host_out receives
 * (n, top_k) engine_topk_t (softmax scores, descending, ties to the lower
 * index), top_k being the plan's.
 *
 * Inputs are converted to the engine's precision first, outputs back to
 * fp32 (so an fp16 engine sees fp16-rounded inputs). Logits are fp32 on the
 * device in every precision: the FC's output is not rounded to the
 * precision, and HEAD uses its logits as given. 1 <= n <= plan.max_batch.
 * Uses the engine's own arena (it may overwrite activations and the slots'
 * device staging); never call it while a slot is in flight (-EBUSY).
 * Returns 0, -EINVAL (bad op, n or arguments), -EBUSY, or -EIO with CUDA's
 * message. After a sticky CUDA error (an illegal address, a launch
 * failure) the engine is marked failed and lost (engine_cuda_debug_info),
 * the message starts "the CUDA context is lost", and every later step and
 * submit refuses with that first error. */
int engine_cuda_debug_op(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                         const float *host_residual, void *host_out, errbuf_t *err);

/* What the engine is in, for the GPU tests' report: whether it failed and
 * whether the failure was sticky (the CUDA context is lost: every later CUDA
 * call in the process fails the same way, so the tests stop there), the
 * residual mode, each conv's bias type, the GEMM plans. Returns 0 or
 * -EINVAL. */
typedef struct engine_cuda_debug_info {
        int failed;             /* submit/reap saw a CUDA error, or a step found the context lost */
        int lost;               /* the error was sticky: the context is unusable */
        char why[512];          /* the first such error */
        int residual_kernel;    /* single steps: BIAS epilogue + add-ReLU kernel (else C with RELU_BIAS) */
        int residual_kernel_graphs;     /* the graphs' mode (captured at open) */
        int convs, convs_bias_fp32;     /* convs, and those whose GEMM takes an fp32 bias */
        unsigned char bias_fp32[MODEL_MAX_OPS]; /* per op: 1 when conv op's bias is fp32 */
        int gemm_plans, gemm_uncached, gemm_heuristic_calls, gemm_algo_fallbacks;
        unsigned max_blocks;    /* the grid cap of ENGINE_CUDA_SET_MAX_BLOCKS (0: the default) */
} engine_cuda_debug_info_t;

int engine_cuda_debug_info(engine_t *e, engine_cuda_debug_info_t *info);

/* Settings for single steps (never for the graphs, which keep what they
 * were captured with):
 * ENGINE_CUDA_SET_RESIDUAL_KERNEL 0|1: the residual convs as one fused GEMM
 *   (C, RELU_BIAS, beta 1), or the BIAS epilogue then the add-ReLU kernel
 *   (the fallback; INFERD_CUDA_RESIDUAL=kernel makes it the graphs' mode);
 * ENGINE_CUDA_SET_MAX_BLOCKS N: cap every hand-written kernel's grid at N
 *   blocks (0 = the default cap), so that a small batch runs the
 *   grid-stride loops past their first pass. Process-wide.
 * Returns 0 or -EINVAL. */
#define ENGINE_CUDA_SET_RESIDUAL_KERNEL 1
#define ENGINE_CUDA_SET_MAX_BLOCKS 2
int engine_cuda_debug_set(engine_t *e, int what, long value, errbuf_t *err);

/* Device memory as the driver reports it (cudaMemGetInfo on the engine's
 * device): *used_bytes = total - free, *total_bytes = total. This counts
 * every process on the device, not only this one. */
int engine_cuda_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err);

#ifdef __cplusplus
}
#endif

#endif

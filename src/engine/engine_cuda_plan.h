/* engine_cuda_plan: the CUDA engine's memory terms and the layout of its arena.
 *
 * One function decides where every byte of the CUDA engine lives, and the
 * planner's terms (engine_cuda_plan_terms) are computed from that same
 * layout, so what the plan counts and what the engine carves cannot drift
 * apart: the engine asks engine_cuda_layout_of_plan() for its offsets and
 * refuses to open if the arena it describes is not the plan's total less the
 * context and graph terms.
 *
 * The device arena, one cudaMalloc, in this order (every region starts on
 * ENGINE_CUDA_ALIGN_BYTES):
 *
 *   staging     depth slot blocks (below), then one alignment pad
 *   workspace   cuBLASLt workspace | im2col columns at batch | head scratch (0)
 *               | padded weights (below)
 *   weights     plan_weight_layout(): (cout, kh, kw, cin) in the precision,
 *               bias blocks (fp32-sized, see cuda/README.md)
 *   activations batch * plan.tensor_offset[t] * precision bytes for tensor t
 *
 * A slot block holds, at the same offsets on the device and in pinned host
 * memory:
 *
 *   input    pack_capacity_bytes(batch) raw records packed by format
 *            (engine/pack.h): (batch - 1) * 150,528 + 602,112 bytes
 *   formats  (batch) int32 record_format_t
 *   offsets  (batch) int64: where record i starts in input
 *   logits   (batch, classes) fp32
 *   topk     (batch, top_k) engine_topk_t
 *   embedding (batch, embedding dim) fp32, only when the plan asks for
 *            embeddings (plan_request_t embedding): the global average
 *            pool writes its fp32 means there beside its output
 *
 * The pinned host staging is depth slot blocks, nothing else. A submit
 * copies only the packed bytes of its records (and the bucket's formats and
 * offsets) to the device.
 *
 * The CUDA context and the captured graphs live outside the arena (the
 * driver allocates them); their terms are estimates until open measures the
 * context. Plain C, no CUDA: this file is compiled in every build and tested
 * in CI. It allocates nothing. */
#ifndef INFERD_ENGINE_CUDA_PLAN_H
#define INFERD_ENGINE_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* C headers: C linkage when a .cu file includes them. */
#ifdef __cplusplus
extern "C" {
#endif

#include "core/model.h"
#include "core/plan.h"

#define ENGINE_CUDA_ALIGN_BYTES ((uint64_t)256)

/* cuBLASLt's explicit workspace: 32 MiB, the size cuBLAS's documentation
 * recommends for Hopper (4 MiB elsewhere), ample for split-K kernels of
 * these shapes. */
#define ENGINE_CUDA_LT_WORKSPACE_BYTES ((uint64_t)32 << 20)

/* The context estimate used until open measures it: a CUDA 12/13 context with
 * lazy module loading plus the cuBLASLt handle is commonly reported at about
 * 300 to 550 MiB of device memory on A100/H100-class GPUs (nvidia-smi
 * after initialising the runtime and cuBLAS). 512 MiB is that figure rounded;
 * it is not a measurement from this project yet. */
#define ENGINE_CUDA_CONTEXT_ESTIMATE_BYTES ((uint64_t)512 << 20)

/* Device memory per instantiated graph (the executable graph's kernel
 * parameters and node state; about 110 nodes here), an estimate to be
 * replaced by the first GPU run's measurement. */
#define ENGINE_CUDA_GRAPH_BYTES_EACH ((uint64_t)2 << 20)

/* Kernel modules the driver loads lazily on first launch (cuBLASLt's chosen
 * GEMM kernels and ours), which the context measurement at open cannot see
 * yet. An estimate, counted with the graphs. */
#define ENGINE_CUDA_MODULE_BYTES ((uint64_t)64 << 20)

/* The K of every im2col GEMM is padded to a multiple of this many elements
 * (zero columns in the im2col rows, a zero-padded copy of the weights), so
 * that every GEMM row starts 16-byte aligned, which cuBLASLt's tensor-core
 * kernels want. Only conv1 (K = 7 * 7 * 3 = 147 -> 152) needs it; the copy
 * lives in the workspace region and the plan counts it there. */
#define ENGINE_CUDA_K_ALIGN_ELEMS 8

/* Batch buckets: 1, 2, 4, ... below max_batch, then max_batch. */
#define ENGINE_CUDA_MAX_BUCKETS 40

typedef struct engine_cuda_slot_layout {
        uint64_t input_off;     /* pack_capacity_bytes(batch): raw records packed by format */
        uint64_t formats_off;   /* (batch) int32 record_format_t */
        uint64_t offsets_off;   /* (batch) int64: record i's byte offset in input */
        uint64_t logits_off;    /* (batch, classes) fp32 */
        uint64_t topk_off;      /* (batch, top_k) engine_topk_t */
        uint64_t embedding_off; /* (batch, embedding dim) fp32, written by the global average pool; an
                                 * empty region without embeddings */
        uint64_t embedding_bytes;       /* that region, aligned; 0 without embeddings */
        uint64_t bytes;         /* the whole block, a multiple of ENGINE_CUDA_ALIGN_BYTES */
} engine_cuda_slot_layout_t;

typedef struct engine_cuda_layout {
        precision_t precision;
        int batch;              /* the batch every region is sized for */
        int depth;
        int top_k;
        engine_cuda_slot_layout_t slot;         /* slot s starts at staging_off + s * slot.bytes */

        uint64_t staging_off;                   /* 0 */
        uint64_t staging_bytes;                 /* depth * slot.bytes + ENGINE_CUDA_ALIGN_BYTES (the pad before the activations) */
        uint64_t workspace_off;
        uint64_t workspace_bytes;               /* lt + im2col + head scratch + padded weights */
        uint64_t lt_workspace_off;
        uint64_t lt_workspace_bytes;
        uint64_t im2col_off;
        uint64_t im2col_bytes;                  /* largest im2col at batch, in the precision */
        uint64_t head_scratch_bytes;            /* 0: softmax/top-k sort in shared memory */
        uint64_t padded_w_off;                  /* zero-padded weights of the ops whose K is padded */
        uint64_t padded_w_bytes;
        uint64_t pinned_host_bytes;             /* depth * slot.bytes */

        /* Filled by engine_cuda_layout_of_plan only (0 from _regions). */
        uint64_t weights_off;
        uint64_t weights_bytes;
        uint64_t activations_off;
        uint64_t activation_bytes;
        uint64_t arena_bytes;                   /* staging + workspace + weights + activations: the one cudaMalloc */
} engine_cuda_layout_t;

/* Whether conv op needs im2col (anything but a 1x1 stride-1 unpadded conv,
 * which is a plain GEMM on the NHWC activations). */
int engine_cuda_op_needs_im2col(const model_op_t *op);

/* The K of op's GEMM: cin for a plain 1x1 conv and the FC; for an im2col
 * conv kh * kw * cin rounded up to ENGINE_CUDA_K_ALIGN_ELEMS. */
size_t engine_cuda_gemm_k(const model_op_t *op);

/* The largest im2col matrix of m, in elements per sample: rows ho * wo,
 * columns engine_cuda_gemm_k(). */
size_t engine_cuda_im2col_elems_per_sample(const model_t *m);

/* The largest GEMM operand of m, in elements per sample: over every conv
 * and the FC, A (the im2col matrix, or the input activations of a plain
 * GEMM) and C/D (the output, (ho * wo, cout)). For ResNet-50 it is conv1's
 * im2col, 112 * 112 * 152. The planner keeps it times the batch below 2^31
 * (plan_engine_terms_t.gemm_operand_elems_per_sample). */
size_t engine_cuda_gemm_operand_elems_per_sample(const model_t *m);

/* Where the zero-padded weight copies go, relative to the layout's
 * padded_w_off: offsets[i] for each op whose engine_cuda_gemm_k() exceeds
 * kh * kw * cin (a (cout, gemm_k) block in precision p, aligned to
 * ENGINE_CUDA_ALIGN_BYTES), 0 for the others. Returns the region's bytes.
 * offsets may be NULL. */
uint64_t engine_cuda_padded_weights(const model_t *m, precision_t p, uint64_t offsets[MODEL_MAX_OPS]);

/* The engine's own regions (staging, workspace, pinned) at batch, with an
 * embedding region in each slot when embedding; the weight and activation
 * fields stay 0. Returns 0 or -EINVAL for a bad argument. */
int engine_cuda_layout_regions(const model_t *m, precision_t p, int depth, int top_k, int batch, bool embedding,
                               engine_cuda_layout_t *ret);

/* The whole arena of a plan (regions at plan->max_batch, then the weights
 * and the activations). Returns 0 or -EINVAL. */
int engine_cuda_layout_of_plan(const model_t *m, const plan_t *plan, engine_cuda_layout_t *ret);

/* The batch buckets for max_batch, ascending: 1, 2, 4, ... < max_batch, then
 * max_batch. Returns their count (>= 1), or -EINVAL. */
int engine_cuda_buckets(int max_batch, int buckets[ENGINE_CUDA_MAX_BUCKETS]);

/* Index of the smallest bucket >= n, or -1. */
int engine_cuda_bucket_index(const int *buckets, int n_buckets, int n);

#ifdef __cplusplus
}
#endif

#endif

/* engine_cuda_impl: the CUDA engine's private state, shared by its .cu files
 * (engine_cuda.cu: open/close/swap/submit/reap; weights.cu: the weight
 * upload; forward.cu: the network on a stream; debug.cu: single steps for
 * the GPU tests). Not an interface: only cuda/ includes it.
 *
 * Streams and slots. Every slot s has its own device staging (records,
 * formats, logits, top-k: engine_cuda_plan.h) and its own copy stream
 * copy[s]; there is one compute stream, because all slots share one
 * activation arena and one workspace. A submit of slot s enqueues
 *
 *   copy[s]:  H2D packed records + formats + offsets -> record ev_in[s]
 *   compute:  wait ev_in[s]; graph (s, bucket) -> record ev_done[s]
 *   copy[s]:  wait ev_done[s]; D2H logits + top-k; host callback
 *
 * so compute is serialised in submit order on one stream, slot s+1's input
 * copy overlaps slot s's compute, and slot s's result copy overlaps slot
 * s+1's compute. A slot is only resubmitted after it was reaped, so its
 * staging is never overwritten while in use. The graphs hold the compute
 * only (preprocess, network, softmax/top-k); the copies are plain async
 * copies on the copy stream, because a graph launched on one stream cannot
 * let part of itself (the input copy) run ahead of the previous graph on
 * that stream. */
#ifndef INFERD_ENGINE_CUDA_IMPL_H
#define INFERD_ENGINE_CUDA_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda_gemm.h"

extern "C" {
#include "engine/engine.h"
#include "engine/engine_cuda_plan.h"
#include "core/errbuf.h"
#include "core/model.h"
#include "core/plan.h"
}

typedef struct cuda_engine cuda_engine_t;

typedef struct cuda_slot_cb {
        cuda_engine_t *ce;
        int slot;
} cuda_slot_cb_t;

struct cuda_engine {
        const model_t *model;           /* borrowed layer table (its host weights are dropped at open) */
        precision_t precision;
        size_t pb;                      /* bytes per element in the precision */
        int depth, max_batch, top_k;
        engine_cuda_layout_t L;         /* the arena, from the plan */
        size_t tensor_off[MODEL_MAX_TENSORS];   /* per-sample element offsets (plan.tensor_offset) */

        uint8_t *arena;                 /* device, L.arena_bytes: the one cudaMalloc */
        uint8_t *pinned;                /* host, L.pinned_host_bytes: the one cudaHostAlloc */
        uint64_t arena_alloc_bytes;     /* what open allocated: a model swap carves its new L within them */
        uint64_t pinned_alloc_bytes;
        uint64_t graph_plan_bytes;      /* the plan's graph term at open: a swap's graphs may not need more */
        void *w[MODEL_MAX_OPS];         /* device (cout, kh, kw, cin) in the precision; conv/fc ops */
        void *bias[MODEL_MAX_OPS];      /* device (cout): the precision for convs, fp32 for the FC */

        cublasLtHandle_t lt;
        cudaStream_t compute;
        cudaStream_t *copy;             /* (depth) */
        cudaEvent_t *ev_in;             /* (depth) input copied */
        cudaEvent_t *ev_done;           /* (depth) compute finished */
        int buckets[ENGINE_CUDA_MAX_BUCKETS];
        int n_buckets;
        cudaGraphExec_t *graphs;        /* (depth, n_buckets) */
        cuda_slot_cb_t *cbs;            /* (depth) host-callback arguments */

        int efd;                        /* eventfd: written by the host callback */
        pthread_mutex_t lock;           /* guards done[], done_head, done_count */
        int lock_init;
        int *done;                      /* (depth) ring of completed slots */
        int done_head, done_count;
        int *in_flight;                 /* (depth) submitted, not reaped; owned by the caller's thread */
        int n_in_flight;
        int failed;                     /* a device error was seen: the engine is unusable */
        int lost;                       /* ... and it was sticky: the CUDA context itself is unusable */
        char failed_why[512];           /* the error that set failed */

        cuda_gemm_cache_t *gemm;        /* the GEMM plans, made at the warm-up outside capture */
        unsigned char bias_fp32[MODEL_MAX_OPS]; /* conv i's bias is fp32 on an fp16/bf16 D */
        int bias_fallback;              /* open's warm-up: a refused fp32 bias may go to D's type */
        int bias_changed;               /* ... and one did: warm up again */
        engine_cuda_options_t opts;     /* the caller's switches (engine_t cuda), from open */
        int residual_kernel;            /* residual convs: BIAS epilogue + cuda_add_relu (else C, RELU_BIAS) */
        int residual_kernel_graphs;     /* the mode the graphs were captured in */
};

/* Device pointers of slot s's staging regions and of activation tensor t
 * (laid out for max_batch, so every bucket shares one layout). */
uint8_t *cuda_engine_slot_dev(cuda_engine_t *ce, int slot);
uint8_t *cuda_engine_slot_host(cuda_engine_t *ce, int slot);
void *cuda_engine_tensor(cuda_engine_t *ce, int t);

/* Host-side conversion between fp32 and the storage type (round to nearest
 * even), for the weight upload and the GPU tests' single steps. */
void cuda_host_from_f32(precision_t p, const float *in, size_t n, void *out);
void cuda_host_to_f32(precision_t p, const void *in, size_t n, float *out);

/* Records a CUDA error seen by the engine: marks it failed, and lost when
 * the error is sticky. Returns -EIO with "what: CUDA's message" in err. */
int cuda_engine_fail(cuda_engine_t *ce, cudaError_t c, const char *what, errbuf_t *err);
/* After a step failed with r: whether the context died under it (a sticky
 * error, found by synchronising s); marks the engine lost and failed, and
 * says so in err. Returns r. */
int cuda_engine_check_lost(cuda_engine_t *ce, cudaStream_t s, int r, errbuf_t *err);
/* weights.cu: m's conv/fc weights and biases into the arena at ce->L's
 * offsets, in ce->precision (biases per ce->bias_fp32), setting ce->w and
 * ce->bias; waits until they have landed. Returns 0, -EINVAL (the layout
 * disagrees with the plan), -ENOMEM or -EIO. */
int cuda_engine_upload_weights(cuda_engine_t *ce, const model_t *m, errbuf_t *err);
/* Conv i's bias goes to the precision for good (uploaded again from the
 * model's host copy, open only). Returns 0 or -EIO. */
int cuda_engine_bias_to_precision(cuda_engine_t *ce, int i, errbuf_t *err);

/* forward.cu: enqueue on s, for n samples of slot's staging. */
int cuda_forward_preprocess(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err);
int cuda_forward_op(cuda_engine_t *ce, cudaStream_t s, int op, int slot, int n, errbuf_t *err);
int cuda_forward_head(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err);
/* The three above in order: what a graph holds. */
int cuda_forward(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err);

#endif

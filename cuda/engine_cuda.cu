/* engine_cuda: the CUDA implementation of engine_ops_t.
 *
 * open: initialise the device, measure the context and re-plan with it, take
 * the plan's arena in one cudaMalloc and its pinned staging in one
 * cudaHostAlloc, upload the folded weights once in the precision, capture
 * one CUDA graph per (slot, batch bucket), run each once, and drop the
 * model's host weights so one weight set stays resident. swap replaces that
 * set in the same arena (a reload with new weights, precision or budget).
 * submit/reap move a
 * slot through copy-in, graph, copy-out and a host callback that writes the
 * completion eventfd (the stream scheme is described in engine_cuda_impl.h).
 * Nothing is allocated on the device after open.
 *
 * It does not choose the backend, the precision or the budget (engine.c
 * does), run anything on the CPU, or log: errors are -errno with a sentence,
 * CUDA's failures -EIO with CUDA's message. The kernels are in their own
 * files (cuda_kernels.h), the network walk in forward.cu, the weight upload
 * in weights.cu, the device queries without an engine in device.cu. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "engine_cuda_impl.h"

extern "C" {
#include "core/record.h"
#include "core/units.h"
}

extern "C" const int engine_cuda_built = 1;

uint8_t *cuda_engine_slot_dev(cuda_engine_t *ce, int slot) {
        assert(slot >= 0 && slot < ce->depth);
        return ce->arena + ce->L.staging_off + (uint64_t)slot * ce->L.slot.bytes;
}

uint8_t *cuda_engine_slot_host(cuda_engine_t *ce, int slot) {
        assert(slot >= 0 && slot < ce->depth);
        return ce->pinned + (uint64_t)slot * ce->L.slot.bytes;
}

void *cuda_engine_tensor(cuda_engine_t *ce, int t) {
        assert(t >= 0 && t < ce->model->n_tensors);
        return ce->arena + ce->L.activations_off + (uint64_t)ce->max_batch * ce->tensor_off[t] * ce->pb;
}

/* --- teardown ------------------------------------------------------------- */

/* The graphs, on an idle engine (nothing runs them): at teardown, and when
 * a model is loaded into the engine again. */
static void cuda_graphs_destroy(cuda_engine_t *ce) {
        for (int i = 0; ce->graphs && i < ce->depth * ce->n_buckets; i++)
                if (ce->graphs[i])
                        (void)cudaGraphExecDestroy(ce->graphs[i]);
        free(ce->graphs);
        ce->graphs = NULL;
        ce->n_buckets = 0;
}

static void cuda_destroy(cuda_engine_t *ce) {
        if (!ce)
                return;
        /* Drain everything in flight, host callbacks included, before freeing
         * what they touch. Errors are ignored: this is the way out. */
        if (ce->compute)
                (void)cudaStreamSynchronize(ce->compute);
        for (int s = 0; ce->copy && s < ce->depth; s++)
                if (ce->copy[s])
                        (void)cudaStreamSynchronize(ce->copy[s]);
        cuda_graphs_destroy(ce);
        for (int s = 0; s < ce->depth; s++) {
                if (ce->ev_in && ce->ev_in[s])
                        (void)cudaEventDestroy(ce->ev_in[s]);
                if (ce->ev_done && ce->ev_done[s])
                        (void)cudaEventDestroy(ce->ev_done[s]);
                if (ce->copy && ce->copy[s])
                        (void)cudaStreamDestroy(ce->copy[s]);
        }
        if (ce->compute)
                (void)cudaStreamDestroy(ce->compute);
        cuda_gemm_cache_free(ce->gemm);
        if (ce->lt)
                (void)cublasLtDestroy(ce->lt);
        if (ce->arena)
                (void)cudaFree(ce->arena);
        if (ce->pinned)
                (void)cudaFreeHost(ce->pinned);
        if (ce->efd >= 0)
                close(ce->efd);
        if (ce->lock_init)
                pthread_mutex_destroy(&ce->lock);
        free(ce->cbs);
        free(ce->done);
        free(ce->in_flight);
        free(ce->ev_in);
        free(ce->ev_done);
        free(ce->copy);
        free(ce);
}

/* --- a model into the engine: open's steps 5 and 6, all of a swap --------- */

/* The bias types to try and the residual mode, from the precision and the
 * caller's switches (open step 5; a model swap chooses again for its
 * precision, with the switches of open). */
static void cuda_choose_modes(cuda_engine_t *ce, const model_t *m) {
        int try_fp32 = ce->precision != PRECISION_FP32 && !ce->opts.bias_precision;

        for (int i = 0; i < m->n_ops; i++)
                ce->bias_fp32[i] = try_fp32 && m->ops[i].kind == MODEL_OP_CONV;
        ce->residual_kernel = ce->opts.residual_kernel;
}

/* One graph per (slot, bucket): the compute of cuda_forward() at the
 * bucket's batch, captured on the compute stream, instantiated, uploaded,
 * and run once on the zeroed staging (all formats RECORD_UNKNOWN: zeros in,
 * finite numbers out), so a kernel that cannot run on this device fails
 * here and not on the first record. Each bucket first runs once outside
 * any capture, so that whatever cuBLASLt or the driver initialises lazily
 * on a first call (kernel modules, function attributes) happens there and
 * not inside a capture, and a failure names the layer plainly. */
static int cuda_capture_graphs(cuda_engine_t *ce, errbuf_t *err) {
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cudaError_t c;
        char what[96];
        int r = 0;

        ce->n_buckets = engine_cuda_buckets(ce->max_batch, ce->buckets);
        assert(ce->n_buckets >= 1);
        ce->graphs = (cudaGraphExec_t *)calloc((size_t)ce->depth * ce->n_buckets, sizeof(cudaGraphExec_t));
        if (!ce->graphs)
                return errbuf_set(err, -ENOMEM, "out of host memory for the CUDA graphs");

        /* The warm-up: every bucket once outside any capture. It plans every
         * GEMM the graphs will hold (cuda_gemm.h), so the captures only
         * enqueue. A conv whose fp32 bias no kernel takes falls back to the
         * precision during it; then the shapes already planned with the
         * fp32 bias are stale, and the warm-up runs again (each conv falls
         * back at most once, so this ends). */
        ce->bias_fallback = 1;
        do {
                ce->bias_changed = 0;
                for (int b = 0; b < ce->n_buckets; b++) {
                        snprintf(what, sizeof(what), "running batch %d outside a graph", ce->buckets[b]);
                        r = cuda_forward(ce, ce->compute, 0, ce->buckets[b], err);
                        if (r < 0) {
                                ce->bias_fallback = 0;
                                r = errbuf_prefix(err, r, "%s", what);
                                goto fail;
                        }
                        CUDA_GOTO(cudaStreamSynchronize(ce->compute), what);
                }
        } while (ce->bias_changed);
        ce->bias_fallback = 0;
        ce->residual_kernel_graphs = ce->residual_kernel;

        for (int s = 0; s < ce->depth; s++) {
                for (int b = 0; b < ce->n_buckets; b++) {
                        snprintf(what, sizeof(what), "capturing the graph of slot %d, batch %d", s, ce->buckets[b]);
                        CUDA_GOTO(cudaStreamBeginCapture(ce->compute, cudaStreamCaptureModeThreadLocal), what);
                        r = cuda_forward(ce, ce->compute, s, ce->buckets[b], err);
                        c = cudaStreamEndCapture(ce->compute, &graph);
                        if (r < 0) {
                                r = errbuf_prefix(err, r, "%s", what);
                                goto fail;
                        }
                        CUDA_GOTO(c, what);
                        /* Into a local: a failed instantiation leaves no
                         * handle in ce->graphs for teardown to destroy. */
                        exec = NULL;
                        snprintf(what, sizeof(what), "instantiating the graph of slot %d, batch %d", s,
                                 ce->buckets[b]);
                        CUDA_GOTO(cudaGraphInstantiate(&exec, graph, 0), what);
                        ce->graphs[s * ce->n_buckets + b] = exec;
                        (void)cudaGraphDestroy(graph);
                        graph = NULL;
                        snprintf(what, sizeof(what), "uploading the graph of slot %d, batch %d", s, ce->buckets[b]);
                        CUDA_GOTO(cudaGraphUpload(exec, ce->compute), what);
                        snprintf(what, sizeof(what), "launching the graph of slot %d, batch %d", s, ce->buckets[b]);
                        CUDA_GOTO(cudaGraphLaunch(exec, ce->compute), what);
                }
        }
        CUDA_GOTO(cudaStreamSynchronize(ce->compute), "running each captured graph once");
fail:
        if (graph)
                (void)cudaGraphDestroy(graph);
        return r;
}

/* Per conv or FC op, the GEMM plans kept beyond the warm-up's one per
 * bucket: room for the GPU tests' single steps, which run batch sizes that
 * are not buckets (cuda_gemm_run plans, runs and drops a shape that finds
 * the cache full, outside capture only). */
#define CUDA_GEMM_SPARE_SHAPES 8

/* A new, empty GEMM plan cache sized for model m. The old one goes first:
 * its plans hold the old precision's descriptors and pointers. */
static int cuda_gemm_reset(cuda_engine_t *ce, const model_t *m, errbuf_t *err) {
        int gemm_ops = 0, r;

        cuda_gemm_cache_free(ce->gemm);
        ce->gemm = NULL;
        for (int i = 0; i < m->n_ops; i++)
                gemm_ops += m->ops[i].kind == MODEL_OP_CONV || m->ops[i].kind == MODEL_OP_FC;
        r = cuda_gemm_cache_new(&ce->gemm, gemm_ops * (ENGINE_CUDA_MAX_BUCKETS + CUDA_GEMM_SPARE_SHAPES));
        if (r < 0)
                return errbuf_set(err, r, "out of host memory for the GEMM plans");
        return 0;
}

/* Puts model m on the device for plan, in the arena laid out as L: open's
 * steps 5 and 6, and all of a swap after its checks, one path for both so
 * that every open runs the swap's. The engine is idle. It waits for the
 * streams, drops the graphs and the GEMM plans (none yet at open), clears
 * the whole arena (the old weights go first: there is never a second set
 * on the device) and the pinned staging (zeroed staging means every format
 * is RECORD_UNKNOWN until written), takes the plan's numbers, chooses the
 * modes for its precision, uploads the weights, then makes the GEMM plans
 * at the warm-up and captures the graphs (cuda_capture_graphs). A failure
 * leaves the engine without usable weights. */
static int cuda_load(cuda_engine_t *ce, const model_t *m, const plan_t *plan, const engine_cuda_layout_t *L,
                     errbuf_t *err) {
        int r = 0;

        CUDA_GOTO(cudaStreamSynchronize(ce->compute), "waiting for the compute stream");
        for (int s = 0; s < ce->depth; s++)
                CUDA_GOTO(cudaStreamSynchronize(ce->copy[s]), "waiting for a copy stream");
        cuda_graphs_destroy(ce);
        r = cuda_gemm_reset(ce, m, err);
        if (r < 0)
                goto fail;
        CUDA_GOTO(cudaMemsetAsync(ce->arena, 0, ce->arena_alloc_bytes, ce->compute), "clearing the device arena");
        CUDA_GOTO(cudaStreamSynchronize(ce->compute), "clearing the device arena");
        memset(ce->pinned, 0, ce->pinned_alloc_bytes);
        memset(ce->w, 0, sizeof(ce->w));
        memset(ce->bias, 0, sizeof(ce->bias));
        ce->L = *L;
        ce->model = m;
        ce->precision = plan->precision;
        ce->pb = precision_bytes(plan->precision);
        ce->max_batch = plan->max_batch;
        ce->top_k = plan->top_k;
        memcpy(ce->tensor_off, plan->tensor_offset, sizeof(ce->tensor_off));
        /* One weight set, in the precision, the conv biases in fp32 where
         * cuBLASLt will take it (tried at the warm-up; the caller's
         * bias_precision, INFERD_CUDA_BIAS=precision, skips the try). The
         * residual mode: fused through C (RELU_BIAS, beta 1), or the
         * caller's residual_kernel (INFERD_CUDA_RESIDUAL=kernel) for the
         * BIAS epilogue and cuda_add_relu, the fallback the GPU tests
         * compare. */
        cuda_choose_modes(ce, m);
        r = cuda_engine_upload_weights(ce, m, err);
        if (r < 0)
                goto fail;
        r = cuda_capture_graphs(ce, err);
fail:
        return r;
}

/* --- open ----------------------------------------------------------------- */

/* The engine's host state for e's pipeline depth; nothing on the device. */
static int cuda_new(cuda_engine_t **ret, engine_t *e, errbuf_t *err) {
        cuda_engine_t *ce = (cuda_engine_t *)calloc(1, sizeof(*ce));

        if (!ce)
                return errbuf_set(err, -ENOMEM, "out of host memory for the CUDA engine");
        ce->efd = -1;
        ce->model = e->model;
        ce->opts = e->cuda;
        ce->depth = e->plan.pipeline_depth;
        ce->copy = (cudaStream_t *)calloc(ce->depth, sizeof(cudaStream_t));
        ce->ev_in = (cudaEvent_t *)calloc(ce->depth, sizeof(cudaEvent_t));
        ce->ev_done = (cudaEvent_t *)calloc(ce->depth, sizeof(cudaEvent_t));
        ce->cbs = (cuda_slot_cb_t *)calloc(ce->depth, sizeof(cuda_slot_cb_t));
        ce->done = (int *)calloc(ce->depth, sizeof(int));
        ce->in_flight = (int *)calloc(ce->depth, sizeof(int));
        if (!ce->copy || !ce->ev_in || !ce->ev_done || !ce->cbs || !ce->done || !ce->in_flight) {
                cuda_destroy(ce);
                return errbuf_set(err, -ENOMEM, "out of host memory for the CUDA engine");
        }
        *ret = ce;
        return 0;
}

/* Open's step 1: the context, the streams, the events and cuBLASLt:
 * everything the driver allocates for us outside the arena. */
static int cuda_open_device(cuda_engine_t *ce, int device, errbuf_t *err) {
        char what[160];
        int major = 0, minor = 0, r = 0;

        snprintf(what, sizeof(what), "selecting CUDA device %d", device);
        CUDA_GOTO(cudaSetDevice(device), what);
        /* A non-sticky error left on this thread by an earlier call (a failed
         * open's cudaMalloc, say) would otherwise surface at the first
         * kernel launch check (cudaGetLastError) as this open's failure. */
        (void)cudaGetLastError();
        CUDA_GOTO(cudaFree(0), "initialising the CUDA context");
        CUDA_GOTO(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), what);
        CUDA_GOTO(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), what);
        r = cuda_kernels_loadable(major, minor, err);
        if (r < 0)
                goto fail;
        CUDA_GOTO(cudaStreamCreateWithFlags(&ce->compute, cudaStreamNonBlocking), "creating the compute stream");
        for (int s = 0; s < ce->depth; s++) {
                CUDA_GOTO(cudaStreamCreateWithFlags(&ce->copy[s], cudaStreamNonBlocking), "creating a copy stream");
                CUDA_GOTO(cudaEventCreateWithFlags(&ce->ev_in[s], cudaEventDisableTiming), "creating an event");
                CUDA_GOTO(cudaEventCreateWithFlags(&ce->ev_done[s], cudaEventDisableTiming), "creating an event");
                ce->cbs[s].ce = ce;
                ce->cbs[s].slot = s;
        }
        LT_GOTO(cublasLtCreate(&ce->lt), "creating the cuBLASLt handle");
fail:
        return r;
}

/* Open's steps 2 to 4: measures the context, re-plans with it into
 * e->plan, and lays the arena out for that plan in *L, which must agree
 * with what the plan counted. */
static int cuda_open_plan(engine_t *e, engine_cuda_layout_t *L, errbuf_t *err) {
        plan_request_t req;
        plan_t plan;
        size_t free_b = 0, total_b = 0;
        uint64_t context_bytes, expect_bytes, act_need;
        char sz[32];
        int r;

        /* 2. Measure the context. "Used after init minus used before" cannot
         *    be observed from inside the process (there is no before without a
         *    context), so this is total - free right after step 1 and
         *    before the arena: it also counts other processes on the device,
         *    which is what the budget has to live with anyway. Kernel modules
         *    loaded lazily later are counted in the graph term. */
        CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b), "measuring the CUDA context");
        context_bytes = (uint64_t)(total_b - free_b);

        /* 3. Re-plan with the measurement; the batch may only go down. */
        e->request.measured_context_bytes = context_bytes;
        req = e->request;
        if (req.max_batch > e->plan.max_batch)
                req.max_batch = e->plan.max_batch;
        r = plan_make(e->model, &req, &plan, err);
        if (r < 0)
                return errbuf_prefix(err, r, "with the measured CUDA context of %s",
                                     units_format_size(context_bytes, sz, sizeof(sz)));
        e->plan = plan;

        /* 4. The arena the plan counted, carved by the same layout. */
        r = engine_cuda_layout_of_plan(e->model, &plan, L);
        if (r < 0)
                return errbuf_set(err, r, "the CUDA arena cannot be laid out for this plan");
        expect_bytes = plan_arena_bytes(&plan);
        act_need = (uint64_t)plan.max_batch * plan.arena_elems_per_sample * precision_bytes(plan.precision);
        if (L->arena_bytes != expect_bytes || L->pinned_host_bytes != plan.engine.pinned_host_bytes ||
            L->workspace_bytes != plan.workspace_bytes || L->activation_bytes < act_need)
                return errbuf_set(err, -EINVAL,
                                  "the CUDA arena layout (%llu device bytes, %llu pinned) disagrees with the plan "
                                  "(%llu device bytes, %llu pinned)",
                                  (unsigned long long)L->arena_bytes, (unsigned long long)L->pinned_host_bytes,
                                  (unsigned long long)expect_bytes, (unsigned long long)plan.engine.pinned_host_bytes);
        return 0;
}

/* Open's step 4, the allocations: all the device memory and pinned memory
 * that the engine will hold until close, in one cudaMalloc and one
 * cudaHostAlloc as L lays them out. A swap carves its layout from them. */
static int cuda_open_arena(engine_t *e, cuda_engine_t *ce, const engine_cuda_layout_t *L, errbuf_t *err) {
        char what[160], sz[32];

        snprintf(what, sizeof(what), "allocating the %s device arena",
                 units_format_size(L->arena_bytes, sz, sizeof(sz)));
        CUDA_RETURN(cudaMalloc((void **)&ce->arena, L->arena_bytes), what);
        snprintf(what, sizeof(what), "allocating %s of pinned host staging",
                 units_format_size(L->pinned_host_bytes, sz, sizeof(sz)));
        CUDA_RETURN(cudaHostAlloc((void **)&ce->pinned, L->pinned_host_bytes, cudaHostAllocDefault), what);
        ce->arena_alloc_bytes = L->arena_bytes;
        ce->pinned_alloc_bytes = L->pinned_host_bytes;
        /* Kept until close, a swap included: a swap's plan charges them. */
        e->held_arena_bytes = ce->arena_alloc_bytes;
        e->held_pinned_host_bytes = ce->pinned_alloc_bytes;
        ce->graph_plan_bytes = e->plan.engine.graph_bytes;
        return 0;
}

/* Open's step 7: completion reaches the event loop through an eventfd that
 * the host callback writes under the lock. */
static int cuda_open_completion(cuda_engine_t *ce, errbuf_t *err) {
        int r;

        ce->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (ce->efd < 0)
                return errbuf_set(err, -errno, "creating the completion eventfd: %s", strerror(errno));
        r = pthread_mutex_init(&ce->lock, NULL);
        if (r != 0)
                return errbuf_set(err, -r, "creating the completion lock: %s", strerror(r));
        ce->lock_init = 1;
        return 0;
}

static int cuda_open(engine_t *e, errbuf_t *err) {
        cuda_engine_t *ce = NULL;
        engine_cuda_layout_t L;
        int r;

        assert(e && e->model && !e->impl);
        if (!e->model->weights || !e->model->biases)
                return errbuf_set(err, -EINVAL, "the CUDA engine needs a model with its weights loaded");
        if (e->plan.pipeline_depth < 1 || e->plan.max_batch < 1)
                return errbuf_set(err, -EINVAL, "the CUDA engine needs a plan with a batch and a pipeline");
        r = cuda_new(&ce, e, err);
        if (r < 0)
                return r;
        r = cuda_open_device(ce, e->device, err);
        if (r < 0)
                goto fail;
        r = cuda_open_plan(e, &L, err);
        if (r < 0)
                goto fail;
        r = cuda_open_arena(e, ce, &L, err);
        if (r < 0)
                goto fail;
        /* 5. and 6. The weights, the GEMM plans and the graphs, as a swap
         *    puts them there. */
        r = cuda_load(ce, e->model, &e->plan, &L, err);
        if (r < 0)
                goto fail;
        r = cuda_open_completion(ce, err);
        if (r < 0)
                goto fail;

        /* Ownership of the weights moved to the device: free the host copy
         * last, so that a failed open leaves the model usable (--backend auto
         * may fall back to the CPU with it). */
        e->impl = ce;
        model_drop_host_weights(e->model);
        return 0;

fail:
        /* A fault during the warm-up or the graphs' first runs is sticky:
         * say so, since every later CUDA call of this process (another
         * open, the CPU fallback's probe aside) will fail the same way. */
        if (ce->compute) {
                cudaError_t c = cudaDeviceSynchronize();

                if (c == cudaSuccess)
                        c = cudaPeekAtLastError();
                if (cuda_error_is_sticky(c))
                        r = errbuf_prefix(err, r, "the CUDA context is lost (%s)", cudaGetErrorName(c));
        }
        cuda_destroy(ce);
        return r;
}

static void cuda_close(engine_t *e) {
        if (!e || !e->impl)
                return;
        (void)cudaSetDevice(e->device);
        cuda_destroy((cuda_engine_t *)e->impl);
        e->impl = NULL;
}

/* --- a model swap in place (engine_swap) ------------------------------------ */

/* The arena layout plan gives for next, and whether it fits what open
 * allocated: the device arena and the pinned staging (nothing is allocated
 * after open), and the graphs' term (they are captured again). */
static int cuda_swap_layout(const engine_t *e, const model_t *next, const plan_t *plan, engine_cuda_layout_t *L,
                            errbuf_t *err) {
        const cuda_engine_t *ce = (const cuda_engine_t *)e->impl;
        char a[32], b[32];
        int r;

        r = engine_cuda_layout_of_plan(next, plan, L);
        if (r < 0)
                return errbuf_set(err, r, "the CUDA arena cannot be laid out for the new plan");
        /* The plan charges the whole held arena and staging (arena_kept_bytes,
         * pinned_host_bytes); the layout is what its batch carves of them. */
        if (L->arena_bytes != plan_arena_bytes(plan) || L->pinned_host_bytes != plan->engine.pinned_host_bytes)
                return errbuf_set(err, -EINVAL, "the CUDA arena layout disagrees with the new plan");
        if (L->arena_bytes > ce->arena_alloc_bytes)
                return errbuf_set(err, -ENOSPC, "the new plan (%s, batch %d) needs a %s device arena; %s was "
                                  "allocated at start",
                                  precision_name(plan->precision), plan->max_batch,
                                  units_format_size(L->arena_bytes, a, sizeof(a)),
                                  units_format_size(ce->arena_alloc_bytes, b, sizeof(b)));
        if (L->pinned_host_bytes > ce->pinned_alloc_bytes)
                return errbuf_set(err, -ENOSPC, "the new plan needs %s of pinned staging; %s was allocated at start",
                                  units_format_size(L->pinned_host_bytes, a, sizeof(a)),
                                  units_format_size(ce->pinned_alloc_bytes, b, sizeof(b)));
        if (plan->engine.graph_bytes > ce->graph_plan_bytes)
                return errbuf_set(err, -ENOSPC, "the new plan's graphs (%s) exceed the %s planned at start",
                                  units_format_size(plan->engine.graph_bytes, a, sizeof(a)),
                                  units_format_size(ce->graph_plan_bytes, b, sizeof(b)));
        return 0;
}

static int cuda_swap_fits(const engine_t *e, const model_t *next, const plan_t *plan, errbuf_t *err) {
        engine_cuda_layout_t L;

        if (((const cuda_engine_t *)e->impl)->failed)
                return errbuf_set(err, -EIO, "the CUDA engine has failed: %s",
                                  ((const cuda_engine_t *)e->impl)->failed_why);
        return cuda_swap_layout(e, next, plan, &L, err);
}

/* Idle (engine_swap checked): after the checks of cuda_swap_fits, the
 * model goes in as at open (cuda_load): the old graphs and GEMM plans go,
 * the whole arena is cleared (the old weights with it: from here the engine
 * has none), the new layout is carved from the same cudaMalloc, next's
 * weights are uploaded, the GEMMs planned and the graphs captured again. A
 * failure marks the engine failed: it has no usable weights. */
static int cuda_swap(engine_t *e, model_t *next, const plan_t *plan, errbuf_t *err) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;
        engine_cuda_layout_t L;
        int r = 0;

        assert(ce->n_in_flight == 0);
        if (!next->weights || !next->biases)
                return errbuf_set(err, -EINVAL, "the new model has no weights loaded");
        r = cuda_swap_layout(e, next, plan, &L, err);
        if (r < 0)
                return r;
        CUDA_GOTO(cudaSetDevice(e->device), "selecting the CUDA device");
        r = cuda_load(ce, next, plan, &L, err);
        if (r < 0)
                goto fail;
        model_drop_host_weights(next);
        return 0;
fail:
        if (!ce->failed)
                snprintf(ce->failed_why, sizeof(ce->failed_why), "swapping the model: %.480s", err ? err->msg : "");
        ce->failed = 1;
        return r;
}

/* --- the pipeline --------------------------------------------------------- */

/* Runs on a CUDA runtime thread once slot's results are in pinned memory.
 * No CUDA calls are allowed here: queue the slot and wake the event loop. */
static void CUDART_CB cuda_on_done(void *arg) {
        cuda_slot_cb_t *cb = (cuda_slot_cb_t *)arg;
        cuda_engine_t *ce = cb->ce;
        uint64_t one = 1;

        pthread_mutex_lock(&ce->lock);
        assert(ce->done_count < ce->depth);
        ce->done[(ce->done_head + ce->done_count) % ce->depth] = cb->slot;
        ce->done_count++;
        /* Cannot fail short of a bug: the counter never nears overflow. */
        if (write(ce->efd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        }
        pthread_mutex_unlock(&ce->lock);
}

int cuda_engine_fail(cuda_engine_t *ce, cudaError_t c, const char *what, errbuf_t *err) {
        int r;

        r = errbuf_set(err, -EIO, "%s: %s (%s)", what, cudaGetErrorString(c), cudaGetErrorName(c));
        if (cuda_error_is_sticky(c)) {
                ce->lost = 1;
                r = errbuf_prefix(err, r, "the CUDA context is lost");
        }
        if (!ce->failed)
                snprintf(ce->failed_why, sizeof(ce->failed_why), "%.500s", err ? err->msg : what);
        ce->failed = 1;
        return r;
}

int cuda_engine_check_lost(cuda_engine_t *ce, cudaStream_t s, int r, errbuf_t *err) {
        cudaError_t c;

        if (r >= 0 || ce->lost)
                return r;
        /* A sticky error answers every call, this one included; a
         * non-sticky one (a bad launch) leaves the stream working. */
        c = cudaStreamSynchronize(s);
        if (c == cudaSuccess)
                c = cudaPeekAtLastError();
        if (!cuda_error_is_sticky(c))
                return r;
        ce->lost = 1;
        ce->failed = 1;
        snprintf(ce->failed_why, sizeof(ce->failed_why), "%.400s (%.80s)", err ? err->msg : "a step failed",
                 cudaGetErrorName(c));
        return errbuf_prefix(err, r, "the CUDA context is lost (%s)", cudaGetErrorName(c));
}

/* A failed submit: the error as cuda_engine_fail, after waiting for the
 * slot's copy stream, so that no copy still reads the slot's pinned input
 * when the caller reuses it (with a lost context the wait returns at once,
 * and nothing runs any more either). */
static int cuda_submit_fail(cuda_engine_t *ce, cudaStream_t cs, cudaError_t c, const char *what, errbuf_t *err) {
        int r = cuda_engine_fail(ce, c, what, err);

        (void)cudaStreamSynchronize(cs);
        (void)cudaGetLastError();
        return r;
}

static int cuda_submit(engine_t *e, int slot, int n, errbuf_t *err) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;
        const record_format_t *fmt_in;
        const uint64_t *off_in;
        uint8_t *dev, *host;
        int32_t *fmt;
        int64_t *off;
        uint64_t input_bytes;
        cudaStream_t cs;
        cudaError_t c;
        int bi, bucket;

        assert(ce);
        if (ce->failed)
                return errbuf_set(err, -EIO, "the CUDA engine failed earlier and runs no more batches (%s)",
                                  ce->failed_why);
        if (slot < 0 || slot >= ce->depth)
                return errbuf_set(err, -EINVAL, "slot %d does not exist (the engine has %d)", slot, ce->depth);
        if (n < 1 || n > ce->max_batch)
                return errbuf_set(err, -EINVAL, "a batch of %d records does not fit the plan's 1..%d", n,
                                  ce->max_batch);
        if (ce->in_flight[slot])
                return errbuf_set(err, -EBUSY, "slot %d is still in flight", slot);
        bi = engine_cuda_bucket_index(ce->buckets, ce->n_buckets, n);
        assert(bi >= 0);
        bucket = ce->buckets[bi];

        dev = cuda_engine_slot_dev(ce, slot);
        host = cuda_engine_slot_host(ce, slot);
        fmt = (int32_t *)(host + ce->L.slot.formats_off);
        off = (int64_t *)(host + ce->L.slot.offsets_off);
        fmt_in = e->formats + (size_t)slot * ce->max_batch;
        off_in = e->offsets + (size_t)slot * ce->max_batch;
        for (int i = 0; i < n; i++) {
                fmt[i] = (int32_t)fmt_in[i];
                off[i] = (int64_t)off_in[i];
        }
        /* The bucket's padding rows: preprocessing turns them into zeros
         * without reading their offset, and their results are never copied
         * back. */
        for (int i = n; i < bucket; i++) {
                fmt[i] = RECORD_UNKNOWN;
                off[i] = 0;
        }
        /* Only the packed bytes of the n records cross the bus. */
        input_bytes = engine_slot_input_bytes(e, slot, n);
        assert(input_bytes <= ce->L.slot.formats_off - ce->L.slot.input_off);

        cs = ce->copy[slot];
        if ((c = cudaSetDevice(e->device)) != cudaSuccess)
                return cuda_engine_fail(ce, c, "selecting the CUDA device", err);
        /* From here on a failure may leave an H2D copy of this slot's pinned
         * input queued or running: cuda_submit_fail waits for the slot's copy
         * stream before the slot goes back to the caller as idle. */
        if ((c = cudaMemcpyAsync(dev + ce->L.slot.input_off, host + ce->L.slot.input_off, (size_t)input_bytes,
                                 cudaMemcpyHostToDevice, cs)) != cudaSuccess ||
            (c = cudaMemcpyAsync(dev + ce->L.slot.formats_off, host + ce->L.slot.formats_off,
                                 (size_t)bucket * sizeof(int32_t), cudaMemcpyHostToDevice, cs)) != cudaSuccess ||
            (c = cudaMemcpyAsync(dev + ce->L.slot.offsets_off, host + ce->L.slot.offsets_off,
                                 (size_t)bucket * sizeof(int64_t), cudaMemcpyHostToDevice, cs)) != cudaSuccess)
                return cuda_submit_fail(ce, cs, c, "copying a batch to the device", err);
        if ((c = cudaEventRecord(ce->ev_in[slot], cs)) != cudaSuccess ||
            (c = cudaStreamWaitEvent(ce->compute, ce->ev_in[slot], 0)) != cudaSuccess)
                return cuda_submit_fail(ce, cs, c, "ordering a batch's copy before its compute", err);
        if ((c = cudaGraphLaunch(ce->graphs[slot * ce->n_buckets + bi], ce->compute)) != cudaSuccess)
                return cuda_submit_fail(ce, cs, c, "launching a batch's graph", err);
        if ((c = cudaEventRecord(ce->ev_done[slot], ce->compute)) != cudaSuccess ||
            (c = cudaStreamWaitEvent(cs, ce->ev_done[slot], 0)) != cudaSuccess)
                return cuda_submit_fail(ce, cs, c, "ordering a batch's compute before its results", err);
        if ((c = cudaMemcpyAsync(host + ce->L.slot.logits_off, dev + ce->L.slot.logits_off,
                                 (size_t)n * ce->model->classes * sizeof(float), cudaMemcpyDeviceToHost, cs)) != cudaSuccess ||
            (c = cudaMemcpyAsync(host + ce->L.slot.topk_off, dev + ce->L.slot.topk_off,
                                 (size_t)n * ce->top_k * sizeof(engine_topk_t), cudaMemcpyDeviceToHost, cs)) !=
                    cudaSuccess ||
            (ce->L.slot.embedding_bytes &&
             (c = cudaMemcpyAsync(host + ce->L.slot.embedding_off, dev + ce->L.slot.embedding_off,
                                  (size_t)n * model_embedding_dim(ce->model) * sizeof(float), cudaMemcpyDeviceToHost,
                                  cs)) != cudaSuccess))
                return cuda_submit_fail(ce, cs, c, "copying a batch's results to the host", err);
        if ((c = cudaLaunchHostFunc(cs, cuda_on_done, &ce->cbs[slot])) != cudaSuccess)
                return cuda_submit_fail(ce, cs, c, "queueing a batch's completion callback", err);
        ce->in_flight[slot] = 1;
        ce->n_in_flight++;
        return 0;
}

/* Clears the eventfd's readiness; called with the lock held. */
static void cuda_drain_eventfd(cuda_engine_t *ce) {
        uint64_t v;

        /* EAGAIN when it is already clear. */
        if (read(ce->efd, &v, sizeof(v)) < 0) {
        }
}

static int cuda_reap(engine_t *e, int *slot, errbuf_t *err) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;
        cudaError_t c;
        int s = -1;

        assert(ce && slot);
        pthread_mutex_lock(&ce->lock);
        if (ce->done_count > 0) {
                s = ce->done[ce->done_head];
                ce->done_head = (ce->done_head + 1) % ce->depth;
                ce->done_count--;
        }
        if (ce->done_count == 0)
                cuda_drain_eventfd(ce);
        pthread_mutex_unlock(&ce->lock);

        (void)cudaSetDevice(e->device);
        if (s < 0) {
                /* Nothing completed. A device fault can keep the callback from
                 * ever running, so look for one on the streams in flight. */
                if (ce->n_in_flight == 0)
                        return 0;
                c = cudaStreamQuery(ce->compute);
                if (c != cudaSuccess && c != cudaErrorNotReady)
                        return cuda_engine_fail(ce, c, "the GPU failed while running a batch", err);
                for (int i = 0; i < ce->depth; i++) {
                        if (!ce->in_flight[i])
                                continue;
                        c = cudaStreamQuery(ce->copy[i]);
                        if (c != cudaSuccess && c != cudaErrorNotReady)
                                return cuda_engine_fail(ce, c, "the GPU failed while running a batch", err);
                }
                /* A NotReady answer may also be recorded as the thread's last
                 * error; clear it so that a later launch check on this
                 * thread (debug steps, the next open) does not report it. */
                (void)cudaGetLastError();
                return 0;
        }

        assert(ce->in_flight[s]);
        ce->in_flight[s] = 0;
        ce->n_in_flight--;
        /* The callback ran, so everything before it on the stream finished;
         * an error there is sticky and shows here. NotReady only means the
         * callback itself has not returned yet. */
        c = cudaStreamQuery(ce->copy[s]);
        if (c != cudaSuccess && c != cudaErrorNotReady)
                return cuda_engine_fail(ce, c, "the GPU failed while running a batch", err);
        if (c == cudaErrorNotReady)
                (void)cudaGetLastError();       /* as above: not an error */
        *slot = s;
        return 1;
}

static void *cuda_slot_input(engine_t *e, int slot) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;

        return cuda_engine_slot_host(ce, slot) + ce->L.slot.input_off;
}

static const float *cuda_slot_logits(engine_t *e, int slot) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;

        return (const float *)(cuda_engine_slot_host(ce, slot) + ce->L.slot.logits_off);
}

static const engine_topk_t *cuda_slot_topk(engine_t *e, int slot) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;

        return (const engine_topk_t *)(cuda_engine_slot_host(ce, slot) + ce->L.slot.topk_off);
}

/* NULL without embeddings (engine.c asks only when they are planned). */
static const float *cuda_slot_embedding(engine_t *e, int slot) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;

        if (ce->L.slot.embedding_bytes == 0)
                return NULL;
        return (const float *)(cuda_engine_slot_host(ce, slot) + ce->L.slot.embedding_off);
}

static int cuda_completion_fd(engine_t *e) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;

        return ce ? ce->efd : -1;
}

/* The device-wide numbers of the incident's alert: used and total from the
 * driver, and the arena this engine holds. On the loop thread, whose
 * device open selected. */
static int cuda_device_memory(engine_t *e, engine_device_memory_t *ret, errbuf_t *err) {
        cuda_engine_t *ce = (cuda_engine_t *)e->impl;
        size_t free_b = 0, total_b = 0;
        cudaError_t c;

        if (!ce)
                return -ENODEV;
        if ((c = cudaSetDevice(e->device)) != cudaSuccess || (c = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
                return errbuf_set(err, -EIO, "Failed to ask the device for its memory: %s", cudaGetErrorString(c));
        ret->total_bytes = total_b;
        ret->used_bytes = total_b - free_b;
        ret->arena_bytes = ce->L.arena_bytes;
        return 0;
}

extern "C" const engine_ops_t engine_cuda_ops = {
        "cuda",
        cuda_open,
        cuda_close,
        cuda_slot_input,
        cuda_submit,
        cuda_reap,
        cuda_slot_logits,
        cuda_slot_topk,
        cuda_slot_embedding,
        cuda_completion_fd,
        cuda_swap_fits,
        cuda_swap,
        cuda_device_memory,
};

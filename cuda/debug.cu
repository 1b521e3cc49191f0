/* debug: single steps of the CUDA engine for the GPU tests
 * (engine_cuda_debug.h): one layer, the preprocessing or the head, run
 * outside the graphs on the engine's compute stream and waited for, with
 * the output poisoned first; and the device memory as the driver sees it.
 *
 * It uses the engine's own arena (slot 0's staging and the activation
 * tensors at their planned places), so it checks the very pointers the
 * graphs use; it allocates host memory only, for the fp32 <-> precision
 * conversion. Not for the daemon's path, not thread-safe against
 * submit/reap.
 *
 * The host-side fp32 <-> precision conversion lives here too: the weight
 * upload in weights.cu needs it, so linking the engine from
 * libinferd-core.a always pulls this object in, and the GPU tests, which
 * reach the functions below through weak references, find them. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_types.cuh"
#include "engine_cuda_impl.h"
#include "engine_cuda_debug.h"

/* cuda_from_f32 and cuda_to_f32 (round to nearest even; fp32 unchanged)
 * over n elements. */
void cuda_host_from_f32(precision_t p, const float *in, size_t n, void *out) {
        if (cuda_storage_dispatch(p, [&](auto st) {
                    typedef typename decltype(st)::type T;

                    for (size_t i = 0; i < n; i++)
                            ((T *)out)[i] = cuda_from_f32<T>(in[i]);
            }) < 0)
                assert(!"bad precision");
}

void cuda_host_to_f32(precision_t p, const void *in, size_t n, float *out) {
        if (cuda_storage_dispatch(p, [&](auto st) {
                    typedef typename decltype(st)::type T;

                    for (size_t i = 0; i < n; i++)
                            out[i] = cuda_to_f32(((const T *)in)[i]);
            }) < 0)
                assert(!"bad precision");
}

static cuda_engine_t *debug_engine(engine_t *e) {
        if (!e || e->ops != &engine_cuda_ops || !e->impl)
                return NULL;
        return (cuda_engine_t *)e->impl;
}

/* ENGINE_CUDA_OP_PREPROCESS on slot 0's staging, packed as submit packs. */
static int debug_preprocess(cuda_engine_t *ce, int n, const void *host_in, const record_format_t *formats,
                            void *host_out, errbuf_t *err) {
        cudaStream_t s = ce->compute;
        uint8_t *dev = cuda_engine_slot_dev(ce, 0);
        void *buf = NULL;               /* host scratch in the precision */
        int32_t *fmt = NULL;
        int64_t *offs = NULL;           /* (n) packed offsets of the records */
        uint64_t packed = 0;
        void *dout;
        size_t out_elems;
        int r = 0;

        fmt = (int32_t *)malloc((size_t)n * sizeof(int32_t));
        offs = (int64_t *)malloc((size_t)n * sizeof(int64_t));
        out_elems = (size_t)n * ce->model->tensors[ce->model->input].elems;
        buf = malloc(out_elems * ce->pb);
        if (!fmt || !offs || !buf) {
                r = errbuf_set(err, -ENOMEM, "out of host memory");
                goto fail;
        }
        /* Packed as submit packs them (engine/pack.h); a row of
         * another format (a padding row) takes no bytes. */
        for (int i = 0; i < n; i++) {
                fmt[i] = (int32_t)formats[i];
                offs[i] = (int64_t)packed;
                packed += pack_row_bytes(formats[i]);
        }
        if (packed > ce->L.slot.formats_off - ce->L.slot.input_off) {
                r = errbuf_set(err, -EINVAL, "%d records of these formats take %llu bytes packed; a slot "
                               "holds %llu", n, (unsigned long long)packed,
                               (unsigned long long)(ce->L.slot.formats_off - ce->L.slot.input_off));
                goto fail;
        }
        for (int i = 0; i < n; i++)
                if (pack_row_bytes(formats[i]) > 0)
                        CUDA_GOTO(cudaMemcpyAsync(dev + ce->L.slot.input_off + offs[i],
                                                  (const uint8_t *)host_in + (size_t)i * RECORD_MAX_BYTES,
                                                  pack_row_bytes(formats[i]), cudaMemcpyHostToDevice, s),
                                  "copying the records");
        CUDA_GOTO(cudaMemcpyAsync(dev + ce->L.slot.formats_off, fmt, (size_t)n * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s),
                  "copying the formats");
        CUDA_GOTO(cudaMemcpyAsync(dev + ce->L.slot.offsets_off, offs, (size_t)n * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, s),
                  "copying the offsets");
        dout = cuda_engine_tensor(ce, ce->model->input);
        CUDA_GOTO(cudaMemsetAsync(dout, 0xff, out_elems * ce->pb, s), "poisoning the output");
        r = cuda_forward_preprocess(ce, s, 0, n, err);
        if (r < 0)
                goto fail;
        CUDA_GOTO(cudaMemcpyAsync(buf, dout, out_elems * ce->pb, cudaMemcpyDeviceToHost, s),
                  "copying the output back");
        CUDA_GOTO(cudaStreamSynchronize(s), "running the preprocessing");
        cuda_host_to_f32(ce->precision, buf, out_elems, (float *)host_out);
fail:
        free(buf);
        free(fmt);
        free(offs);
        return r;
}

/* ENGINE_CUDA_OP_HEAD on slot 0's logits and top-k. */
static int debug_head(cuda_engine_t *ce, int n, const void *host_in, void *host_out, errbuf_t *err) {
        cudaStream_t s = ce->compute;
        uint8_t *dev = cuda_engine_slot_dev(ce, 0);
        void *dout = dev + ce->L.slot.topk_off;
        size_t out_bytes = (size_t)n * ce->top_k * sizeof(engine_topk_t);
        int r = 0;

        CUDA_GOTO(cudaMemcpyAsync(dev + ce->L.slot.logits_off, host_in, (size_t)n * ce->model->classes * sizeof(float),
                                  cudaMemcpyHostToDevice, s),
                  "copying the logits");
        CUDA_GOTO(cudaMemsetAsync(dout, 0xff, out_bytes, s), "poisoning the output");
        r = cuda_forward_head(ce, s, 0, n, err);
        if (r < 0)
                goto fail;
        CUDA_GOTO(cudaMemcpyAsync(host_out, dout, out_bytes, cudaMemcpyDeviceToHost, s), "copying the output back");
        CUDA_GOTO(cudaStreamSynchronize(s), "running softmax/top-k");
fail:
        return r;
}

/* Conv or FC op on its activation tensors (the FC into slot 0's logits). */
static int debug_layer(cuda_engine_t *ce, int op, int n, const void *host_in, const float *host_residual,
                       void *host_out, errbuf_t *err) {
        const model_op_t *mop = &ce->model->ops[op];
        cudaStream_t s = ce->compute;
        uint8_t *dev = cuda_engine_slot_dev(ce, 0);
        void *buf = NULL;               /* host scratch in the precision */
        void *dout;
        size_t in_elems, out_elems, res_elems, out_bytes;
        int r = 0;

        in_elems = (size_t)n * ce->model->tensors[mop->in].elems;
        res_elems = mop->residual >= 0 ? (size_t)n * ce->model->tensors[mop->residual].elems : 0;
        if (mop->kind == MODEL_OP_FC) {
                out_elems = (size_t)n * ce->model->classes;
                dout = dev + ce->L.slot.logits_off;     /* the FC writes fp32 logits into the slot */
                out_bytes = out_elems * sizeof(float);
        } else {
                out_elems = (size_t)n * ce->model->tensors[mop->out].elems;
                dout = cuda_engine_tensor(ce, mop->out);
                out_bytes = out_elems * ce->pb;
        }
        buf = malloc(sizeof(float) * (in_elems > out_elems ? (in_elems > res_elems ? in_elems : res_elems)
                                                           : (out_elems > res_elems ? out_elems : res_elems)));
        if (!buf)
                return errbuf_set(err, -ENOMEM, "out of host memory");

        /* buf is pageable and reused: wait after each copy from it. */
        cuda_host_from_f32(ce->precision, (const float *)host_in, in_elems, buf);
        CUDA_GOTO(cudaMemcpyAsync(cuda_engine_tensor(ce, mop->in), buf, in_elems * ce->pb, cudaMemcpyHostToDevice, s),
                  "copying the input");
        CUDA_GOTO(cudaStreamSynchronize(s), "copying the input");
        if (res_elems) {
                cuda_host_from_f32(ce->precision, host_residual, res_elems, buf);
                CUDA_GOTO(cudaMemcpyAsync(cuda_engine_tensor(ce, mop->residual), buf, res_elems * ce->pb,
                                          cudaMemcpyHostToDevice, s),
                          "copying the residual");
                CUDA_GOTO(cudaStreamSynchronize(s), "copying the residual");
        }
        CUDA_GOTO(cudaMemsetAsync(dout, 0xff, out_bytes, s), "poisoning the output");
        r = cuda_forward_op(ce, s, op, 0, n, err);
        if (r < 0)
                goto fail;
        CUDA_GOTO(cudaMemcpyAsync(buf, dout, out_bytes, cudaMemcpyDeviceToHost, s), "copying the output back");
        CUDA_GOTO(cudaStreamSynchronize(s), mop->name);
        if (mop->kind == MODEL_OP_FC)
                memcpy(host_out, buf, out_bytes);
        else
                cuda_host_to_f32(ce->precision, buf, out_elems, (float *)host_out);
fail:
        free(buf);
        return r;
}

extern "C" int engine_cuda_debug_op(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                                    const float *host_residual, void *host_out, errbuf_t *err) {
        cuda_engine_t *ce = debug_engine(e);
        const model_op_t *mop;
        int r = 0;

        if (!ce)
                return errbuf_set(err, -EINVAL, "engine_cuda_debug_op needs an open CUDA engine");
        if (n < 1 || n > ce->max_batch)
                return errbuf_set(err, -EINVAL, "a step of %d samples does not fit the plan's 1..%d", n, ce->max_batch);
        if (!host_in || !host_out)
                return errbuf_set(err, -EINVAL, "engine_cuda_debug_op needs an input and an output");
        if (op < ENGINE_CUDA_OP_HEAD || op >= ce->model->n_ops)
                return errbuf_set(err, -EINVAL, "op %d does not exist (the model has %d)", op, ce->model->n_ops);
        if (ce->n_in_flight > 0)
                return errbuf_set(err, -EBUSY, "a batch is in flight: single steps would overwrite its activations");
        if (ce->failed)
                return errbuf_set(err, -EIO, "the CUDA engine failed earlier%s: %s",
                                  ce->lost ? " and its context is lost" : "", ce->failed_why);
        if (op == ENGINE_CUDA_OP_PREPROCESS && !formats)
                return errbuf_set(err, -EINVAL, "preprocessing needs the records' formats");
        if (op >= 0) {
                mop = &ce->model->ops[op];
                if ((mop->residual >= 0) != (host_residual != NULL))
                        return errbuf_set(err, -EINVAL, "%s %s a residual: pass host_residual %s", mop->name,
                                          mop->residual >= 0 ? "adds" : "adds no",
                                          mop->residual >= 0 ? "" : "as NULL");
        }

        CUDA_GOTO(cudaSetDevice(e->device), "selecting the CUDA device");
        (void)cudaGetLastError();       /* a stale non-sticky error is not this step's launch failure */
        if (op == ENGINE_CUDA_OP_PREPROCESS)
                r = debug_preprocess(ce, n, host_in, formats, host_out, err);
        else if (op == ENGINE_CUDA_OP_HEAD)
                r = debug_head(ce, n, host_in, host_out, err);
        else
                r = debug_layer(ce, op, n, host_in, host_residual, host_out, err);
fail:
        /* One fault must not fail every later step under its own name: a
         * sticky error marks the engine lost, and says so. */
        return cuda_engine_check_lost(ce, ce->compute, r, err);
}

extern "C" int engine_cuda_debug_info(engine_t *e, engine_cuda_debug_info_t *info) {
        cuda_engine_t *ce = debug_engine(e);
        cuda_gemm_stats_t st;

        if (!ce || !info)
                return -EINVAL;
        memset(info, 0, sizeof(*info));
        info->failed = ce->failed;
        info->lost = ce->lost;
        snprintf(info->why, sizeof(info->why), "%s", ce->failed_why);
        info->residual_kernel = ce->residual_kernel;
        info->residual_kernel_graphs = ce->residual_kernel_graphs;
        for (int i = 0; i < ce->model->n_ops; i++) {
                if (ce->model->ops[i].kind != MODEL_OP_CONV)
                        continue;
                info->convs++;
                info->bias_fp32[i] = ce->precision == PRECISION_FP32 || ce->bias_fp32[i];
                info->convs_bias_fp32 += info->bias_fp32[i];
        }
        cuda_gemm_cache_stats(ce->gemm, &st);
        info->gemm_plans = st.plans;
        info->gemm_uncached = st.uncached;
        info->gemm_heuristic_calls = st.heuristic_calls;
        info->gemm_algo_fallbacks = st.algo_fallbacks;
        info->max_blocks = cuda_debug_max_blocks;
        return 0;
}

extern "C" int engine_cuda_debug_set(engine_t *e, int what, long value, errbuf_t *err) {
        cuda_engine_t *ce = debug_engine(e);

        if (!ce)
                return errbuf_set(err, -EINVAL, "engine_cuda_debug_set needs an open CUDA engine");
        switch (what) {
        case ENGINE_CUDA_SET_RESIDUAL_KERNEL:
                ce->residual_kernel = value != 0;
                return 0;
        case ENGINE_CUDA_SET_MAX_BLOCKS:
                if (value < 0 || value > 65536L * 8)
                        return errbuf_set(err, -EINVAL, "a grid cap of %ld blocks is outside 0..524288", value);
                cuda_debug_max_blocks = (unsigned)value;
                return 0;
        }
        return errbuf_set(err, -EINVAL, "engine_cuda_debug_set: unknown setting %d", what);
}

extern "C" int engine_cuda_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err) {
        size_t free_b = 0, total_b = 0;

        if (!debug_engine(e) || !used_bytes || !total_bytes)
                return errbuf_set(err, -EINVAL, "engine_cuda_mem_info needs an open CUDA engine");
        CUDA_RETURN(cudaSetDevice(e->device), "selecting the CUDA device");
        CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b), "asking the device for its memory");
        *used_bytes = (uint64_t)(total_b - free_b);
        *total_bytes = (uint64_t)total_b;
        return 0;
}

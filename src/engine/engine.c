/* engine: chooses a backend, makes its plan, and runs the bookkeeping that
 * both backends share (slot states, record formats, waiting). The compute is
 * in engine_cpu.c and cuda/. See engine.h. */
#include "engine/engine.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/units.h"

#define ENGINE_DEFAULT_DEVICE_BUDGET "70%"
#define ENGINE_DEFAULT_HOST_BUDGET "2GiB"

void engine_options_init(engine_options_t *o) {
        memset(o, 0, sizeof(*o));
        o->backend = BACKEND_AUTO;
        o->precision = PRECISION_AUTO;
        o->max_batch = 256;
        o->pipeline_depth = 2;
        o->top_k = 5;
}

void engine_cuda_options_from_env(engine_cuda_options_t *o) {
        const char *residual = getenv("INFERD_CUDA_RESIDUAL");
        const char *bias = getenv("INFERD_CUDA_BIAS");

        o->residual_kernel = residual && strcmp(residual, "kernel") == 0;
        o->bias_precision = bias && strcmp(bias, "precision") == 0;
}

static void engine_warn(char *warning, size_t len, const char *fmt, const char *a, const char *b) {
        if (warning && len)
                snprintf(warning, len, fmt, a, b);
}

/* Resolves AUTO, finds the memory to plan for, and fills the request.
 * for_open: the engine will really run (a CUDA device is required for
 * CUDA); otherwise --device-memory may stand in for an absent device. */
static int engine_request(const engine_options_t *o, int for_open, plan_request_t *req, char *warning,
                          size_t warning_len, errbuf_t *err) {
        uint64_t device_total = 0;
        char why[256] = "";
        int have_cuda, r;

        memset(req, 0, sizeof(*req));
        if (warning && warning_len)
                warning[0] = '\0';
        if (o->top_k < 1 || o->top_k > ENGINE_TOPK_MAX)
                return errbuf_set(err, -EINVAL, "top-k must be between 1 and %d, not %d", ENGINE_TOPK_MAX, o->top_k);
        /* max_batch and pipeline_depth are plan_make's to check. */

        /* Asking the driver initialises it: not for an explicit CPU engine. */
        have_cuda = o->backend != BACKEND_CPU &&
                    engine_cuda_probe(o->device, &device_total, why, sizeof(why)) > o->device;
        req->backend = o->backend;
        req->precision = o->precision;
        if (req->backend == BACKEND_AUTO) {
                if (have_cuda || (!for_open && o->device_memory_bytes > 0))
                        req->backend = BACKEND_CUDA;
                else {
                        /* bf16 stays bf16 where the CPU has it; fp16 (CUDA's
                         * default) is fp32 on the CPU. */
                        bool bf16 = req->precision == PRECISION_BF16 &&
                                    engine_cpu_precision_check(PRECISION_BF16, o, NULL) == 0;

                        req->backend = BACKEND_CPU;
                        engine_warn(warning, warning_len, "no usable CUDA device (%s); using the CPU engine%s", why,
                                    bf16 ? ", in bf16"
                                    : req->precision == PRECISION_FP16 || req->precision == PRECISION_BF16
                                            ? ", which computes in fp32 here"
                                            : "");
                        if (req->precision != PRECISION_FP32 && !bf16)
                                req->precision = PRECISION_AUTO;
                }
        } else if (req->backend == BACKEND_CUDA && !have_cuda && (for_open || o->device_memory_bytes == 0)) {
                return errbuf_set(err, -ENODEV, "the CUDA engine cannot run: %s", why);
        }
        if (req->precision == PRECISION_AUTO)
                req->precision = req->backend == BACKEND_CUDA ? PRECISION_FP16 : PRECISION_FP32;
        if (req->backend == BACKEND_CPU) {
                r = engine_cpu_precision_check(req->precision, o, err);
                if (r < 0)
                        return r;
        }

        if (o->device_memory_bytes > 0)
                req->device_memory_bytes = o->device_memory_bytes;
        else if (req->backend == BACKEND_CUDA)
                req->device_memory_bytes = device_total;
        else
                req->device_memory_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

        r = units_parse_budget(o->device_budget ? o->device_budget : ENGINE_DEFAULT_DEVICE_BUDGET,
                               req->device_memory_bytes, &req->budget_bytes);
        if (r < 0)
                return errbuf_set(err, -EINVAL, "budget '%s' is not a size (such as 8GiB) or a percentage in (0, 100]",
                                  o->device_budget);
        r = units_parse_size(o->host_budget ? o->host_budget : ENGINE_DEFAULT_HOST_BUDGET, &req->host_budget_bytes);
        if (r < 0)
                return errbuf_set(err, -EINVAL, "host budget '%s' is not a size (such as 2GiB)", o->host_budget);
        req->pipeline_depth = o->pipeline_depth;
        req->record_bytes = RECORD_MAX_BYTES;
        req->max_batch = o->max_batch;
        req->top_k = o->top_k;
        req->decode_threads = o->decode_threads;
        req->decode_threads_auto = o->decode_threads_auto;
        req->host_reserve_bytes = o->host_reserve_bytes;
        req->kafka_hold_us = o->kafka_hold_us;
        req->kafka_hold_rate_per_s = o->kafka_hold_rate_per_s;
        req->kafka_fetch_responses = o->kafka_fetch_responses;
        req->kafka_compression_ratio = o->kafka_compression_ratio;
        req->decode_max_pixels = o->decode_max_pixels;
        req->decode_running = o->decode_running;
        req->decode_input_bytes = o->decode_input_bytes;
        req->decode_staged = o->decode_staged;
        req->cpu_threads = o->cpu_threads;
        req->cpu_reference = o->cpu_reference;
        req->cpu_keep_conv_weights = o->cpu_keep_conv_weights;
        req->embedding = o->embedding;
        req->cache_entries = o->cache_entries;
        req->terms = req->backend == BACKEND_CUDA ? engine_cuda_plan_terms : engine_cpu_plan_terms;
        return 0;
}

int engine_plan(const model_t *m, const engine_options_t *o, plan_t *ret, char *warning, size_t warning_len,
                errbuf_t *err) {
        plan_request_t req;
        int r;

        r = engine_request(o, 0, &req, warning, warning_len, err);
        if (r < 0)
                return r;
        return plan_make(m, &req, ret, err);
}

int engine_open(engine_t **ret, model_t *m, const engine_options_t *o, char *warning, size_t warning_len,
                errbuf_t *err) {
        engine_t *e;
        int r;

        if (!m->weights)
                return errbuf_set(err, -EINVAL, "the model has no weights loaded");
        if (m->conv_weights_dropped)
                return errbuf_set(err, -EINVAL, "the model's conv weights went to another engine");
        e = calloc(1, sizeof(*e));
        if (!e)
                return errbuf_set(err, -ENOMEM, "out of memory");
        r = engine_request(o, 1, &e->request, warning, warning_len, err);
        if (r < 0)
                goto fail;
        r = plan_make(m, &e->request, &e->plan, err);
        if (r < 0)
                goto fail;
        e->ops = e->request.backend == BACKEND_CUDA ? &engine_cuda_ops : &engine_cpu_ops;
        e->model = m;
        e->device = o->device;
        e->cuda = o->cuda;
        r = e->ops->open(e, err);
        if (r < 0) {
                e->ops = NULL;  /* open cleans up after itself */
                goto fail;
        }
        r = engine_slots_alloc(e, err);
        if (r < 0)
                goto fail;
        /* The plan's after open (which may lower the batch): the daemon's
         * pipeline makes its decode staging for this batch. */
        e->held_decode_staging_bytes = e->plan.decode_staging_bytes;
        e->held_cache_bytes = e->plan.cache_bytes;
        *ret = e;
        return 0;
fail:
        engine_free(e);
        return r;
}

int engine_swap_plan(const engine_t *e, const model_t *next, const engine_options_t *o, plan_t *ret,
                     errbuf_t *err) {
        engine_options_t so = *o;
        plan_request_t req;
        int r;

        if (!e->ops->swap || !e->ops->swap_fits)
                return errbuf_set(err, -EOPNOTSUPP, "the %s engine cannot swap its model in place", e->ops->name);
        if (!next->weights || next->conv_weights_dropped)
                return errbuf_set(err, -EINVAL, "the new model has no weights loaded");
        /* The same executor, slots and results: only the weights, the
         * precision and the batch may change. */
        so.backend = e->request.backend;
        so.cpu_keep_conv_weights = e->request.cpu_keep_conv_weights;
        so.embedding = e->request.embedding;    /* the slots' outputs stay as opened */
        so.pipeline_depth = e->plan.pipeline_depth;
        /* The top-k opened with, within the new model's classes. */
        so.top_k = e->request.top_k < next->classes ? e->request.top_k : next->classes;
        if (so.max_batch > e->plan.max_batch)
                so.max_batch = e->plan.max_batch;
        r = engine_request(&so, 1, &req, NULL, 0, err);
        if (r < 0)
                return r;
        /* The context measured at open is still there, and so are the
         * arena and the staging open allocated: the plan charges them. */
        req.measured_context_bytes = e->request.measured_context_bytes;
        req.held_arena_bytes = e->held_arena_bytes;
        req.held_pinned_host_bytes = e->held_pinned_host_bytes;
        req.held_decode_staging_bytes = e->held_decode_staging_bytes;
        req.held_cache_bytes = e->held_cache_bytes;
        r = plan_make(next, &req, ret, err);
        if (r < 0)
                return r;
        return e->ops->swap_fits(e, next, ret, err);
}

int engine_swap(engine_t *e, model_t *next, const plan_t *plan, errbuf_t *err) {
        int r;

        for (int s = 0; s < e->plan.pipeline_depth; s++)
                if (e->slot_state[s] == ENGINE_SLOT_BUSY)
                        return errbuf_set(err, -EBUSY, "slot %d is still in flight", s);
        assert(plan->max_batch <= e->plan.max_batch && plan->pipeline_depth == e->plan.pipeline_depth);
        r = e->ops->swap(e, next, plan, err);
        if (r < 0)
                return r;
        e->model = next;
        e->plan = *plan;
        /* The slot bookkeeping was sized for the batch at open, which the
         * new one does not exceed; every slot starts empty again. */
        for (int s = 0; s < e->plan.pipeline_depth; s++) {
                e->slot_state[s] = ENGINE_SLOT_IDLE;
                e->slot_n[s] = 0;
                memset(&e->packs[s], 0, sizeof(e->packs[s]));
        }
        return 0;
}

int engine_slots_alloc(engine_t *e, errbuf_t *err) {
        size_t depth = (size_t)e->plan.pipeline_depth, records = depth * (size_t)e->plan.max_batch;

        e->formats = calloc(records, sizeof(*e->formats));
        e->offsets = calloc(records, sizeof(*e->offsets));
        e->slot_n = calloc(depth, sizeof(*e->slot_n));
        e->slot_state = calloc(depth, sizeof(*e->slot_state));
        e->packs = calloc(depth, sizeof(*e->packs));
        if (!e->formats || !e->offsets || !e->slot_n || !e->slot_state || !e->packs)
                return errbuf_set(err, -ENOMEM, "out of memory for the engine's slot bookkeeping");
        return 0;
}

void engine_free(engine_t *e) {
        if (!e)
                return;
        if (e->ops)
                e->ops->close(e);
        free(e->formats);
        free(e->slot_n);
        free(e->slot_state);
        free(e->offsets);
        free(e->packs);
        free(e);
}

const char *engine_backend(const engine_t *e) {
        return e->ops->name;
}

precision_t engine_precision(const engine_t *e) {
        return e->plan.precision;
}

const plan_t *engine_plan_of(const engine_t *e) {
        return &e->plan;
}

int engine_slots(const engine_t *e) {
        return e->plan.pipeline_depth;
}

int engine_max_batch(const engine_t *e) {
        return e->plan.max_batch;
}

void *engine_slot_place(engine_t *e, int slot, int i, record_format_t f) {
        size_t at = (size_t)slot * e->plan.max_batch + i;
        pack_t *p;

        assert(slot >= 0 && slot < e->plan.pipeline_depth && i >= 0 && i < e->plan.max_batch);
        /* A slot in flight is still being read (the CUDA engine's copy). */
        assert(e->slot_state[slot] != ENGINE_SLOT_BUSY);
        p = &e->packs[slot];
        if (i == 0)
                pack_init(p, e->plan.max_batch);
        assert(i == p->rows);
        if (pack_add(p, f, &e->offsets[at]) < 0)
                return NULL;
        e->formats[at] = f;
        return (char *)e->ops->slot_input(e, slot) + e->offsets[at];
}

/* Streaming (non-temporal) stores: the bytes go to memory through the
 * write-combining buffers, without reading the destination's lines first and
 * without evicting the copying thread's cache, whose source lines the
 * consumer's broker thread decompresses into again next. */
void engine_slot_copy(void *dst, const void *src, size_t len) {
#if defined(__SSE2__)
        unsigned char *d = dst;
        const unsigned char *s = src;
        size_t head = (size_t)(-(uintptr_t)d & 63);

        if (len < ENGINE_SLOT_COPY_STREAM_MIN + head) {
                memcpy(dst, src, len);
                return;
        }
        memcpy(d, s, head);
        d += head;
        s += head;
        len -= head;
        for (; len >= 64; d += 64, s += 64, len -= 64) {
                __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16)),
                        c = _mm_loadu_si128((const __m128i *)(s + 32)), x = _mm_loadu_si128((const __m128i *)(s + 48));

                _mm_stream_si128((__m128i *)d, a);
                _mm_stream_si128((__m128i *)(d + 16), b);
                _mm_stream_si128((__m128i *)(d + 32), c);
                _mm_stream_si128((__m128i *)(d + 48), x);
        }
        memcpy(d, s, len);
        /* Streaming stores are weakly ordered: done before the slot is
         * submitted (another thread, or the device's DMA, reads it). */
        _mm_sfence();
#else
        memcpy(dst, src, len);
#endif
}

int engine_slot_has_room(const engine_t *e, int slot) {
        assert(slot >= 0 && slot < e->plan.pipeline_depth);
        /* Never placed: an empty batch. */
        return e->packs[slot].max_rows == 0 || pack_has_room(&e->packs[slot]);
}

uint64_t engine_slot_input_bytes(const engine_t *e, int slot, int n) {
        size_t last = (size_t)slot * e->plan.max_batch + n - 1;

        assert(n >= 1 && n <= e->packs[slot].rows);
        return e->offsets[last] + pack_row_bytes(e->formats[last]);
}

int engine_submit(engine_t *e, int slot, int n, errbuf_t *err) {
        int r;

        if (slot < 0 || slot >= e->plan.pipeline_depth)
                return errbuf_set(err, -EINVAL, "no slot %d", slot);
        if (n < 1 || n > e->plan.max_batch)
                return errbuf_set(err, -EINVAL, "a batch of %d records does not fit the plan (1..%d)", n,
                                  e->plan.max_batch);
        if (e->slot_state[slot] == ENGINE_SLOT_BUSY)
                return errbuf_set(err, -EBUSY, "slot %d is still in flight", slot);
        if (n > e->packs[slot].rows)
                return errbuf_set(err, -EINVAL, "a batch of %d records in slot %d, which holds %d placed", n, slot,
                                  e->packs[slot].rows);
        for (int i = 0; i < n; i++) {
                record_format_t f = e->formats[(size_t)slot * e->plan.max_batch + i];

                if (f != RECORD_RGB8 && f != RECORD_F32_CHW)
                        return errbuf_set(err, -EINVAL, "record %d of slot %d has no runnable format", i, slot);
        }
        e->slot_n[slot] = n;
        e->slot_state[slot] = ENGINE_SLOT_BUSY;
        r = e->ops->submit(e, slot, n, err);
        if (r < 0)
                e->slot_state[slot] = ENGINE_SLOT_IDLE;
        return r;
}

int engine_completion_fd(engine_t *e) {
        return e->ops->completion_fd(e);
}

int engine_reap(engine_t *e, int *slot, errbuf_t *err) {
        int r = e->ops->reap(e, slot, err);

        if (r > 0)
                e->slot_state[*slot] = ENGINE_SLOT_DONE;
        return r;
}

int engine_wait(engine_t *e, int slot, errbuf_t *err) {
        while (e->slot_state[slot] == ENGINE_SLOT_BUSY) {
                struct pollfd p = { .fd = engine_completion_fd(e), .events = POLLIN };
                int done, r;

                /* A bounded wait: a device that faults may never signal the fd,
                 * and the CUDA engine's reap notices such a fault by itself. */
                if (poll(&p, 1, 100) < 0 && errno != EINTR)
                        return errbuf_set(err, -errno, "waiting for the engine: %s", strerror(errno));
                r = engine_reap(e, &done, err);
                if (r < 0)
                        return r;
        }
        if (e->slot_state[slot] != ENGINE_SLOT_DONE)
                return errbuf_set(err, -EINVAL, "slot %d was never submitted", slot);
        return 0;
}

const float *engine_slot_logits(engine_t *e, int slot) {
        return e->ops->slot_logits(e, slot);
}

const engine_topk_t *engine_slot_topk(engine_t *e, int slot) {
        return e->ops->slot_topk(e, slot);
}

const float *engine_slot_embedding(engine_t *e, int slot) {
        if (e->plan.embedding_dim == 0 || !e->ops->slot_embedding)
                return NULL;
        return e->ops->slot_embedding(e, slot);
}

int engine_embedding_dim(const engine_t *e) {
        return e->plan.embedding_dim;
}

int engine_device_memory(engine_t *e, engine_device_memory_t *ret, errbuf_t *err) {
        if (!e->ops->device_memory)
                return -EOPNOTSUPP;
        return e->ops->device_memory(e, ret, err);
}

/* plan: the memory planner. See plan.h for what it decides and why. */
#include "core/plan.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/units.h"

static const char *const backend_names[] = { "auto", "cpu", "cuda" };
static const char *const precision_names[] = { "auto", "fp32", "fp16", "bf16" };

const char *backend_name(backend_t b) {
        return (unsigned)b < 3 ? backend_names[b] : "?";
}

const char *precision_name(precision_t p) {
        return (unsigned)p < 4 ? precision_names[p] : "?";
}

int backend_from_string(const char *s, backend_t *ret) {
        for (int i = 0; i < 3; i++)
                if (strcmp(s, backend_names[i]) == 0) {
                        *ret = (backend_t)i;
                        return 0;
                }
        return -EINVAL;
}

int precision_from_string(const char *s, precision_t *ret) {
        for (int i = 0; i < 4; i++)
                if (strcmp(s, precision_names[i]) == 0) {
                        *ret = (precision_t)i;
                        return 0;
                }
        return -EINVAL;
}

size_t precision_bytes(precision_t p) {
        return p == PRECISION_FP16 || p == PRECISION_BF16 ? 2 : 4;
}

const char *plan_limit_name(plan_limit_t l) {
        static const char *const names[] = { "max_batch", "budget", "operand" };

        return (unsigned)l < 3 ? names[l] : "?";
}

/* The largest batch whose operand of `per_sample` elements a sample stays
 * below PLAN_OPERAND_ELEMS_LIMIT; 0 when there is no cap (per_sample 0),
 * and 0 as well when not even one sample fits (plan_make refuses that). */
static int plan_operand_cap(uint64_t per_sample) {
        uint64_t cap;

        if (per_sample == 0)
                return 0;
        cap = (PLAN_OPERAND_ELEMS_LIMIT - 1) / per_sample;
        return cap > INT32_MAX ? INT32_MAX : (int)cap;
}

static size_t plan_align(size_t v, size_t a) {
        return (v + a - 1) / a * a;
}

uint64_t plan_weight_layout(const model_t *m, precision_t p, size_t w_offset[MODEL_MAX_OPS],
                            size_t b_offset[MODEL_MAX_OPS]) {
        size_t off = 0;

        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t w = 0, b = 0;

                if (op->kind == MODEL_OP_CONV || op->kind == MODEL_OP_FC) {
                        w = off;
                        off = plan_align(off + (size_t)op->cout * op->kh * op->kw * op->cin * precision_bytes(p),
                                         PLAN_WEIGHT_ALIGN_BYTES);
                        b = off;
                        off = plan_align(off + (size_t)op->cout * sizeof(float), PLAN_WEIGHT_ALIGN_BYTES);
                }
                if (w_offset)
                        w_offset[i] = w;
                if (b_offset)
                        b_offset[i] = b;
        }
        return off;
}

uint64_t plan_cpu_model_weight_bytes(const model_t *m, bool convs) {
        size_t off = 0;

        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                if (op->kind == MODEL_OP_FC || convs)
                        off = plan_align(off + (size_t)op->cout * op->kh * op->kw * op->cin * sizeof(float),
                                         PLAN_WEIGHT_ALIGN_BYTES);
                off = plan_align(off + (size_t)op->cout * sizeof(float), PLAN_WEIGHT_ALIGN_BYTES);
        }
        return off;
}

int plan_residual_in_place(const model_t *m, int op_index) {
        const model_op_t *op = &m->ops[op_index];

        if (op->kind != MODEL_OP_CONV || op->residual < 0 || op->residual == op->in)
                return 0;
        assert(m->tensors[op->residual].elems == m->tensors[op->out].elems);
        /* Read by no later op (another branch): its bytes are free to take. */
        return m->tensors[op->residual].last_use == op_index;
}

/* Greedy placement by liveness: tensors in decreasing size, each at the
 * lowest aligned offset that does not collide with an already placed tensor
 * whose lifetime [producer, last_use] overlaps its own. Lifetimes are
 * inclusive at both ends, so an op's inputs and output never share bytes,
 * except where residual_in_place joins a conv's output to its residual
 * input (plan_residual_in_place): the two are then placed as one tensor
 * living from the residual's producer to the output's last use, and a
 * stage's chain of blocks becomes one such tensor. */
size_t plan_place_tensors(const model_t *m, bool residual_in_place, size_t offsets[MODEL_MAX_TENSORS]) {
        int order[MODEL_MAX_TENSORS], placed[MODEL_MAX_TENSORS], root[MODEL_MAX_TENSORS], n_placed = 0;
        int first[MODEL_MAX_TENSORS], last[MODEL_MAX_TENSORS];  /* a root's lifetime: all its tensors' */
        size_t arena = 0;

        for (int i = 0; i < m->n_tensors; i++) {
                root[i] = i;
                first[i] = m->tensors[i].producer;
                last[i] = m->tensors[i].last_use;
        }
        /* In table order, so that a chain's later output finds its
         * residual's root already joined. */
        for (int i = 0; residual_in_place && i < m->n_ops; i++) {
                int out = m->ops[i].out, r;

                if (!plan_residual_in_place(m, i))
                        continue;
                r = root[m->ops[i].residual];
                assert(root[out] == out);
                root[out] = r;
                if (m->tensors[out].last_use > last[r])
                        last[r] = m->tensors[out].last_use;
        }
        for (int i = 0; i < m->n_tensors; i++)
                order[i] = i;
        for (int i = 1; i < m->n_tensors; i++)         /* insertion sort: size desc, then id */
                for (int j = i; j > 0 && m->tensors[order[j]].elems > m->tensors[order[j - 1]].elems; j--) {
                        int t = order[j];
                        order[j] = order[j - 1];
                        order[j - 1] = t;
                }
        for (int i = 0; i < m->n_tensors; i++) {
                int t = order[i];
                size_t size = plan_align(m->tensors[t].elems, PLAN_TENSOR_ALIGN_ELEMS), off = 0;
                int moved = 1;

                if (root[t] != t)
                        continue;       /* placed with its root, below */
                while (moved) {
                        moved = 0;
                        for (int k = 0; k < n_placed; k++) {
                                int u = placed[k];
                                size_t uo = offsets[u], us = plan_align(m->tensors[u].elems, PLAN_TENSOR_ALIGN_ELEMS);

                                if (last[t] < first[u] || last[u] < first[t])
                                        continue;       /* lifetimes disjoint */
                                if (off + size <= uo || uo + us <= off)
                                        continue;       /* bytes disjoint */
                                off = uo + us;
                                moved = 1;
                        }
                }
                offsets[t] = off;
                placed[n_placed++] = t;
                if (off + size > arena)
                        arena = off + size;
        }
        for (int i = 0; i < m->n_tensors; i++)
                offsets[i] = offsets[root[i]];
        return arena;
}

/* The decode buffers follow from max_pixels alone. The shorter side of an
 * image is at most S = sqrt(max_pixels); Resize(256) then scales either axis
 * by at most S / 255 (the long side's output is int(256 * long / short),
 * at least 256 * long / short - 1), and the 224 cropped rows of the vertical
 * pass read at most 225 * scale + 2 input rows, 227 when upscaling. The
 * bilinear filter's support is max(scale, 1) on each side. */
int plan_decode_terms(uint64_t max_pixels, uint64_t input_bytes, plan_decode_terms_t *t) {
        uint64_t s, scale_ceil;

        memset(t, 0, sizeof(*t));
        if (max_pixels == 0)
                return -EINVAL;
        for (s = 1; (s + 1) * (s + 1) <= max_pixels && s < PLAN_DECODE_MAX_SIDE; s++)
                ;
        /* s is at most 65535 and the loop runs that often at most: cheap. */
        scale_ceil = (s + 254) / 255;
        t->resize_rows = (225 * s + 254) / 255 + 3;
        if (t->resize_rows < 228)
                t->resize_rows = 228;
        t->resize_taps = 2 * (scale_ceil < 1 ? 1 : scale_ceil) + 3;
        t->pixel_bytes = max_pixels * 4;
        t->resize_bytes = (uint64_t)PLAN_DECODE_OUT_SIDE * t->resize_rows * 3 +
                          2 * (uint64_t)PLAN_DECODE_OUT_SIDE * (t->resize_taps * sizeof(int32_t) + 2 * sizeof(int32_t));
        t->input_bytes = input_bytes;
        t->buffer_bytes = t->pixel_bytes + t->resize_bytes + t->input_bytes;
        /* libjpeg holds a progressive image's coefficients whole (2 bytes a
         * sample, up to 4 full-resolution components, MCU padding on the
         * edges); libspng's rows and zlib's window, libdeflate's decompressor
         * (a plain PNG's image data is inflated into the pixel buffer itself),
         * libjpeg's row buffers and tables fit well within the fixed part.
         * libwebp decodes into the pixel buffer (RGB, 3 bytes a pixel) and
         * holds at most a lossless image's ARGB pixels (4 bytes a pixel, plus
         * 32 rows of cache) and, with alpha, an alpha plane and its lossless
         * decoder's bytes (2 bytes a pixel): 6 of the 8 bytes a pixel, its
         * rows within the per-side part; a lossy image's own buffers are a
         * few rows (the per-side part). */
        t->library_bytes = 8 * max_pixels + 8 * 32 * 2 * (uint64_t)(PLAN_DECODE_MAX_SIDE + 1) + ((uint64_t)16 << 20);
        return 0;
}

static uint64_t plan_decode_context_bytes(const plan_decode_terms_t *t) {
        return t->buffer_bytes + t->library_bytes;
}

const char *plan_decode_limit_name(plan_decode_limit_t l) {
        static const char *const names[] = { "none", "threads", "cores", "budget", "running" };

        return (unsigned)l < sizeof(names) / sizeof(names[0]) ? names[l] : "?";
}

int plan_decode_fit(uint64_t host_left_bytes, uint64_t reserve_bytes, int threads, int auto_max,
                    uint64_t per_thread_bytes, int *ret_threads, plan_decode_limit_t *ret_limit) {
        uint64_t usable, share, n;

        assert(per_thread_bytes > 0 && threads >= 0);
        usable = host_left_bytes > reserve_bytes ? host_left_bytes - reserve_bytes : 0;
        if (threads > 0) {
                if ((uint64_t)threads > usable / per_thread_bytes)
                        return -ENOSPC;
                *ret_threads = threads;
                *ret_limit = PLAN_DECODE_LIMIT_THREADS;
                return 0;
        }
        assert(auto_max > 0);
        if (usable < per_thread_bytes)
                return -ENOSPC;
        /* Half of what the pinned buffers leave, never past the reserve. */
        share = host_left_bytes / 2 < usable ? host_left_bytes / 2 : usable;
        n = share / per_thread_bytes;
        if (n >= (uint64_t)auto_max) {
                *ret_threads = auto_max;
                *ret_limit = PLAN_DECODE_LIMIT_CORES;
        } else {
                *ret_threads = n > 1 ? (int)n : 1;
                *ret_limit = PLAN_DECODE_LIMIT_BUDGET;
        }
        return 0;
}

/* ", the decode staging (S)" when there is one, else "". */
static const char *plan_staging_what(uint64_t staging_bytes, char *buf, size_t len) {
        char a[32];

        buf[0] = 0;
        if (staging_bytes > 0)
                snprintf(buf, len, ", the decode staging (%s)", units_format_size(staging_bytes, a, sizeof(a)));
        return buf;
}

int plan_decode_refuse(errbuf_t *err, uint64_t host_budget_bytes, uint64_t pinned_bytes, uint64_t staging_bytes,
                       uint64_t reserve_bytes, int threads, uint64_t max_pixels, uint64_t per_thread_bytes) {
        char a[32], b[32], c[32], d[32], pinned[128] = "", staging[64];

        /* --check-config knows no pinned buffers yet (0): it says nothing of them. */
        if (pinned_bytes > 0)
                snprintf(pinned, sizeof(pinned), "the pinned buffers (%s)%s and ",
                         units_format_size(pinned_bytes, b, sizeof(b)),
                         plan_staging_what(staging_bytes, staging, sizeof(staging)));
        return errbuf_set(err, -ENOSPC,
                          "the plan does not fit: [memory] host_budget (%s), less %slibrdkafka's minimum (%s), "
                          "leaves too little for %d decode thread%s of %s each ([decode] threads = %d, each sized "
                          "for [decode] max_pixels = %llu): lower [decode] threads or max_pixels, or raise "
                          "[memory] host_budget",
                          units_format_size(host_budget_bytes, a, sizeof(a)), pinned,
                          units_format_size(reserve_bytes, c, sizeof(c)),
                          threads > 0 ? threads : 1, threads == 1 || threads == 0 ? "" : "s",
                          units_format_size(per_thread_bytes, d, sizeof(d)), threads,
                          (unsigned long long)max_pixels);
}

int plan_decode_refuse_running(errbuf_t *err, uint64_t host_budget_bytes, uint64_t pinned_bytes,
                               uint64_t staging_bytes, uint64_t reserve_bytes, int threads, uint64_t max_pixels,
                               uint64_t per_thread_bytes) {
        char a[32], b[32], c[32], d[32], staging[64];

        return errbuf_set(err, -ENOSPC,
                          "the plan does not fit: [memory] host_budget (%s), less the pinned buffers (%s)%s and "
                          "librdkafka's minimum (%s), leaves too little for the %d decode thread%s running since "
                          "start (%s each, sized for [decode] max_pixels = %llu at start; the decode pool is not "
                          "resized before a restart, whatever [decode] threads and max_pixels now say): raise "
                          "[memory] host_budget, or restart inferd to plan the decode threads again",
                          units_format_size(host_budget_bytes, a, sizeof(a)),
                          units_format_size(pinned_bytes, b, sizeof(b)),
                          plan_staging_what(staging_bytes, staging, sizeof(staging)),
                          units_format_size(reserve_bytes, c, sizeof(c)), threads, threads == 1 ? "" : "s",
                          units_format_size(per_thread_bytes, d, sizeof(d)), (unsigned long long)max_pixels);
}

uint64_t plan_kafka_hold_records(uint64_t hold_us, int rate_per_s, int pipeline_depth, int batch) {
        uint64_t slots = (uint64_t)pipeline_depth * (uint64_t)batch, at_rate;

        if (hold_us == 0)
                return 0;
        at_rate = ((uint64_t)rate_per_s * hold_us + 999999) / 1000000;
        return at_rate > slots ? at_rate : slots;
}

static uint64_t plan_clamp(uint64_t v, uint64_t lo, uint64_t hi) {
        return v < lo ? lo : v > hi ? hi : v;
}

void plan_kafka_split(uint64_t rest_bytes, uint64_t hold_bytes, uint64_t fetch_scale, uint64_t *queue_bytes,
                      uint64_t *fetch_bytes, uint64_t *fetch_wire_bytes, uint64_t *producer_bytes) {
        uint64_t q = plan_clamp(rest_bytes / 2, PLAN_KAFKA_QUEUE_MIN_BYTES, (uint64_t)1 << 30), q_min, left, wire;
        uint64_t fetch_min = fetch_scale * PLAN_KAFKA_FETCH_WIRE_MIN_BYTES;

        q_min = hold_bytes < PLAN_KAFKA_QUEUE_MAX_BYTES ? hold_bytes : PLAN_KAFKA_QUEUE_MAX_BYTES;
        if (q_min < PLAN_KAFKA_QUEUE_MIN_BYTES)
                q_min = PLAN_KAFKA_QUEUE_MIN_BYTES;
        if (q < q_min)
                q = q_min;
        /* Half of the rest leaves too little for the other two floors: the
         * queue takes what they leave, down to its own floor. */
        if (rest_bytes < q + fetch_min + PLAN_KAFKA_PRODUCER_MIN_BYTES)
                q = rest_bytes > q_min + fetch_min + PLAN_KAFKA_PRODUCER_MIN_BYTES
                            ? rest_bytes - fetch_min - PLAN_KAFKA_PRODUCER_MIN_BYTES
                            : q_min;
        left = rest_bytes > q ? rest_bytes - q : 0;
        *queue_bytes = q;
        wire = left / 2 / fetch_scale;
        *producer_bytes = plan_clamp(left / 2, PLAN_KAFKA_PRODUCER_MIN_BYTES, (uint64_t)1 << 30);
        /* Too little for halves above both floors: the producer's floor
         * first (a DLQ copy must fit), the fetch responses the rest. */
        if (left / 2 < fetch_min || left / 2 < PLAN_KAFKA_PRODUCER_MIN_BYTES) {
                *producer_bytes = PLAN_KAFKA_PRODUCER_MIN_BYTES;
                wire = left > PLAN_KAFKA_PRODUCER_MIN_BYTES ? (left - PLAN_KAFKA_PRODUCER_MIN_BYTES) / fetch_scale : 0;
        }
        *fetch_wire_bytes = plan_clamp(wire, PLAN_KAFKA_FETCH_WIRE_MIN_BYTES, PLAN_KAFKA_FETCH_WIRE_MAX_BYTES);
        *fetch_bytes = *fetch_wire_bytes * fetch_scale;
}

/* librdkafka's terms of a plan whose host_rest_bytes is known. */
static void plan_kafka_terms(plan_t *p) {
        plan_kafka_split(p->host_rest_bytes, p->kafka_hold_bytes,
                         plan_kafka_fetch_scale(p->kafka_fetch_responses, p->kafka_compression_ratio),
                         &p->kafka_queue_bytes, &p->kafka_fetch_bytes, &p->kafka_fetch_wire_bytes,
                         &p->kafka_producer_bytes);
}

uint64_t plan_cache_bytes(int entries, int top_k, int embedding_dim) {
        if (entries <= 0)
                return 0;
        return (uint64_t)entries * (PLAN_CACHE_ENTRY_BYTES + (uint64_t)top_k * PLAN_CACHE_CLASS_BYTES +
                                    (uint64_t)embedding_dim * sizeof(float));
}

uint64_t plan_arena_bytes(const plan_t *p) {
        return (p->engine.weights_in_arena ? p->weights_bytes : 0) + p->activation_bytes +
               p->engine.workspace_bytes + p->engine.staging_bytes;
}

int plan_at_batch(const model_t *m, const plan_request_t *req, int batch, plan_t *p) {
        uint64_t arena;
        int r;

        memset(p, 0, sizeof(*p));
        p->backend = req->backend;
        p->precision = req->precision;
        p->max_batch = batch;
        p->pipeline_depth = req->pipeline_depth;
        p->top_k = req->top_k;
        p->embedding_dim = req->embedding ? model_embedding_dim(m) : 0;
        snprintf(p->model, sizeof(p->model), "%s", m->arch.name);
        p->classes = m->classes;
        p->record_bytes = req->record_bytes;
        p->device_memory_bytes = req->device_memory_bytes;
        p->budget_bytes = req->budget_bytes;
        p->host_budget_bytes = req->host_budget_bytes;
        /* The CPU engine keeps the model's folded fp32 biases and fc, and
         * its convs' weights only for the reference (its terms add oneDNN's
         * reordered copy of them: bf16 in bf16); the CUDA engine uploads
         * every block in its precision. */
        if (req->backend == BACKEND_CPU)
                p->weights_bytes = plan_cpu_model_weight_bytes(m, req->cpu_reference || req->cpu_keep_conv_weights);
        else
                p->weights_bytes = plan_weight_layout(m, req->precision, NULL, NULL);
        r = req->terms(m, req, batch, &p->engine);
        if (r < 0)
                return r;
        p->arena_elems_per_sample = plan_place_tensors(m, p->engine.residual_in_place, p->tensor_offset);
        p->activation_bytes_per_sample = p->arena_elems_per_sample * precision_bytes(req->precision);
        p->activation_bytes = p->activation_bytes_per_sample * (uint64_t)batch;
        p->weights_bytes += p->engine.weights_copy_bytes;
        p->operand_batch_cap = plan_operand_cap(p->engine.gemm_operand_elems_per_sample);
        p->limit = PLAN_LIMIT_MAX_BATCH;
        p->workspace_bytes = p->engine.workspace_bytes;
        /* A swap keeps the staging allocated at open: a smaller batch
         * carves less of it, but the process holds it all. */
        p->held_pinned_host_bytes = req->held_pinned_host_bytes;
        p->pinned_host_bytes = p->engine.pinned_host_bytes > req->held_pinned_host_bytes
                                       ? p->engine.pinned_host_bytes
                                       : req->held_pinned_host_bytes;
        p->host_reserve_bytes = req->host_reserve_bytes;
        /* librdkafka's queue holds the hold's records: the reserve that
         * neither the pinned buffers nor decoding may take covers them and
         * the floors of the fetch responses and the producer's queue. A
         * hold past the queue's largest size cannot be kept. */
        p->kafka_hold_records = plan_kafka_hold_records(req->kafka_hold_us, req->kafka_hold_rate_per_s,
                                                        req->pipeline_depth, batch);
        p->kafka_hold_us = req->kafka_hold_us;
        p->kafka_hold_bytes = p->kafka_hold_records * req->record_bytes;
        p->kafka_fetch_responses = req->kafka_fetch_responses > 0 ? req->kafka_fetch_responses : 1;
        p->kafka_compression_ratio = req->kafka_compression_ratio > 0 ? req->kafka_compression_ratio : 1;
        if (p->kafka_hold_bytes > 0) {
                uint64_t need = p->kafka_hold_bytes +
                                plan_kafka_fetch_min_bytes(p->kafka_fetch_responses, p->kafka_compression_ratio) +
                                PLAN_KAFKA_PRODUCER_MIN_BYTES;

                if (p->kafka_hold_bytes > PLAN_KAFKA_QUEUE_MAX_BYTES)
                        need = UINT64_MAX / 4;
                if (need > p->host_reserve_bytes)
                        p->host_reserve_bytes = need;
        }
        if (req->decode_threads > 0 || req->decode_threads_auto > 0) {
                r = plan_decode_terms(req->decode_max_pixels, req->decode_input_bytes, &p->decode);
                if (r < 0)
                        return r;
                /* Automatic contexts count as one until plan_make has the
                 * batch and shares out what it leaves. */
                p->decode_threads = req->decode_threads > 0 ? req->decode_threads : 1;
                p->decode_limit = req->decode_threads == 0 ? PLAN_DECODE_LIMIT_BUDGET
                                  : req->decode_running    ? PLAN_DECODE_LIMIT_RUNNING
                                                           : PLAN_DECODE_LIMIT_THREADS;
                p->decode_max_pixels = req->decode_max_pixels;
                if (req->decode_staged) {
                        p->decode_staging_bytes = (uint64_t)req->pipeline_depth * (uint64_t)batch *
                                                  (uint64_t)PLAN_DECODE_OUT_SIDE * PLAN_DECODE_OUT_SIDE * 3;
                        /* A swap keeps the staging made at start. */
                        if (req->held_decode_staging_bytes > p->decode_staging_bytes)
                                p->decode_staging_bytes = req->held_decode_staging_bytes;
                }
                p->decode_host_bytes = (uint64_t)p->decode_threads * plan_decode_context_bytes(&p->decode) +
                                       p->decode_staging_bytes;
        }
        /* The result cache: one block made at start, which a swap keeps. */
        p->cache_entries = req->cache_entries;
        p->cache_bytes = plan_cache_bytes(req->cache_entries, req->top_k, p->embedding_dim);
        if (req->held_cache_bytes > p->cache_bytes)
                p->cache_bytes = req->held_cache_bytes;
        p->host_rest_bytes = p->host_budget_bytes > p->pinned_host_bytes + p->decode_host_bytes + p->cache_bytes
                                     ? p->host_budget_bytes - p->pinned_host_bytes - p->decode_host_bytes -
                                               p->cache_bytes
                                     : 0;
        plan_kafka_terms(p);
        /* Likewise the arena: what this batch does not carve of it is held. */
        arena = plan_arena_bytes(p);
        p->held_arena_bytes = req->held_arena_bytes;
        p->arena_kept_bytes = req->held_arena_bytes > arena ? req->held_arena_bytes - arena : 0;
        p->total_bytes = p->engine.context_bytes + p->engine.graph_bytes + p->weights_bytes + p->activation_bytes +
                         p->engine.workspace_bytes + p->engine.staging_bytes + p->arena_kept_bytes;
        return 0;
}

static int plan_fits(const plan_t *p) {
        return p->total_bytes <= p->budget_bytes &&
               p->pinned_host_bytes + p->decode_host_bytes + p->cache_bytes + p->host_reserve_bytes <=
                       p->host_budget_bytes;
}

/* Names the reserve kept for librdkafka in a refusal: its floors, or its
 * queues sized for the hold's records. */
static const char *plan_reserve_what(const plan_t *p, char *buf, size_t len) {
        char a[32], b[32];

        if (p->kafka_hold_bytes + plan_kafka_fetch_min_bytes(p->kafka_fetch_responses, p->kafka_compression_ratio) +
                            PLAN_KAFKA_PRODUCER_MIN_BYTES < p->host_reserve_bytes ||
            p->kafka_hold_bytes == 0)
                snprintf(buf, len, "librdkafka's minimum (%s)", units_format_size(p->host_reserve_bytes, a, sizeof(a)));
        else
                snprintf(buf, len, "librdkafka's queues (%s, the consumer queue holding %llu records of up to %s "
                         "for the back-pressure hold)", units_format_size(p->host_reserve_bytes, a, sizeof(a)),
                         (unsigned long long)p->kafka_hold_records, units_format_size(p->record_bytes, b, sizeof(b)));
        return buf;
}

/* What engine.context_bytes holds: the CUDA context, or on the CPU
 * oneDNN's kernels (the code it generates for each primitive). */
static const char *plan_context_name(const plan_t *p) {
        return p->backend == BACKEND_CPU ? "oneDNN's kernels" : "the CUDA context";
}

/* Explains why batch 1 does not fit: the first term, in the order they are
 * committed, that takes the running sum past the budget. */
static int plan_refuse(const plan_t *p, errbuf_t *err) {
        const struct {
                const char *name;
                uint64_t bytes;
        } terms[] = {
                { plan_context_name(p), p->engine.context_bytes },
                { "the CUDA graphs", p->engine.graph_bytes },
                { "the weights", p->weights_bytes },
                { "the workspace", p->engine.workspace_bytes },
                { "the device staging buffers", p->engine.staging_bytes },
                { "the activations of one sample", p->activation_bytes },
        };
        char a[32], b[32], c[32], d[32], what[200];
        uint64_t sum = 0;

        /* A swap's plan: the arena allocated at open outweighs this batch's
         * carve, and only a larger budget or a restart changes that. */
        if (p->arena_kept_bytes > 0 && p->total_bytes > p->budget_bytes) {
                char rest[160] = "";

                if (p->engine.context_bytes + p->engine.graph_bytes > 0)
                        snprintf(rest, sizeof(rest), " with %s (%s)",
                                 p->backend == BACKEND_CPU ? plan_context_name(p) : "the CUDA context and graphs",
                                 units_format_size(p->engine.context_bytes + p->engine.graph_bytes, b, sizeof(b)));
                if (!p->engine.weights_in_arena)
                        snprintf(rest + strlen(rest), sizeof(rest) - strlen(rest), " beside the weights (%s)",
                                 units_format_size(p->weights_bytes, d, sizeof(d)));
                return errbuf_set(err, -ENOSPC,
                                  "the plan does not fit: the %s budget ([memory] gpu_budget) of %s is too small "
                                  "for the %s arena allocated at start (a model swap in place keeps it until a "
                                  "restart, whatever batch the new plan carves from it)%s: raise [memory] "
                                  "gpu_budget, or restart inferd to plan the arena again",
                                  p->backend == BACKEND_CUDA ? "device" : "memory",
                                  units_format_size(p->budget_bytes, c, sizeof(c)),
                                  units_format_size(p->held_arena_bytes, a, sizeof(a)), rest);
        }
        for (size_t i = 0; i < sizeof(terms) / sizeof(terms[0]); i++) {
                if (sum + terms[i].bytes > p->budget_bytes)
                        return errbuf_set(err, -ENOSPC,
                                          "the plan does not fit: the %s budget of %s runs out at %s (%s), "
                                          "with %s of it left",
                                          p->backend == BACKEND_CUDA ? "device" : "memory",
                                          units_format_size(p->budget_bytes, c, sizeof(c)), terms[i].name,
                                          units_format_size(terms[i].bytes, a, sizeof(a)),
                                          units_format_size(p->budget_bytes - sum, b, sizeof(b)));
                sum += terms[i].bytes;
        }
        /* A swap's plan: what this batch carves would fit, but the pinned
         * buffers allocated at open, which the swap keeps, do not. */
        if (p->held_pinned_host_bytes > p->engine.pinned_host_bytes &&
            p->pinned_host_bytes + p->decode_host_bytes + p->host_reserve_bytes > p->host_budget_bytes &&
            p->engine.pinned_host_bytes + p->decode_host_bytes + p->host_reserve_bytes <= p->host_budget_bytes) {
                char decode[200] = "", e[32], staging[64];

                if (p->decode_threads > 0)
                        snprintf(decode, sizeof(decode), ", the %d decode thread%s %s (%s)%s", p->decode_threads,
                                 p->decode_threads == 1 ? "" : "s",
                                 p->decode_limit == PLAN_DECODE_LIMIT_RUNNING ? "running since start" : "planned",
                                 units_format_size(p->decode_host_bytes - p->decode_staging_bytes, e, sizeof(e)),
                                 plan_staging_what(p->decode_staging_bytes, staging, sizeof(staging)));
                return errbuf_set(err, -ENOSPC,
                                  "the plan does not fit: [memory] host_budget (%s) is too small for the pinned "
                                  "buffers allocated at start (%s for %d slots, kept whole by a model swap in "
                                  "place until a restart, where batch 1 would carve %s of them)%s and "
                                  "%s: raise [memory] host_budget, or restart inferd to plan "
                                  "the pinned buffers again",
                                  units_format_size(p->host_budget_bytes, b, sizeof(b)),
                                  units_format_size(p->held_pinned_host_bytes, a, sizeof(a)), p->pipeline_depth,
                                  units_format_size(p->engine.pinned_host_bytes, d, sizeof(d)), decode,
                                  plan_reserve_what(p, what, sizeof(what)));
        }
        /* The host side would fit without the result cache: the cache is
         * what does not. */
        if (p->cache_bytes > 0 && p->kafka_hold_bytes <= PLAN_KAFKA_QUEUE_MAX_BYTES &&
            p->pinned_host_bytes + p->decode_host_bytes + p->host_reserve_bytes <= p->host_budget_bytes)
                return errbuf_set(err, -ENOSPC,
                                  "the plan does not fit: [memory] host_budget (%s) is too small for the result "
                                  "cache ([cache] entries = %d, %s) beside the pinned buffers (%s), decoding (%s) "
                                  "and %s: lower [cache] entries or raise [memory] host_budget",
                                  units_format_size(p->host_budget_bytes, b, sizeof(b)), p->cache_entries,
                                  units_format_size(p->cache_bytes, a, sizeof(a)),
                                  units_format_size(p->pinned_host_bytes, c, sizeof(c)),
                                  units_format_size(p->decode_host_bytes, d, sizeof(d)),
                                  plan_reserve_what(p, what, sizeof(what)));
        if (p->kafka_hold_bytes > PLAN_KAFKA_QUEUE_MAX_BYTES)
                return errbuf_set(err, -ENOSPC,
                                  "the plan does not fit: librdkafka's consumer queue would have to hold %llu records "
                                  "of up to %s (%s) for the back-pressure hold of %.1f s at [batching] "
                                  "max_images_per_s, past its largest size of %s: lower [batching] max_images_per_s",
                                  (unsigned long long)p->kafka_hold_records,
                                  units_format_size(p->record_bytes, a, sizeof(a)),
                                  units_format_size(p->kafka_hold_bytes, b, sizeof(b)),
                                  (double)p->kafka_hold_us / 1e6,
                                  units_format_size(PLAN_KAFKA_QUEUE_MAX_BYTES, c, sizeof(c)));
        if (p->pinned_host_bytes + p->host_reserve_bytes > p->host_budget_bytes)
                return errbuf_set(err, -ENOSPC,
                                  "the plan does not fit: the host budget of %s is too small for the pinned buffers "
                                  "of %d slots of one sample (%s) and %s",
                                  units_format_size(p->host_budget_bytes, b, sizeof(b)), p->pipeline_depth,
                                  units_format_size(p->pinned_host_bytes, a, sizeof(a)),
                                  plan_reserve_what(p, what, sizeof(what)));
        if (p->decode_limit == PLAN_DECODE_LIMIT_RUNNING)
                return plan_decode_refuse_running(err, p->host_budget_bytes, p->pinned_host_bytes,
                                                  p->decode_staging_bytes, p->host_reserve_bytes, p->decode_threads, p->decode_max_pixels,
                                                  plan_decode_context_bytes(&p->decode));
        return plan_decode_refuse(err, p->host_budget_bytes, p->pinned_host_bytes, p->decode_staging_bytes,
                                  p->host_reserve_bytes,
                                  p->decode_limit == PLAN_DECODE_LIMIT_THREADS ? p->decode_threads : 0,
                                  p->decode_max_pixels, plan_decode_context_bytes(&p->decode));
}

int plan_make(const model_t *m, const plan_request_t *req, plan_t *ret, errbuf_t *err) {
        plan_t p;
        int lo, hi, cap, r;

        if (req->pipeline_depth < 2)
                return errbuf_set(err, -EINVAL, "the pipeline needs at least 2 slots, not %d", req->pipeline_depth);
        if (req->max_batch < 1)
                return errbuf_set(err, -EINVAL, "max_batch must be at least 1, not %d", req->max_batch);
        if (req->precision == PRECISION_AUTO || req->backend == BACKEND_AUTO || !req->terms)
                return errbuf_set(err, -EINVAL, "the plan needs a resolved backend and precision");
        if (req->top_k > m->classes)
                return errbuf_set(err, -EINVAL, "top-k %d is above the %d class%s of the model (%s)", req->top_k,
                                  m->classes, m->classes == 1 ? "" : "es", m->arch.name);
        r = plan_at_batch(m, req, 1, &p);
        if (r < 0)
                return errbuf_set(err, r, "the %s engine cannot plan this request", backend_name(req->backend));
        if (!plan_fits(&p))
                return plan_refuse(&p, err);
        if (p.engine.gemm_operand_elems_per_sample >= PLAN_OPERAND_ELEMS_LIMIT)
                return errbuf_set(err, -ENOSPC, "the plan does not fit: one sample's largest GEMM operand has "
                                  "%llu elements, at or past the limit of 2^31",
                                  (unsigned long long)p.engine.gemm_operand_elems_per_sample);
        cap = p.operand_batch_cap;
        /* The total grows with the batch: bisect for the largest that fits. */
        lo = 1;
        hi = cap > 0 && cap < req->max_batch ? cap : req->max_batch;
        while (lo < hi) {
                int mid = lo + (hi - lo + 1) / 2;

                r = plan_at_batch(m, req, mid, &p);
                if (r < 0)
                        return errbuf_set(err, r, "the %s engine cannot plan batch %d", backend_name(req->backend),
                                          mid);
                if (plan_fits(&p))
                        lo = mid;
                else
                        hi = mid - 1;
        }
        r = plan_at_batch(m, req, lo, ret);
        if (r < 0)
                return errbuf_set(err, r, "the %s engine cannot plan batch %d", backend_name(req->backend), lo);
        if (lo == req->max_batch)
                ret->limit = PLAN_LIMIT_MAX_BATCH;
        else if (lo == cap)
                ret->limit = PLAN_LIMIT_OPERAND;
        else
                ret->limit = PLAN_LIMIT_BUDGET;
        if (req->decode_threads == 0 && req->decode_threads_auto > 0) {
                /* One context fitted with this batch (plan_fits), so this
                 * cannot fail. */
                r = plan_decode_fit(ret->host_budget_bytes - ret->pinned_host_bytes - ret->decode_staging_bytes -
                                            ret->cache_bytes,
                                    ret->host_reserve_bytes, 0, req->decode_threads_auto,
                                    plan_decode_context_bytes(&ret->decode), &ret->decode_threads,
                                    &ret->decode_limit);
                assert(r == 0);
                ret->decode_host_bytes = (uint64_t)ret->decode_threads * plan_decode_context_bytes(&ret->decode) +
                                         ret->decode_staging_bytes;
                ret->host_rest_bytes = ret->host_budget_bytes - ret->pinned_host_bytes - ret->decode_host_bytes -
                                       ret->cache_bytes;
                plan_kafka_terms(ret);
        }
        return 0;
}

int plan_write_json(const plan_t *p, FILE *out) {
        fprintf(out,
                "{\"model\":\"%s\",\"classes\":%d,\"backend\":\"%s\",\"precision\":\"%s\",\"max_batch\":%d,\"pipeline_depth\":%d,"
                "\"weights_bytes\":%llu,\"activation_bytes_per_sample\":%llu,\"activation_bytes\":%llu,"
                "\"workspace_bytes\":%llu,\"staging_bytes\":%llu,\"context_bytes\":%llu,\"graph_bytes\":%llu,"
                "\"pinned_host_bytes\":%llu,\"total_bytes\":%llu,\"budget_bytes\":%llu,"
                "\"device_memory_bytes\":%llu,\"host_budget_bytes\":%llu,\"record_bytes\":%zu,\"top_k\":%d,"
                "\"embedding_dim\":%d,\"embedding_bytes\":%llu,\"cache_entries\":%d,\"cache_bytes\":%llu,"
                "\"batch_limit\":\"%s\",\"operand_batch_cap\":%d,\"gemm_operand_elems_per_sample\":%llu,"
                "\"decode_threads\":%d,\"decode_max_pixels\":%llu,\"decode_buffer_bytes_per_thread\":%llu,"
                "\"decode_library_bytes_per_thread\":%llu,\"decode_staging_bytes\":%llu,\"decode_host_bytes\":%llu,\"decode_threads_limit\":\"%s\","
                "\"host_reserve_bytes\":%llu,\"host_rest_bytes\":%llu,"
                "\"kafka_hold_us\":%llu,\"kafka_hold_records\":%llu,\"kafka_hold_bytes\":%llu,"
                "\"kafka_queue_bytes\":%llu,\"kafka_fetch_bytes\":%llu,\"kafka_fetch_wire_bytes\":%llu,"
                "\"kafka_fetch_responses\":%d,\"kafka_compression_ratio\":%d,\"kafka_producer_bytes\":%llu,"
                "\"held_arena_bytes\":%llu,\"arena_kept_bytes\":%llu,\"held_pinned_host_bytes\":%llu,\"carved_pinned_host_bytes\":%llu}\n",
                p->model, p->classes, backend_name(p->backend), precision_name(p->precision), p->max_batch,
                p->pipeline_depth, (unsigned long long)p->weights_bytes, (unsigned long long)p->activation_bytes_per_sample,
                (unsigned long long)p->activation_bytes, (unsigned long long)p->workspace_bytes,
                (unsigned long long)p->engine.staging_bytes, (unsigned long long)p->engine.context_bytes,
                (unsigned long long)p->engine.graph_bytes, (unsigned long long)p->pinned_host_bytes,
                (unsigned long long)p->total_bytes, (unsigned long long)p->budget_bytes,
                (unsigned long long)p->device_memory_bytes, (unsigned long long)p->host_budget_bytes,
                p->record_bytes, p->top_k, p->embedding_dim, (unsigned long long)p->engine.embedding_bytes,
                p->cache_entries, (unsigned long long)p->cache_bytes,
                plan_limit_name(p->limit), p->operand_batch_cap,
                (unsigned long long)p->engine.gemm_operand_elems_per_sample, p->decode_threads,
                (unsigned long long)p->decode_max_pixels, (unsigned long long)p->decode.buffer_bytes,
                (unsigned long long)p->decode.library_bytes, (unsigned long long)p->decode_staging_bytes,
                (unsigned long long)p->decode_host_bytes,
                plan_decode_limit_name(p->decode_limit), (unsigned long long)p->host_reserve_bytes,
                (unsigned long long)p->host_rest_bytes, (unsigned long long)p->kafka_hold_us,
                (unsigned long long)p->kafka_hold_records, (unsigned long long)p->kafka_hold_bytes,
                (unsigned long long)p->kafka_queue_bytes, (unsigned long long)p->kafka_fetch_bytes,
                (unsigned long long)p->kafka_fetch_wire_bytes, p->kafka_fetch_responses, p->kafka_compression_ratio,
                (unsigned long long)p->kafka_producer_bytes, (unsigned long long)p->held_arena_bytes,
                (unsigned long long)p->arena_kept_bytes, (unsigned long long)p->held_pinned_host_bytes,
                (unsigned long long)p->engine.pinned_host_bytes);
        return ferror(out) ? -EIO : 0;
}

int plan_write_text(const plan_t *p, FILE *out) {
        char c[32];
        const struct {
                const char *name;
                uint64_t bytes;
        } rows[] = {
                { p->backend == BACKEND_CPU ? "oneDNN kernels" : "CUDA context", p->engine.context_bytes },
                { "CUDA graphs", p->engine.graph_bytes },
                { "weights (once)", p->weights_bytes },
                { "activations", p->activation_bytes },
                { "workspace", p->workspace_bytes },
                { "device staging", p->engine.staging_bytes },
        };
        char a[32], b[32];

        fprintf(out, "memory plan: %s with %d class%s, %s engine, %s, batch up to %d, %d pipeline slots\n",
                p->model, p->classes, p->classes == 1 ? "" : "es", backend_name(p->backend),
                precision_name(p->precision), p->max_batch, p->pipeline_depth);
        if (p->limit == PLAN_LIMIT_OPERAND)
                fprintf(out, "  batch capped at %d: one more sample takes the largest GEMM operand (%llu elements a "
                        "sample) to 2^31 elements\n", p->max_batch,
                        (unsigned long long)p->engine.gemm_operand_elems_per_sample);
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
                fprintf(out, "  %-22s %12s  (%llu bytes)\n", rows[i].name,
                        units_format_size(rows[i].bytes, a, sizeof(a)), (unsigned long long)rows[i].bytes);
        fprintf(out, "  %-22s %12s  (%s per sample)\n", "", "",
                units_format_size(p->activation_bytes_per_sample, a, sizeof(a)));
        if (p->arena_kept_bytes > 0)
                fprintf(out, "  %-22s %12s  (%llu bytes: the arena of %s allocated at start, kept by a model swap "
                        "in place, less what this batch carves)\n", "arena kept from start",
                        units_format_size(p->arena_kept_bytes, a, sizeof(a)), (unsigned long long)p->arena_kept_bytes,
                        units_format_size(p->held_arena_bytes, b, sizeof(b)));
        fprintf(out, "  %-22s %12s  of a budget of %s\n", "total",
                units_format_size(p->total_bytes, a, sizeof(a)), units_format_size(p->budget_bytes, b, sizeof(b)));
        fprintf(out, "  %-22s %12s  of a host budget of %s\n", "pinned host",
                units_format_size(p->pinned_host_bytes, a, sizeof(a)),
                units_format_size(p->host_budget_bytes, b, sizeof(b)));
        if (p->pinned_host_bytes > p->engine.pinned_host_bytes)
                fprintf(out, "  %-22s %12s  (allocated at start and kept by a model swap in place; this batch "
                        "carves %s of them)\n", "", "", units_format_size(p->engine.pinned_host_bytes, a, sizeof(a)));
        if (p->embedding_dim > 0)
                fprintf(out, "  %-22s %12s  (in the pinned host bytes: %d fp32 a record, every slot position%s)\n",
                        "  embeddings", units_format_size(p->engine.embedding_bytes, a, sizeof(a)), p->embedding_dim,
                        p->backend == BACKEND_CUDA ? "; as much again in the device staging" : "");
        if (p->decode_threads > 0) {
                fprintf(out, "  decode (host, pageable): %d context%s for images up to %llu pixels (%s)\n",
                        p->decode_threads, p->decode_threads == 1 ? "" : "s", (unsigned long long)p->decode_max_pixels,
                        p->decode_limit == PLAN_DECODE_LIMIT_THREADS   ? "as configured"
                        : p->decode_limit == PLAN_DECODE_LIMIT_RUNNING ? "the running pool's, kept until a restart"
                        : p->decode_limit == PLAN_DECODE_LIMIT_CORES   ? "automatic: the cores minus one"
                                                                       : "automatic: what half the host budget left "
                                                                       "by the pinned buffers holds, at least 1");
                fprintf(out, "  %-22s %12s  (%llu bytes)\n", "  decoded pixels", units_format_size(p->decode.pixel_bytes, a, sizeof(a)),
                        (unsigned long long)p->decode.pixel_bytes);
                fprintf(out, "  %-22s %12s  (%llu bytes)\n", "  resize", units_format_size(p->decode.resize_bytes, a, sizeof(a)),
                        (unsigned long long)p->decode.resize_bytes);
                if (p->decode.input_bytes)
                        fprintf(out, "  %-22s %12s  (%llu bytes)\n", "  encoded input",
                                units_format_size(p->decode.input_bytes, a, sizeof(a)),
                                (unsigned long long)p->decode.input_bytes);
                fprintf(out, "  %-22s %12s  (%llu bytes, allocated by libjpeg/libspng/libwebp per image; a bound)\n",
                        "  library, at most", units_format_size(p->decode.library_bytes, a, sizeof(a)),
                        (unsigned long long)p->decode.library_bytes);
                if (p->decode_staging_bytes)
                        fprintf(out, "  %-22s %12s  (%llu bytes: a decoded image for each slot position, where a "
                                "record waits between its decode and its batch; one for all contexts)\n", "  staging",
                                units_format_size(p->decode_staging_bytes, a, sizeof(a)),
                                (unsigned long long)p->decode_staging_bytes);
                fprintf(out, "  %-22s %12s  (all contexts%s) of the host budget\n", "decode total",
                        units_format_size(p->decode_host_bytes, a, sizeof(a)),
                        p->decode_staging_bytes ? " and the staging" : "");
        }
        if (p->cache_bytes > 0)
                fprintf(out, "  %-22s %12s  (%llu bytes: [cache] entries = %d records' results, host, pageable)\n",
                        "result cache", units_format_size(p->cache_bytes, a, sizeof(a)),
                        (unsigned long long)p->cache_bytes, p->cache_entries);
        fprintf(out, "  %-22s %12s  of the host budget (librdkafka's queues; at least %s)\n", "host budget left",
                units_format_size(p->host_rest_bytes, a, sizeof(a)), units_format_size(p->host_reserve_bytes, b, sizeof(b)));
        if (p->kafka_hold_us > 0) {
                fprintf(out, "  %-22s %12s  (queued.max.messages.kbytes: at least a %.1f s back-pressure hold, %llu "
                        "records of up to %s = %s)\n", "  consumer queue",
                        units_format_size(p->kafka_queue_bytes, a, sizeof(a)), (double)p->kafka_hold_us / 1e6,
                        (unsigned long long)p->kafka_hold_records, units_format_size(p->record_bytes, b, sizeof(b)),
                        units_format_size(p->kafka_hold_bytes, c, sizeof(c)));
                fprintf(out, "  %-22s %12s  (%d response%s at once, one per broker, each fetch.max.bytes = %s on "
                        "the wire and decompressed up to %d:1, beyond the queue)\n", "  fetch responses",
                        units_format_size(p->kafka_fetch_bytes, a, sizeof(a)), p->kafka_fetch_responses,
                        p->kafka_fetch_responses == 1 ? "" : "s",
                        units_format_size(p->kafka_fetch_wire_bytes, b, sizeof(b)), p->kafka_compression_ratio);
                fprintf(out, "  %-22s %12s  (queue.buffering.max.kbytes: predictions and DLQ copies not yet "
                        "acknowledged)\n", "  producer queue", units_format_size(p->kafka_producer_bytes, a, sizeof(a)));
        }
        return ferror(out) ? -EIO : 0;
}

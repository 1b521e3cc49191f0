/* gpu_net: the whole network through the real submit path, and memory.
 *
 * Whole network: the same random records (rgb8 and f32 CHW alternating) go
 * through the CUDA engine (engine_submit + engine_wait: H2D, graph replay,
 * D2H) and through the CPU engine on the reference model, at batch sizes 1,
 * 3, 64 and the plan's max_batch. Per image, the relative L2 of the logits
 * must be within the precision's tolerance, top-1 must agree wherever the
 * CPU's top-1 margin is clear (more than twice the tolerated error norm, so
 * that a within-tolerance error cannot flip it), and the engine's top-k must
 * be a top-k of its own logits with softmax scores.
 *
 * Memory: right after open, the device use that the driver reports must not
 * exceed the plan's total and be within 15% of it; then 1000 batches, cycling
 * through batch sizes 1, 3, 8, 32 with every 100th at max_batch and both
 * pipeline slots in flight, must leave the device use unchanged.
 *
 * The CPU engine's logits depend only on the records (not on the CUDA
 * precision), so they are computed once per batch size and cached. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu_ops.h"
#include "gpu_tests.h"

static const int net_batches[] = { 1, 3, 64, 0 };       /* 0: the plan's max_batch */
static const int net_batches_quick[] = { 1, 3 };
static const int steady_sizes[] = { 1, 3, 8, 32 };      /* and every 100th batch at max_batch */

static void batch_id(char *id, size_t len, precision_t p, int b) {
        if (b)
                snprintf(id, len, "gpu/%s/net/batch%d", precision_name(p), b);
        else
                snprintf(id, len, "gpu/%s/net/batchmax", precision_name(p));
}

void gpu_net_ids(precision_t p, int quick, void (*fn)(void *u, const char *id), void *u) {
        const int *list = quick ? net_batches_quick : net_batches;
        int count = quick ? 2 : 4;
        char id[128];

        snprintf(id, sizeof(id), "gpu/%s/mem/plan", precision_name(p));
        fn(u, id);
        for (int i = 0; i < count; i++) {
                batch_id(id, sizeof(id), p, list[i]);
                fn(u, id);
        }
        snprintf(id, sizeof(id), "gpu/%s/mem/steady", precision_name(p));
        fn(u, id);
        snprintf(id, sizeof(id), "gpu/%s/swap", precision_name(p));
        fn(u, id);
}

static size_t record_bytes(record_format_t f) {
        return f == RECORD_RGB8 ? RECORD_RGB8_BYTES : RECORD_F32_CHW_BYTES;
}

/* Record 1 of every batch is float32 CHW, the others rgb8: the staging is
 * packed by format (engine/pack.h), and a slot holds max_batch records when
 * at most one of them is float32, so every batch size up to the plan's fits
 * and both formats go through the same batch. */
static record_format_t net_format(int i) {
        return i == 1 ? RECORD_F32_CHW : RECORD_RGB8;
}

/* The records of a whole-network batch of n: a function of n and the seed
 * only, so that every precision sees the same ones. */
static int make_records(const gpu_ctx_t *c, int n, uint8_t **ret) {
        uint64_t rng = (c->seed + 7919u * (uint64_t)n) | 1;
        uint8_t *recs = malloc((size_t)n * RECORD_MAX_BYTES);

        if (!recs)
                return -ENOMEM;
        for (int i = 0; i < n; i++)
                gpu_fill_record(&rng, net_format(i), recs + (size_t)i * RECORD_MAX_BYTES);
        *ret = recs;
        return 0;
}

/* Packs records [first, first + n) into slot, submits and waits. */
static int run_slot(engine_t *e, int slot, const uint8_t *recs, int first, int n, errbuf_t *err) {
        int r;

        for (int i = 0; i < n; i++) {
                record_format_t f = net_format(first + i);
                void *dst = engine_slot_place(e, slot, i, f);

                if (!dst)
                        return errbuf_set(err, -ENOSPC, "record %d of a batch of %d does not fit the slot", i, n);
                memcpy(dst, recs + (size_t)(first + i) * RECORD_MAX_BYTES, record_bytes(f));
        }
        r = engine_submit(e, slot, n, err);
        if (r < 0)
                return r;
        return engine_wait(e, slot, err);
}

/* The CPU engine's logits (n, 1000) for the records of n, from the cache. */
static const float *cpu_logits(gpu_ctx_t *c, engine_t *cpu, int n, const uint8_t *recs, errbuf_t *err) {
        float *logits;
        int r;

        for (int i = 0; i < c->n_cpu_cache; i++)
                if (c->cpu_cache[i].n == n)
                        return c->cpu_cache[i].logits;
        if (c->n_cpu_cache >= (int)(sizeof(c->cpu_cache) / sizeof(c->cpu_cache[0]))) {
                errbuf_set(err, -ENOSPC, "the CPU logits cache is full");
                return NULL;
        }
        logits = malloc((size_t)n * gpu_classes * sizeof(float));
        if (!logits) {
                errbuf_set(err, -ENOMEM, "out of host memory");
                return NULL;
        }
        for (int first = 0; first < n; first += engine_max_batch(cpu)) {
                int chunk = n - first < engine_max_batch(cpu) ? n - first : engine_max_batch(cpu);

                r = run_slot(cpu, 0, recs, first, chunk, err);
                if (r < 0) {
                        free(logits);
                        return NULL;
                }
                memcpy(logits + (size_t)first * gpu_classes, engine_slot_logits(cpu, 0),
                       (size_t)chunk * gpu_classes * sizeof(float));
        }
        c->cpu_cache[c->n_cpu_cache].n = n;
        c->cpu_cache[c->n_cpu_cache].logits = logits;
        c->n_cpu_cache++;
        return logits;
}

static double l2(const float *x, int m) {
        double s = 0;

        for (int j = 0; j < m; j++)
                s += (double)x[j] * x[j];
        return sqrt(s);
}

/* Top-1 and the margin to the runner-up. */
static int top1(const float *x, int m, double *margin) {
        int best = 0;
        double second = -INFINITY;

        for (int j = 1; j < m; j++)
                if (x[j] > x[best])
                        best = j;
        for (int j = 0; j < m; j++)
                if (j != best && x[j] > second)
                        second = x[j];
        *margin = (double)x[best] - second;
        return best;
}

/* Checks the engine's top-k of one image against its own logits: distinct
 * valid classes, descending scores equal to the softmax, and no unselected
 * class above the selected ones (beyond the precision's slack). Returns 0 or
 * -1 with a sentence in why; *worst receives the largest relative score error. */
static int check_topk(const float *logits, const engine_topk_t *tk, int k, double tol, double *worst, char *why,
                      size_t why_len) {
        double mx = -INFINITY, sum = 0, lowest_selected = INFINITY, highest_other = -INFINITY, absmax = 0;
        char *picked = calloc((size_t)gpu_classes, 1);
        int r = -1;

        for (int j = 0; j < gpu_classes; j++) {
                if (logits[j] > mx)
                        mx = logits[j];
                if (fabs(logits[j]) > absmax)
                        absmax = fabs(logits[j]);
        }
        for (int j = 0; j < gpu_classes; j++)
                sum += exp((double)logits[j] - mx);
        for (int j = 0; j < k; j++) {
                int cls = tk[j].cls;
                double want, d;

                if (cls < 0 || cls >= gpu_classes || picked[cls]) {
                        snprintf(why, why_len, "rank %d: class %d is out of range or repeated", j, cls);
                        goto out;
                }
                picked[cls] = 1;
                if (j > 0 && !(tk[j].score <= tk[j - 1].score)) {
                        snprintf(why, why_len, "rank %d: scores not descending (%.6g after %.6g)", j, tk[j].score,
                                 tk[j - 1].score);
                        goto out;
                }
                want = exp((double)logits[cls] - mx) / sum;
                d = fabs((double)tk[j].score - want);
                if (!isfinite(tk[j].score) || d > tol * want + 1e-6) {
                        snprintf(why, why_len, "rank %d class %d: score %.6g but softmax of the logits is %.6g", j,
                                 cls, tk[j].score, want);
                        goto out;
                }
                if (want > 0 && d / want > *worst)
                        *worst = d / want;
                if (logits[cls] < lowest_selected)
                        lowest_selected = logits[cls];
        }
        for (int j = 0; j < gpu_classes; j++)
                if (!picked[j] && logits[j] > highest_other)
                        highest_other = logits[j];
        if (highest_other > lowest_selected + tol * absmax) {
                snprintf(why, why_len, "class with logit %.6g left out of the top-%d (lowest kept %.6g)",
                         highest_other, k, lowest_selected);
                goto out;
        }
        r = 0;
out:
        free(picked);
        return r;
}

static void net_batch(gpu_ctx_t *c, engine_t *e, engine_t *cpu, precision_t p, int b) {
        int n = b ? b : engine_max_batch(e), k = engine_plan_of(e)->top_k, clear = 0, agree = 0;
        double tol = gpu_net_tolerance(p), worst = 0, sum = 0, worst_score = 0;
        const float *ref, *out;
        const engine_topk_t *tk;
        uint8_t *recs = NULL;
        json_t *rels = json_array();    /* per image, for the report */
        errbuf_t err = { "" };
        char id[128], why[256];
        int r;

        batch_id(id, sizeof(id), p, b);
        if (n > engine_max_batch(e)) {
                gpu_result(c, GPU_SKIP, id, NULL, "the plan's max_batch is %d", engine_max_batch(e));
                return;
        }
        if (!cpu) {
                gpu_result(c, GPU_FAIL, id, NULL, "the CPU reference engine did not open (see stderr)");
                return;
        }
        if (make_records(c, n, &recs) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                return;
        }
        ref = cpu_logits(c, cpu, n, recs, &err);
        if (!ref) {
                gpu_result(c, GPU_FAIL, id, NULL, "CPU engine: %s", err.msg);
                goto done;
        }
        r = run_slot(e, 0, recs, 0, n, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "CUDA engine: %s", err.msg);
                gpu_lost(c, e, id);
                goto done;
        }
        out = engine_slot_logits(e, 0);
        tk = engine_slot_topk(e, 0);
        for (int i = 0; i < n; i++) {
                const float *o = out + (size_t)i * gpu_classes, *w = ref + (size_t)i * gpu_classes;
                size_t bad = 0;
                double rel = gpu_rel_l2(o, w, gpu_classes, &bad), margin, dummy;
                int t_ref = top1(w, gpu_classes, &margin);

                json_array_append_new(rels, json_real(isfinite(rel) ? rel : -1.0));
                if (bad) {
                        gpu_result(c, GPU_FAIL, id, NULL, "image %d: %zu of %d logits are NaN/Inf", i, bad, gpu_classes);
                        goto done;
                }
                if (!(rel <= tol)) {
                        gpu_result(c, GPU_FAIL, id, json_pack("{s:i, s:f, s:O}", "n", n, "rel", rel, "rels", rels),
                                   "image %d (%s): rel=%.2e > %.0e", i, record_format_mime(net_format(i)), rel, tol);
                        goto done;
                }
                if (margin > 2 * tol * l2(w, gpu_classes)) {
                        clear++;
                        if (top1(o, gpu_classes, &dummy) == t_ref)
                                agree++;
                }
                if (check_topk(o, tk + (size_t)i * k, k, tol, &worst_score, why, sizeof(why)) < 0) {
                        gpu_result(c, GPU_FAIL, id, NULL, "image %d top-%d: %s", i, k, why);
                        goto done;
                }
                if (rel > worst)
                        worst = rel;
                sum += rel;
        }
        {
                json_t *fig = json_pack("{s:i, s:f, s:f, s:i, s:i, s:f, s:O}", "n", n, "rel", worst, "rel_mean",
                                        sum / n, "top1_clear", clear, "top1_agree", agree, "score_rel", worst_score,
                                        "rels", rels);

                if (agree != clear)
                        gpu_result(c, GPU_FAIL, id, fig, "top-1 differs on %d of %d images with a clear margin",
                                   clear - agree, clear);
                else
                        gpu_result(c, GPU_PASS, id, fig, "n=%d rel=%.2e top1=%d/%d score_rel=%.1e", n, worst, agree,
                                   clear, worst_score);
        }
done:
        json_decref(rels);
        free(recs);
}

void gpu_net_run(gpu_ctx_t *c, engine_t *e, engine_t *cpu, precision_t p) {
        const int *list = c->quick ? net_batches_quick : net_batches;
        int count = c->quick ? 2 : 4;

        for (int i = 0; i < count && !c->lost[0]; i++)
                net_batch(c, e, cpu, p, list[i]);
}

void gpu_mem_plan_run(gpu_ctx_t *c, engine_t *e, precision_t p) {
        uint64_t used = 0, total = 0, planned = engine_plan_of(e)->total_bytes;
        errbuf_t err = { "" };
        char id[128];
        double ratio;
        json_t *fig;
        int r;

        snprintf(id, sizeof(id), "gpu/%s/mem/plan", precision_name(p));
        r = c->mem_info(e, &used, &total, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_mem_info: %s", err.msg);
                gpu_lost(c, e, id);
                return;
        }
        ratio = planned ? (double)used / (double)planned : INFINITY;
        fig = json_pack("{s:I, s:I, s:I, s:f}", "used_bytes", (json_int_t)used, "planned_bytes", (json_int_t)planned,
                        "device_bytes", (json_int_t)total, "ratio", ratio);
        /* The engine interface's view, which the daemon's metrics export
         * (inferd_gpu_memory_*, inferd_gpu_arena_bytes): the same driver
         * numbers, and an arena inside the plan. Not on the CPU stand-in. */
        if (!c->selftest) {
                engine_device_memory_t dm = { 0 };

                r = engine_device_memory(e, &dm, &err);
                if (fig)
                        json_object_set_new(fig, "arena_bytes", json_integer((json_int_t)dm.arena_bytes));
                if (r < 0 || dm.total_bytes != total || dm.used_bytes < dm.arena_bytes || dm.arena_bytes == 0 ||
                    dm.arena_bytes > planned) {
                        gpu_result(c, GPU_FAIL, id, fig,
                                   "engine_device_memory: r=%d (%s) used %llu total %llu arena %llu; the driver "
                                   "says total %llu, the plan %llu",
                                   r, r < 0 ? err.msg : "", (unsigned long long)dm.used_bytes,
                                   (unsigned long long)dm.total_bytes, (unsigned long long)dm.arena_bytes,
                                   (unsigned long long)total, (unsigned long long)planned);
                        return;
                }
        }
        if (used > planned)
                gpu_result(c, GPU_FAIL, id, fig, "used %llu bytes > planned %llu (ratio %.3f)",
                           (unsigned long long)used, (unsigned long long)planned, ratio);
        else if (ratio < GPU_MEM_RATIO_MIN)
                gpu_result(c, GPU_FAIL, id, fig, "used %llu bytes is under %.0f%% of the planned %llu (ratio %.3f)",
                           (unsigned long long)used, GPU_MEM_RATIO_MIN * 100, (unsigned long long)planned, ratio);
        else
                gpu_result(c, GPU_PASS, id, fig, "used=%llu planned=%llu ratio=%.3f", (unsigned long long)used,
                           (unsigned long long)planned, ratio);
}

static double now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int steady_size(int b, int max_batch) {
        int n = steady_sizes[b % (int)(sizeof(steady_sizes) / sizeof(steady_sizes[0]))];

        if (b % 100 == 99)
                n = max_batch;
        return n < max_batch ? n : max_batch;
}

static int logits_finite(engine_t *e, int slot, int n) {
        const float *x = engine_slot_logits(e, slot);

        for (size_t j = 0; j < (size_t)n * gpu_classes; j++)
                if (!isfinite(x[j]))
                        return 0;
        return 1;
}

void gpu_mem_steady_run(gpu_ctx_t *c, engine_t *e, precision_t p) {
        int depth = engine_slots(e), max_batch = engine_max_batch(e), inflight[16] = { 0 }, r = 0;
        uint64_t rng = c->seed ^ 0x5bd1e995u, before = 0, after = 0, total = 0, images = 0;
        errbuf_t err = { "" };
        char id[128];
        double t0, secs;

        snprintf(id, sizeof(id), "gpu/%s/mem/steady", precision_name(p));
        if (depth > 16)
                depth = 16;
        /* Every slot holds max_batch random records; each batch submits a prefix. */
        for (int s = 0; s < depth; s++)
                for (int i = 0; i < max_batch; i++) {
                        gpu_fill_record(&rng, net_format(i), engine_slot_place(e, s, i, net_format(i)));
                }
        /* Warm-up: every size used below, on every slot, so that lazily
         * loaded modules are in before the baseline. */
        for (int s = 0; s < depth && r >= 0; s++) {
                int done[5], n_done = 0;

                for (int b = 0; b < 100 && r >= 0; b++) {
                        int n = steady_size(b, max_batch), seen = 0;

                        if (b >= 4 && b != 99)
                                continue;
                        for (int j = 0; j < n_done; j++)
                                seen |= done[j] == n;
                        if (seen)
                                continue;
                        done[n_done++] = n;
                        r = engine_submit(e, s, n, &err);
                        if (r >= 0)
                                r = engine_wait(e, s, &err);
                }
        }
        if (r >= 0)
                r = c->mem_info(e, &before, &total, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "warm-up: %s", err.msg);
                gpu_lost(c, e, id);
                return;
        }

        t0 = now_s();
        for (int b = 0; b < c->mem_batches; b++) {
                int s = b % depth, n = steady_size(b, max_batch);

                if (inflight[s]) {
                        r = engine_wait(e, s, &err);
                        if (r < 0)
                                break;
                        if (!logits_finite(e, s, inflight[s])) {
                                r = errbuf_set(&err, -EIO, "batch %d: non-finite logits", b - depth);
                                break;
                        }
                }
                r = engine_submit(e, s, n, &err);
                if (r < 0)
                        break;
                inflight[s] = n;
                images += (uint64_t)n;
        }
        for (int s = 0; s < depth; s++)
                if (inflight[s]) {
                        int q = engine_wait(e, s, &err);

                        if (q < 0 && r >= 0)
                                r = q;
                }
        secs = now_s() - t0;
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "%s", err.msg);
                gpu_lost(c, e, id);
                return;
        }
        r = c->mem_info(e, &after, &total, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_mem_info: %s", err.msg);
                gpu_lost(c, e, id);
                return;
        }
        {
                json_t *fig = json_pack("{s:i, s:I, s:f, s:f, s:I, s:I, s:I, s:s, s:i}", "batches", c->mem_batches,
                                        "images", (json_int_t)images, "seconds", secs, "images_per_second",
                                        secs > 0 ? images / secs : 0.0, "used_before_bytes", (json_int_t)before,
                                        "used_after_bytes", (json_int_t)after, "growth_bytes",
                                        (json_int_t)(after - before), "sizes", "1,3,8,32 and every 100th at max",
                                        "max_batch", max_batch);

                if (after > before)
                        gpu_result(c, GPU_FAIL, id, fig, "device use grew by %lld bytes over %d batches",
                                   (long long)(after - before), c->mem_batches);
                else
                        gpu_result(c, GPU_PASS, id, fig, "batches=%d images=%llu growth=0 used=%llu (%.0f img/s)",
                                   c->mem_batches, (unsigned long long)images, (unsigned long long)after,
                                   secs > 0 ? images / secs : 0.0);
        }
}

/* The model swap in place (engine_swap), last on this precision's engine:
 * to a different model (the file's weights with the FC negated, so every
 * top-1 changes) in another precision (fp16 <-> bf16, fp32 -> fp16; the CPU
 * stand-in stays fp32), within the arena allocated at open. After it, a
 * batch of 3 matches a CPU engine opened on that model within the new
 * precision's whole-network tolerance, and the device holds no more than
 * the plan at open said (one weight set: nothing was allocated). The
 * engine held, from open, the arena and the pinned staging its plan
 * counted (e->held_*), and the swap's plan charges them whole. The
 * swapped-in model goes to *keep, for the caller to free after e. */
void gpu_swap_run(gpu_ctx_t *c, engine_t *e, precision_t p, model_t **keep) {
        precision_t q = c->selftest ? PRECISION_FP32 : p == PRECISION_FP16 ? PRECISION_BF16 : PRECISION_FP16;
        const plan_t *open_plan = engine_plan_of(e);
        uint64_t open_total = open_plan->total_bytes, used = 0, total = 0;
        uint64_t open_arena = plan_arena_bytes(open_plan), open_pinned = open_plan->pinned_host_bytes;
        model_t *next = NULL, *ref = NULL;
        engine_t *cpu = NULL;
        uint8_t *recs = NULL;
        engine_options_t o;
        errbuf_t err = { "" };
        plan_t plan;
        char id[128];
        float *got = NULL;
        double rel;
        size_t bad = 0;
        int r;

        snprintf(id, sizeof(id), "gpu/%s/swap", precision_name(p));
        if ((r = model_load(&next, c->weights_path, &err)) < 0 || (r = model_load(&ref, c->weights_path, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "loading the weights again: %s", err.msg);
                goto done;
        }
        for (model_t *m = next; m; m = m == next ? ref : NULL) {
                const model_op_t *fc = &m->ops[model_find_op(m, "fc")];

                for (size_t i = 0; i < (size_t)fc->cout * fc->cin; i++)
                        m->weights[fc->w_off + i] = -m->weights[fc->w_off + i];
                for (int i = 0; i < fc->cout; i++)
                        m->biases[fc->b_off + i] = -m->biases[fc->b_off + i];
        }
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = PRECISION_FP32;
        o.max_batch = 3;
        o.top_k = GPU_TOP_K;
        o.cpu_keep_conv_weights = true;         /* the layer checks read ref's folded blocks */
        if ((r = engine_open(&cpu, ref, &o, NULL, 0, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "the CPU reference engine: %s", err.msg);
                goto done;
        }
        o.backend = c->selftest ? BACKEND_CPU : BACKEND_CUDA;
        o.precision = q;
        o.max_batch = engine_max_batch(e);
        if (e->held_arena_bytes != open_arena || e->held_pinned_host_bytes != open_pinned) {
                gpu_result(c, GPU_FAIL, id, NULL, "the engine holds %llu arena and %llu pinned bytes; its plan at open "
                           "counted %llu and %llu", (unsigned long long)e->held_arena_bytes,
                           (unsigned long long)e->held_pinned_host_bytes, (unsigned long long)open_arena,
                           (unsigned long long)open_pinned);
                goto done;
        }
        if ((r = engine_swap_plan(e, next, &o, &plan, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_swap_plan to %s: %s", precision_name(q), err.msg);
                goto done;
        }
        if (plan_arena_bytes(&plan) + plan.arena_kept_bytes < open_arena || plan.pinned_host_bytes < open_pinned) {
                gpu_result(c, GPU_FAIL, id, NULL, "the swap's plan charges %llu arena and %llu pinned bytes, less than "
                           "the %llu and %llu held since open",
                           (unsigned long long)(plan_arena_bytes(&plan) + plan.arena_kept_bytes),
                           (unsigned long long)plan.pinned_host_bytes, (unsigned long long)open_arena,
                           (unsigned long long)open_pinned);
                goto done;
        }
        if ((r = engine_swap(e, next, &plan, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_swap to %s: %s", precision_name(q), err.msg);
                gpu_lost(c, e, id);
                goto done;
        }
        *keep = next;   /* e reads it now */
        next = NULL;
        if ((r = make_records(c, 3, &recs)) < 0 || (got = malloc(3 * gpu_classes * sizeof(float))) == NULL) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                goto done;
        }
        if ((r = run_slot(e, 0, recs, 0, 3, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "a batch of 3 after the swap: %s", err.msg);
                gpu_lost(c, e, id);
                goto done;
        }
        memcpy(got, engine_slot_logits(e, 0), 3 * gpu_classes * sizeof(float));
        if ((r = run_slot(cpu, 0, recs, 0, 3, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "the CPU reference: %s", err.msg);
                goto done;
        }
        rel = gpu_rel_l2(got, engine_slot_logits(cpu, 0), 3 * gpu_classes, &bad);
        if ((r = c->mem_info(e, &used, &total, &err)) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "memory after the swap: %s", err.msg);
                gpu_lost(c, e, id);
                goto done;
        }
        if (bad || !(rel <= gpu_net_tolerance(q)))
                gpu_result(c, GPU_FAIL, id, NULL, "after the swap to %s: rel %.3g > %.3g (%zu non-finite)",
                           precision_name(q), rel, gpu_net_tolerance(q), bad);
        else if (used > open_total)
                gpu_result(c, GPU_FAIL, id, NULL, "after the swap the device holds %llu bytes > the %llu planned at open",
                           (unsigned long long)used, (unsigned long long)open_total);
        else
                gpu_result(c, GPU_PASS, id,
                           json_pack("{s:s, s:f, s:i, s:I, s:I}", "to", precision_name(q), "rel", rel, "max_batch",
                                     engine_max_batch(e), "used_bytes", (json_int_t)used, "open_planned_bytes",
                                     (json_int_t)open_total),
                           "to=%s rel=%.3g max_batch=%d used=%llu open_planned=%llu", precision_name(q), rel,
                           engine_max_batch(e), (unsigned long long)used, (unsigned long long)open_total);
done:
        free(got);
        free(recs);
        engine_free(cpu);
        model_free(ref);
        model_free(next);
}

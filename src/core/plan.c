/* plan: the memory planner. See plan.h for what it decides and why. */
#include "core/plan.h"

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

/* Greedy placement by liveness: tensors in decreasing size, each at the
 * lowest aligned offset that does not collide with an already placed tensor
 * whose lifetime [producer, last_use] overlaps its own. Lifetimes are
 * inclusive at both ends, so an op's inputs and output never share bytes. */
size_t plan_place_tensors(const model_t *m, size_t offsets[MODEL_MAX_TENSORS]) {
        int order[MODEL_MAX_TENSORS], placed[MODEL_MAX_TENSORS], n_placed = 0;
        size_t arena = 0;

        for (int i = 0; i < m->n_tensors; i++)
                order[i] = i;
        for (int i = 1; i < m->n_tensors; i++)         /* insertion sort: size desc, then id */
                for (int j = i; j > 0 && m->tensors[order[j]].elems > m->tensors[order[j - 1]].elems; j--) {
                        int t = order[j];
                        order[j] = order[j - 1];
                        order[j - 1] = t;
                }
        for (int i = 0; i < m->n_tensors; i++) {
                const model_tensor_t *t = &m->tensors[order[i]];
                size_t size = plan_align(t->elems, PLAN_TENSOR_ALIGN_ELEMS), off = 0;
                int moved = 1;

                while (moved) {
                        moved = 0;
                        for (int k = 0; k < n_placed; k++) {
                                const model_tensor_t *u = &m->tensors[placed[k]];
                                size_t uo = offsets[placed[k]], us = plan_align(u->elems, PLAN_TENSOR_ALIGN_ELEMS);

                                if (t->last_use < u->producer || u->last_use < t->producer)
                                        continue;       /* lifetimes disjoint */
                                if (off + size <= uo || uo + us <= off)
                                        continue;       /* bytes disjoint */
                                off = uo + us;
                                moved = 1;
                        }
                }
                offsets[order[i]] = off;
                placed[n_placed++] = order[i];
                if (off + size > arena)
                        arena = off + size;
        }
        return arena;
}

int plan_at_batch(const model_t *m, const plan_request_t *req, int batch, plan_t *p) {
        int r;

        memset(p, 0, sizeof(*p));
        p->backend = req->backend;
        p->precision = req->precision;
        p->max_batch = batch;
        p->pipeline_depth = req->pipeline_depth;
        p->top_k = req->top_k;
        p->record_bytes = req->record_bytes;
        p->device_memory_bytes = req->device_memory_bytes;
        p->budget_bytes = req->budget_bytes;
        p->host_budget_bytes = req->host_budget_bytes;
        p->weights_bytes = plan_weight_layout(m, req->precision, NULL, NULL);
        p->arena_elems_per_sample = plan_place_tensors(m, p->tensor_offset);
        p->activation_bytes_per_sample = p->arena_elems_per_sample * precision_bytes(req->precision);
        p->activation_bytes = p->activation_bytes_per_sample * (uint64_t)batch;
        r = req->terms(m, req, batch, &p->engine);
        if (r < 0)
                return r;
        p->operand_batch_cap = plan_operand_cap(p->engine.gemm_operand_elems_per_sample);
        p->limit = PLAN_LIMIT_MAX_BATCH;
        p->workspace_bytes = p->engine.workspace_bytes;
        p->pinned_host_bytes = p->engine.pinned_host_bytes;
        p->total_bytes = p->engine.context_bytes + p->engine.graph_bytes + p->weights_bytes + p->activation_bytes +
                         p->engine.workspace_bytes + p->engine.staging_bytes;
        return 0;
}

static int plan_fits(const plan_t *p) {
        return p->total_bytes <= p->budget_bytes && p->pinned_host_bytes <= p->host_budget_bytes;
}

/* Explains why batch 1 does not fit: the first term, in the order they are
 * committed, that takes the running sum past the budget. */
static int plan_refuse(const plan_t *p, errbuf_t *err) {
        const struct {
                const char *name;
                uint64_t bytes;
        } terms[] = {
                { "the CUDA context", p->engine.context_bytes },
                { "the CUDA graphs", p->engine.graph_bytes },
                { "the weights", p->weights_bytes },
                { "the workspace", p->engine.workspace_bytes },
                { "the device staging buffers", p->engine.staging_bytes },
                { "the activations of one sample", p->activation_bytes },
        };
        char a[32], b[32], c[32];
        uint64_t sum = 0;

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
        return errbuf_set(err, -ENOSPC,
                          "the plan does not fit: the host budget of %s is too small for the pinned buffers of "
                          "%d slots of one sample (%s)",
                          units_format_size(p->host_budget_bytes, b, sizeof(b)), p->pipeline_depth,
                          units_format_size(p->pinned_host_bytes, a, sizeof(a)));
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
        return 0;
}

int plan_write_json(const plan_t *p, FILE *out) {
        fprintf(out,
                "{\"backend\":\"%s\",\"precision\":\"%s\",\"max_batch\":%d,\"pipeline_depth\":%d,"
                "\"weights_bytes\":%llu,\"activation_bytes_per_sample\":%llu,\"activation_bytes\":%llu,"
                "\"workspace_bytes\":%llu,\"staging_bytes\":%llu,\"context_bytes\":%llu,\"graph_bytes\":%llu,"
                "\"pinned_host_bytes\":%llu,\"total_bytes\":%llu,\"budget_bytes\":%llu,"
                "\"device_memory_bytes\":%llu,\"host_budget_bytes\":%llu,\"record_bytes\":%zu,\"top_k\":%d,"
                "\"batch_limit\":\"%s\",\"operand_batch_cap\":%d,\"gemm_operand_elems_per_sample\":%llu}\n",
                backend_name(p->backend), precision_name(p->precision), p->max_batch, p->pipeline_depth,
                (unsigned long long)p->weights_bytes, (unsigned long long)p->activation_bytes_per_sample,
                (unsigned long long)p->activation_bytes, (unsigned long long)p->workspace_bytes,
                (unsigned long long)p->engine.staging_bytes, (unsigned long long)p->engine.context_bytes,
                (unsigned long long)p->engine.graph_bytes, (unsigned long long)p->pinned_host_bytes,
                (unsigned long long)p->total_bytes, (unsigned long long)p->budget_bytes,
                (unsigned long long)p->device_memory_bytes, (unsigned long long)p->host_budget_bytes,
                p->record_bytes, p->top_k, plan_limit_name(p->limit), p->operand_batch_cap,
                (unsigned long long)p->engine.gemm_operand_elems_per_sample);
        return ferror(out) ? -EIO : 0;
}

int plan_write_text(const plan_t *p, FILE *out) {
        const struct {
                const char *name;
                uint64_t bytes;
        } rows[] = {
                { "CUDA context", p->engine.context_bytes },
                { "CUDA graphs", p->engine.graph_bytes },
                { "weights (once)", p->weights_bytes },
                { "activations", p->activation_bytes },
                { "workspace", p->workspace_bytes },
                { "device staging", p->engine.staging_bytes },
        };
        char a[32], b[32];

        fprintf(out, "memory plan: %s engine, %s, batch up to %d, %d pipeline slots\n", backend_name(p->backend),
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
        fprintf(out, "  %-22s %12s  of a budget of %s\n", "total",
                units_format_size(p->total_bytes, a, sizeof(a)), units_format_size(p->budget_bytes, b, sizeof(b)));
        fprintf(out, "  %-22s %12s  of a host budget of %s\n", "pinned host",
                units_format_size(p->pinned_host_bytes, a, sizeof(a)),
                units_format_size(p->host_budget_bytes, b, sizeof(b)));
        return ferror(out) ? -EIO : 0;
}

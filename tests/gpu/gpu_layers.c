/* gpu_layers: every CUDA layer, one at a time, against the CPU reference.
 *
 * The inputs are realistic: a CPU reference forward pass (cpu_ops.h with the
 * model's folded fp32 weights) over GPU_LAYER_N fresh random records gives
 * every activation tensor, and each CUDA op is then fed exactly the reference
 * tensors it reads (input and residual), so an error in one layer does not
 * leak into the next. Each output is compared by relative L2 with the
 * reference op's output; any NaN (the engine poisons its outputs, and so do
 * we on the host side) fails. Preprocessing is checked for both record
 * formats, and the head (softmax + top-k) on logits built to have no ties.
 *
 * Not here: the graphs and the submit path (gpu_net.c). */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "gpu_tests.h"

/* A smoke run's layers: the stem, each kind of op, a stride-2 3x3, the
 * downsamples, convs with a residual, and the classifier. */
static const char *const quick_layers[] = {
        "conv1", "maxpool", "layer1.0.conv1", "layer1.0.conv2", "layer1.0.downsample.0", "layer1.0.conv3",
        "layer2.0.conv2", "layer3.1.conv3", "layer4.0.downsample.0", "layer4.2.conv3", "avgpool", "fc",
};

static int layer_selected(const model_t *m, int i, int quick) {
        if (!quick)
                return 1;
        for (size_t k = 0; k < sizeof(quick_layers) / sizeof(quick_layers[0]); k++)
                if (strcmp(m->ops[i].name, quick_layers[k]) == 0)
                        return 1;
        return 0;
}

void gpu_layer_ids(const model_t *m, precision_t p, int quick, void (*fn)(void *u, const char *id), void *u) {
        char id[128];

        snprintf(id, sizeof(id), "gpu/%s/layer/preprocess-rgb8", precision_name(p));
        fn(u, id);
        snprintf(id, sizeof(id), "gpu/%s/layer/preprocess-f32chw", precision_name(p));
        fn(u, id);
        for (int i = 0; i < m->n_ops; i++) {
                if (!layer_selected(m, i, quick))
                        continue;
                snprintf(id, sizeof(id), "gpu/%s/layer/%s", precision_name(p), m->ops[i].name);
                fn(u, id);
        }
        snprintf(id, sizeof(id), "gpu/%s/layer/head", precision_name(p));
        fn(u, id);
        snprintf(id, sizeof(id), "gpu/%s/layer/head-nonfinite", precision_name(p));
        fn(u, id);
}

static void conv_shape_of(const model_op_t *op, int n, cpu_conv_shape_t *s) {
        *s = (cpu_conv_shape_t){
                .n = n, .h = op->h_in, .w = op->w_in, .cin = op->cin, .cout = op->cout,
                .kh = op->kh, .kw = op->kw, .stride = op->stride, .pad = op->pad,
        };
        cpu_conv_shape_finish(s);
        assert(s->ho == op->h_out && s->wo == op->w_out);
}

void gpu_ref_op(const model_t *m, int i, int n, float *const *act, float *ws, size_t ws_elems) {
        const model_op_t *op = &m->ops[i];
        cpu_conv_shape_t s;

        switch (op->kind) {
        case MODEL_OP_CONV:
                conv_shape_of(op, n, &s);
                cpu_conv2d(&s, act[op->in], m->weights + op->w_off, m->biases + op->b_off,
                           op->residual >= 0 ? act[op->residual] : NULL, op->relu, act[op->out], ws, ws_elems);
                break;
        case MODEL_OP_MAXPOOL:
                conv_shape_of(op, n, &s);
                s.cout = s.cin;
                cpu_maxpool(&s, act[op->in], act[op->out]);
                break;
        case MODEL_OP_AVGPOOL:
                cpu_global_avgpool(n, op->h_in, op->w_in, op->cin, act[op->in], act[op->out]);
                break;
        case MODEL_OP_FC:
                cpu_fc(n, op->cin, op->cout, act[op->in], m->weights + op->w_off, m->biases + op->b_off,
                       act[op->out]);
                break;
        }
}

static void preprocess_ref(int n, const uint8_t *recs, const record_format_t *fmt, float *out) {
        const size_t per = (size_t)MODEL_IN_H * MODEL_IN_W * MODEL_IN_C;

        for (int i = 0; i < n; i++) {
                if (fmt[i] == RECORD_RGB8)
                        cpu_preprocess_rgb8(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
                else
                        cpu_preprocess_f32_chw(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
        }
}

static float *alloc_poisoned(size_t elems) {
        float *p = malloc(elems * sizeof(float));

        if (p)
                for (size_t i = 0; i < elems; i++)
                        p[i] = NAN;
        return p;
}

/* Compares out with ref and reports the check. */
static void report_rel(gpu_ctx_t *c, const char *id, precision_t p, const float *out, const float *ref,
                       size_t elems) {
        size_t bad = 0;
        double rel = gpu_rel_l2(out, ref, elems, &bad), tol = gpu_tolerance(p);
        json_t *fig = json_pack("{s:f, s:f, s:I}", "rel", isfinite(rel) ? rel : -1.0, "tol", tol, "nonfinite",
                                (json_int_t)bad);

        if (bad)
                gpu_result(c, GPU_FAIL, id, fig, "%zu of %zu outputs are NaN/Inf (unwritten or overflowed)", bad,
                           elems);
        else if (!(rel <= tol))
                gpu_result(c, GPU_FAIL, id, fig, "rel=%.2e > %.0e", rel, tol);
        else
                gpu_result(c, GPU_PASS, id, fig, "rel=%.2e", rel);
}

static void check_preprocess(gpu_ctx_t *c, engine_t *e, precision_t p, int n, record_format_t f, uint64_t *rng,
                             uint8_t *recs) {
        const size_t per = (size_t)MODEL_IN_H * MODEL_IN_W * MODEL_IN_C;
        record_format_t fmt[GPU_LAYER_N];
        float *out = alloc_poisoned(n * per), *ref = malloc(n * per * sizeof(float));
        errbuf_t err = { "" };
        char id[128];
        int r;

        snprintf(id, sizeof(id), "gpu/%s/layer/preprocess-%s", precision_name(p), f == RECORD_RGB8 ? "rgb8" : "f32chw");
        if (!out || !ref) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                goto done;
        }
        for (int i = 0; i < n; i++) {
                fmt[i] = f;
                gpu_fill_record(rng, f, recs + (size_t)i * RECORD_MAX_BYTES);
        }
        preprocess_ref(n, recs, fmt, ref);
        r = c->debug_op(e, ENGINE_CUDA_OP_PREPROCESS, n, recs, fmt, NULL, out, &err);
        if (r < 0)
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
        else
                report_rel(c, id, p, out, ref, n * per);
done:
        free(out);
        free(ref);
}

/* Logits with a clear top-k and values exact in fp16 and bf16, so that the
 * engine's conversion cannot reorder them: the rest on a 1/32 grid in
 * [-8, 8), the top k at 8.5, 9, ... (exact: bf16 steps by 1/16 in [8, 16)). */
static void head_logits(uint64_t *rng, int k, float *x) {
        for (int j = 0; j < MODEL_CLASSES; j++)
                x[j] = floorf(gpu_rand_uniform(rng) * 512.0f) / 32.0f - 8.0f;
        for (int j = 0; j < k; j++) {
                int cls;

                do
                        cls = (int)(gpu_rand_u64(rng) % MODEL_CLASSES);
                while (x[cls] >= 8.0f);
                x[cls] = 8.0f + 0.5f * (float)(k - j);
        }
}

static void check_head(gpu_ctx_t *c, engine_t *e, precision_t p, int n, uint64_t *rng) {
        int k = engine_plan_of(e)->top_k;
        float *logits = malloc((size_t)n * MODEL_CLASSES * sizeof(float));
        float *prob = malloc((size_t)n * MODEL_CLASSES * sizeof(float));
        engine_topk_t *out = calloc((size_t)n * k, sizeof(*out)), *ref = calloc((size_t)n * k, sizeof(*ref));
        double tol = gpu_tolerance(p), worst = 0;
        errbuf_t err = { "" };
        char id[128];
        int r;

        snprintf(id, sizeof(id), "gpu/%s/layer/head", precision_name(p));
        if (!logits || !prob || !out || !ref) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                goto done;
        }
        for (int i = 0; i < n; i++) {
                head_logits(rng, k, logits + (size_t)i * MODEL_CLASSES);
                for (int j = 0; j < k; j++)
                        out[(size_t)i * k + j] = (engine_topk_t){ .cls = -1, .score = NAN };
        }
        cpu_softmax(n, MODEL_CLASSES, logits, prob);
        for (int i = 0; i < n; i++)
                cpu_topk(MODEL_CLASSES, k, prob + (size_t)i * MODEL_CLASSES, ref + (size_t)i * k);

        r = c->debug_op(e, ENGINE_CUDA_OP_HEAD, n, logits, NULL, NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                goto done;
        }
        for (int i = 0; i < n; i++)
                for (int j = 0; j < k; j++) {
                        const engine_topk_t *o = &out[(size_t)i * k + j], *w = &ref[(size_t)i * k + j];
                        double d;

                        if (o->cls != w->cls) {
                                gpu_result(c, GPU_FAIL, id, NULL, "sample %d rank %d: class %d, expected %d", i, j,
                                           o->cls, w->cls);
                                goto done;
                        }
                        d = fabs((double)o->score - (double)w->score);
                        if (!isfinite(o->score) || d > tol * w->score + 1e-6) {
                                gpu_result(c, GPU_FAIL, id, NULL, "sample %d rank %d: score %.6g, expected %.6g", i,
                                           j, o->score, w->score);
                                goto done;
                        }
                        if (w->score > 0 && d / w->score > worst)
                                worst = d / w->score;
                }
        gpu_result(c, GPU_PASS, id, json_pack("{s:f, s:i}", "score_rel", worst, "k", k), "score_rel=%.2e k=%d",
                   worst, k);
done:
        free(logits);
        free(prob);
        free(out);
        free(ref);
}

/* Poisoned logits through the head: with n >= 3 rows, row 1 holds a NaN
 * and row 2 a +inf (what an fp16/bf16 overflow upstream gives); those rows
 * must come back marked (every entry { ENGINE_TOPK_NONFINITE, NaN }), and
 * row 0 ranked as the CPU's cpu_head_row ranks it. The output starts as a
 * class no row can have, so an unwritten entry shows. */
static void check_head_nonfinite(gpu_ctx_t *c, engine_t *e, precision_t p, int n, uint64_t *rng) {
        int k = engine_plan_of(e)->top_k;
        float *logits = malloc((size_t)n * MODEL_CLASSES * sizeof(float));
        engine_topk_t *out = calloc((size_t)n * k, sizeof(*out)), *ref = calloc((size_t)n * k, sizeof(*ref));
        errbuf_t err = { "" };
        char id[128];
        int r;

        snprintf(id, sizeof(id), "gpu/%s/layer/head-nonfinite", precision_name(p));
        if (n < 3) {
                gpu_result(c, GPU_SKIP, id, NULL, "needs a plan batch of 3, not %d", n);
                goto done;
        }
        if (!logits || !out || !ref) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                goto done;
        }
        for (int i = 0; i < n; i++) {
                head_logits(rng, k, logits + (size_t)i * MODEL_CLASSES);
                for (int j = 0; j < k; j++)
                        out[(size_t)i * k + j] = (engine_topk_t){ .cls = 4242, .score = 0.5f };
        }
        logits[1 * MODEL_CLASSES + 17] = NAN;
        logits[2 * MODEL_CLASSES + 999] = INFINITY;
        for (int i = 0; i < n; i++)
                cpu_head_row(logits + (size_t)i * MODEL_CLASSES, k, ref + (size_t)i * k);
        r = c->debug_op(e, ENGINE_CUDA_OP_HEAD, n, logits, NULL, NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                goto done;
        }
        for (int i = 0; i < n; i++)
                for (int j = 0; j < k; j++) {
                        const engine_topk_t *o = &out[(size_t)i * k + j], *w = &ref[(size_t)i * k + j];
                        int marked = w->cls == ENGINE_TOPK_NONFINITE;

                        if (o->cls != w->cls || (marked && !isnan(o->score)) ||
                            (!marked && !(fabs((double)o->score - (double)w->score) <= gpu_tolerance(p) * w->score + 1e-6))) {
                                gpu_result(c, GPU_FAIL, id, NULL,
                                           "row %d (%s) rank %d: class %d score %.6g, expected class %d score %.6g", i,
                                           i == 1 ? "a NaN logit" : i == 2 ? "an inf logit" : "finite", j, o->cls,
                                           o->score, w->cls, w->score);
                                goto done;
                        }
                }
        gpu_result(c, GPU_PASS, id, NULL, "the NaN and inf rows are marked, the finite row is ranked");
done:
        free(logits);
        free(out);
        free(ref);
}

void gpu_layers_run(gpu_ctx_t *c, engine_t *e, const model_t *ref, precision_t p) {
        const size_t rec_stride = RECORD_MAX_BYTES;
        int n = GPU_LAYER_N < engine_max_batch(e) ? GPU_LAYER_N : engine_max_batch(e);
        uint64_t rng = c->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(p + 1));
        record_format_t fmt[GPU_LAYER_N];
        float *act[MODEL_MAX_TENSORS] = { NULL };
        uint8_t *recs = malloc((size_t)n * rec_stride);
        float *ws = NULL, *out = NULL;
        size_t ws_elems = 0, max_out = 0;
        errbuf_t err = { "" };
        char id[128];
        int r;

        if (!recs)
                goto oom;

        check_preprocess(c, e, p, n, RECORD_RGB8, &rng, recs);
        check_preprocess(c, e, p, n, RECORD_F32_CHW, &rng, recs);

        /* The reference forward pass, keeping every tensor. */
        for (int t = 0; t < ref->n_tensors; t++) {
                act[t] = malloc((size_t)n * ref->tensors[t].elems * sizeof(float));
                if (!act[t])
                        goto oom;
                if (ref->tensors[t].elems > max_out)
                        max_out = ref->tensors[t].elems;
        }
        for (int i = 0; i < ref->n_ops; i++) {
                cpu_conv_shape_t s;

                if (ref->ops[i].kind != MODEL_OP_CONV)
                        continue;
                conv_shape_of(&ref->ops[i], n, &s);
                if (cpu_conv2d_workspace_elems(&s, n) > ws_elems)
                        ws_elems = cpu_conv2d_workspace_elems(&s, n);
        }
        ws = malloc((ws_elems ? ws_elems : 1) * sizeof(float));
        out = malloc((size_t)n * max_out * sizeof(float));
        if (!ws || !out)
                goto oom;
        for (int i = 0; i < n; i++) {
                fmt[i] = i % 2 ? RECORD_F32_CHW : RECORD_RGB8;
                gpu_fill_record(&rng, fmt[i], recs + (size_t)i * rec_stride);
        }
        preprocess_ref(n, recs, fmt, act[ref->input]);
        for (int i = 0; i < ref->n_ops; i++)
                gpu_ref_op(ref, i, n, act, ws, ws_elems);

        for (int i = 0; i < ref->n_ops; i++) {
                const model_op_t *op = &ref->ops[i];
                size_t elems = (size_t)n * ref->tensors[op->out].elems;

                if (!layer_selected(ref, i, c->quick))
                        continue;
                snprintf(id, sizeof(id), "gpu/%s/layer/%s", precision_name(p), op->name);
                for (size_t j = 0; j < elems; j++)
                        out[j] = NAN;
                r = c->debug_op(e, i, n, act[op->in], NULL, op->residual >= 0 ? act[op->residual] : NULL,
                                         out, &err);
                if (r < 0) {
                        gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                        continue;
                }
                report_rel(c, id, p, out, act[op->out], elems);
        }

        check_head(c, e, p, n, &rng);
        check_head_nonfinite(c, e, p, n, &rng);
        goto done;
oom:
        snprintf(id, sizeof(id), "gpu/%s/layer/setup", precision_name(p));
        gpu_result(c, GPU_FAIL, id, NULL, "out of host memory for the reference activations");
done:
        for (int t = 0; t < MODEL_MAX_TENSORS; t++)
                free(act[t]);
        free(ws);
        free(out);
        free(recs);
}

/* gpu_layers: every CUDA layer, one at a time, against the CPU reference.
 *
 * The inputs are realistic: a CPU reference forward pass (cpu_ops.h with the
 * model's folded fp32 weights) over GPU_LAYER_N fresh random records gives
 * every activation tensor, and each CUDA op is then fed exactly the reference
 * tensors it reads (input and residual), so an error in one layer does not
 * leak into the next. Each output is compared by relative L2 with the
 * reference op's output; any NaN (the engine poisons its outputs, and so do
 * we on the host side) fails. Preprocessing is checked for both record
 * formats and with a padding row (RECORD_UNKNOWN, its bytes all 0xff), which
 * must come out exactly +0; the head (softmax + top-k) on logits built to
 * have no ties.
 *
 * Issue 13's open questions get checks of their own:
 * - every conv with a residual runs twice: `layer/<name>` as the engine
 *   fuses it (C with beta 1 in a RELU_BIAS epilogue: does cuBLASLt add C
 *   before the ReLU?) and `layer/<name>/residual-kernel` as the fallback
 *   (BIAS epilogue, then the add-ReLU kernel); `residual/fused` and
 *   `residual/kernel` sum each mode up;
 * - `cap64/<name>`: preprocessing, conv1's and two other im2cols, maxpool,
 *   avgpool and the add-ReLU kernel again with every grid capped at
 *   GPU_CAP_BLOCKS blocks, so that the grid-stride loops run past their
 *   first pass (at the default cap of 524,288 blocks they never do, even at
 *   batch 256).
 * A failed step that left the device context lost stops the layer checks
 * (gpu_lost).
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
        snprintf(id, sizeof(id), "gpu/%s/layer/preprocess-padding", precision_name(p));
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

/* The layers of the cap64 checks: every hand-written gather and pool, and
 * a residual conv (the add-ReLU kernel in the kernel mode). */
static const char *const cap_layers[] = {
        "conv1", "maxpool", "layer1.0.conv2", "layer2.0.downsample.0", "avgpool", "layer1.0.conv3",
};
#define N_CAP_LAYERS (sizeof(cap_layers) / sizeof(cap_layers[0]))

void gpu_extra_ids(const model_t *m, precision_t p, int quick, void (*fn)(void *u, const char *id), void *u) {
        char id[160];

        for (int i = 0; i < m->n_ops; i++) {
                if (m->ops[i].kind != MODEL_OP_CONV || m->ops[i].residual < 0 || !layer_selected(m, i, quick))
                        continue;
                snprintf(id, sizeof(id), "gpu/%s/layer/%s/residual-kernel", precision_name(p), m->ops[i].name);
                fn(u, id);
        }
        snprintf(id, sizeof(id), "gpu/%s/residual/fused", precision_name(p));
        fn(u, id);
        snprintf(id, sizeof(id), "gpu/%s/residual/kernel", precision_name(p));
        fn(u, id);
        snprintf(id, sizeof(id), "gpu/%s/cap64/preprocess-padding", precision_name(p));
        fn(u, id);
        for (size_t k = 0; k < N_CAP_LAYERS; k++) {
                /* resnet18/34 have no conv3: their residual conv is conv2, listed too. */
                if (model_find_op(m, cap_layers[k]) < 0)
                        continue;
                snprintf(id, sizeof(id), "gpu/%s/cap64/%s", precision_name(p), cap_layers[k]);
                fn(u, id);
        }
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
                assert(!m->conv_weights_dropped);
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

/* Compares out with ref and reports the check; note (may be "") follows
 * the figures on the line and goes into the JSON. Returns the status. */
static gpu_status_t report_rel(gpu_ctx_t *c, const char *id, precision_t p, const float *out, const float *ref,
                               size_t elems, const char *note) {
        size_t bad = 0;
        double rel = gpu_rel_l2(out, ref, elems, &bad), tol = gpu_tolerance(p);
        json_t *fig = json_pack("{s:f, s:f, s:I, s:s}", "rel", isfinite(rel) ? rel : -1.0, "tol", tol, "nonfinite",
                                (json_int_t)bad, "note", note);

        if (bad) {
                gpu_result(c, GPU_FAIL, id, fig, "%zu of %zu outputs are NaN/Inf (unwritten or overflowed)%s%s", bad,
                           elems, *note ? "; " : "", note);
                return GPU_FAIL;
        }
        if (!(rel <= tol)) {
                gpu_result(c, GPU_FAIL, id, fig, "rel=%.2e > %.0e%s%s", rel, tol, *note ? "; " : "", note);
                return GPU_FAIL;
        }
        gpu_result(c, GPU_PASS, id, fig, "rel=%.2e%s%s", rel, *note ? " " : "", note);
        return GPU_PASS;
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
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                gpu_lost(c, e, id);
        } else {
                report_rel(c, id, p, out, ref, n * per, "");
        }
done:
        free(out);
        free(ref);
}

/* A bucket's padding row between real ones: rgb8, RECORD_UNKNOWN with every
 * byte 0xff (NaN as fp32), f32 CHW. The real rows must match the reference,
 * the padding row must be exactly +0.0 everywhere (stale bytes must never
 * leak into a batch). id_group is "layer" or "cap64". */
static void check_preprocess_padding(gpu_ctx_t *c, engine_t *e, precision_t p, const char *id_group, uint64_t *rng,
                                     uint8_t *recs) {
        const size_t per = (size_t)MODEL_IN_H * MODEL_IN_W * MODEL_IN_C;
        const int n = 3;
        record_format_t fmt[3] = { RECORD_RGB8, RECORD_UNKNOWN, RECORD_F32_CHW };
        float *out = alloc_poisoned(n * per), *ref = malloc(n * per * sizeof(float));
        size_t nonzero = 0, first_bad = 0;
        errbuf_t err = { "" };
        char id[128];
        int r;

        snprintf(id, sizeof(id), "gpu/%s/%s/preprocess-padding", precision_name(p), id_group);
        if (engine_max_batch(e) < n) {
                gpu_result(c, GPU_SKIP, id, NULL, "the plan's max_batch is %d", engine_max_batch(e));
                goto done;
        }
        if (!out || !ref) {
                gpu_result(c, GPU_FAIL, id, NULL, "out of host memory");
                goto done;
        }
        gpu_fill_record(rng, RECORD_RGB8, recs);
        memset(recs + RECORD_MAX_BYTES, 0xff, RECORD_MAX_BYTES);
        gpu_fill_record(rng, RECORD_F32_CHW, recs + 2 * (size_t)RECORD_MAX_BYTES);
        cpu_preprocess_rgb8(recs, ref);
        memset(ref + per, 0, per * sizeof(float));
        cpu_preprocess_f32_chw(recs + 2 * (size_t)RECORD_MAX_BYTES, ref + 2 * per);
        r = c->debug_op(e, ENGINE_CUDA_OP_PREPROCESS, n, recs, fmt, NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                gpu_lost(c, e, id);
                goto done;
        }
        for (size_t j = 0; j < per; j++)
                if (!(out[per + j] == 0.0f && !signbit(out[per + j])) && nonzero++ == 0)
                        first_bad = j;
        if (nonzero) {
                gpu_result(c, GPU_FAIL, id, json_pack("{s:I}", "padding_nonzero", (json_int_t)nonzero),
                           "the padding row has %zu elements that are not +0 (first: element %zu = %g)", nonzero,
                           first_bad, out[per + first_bad]);
                goto done;
        }
        report_rel(c, id, p, out, ref, n * per, "padding row exactly +0");
done:
        free(out);
        free(ref);
}

/* Logits with a clear top-k and values exact in fp16 and bf16, so that the
 * engine's conversion cannot reorder them: the rest on a 1/32 grid in
 * [-8, 8), the top k at 8.5, 9, ... (exact: bf16 steps by 1/16 in [8, 16)). */
static void head_logits(uint64_t *rng, int k, float *x) {
        for (int j = 0; j < gpu_classes; j++)
                x[j] = floorf(gpu_rand_uniform(rng) * 512.0f) / 32.0f - 8.0f;
        for (int j = 0; j < k; j++) {
                int cls;

                do
                        cls = (int)(gpu_rand_u64(rng) % gpu_classes);
                while (x[cls] >= 8.0f);
                x[cls] = 8.0f + 0.5f * (float)(k - j);
        }
}

static void check_head(gpu_ctx_t *c, engine_t *e, precision_t p, int n, uint64_t *rng) {
        int k = engine_plan_of(e)->top_k;
        float *logits = malloc((size_t)n * gpu_classes * sizeof(float));
        float *prob = malloc((size_t)n * gpu_classes * sizeof(float));
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
                head_logits(rng, k, logits + (size_t)i * gpu_classes);
                for (int j = 0; j < k; j++)
                        out[(size_t)i * k + j] = (engine_topk_t){ .cls = -1, .score = NAN };
        }
        cpu_softmax(n, gpu_classes, logits, prob);
        for (int i = 0; i < n; i++)
                cpu_topk(gpu_classes, k, prob + (size_t)i * gpu_classes, ref + (size_t)i * k);

        r = c->debug_op(e, ENGINE_CUDA_OP_HEAD, n, logits, NULL, NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                gpu_lost(c, e, id);
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
        float *logits = malloc((size_t)n * gpu_classes * sizeof(float));
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
                head_logits(rng, k, logits + (size_t)i * gpu_classes);
                for (int j = 0; j < k; j++)
                        out[(size_t)i * k + j] = (engine_topk_t){ .cls = 4242, .score = 0.5f };
        }
        logits[1 * gpu_classes + 17 % gpu_classes] = NAN;
        logits[2 * gpu_classes + gpu_classes - 1] = INFINITY;
        for (int i = 0; i < n; i++)
                cpu_head_row(logits + (size_t)i * gpu_classes, gpu_classes, k, ref + (size_t)i * k);
        r = c->debug_op(e, ENGINE_CUDA_OP_HEAD, n, logits, NULL, NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                gpu_lost(c, e, id);
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

static int set_residual_kernel(gpu_ctx_t *c, engine_t *e, int on) {
        errbuf_t err = { "" };

        return c->debug_set ? c->debug_set(e, ENGINE_CUDA_SET_RESIDUAL_KERNEL, on, &err) : -ENOSYS;
}

static int set_max_blocks(gpu_ctx_t *c, engine_t *e, long blocks) {
        errbuf_t err = { "" };

        return c->debug_set ? c->debug_set(e, ENGINE_CUDA_SET_MAX_BLOCKS, blocks, &err) : -ENOSYS;
}

static int model_op_index(const model_t *m, const char *name) {
        for (int i = 0; i < m->n_ops; i++)
                if (strcmp(m->ops[i].name, name) == 0)
                        return i;
        return -1;
}

/* Op i on the reference activations (its input and residual) against the
 * reference output, as check id; residual_kernel picks the residual mode of
 * a conv with a residual. The note names the mode and the bias type. */
static gpu_status_t check_op(gpu_ctx_t *c, engine_t *e, const model_t *ref, precision_t p, int i, int n,
                             float *const *act, float *out, const char *id, int residual_kernel) {
        const model_op_t *op = &ref->ops[i];
        size_t elems = (size_t)n * ref->tensors[op->out].elems;
        engine_cuda_debug_info_t info;
        errbuf_t err = { "" };
        char note[160] = "";
        int r;

        if (op->kind == MODEL_OP_CONV && op->residual >= 0 && set_residual_kernel(c, e, residual_kernel) < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_set cannot choose the residual mode");
                return GPU_FAIL;
        }
        if (op->kind == MODEL_OP_CONV) {
                int bias32 = c->debug_info && c->debug_info(e, &info) == 0 && info.bias_fp32[i];

                snprintf(note, sizeof(note), "(bias %s%s)", bias32 ? "fp32" : precision_name(p),
                         op->residual < 0     ? ""
                         : residual_kernel ? ", residual: BIAS epilogue + add-ReLU kernel"
                                           : ", residual: C with beta 1 in the RELU_BIAS epilogue");
        }
        for (size_t j = 0; j < elems; j++)
                out[j] = NAN;
        r = c->debug_op(e, i, n, act[op->in], NULL, op->residual >= 0 ? act[op->residual] : NULL, out, &err);
        if (r < 0) {
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_op: %s (%s)", err.msg, strerror(-r));
                gpu_lost(c, e, id);
                return GPU_FAIL;
        }
        return report_rel(c, id, p, out, act[op->out], elems, note);
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
        int residual_convs = 0, fused_ok = 0, kernel_ok = 0;
        char id[160];

        if (!recs)
                goto oom;

        check_preprocess(c, e, p, n, RECORD_RGB8, &rng, recs);
        if (c->lost[0])
                goto done;
        check_preprocess(c, e, p, n, RECORD_F32_CHW, &rng, recs);
        if (c->lost[0])
                goto done;

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

        /* Every op as the engine runs it; the residual convs fused (C with
         * beta 1, RELU_BIAS), then as the fallback (BIAS epilogue + add-ReLU
         * kernel). */
        set_residual_kernel(c, e, 0);
        for (int i = 0; i < ref->n_ops; i++) {
                const model_op_t *op = &ref->ops[i];
                gpu_status_t st;

                if (!layer_selected(ref, i, c->quick))
                        continue;
                snprintf(id, sizeof(id), "gpu/%s/layer/%s", precision_name(p), op->name);
                st = check_op(c, e, ref, p, i, n, act, out, id, 0);
                if (c->lost[0])
                        goto done;
                if (op->kind != MODEL_OP_CONV || op->residual < 0)
                        continue;
                residual_convs++;
                fused_ok += st == GPU_PASS;
                snprintf(id, sizeof(id), "gpu/%s/layer/%s/residual-kernel", precision_name(p), op->name);
                kernel_ok += check_op(c, e, ref, p, i, n, act, out, id, 1) == GPU_PASS;
                if (c->lost[0])
                        goto done;
        }
        set_residual_kernel(c, e, 0);
        snprintf(id, sizeof(id), "gpu/%s/residual/fused", precision_name(p));
        gpu_result(c, fused_ok == residual_convs ? GPU_PASS : GPU_FAIL, id,
                   json_pack("{s:i, s:i}", "convs", residual_convs, "passed", fused_ok),
                   "%d of %d residual convs right with the residual through C in the RELU_BIAS epilogue (beta 1)%s",
                   fused_ok, residual_convs,
                   fused_ok == residual_convs ? "" : ": set INFERD_CUDA_RESIDUAL=kernel if residual/kernel passes");
        snprintf(id, sizeof(id), "gpu/%s/residual/kernel", precision_name(p));
        gpu_result(c, kernel_ok == residual_convs ? GPU_PASS : GPU_FAIL, id,
                   json_pack("{s:i, s:i}", "convs", residual_convs, "passed", kernel_ok),
                   "%d of %d residual convs right with the BIAS epilogue and the add-ReLU kernel", kernel_ok,
                   residual_convs);

        check_preprocess_padding(c, e, p, "layer", &rng, recs);
        if (c->lost[0])
                goto done;
        check_head(c, e, p, n, &rng);
        check_head_nonfinite(c, e, p, n, &rng);
        if (c->lost[0])
                goto done;

        /* The grid-stride loops past their first pass: every grid capped at
         * GPU_CAP_BLOCKS blocks. */
        if (set_max_blocks(c, e, GPU_CAP_BLOCKS) == 0) {
                check_preprocess_padding(c, e, p, "cap64", &rng, recs);
                for (size_t k = 0; k < N_CAP_LAYERS && !c->lost[0]; k++) {
                        int i = model_op_index(ref, cap_layers[k]);

                        snprintf(id, sizeof(id), "gpu/%s/cap64/%s", precision_name(p), cap_layers[k]);
                        if (i < 0)
                                continue;       /* a bottleneck's conv3 in a basic-block net (gpu_extra_ids) */
                        check_op(c, e, ref, p, i, n, act, out, id, ref->ops[i].residual >= 0);
                }
                set_residual_kernel(c, e, 0);
                set_max_blocks(c, e, 0);
        } else {
                snprintf(id, sizeof(id), "gpu/%s/cap64/preprocess-padding", precision_name(p));
                gpu_result(c, GPU_FAIL, id, NULL, "engine_cuda_debug_set cannot cap the grid");
        }
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

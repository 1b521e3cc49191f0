/* Unit tests of the engine interface on the CPU engine: slots, the
 * completion fd, the errors of a misuse, and that a record's result does not
 * depend on its batch or position (which an arena overlap would break);
 * oneDNN's convolutions against cpu_ops' reference, and its memory against
 * the plan. Numerics against torchvision are the golden suite's job. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_dnnl.h"
#include "engine/engine.h"
#include "engine_check.h"
#include "unit.h"

static engine_t *engine_test_open(model_t *m, int max_batch) {
        return engine_check_open(m, max_batch, PRECISION_AUTO, false);
}

static void test_engine_cpu_result_independent_of_batch(void) {
        model_t *m = NULL;
        engine_t *e;
        errbuf_t err;
        float alone[2][R50_CLASSES];
        const float *lg;
        const engine_topk_t *top;

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 5), 0);
        e = engine_test_open(m, 3);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        /* Record A (rgb8) and B (f32) alone, in batches of 1 in two slots. */
        engine_check_fill(e, 0, 0, 101, RECORD_RGB8);
        engine_check_fill(e, 1, 0, 202, RECORD_F32_CHW);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 1, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 1, 1, &err), 0);
        CU_ASSERT_EQUAL(engine_submit(e, 0, 1, &err), -EBUSY);
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
        memcpy(alone[0], engine_slot_logits(e, 0), sizeof(alone[0]));
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 1, &err), 0);
        memcpy(alone[1], engine_slot_logits(e, 1), sizeof(alone[1]));
        /* Then B, another record, and A together in one batch of 3. */
        engine_check_fill(e, 0, 0, 202, RECORD_F32_CHW);
        engine_check_fill(e, 0, 1, 303, RECORD_RGB8);
        engine_check_fill(e, 0, 2, 101, RECORD_RGB8);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 3, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
        lg = engine_slot_logits(e, 0);
        {
                double num0 = 0, num1 = 0, den0 = 0, den1 = 0;

                for (int c = 0; c < R50_CLASSES; c++) {
                        num0 += pow(lg[2 * R50_CLASSES + c] - alone[0][c], 2);
                        num1 += pow(lg[c] - alone[1][c], 2);
                        den0 += pow(alone[0][c], 2);
                        den1 += pow(alone[1][c], 2);
                }
                fprintf(stderr, "batch independence: rel %.3g %.3g, norm %.3g\n", sqrt(num0 / den0), sqrt(num1 / den1), sqrt(den0));
                /* The GEMMs' blocking differs with the row count, so not bit-equal;
                 * an arena overlap would be off by far more than fp32 rounding. */
                CU_ASSERT(sqrt(num0 / den0) < 1e-5);
                CU_ASSERT(sqrt(num1 / den1) < 1e-5);
        }
        /* The middle record differs from both; top-k is sorted softmax. */
        CU_ASSERT(fabs(lg[R50_CLASSES] - lg[0]) + fabs(lg[R50_CLASSES + 1] - lg[1]) > 0);
        top = engine_slot_topk(e, 0);
        for (int i = 0; i < 3; i++) {
                double sum = 0, mx = -INFINITY;

                CU_ASSERT(top[i * 3].score >= top[i * 3 + 1].score && top[i * 3 + 1].score >= top[i * 3 + 2].score);
                for (int c = 0; c < R50_CLASSES; c++)
                        mx = fmax(mx, lg[i * R50_CLASSES + c]);
                for (int c = 0; c < R50_CLASSES; c++)
                        sum += exp(lg[i * R50_CLASSES + c] - mx);
                CU_ASSERT_EQUAL(lg[i * R50_CLASSES + top[i * 3].cls], mx);
                CU_ASSERT_DOUBLE_EQUAL(top[i * 3].score, 1.0 / sum, 1e-5);
        }
        engine_free(e);
        model_free(m);
}

/* A float32 record of 3e38 everywhere (already "normalised", so taken as
 * is) overflows the network: its logits are not finite, and its row alone
 * is marked, while the rgb8 records around it in the batch keep their
 * predictions. On oneDNN's convolutions and on the reference: a ReLU that
 * took the overflow's NaN to 0 (oneDNN's max(x, 0)) would end it finite. */
static void test_engine_cpu_marks_nonfinite_rows(void) {
        model_t *m = NULL;
        engine_t *e;
        errbuf_t err;
        const engine_topk_t *top;
        const float *lg;
        float *p;
        int nonfinite = 0;

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 5), 0);
        for (int reference = 0; reference < 2; reference++) {
                e = engine_check_open(m, 3, PRECISION_AUTO, reference);
                CU_ASSERT_PTR_NOT_NULL_FATAL(e);
                engine_check_fill(e, 0, 0, 101, RECORD_RGB8);
                p = engine_check_fill(e, 0, 1, 202, RECORD_F32_CHW);
                for (size_t k = 0; k < RECORD_F32_CHW_BYTES / 4; k++)
                        p[k] = 3e38f;
                engine_check_fill(e, 0, 2, 303, RECORD_RGB8);
                CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 3, &err), 0);
                CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
                top = engine_slot_topk(e, 0);
                lg = engine_slot_logits(e, 0);
                CU_ASSERT_TRUE(engine_topk_is_finite(top));
                CU_ASSERT_FALSE(engine_topk_is_finite(top + 3));
                CU_ASSERT_TRUE(engine_topk_is_finite(top + 6));
                for (int j = 0; j < 3; j++) {
                        CU_ASSERT_EQUAL(top[3 + j].cls, ENGINE_TOPK_NONFINITE);
                        CU_ASSERT(isnan(top[3 + j].score));
                        CU_ASSERT(top[j].cls >= 0 && isfinite(top[j].score));
                        CU_ASSERT(top[6 + j].cls >= 0 && isfinite(top[6 + j].score));
                }
                /* The logits are left as computed: the overflow shows there. */
                nonfinite = 0;
                for (int c = 0; c < R50_CLASSES; c++)
                        nonfinite += !isfinite(lg[R50_CLASSES + c]);
                CU_ASSERT(nonfinite > 0);
                engine_free(e);
        }
        model_free(m);
}

/* Weights that overflow: fc row 7 all 3e38 (finite, as a loaded file must
 * be) times the non-negative pooled features gives +inf for class 7 in
 * every row, so every row is marked. */
static void test_engine_cpu_marks_rows_of_overflowing_weights(void) {
        model_t *m = NULL;
        engine_t *e;
        errbuf_t err;
        int fc;

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 5), 0);
        fc = model_find_op(m, "fc");
        CU_ASSERT_FATAL(fc >= 0);
        for (int j = 0; j < m->ops[fc].cin; j++)
                m->weights[m->ops[fc].w_off + (size_t)7 * m->ops[fc].cin + j] = 3e38f;
        e = engine_test_open(m, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        engine_check_fill(e, 0, 0, 101, RECORD_RGB8);
        engine_check_fill(e, 0, 1, 303, RECORD_RGB8);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 2, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
        CU_ASSERT(isinf(engine_slot_logits(e, 0)[7]));
        CU_ASSERT_FALSE(engine_topk_is_finite(engine_slot_topk(e, 0)));
        CU_ASSERT_FALSE(engine_topk_is_finite(engine_slot_topk(e, 0) + 3));
        engine_free(e);
        model_free(m);
}

static void test_engine_cpu_completion_fd(void) {
        model_t *m = NULL;
        engine_t *e;
        errbuf_t err;
        int slot = -1, fd;
        struct pollfd p;

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 6), 0);
        e = engine_test_open(m, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        fd = engine_completion_fd(e);
        CU_ASSERT(fd >= 0);
        CU_ASSERT_EQUAL(engine_reap(e, &slot, &err), 0);        /* nothing yet, and no blocking */
        engine_check_fill(e, 1, 0, 7, RECORD_RGB8);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 1, 1, &err), 0);
        p = (struct pollfd){ .fd = fd, .events = POLLIN };
        CU_ASSERT_EQUAL(poll(&p, 1, 60000), 1);
        CU_ASSERT_EQUAL(engine_reap(e, &slot, &err), 1);
        CU_ASSERT_EQUAL(slot, 1);
        CU_ASSERT_EQUAL(engine_reap(e, &slot, &err), 0);
        p.revents = 0;
        CU_ASSERT_EQUAL(poll(&p, 1, 0), 0);                     /* readiness cleared */
        engine_free(e);
        model_free(m);
}

static void test_engine_cpu_refuses_misuse(void) {
        model_t *m = NULL, *desc = NULL;
        engine_options_t o;
        engine_t *e;
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 8), 0);
        e = engine_test_open(m, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL(engine_submit(e, 0, 3, &err), -EINVAL);        /* larger than the plan */
        CU_ASSERT_EQUAL(engine_submit(e, 0, 0, &err), -EINVAL);
        CU_ASSERT_EQUAL(engine_submit(e, 5, 1, &err), -EINVAL);
        CU_ASSERT_EQUAL(engine_submit(e, 0, 1, &err), -EINVAL);        /* nothing placed */
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "0 placed"));
        /* Packed staging at batch 2: 150,528 + 602,112 = 752,640 bytes. A
         * float32 record leaves 150,528: no room for a record of either
         * format, so a caller submits; another float32 does not fit, an
         * rgb8 one would, right after it. */
        CU_ASSERT_TRUE(engine_slot_has_room(e, 0));
        CU_ASSERT_PTR_NULL(engine_slot_place(e, 0, 0, RECORD_JPEG));
        {
                unsigned char *a = engine_slot_place(e, 0, 0, RECORD_F32_CHW), *b;

                CU_ASSERT_PTR_NOT_NULL_FATAL(a);
                CU_ASSERT_FALSE(engine_slot_has_room(e, 0));
                CU_ASSERT_PTR_NULL(engine_slot_place(e, 0, 1, RECORD_F32_CHW));
                b = engine_slot_place(e, 0, 1, RECORD_RGB8);
                CU_ASSERT_EQUAL(b - a, 602112);
                CU_ASSERT_EQUAL(engine_slot_input_bytes(e, 0, 2), (uint64_t)752640);
                CU_ASSERT_EQUAL(engine_submit(e, 0, 3, &err), -EINVAL);
        }
        engine_free(e);

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = PRECISION_FP16;
        CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "fp32 or bf16, not fp16"));
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.device_budget = "1MiB";
        CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -ENOSPC);
        o.device_budget = "lots";
        CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'lots'"));
        CU_ASSERT_EQUAL_FATAL(model_describe(&desc), 0);
        engine_options_init(&o);
        CU_ASSERT_EQUAL(engine_open(&e, desc, &o, NULL, 0, &err), -EINVAL);    /* no weights */
        model_free(desc);
        model_free(m);
}

static void test_engine_cpu_auto_falls_back_with_warning(void) {
        model_t *m = NULL;
        engine_options_t o;
        engine_t *e = NULL;
        char warning[512] = "";
        errbuf_t err;
        char why[256];
        uint64_t total;

        if (engine_cuda_probe(0, &total, why, sizeof(why)) > 0) {
                CU_PASS("a CUDA device is present: the fallback is not reachable here");
                return;
        }
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 9), 0);
        engine_options_init(&o);
        o.precision = PRECISION_FP16;
        o.max_batch = 1;
        o.cpu_keep_conv_weights = true;         /* m opens a second time below */
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, warning, sizeof(warning), &err), 0);
        CU_ASSERT_STRING_EQUAL(engine_backend(e), "cpu");
        CU_ASSERT_EQUAL(engine_precision(e), PRECISION_FP32);
        CU_ASSERT_PTR_NOT_NULL(strstr(warning, "using the CPU engine"));
        engine_free(e);
        o.backend = BACKEND_CUDA;
        CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "CUDA"));
        model_free(m);
}

/* Runs record `seed` (rgb8) alone in slot 0 of e; its logits (classes of
 * them) into out. */
static int engine_test_logits_k(engine_t *e, uint64_t seed, float *out, int classes) {
        errbuf_t err;
        int r;

        engine_check_fill(e, 0, 0, seed, RECORD_RGB8);
        if ((r = engine_submit(e, 0, 1, &err)) < 0 || (r = engine_wait(e, 0, &err)) < 0)
                return r;
        memcpy(out, engine_slot_logits(e, 0), (size_t)classes * sizeof(float));
        return 0;
}

static int engine_test_logits(engine_t *e, uint64_t seed, float out[R50_CLASSES]) {
        return engine_test_logits_k(e, seed, out, R50_CLASSES);
}

/* A swap in place may change the architecture and the class count: from
 * resnet50/1000 to resnet18/10 (the logits of an engine opened on it, top-k
 * within its classes), to a 1-class resnet18 (the top-k opened with, 3,
 * lowered to 1), and from resnet18 back to resnet50, whose larger samples
 * are carved from the arena of open (a smaller batch, or refused). */
static void test_engine_cpu_swap_architecture(void) {
        model_arch_t a18, a18_1, a50;
        model_t *r50 = NULL, *r18 = NULL, *r18_1 = NULL, *r50b = NULL;
        engine_t *e, *fresh;
        engine_options_t o;
        plan_t plan;
        errbuf_t err;
        float l18[10], l50[R50_CLASSES], got[R50_CLASSES];
        const engine_topk_t *top;
        int r;

        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&a18, "resnet18", 10, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&a18_1, "resnet18", 1, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&a50, "resnet50", 1000, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_random_arch(&r18, &a18, 8), 0);
        CU_ASSERT_EQUAL_FATAL(model_random_arch(&r18_1, &a18_1, 9), 0);
        CU_ASSERT_EQUAL_FATAL(model_random_arch(&r50, &a50, 5), 0);
        CU_ASSERT_EQUAL_FATAL(model_random_arch(&r50b, &a50, 5), 0);
        fresh = engine_test_open(r18, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fresh);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits_k(fresh, 77, l18, 10), 0);
        engine_free(fresh);
        fresh = engine_test_open(r50b, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fresh);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits_k(fresh, 77, l50, R50_CLASSES), 0);
        engine_free(fresh);

        e = engine_test_open(r50, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.max_batch = 2;
        o.top_k = 3;
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, r18, &o, &plan, &err), 0);
        CU_ASSERT_STRING_EQUAL(plan.model, "resnet18");
        CU_ASSERT_EQUAL(plan.classes, 10);
        CU_ASSERT_EQUAL(plan.max_batch, 2);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, r18, &plan, &err), 0);
        model_free(r50);
        r50 = NULL;
        CU_ASSERT_EQUAL_FATAL(engine_test_logits_k(e, 77, got, 10), 0);
        CU_ASSERT(engine_check_rel_l2(got, l18, 10) < 1e-6);
        top = engine_slot_topk(e, 0);
        for (int j = 0; j < 3; j++)
                CU_ASSERT(top[j].cls >= 0 && top[j].cls < 10);
        CU_ASSERT_EQUAL(got[top[0].cls] >= got[top[1].cls] && got[top[1].cls] >= got[top[2].cls], 1);

        /* One class: the top-k of open (3) is lowered to 1. */
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, r18_1, &o, &plan, &err), 0);
        CU_ASSERT_EQUAL(plan.top_k, 1);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, r18_1, &plan, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits_k(e, 77, got, 1), 0);
        CU_ASSERT(engine_slot_topk(e, 0)[0].cls == 0 && fabs(engine_slot_topk(e, 0)[0].score - 1.0) < 1e-6);
        engine_free(e);

        /* From resnet18 to resnet50: its samples need more of the arena
         * allocated at open, so a smaller batch, or a refusal naming it. */
        e = engine_test_open(r18, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        r = engine_swap_plan(e, r50b, &o, &plan, &err);
        if (r == 0) {
                CU_ASSERT(plan.max_batch < 2);
                CU_ASSERT_EQUAL_FATAL(engine_swap(e, r50b, &plan, &err), 0);
                CU_ASSERT_EQUAL_FATAL(engine_test_logits_k(e, 77, got, R50_CLASSES), 0);
                CU_ASSERT(engine_check_rel_l2(got, l50, R50_CLASSES) < 1e-6);
        } else {
                CU_ASSERT_EQUAL(r, -ENOSPC);
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "allocated at start"));
                fprintf(stderr, "resnet18 -> resnet50 refused: %s\n", err.msg);
        }
        engine_free(e);
        model_free(r18);
        model_free(r18_1);
        model_free(r50b);
}

/* A model swap in place: after engine_swap the engine computes the new
 * model's logits (those of an engine opened on it, which the golden suite
 * holds against torchvision), not the old one's; a plan that does not fit
 * is refused by engine_swap_plan with nothing changed; a busy engine
 * refuses the swap; the plan charges the arena and host block kept from
 * open, so a budget below them is refused, and a smaller max_batch is
 * carved within them. */
static void test_engine_cpu_swap_weights(void) {
        model_t *a = NULL, *b = NULL, *c = NULL;
        engine_t *e, *fresh;
        engine_options_t o;
        plan_t plan;
        errbuf_t err;
        float la[R50_CLASSES], lb[R50_CLASSES], got[R50_CLASSES];
        char budget[32];

        CU_ASSERT_EQUAL_FATAL(model_random(&a, 5), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&b, 6), 0);
        fresh = engine_test_open(b, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fresh);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits(fresh, 77, lb), 0);
        engine_free(fresh);

        e = engine_test_open(a, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits(e, 77, la), 0);
        CU_ASSERT(engine_check_rel_l2(la, lb, R50_CLASSES) > 0.1);       /* two different models */

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.max_batch = 2;
        o.top_k = 3;
        /* A budget below the weights: refused, and a still serves. */
        o.device_budget = "50MiB";
        CU_ASSERT_EQUAL(engine_swap_plan(e, b, &o, &plan, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "weights"));
        CU_ASSERT_EQUAL_FATAL(engine_test_logits(e, 77, got), 0);
        CU_ASSERT(engine_check_rel_l2(got, la, R50_CLASSES) < 1e-6);

        /* Busy: refused, nothing changed. */
        o.device_budget = NULL;
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, b, &o, &plan, &err), 0);
        CU_ASSERT_EQUAL(plan.max_batch, 2);
        engine_check_fill(e, 0, 0, 77, RECORD_RGB8);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 1, &err), 0);
        CU_ASSERT_EQUAL(engine_swap(e, b, &plan, &err), -EBUSY);
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
        CU_ASSERT(engine_check_rel_l2(engine_slot_logits(e, 0), la, R50_CLASSES) < 1e-6);

        /* Idle: swapped; the old model can go. */
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, b, &plan, &err), 0);
        model_free(a);
        a = NULL;
        CU_ASSERT_EQUAL_FATAL(engine_test_logits(e, 77, got), 0);
        CU_ASSERT(engine_check_rel_l2(got, lb, R50_CLASSES) < 1e-6);

        /* The swap kept the arena and the host block of open: its plan
         * charges both whole (the weights are the model's own blocks),
         * beside oneDNN's kernels for its batch's buckets (ResNet-50's 53
         * convs and max pool, each a primitive per bucket). */
        CU_ASSERT(e->held_arena_bytes > 0 && e->held_pinned_host_bytes > 0);
        CU_ASSERT_EQUAL(plan.engine.context_bytes, 2 * 54 * cpu_dnnl_kernel_bytes_each(engine_precision(e)));
        CU_ASSERT_EQUAL(plan.total_bytes, plan.engine.context_bytes + plan.weights_bytes + e->held_arena_bytes);
        CU_ASSERT_EQUAL(plan.pinned_host_bytes, e->held_pinned_host_bytes);

        /* A budget that batch 1 alone would fit (half a sample less than
         * the plan, and without the kernels of batch 2's bucket, which
         * batch 1 does not make): refused, since the swap keeps the arena
         * of batch 2 allocated at open; a still serves. */
        CU_ASSERT_EQUAL_FATAL(model_random(&c, 6), 0);
        snprintf(budget, sizeof(budget), "%llu",
                 (unsigned long long)(plan.total_bytes - plan.engine.context_bytes / 2 -
                                      plan.activation_bytes_per_sample / 2));
        o.device_budget = budget;
        CU_ASSERT_EQUAL(engine_swap_plan(e, c, &o, &plan, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "arena allocated at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[memory] gpu_budget"));
        CU_ASSERT_EQUAL(engine_max_batch(e), 2);

        /* A smaller max_batch: batch 1, carved in the same arena and host
         * block, which the plan still charges whole; the new model's
         * numbers. */
        o.device_budget = NULL;
        o.max_batch = 1;
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, c, &o, &plan, &err), 0);
        CU_ASSERT_EQUAL(plan.max_batch, 1);
        CU_ASSERT(plan.arena_kept_bytes >= plan.activation_bytes_per_sample);
        CU_ASSERT_EQUAL(plan.engine.context_bytes, 54 * cpu_dnnl_kernel_bytes_each(engine_precision(e)));
        CU_ASSERT_EQUAL(plan.total_bytes, plan.engine.context_bytes + plan.weights_bytes + e->held_arena_bytes);
        CU_ASSERT(plan.engine.pinned_host_bytes < e->held_pinned_host_bytes);
        CU_ASSERT_EQUAL(plan.pinned_host_bytes, e->held_pinned_host_bytes);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, c, &plan, &err), 0);
        model_free(b);
        b = NULL;
        CU_ASSERT_EQUAL(engine_max_batch(e), 1);
        CU_ASSERT_EQUAL(engine_plan_of(e)->pinned_host_bytes, e->held_pinned_host_bytes);
        CU_ASSERT_EQUAL_FATAL(engine_test_logits(e, 77, got), 0);
        CU_ASSERT(engine_check_rel_l2(got, lb, R50_CLASSES) < 1e-6);
        engine_free(e);
        model_free(c);
}

/* oneDNN's engine (the default) against the reference (cpu_ops' im2col
 * convolutions, the test-only option) on the same model: every record of a
 * batch of 7 (the top bucket of max_batch 7), of 6 (4 + 2) and of 3 (2 + 1)
 * within fp32 rounding, residual adds and ReLUs included (a dropped post-op
 * is off by far more). The plan counts oneDNN's reordered weights beside
 * the model's, and the reference's plan has no copy. oneDNN's plan puts
 * each of the 16 residual convs' output over its residual (a sum post-op
 * in place) in a smaller arena; the reference's keeps them apart. */
static void test_engine_cpu_onednn_matches_reference(void) {
        static const uint64_t seeds[7] = { 11, 12, 13, 14, 15, 16, 17 };
        static const int sizes[3] = { 7, 6, 3 };
        float *got = malloc(7 * R50_CLASSES * sizeof(float)), *want = malloc(7 * R50_CLASSES * sizeof(float));
        model_t *m = NULL;
        engine_t *d, *ref;
        const plan_t *pd, *pr;
        double worst = 0;
        size_t conv_elems = 0;
        int in_place = 0;

        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 9), 0);
        for (int i = 0; i < m->n_ops; i++)
                if (m->ops[i].kind == MODEL_OP_CONV)
                        conv_elems += (size_t)m->ops[i].cout * m->ops[i].kh * m->ops[i].kw * m->ops[i].cin;
        d = engine_check_open(m, 7, PRECISION_AUTO, false);
        ref = engine_check_open(m, 7, PRECISION_AUTO, true);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        pd = engine_plan_of(d);
        pr = engine_plan_of(ref);
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "weights: %zu elements, copy %llu bytes\n", m->weight_elems,
                        (unsigned long long)pd->engine.weights_copy_bytes);
        CU_ASSERT_EQUAL(pr->engine.weights_copy_bytes, 0);
        CU_ASSERT(pd->engine.weights_copy_bytes >= conv_elems * sizeof(float));
        CU_ASSERT_EQUAL(pd->weights_bytes, pr->weights_bytes + pd->engine.weights_copy_bytes);
        CU_ASSERT_TRUE(pd->engine.residual_in_place);
        CU_ASSERT_FALSE(pr->engine.residual_in_place);
        CU_ASSERT(pd->arena_elems_per_sample < pr->arena_elems_per_sample);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (op->residual < 0)
                        continue;
                in_place++;
                CU_ASSERT_EQUAL(pd->tensor_offset[op->out], pd->tensor_offset[op->residual]);
                CU_ASSERT_NOT_EQUAL(pr->tensor_offset[op->out], pr->tensor_offset[op->residual]);
        }
        CU_ASSERT_EQUAL(in_place, 16);
        for (int k = 0; k < 3; k++) {
                int n = sizes[k];

                CU_ASSERT_EQUAL_FATAL(engine_check_batch(d, seeds, n, got), 0);
                CU_ASSERT_EQUAL_FATAL(engine_check_batch(ref, seeds, n, want), 0);
                for (int i = 0; i < n; i++) {
                        double rel = engine_check_rel_l2(got + (size_t)i * R50_CLASSES, want + (size_t)i * R50_CLASSES,
                                                         R50_CLASSES);

                        CU_ASSERT(rel < 1e-5);
                        if (!(rel <= worst))
                                worst = rel;
                }
        }
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "oneDNN against the reference: worst rel L2 %.3g\n", worst);
        engine_free(d);
        engine_free(ref);
        model_free(m);
        free(got);
        free(want);
}

static uint64_t engine_test_status_bytes(const char *key) {
        char line[256];
        unsigned long long kb = 0;
        FILE *f = fopen("/proc/self/status", "r");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, strlen(key)) == 0)
                        sscanf(line + strlen(key), "%llu", &kb);
        fclose(f);
        return kb * 1024;
}

static int engine_test_reset_peak(void) {
        FILE *f = fopen("/proc/self/clear_refs", "w");

        if (!f)
                return -1;
        if (fputs("5", f) < 0) {
                fclose(f);
                return -1;
        }
        return fclose(f) == 0 ? 0 : -1;
}

/* The memory planner stays the source of memory: opening oneDNN's engine
 * and running a batch of every size raises the resident set by no more than
 * the plan's arena, host buffers, reordered weights and oneDNN's kernels
 * (and a margin for OpenMP's threads and oneDNN's one-time set-up: it was
 * 48 MiB before the plan counted the kernels); then 20 more batches
 * raise its peak (VmHWM, reset first) by less than 1 MiB: nothing of size is
 * allocated per batch, a scratchpad of oneDNN's own included. In fp32, and
 * in bf16 where the CPU has it (on an Intel Xeon with AMX, 2026-12-06: fp32
 * +136 MiB against 157 planned, bf16 +93 against 121). */
static void onednn_memory_within_plan(precision_t precision) {
        static const uint64_t seeds[6] = { 21, 22, 23, 24, 25, 26 };
        float *out = malloc(6 * R50_CLASSES * sizeof(float));
        model_t *m = NULL;
        engine_t *e;
        const plan_t *p;
        uint64_t before, opened, planned, peak_before, peak_after;

        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 3), 0);
        before = engine_test_status_bytes("VmRSS:");
        e = engine_check_open(m, 6, precision, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL(engine_precision(e), precision);
        for (int n = 1; n <= 6; n++)
                CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, n, out), 0);
        opened = engine_test_status_bytes("VmRSS:");
        p = engine_plan_of(e);
        planned = e->held_arena_bytes + e->held_pinned_host_bytes + p->engine.weights_copy_bytes +
                  p->engine.context_bytes;
        CU_ASSERT(before > 0 && opened > before);
        CU_ASSERT(opened - before <= planned + ((uint64_t)16 << 20));
        CU_ASSERT_EQUAL_FATAL(engine_test_reset_peak(), 0);
        peak_before = engine_test_status_bytes("VmHWM:");
        for (int k = 0; k < 20; k++)
                CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, 1 + k % 6, out), 0);
        peak_after = engine_test_status_bytes("VmHWM:");
        CU_ASSERT(peak_before > 0 && peak_after - peak_before < ((uint64_t)1 << 20));
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "oneDNN engine, %s: RSS +%llu bytes at open and warm-up (planned %llu), "
                        "peak +%llu over 20 batches\n", precision == PRECISION_BF16 ? "bf16" : "fp32",
                        (unsigned long long)(opened - before),
                        (unsigned long long)planned, (unsigned long long)(peak_after - peak_before));
        engine_free(e);
        model_free(m);
        free(out);
}

static void test_engine_cpu_onednn_memory_within_plan(void) {
        onednn_memory_within_plan(PRECISION_FP32);
}

static void test_engine_cpu_onednn_bf16_memory_within_plan(void) {
        onednn_memory_within_plan(PRECISION_BF16);
}

/* One resident weight set (issue 41): once oneDNN holds its reordered copy
 * of the convs' weights, the model's folded fp32 blocks of them are freed.
 * From before the model is made to after the engine's first batches, the
 * resident set grows by no more than the whole plan (its weights term within
 * 5% of one fp32 copy) and the margin of the test above; with the fp32
 * blocks kept it would grow by 94 MiB more. The predictions are those of an
 * engine that kept them, bit for bit, and no second engine opens on the
 * model. */
static void test_engine_cpu_holds_one_weight_set(void) {
        static const uint64_t seeds[2] = { 31, 32 };
        const uint64_t raw = (uint64_t)(25502912 + 27560) * 4;
        float *out = malloc(2 * R50_CLASSES * sizeof(float)), *kept = malloc(2 * R50_CLASSES * sizeof(float));
        engine_options_t o;
        model_t *m = NULL;
        engine_t *e = NULL, *k = NULL;
        const plan_t *p;
        errbuf_t err;
        uint64_t before, opened, planned;

        CU_ASSERT_FATAL(out && kept);
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = PRECISION_FP32;
        o.max_batch = 2;
        before = engine_test_status_bytes("VmRSS:");
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 3), 0);
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, NULL, 0, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, 2, out), 0);
        opened = engine_test_status_bytes("VmRSS:");
        p = engine_plan_of(e);
        planned = p->weights_bytes + e->held_arena_bytes + e->held_pinned_host_bytes + p->engine.context_bytes;
        CU_ASSERT(m->conv_weights_dropped);
        CU_ASSERT(p->weights_bytes >= raw && p->weights_bytes < raw / 100 * 105);
        CU_ASSERT(before > 0 && opened > before);
        CU_ASSERT(opened - before <= planned + ((uint64_t)16 << 20));
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "one weight set: RSS +%llu bytes from the model's load to warm-up, planned %llu "
                        "(weights %llu)\n", (unsigned long long)(opened - before), (unsigned long long)planned,
                        (unsigned long long)p->weights_bytes);
        CU_ASSERT_EQUAL(engine_open(&k, m, &o, NULL, 0, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "conv weights went to another engine"));
        engine_free(e);
        model_free(m);

        /* The same model kept whole gives the same logits. */
        m = NULL;
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 3), 0);
        o.cpu_keep_conv_weights = true;
        CU_ASSERT_EQUAL_FATAL(engine_open(&k, m, &o, NULL, 0, &err), 0);
        CU_ASSERT_FALSE(m->conv_weights_dropped);
        CU_ASSERT_EQUAL(engine_plan_of(k)->weights_bytes,
                        engine_plan_of(k)->engine.weights_copy_bytes + plan_cpu_model_weight_bytes(m, true));
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(k, seeds, 2, kept), 0);
        CU_ASSERT_EQUAL(memcmp(out, kept, 2 * R50_CLASSES * sizeof(float)), 0);
        engine_free(k);
        model_free(m);
        free(out);
        free(kept);
}

/* engine_slot_copy writes what memcpy writes, and nothing around it: short
 * copies (memcpy's), long ones (streaming stores) from every alignment of
 * source and destination, with a tail of every length. */
static void test_engine_cpu_slot_copy_is_memcpy(void) {
        const size_t lens[] = { 0, 1, 63, 4095, ENGINE_SLOT_COPY_STREAM_MIN, ENGINE_SLOT_COPY_STREAM_MIN + 63,
                                150528, 150528 + 37 };
        const size_t room = 150528 + 256;
        unsigned char *src = malloc(room), *got = malloc(room), *want = malloc(room);

        CU_ASSERT_FATAL(src && got && want);
        for (size_t i = 0; i < room; i++)
                src[i] = (unsigned char)(i * 131 + 7);
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
                for (size_t so = 0; so < 64; so += 9)
                        for (size_t d = 0; d < 64; d += 13) {
                                memset(got, 0xa5, room);
                                memset(want, 0xa5, room);
                                memcpy(want + d, src + so, lens[l]);
                                engine_slot_copy(got + d, src + so, lens[l]);
                                if (memcmp(got, want, room) != 0) {
                                        CU_FAIL("engine_slot_copy differs from memcpy");
                                        fprintf(stderr, "  len %zu, source +%zu, destination +%zu\n", lens[l], so, d);
                                        goto out;
                                }
                        }
out:
        free(src);
        free(got);
        free(want);
}

int test_engine_cpu_register(void) {
        static CU_TestInfo tests[] = {
                { "result_independent_of_batch", test_engine_cpu_result_independent_of_batch },
                { "slot_copy_is_memcpy", test_engine_cpu_slot_copy_is_memcpy },
                { "marks_nonfinite_rows", test_engine_cpu_marks_nonfinite_rows },
                { "marks_rows_of_overflowing_weights", test_engine_cpu_marks_rows_of_overflowing_weights },
                { "completion_fd", test_engine_cpu_completion_fd },
                { "refuses_misuse", test_engine_cpu_refuses_misuse },
                { "auto_falls_back_with_warning", test_engine_cpu_auto_falls_back_with_warning },
                { "swap_weights", test_engine_cpu_swap_weights },
                { "swap_architecture", test_engine_cpu_swap_architecture },
                { "onednn_matches_reference", test_engine_cpu_onednn_matches_reference },
                { "onednn_memory_within_plan", test_engine_cpu_onednn_memory_within_plan },
                { "holds_one_weight_set", test_engine_cpu_holds_one_weight_set },
                /* Last: needs bf16. */
                { "onednn_bf16_memory_within_plan", test_engine_cpu_onednn_bf16_memory_within_plan },
                CU_TEST_INFO_NULL,
        };
        const int n = sizeof(tests) / sizeof(tests[0]) - 2;

        if (!cpu_dnnl_has_bf16()) {
                printf("SKIP unit/engine_cpu/%s: this CPU has no AVX512_BF16 or AMX (oneDNN's instruction set: "
                       "%s)\n", tests[n].pName, cpu_dnnl_isa());
                tests[n] = (CU_TestInfo)CU_TEST_INFO_NULL;
        }
        return unit_add_suite("engine_cpu", tests);
}

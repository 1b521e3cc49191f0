/* Unit tests of the CPU engine's oneDNN path beyond fp32's numerics
 * (test_engine_cpu holds those): bf16 against fp32 and in the plan, its
 * refusal on a CPU without bf16 kernels (through the test-only switch that
 * hides them), a swap in place that changes the precision, and that neither
 * the engine nor oneDNN allocates anything per batch (an allocation counter
 * over the whole process). The bf16 tests need AVX512_BF16 or AMX and are
 * reported SKIP elsewhere; numerics against torchvision are the golden
 * suite's job. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "engine/cpu_dnnl.h"
#include "engine/engine.h"
#include "engine_check.h"
#include "unit.h"

#define ONEDNN_TEST_BATCH 7

/* bf16 on a CPU without it: one sentence naming the missing instruction
 * sets, at open and when planning (--plan, --check-config); fp16 is not a
 * CPU precision; the reference is fp32 only; and backend auto's fallback
 * to the CPU keeps bf16 only where the CPU has it. */
static void test_engine_onednn_bf16_refused_without_isa(void) {
        model_t *m = NULL;
        engine_options_t o;
        engine_t *e = NULL;
        plan_t plan;
        errbuf_t err = { "" };
        char warning[512] = "", why[256];
        uint64_t total;

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 9), 0);
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = PRECISION_BF16;
        o.max_batch = 2;
        o.cpu_no_bf16 = true;
        CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -EOPNOTSUPP);
        CU_ASSERT_PTR_NULL(e);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "bf16 needs AVX512_BF16 or AMX, which this CPU lacks"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "precision = fp32"));
        err.msg[0] = '\0';
        CU_ASSERT_EQUAL(engine_plan(m, &o, &plan, NULL, 0, &err), -EOPNOTSUPP);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "AVX512_BF16 or AMX"));
        CU_ASSERT_EQUAL(engine_cpu_precision_check(PRECISION_BF16, &o, NULL), -EOPNOTSUPP);
        CU_ASSERT_EQUAL(engine_cpu_precision_check(PRECISION_FP32, &o, NULL), 0);
        CU_ASSERT_EQUAL(engine_cpu_precision_check(PRECISION_FP16, &o, NULL), -EINVAL);
        o.cpu_no_bf16 = false;
        CU_ASSERT_EQUAL(engine_cpu_precision_check(PRECISION_BF16, &o, NULL), cpu_dnnl_has_bf16() ? 0 : -EOPNOTSUPP);

        /* The reference computes in fp32 only. */
        o.cpu_reference = true;
        if (cpu_dnnl_has_bf16()) {
                CU_ASSERT_EQUAL(engine_open(&e, m, &o, NULL, 0, &err), -EINVAL);
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "reference CPU engine computes in fp32 only"));
        }

        /* auto without a CUDA device: bf16 kept where the CPU has it. */
        if (engine_cuda_probe(0, &total, why, sizeof(why)) == 0) {
                engine_options_init(&o);
                o.precision = PRECISION_BF16;
                o.max_batch = 1;
                o.cpu_no_bf16 = true;
                o.cpu_keep_conv_weights = true; /* m opens twice */
                CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, warning, sizeof(warning), &err), 0);
                CU_ASSERT_EQUAL(engine_precision(e), PRECISION_FP32);
                CU_ASSERT_PTR_NOT_NULL(strstr(warning, "which computes in fp32 here"));
                engine_free(e);
                e = NULL;
                if (cpu_dnnl_has_bf16()) {
                        o.cpu_no_bf16 = false;
                        CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, warning, sizeof(warning), &err), 0);
                        CU_ASSERT_EQUAL(engine_precision(e), PRECISION_BF16);
                        CU_ASSERT_PTR_NOT_NULL(strstr(warning, "using the CPU engine, in bf16"));
                        engine_free(e);
                }
        }
        model_free(m);
}

/* bf16 against fp32 on the same model: batches of 7 (the top bucket), 6
 * (4 + 2) and 3 (2 + 1), every record within bf16's rounding of fp32's
 * logits, and not equal to them (it did compute in bf16). The plan: bf16
 * activations (half of fp32's), the model's fp32 blocks plus a bf16
 * reordered copy (half of fp32's copy) in the weights term. */
static void test_engine_onednn_bf16_matches_fp32(void) {
        static const uint64_t seeds[ONEDNN_TEST_BATCH] = { 11, 12, 13, 14, 15, 16, 17 };
        static const int sizes[3] = { 7, 6, 3 };
        size_t elems = ONEDNN_TEST_BATCH * R50_CLASSES;
        float *got = malloc(elems * sizeof(float)), *want = malloc(elems * sizeof(float));
        model_t *m = NULL;
        engine_t *b, *f;
        const plan_t *pb, *pf;
        double worst = 0, least = INFINITY;

        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 9), 0);
        b = engine_check_open(m, ONEDNN_TEST_BATCH, PRECISION_BF16, false);
        f = engine_check_open(m, ONEDNN_TEST_BATCH, PRECISION_FP32, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(engine_precision(b), PRECISION_BF16);
        pb = engine_plan_of(b);
        pf = engine_plan_of(f);
        CU_ASSERT_EQUAL(pb->precision, PRECISION_BF16);
        CU_ASSERT_EQUAL(2 * pb->activation_bytes_per_sample, pf->activation_bytes_per_sample);
        CU_ASSERT(pb->engine.weights_copy_bytes > 0);
        CU_ASSERT(pb->engine.weights_copy_bytes * 10 < pf->engine.weights_copy_bytes * 6);
        CU_ASSERT_EQUAL(pb->weights_bytes - pb->engine.weights_copy_bytes,
                        pf->weights_bytes - pf->engine.weights_copy_bytes);
        for (int k = 0; k < 3; k++) {
                int n = sizes[k];

                CU_ASSERT_EQUAL_FATAL(engine_check_batch(b, seeds, n, got), 0);
                CU_ASSERT_EQUAL_FATAL(engine_check_batch(f, seeds, n, want), 0);
                for (int i = 0; i < n; i++) {
                        double rel = engine_check_rel_l2(got + (size_t)i * R50_CLASSES, want + (size_t)i * R50_CLASSES,
                                                     R50_CLASSES);

                        if (!(rel <= worst))
                                worst = rel;
                        if (rel < least)
                                least = rel;
                }
        }
        fprintf(stderr, "bf16 against fp32: rel L2 %.3g .. %.3g\n", least, worst);
        CU_ASSERT(worst < 2e-2);
        CU_ASSERT(least > 1e-5);
        engine_free(b);
        engine_free(f);
        model_free(m);
        free(got);
        free(want);
}

/* A swap in place that changes only the precision: fp32 -> bf16 within the
 * arena opened for fp32, giving what a bf16 engine gives, and back to fp32;
 * an engine opened in bf16 cannot take fp32's larger activations at the
 * same batch, and says so. */
static void test_engine_onednn_swap_precision(void) {
        static const uint64_t seeds[2] = { 31, 32 };
        float got[2 * R50_CLASSES], want_b[2 * R50_CLASSES], want_f[2 * R50_CLASSES];
        model_t *m = NULL, *next = NULL, *back = NULL;
        engine_options_t o;
        engine_t *e, *ref;
        plan_t plan;
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 9), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&next, 9), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&back, 9), 0);
        ref = engine_check_open(m, 2, PRECISION_BF16, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(ref, seeds, 2, want_b), 0);
        engine_free(ref);
        e = engine_check_open(m, 2, PRECISION_FP32, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, 2, want_f), 0);

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.max_batch = 2;
        o.top_k = 3;
        o.precision = PRECISION_BF16;
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &plan, &err), 0);
        CU_ASSERT_EQUAL(plan.precision, PRECISION_BF16);
        CU_ASSERT_EQUAL(plan.max_batch, 2);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, next, &plan, &err), 0);
        model_free(m);
        m = NULL;
        CU_ASSERT_EQUAL(engine_precision(e), PRECISION_BF16);
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, 2, got), 0);
        CU_ASSERT(engine_check_rel_l2(got, want_b, 2 * R50_CLASSES) < 1e-6);

        o.precision = PRECISION_FP32;
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, back, &o, &plan, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, back, &plan, &err), 0);
        model_free(next);
        next = NULL;
        CU_ASSERT_EQUAL(engine_precision(e), PRECISION_FP32);
        CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, 2, got), 0);
        CU_ASSERT(engine_check_rel_l2(got, want_f, 2 * R50_CLASSES) < 1e-6);
        engine_free(e);

        /* Opened in bf16: fp32 at batch 2 does not fit its arena. */
        e = engine_check_open(back, 2, PRECISION_BF16, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL_FATAL(model_random(&next, 9), 0);
        CU_ASSERT_EQUAL(engine_swap_plan(e, next, &o, &plan, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "does not fit"));
        CU_ASSERT_EQUAL(engine_precision(e), PRECISION_BF16);
        engine_free(e);
        model_free(next);
        model_free(back);
}

/* After open and one batch of every size, more batches allocate no
 * buffer and keep nothing: every allocation of the engine, of oneDNN or of
 * OpenBLAS's fc, on any thread, is at most ONEDNN_TEST_ALLOC_MAX_BYTES
 * (bookkeeping: oneDNN's execute builds its argument map on the heap, some
 * hundred small nodes a batch) and is freed before the batch ends. A
 * scratchpad or a buffer allocated per batch, or anything kept, fails. */
#define ONEDNN_TEST_ALLOC_MAX_BYTES 4096
static void onednn_test_allocates_nothing(precision_t p) {
        static const uint64_t seeds[4] = { 41, 42, 43, 44 };
        float *out = malloc(4 * R50_CLASSES * sizeof(float));
        model_t *m = NULL;
        engine_t *e;
        alloc_count_t n;

        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 3), 0);
        e = engine_check_open(m, 4, p, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        for (int k = 1; k <= 4; k++)
                CU_ASSERT_EQUAL_FATAL(engine_check_batch(e, seeds, k, out), 0);
        alloc_count_start();
        for (int k = 0; k < 8; k++)
                if (engine_check_batch(e, seeds, 1 + k % 4, out) < 0)
                        break;
        alloc_count_stop(&n);
        if (getenv("INFERD_TEST_VERBOSE") || n.largest_bytes > ONEDNN_TEST_ALLOC_MAX_BYTES || n.live != 0)
                fprintf(stderr, "%s engine over 8 batches: %llu allocations of %llu bytes in all, the largest %llu, "
                        "%lld not freed\n", precision_name(p), (unsigned long long)n.calls,
                        (unsigned long long)n.bytes, (unsigned long long)n.largest_bytes, (long long)n.live);
        CU_ASSERT(n.largest_bytes <= ONEDNN_TEST_ALLOC_MAX_BYTES);
        CU_ASSERT_EQUAL(n.live, 0);
        engine_free(e);
        model_free(m);
        free(out);
}

static void test_engine_onednn_fp32_allocates_nothing_per_batch(void) {
        onednn_test_allocates_nothing(PRECISION_FP32);
}

static void test_engine_onednn_bf16_allocates_nothing_per_batch(void) {
        onednn_test_allocates_nothing(PRECISION_BF16);
}

int test_engine_onednn_register(void) {
        static CU_TestInfo all[] = {
                { "bf16_refused_without_isa", test_engine_onednn_bf16_refused_without_isa },
                { "fp32_allocates_nothing_per_batch", test_engine_onednn_fp32_allocates_nothing_per_batch },
                { "bf16_matches_fp32", test_engine_onednn_bf16_matches_fp32 },
                { "swap_precision", test_engine_onednn_swap_precision },
                { "bf16_allocates_nothing_per_batch", test_engine_onednn_bf16_allocates_nothing_per_batch },
                CU_TEST_INFO_NULL,
        };
        const int n_any = 2;    /* the first n_any run on any CPU; the rest need bf16 */

        if (!cpu_dnnl_has_bf16()) {
                for (int i = n_any; all[i].pName; i++)
                        printf("SKIP unit/engine_onednn/%s: this CPU has no AVX512_BF16 or AMX (oneDNN's "
                               "instruction set: %s)\n", all[i].pName, cpu_dnnl_isa());
                all[n_any] = (CU_TestInfo)CU_TEST_INFO_NULL;
        }
        return unit_add_suite("engine_onednn", all);
}

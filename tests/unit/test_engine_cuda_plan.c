/* Unit tests of engine_cuda_plan: the CUDA engine's planner terms and the
 * arena layout its open carves, which need no GPU and run in CI. The
 * numbers are derived by hand in the comments.
 *
 * Hand derivations used below (ResNet-50, NHWC):
 *   largest im2col: conv1, 7x7 stride 2 pad 3 on (224, 224, 3): rows
 *     112 * 112 = 12,544, columns 7 * 7 * 3 = 147 padded to 152 (a multiple
 *     of 8): 1,906,688 elements per sample (layer1's 3x3 convs:
 *     56 * 56 * 576 = 1,806,336, just below);
 *   padded weights: conv1 only, 64 * 152 elements: 19,456 bytes in fp16,
 *     38,912 in fp32 (both multiples of 256);
 *   one slot block at batch b, top_k 5 (each part rounded up to 256 bytes):
 *     records packed by format, (b - 1) * 150,528 + 602,112 (room for
 *     b - 1 rgb8 records and one of either format; a multiple of 256),
 *     formats b * 4, offsets b * 8, logits b * 4,000, top-k b * 40;
 *     b = 1: 602,112 + 256 + 256 + 4,096 + 256 = 606,976;
 *     b = 8: 1,655,808 + 256 + 256 + 32,000 + 512 = 1,688,832
 *     (a fixed 602,112-byte place per record took 4,849,664). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/engine_cuda_plan.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/record.h"
#include "unit.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static void cuda_request(plan_request_t *req, precision_t p, uint64_t device_bytes, uint64_t budget, int max_batch) {
        memset(req, 0, sizeof(*req));
        req->backend = BACKEND_CUDA;
        req->precision = p;
        req->device_memory_bytes = device_bytes;
        req->budget_bytes = budget;
        req->host_budget_bytes = 2 * GiB;
        req->pipeline_depth = 2;
        req->record_bytes = RECORD_MAX_BYTES;
        req->max_batch = max_batch;
        req->top_k = 5;
        req->terms = engine_cuda_plan_terms;
}

static void test_engine_cuda_plan_im2col_by_hand(void) {
        model_t *m = NULL;
        int n_im2col = 0, n_conv = 0;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        CU_ASSERT_EQUAL(engine_cuda_im2col_elems_per_sample(m), (size_t)1906688);
        CU_ASSERT_EQUAL(engine_cuda_gemm_k(&m->ops[model_find_op(m, "conv1")]), (size_t)152);
        CU_ASSERT_EQUAL(engine_cuda_gemm_k(&m->ops[model_find_op(m, "layer1.0.conv2")]), (size_t)576);
        CU_ASSERT_EQUAL(engine_cuda_gemm_k(&m->ops[model_find_op(m, "layer1.0.conv1")]), (size_t)64);
        CU_ASSERT_EQUAL(engine_cuda_gemm_k(&m->ops[model_find_op(m, "fc")]), (size_t)2048);
        CU_ASSERT_EQUAL(engine_cuda_padded_weights(m, PRECISION_FP16, NULL), (uint64_t)19456);
        CU_ASSERT_EQUAL(engine_cuda_padded_weights(m, PRECISION_FP32, NULL), (uint64_t)38912);
        for (int i = 0; i < m->n_ops; i++) {
                n_conv += m->ops[i].kind == MODEL_OP_CONV;
                n_im2col += engine_cuda_op_needs_im2col(&m->ops[i]);
        }
        /* 53 convolutions; im2col for conv1, the sixteen 3x3 convs and the
         * three strided downsamples (layer2..4), not for layer1's stride-1
         * downsample nor any other 1x1 conv: 20. */
        CU_ASSERT_EQUAL(n_conv, 53);
        CU_ASSERT_EQUAL(n_im2col, 20);
        CU_ASSERT_FALSE(engine_cuda_op_needs_im2col(&m->ops[model_find_op(m, "layer1.0.downsample.0")]));
        CU_ASSERT_TRUE(engine_cuda_op_needs_im2col(&m->ops[model_find_op(m, "layer2.0.downsample.0")]));
        CU_ASSERT_FALSE(engine_cuda_op_needs_im2col(&m->ops[model_find_op(m, "fc")]));
        model_free(m);
}

static void test_engine_cuda_plan_terms_fp16_batch1_by_hand(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t t;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP16, 11 * GiB, 8 * GiB, 256);
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 1, &t), 0);
        /* workspace: 32 MiB cuBLASLt + 1,906,688 * 2 bytes of im2col + conv1's
         * padded weights = 33,554,432 + 3,813,376 + 19,456 */
        CU_ASSERT_EQUAL(t.workspace_bytes, (uint64_t)37387264);
        /* pinned: 2 slots of 606,976; device staging: the same plus one 256-byte pad */
        CU_ASSERT_EQUAL(t.pinned_host_bytes, (uint64_t)1213952);
        CU_ASSERT_EQUAL(t.staging_bytes, (uint64_t)1214208);
        /* the context estimate: 512 MiB */
        CU_ASSERT_EQUAL(t.context_bytes, (uint64_t)536870912);
        /* one bucket (1) x 2 slots x 2 MiB + 64 MiB of modules = 4,194,304 + 67,108,864 */
        CU_ASSERT_EQUAL(t.graph_bytes, (uint64_t)71303168);
        model_free(m);
}

static void test_engine_cuda_plan_terms_fp32_batch8_by_hand(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t t;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP32, 11 * GiB, 8 * GiB, 256);
        req.pipeline_depth = 3;
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 8, &t), 0);
        /* 33,554,432 + 1,906,688 * 8 * 4 + 38,912 = 33,554,432 + 61,014,016 + 38,912 */
        CU_ASSERT_EQUAL(t.workspace_bytes, (uint64_t)94607360);
        /* 3 slots of 1,688,832 = 5,066,496; + 256 on the device */
        CU_ASSERT_EQUAL(t.pinned_host_bytes, (uint64_t)5066496);
        CU_ASSERT_EQUAL(t.staging_bytes, (uint64_t)5066752);
        /* buckets 1, 2, 4, 8: 3 slots x 4 x 2 MiB + 64 MiB = 25,165,824 + 67,108,864 */
        CU_ASSERT_EQUAL(t.graph_bytes, (uint64_t)92274688);
        model_free(m);
}

static void test_engine_cuda_plan_terms_monotonic_in_batch(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t prev, t;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_BF16, 11 * GiB, 8 * GiB, 1024);
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 1, &prev), 0);
        for (int b = 2; b <= 600; b++) {
                CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, b, &t), 0);
                CU_ASSERT(t.workspace_bytes > prev.workspace_bytes);
                CU_ASSERT(t.staging_bytes > prev.staging_bytes);
                CU_ASSERT(t.pinned_host_bytes > prev.pinned_host_bytes);
                CU_ASSERT(t.graph_bytes >= prev.graph_bytes);
                CU_ASSERT_EQUAL(t.context_bytes, prev.context_bytes);
                prev = t;
        }
        model_free(m);
}

static void test_engine_cuda_plan_staging_scales_with_depth(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t d2, d4;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP16, 11 * GiB, 8 * GiB, 256);
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 32, &d2), 0);
        req.pipeline_depth = 4;
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 32, &d4), 0);
        CU_ASSERT_EQUAL(d4.pinned_host_bytes, 2 * d2.pinned_host_bytes);
        CU_ASSERT_EQUAL(d4.staging_bytes - ENGINE_CUDA_ALIGN_BYTES, 2 * (d2.staging_bytes - ENGINE_CUDA_ALIGN_BYTES));
        /* The workspace is shared by the slots (compute is serialised). */
        CU_ASSERT_EQUAL(d4.workspace_bytes, d2.workspace_bytes);
        /* Twice the slots, twice the graphs: 6 buckets (1..16, 32) x 2 more slots x 2 MiB. */
        CU_ASSERT_EQUAL(d4.graph_bytes - d2.graph_bytes, (uint64_t)2 * 6 * 2 * MiB);
        model_free(m);
}

static void test_engine_cuda_plan_measured_context_overrides(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t est, meas;
        plan_t p_est, p_meas;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP16, 11 * GiB, 8 * GiB, 256);
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 16, &est), 0);
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 16, &p_est), 0);
        req.measured_context_bytes = 777 * MiB;
        CU_ASSERT_EQUAL_FATAL(engine_cuda_plan_terms(m, &req, 16, &meas), 0);
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 16, &p_meas), 0);
        CU_ASSERT_EQUAL(est.context_bytes, ENGINE_CUDA_CONTEXT_ESTIMATE_BYTES);
        CU_ASSERT_EQUAL(meas.context_bytes, 777 * MiB);
        CU_ASSERT_EQUAL(p_meas.total_bytes - p_est.total_bytes, 777 * MiB - ENGINE_CUDA_CONTEXT_ESTIMATE_BYTES);
        /* Nothing else moves. */
        CU_ASSERT_EQUAL(meas.workspace_bytes, est.workspace_bytes);
        CU_ASSERT_EQUAL(meas.staging_bytes, est.staging_bytes);
        CU_ASSERT_EQUAL(meas.graph_bytes, est.graph_bytes);
        model_free(m);
}

/* The original incident's card: 11 GiB at 70%. */
static void check_fits_11gib(precision_t p, int cap) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t plan, next;
        uint64_t budget = 11 * GiB * 70 / 100;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, p, 11 * GiB, budget, cap);
        req.host_budget_bytes = 64 * GiB;       /* the device is the limit here */
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &plan, NULL), 0);
        CU_ASSERT(plan.max_batch >= 1 && plan.max_batch <= cap);
        CU_ASSERT(plan.total_bytes <= budget);
        if (plan.max_batch < cap) {
                CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, plan.max_batch + 1, &next), 0);
                CU_ASSERT(next.total_bytes > budget);
        }
        model_free(m);
}

static void test_engine_cuda_plan_fits_11gib_at_70_percent(void) {
        /* Uncapped: the budget decides. fp32 needs about 14.5 MiB a sample
         * (7.3 MiB im2col + 6.9 MiB activations + 0.15 MiB of packed staging
         * per slot), fp16 about half the device part. */
        check_fits_11gib(PRECISION_FP32, 4096);
        check_fits_11gib(PRECISION_FP16, 4096);
        check_fits_11gib(PRECISION_BF16, 4096);
        /* Capped at the configured 256. */
        check_fits_11gib(PRECISION_FP16, 256);
}

static void test_engine_cuda_plan_refuses_a_budget_below_the_context(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t plan;
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP16, 11 * GiB, 256 * MiB, 256);
        CU_ASSERT_EQUAL(plan_make(m, &req, &plan, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "CUDA context"));
        model_free(m);
}

/* What open carves is exactly what the plan counted: the arena is the
 * plan's total less the context and graphs, the regions are aligned and
 * disjoint, and every activation tensor at max_batch lies inside. */
static void test_engine_cuda_plan_layout_matches_plan(void) {
        const precision_t precs[] = { PRECISION_FP32, PRECISION_FP16, PRECISION_BF16 };
        const int caps[] = { 1, 3, 64, 256, 4096 };
        model_t *m = NULL;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        for (size_t i = 0; i < sizeof(precs) / sizeof(precs[0]); i++) {
                for (size_t j = 0; j < sizeof(caps) / sizeof(caps[0]); j++) {
                        plan_request_t req;
                        plan_t plan;
                        engine_cuda_layout_t L;
                        uint64_t pb = precision_bytes(precs[i]), A = ENGINE_CUDA_ALIGN_BYTES;

                        cuda_request(&req, precs[i], 80 * GiB, 60 * GiB, caps[j]);
                        req.pipeline_depth = 2 + (int)j % 3;
                        req.top_k = j % 2 ? 1000 : 5;
                        req.host_budget_bytes = 64 * GiB;
                        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &plan, NULL), 0);
                        CU_ASSERT_EQUAL_FATAL(engine_cuda_layout_of_plan(m, &plan, &L), 0);

                        CU_ASSERT_EQUAL(L.arena_bytes,
                                        plan.total_bytes - plan.engine.context_bytes - plan.engine.graph_bytes);
                        CU_ASSERT_EQUAL(L.pinned_host_bytes, plan.pinned_host_bytes);
                        CU_ASSERT_EQUAL(L.staging_bytes, plan.engine.staging_bytes);
                        CU_ASSERT_EQUAL(L.workspace_bytes, plan.workspace_bytes);
                        CU_ASSERT_EQUAL(L.weights_bytes, plan.weights_bytes);
                        CU_ASSERT_EQUAL(L.batch, plan.max_batch);

                        /* aligned and in order, without overlap */
                        CU_ASSERT(L.slot.bytes % A == 0 && L.slot.formats_off % A == 0 &&
                                  L.slot.offsets_off % A == 0 && L.slot.logits_off % A == 0 &&
                                  L.slot.topk_off % A == 0);
                        CU_ASSERT(L.slot.formats_off >= pack_capacity_bytes(L.batch));
                        CU_ASSERT(L.slot.offsets_off >= L.slot.formats_off + (uint64_t)L.batch * 4);
                        CU_ASSERT(L.slot.logits_off >= L.slot.offsets_off + (uint64_t)L.batch * 8);
                        CU_ASSERT(L.slot.topk_off >= L.slot.logits_off + (uint64_t)L.batch * m->classes * 4);
                        CU_ASSERT(L.slot.bytes >= L.slot.topk_off + (uint64_t)L.batch * req.top_k * 8);
                        CU_ASSERT(L.workspace_off % A == 0 && L.workspace_off >= (uint64_t)L.depth * L.slot.bytes);
                        CU_ASSERT(L.lt_workspace_off % A == 0 && L.im2col_off % A == 0);
                        CU_ASSERT(L.im2col_off >= L.lt_workspace_off + L.lt_workspace_bytes);
                        CU_ASSERT(L.im2col_bytes >= (uint64_t)1906688 * L.batch * pb);
                        CU_ASSERT(L.padded_w_off % A == 0 && L.padded_w_off >= L.im2col_off + L.im2col_bytes);
                        CU_ASSERT(L.padded_w_bytes == (uint64_t)64 * 152 * pb);
                        CU_ASSERT(L.weights_off % A == 0 && L.weights_off >= L.padded_w_off + L.padded_w_bytes);
                        CU_ASSERT_EQUAL(L.weights_off - L.workspace_off, L.workspace_bytes);
                        CU_ASSERT(L.activations_off % A == 0 &&
                                  L.activations_off >= L.weights_off + L.weights_bytes);
                        CU_ASSERT(L.activations_off + L.activation_bytes <= L.arena_bytes);
                        for (int t = 0; t < m->n_tensors; t++) {
                                uint64_t off = (uint64_t)plan.max_batch * plan.tensor_offset[t] * pb;
                                uint64_t end = off + (uint64_t)plan.max_batch * m->tensors[t].elems * pb;

                                CU_ASSERT((L.activations_off + off) % A == 0);
                                CU_ASSERT(end <= L.activation_bytes);
                        }
                }
        }
        model_free(m);
}

static void test_engine_cuda_plan_buckets(void) {
        int b[ENGINE_CUDA_MAX_BUCKETS], n;

        n = engine_cuda_buckets(1, b);
        CU_ASSERT_EQUAL(n, 1);
        CU_ASSERT_EQUAL(b[0], 1);
        n = engine_cuda_buckets(256, b);
        CU_ASSERT_EQUAL(n, 9);
        CU_ASSERT_EQUAL(b[7], 128);
        CU_ASSERT_EQUAL(b[8], 256);
        n = engine_cuda_buckets(100, b);
        CU_ASSERT_EQUAL(n, 8);          /* 1 2 4 8 16 32 64 100 */
        CU_ASSERT_EQUAL(b[6], 64);
        CU_ASSERT_EQUAL(b[7], 100);
        CU_ASSERT_EQUAL(b[engine_cuda_bucket_index(b, n, 1)], 1);
        CU_ASSERT_EQUAL(b[engine_cuda_bucket_index(b, n, 3)], 4);
        CU_ASSERT_EQUAL(b[engine_cuda_bucket_index(b, n, 64)], 64);
        CU_ASSERT_EQUAL(b[engine_cuda_bucket_index(b, n, 65)], 100);
        CU_ASSERT_EQUAL(b[engine_cuda_bucket_index(b, n, 100)], 100);
        CU_ASSERT_EQUAL(engine_cuda_bucket_index(b, n, 101), -1);
        CU_ASSERT_EQUAL(engine_cuda_buckets(0, b), -EINVAL);
        n = engine_cuda_buckets(1 << 30, b);
        CU_ASSERT(n >= 1 && n <= ENGINE_CUDA_MAX_BUCKETS && b[n - 1] == 1 << 30);
}

static void test_engine_cuda_plan_rejects_bad_requests(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_engine_terms_t t;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        cuda_request(&req, PRECISION_FP16, 11 * GiB, 8 * GiB, 256);
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 0, &t), -EINVAL);
        req.top_k = 0;
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 1, &t), -EINVAL);
        req.top_k = ENGINE_TOPK_MAX + 1;
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 1, &t), -EINVAL);
        req.top_k = ENGINE_TOPK_MAX;
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 1, &t), 0);
        req.precision = PRECISION_AUTO;
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 1, &t), -EINVAL);
        req.precision = PRECISION_FP16;
        req.pipeline_depth = 0;
        CU_ASSERT_EQUAL(engine_cuda_plan_terms(m, &req, 1, &t), -EINVAL);
        model_free(m);
}

/* Without a usable device (CI, this build machine): the probe says 0 with a
 * reason, and opening the CUDA engine fails with -EIO carrying CUDA's
 * message (or -ENODEV from the stub of a build without nvcc), leaving the
 * model's weights for a CPU fallback. On a machine with a GPU only the
 * probe's other side is checked; opening for real is tools/gpu-check's. */
static void test_engine_cuda_plan_no_device_errors(void) {
        char why[256] = "";
        uint64_t total = 123;
        model_t *m = NULL;
        engine_t e;
        errbuf_t err = { "" };
        int n, r;

        n = engine_cuda_probe(0, &total, why, sizeof(why));
        CU_ASSERT(n >= 0);
        if (n > 0) {
                CU_ASSERT(total > 0);
                return;
        }
        CU_ASSERT_EQUAL(total, 0);
        CU_ASSERT(strlen(why) > 0);
        if (!engine_cuda_built) {
                CU_ASSERT_STRING_EQUAL(why, "this build of inferd has no CUDA engine (nvcc was not found at build time)");
        }

        CU_ASSERT_EQUAL_FATAL(model_random(&m, 1), 0);
        memset(&e, 0, sizeof(e));
        cuda_request(&e.request, PRECISION_FP16, 11 * GiB, 8 * GiB, 8);
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &e.request, &e.plan, NULL), 0);
        e.ops = &engine_cuda_ops;
        e.model = m;
        e.device = 0;
        r = engine_cuda_ops.open(&e, &err);
        CU_ASSERT_EQUAL(r, engine_cuda_built ? -EIO : -ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, engine_cuda_built ? "selecting CUDA device 0: " : "no CUDA engine"));
        CU_ASSERT_PTR_NULL(e.impl);
        CU_ASSERT_PTR_NOT_NULL(m->weights);
        model_free(m);
}

/* Sets or (value NULL) unsets an environment variable. */
static void env_put(const char *name, const char *value) {
        if (value) {
                CU_ASSERT_EQUAL(setenv(name, value, 1), 0);
        } else {
                CU_ASSERT_EQUAL(unsetenv(name), 0);
        }
}

/* The CUDA engine's switches (engine_cuda_options_t): the environment sets
 * them only through engine_cuda_options_from_env and only with their
 * documented values, never through engine_options_init (the caller
 * decides), and engine_open hands the caller's switches to the engine. */
static void test_engine_cuda_plan_options_from_env(void) {
        static const struct {
                const char *residual, *bias;
                bool residual_kernel, bias_precision;
        } cases[] = {
                { "kernel", "precision", true, true },  { "fused", "fp32", false, false },
                { "kernel", NULL, true, false },        { NULL, "precision", false, true },
                { "", "", false, false },               { "KERNEL", "precision ", false, false },
                { NULL, NULL, false, false },
        };
        char *old_residual = getenv("INFERD_CUDA_RESIDUAL"), *old_bias = getenv("INFERD_CUDA_BIAS");
        engine_cuda_options_t c;
        engine_options_t o;
        engine_t *e = NULL;
        model_t *m = NULL;
        errbuf_t err = { "" };

        old_residual = old_residual ? strdup(old_residual) : NULL;
        old_bias = old_bias ? strdup(old_bias) : NULL;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                env_put("INFERD_CUDA_RESIDUAL", cases[i].residual);
                env_put("INFERD_CUDA_BIAS", cases[i].bias);
                c.residual_kernel = !cases[i].residual_kernel;
                c.bias_precision = !cases[i].bias_precision;
                engine_cuda_options_from_env(&c);
                CU_ASSERT_EQUAL(c.residual_kernel, cases[i].residual_kernel);
                CU_ASSERT_EQUAL(c.bias_precision, cases[i].bias_precision);
                engine_options_init(&o);
                CU_ASSERT(!o.cuda.residual_kernel && !o.cuda.bias_precision);
        }

        /* engine_open keeps the caller's switches, whatever the
         * environment says (it is set the other way round here). */
        env_put("INFERD_CUDA_RESIDUAL", "kernel");
        env_put("INFERD_CUDA_BIAS", NULL);
        CU_ASSERT_EQUAL_FATAL(model_random(&m, 5), 0);
        for (int i = 0; i < 2; i++) {
                engine_options_init(&o);
                o.backend = BACKEND_CPU;
                o.max_batch = 1;
                o.cuda.residual_kernel = i == 1;
                o.cuda.bias_precision = i == 0;
                o.cpu_keep_conv_weights = true;         /* m opens twice */
                CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, NULL, 0, &err), 0);
                CU_ASSERT_EQUAL(e->cuda.residual_kernel, i == 1);
                CU_ASSERT_EQUAL(e->cuda.bias_precision, i == 0);
                engine_free(e);
                e = NULL;
        }
        model_free(m);
        env_put("INFERD_CUDA_RESIDUAL", old_residual);
        env_put("INFERD_CUDA_BIAS", old_bias);
        free(old_residual);
        free(old_bias);
}

int test_engine_cuda_plan_register(void) {
        static CU_TestInfo tests[] = {
                { "im2col_by_hand", test_engine_cuda_plan_im2col_by_hand },
                { "terms_fp16_batch1_by_hand", test_engine_cuda_plan_terms_fp16_batch1_by_hand },
                { "terms_fp32_batch8_by_hand", test_engine_cuda_plan_terms_fp32_batch8_by_hand },
                { "terms_monotonic_in_batch", test_engine_cuda_plan_terms_monotonic_in_batch },
                { "staging_scales_with_depth", test_engine_cuda_plan_staging_scales_with_depth },
                { "measured_context_overrides", test_engine_cuda_plan_measured_context_overrides },
                { "fits_11gib_at_70_percent", test_engine_cuda_plan_fits_11gib_at_70_percent },
                { "refuses_a_budget_below_the_context", test_engine_cuda_plan_refuses_a_budget_below_the_context },
                { "layout_matches_plan", test_engine_cuda_plan_layout_matches_plan },
                { "buckets", test_engine_cuda_plan_buckets },
                { "rejects_bad_requests", test_engine_cuda_plan_rejects_bad_requests },
                { "no_device_errors", test_engine_cuda_plan_no_device_errors },
                { "options_from_env", test_engine_cuda_plan_options_from_env },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("engine_cuda_plan", tests);
}

/* Unit tests of plan_: the weights counted once, the
 * batch search against the budget, and the refusal that names its term.
 * The numbers are derived by hand in the comments. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "core/plan.h"
#include "core/record.h"
#include "unit.h"

static void plan_request_cpu(plan_request_t *req, uint64_t budget) {
        memset(req, 0, sizeof(*req));
        req->backend = BACKEND_CPU;
        req->precision = PRECISION_FP32;
        req->device_memory_bytes = (uint64_t)64 << 30;
        req->budget_bytes = budget;
        req->host_budget_bytes = (uint64_t)64 << 30;
        req->pipeline_depth = 2;
        req->record_bytes = RECORD_MAX_BYTES;
        req->max_batch = 4096;
        req->top_k = 5;
        req->terms = engine_cpu_plan_terms;
}

/* The weights are counted once, whatever the CPU. The model's folded fp32
 * blocks do not depend on the batch. oneDNN's reordered copy of the convs'
 * weights takes the layout that the plan's largest batch bucket chooses,
 * and every smaller bucket runs on that one copy. Which layout that is
 * depends on the CPU and the batch: on a Zen 5 batch 1 and batch 64 choose
 * the same; on an Intel Xeon with AMX they do not (issue 42), so the two
 * plans' copies may differ by the layouts' padding, and each is one copy:
 * the 7 buckets of batch 64 (1, 2, 4, ... 64) charged one each would be 7x. */
static void test_plan_counts_weights_once(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t p1, p64, pk;
        uint64_t raw, conv;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)64 << 30);
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 1, &p1), 0);
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 64, &p64), 0);
        /* 25,502,912 weights + 27,560 biases, 4 bytes each. oneDNN's
         * reordered copy holds the 53 convs' weights (all but the fc's
         * 2,048,000), padded to its blocks by at most a few percent (conv1's
         * 3 input channels padded to 16 would add 0.2%); the model keeps
         * only the fc's weights and the biases, with < 256 bytes of
         * alignment for each of their 55 blocks (issue 41: one weight set,
         * the plan within 5% of it). */
        raw = (uint64_t)(25502912 + 27560) * 4;
        conv = (uint64_t)(25502912 - 2048000) * 4;
        CU_ASSERT(p1.engine.weights_copy_bytes >= conv);
        CU_ASSERT(p1.engine.weights_copy_bytes < conv / 100 * 105);
        CU_ASSERT(p64.engine.weights_copy_bytes >= conv);
        CU_ASSERT(p64.engine.weights_copy_bytes < conv / 100 * 105);
        CU_ASSERT(p1.weights_bytes - p1.engine.weights_copy_bytes >= raw - conv);
        CU_ASSERT(p1.weights_bytes - p1.engine.weights_copy_bytes < raw - conv + 55 * 256);
        CU_ASSERT(p1.weights_bytes >= raw && p1.weights_bytes < raw / 100 * 105);
        CU_ASSERT_EQUAL(p1.weights_bytes - p1.engine.weights_copy_bytes,
                        p64.weights_bytes - p64.engine.weights_copy_bytes);
        /* A test that opens a second engine on the model keeps the convs'
         * folded blocks too, and the plan charges them. */
        req.cpu_keep_conv_weights = true;
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 1, &pk), 0);
        CU_ASSERT_EQUAL(pk.weights_bytes - pk.engine.weights_copy_bytes,
                        plan_cpu_model_weight_bytes(m, true));
        CU_ASSERT(pk.weights_bytes - pk.engine.weights_copy_bytes >= raw);
        CU_ASSERT(pk.weights_bytes - pk.engine.weights_copy_bytes < raw + 108 * 256);
        req.cpu_keep_conv_weights = false;
        /* The reference (cpu_ops' convolutions, tests only) keeps no copy. */
        req.cpu_reference = true;
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 1, &p1), 0);
        CU_ASSERT_EQUAL(p1.engine.weights_copy_bytes, 0);
        CU_ASSERT(p1.weights_bytes >= raw && p1.weights_bytes < raw + 108 * 256);
        CU_ASSERT_EQUAL(p64.activation_bytes, 64 * p64.activation_bytes_per_sample);
        CU_ASSERT_EQUAL(p64.total_bytes, p64.engine.context_bytes + p64.weights_bytes + p64.activation_bytes +
                                         p64.workspace_bytes);
        /* fp16 halves the weights but not the fp32 biases. */
        CU_ASSERT(plan_weight_layout(m, PRECISION_FP16, NULL, NULL) < p1.weights_bytes / 2 + 27560 * 4 + 108 * 256);
        model_free(m);
}

static void test_plan_cpu_pinned_bytes_by_hand(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)64 << 30);
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 8, &p), 0);
        /* Per slot: the packed input, room for 7 rgb8 records and one of
         * either format, 7 * 150,528 + 602,112 = 1,655,808, then 8 * 4,000
         * logits + 8 * 5 * 8 top-k = 1,655,808 + 32,000 + 320 = 1,688,128
         * (each a multiple of 64); 2 slots. (A fixed 602,112-byte place per
         * record took 4,849,216 a slot.) */
        CU_ASSERT_EQUAL(p.pinned_host_bytes, 2 * 1688128);
        model_free(m);
}

static void test_plan_batch_is_monotonic_in_budget(void) {
        model_t *m = NULL;
        plan_request_t req;
        int last = 0;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        for (uint64_t mib = 210; mib <= 8192; mib += 397) {
                plan_t p, next;

                plan_request_cpu(&req, mib << 20);
                CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, NULL), 0);
                CU_ASSERT(p.max_batch >= last);
                CU_ASSERT(p.total_bytes <= req.budget_bytes);
                /* The largest that fits: one more sample would not. */
                CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, p.max_batch + 1, &next), 0);
                CU_ASSERT(next.total_bytes > req.budget_bytes);
                last = p.max_batch;
        }
        CU_ASSERT(last > 500);
        model_free(m);
}

static void test_plan_caps_at_max_batch(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)60 << 30);
        req.max_batch = 256;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, NULL), 0);
        CU_ASSERT_EQUAL(p.max_batch, 256);
        CU_ASSERT_EQUAL(p.limit, PLAN_LIMIT_MAX_BATCH);
        /* The CPU engine runs im2col in bounded chunks: no operand cap. */
        CU_ASSERT_EQUAL(p.operand_batch_cap, 0);
        model_free(m);
}

/* The CUDA engine's largest GEMM operand is conv1's im2col matrix: 7x7
 * stride 2 pad 3 on (224, 224, 3) gives 112 * 112 = 12,544 rows of
 * 7 * 7 * 3 = 147 columns, padded to 152 (a multiple of 8):
 * 12,544 * 152 = 1,906,688 elements a sample. Every other operand is
 * smaller (layer1's 3x3 im2col 56 * 56 * 576 = 1,806,336; conv1's output
 * 12,544 * 64 = 802,816). 2^31 = 2,147,483,648:
 *   1,126 * 1,906,688 = 2,146,930,688 < 2^31,
 *   1,127 * 1,906,688 = 2,148,837,376 >= 2^31,
 * so the first batch whose operand reaches 2^31 is 1,127, and the cap 1,126. */
static void test_plan_caps_below_gemm_operand_limit(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;
        char *text = NULL;
        size_t len = 0;
        FILE *f;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        memset(&req, 0, sizeof(req));
        req.backend = BACKEND_CUDA;
        req.precision = PRECISION_FP16;
        req.device_memory_bytes = (uint64_t)1 << 40;
        req.budget_bytes = (uint64_t)1 << 40;           /* the budget is no limit here */
        req.host_budget_bytes = (uint64_t)1 << 40;
        req.pipeline_depth = 2;
        req.record_bytes = RECORD_MAX_BYTES;
        req.max_batch = 4096;
        req.top_k = 5;
        req.terms = engine_cuda_plan_terms;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, NULL), 0);
        CU_ASSERT_EQUAL(p.engine.gemm_operand_elems_per_sample, (uint64_t)1906688);
        CU_ASSERT_EQUAL(p.operand_batch_cap, 1126);
        CU_ASSERT_EQUAL(p.max_batch, 1126);
        CU_ASSERT_EQUAL(p.limit, PLAN_LIMIT_OPERAND);
        /* The plan says so, in text and in JSON. */
        f = open_memstream(&text, &len);
        CU_ASSERT_EQUAL_FATAL(plan_write_text(&p, f), 0);
        CU_ASSERT_EQUAL(plan_write_json(&p, f), 0);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "batch capped at 1126"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"batch_limit\":\"operand\",\"operand_batch_cap\":1126"));
        free(text);
        /* At or below the cap, max_batch decides, and the plan says that. */
        req.max_batch = 1126;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, NULL), 0);
        CU_ASSERT_EQUAL(p.max_batch, 1126);
        CU_ASSERT_EQUAL(p.limit, PLAN_LIMIT_MAX_BATCH);
        /* A budget below the cap's needs: the budget decides. */
        req.max_batch = 4096;
        req.budget_bytes = (uint64_t)8 << 30;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, NULL), 0);
        CU_ASSERT(p.max_batch < 1126);
        CU_ASSERT_EQUAL(p.limit, PLAN_LIMIT_BUDGET);
        model_free(m);
}

static void test_plan_refuses_and_names_the_term(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        /* 50 MiB cannot hold the 97 MiB of fp32 weights. */
        plan_request_cpu(&req, (uint64_t)50 << 20);
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the weights"));
        /* oneDNN's copy of the convs and the model's fc and biases are 97
         * MiB: 90 MiB cannot hold them. */
        plan_request_cpu(&req, (uint64_t)90 << 20);
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the weights"));
        /* On the reference, 100 MiB holds the 97.4 MiB of weights but not one
         * sample's im2col workspace (112 * 112 * 147 floats for conv1 = 7.0
         * MiB); oneDNN's scratchpad is a few KiB. */
        plan_request_cpu(&req, (uint64_t)100 << 20);
        req.cpu_reference = true;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the workspace"));
        /* A host budget below two slots of one record. */
        plan_request_cpu(&req, (uint64_t)64 << 30);
        req.host_budget_bytes = 1 << 20;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "host budget"));
        req.host_budget_bytes = (uint64_t)1 << 30;
        req.backend = BACKEND_CUDA;
        req.precision = PRECISION_FP16;
        req.terms = engine_cuda_plan_terms;
        req.budget_bytes = 100 << 20;         /* below the CUDA context, which counts first */
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the CUDA context"));
        model_free(m);
}

static void test_plan_rejects_bad_requests(void) {
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.pipeline_depth = 1;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, NULL), -EINVAL);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.precision = PRECISION_FP16;        /* the CPU engine is fp32 only */
        CU_ASSERT(plan_make(m, &req, &p, NULL) < 0);
        model_free(m);
}

static void test_plan_incident_card(void) {
        engine_options_t o;
        model_t *m = NULL;
        plan_t p;

        /* The 11 GiB card of the incident, 70% budget, planned without a GPU. */
        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        engine_options_init(&o);
        o.device_memory_bytes = (uint64_t)11 << 30;
        o.device_budget = "70%";
        CU_ASSERT_EQUAL_FATAL(engine_plan(m, &o, &p, NULL, 0, NULL), 0);
        CU_ASSERT_EQUAL(p.backend, BACKEND_CUDA);
        CU_ASSERT_EQUAL(p.budget_bytes, (uint64_t)((double)((uint64_t)11 << 30) * 0.70));
        CU_ASSERT(p.total_bytes <= p.budget_bytes);
        CU_ASSERT(p.max_batch >= 1 && p.max_batch <= 256);
        model_free(m);
}

/* The decode contexts: by hand for the default 50,000,000 pixels. The
 * shorter side is at most S = 7071 (7071^2 = 49,999,041), so a scale of at
 * most 7071 / 255 = 27.7: 225 * 7071 / 255 = 6239.1 rows, 6240 + 3 = 6243
 * kept, and 2 * 28 + 3 = 59 taps. They are host bytes outside both budgets,
 * so they change neither the batch nor the device total. */
static void test_plan_decode_buffers(void) {
        plan_decode_terms_t t;
        model_t *m = NULL;
        plan_request_t req;
        plan_t without, with;

        CU_ASSERT_EQUAL(plan_decode_terms(50000000, 0, &t), 0);
        CU_ASSERT_EQUAL(t.pixel_bytes, 200000000);
        CU_ASSERT_EQUAL(t.resize_rows, 6243);
        CU_ASSERT_EQUAL(t.resize_taps, 59);
        CU_ASSERT_EQUAL(t.resize_bytes, 224ULL * 6243 * 3 + 2 * 224ULL * (59 * 4 + 8));
        CU_ASSERT_EQUAL(t.buffer_bytes, t.pixel_bytes + t.resize_bytes);
        CU_ASSERT(t.library_bytes >= 8ULL * 50000000);
        CU_ASSERT_EQUAL(plan_decode_terms(0, 0, &t), -EINVAL);
        /* Small images: upscaling keeps 228 rows and 5 taps at least. */
        CU_ASSERT_EQUAL(plan_decode_terms(1000, 7, &t), 0);
        CU_ASSERT(t.resize_rows == 228 && t.resize_taps == 5 && t.input_bytes == 7);

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        CU_ASSERT_EQUAL(plan_make(m, &req, &without, NULL), 0);
        req.decode_threads = 3;
        req.decode_max_pixels = 50000000;
        CU_ASSERT_EQUAL(plan_make(m, &req, &with, NULL), 0);
        CU_ASSERT_EQUAL(without.decode_host_bytes, 0);
        CU_ASSERT_EQUAL(with.decode_threads, 3);
        CU_ASSERT_EQUAL(with.decode_host_bytes, 3 * (with.decode.buffer_bytes + with.decode.library_bytes));
        CU_ASSERT_EQUAL(with.max_batch, without.max_batch);
        CU_ASSERT_EQUAL(with.total_bytes, without.total_bytes);
        CU_ASSERT_EQUAL(with.decode_staging_bytes, 0);

        /* The daemon's staging: a decoded RGB8 image per slot position,
         * charged to the host budget beside the contexts; a swap's smaller
         * batch still charges what was made at start. */
        req.decode_staged = true;
        CU_ASSERT_EQUAL(plan_make(m, &req, &with, NULL), 0);
        CU_ASSERT_EQUAL(with.decode_staging_bytes,
                        (uint64_t)req.pipeline_depth * (uint64_t)with.max_batch * 224 * 224 * 3);
        CU_ASSERT_EQUAL(with.decode_host_bytes, 3 * (with.decode.buffer_bytes + with.decode.library_bytes) +
                                                        with.decode_staging_bytes);
        CU_ASSERT_EQUAL(with.pinned_host_bytes + with.decode_host_bytes + with.host_rest_bytes,
                        with.host_budget_bytes);
        req.held_decode_staging_bytes = with.decode_staging_bytes;
        req.max_batch = with.max_batch / 2;
        CU_ASSERT_EQUAL(plan_make(m, &req, &without, NULL), 0);
        CU_ASSERT_EQUAL(without.max_batch, with.max_batch / 2);
        CU_ASSERT_EQUAL(without.decode_staging_bytes, with.decode_staging_bytes);
        model_free(m);
}

/* plan_decode_fit by hand, with contexts of 100 bytes and a reserve of 10:
 * of 1000 bytes left, 990 are usable, so 9 explicit contexts fit and 10 do
 * not; automatic ones take at most half of the 1000 (5), fewer when the
 * cores say so, and 1 whenever 1 fits beside the reserve. */
static void test_plan_decode_fit_rule(void) {
        plan_decode_limit_t l = PLAN_DECODE_LIMIT_NONE;
        int n = -1;

        CU_ASSERT_EQUAL(plan_decode_fit(1000, 10, 9, 15, 100, &n, &l), 0);
        CU_ASSERT(n == 9 && l == PLAN_DECODE_LIMIT_THREADS);
        CU_ASSERT_EQUAL(plan_decode_fit(1000, 10, 10, 15, 100, &n, &l), -ENOSPC);
        CU_ASSERT_EQUAL(plan_decode_fit(1000, 10, 0, 15, 100, &n, &l), 0);
        CU_ASSERT(n == 5 && l == PLAN_DECODE_LIMIT_BUDGET);
        CU_ASSERT_EQUAL(plan_decode_fit(1000, 10, 0, 3, 100, &n, &l), 0);
        CU_ASSERT(n == 3 && l == PLAN_DECODE_LIMIT_CORES);
        CU_ASSERT_EQUAL(plan_decode_fit(1000, 10, 0, 5, 100, &n, &l), 0);
        CU_ASSERT(n == 5 && l == PLAN_DECODE_LIMIT_CORES);
        /* Half of 150 holds none; one still fits beside the reserve. */
        CU_ASSERT_EQUAL(plan_decode_fit(150, 10, 0, 15, 100, &n, &l), 0);
        CU_ASSERT(n == 1 && l == PLAN_DECODE_LIMIT_BUDGET);
        CU_ASSERT_EQUAL(plan_decode_fit(109, 10, 0, 15, 100, &n, &l), -ENOSPC);
        CU_ASSERT_EQUAL(plan_decode_fit(110, 10, 0, 15, 100, &n, &l), 0);
        CU_ASSERT_EQUAL(plan_decode_fit(5, 10, 1, 15, 100, &n, &l), -ENOSPC);
        /* A reserve larger than half: automatic contexts stop at the reserve. */
        CU_ASSERT_EQUAL(plan_decode_fit(1000, 700, 0, 15, 100, &n, &l), 0);
        CU_ASSERT(n == 3 && l == PLAN_DECODE_LIMIT_BUDGET);
}

/* The rule inside plan_make, for the case the issue names: 15 automatic
 * threads (16 cores) at the default 50 MP and 2 GiB host budget. Each
 * context is ~644 MiB, so the budget's half (less the pinned buffers)
 * holds one; pinned + decode + what is left for librdkafka is the budget
 * exactly, and librdkafka keeps at least its reserve. Three explicit threads
 * fit; four do not, and the refusal names the keys. */
static void test_plan_decode_charged_to_host_budget(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;
        uint64_t per;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.max_batch = 8;
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.host_reserve_bytes = (uint64_t)10 << 20;
        req.decode_threads_auto = 15;
        req.decode_max_pixels = 50000000;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        per = p.decode.buffer_bytes + p.decode.library_bytes;
        CU_ASSERT(per > (uint64_t)600 << 20 && per < (uint64_t)700 << 20);
        CU_ASSERT_EQUAL(p.decode_threads, 1);
        CU_ASSERT_EQUAL(p.decode_limit, PLAN_DECODE_LIMIT_BUDGET);
        CU_ASSERT_EQUAL(p.decode_host_bytes, per);
        CU_ASSERT_EQUAL(p.pinned_host_bytes + p.decode_host_bytes + p.host_rest_bytes, p.host_budget_bytes);
        CU_ASSERT(p.host_rest_bytes >= req.host_reserve_bytes);
        CU_ASSERT_EQUAL(p.max_batch, 8);

        /* 8 GiB: half of it, less the pinned buffers, holds 6. */
        req.host_budget_bytes = (uint64_t)8 << 30;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.decode_threads, (int)((req.host_budget_bytes - p.pinned_host_bytes) / 2 / per));
        CU_ASSERT_EQUAL(p.decode_threads, 6);
        /* 16 GiB: 13 of the 15; with 3 cores allowed, the cores decide. */
        req.host_budget_bytes = (uint64_t)16 << 30;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT(p.decode_threads == 13 && p.decode_limit == PLAN_DECODE_LIMIT_BUDGET);
        req.decode_threads_auto = 3;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT(p.decode_threads == 3 && p.decode_limit == PLAN_DECODE_LIMIT_CORES);

        req.host_budget_bytes = (uint64_t)2 << 30;
        req.decode_threads = 3;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT(p.decode_threads == 3 && p.decode_limit == PLAN_DECODE_LIMIT_THREADS);
        CU_ASSERT(p.pinned_host_bytes + p.decode_host_bytes + req.host_reserve_bytes <= p.host_budget_bytes);
        req.decode_threads = 4;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] threads = 4"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[memory] host_budget (2.0 GiB)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] max_pixels = 50000000"));
        /* Automatic, but not even one context fits: refused as well. */
        req.decode_threads = 0;
        req.host_budget_bytes = (uint64_t)600 << 20;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "1 decode thread of"));
        model_free(m);
}

/* A running pool's contexts (a model swap's plan): charged exactly as an
 * explicit count is (3 of 50 MP fit 2 GiB, 4 do not, as above), but named
 * as the running ones in the plan ("running") and in the refusal, which
 * asks for a larger budget or a restart, not for a [decode] key that a
 * reload cannot apply. */
static void test_plan_decode_running_pool(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t p;
        char *text = NULL;
        size_t len = 0;
        FILE *f;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.max_batch = 8;
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.host_reserve_bytes = (uint64_t)10 << 20;
        req.decode_threads = 3;
        req.decode_max_pixels = 50000000;
        req.decode_running = true;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT(p.decode_threads == 3 && p.decode_limit == PLAN_DECODE_LIMIT_RUNNING);
        CU_ASSERT_EQUAL(p.decode_host_bytes, 3 * (p.decode.buffer_bytes + p.decode.library_bytes));
        CU_ASSERT_STRING_EQUAL(plan_decode_limit_name(p.decode_limit), "running");
        f = open_memstream(&text, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        plan_write_json(&p, f);
        plan_write_text(&p, f);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"decode_threads_limit\":\"running\""));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "3 contexts for images up to 50000000 pixels (the running pool's"));
        free(text);

        req.decode_threads = 4;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the 4 decode threads running since start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[memory] host_budget (2.0 GiB)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] max_pixels = 50000000 at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "raise [memory] host_budget, or restart inferd"));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "[decode] threads = 4"));
        model_free(m);
}

/* A model swap's plan on the CUDA engine's terms: the arena and the pinned
 * staging of the start (batch 64) stay allocated, so a swap to batch 8
 * carves less of both but is charged all of it (total_bytes: the context,
 * batch 8's graphs, which are captured again, and the whole arena;
 * pinned_host_bytes: the whole staging). A device budget that batch 1's
 * carve would fit but the held arena does not, and a host budget below the
 * held staging, are refused with sentences that name what is held. */
static void test_plan_swap_charges_held_buffers(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t start, p, one;
        uint64_t arena, pinned;
        char *text = NULL;
        size_t len = 0;
        FILE *f;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        memset(&req, 0, sizeof(req));
        req.backend = BACKEND_CUDA;
        req.precision = PRECISION_FP16;
        req.device_memory_bytes = (uint64_t)11 << 30;
        req.budget_bytes = (uint64_t)8 << 30;
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.host_reserve_bytes = (uint64_t)10 << 20;
        req.pipeline_depth = 2;
        req.record_bytes = RECORD_MAX_BYTES;
        req.max_batch = 64;
        req.top_k = 5;
        req.terms = engine_cuda_plan_terms;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &start, &err), 0);
        CU_ASSERT_EQUAL_FATAL(start.max_batch, 64);
        CU_ASSERT(start.engine.weights_in_arena);
        CU_ASSERT_EQUAL(start.arena_kept_bytes, 0);
        CU_ASSERT_EQUAL(start.held_arena_bytes, 0);
        arena = plan_arena_bytes(&start);
        pinned = start.pinned_host_bytes;
        CU_ASSERT_EQUAL(start.total_bytes, start.engine.context_bytes + start.engine.graph_bytes + arena);

        /* The swap, to batch 8. */
        req.max_batch = 8;
        req.held_arena_bytes = arena;
        req.held_pinned_host_bytes = pinned;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 8);
        CU_ASSERT(plan_arena_bytes(&p) < arena);
        CU_ASSERT_EQUAL(p.arena_kept_bytes, arena - plan_arena_bytes(&p));
        CU_ASSERT_EQUAL(p.total_bytes, p.engine.context_bytes + p.engine.graph_bytes + arena);
        CU_ASSERT(p.engine.pinned_host_bytes < pinned / 4);
        CU_ASSERT_EQUAL(p.pinned_host_bytes, pinned);
        CU_ASSERT_EQUAL(p.host_rest_bytes, req.host_budget_bytes - pinned);
        f = open_memstream(&text, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        plan_write_json(&p, f);
        plan_write_text(&p, f);
        fclose(f);
        {
                char want[160];

                snprintf(want, sizeof(want), "\"pinned_host_bytes\":%llu,", (unsigned long long)pinned);
                CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
                snprintf(want, sizeof(want), "\"held_arena_bytes\":%llu,\"arena_kept_bytes\":%llu,",
                         (unsigned long long)arena, (unsigned long long)p.arena_kept_bytes);
                CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
                snprintf(want, sizeof(want), "\"carved_pinned_host_bytes\":%llu}",
                         (unsigned long long)p.engine.pinned_host_bytes);
                CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
        }
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "arena kept from start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "allocated at start and kept by a model swap in place"));
        free(text);

        /* Batch 1's carve fits this budget; the arena held does not. */
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 1, &one), 0);
        CU_ASSERT(one.total_bytes - one.arena_kept_bytes < one.total_bytes - 1);
        req.budget_bytes = one.total_bytes - 1;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "arena allocated at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "raise [memory] gpu_budget, or restart inferd"));

        /* The host budget: the held staging and librdkafka's minimum, less
         * one byte; batch 1's carve alone would fit. */
        req.budget_bytes = (uint64_t)8 << 30;
        req.host_budget_bytes = pinned + req.host_reserve_bytes - 1;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "too small for the pinned buffers allocated at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "raise [memory] host_budget, or restart inferd"));
        req.host_budget_bytes = pinned + req.host_reserve_bytes;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 8);
        CU_ASSERT_EQUAL(p.host_rest_bytes, req.host_reserve_bytes);
        model_free(m);
}

/* librdkafka's queue holds the back-pressure hold's records: one full batch
 * per slot without a cap, the cap's rate over the hold with one; the
 * reserve that neither the pinned buffers nor decoding may take covers
 * them, so that a tight host budget lowers the batch instead of the hold
 * overflowing into memory the plan did not count; a hold past the queue's
 * largest size is refused naming the key. */
static void test_plan_kafka_queue_holds_the_hold(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t p, free_plan;
        char *json = NULL;
        size_t json_len = 0;
        FILE *f;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        CU_ASSERT_EQUAL(plan_kafka_hold_records(1000000, 0, 2, 64), 128);
        CU_ASSERT_EQUAL(plan_kafka_hold_records(1000000, 1000, 2, 64), 1000);
        CU_ASSERT_EQUAL(plan_kafka_hold_records(500000, 1001, 2, 64), 501);
        CU_ASSERT_EQUAL(plan_kafka_hold_records(0, 1000, 2, 64), 0);

        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.max_batch = 64;
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.host_reserve_bytes = plan_kafka_min_bytes(1, 1);
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &free_plan, &err), 0);
        CU_ASSERT_EQUAL(free_plan.kafka_hold_records, 0);

        req.kafka_hold_us = 1000000;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 64);
        CU_ASSERT_EQUAL(p.kafka_hold_records, 128);
        CU_ASSERT_EQUAL(p.kafka_hold_bytes, 128 * (uint64_t)RECORD_MAX_BYTES);
        CU_ASSERT(p.kafka_queue_bytes >= p.kafka_hold_bytes);
        CU_ASSERT(p.kafka_queue_bytes + p.kafka_fetch_bytes + p.kafka_producer_bytes <= p.host_rest_bytes);
        CU_ASSERT_EQUAL(p.host_reserve_bytes, p.kafka_hold_bytes + plan_kafka_fetch_min_bytes(1, 1) +
                                                      PLAN_KAFKA_PRODUCER_MIN_BYTES);

        /* A host budget of batch 64's pinned buffers and librdkafka's
         * floors: without the hold batch 64 fits, with it the batch goes
         * down until the queue holds two of its batches beside them. */
        req.host_budget_bytes = free_plan.pinned_host_bytes + plan_kafka_min_bytes(1, 1);
        req.kafka_hold_us = 0;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 64);
        req.kafka_hold_us = 1000000;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT(p.max_batch < 64 && p.max_batch >= 1);
        CU_ASSERT_EQUAL(p.limit, PLAN_LIMIT_BUDGET);
        CU_ASSERT_EQUAL(p.kafka_hold_records, 2 * (uint64_t)p.max_batch);
        CU_ASSERT(p.kafka_queue_bytes >= p.kafka_hold_bytes);
        CU_ASSERT(p.pinned_host_bytes + p.kafka_queue_bytes + p.kafka_fetch_bytes + p.kafka_producer_bytes <=
                  req.host_budget_bytes);

        /* A cap: its second of records. */
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.kafka_hold_rate_per_s = 1000;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.kafka_hold_records, 1000);
        CU_ASSERT(p.kafka_queue_bytes >= 1000 * (uint64_t)RECORD_MAX_BYTES);
        f = open_memstream(&json, &json_len);
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_EQUAL(plan_write_json(&p, f), 0);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"kafka_hold_records\":1000,"));
        free(json);
        json = NULL;
        f = open_memstream(&json, &json_len);
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_EQUAL(plan_write_text(&p, f), 0);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(json, "consumer queue"));
        CU_ASSERT_PTR_NOT_NULL(strstr(json, "1.0 s back-pressure hold, 1000 records of up to 588.0 KiB"));
        free(json);

        /* 5,000 a second: 2.8 GiB, past the queue's 2 GiB. */
        req.kafka_hold_rate_per_s = 5000;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "librdkafka's consumer queue would have to hold 5000 records"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "lower [batching] max_images_per_s"));
        model_free(m);
}

/* The result cache ([cache] entries) is host memory beside the pinned
 * buffers: 48 bytes a record for its key and links, 8 a class of the top-k
 * and 4 a value of the embedding (ResNet-50: 2048). It comes out of what
 * librdkafka gets, a cache that does not fit is refused by name, and a
 * swap's plan charges the cache held since start. */
static void test_plan_cache_charged_to_host_budget(void) {
        errbuf_t err = { "" };
        model_t *m = NULL;
        plan_request_t req;
        plan_t without, p;
        char *json = NULL;
        size_t len = 0;
        FILE *f;

        CU_ASSERT_EQUAL(plan_cache_bytes(0, 5, 2048), 0);
        CU_ASSERT_EQUAL(plan_cache_bytes(1000, 5, 0), 1000 * (48 + 5 * 8));
        CU_ASSERT_EQUAL(plan_cache_bytes(10, 5, 2048), 10 * (48 + 40 + 8192));
        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        plan_request_cpu(&req, (uint64_t)8 << 30);
        req.max_batch = 8;
        req.host_budget_bytes = (uint64_t)2 << 30;
        req.host_reserve_bytes = (uint64_t)10 << 20;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &without, &err), 0);
        CU_ASSERT_EQUAL(without.cache_bytes, 0);
        req.cache_entries = 100000;
        req.embedding = true;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.cache_entries, 100000);
        CU_ASSERT_EQUAL(p.cache_bytes, 100000ULL * (48 + 40 + 8192));
        CU_ASSERT_EQUAL(p.pinned_host_bytes + p.decode_host_bytes + p.cache_bytes + p.host_rest_bytes,
                        p.host_budget_bytes);
        f = open_memstream(&json, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        plan_write_json(&p, f);
        plan_write_text(&p, f);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"cache_entries\":100000,\"cache_bytes\":828000000,"));
        CU_ASSERT_PTR_NOT_NULL(strstr(json, "result cache"));
        free(json);

        /* 300,000 embeddings (2.3 GiB) do not fit 2 GiB: named. */
        req.cache_entries = 300000;
        CU_ASSERT_EQUAL(plan_make(m, &req, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "too small for the result cache ([cache] entries = 300000"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "lower [cache] entries"));

        /* A swap's plan: the cache made at start, whatever the new model's
         * results would take. */
        req.cache_entries = 10;
        req.held_cache_bytes = (uint64_t)1 << 20;
        CU_ASSERT_EQUAL_FATAL(plan_make(m, &req, &p, &err), 0);
        CU_ASSERT_EQUAL(p.cache_bytes, (uint64_t)1 << 20);
        model_free(m);
}

int test_plan_register(void) {
        static CU_TestInfo tests[] = {
                { "counts_weights_once", test_plan_counts_weights_once },
                { "cpu_pinned_bytes_by_hand", test_plan_cpu_pinned_bytes_by_hand },
                { "batch_is_monotonic_in_budget", test_plan_batch_is_monotonic_in_budget },
                { "caps_at_max_batch", test_plan_caps_at_max_batch },
                { "caps_below_gemm_operand_limit", test_plan_caps_below_gemm_operand_limit },
                { "refuses_and_names_the_term", test_plan_refuses_and_names_the_term },
                { "rejects_bad_requests", test_plan_rejects_bad_requests },
                { "incident_card", test_plan_incident_card },
                { "decode_buffers", test_plan_decode_buffers },
                { "decode_fit_rule", test_plan_decode_fit_rule },
                { "decode_charged_to_host_budget", test_plan_decode_charged_to_host_budget },
                { "decode_running_pool", test_plan_decode_running_pool },
                { "swap_charges_held_buffers", test_plan_swap_charges_held_buffers },
                { "kafka_queue_holds_the_hold", test_plan_kafka_queue_holds_the_hold },
                { "cache_charged_to_host_budget", test_plan_cache_charged_to_host_budget },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("plan", tests);
}

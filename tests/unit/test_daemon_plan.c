/* Unit tests of daemon_plan.c, the pure functions of a config: the engine
 * options it gives (daemon_engine_options, and a swap's, which keep the
 * running decode pool), the host budget's check that needs no engine
 * (daemon_check_host_budget, --check-config) and the plan without weights
 * or Kafka (daemon_plan, inferd --plan). Each is called directly on a config
 * built here: no daemon, no broker, no weights file. The swap's plan against
 * a running engine is test_daemon.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/plan.h"
#include "config/cfg.h"
#include "daemon/daemon.h"
#include "daemon/daemon_priv.h"
#include "kafka/kafka.h"
#include "pipeline/pipeline.h"
#include "decode/decode.h"
#include "engine/engine.h"
#include "unit.h"

#define MiB ((uint64_t)1 << 20)

/* A config whose every key that the options read differs from its default,
 * on the CUDA backend: each option carries its key. */
static cfg_t *plan_test_cfg(void) {
        cfg_t *c = NULL;

        if (cfg_new_defaults(&c) < 0)
                return NULL;
        c->engine.backend = BACKEND_CUDA;
        c->engine.device = 1;
        c->engine.threads = 3;
        c->model.precision = PRECISION_BF16;
        snprintf(c->memory.gpu_budget, sizeof(c->memory.gpu_budget), "55%%");
        c->memory.host_budget_bytes = 3 * 1024 * MiB;
        c->memory.max_batch = 48;
        c->service.top_k = 3;
        c->decode.threads = 2;
        c->decode.max_pixels = 1234567;
        c->batching.max_images_per_s = 50;
        snprintf(c->model.weights, sizeof(c->model.weights), "/nonexistent/inferd-unit/w.safetensors");
        return c;
}

static void test_daemon_plan_engine_options_from_config(void) {
        engine_options_t o;
        char host[32];
        cfg_t *c = plan_test_cfg();

        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        memset(&o, 0xa5, sizeof(o));    /* every field is set, none left from before */
        daemon_engine_options(c, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.backend, BACKEND_CUDA);
        CU_ASSERT_EQUAL(o.precision, PRECISION_BF16);
        CU_ASSERT_EQUAL(o.device, 1);
        CU_ASSERT_EQUAL(o.cpu_threads, 3);
        CU_ASSERT_FALSE(o.cpu_reference);       /* tests only, never from a config */
        CU_ASSERT_STRING_EQUAL(o.device_budget, "55%");
        CU_ASSERT_PTR_EQUAL(o.host_budget, host);
        CU_ASSERT_STRING_EQUAL(host, "3221225472");
        CU_ASSERT_EQUAL(o.max_batch, 48);
        CU_ASSERT_EQUAL(o.pipeline_depth, 2);
        CU_ASSERT_EQUAL(o.top_k, 3);
        CU_ASSERT_EQUAL(o.decode_threads, 2);
        CU_ASSERT_EQUAL(o.decode_threads_auto, decode_default_threads());
        CU_ASSERT_EQUAL(o.decode_max_pixels, 1234567);
        CU_ASSERT_FALSE(o.decode_running);
        CU_ASSERT_EQUAL(o.host_reserve_bytes, kafka_limits_min_bytes(c));
        CU_ASSERT_EQUAL(o.kafka_fetch_responses, kafka_fetch_responses(c));
        CU_ASSERT_EQUAL(o.kafka_compression_ratio, c->kafka.max_compression_ratio);
        CU_ASSERT_EQUAL(o.kafka_hold_us, PIPELINE_HOLD_MAX_US);
        CU_ASSERT_EQUAL(o.kafka_hold_rate_per_s, 50);
        CU_ASSERT_EQUAL(o.device_memory_bytes, 0);
        CU_ASSERT_EQUAL(o.decode_input_bytes, 0);

        /* The CPU engine computes in fp32 whatever [model] precision says
         * (AUTO, as for a config that says nothing), except bf16. */
        c->engine.backend = BACKEND_CPU;
        c->model.precision = PRECISION_FP16;
        daemon_engine_options(c, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.backend, BACKEND_CPU);
        CU_ASSERT_EQUAL(o.precision, PRECISION_AUTO);
        c->model.precision = PRECISION_BF16;
        daemon_engine_options(c, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.precision, PRECISION_BF16);
        cfg_free(c);
}

/* A swap keeps the decode pool made at start: its threads and max_pixels,
 * charged as running, whatever next's [decode] keys say; the rest is next's. */
static void test_daemon_plan_swap_options_keep_running_pool(void) {
        engine_options_t o;
        char host[32];
        cfg_t *c = plan_test_cfg();

        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        daemon_swap_engine_options(c, 5, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.decode_threads, 5);
        CU_ASSERT_EQUAL(o.decode_threads_auto, 0);
        CU_ASSERT_EQUAL(o.decode_max_pixels, 4000000);
        CU_ASSERT_TRUE(o.decode_running);
        CU_ASSERT_EQUAL(o.max_batch, 48);
        CU_ASSERT_EQUAL(o.precision, PRECISION_BF16);
        CU_ASSERT_STRING_EQUAL(host, "3221225472");

        /* No pool runs: none planned, and no pixels charged. */
        daemon_swap_engine_options(c, 0, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.decode_threads, 0);
        CU_ASSERT_EQUAL(o.decode_threads_auto, 0);
        CU_ASSERT_EQUAL(o.decode_max_pixels, 0);
        CU_ASSERT_FALSE(o.decode_running);
        cfg_free(c);
}

/* --check-config's host budget: the defaults fit; 8 threads of 4 MP (about
 * 95 MiB each) in 256 MiB do not, and the sentence names the keys and the
 * numbers; a max_pixels of 0 cannot be planned at all. */
static void test_daemon_plan_check_host_budget(void) {
        errbuf_t err = {};
        cfg_t *c = NULL;

        CU_ASSERT_EQUAL_FATAL(cfg_new_defaults(&c), 0);
        CU_ASSERT_EQUAL(daemon_check_host_budget(c, &err), 0);
        CU_ASSERT_STRING_EQUAL(err.msg, "");

        c->memory.host_budget_bytes = 256 * MiB;
        c->decode.threads = 8;
        c->decode.max_pixels = 4000000;
        CU_ASSERT_EQUAL(daemon_check_host_budget(c, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[memory] host_budget (256.0 MiB)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "8 decode threads"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] threads = 8"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] max_pixels = 4000000"));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "pinned buffers"));

        /* Two of them fit the same budget. */
        c->decode.threads = 2;
        err = (errbuf_t){};
        CU_ASSERT_EQUAL(daemon_check_host_budget(c, &err), 0);

        c->decode.max_pixels = 0;
        CU_ASSERT_EQUAL(daemon_check_host_budget(c, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, "[decode] max_pixels = 0 cannot be planned");
        cfg_free(c);
}

/* inferd --plan on the CPU without a weights file: ResNet-50 planned, with
 * the note saying so; the config's budget, batch cap, top_k and decode
 * threads are the plan's. A host budget too small for the threads asked is
 * refused with the same sentence as --check-config's. */
static void test_daemon_plan_plans_config(void) {
        char warning[PATH_MAX + 128] = "";
        errbuf_t err = {};
        plan_t p;
        cfg_t *c = plan_test_cfg();

        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        c->engine.backend = BACKEND_CPU;
        c->model.precision = PRECISION_FP16;    /* the default: fp32 on the CPU */
        c->memory.max_batch = 8;
        CU_ASSERT_EQUAL_FATAL(daemon_plan(c, &p, warning, sizeof(warning), &err), 0);
        CU_ASSERT_STRING_EQUAL(p.model, "resnet50");
        CU_ASSERT_EQUAL(p.classes, 1000);
        CU_ASSERT_EQUAL(p.backend, BACKEND_CPU);
        CU_ASSERT_EQUAL(p.precision, PRECISION_FP32);
        CU_ASSERT(p.max_batch >= 1 && p.max_batch <= 8);
        CU_ASSERT_EQUAL(p.pipeline_depth, 2);
        CU_ASSERT_EQUAL(p.top_k, 3);
        CU_ASSERT_EQUAL(p.host_budget_bytes, 3 * 1024 * MiB);
        CU_ASSERT_EQUAL(p.decode_threads, 2);
        CU_ASSERT_EQUAL(p.decode_limit, PLAN_DECODE_LIMIT_THREADS);
        CU_ASSERT_EQUAL(p.decode_max_pixels, 1234567);
        CU_ASSERT_STRING_EQUAL(warning, "[model] weights '/nonexistent/inferd-unit/w.safetensors' cannot be read; "
                                        "planning ResNet-50 with 1000 classes");

        c->memory.host_budget_bytes = 256 * MiB;
        c->decode.threads = 8;
        c->decode.max_pixels = 4000000;
        CU_ASSERT_EQUAL(daemon_plan(c, &p, warning, sizeof(warning), &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] threads = 8"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "raise [memory] host_budget"));
        cfg_free(c);
}

int test_daemon_plan_register(void) {
        static CU_TestInfo tests[] = {
                { "engine_options_from_config", test_daemon_plan_engine_options_from_config },
                { "swap_options_keep_running_pool", test_daemon_plan_swap_options_keep_running_pool },
                { "check_host_budget", test_daemon_plan_check_host_budget },
                { "plans_config", test_daemon_plan_plans_config },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("daemon_plan", tests);
}

/* Unit tests of the daemon's planning for a model swap in place
 * (daemon_swap_engine_options with engine_swap_plan): the decode pool is
 * made once at start and never resized, so a swap's plan charges the
 * threads that run, with their max_pixels, against the new host budget,
 * whatever the new file's [decode] keys or the automatic rule would make.
 * A CPU engine on a random model stands for the running one; no daemon, no
 * broker. The numbers are derived in the comments. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/model.h"
#include "core/plan.h"
#include "daemon/cfg.h"
#include "daemon/daemon.h"
#include "engine/engine.h"
#include "unit.h"

#define MiB ((uint64_t)1 << 20)

/* A pool of 3 threads of 4 MP (94.9 MiB a context) runs. The new file says
 * threads = 0 and max_pixels = 1000000 (about 60 MiB a context): with
 * host_budget = 320 MiB the automatic rule alone would plan at most 2 of
 * them (half of what the pinned buffers leave, 159 MiB; 1 where the cores
 * allow only 1). The swap's plan charges the 3 running: 3 x 94.9 MiB +
 * pinned + 10 MiB fits 320 MiB. In 200 MiB, where the automatic rule plans
 * 1 context of 1 MP, it is refused, and the sentence names the running
 * threads and the one key that can change without a restart. */
static void test_daemon_swap_plans_running_decode_pool(void) {
        model_t *running = NULL, *next = NULL;
        engine_t *e = NULL;
        engine_options_t o;
        cfg_t *c = NULL;
        plan_t start, p;
        plan_decode_terms_t t;
        errbuf_t err = {};
        char host[32];
        uint64_t per;

        CU_ASSERT_EQUAL_FATAL(model_random(&running, 11), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&next, 12), 0);
        CU_ASSERT_EQUAL_FATAL(cfg_new_defaults(&c), 0);
        c->engine.backend = BACKEND_CPU;
        c->memory.max_batch = 4;
        c->memory.host_budget_bytes = 320 * MiB;
        c->decode.threads = 0;
        c->decode.max_pixels = 1000000;

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.max_batch = 4;
        o.pipeline_depth = 2;
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, running, &o, NULL, 0, &err), 0);

        /* What the file alone would plan: fewer, smaller contexts. */
        CU_ASSERT_EQUAL_FATAL(daemon_plan(c, &start, NULL, 0, &err), 0);
        CU_ASSERT(start.decode_threads >= 1 && start.decode_threads <= 2);
        CU_ASSERT_EQUAL(start.decode_max_pixels, 1000000);

        CU_ASSERT_EQUAL_FATAL(plan_decode_terms(4000000, 0, &t), 0);
        per = t.buffer_bytes + t.library_bytes;
        CU_ASSERT(per > 94 * MiB && per < 96 * MiB);

        daemon_swap_engine_options(c, 3, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(o.decode_threads, 3);
        CU_ASSERT_EQUAL(o.decode_threads_auto, 0);
        CU_ASSERT_EQUAL(o.decode_max_pixels, 4000000);
        CU_ASSERT(o.decode_running);
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &p, &err), 0);
        CU_ASSERT_EQUAL(p.decode_threads, 3);
        CU_ASSERT_EQUAL(p.decode_limit, PLAN_DECODE_LIMIT_RUNNING);
        CU_ASSERT_EQUAL(p.decode_max_pixels, 4000000);
        CU_ASSERT_EQUAL(p.decode_host_bytes, 3 * per);
        CU_ASSERT_EQUAL(p.max_batch, 4);
        CU_ASSERT_EQUAL(p.pinned_host_bytes + p.decode_host_bytes + p.host_rest_bytes, 320 * MiB);
        CU_ASSERT(p.host_rest_bytes >= 10 * MiB);
        CU_ASSERT(start.decode_host_bytes < p.decode_host_bytes);

        /* 200 MiB: refused, naming the running threads; nothing else. */
        c->memory.host_budget_bytes = 200 * MiB;
        daemon_swap_engine_options(c, 3, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(engine_swap_plan(e, next, &o, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[memory] host_budget (200.0 MiB)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the 3 decode threads running since start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[decode] max_pixels = 4000000 at start"));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "lower [decode] threads"));
        CU_ASSERT_EQUAL_FATAL(daemon_plan(c, &start, NULL, 0, &err), 0);
        CU_ASSERT_EQUAL(start.decode_threads, 1);
        CU_ASSERT_EQUAL(start.decode_max_pixels, 1000000);

        /* No pool: nothing to charge. */
        daemon_swap_engine_options(c, 0, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &p, &err), 0);
        CU_ASSERT_EQUAL(p.decode_threads, 0);
        CU_ASSERT_EQUAL(p.decode_host_bytes, 0);

        engine_free(e);
        model_free(running);
        model_free(next);
        cfg_free(c);
}

int test_daemon_register(void) {
        static CU_TestInfo tests[] = {
                { "swap_plans_running_decode_pool", test_daemon_swap_plans_running_decode_pool },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("daemon", tests);
}

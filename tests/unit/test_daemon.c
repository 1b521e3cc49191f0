/* Unit tests of the daemon's planning for a model swap in place
 * (daemon_swap_engine_options with engine_swap_plan): the decode pool is
 * made once at start and never resized, so a swap's plan charges the
 * threads that run, with their max_pixels, against the new host budget,
 * whatever the new file's [decode] keys or the automatic rule would make;
 * likewise the engine's host staging and arena, allocated at open for the
 * batch of the start and kept. A CPU engine on a random model stands for the running one; no daemon, no
 * broker. The numbers are derived in the comments. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/model.h"
#include "core/plan.h"
#include "core/record.h"
#include "config/cfg.h"
#include "daemon/daemon.h"
#include "kafka/kafka.h"
#include "engine/engine.h"
#include "unit.h"

#define MiB ((uint64_t)1 << 20)

/* A pool of 3 threads of 4 MP (94.9 MiB a context) runs. The new file says
 * threads = 0 and max_pixels = 1000000 (about 60 MiB a context): with
 * host_budget = 320 MiB the automatic rule alone would plan at most 2 of
 * them (half of what the pinned buffers leave, 159 MiB; 1 where the cores
 * allow only 1). The swap's plan charges the 3 running: 3 x 94.9 MiB +
 * pinned + librdkafka's 17 MiB fits 320 MiB. In 200 MiB, where the automatic rule plans
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
        /* The pool's contexts, and the pipeline's staging: an RGB8 image
         * per slot position. */
        CU_ASSERT_EQUAL(p.decode_staging_bytes, 2 * 4 * RECORD_RGB8_BYTES);
        CU_ASSERT_EQUAL(p.decode_host_bytes, 3 * per + p.decode_staging_bytes);
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

/* The engine's host staging (the pinned buffers on CUDA; one host block on
 * the CPU) is allocated at open for the batch of the start and kept by a
 * swap, which only carves a smaller batch from it. A running engine of
 * batch 32 holds H bytes of it (10.3 MiB). A new host budget of H + K
 * (librdkafka's minimum, kafka_limits_min_bytes) less 1 MiB would plan a
 * smaller batch carving less than H, but H is what stays allocated:
 * refused, naming the buffers held since start (and the decode thread
 * that runs, when one does). H + K holds them:
 * the plan charges exactly H, at batch 8. A smaller [memory] max_batch
 * carves less and is still charged H. */
static void test_daemon_swap_plans_held_pinned_buffers(void) {
        model_t *running = NULL, *next = NULL;
        engine_t *e = NULL;
        engine_options_t o;
        cfg_t *c = NULL;
        plan_t p;
        plan_decode_terms_t t;
        errbuf_t err = {};
        char host[32];
        uint64_t held, per, kafka_reserve, kmin;

        CU_ASSERT_EQUAL_FATAL(model_random(&running, 21), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&next, 22), 0);
        CU_ASSERT_EQUAL_FATAL(cfg_new_defaults(&c), 0);
        c->engine.backend = BACKEND_CPU;
        c->memory.max_batch = 32;
        c->memory.host_budget_bytes = 2048 * MiB;

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.max_batch = 32;
        o.pipeline_depth = 2;
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, running, &o, NULL, 0, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_max_batch(e), 32);
        held = e->held_pinned_host_bytes;
        CU_ASSERT_EQUAL(held, engine_plan_of(e)->pinned_host_bytes);
        /* 2 slots of room for 31 rgb8 records and a float32 one (5.0 MiB),
         * with their results. */
        CU_ASSERT(held > 10 * MiB && held < 11 * MiB);

        /* H + K - 1 MiB: batch 28 would carve less, but the staging of
         * batch 32 stays allocated. */
        kmin = kafka_limits_min_bytes(c);
        c->memory.host_budget_bytes = held + kmin - 1 * MiB;
        daemon_swap_engine_options(c, 0, 0, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(engine_swap_plan(e, next, &o, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "is too small for the pinned buffers allocated at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "raise [memory] host_budget"));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "decode thread"));

        /* With a decode thread running (4 MP): the sentence counts it too. */
        CU_ASSERT_EQUAL_FATAL(plan_decode_terms(4000000, 0, &t), 0);
        per = t.buffer_bytes + t.library_bytes;
        c->memory.host_budget_bytes = held + per + kmin - 1 * MiB;
        daemon_swap_engine_options(c, 1, 4000000, &o, host, sizeof(host));
        CU_ASSERT_EQUAL(engine_swap_plan(e, next, &o, &p, &err), -ENOSPC);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "is too small for the pinned buffers allocated at start"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the 1 decode thread running since start"));

        /* H + K: librdkafka's floors fit, but not the queue for the
         * back-pressure hold of batch 32 (two batches of float32 records):
         * a smaller batch, whose queue fits. */
        c->memory.host_budget_bytes = held + kmin;
        daemon_swap_engine_options(c, 0, 0, &o, host, sizeof(host));
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &p, &err), 0);
        CU_ASSERT(p.max_batch < 32);
        CU_ASSERT(p.kafka_queue_bytes >= p.kafka_hold_bytes);

        /* H + that queue and the other floors: swapped at batch 32, charged
         * exactly H. */
        kafka_reserve = 64 * (uint64_t)RECORD_MAX_BYTES + kmin - PLAN_KAFKA_QUEUE_MIN_BYTES;
        c->memory.host_budget_bytes = held + kafka_reserve;
        daemon_swap_engine_options(c, 0, 0, &o, host, sizeof(host));
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 32);
        CU_ASSERT_EQUAL(p.pinned_host_bytes, held);
        CU_ASSERT_EQUAL(p.held_pinned_host_bytes, held);
        CU_ASSERT_EQUAL(p.host_rest_bytes, kafka_reserve);
        CU_ASSERT_EQUAL(p.kafka_hold_records, 64);

        /* [memory] max_batch = 2: batch 2 carves a seventh of it, and the
         * plan still charges the whole staging (and the whole arena). */
        c->memory.max_batch = 2;
        c->memory.host_budget_bytes = 2048 * MiB;
        daemon_swap_engine_options(c, 0, 0, &o, host, sizeof(host));
        CU_ASSERT_EQUAL_FATAL(engine_swap_plan(e, next, &o, &p, &err), 0);
        CU_ASSERT_EQUAL(p.max_batch, 2);
        CU_ASSERT(p.engine.pinned_host_bytes < held / 3);
        CU_ASSERT_EQUAL(p.pinned_host_bytes, held);
        CU_ASSERT_EQUAL(p.total_bytes, p.engine.context_bytes + p.weights_bytes + e->held_arena_bytes);
        CU_ASSERT(p.arena_kept_bytes > 0);
        CU_ASSERT_EQUAL_FATAL(engine_swap(e, next, &p, &err), 0);
        CU_ASSERT_EQUAL(engine_plan_of(e)->pinned_host_bytes, held);
        CU_ASSERT_EQUAL(engine_max_batch(e), 2);

        engine_free(e);
        model_free(running);
        model_free(next);
        cfg_free(c);
}

int test_daemon_register(void) {
        static CU_TestInfo tests[] = {
                { "swap_plans_running_decode_pool", test_daemon_swap_plans_running_decode_pool },
                { "swap_plans_held_pinned_buffers", test_daemon_swap_plans_held_pinned_buffers },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("daemon", tests);
}

/* Unit tests of the result cache on the records' path ([cache] entries;
 * pipeline_cache.c), over the harness of test_pipeline.c (librdkafka's mock
 * cluster in process, the no-compute executor): a repeated record is a hit,
 * with inferd-cache: hit and the same prediction byte for byte as its miss
 * but for its own fields, takes no batch place and is committed in order;
 * a bad record repeated goes to the DLQ each time and is never cached; a
 * model swap empties the cache; a live resize stays within its memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/record.h"
#include "pipeline_harness.h"
#include "unit.h"

static unsigned char img_a[RECORD_RGB8_BYTES], img_b[RECORD_RGB8_BYTES];

static void fill_images(void) {
        for (size_t i = 0; i < RECORD_RGB8_BYTES; i++) {
                img_a[i] = (unsigned char)(i * 31);
                img_b[i] = (unsigned char)(i * 17 + 5);
        }
}

/* Feeds n RGB8 records, each img_a or img_b as pick[i] says. */
static void feed_ab(tp_t *t, const char *pick) {
        const void *values[16];
        size_t lens[16];
        const char *types[16] = {};
        int n = (int)strlen(pick);

        for (int i = 0; i < n; i++) {
                values[i] = pick[i] == 'a' ? img_a : img_b;
                lens[i] = RECORD_RGB8_BYTES;
        }
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t->cfg->kafka.brokers, n, values, lens, types), 0);
}

/* The prediction of offset o without its latency_ms, the one field of the
 * value that is the record's own. */
static void value_without_latency(const tp_t *t, int o, char *buf, size_t size) {
        const char *v = t->pred_values[o], *at, *end;

        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        at = strstr(v, "\"latency_ms\":");
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        end = at + strcspn(at, ",}");
        snprintf(buf, size, "%.*s%s", (int)(at - v), v, end);
}

/* The cache's counters and size as the stats say them. */
static void assert_cache(const tp_t *t, uint64_t hits, uint64_t misses, int entries) {
        pipeline_stats_t st;

        pipeline_get_stats(t->pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_hits, hits);
        CU_ASSERT_EQUAL(st.cache_misses, misses);
        CU_ASSERT_EQUAL(st.cache_entries, entries);
}

static bool has_hit_header(const tp_t *t, int o) {
        char buf[16];
        bool present;

        tp_header(t->pred_headers[o], "inferd-cache", buf, sizeof(buf), &present);
        return present && !strcmp(buf, "hit");
}

/* a b, then a b a: the second three are hits, made from the cache with no
 * batch, each with its own source offset and inferd-cache: hit, the same
 * prediction as its miss; every offset committed, in order. */
static void test_pipeline_cache_hit_same_prediction(void) {
        char want[1024], have[1024], off[32];
        const int twin[5] = { -1, -1, 0, 1, 0 };
        pipeline_stats_t st;
        bool present;
        tp_t t;

        fill_images();
        if (tp_setup_cache(&t, 16, 0) < 0)
                return;
        feed_ab(&t, "ab");
        tp_run_to(&t, 2);
        assert_cache(&t, 0, 2, 2);

        feed_ab(&t, "aba");
        tp_run_until(&t, 5);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 5);
        assert_cache(&t, 3, 2, 2);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_limit, 16);
        CU_ASSERT_EQUAL(st.records_in, 5);
        CU_ASSERT_EQUAL(st.predictions_out, 5);
        CU_ASSERT_EQUAL(st.batch_records, 2);   /* the hits took no batch place */
        for (int o = 0; o < 5; o++) {
                CU_ASSERT_PTR_NOT_NULL_FATAL(t.pred_headers[o]);
                CU_ASSERT_EQUAL(has_hit_header(&t, o), twin[o] >= 0);
                snprintf(want, sizeof(want), "%d", o);
                CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[o], "inferd-source-offset", off, sizeof(off),
                                                 &present), want);
                if (twin[o] < 0)
                        continue;
                value_without_latency(&t, twin[o], want, sizeof(want));
                value_without_latency(&t, o, have, sizeof(have));
                CU_ASSERT_STRING_EQUAL(have, want);
        }
        /* Tracked and acknowledged like any record: all committable. */
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        CU_ASSERT_EQUAL(t.next_offset, 5);
        tp_teardown(&t);
}

/* A JPEG that cannot be decoded passes the take (its magic is a JPEG's) and
 * is looked up, but goes to the DLQ and is never put: repeated, it is
 * dead-lettered each time. A record of a bad size is refused before the
 * cache is asked. */
static void test_pipeline_cache_bad_record_dead_lettered_each_time(void) {
        static const char bad_jpeg[] = "\xff\xd8\xff\xe0 not a JPEG after its magic, truncated";
        const void *values[2] = { bad_jpeg, "xxxx" };
        const size_t lens[2] = { sizeof(bad_jpeg) - 1, 4 };
        const char *types[2] = { "image/jpeg", NULL };
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup_cache(&t, 16, 1) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 2, values, lens, types), 0);
        tp_run_to(&t, 2);
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 2, values, lens, types), 0);
        tp_run_until(&t, 4);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 4);
        CU_ASSERT_EQUAL(t.delivered_predictions, 0);
        for (int o = 0; o < 4; o++)
                CU_ASSERT_EQUAL(t.dlq_codes_seen[o], 1);
        assert_cache(&t, 0, 2, 0);      /* misses: the JPEGs; the bad size never got there */
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.dlq_out, 4);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* A model swap empties the cache (the next a is a miss); a live resize
 * empties it too, and stays within the memory made at start. */
static void test_pipeline_cache_swap_empties_and_resize(void) {
        pipeline_stats_t st;
        tp_t t;

        fill_images();
        if (tp_setup_cache(&t, 16, 0) < 0)
                return;
        feed_ab(&t, "a");
        tp_run_to(&t, 1);
        assert_cache(&t, 0, 1, 1);
        CU_ASSERT_EQUAL(pipeline_engine_swapped(t.pipeline, "sha256:000000000001", "fp32", TP_MAX_BATCH), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_entries, 0);
        CU_ASSERT_EQUAL(st.cache_limit, 16);
        feed_ab(&t, "a");
        tp_run_until(&t, 2);
        assert_cache(&t, 0, 2, 1);
        CU_ASSERT_FALSE(has_hit_header(&t, 1));

        /* Above the memory made at start: refused, nothing changed. */
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 17), -ENOSPC);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_entries, 1);
        CU_ASSERT_EQUAL(st.cache_room, 16);
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 1), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_entries, 0);
        CU_ASSERT_EQUAL(st.cache_limit, 1);
        /* Off: not even looked up. */
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 0), 0);
        feed_ab(&t, "a");
        tp_run_until(&t, 3);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_hits + st.cache_misses, 2);
        CU_ASSERT_FALSE(has_hit_header(&t, 2));
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 16), 0);
        tp_teardown(&t);

        /* No cache at start: none can be made live. */
        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 0), 0);
        CU_ASSERT_EQUAL(pipeline_set_cache_entries(t.pipeline, 1), -ENOSPC);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cache_room, 0);
        tp_teardown(&t);
}

/* A record held for room (the slots full, the engine stalled) was looked up
 * as a miss when it was first tried; taken once its twin's result is in,
 * it is a hit. Misses are counted when a record is taken, once. */
static void test_pipeline_cache_held_record_becomes_a_hit(void) {
        pipeline_stats_t st;
        uint64_t end;
        tp_t t;

        fill_images();
        if (tp_setup_cache(&t, 16, 0) < 0)
                return;
        t.hold_timer_held = true;
        feed_ab(&t, "abababababab");
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        t.engine_stalled = true;
        end = pipeline_now_us() + TP_TIMEOUT_US;
        do {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
        } while (st.records_held == 0 && !t.fails && pipeline_now_us() < end);
        CU_ASSERT_EQUAL_FATAL(st.records_held > 0, true);
        for (int i = 0; i < 20; i++)
                tp_turn(&t);    /* the held record tried again and again */
        assert_cache(&t, 0, 2 * TP_MAX_BATCH, 0);
        t.engine_stalled = false;
        tp_run_until(&t, 12);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 12);
        assert_cache(&t, 12 - 2 * TP_MAX_BATCH, 2 * TP_MAX_BATCH, 2);
        CU_ASSERT_TRUE(has_hit_header(&t, 2 * TP_MAX_BATCH));
        CU_ASSERT_EQUAL(t.next_offset, 12);
        tp_teardown(&t);
}

int test_pipeline_cache_register(void) {
        static CU_TestInfo tests[] = {
                { "hit_same_prediction", test_pipeline_cache_hit_same_prediction },
                { "bad_record_dead_lettered_each_time", test_pipeline_cache_bad_record_dead_lettered_each_time },
                { "swap_empties_and_resize", test_pipeline_cache_swap_empties_and_resize },
                { "held_record_becomes_a_hit", test_pipeline_cache_held_record_becomes_a_hit },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("pipeline_cache", tests);
}

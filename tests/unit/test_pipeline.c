/* Unit tests of pipeline_ without the daemon: the pipeline is driven here
 * the way daemon.c drives it (pump, reap, produce, the batch-delay deadline)
 * and its calls up (pipeline_ops_t) are recorded. It runs over librdkafka's
 * own mock cluster, in process, and the no-compute executor of pipebench.h,
 * so the records' real path is taken: consume, classify, pack, submit, reap,
 * produce a prediction or a DLQ copy, and a delivery report for each
 * (pipeline_harness.h). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/labels.h"
#include "core/record.h"
#include "pipeline/pipeline_priv.h"
#include "pipeline_harness.h"
#include "unit.h"

static void test_pipeline_live_settings_and_stats(void) {
        pipeline_stats_t st;
        tp_t t;

        pipeline_get_stats(NULL, &st);
        CU_ASSERT_EQUAL(st.slots, 0);
        CU_ASSERT_EQUAL(st.records_in, 0);
        if (tp_setup(&t) < 0)
                return;
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.slots, 2);
        CU_ASSERT_EQUAL(st.batch_capacity, TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.batch_limit, TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.engine_top_k, 5);
        CU_ASSERT_EQUAL(st.top_k, 3);
        CU_ASSERT_EQUAL(st.records_in + st.predictions_out + st.dlq_out + st.batches, 0);

        /* top_k may go up to what the engine computes, not above. */
        CU_ASSERT_EQUAL(pipeline_set_top_k(t.pipeline, 6), -ERANGE);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.top_k, 3);
        CU_ASSERT_EQUAL(pipeline_set_top_k(t.pipeline, 5), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.top_k, 5);

        /* max_batch is clamped to the plan's batch. */
        CU_ASSERT_EQUAL(pipeline_set_max_batch(t.pipeline, 1000), TP_MAX_BATCH);
        CU_ASSERT_EQUAL(pipeline_set_max_batch(t.pipeline, 2), 2);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.batch_limit, 2);

        /* After a model swap (idle): the limit follows the config's
         * max_batch within the engine's batch. */
        CU_ASSERT_EQUAL(pipeline_engine_swapped(t.pipeline, "sha256:000000000001", "fp32", 1000), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.batch_limit, TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.batch_capacity, TP_MAX_BATCH);
        CU_ASSERT_EQUAL(pipeline_engine_swapped(t.pipeline, "sha256:000000000001", "fp32", 3), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.batch_limit, 3);

        /* Nothing filling: the deadline is a no-op. */
        pipeline_delay_expired(t.pipeline);
        CU_ASSERT_EQUAL(t.arms, 0);
        CU_ASSERT_EQUAL(t.fails, 0);
        tp_teardown(&t);
}


/* Runs the loop daemon.c runs, until every record was acknowledged. */
static void test_pipeline_records_to_predictions_and_dlq(void) {
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed(t.cfg->kafka.brokers), 0);
        tp_run_to(&t, TP_GOOD + 1);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.assigned, 1);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_GOOD);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, TP_GOOD + 1);
        CU_ASSERT_EQUAL(st.predictions_out, TP_GOOD);
        CU_ASSERT_EQUAL(st.dlq_out, 1);
        /* A full batch of 4, then the last 2 after the delay: the deadline
         * was asked for (ops->arm_delay) and flushed the partial slot. */
        CU_ASSERT_EQUAL(st.batches, 2);
        CU_ASSERT_EQUAL(st.batch_records, TP_GOOD);
        CU_ASSERT(t.arms >= 1);
        CU_ASSERT_EQUAL(st.slots_in_flight, 0);
        CU_ASSERT_EQUAL(st.records_in_slots, 0);
        CU_ASSERT_EQUAL(st.records_held, 0);
        /* Every offset handed out was acknowledged, in order. */
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* librdkafka hands out records already taken, without a rewind of the
 * pipeline's owner (a seek here; in the wild, 2.0.2's pause racing an
 * assignment's first fetch): each is dropped and counted, and nothing is
 * produced twice. */
static void test_pipeline_redelivered_dropped(void) {
        rd_kafka_topic_partition_list_t *to;
        pipeline_stats_t st;
        uint64_t end;
        errbuf_t err = {};
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed(t.cfg->kafka.brokers), 0);
        tp_run_to(&t, TP_GOOD + 1);
        CU_ASSERT_EQUAL_FATAL(t.delivered_predictions + t.delivered_dlq, TP_GOOD + 1);

        /* Back to offset 1: the six records from there come again. */
        to = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(to, "tp.in", 0)->offset = 1;
        CU_ASSERT_EQUAL(kafka_seek_to(t.kafka, to, &err), 0);
        rd_kafka_topic_partition_list_destroy(to);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        do {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
        } while (st.redelivered < TP_GOOD && !t.fails && pipeline_now_us() < end);
        /* A while more, for any output a second copy would make. */
        end = pipeline_now_us() + 2 * TP_MAX_DELAY_MS * 1000ULL;
        while (pipeline_now_us() < end)
                tp_turn(&t);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.redelivered, TP_GOOD);
        CU_ASSERT_EQUAL(st.records_in, TP_GOOD + 1);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_GOOD);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* The exactly-once commit point: with the intake closed nothing is taken.
 * For PIPELINE_HOLD_MAX_US fetching goes on (the records wait in
 * librdkafka's queue, and so does the rebalance that assigns the
 * partition); then it pauses, the consumer queue is served again, and the
 * partition assigned meanwhile starts paused. Reopened, every record is
 * taken and produced. */
static void test_pipeline_intake_closed_takes_nothing(void) {
        pipeline_stats_t st;
        uint64_t end;
        bool paused_early = false;
        int laters;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed(t.cfg->kafka.brokers), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        pipeline_set_intake(t.pipeline, false);
        CU_ASSERT_EQUAL(t.hold_arms, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_TRUE(st.holding);
        CU_ASSERT_FALSE(st.paused);
        /* Until the partition is assigned, then two seconds more. */
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (!t.assigned && !t.fails && pipeline_now_us() < end) {
                tp_turn(&t);
                paused_early = paused_early || (kafka_is_paused(t.kafka) && !t.hold_expiries);
        }
        CU_ASSERT_EQUAL_FATAL(t.assigned, 1);
        CU_ASSERT_FALSE(paused_early);
        end = pipeline_now_us() + 2 * 1000 * 1000ULL;
        while (pipeline_now_us() < end)
                tp_turn(&t);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, 0);
        CU_ASSERT_EQUAL(st.batches, 0);
        CU_ASSERT_EQUAL(t.hold_expiries, 1);
        CU_ASSERT_EQUAL(st.hold_pauses, 1);
        CU_ASSERT_TRUE(kafka_is_paused(t.kafka));
        CU_ASSERT_EQUAL(t.delivered_predictions + t.delivered_dlq, 0);

        laters = t.pump_laters;
        pipeline_set_intake(t.pipeline, true);
        CU_ASSERT_EQUAL(t.pump_laters, laters + 1);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions + t.delivered_dlq < TP_GOOD + 1 && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.assigned, 1);         /* no rebalance on the way */
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_GOOD);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, TP_GOOD + 1);
        /* Failed about one run in 90 until 2026-12-06 (12 predictions, 2 DLQ
         * copies, 14 records in: librdkafka 2.0.2 dropped the pause issued
         * right after the assign, fetched, and fetched again from the start
         * on resume; see kafka_rebalance_cb and pipeline_drop_redelivered).
         * The counts, should it come back. */
        if (t.delivered_predictions != TP_GOOD || t.delivered_dlq != 1 || st.records_in != TP_GOOD + 1)
                fprintf(stderr, "intake_closed_takes_nothing: %d predictions, %d DLQ copies, %" PRIu64
                        " records in, %" PRIu64 " held, paused %d (want %d, 1, %d)\n",
                        (int)t.delivered_predictions, (int)t.delivered_dlq, (uint64_t)st.records_in,
                        (uint64_t)st.records_held, (int)kafka_is_paused(t.kafka), TP_GOOD, TP_GOOD + 1);
        CU_ASSERT_EQUAL(st.records_held, 0);
        CU_ASSERT_FALSE(kafka_is_paused(t.kafka));
        tp_teardown(&t);
}

/* The intake closed and reopened within the hold (the test keeps the
 * hold's deadline back): nothing is taken while closed, fetching is never
 * paused, and everything is taken after. */
static void test_pipeline_intake_reopened_within_the_hold(void) {
        pipeline_stats_t st;
        uint64_t end;
        bool paused = false;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        t.hold_timer_held = true;
        CU_ASSERT_EQUAL_FATAL(tp_feed(t.cfg->kafka.brokers), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        pipeline_set_intake(t.pipeline, false);
        end = pipeline_now_us() + 500 * 1000ULL;
        while (pipeline_now_us() < end) {
                tp_turn(&t);
                paused = paused || kafka_is_paused(t.kafka);
        }
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, 0);
        CU_ASSERT_TRUE(st.holding);
        pipeline_set_intake(t.pipeline, true);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions + t.delivered_dlq < TP_GOOD + 1 && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end) {
                tp_turn(&t);
                paused = paused || kafka_is_paused(t.kafka);
        }
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_GOOD);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_FALSE(paused);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.hold_pauses, 0);
        CU_ASSERT_FALSE(st.holding);
        tp_teardown(&t);
}

#define TP_CAP_RECORDS 12           /* three full batches of TP_MAX_BATCH */
#define TP_CAP_PER_S 8

/* The throughput cap: the first batch goes at once (a full bucket is one
 * batch), the next two wait for their tokens (4 at 8/s: half a second
 * each). A wait that short takes nothing more from the consumer (nothing
 * held, fetching not paused: a resume would cost librdkafka up to a
 * second). So the third batch cannot go less than a second after the
 * first (measured from the start of the loop turn that submitted the
 * first): a lower bound that the bucket guarantees, whatever the machine's
 * load. Nothing is asserted about how soon it goes. */
static void test_pipeline_cap_holds_batches(void) {
        pipeline_stats_t st;
        uint64_t end, turn_us, first_us = 0, third_us = 0;
        bool seen_paused_by_cap = false;
        tp_t t;

        if (tp_setup_capped(&t, TP_CAP_PER_S) < 0)
                return;
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.max_images_per_s, TP_CAP_PER_S);
        CU_ASSERT_FALSE(st.capped);
        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t.cfg->kafka.brokers, TP_CAP_RECORDS, -1), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions < TP_CAP_RECORDS && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end) {
                turn_us = pipeline_now_us();
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
                if (st.batches >= 1 && !first_us)
                        first_us = turn_us;
                if (st.paused_by_cap) {
                        seen_paused_by_cap = true;
                        CU_ASSERT_TRUE(st.capped);
                        CU_ASSERT_FALSE(st.paused);
                        CU_ASSERT_EQUAL(st.records_held, 0);
                }
                if (st.batches >= 3 && !third_us)
                        third_us = pipeline_now_us();
        }
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_CAP_RECORDS);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.batches, 3);
        CU_ASSERT_EQUAL(st.batch_records, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(st.cap_waits, 2);
        CU_ASSERT_TRUE(seen_paused_by_cap);
        CU_ASSERT_FALSE(st.capped);
        CU_ASSERT(first_us > 0 &&
                  third_us >= first_us + (uint64_t)(TP_CAP_RECORDS - TP_MAX_BATCH) * 1000000ULL / TP_CAP_PER_S);
        /* The cap's wake-ups came through the batch-delay deadline. */
        CU_ASSERT(t.arms >= 2);
        tp_teardown(&t);
}

/* A long wait for the cap (4 s) pauses fetching as back-pressure does, with
 * the next record held. A reload to 0 lifts the cap: the waiting batch goes
 * at once, inside the call, and the held records are pumped again. */
static void test_pipeline_cap_long_wait_pauses_then_lifted(void) {
        pipeline_stats_t st;
        uint64_t end;
        int laters;
        tp_t t;

        /* One image a second: the second batch would wait 4 s. */
        if (tp_setup_capped(&t, 1) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t.cfg->kafka.brokers, TP_CAP_RECORDS, -1), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        do {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
        } while (!(st.paused_by_cap && st.paused) && !t.fails && pipeline_now_us() < end);
        CU_ASSERT_TRUE_FATAL(st.paused_by_cap && st.paused);
        CU_ASSERT_TRUE(kafka_is_paused(t.kafka));
        CU_ASSERT(st.records_held >= 1);
        CU_ASSERT_EQUAL(st.batches, 1);
        laters = t.pump_laters;
        pipeline_set_max_images_per_s(t.pipeline, 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.max_images_per_s, 0);
        CU_ASSERT_FALSE(st.capped);
        CU_ASSERT_EQUAL(st.batches, 2);
        CU_ASSERT_EQUAL(t.pump_laters, laters + 1);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions < TP_CAP_RECORDS && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_CAP_RECORDS);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.cap_waits, 1);
        CU_ASSERT_FALSE(kafka_is_paused(t.kafka));
        tp_teardown(&t);
}

/* --- back-pressure: the hold -----------------------------------------------
 * TP_CAP_RECORDS records, the engine stalled (nothing reaped): two slots of
 * TP_MAX_BATCH fill and go, and the next record finds no room. */

/* Runs turns until the pipeline holds a record (the hold began). Returns the
 * time the turn that began it started, 0 when it did not happen. */
static uint64_t tp_until_holding(tp_t *t) {
        pipeline_stats_t st;
        uint64_t end = pipeline_now_us() + TP_TIMEOUT_US, turn_us;

        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t->cfg->kafka.brokers, TP_CAP_RECORDS, -1), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t->kafka, &(errbuf_t){}), 0);
        t->engine_stalled = true;
        do {
                turn_us = pipeline_now_us();
                tp_turn(t);
                pipeline_get_stats(t->pipeline, &st);
        } while (st.records_held == 0 && !t->fails && pipeline_now_us() < end);
        return st.records_held ? turn_us : 0;
}

/* A rewind while two slots are in flight (issue 36): the partition is
 * tracked afresh (batch_offsets_assign, as after an aborted transaction or a
 * revoke), so the 2 x TP_MAX_BATCH records taken before it have no output
 * (their next reader takes them again: a second output would be a duplicate
 * under exactly-once), are counted as given up, and leave no record pending
 * that would keep a commit point waiting; the records taken after it are
 * predicted. Before, the slots' predictions were produced anyway. */
static void test_pipeline_rewound_outputs_given_up(void) {
        pipeline_stats_t st;
        uint64_t end;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_FATAL(tp_until_holding(&t) > 0);
        CU_ASSERT_FATAL(batch_offsets_assign(t.offsets, "tp.in", 0) > 0);
        t.engine_stalled = false;
        end = pipeline_now_us() + TP_TIMEOUT_US;
        do {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
        } while (t.delivered_predictions < TP_CAP_RECORDS - 2 * TP_MAX_BATCH && !t.fails && !t.delivery_errors &&
                 pipeline_now_us() < end);
        /* A moment more: nothing else may come. */
        end = pipeline_now_us() + 300 * 1000ULL;
        while (pipeline_now_us() < end)
                tp_turn(&t);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(st.outputs_given_up, 2 * TP_MAX_BATCH);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_CAP_RECORDS - 2 * TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.records_in, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* The pipeline full: for PIPELINE_HOLD_MAX_US nothing more is taken from
 * the consumer and fetching is not paused (the records wait in librdkafka's
 * queue); when the hold's deadline comes with the pipeline still full,
 * fetching pauses, and nothing more is taken while paused. Room again: the
 * held record and the rest are taken, fetching resumes, nothing is lost. */
static void test_pipeline_full_holds_then_pauses(void) {
        pipeline_stats_t st;
        uint64_t began, end;
        bool paused = false, more = false;
        int laters;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        began = tp_until_holding(&t);
        CU_ASSERT_TRUE_FATAL(began > 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_held, 1);
        CU_ASSERT_EQUAL(st.records_in, 2 * TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.slots_in_flight, 2);
        CU_ASSERT_TRUE(st.holding);
        CU_ASSERT_FALSE(st.paused);
        CU_ASSERT_EQUAL(st.holds, 1);
        CU_ASSERT_EQUAL(st.hold_pauses, 0);
        /* One deadline, PIPELINE_HOLD_MAX_US after the hold began. */
        CU_ASSERT_EQUAL(t.hold_arms, 1);
        CU_ASSERT(t.hold_deadline_us >= began + PIPELINE_HOLD_MAX_US);
        CU_ASSERT(t.hold_deadline_us <= pipeline_now_us() + PIPELINE_HOLD_MAX_US);

        /* Until the deadline: held, not paused, nothing more taken (the
         * other TP_CAP_RECORDS - 9 records are there to take). */
        while (t.hold_expiries == 0 && !t.fails) {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
                if (t.hold_expiries)
                        break;
                paused = paused || st.paused || kafka_is_paused(t.kafka);
                more = more || st.records_held != 1 || st.records_in != 2 * TP_MAX_BATCH;
        }
        CU_ASSERT_FALSE(paused);
        CU_ASSERT_FALSE(more);
        /* The deadline came, still full: paused, and a pump asked for (it
         * serves the consumer queue again). */
        CU_ASSERT_TRUE(st.paused);
        CU_ASSERT_TRUE(kafka_is_paused(t.kafka));
        CU_ASSERT_FALSE(st.holding);
        CU_ASSERT_EQUAL(st.hold_pauses, 1);
        CU_ASSERT(t.pump_laters >= 1);
        /* While paused the consumer is served, and what was prefetched is
         * not taken: still one record held. */
        laters = t.pump_laters;
        end = pipeline_now_us() + 300 * 1000ULL;
        while (pipeline_now_us() < end)
                tp_turn(&t);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_held, 1);
        CU_ASSERT_EQUAL(st.records_in, 2 * TP_MAX_BATCH);
        CU_ASSERT_TRUE(st.paused);
        CU_ASSERT_EQUAL(t.pump_laters, laters);
        /* A late or repeated deadline changes nothing. */
        pipeline_hold_expired(t.pipeline);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.hold_pauses, 1);

        /* Room again: everything is taken and produced, in order. */
        t.engine_stalled = false;
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions < TP_CAP_RECORDS && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(t.next_offset, TP_CAP_RECORDS);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(st.records_held, 0);
        CU_ASSERT_FALSE(st.paused);
        CU_ASSERT_FALSE(st.holding);
        CU_ASSERT_FALSE(kafka_is_paused(t.kafka));
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* A slot frees within the hold (the test keeps the hold's deadline back, as
 * a loop that has not reached it yet would): the held record and the ones
 * left in librdkafka's queue are taken at the next pump, and fetching was
 * never paused. */
static void test_pipeline_full_takes_again_when_a_slot_frees(void) {
        pipeline_stats_t st;
        uint64_t end;
        bool paused = false;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        t.hold_timer_held = true;
        CU_ASSERT_TRUE_FATAL(tp_until_holding(&t) > 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_TRUE(st.holding);
        CU_ASSERT_EQUAL(st.records_in, 2 * TP_MAX_BATCH);

        t.engine_stalled = false;
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions < TP_CAP_RECORDS && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end) {
                tp_turn(&t);
                paused = paused || kafka_is_paused(t.kafka);
        }
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(t.next_offset, TP_CAP_RECORDS);
        CU_ASSERT_FALSE(paused);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, TP_CAP_RECORDS);
        CU_ASSERT_EQUAL(st.records_held, 0);
        CU_ASSERT_FALSE(st.holding);
        CU_ASSERT_EQUAL(st.hold_pauses, 0);
        CU_ASSERT_EQUAL(t.hold_expiries, 0);
        /* The deadline, once it comes, finds nothing held: no pause. */
        pipeline_hold_expired(t.pipeline);
        CU_ASSERT_FALSE(kafka_is_paused(t.kafka));
        tp_teardown(&t);
}

/* A drain while holding: the held record is dropped untracked, fetching
 * pauses at once, the slots finish, and only their offsets become
 * committable (the rest come back to the next owner). The hold's deadline
 * then changes nothing. */
static void test_pipeline_drain_while_holding(void) {
        pipeline_stats_t st;
        uint64_t end;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_TRUE_FATAL(tp_until_holding(&t) > 0);
        pipeline_begin_drain(t.pipeline);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_held, 0);
        CU_ASSERT_FALSE(st.holding);
        CU_ASSERT_TRUE(st.paused);
        CU_ASSERT_TRUE(kafka_is_paused(t.kafka));
        CU_ASSERT_EQUAL(st.hold_pauses, 0);

        t.engine_stalled = false;
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while ((t.delivered_predictions < 2 * TP_MAX_BATCH || t.hold_expiries == 0) && !t.fails &&
               !t.delivery_errors && pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 2 * TP_MAX_BATCH);
        CU_ASSERT_EQUAL(t.next_offset, 2 * TP_MAX_BATCH);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, 2 * TP_MAX_BATCH);
        CU_ASSERT_EQUAL(st.records_in_slots, 0);
        CU_ASSERT_EQUAL(st.records_held, 0);
        CU_ASSERT_TRUE(kafka_is_paused(t.kafka));
        CU_ASSERT_EQUAL(st.hold_pauses, 0);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* [batching] max_record_age: records 2 min old are not run; those younger
 * than the limit, and one from the future, are. With dlq they go to the DLQ;
 * with skip they are finished at once through ops->skipped, and every offset
 * becomes committable either way. The predictions' stages are observed. */
static void tp_expired_run(bool skip) {
        static const int64_t ages_ms[] = { 120000, 1000, 120000, -600000, 30000 };
        const int n = (int)(sizeof(ages_ms) / sizeof(ages_ms[0]));
        pipeline_stats_t st;
        uint64_t end;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        pipeline_set_max_record_age(t.pipeline, 60000, skip);
        CU_ASSERT_EQUAL_FATAL(tp_feed_aged(t.cfg->kafka.brokers, n, -1, ages_ms), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions + t.delivered_dlq + t.skipped < n && !t.fails && !t.delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 3);
        CU_ASSERT_EQUAL(t.delivered_dlq, skip ? 0 : 2);
        CU_ASSERT_EQUAL(t.skipped, skip ? 2 : 0);
        CU_ASSERT_EQUAL(t.next_offset, n);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, (uint64_t)n);
        CU_ASSERT_EQUAL(st.expired_skipped, skip ? 2 : 0);
        CU_ASSERT_EQUAL(st.dlq_out, skip ? 0 : 2);
        for (size_t i = 0; i < st.n_dlq_codes; i++)
                if (!strcmp(st.dlq_codes[i].label, RECORD_ERR_EXPIRED))
                        CU_ASSERT_EQUAL(st.dlq_codes[i].n, skip ? 0 : 2);
        for (int i = 0; i < RECTIME_STAGES; i++)
                CU_ASSERT_EQUAL(st.stage_seconds[i].count, 3);
        /* The one from the future waited no time in the queue; the others 1
         * s and 30 s at least: the queue stage's sum says so. */
        CU_ASSERT(st.stage_seconds[RECTIME_QUEUE].sum >= 31.0 && st.stage_seconds[RECTIME_QUEUE].sum < 90.0);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

static void test_pipeline_expired_to_dlq(void) {
        tp_expired_run(false);
}

static void test_pipeline_expired_skipped(void) {
        tp_expired_run(true);
}

/* Runs the pipeline over what was fed until one DLQ copy (or a failure)
 * is delivered. */
static void tp_run_to_dlq(tp_t *t) {
        uint64_t end = pipeline_now_us() + TP_TIMEOUT_US;

        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t->kafka, &(errbuf_t){}), 0);
        while (t->delivered_dlq < 1 && !t->fails && !t->delivery_errors && pipeline_now_us() < end)
                tp_turn(t);
}

/* A bad record just over the producer's message.max.bytes (1,000,000): its
 * DLQ copy goes without its value, with the key and headers kept and
 * inferd-dlq-value-omitted, and its offset is committable. Issue 26, item 1:
 * the daemon stopped on it, for good. */
static void test_pipeline_dlq_value_over_the_limit(void) {
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_big(t.cfg->kafka.brokers, 1000100, 0), 0);
        tp_run_to_dlq(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_EQUAL(t.dlq_value_bytes, 0);
        CU_ASSERT_STRING_EQUAL(t.dlq_omitted, "1000100");
        CU_ASSERT_TRUE(t.dlq_has_correlation);
        CU_ASSERT_EQUAL(t.next_offset, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.dlq_out, 1);
        CU_ASSERT_EQUAL(st.dlq_values_omitted, 1);
        for (size_t i = 0; i < st.n_dlq_codes; i++)
                if (!strcmp(st.dlq_codes[i].label, RECORD_ERR_TOO_LARGE))
                        CU_ASSERT_EQUAL(st.dlq_codes[i].n, 1);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* A bad record (3 bytes) with a 1 MB header: its DLQ copy goes without the
 * value, and the large header's value is cut too (a small one is kept). */
static void test_pipeline_dlq_big_header(void) {
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_big(t.cfg->kafka.brokers, 3, 1000000), 0);
        tp_run_to_dlq(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_EQUAL(t.dlq_value_bytes, 0);
        CU_ASSERT_STRING_EQUAL(t.dlq_omitted, "3");
        CU_ASSERT_EQUAL(t.dlq_big_header_bytes, 0);
        CU_ASSERT_TRUE(t.dlq_has_correlation);
        CU_ASSERT_EQUAL(t.next_offset, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.dlq_values_omitted, 1);
        tp_teardown(&t);
}

/* The broker refuses the DLQ copy as too large (MSG_SIZE_TOO_LARGE: the
 * topic's max.message.bytes is below the producer's): the delivery report's
 * failure goes to pipeline_delivery_failed, which produces it again without
 * the value; it is delivered and its offset committable. */
static void test_pipeline_dlq_broker_refuses_size(void) {
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_big(t.cfg->kafka.brokers, 5000, 0), 0);
        /* The feeder's produce went; the next Produce is the DLQ copy's. */
        rd_kafka_mock_push_request_errors(t.cluster, 0 /* Produce */, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        t.redeliver = true;
        tp_run_to_dlq(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_EQUAL(t.dlq_value_bytes, 0);
        CU_ASSERT_STRING_EQUAL(t.dlq_omitted, "5000");
        CU_ASSERT_TRUE(t.dlq_has_correlation);
        CU_ASSERT_EQUAL(t.next_offset, 1);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.dlq_out, 1);
        CU_ASSERT_EQUAL(st.dlq_values_omitted, 1);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        tp_teardown(&t);
}

/* The value of header name in h as a NUL-terminated copy in buf ("" when
 * absent; *present says which). */
#define TP_PARENT "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

/* Issue 41, item 4: a good record with a 1.2 MB tracestate stopped the
 * daemon (its prediction over message.max.bytes), and its partition with
 * it. Four good records: the 1.2 MB tracestate, an invalid traceparent,
 * a 64-member tracestate and a 5,000-byte correlation-id. Each is
 * predicted, with its copied headers bounded and the cuts named and
 * counted; none goes to the DLQ; every offset is committable. */
static void test_pipeline_copied_headers_bounded(void) {
        rd_kafka_headers_t *in[5];
        char *big = malloc(1200001), state64[1024], buf[2048];
        size_t n = 0;
        pipeline_stats_t st;
        bool present;
        tp_t t;

        CU_ASSERT_PTR_NOT_NULL_FATAL(big);
        if (tp_setup(&t) < 0) {
                free(big);
                return;
        }
        memset(big, 'x', 1200000);
        memcpy(big, "vendor=", 7);
        big[1200000] = '\0';
        for (int i = 0; i < 64; i++)
                n += (size_t)snprintf(state64 + n, sizeof(state64) - n, "%sm%d=v%d", i ? "," : "", i, i);
        for (int i = 0; i < 5; i++)
                in[i] = rd_kafka_headers_new(4);
        rd_kafka_header_add(in[0], "traceparent", -1, TP_PARENT, -1);
        rd_kafka_header_add(in[0], "tracestate", -1, big, -1);
        rd_kafka_header_add(in[0], "correlation-id", -1, "c-0", -1);
        rd_kafka_header_add(in[1], "traceparent", -1, "zz-not-a-trace$$$", -1);
        rd_kafka_header_add(in[1], "tracestate", -1, "a=1", -1);
        rd_kafka_header_add(in[2], "traceparent", -1, TP_PARENT, -1);
        rd_kafka_header_add(in[2], "tracestate", -1, state64, -1);
        memset(big, 'c', 5000);
        rd_kafka_header_add(in[3], "correlation-id", -1, big, 5000);
        rd_kafka_header_add(in[4], "traceparent", -1, TP_PARENT, -1);
        rd_kafka_header_add(in[4], "tracestate", -1, "congo=t61rcWkgMzE", -1);
        rd_kafka_header_add(in[4], "correlation-id", -1, "c-4", -1);
        CU_ASSERT_EQUAL_FATAL(tp_feed_headers(t.cfg->kafka.brokers, 5, in), 0);
        tp_run_to(&t, 5);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 5);
        CU_ASSERT_EQUAL(t.delivered_dlq, 0);
        CU_ASSERT_EQUAL(t.next_offset, 5);
        for (int i = 0; i < 5; i++)
                CU_ASSERT_PTR_NOT_NULL_FATAL(t.pred_headers[i]);

        /* 0: the traceparent kept, the 1.2 MB tracestate (one member over
         * 256 characters: malformed) left out and named. */
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[0], "traceparent", buf, sizeof(buf), &present), TP_PARENT);
        tp_header(t.pred_headers[0], "tracestate", buf, sizeof(buf), &present);
        CU_ASSERT_FALSE(present);
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[0], "inferd-header-cut", buf, sizeof(buf), &present),
                               "tracestate=1200000");
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[0], "correlation-id", buf, sizeof(buf), &present), "c-0");
        /* 1: neither the invalid traceparent nor the tracestate after it. */
        tp_header(t.pred_headers[1], "traceparent", buf, sizeof(buf), &present);
        CU_ASSERT_FALSE(present);
        tp_header(t.pred_headers[1], "tracestate", buf, sizeof(buf), &present);
        CU_ASSERT_FALSE(present);
        /* 2: the first 32 members. */
        tp_header(t.pred_headers[2], "tracestate", buf, sizeof(buf), &present);
        CU_ASSERT_TRUE(present);
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, "m0=v0,m1=v1,"));
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, ",m31=v31"));
        CU_ASSERT_PTR_NULL(strstr(buf, "m32="));
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[2], "inferd-header-cut", buf, sizeof(buf), &present),
                               "tracestate=491");
        /* 3: the correlation-id cut to 1,024 bytes. */
        tp_header(t.pred_headers[3], "correlation-id", buf, sizeof(buf), &present);
        CU_ASSERT_EQUAL(strlen(buf), 1024);
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[3], "inferd-header-cut", buf, sizeof(buf), &present),
                               "correlation-id=5000");
        /* 4: all as they were, nothing named as cut. */
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[4], "tracestate", buf, sizeof(buf), &present),
                               "congo=t61rcWkgMzE");
        CU_ASSERT_STRING_EQUAL(tp_header(t.pred_headers[4], "traceparent", buf, sizeof(buf), &present), TP_PARENT);
        tp_header(t.pred_headers[4], "inferd-header-cut", buf, sizeof(buf), &present);
        CU_ASSERT_FALSE(present);

        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL_FATAL(st.n_headers_cut, 3);
        for (size_t i = 0; i < st.n_headers_cut; i++) {
                if (!strcmp(st.headers_cut[i].label, "correlation-id"))
                        CU_ASSERT_EQUAL(st.headers_cut[i].n, 1);
                if (!strcmp(st.headers_cut[i].label, "traceparent"))
                        CU_ASSERT_EQUAL(st.headers_cut[i].n, 1);
                if (!strcmp(st.headers_cut[i].label, "tracestate"))
                        CU_ASSERT_EQUAL(st.headers_cut[i].n, 3);        /* 0, 1 (after an invalid parent), 2 */
        }
        for (int i = 0; i < 5; i++)
                rd_kafka_headers_destroy(in[i]);
        free(big);
        tp_teardown(&t);
}

/* A prediction over the producer's message.max.bytes (1,000 here, and
 * labels of 400 characters) goes to the DLQ as output-too-large, with a
 * sentence that counts its headers, and never stops the pipeline: both
 * records are finished and their offsets committable. */
static void test_pipeline_prediction_too_large_to_dlq(void) {
        char path[] = "/tmp/tp-labels-XXXXXX", label[401];
        labels_t *labels = NULL;
        errbuf_t err = {};
        pipeline_stats_t st;
        FILE *f;
        int fd;
        tp_t t;

        fd = mkstemp(path);
        CU_ASSERT_FATAL(fd >= 0);
        f = fdopen(fd, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        memset(label, 'l', 400);
        label[400] = '\0';
        for (int i = 0; i < 1000; i++)
                fprintf(f, "%s\n", label);
        fclose(f);
        CU_ASSERT_EQUAL_FATAL(labels_load(&labels, path, 1000, &err), 0);
        unlink(path);
        if (tp_setup_producer_max(&t, "1000") < 0) {
                labels_free(labels);
                return;
        }
        pipeline_set_labels(t.pipeline, labels);
        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t.cfg->kafka.brokers, 2, -1), 0);
        tp_run_to(&t, 2);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 2);
        CU_ASSERT_STRING_EQUAL(t.dlq_code, RECORD_ERR_OUTPUT_TOO_LARGE);
        CU_ASSERT_PTR_NOT_NULL(strstr(t.dlq_detail, "its prediction could not be produced to 'tp.out': a record of "));
        CU_ASSERT_PTR_NOT_NULL(strstr(t.dlq_detail, ", headers "));
        CU_ASSERT_PTR_NOT_NULL(strstr(t.dlq_detail, "message.max.bytes (1000)"));
        /* The copy itself is over 1,000 bytes with the value: without it. */
        CU_ASSERT_STRING_EQUAL(t.dlq_omitted, "150528");
        CU_ASSERT_EQUAL(t.next_offset, 2);
        pipeline_get_stats(t.pipeline, &st);
        for (size_t i = 0; i < st.n_dlq_codes; i++)
                if (!strcmp(st.dlq_codes[i].label, RECORD_ERR_OUTPUT_TOO_LARGE))
                        CU_ASSERT_EQUAL(st.dlq_codes[i].n, 2);
        tp_teardown(&t);
        labels_free(labels);
}

/* The broker refuses a prediction as too large (the output topic's
 * max.message.bytes): at least once, its record goes to the DLQ as
 * output-too-large, without the value that the pipeline no longer holds,
 * saying so; the daemon goes on and the next record is predicted. */
static void test_pipeline_prediction_refused_by_broker(void) {
        uint64_t end;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        t.redeliver = true;
        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t.cfg->kafka.brokers, 1, -1), 0);
        rd_kafka_mock_push_request_errors(t.cluster, 0 /* Produce */, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        tp_run_to(&t, 1);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_STRING_EQUAL(t.dlq_code, RECORD_ERR_OUTPUT_TOO_LARGE);
        CU_ASSERT_EQUAL(t.dlq_value_len[0], 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(t.dlq_detail, "the broker refused its prediction, a record of "));
        CU_ASSERT_PTR_NOT_NULL(strstr(t.dlq_detail, "as too large for 'tp.out'"));
        CU_ASSERT_EQUAL(t.next_offset, 1);
        /* The next record of the partition. */
        CU_ASSERT_EQUAL_FATAL(tp_feed_n(t.cfg->kafka.brokers, 1, -1), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_predictions < 1 && !t.fails && !t.delivery_errors && pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.delivered_predictions, 1);
        CU_ASSERT_EQUAL(t.next_offset, 2);
        tp_teardown(&t);
}

/* Issue 41, item 5: the broker refuses a whole batch of DLQ copies as too
 * large (a 200 KB one with 1 KB to 5 KB ones beside it). Only a copy
 * refused alone may lower the size from which values are left out: the
 * others are retried one by one and keep their values, and so do the
 * copies of 1 KB to 5 KB that come later. Here the mock refuses the batch
 * and then the first copy retried alone (the 200 KB one). Before the fix,
 * every copy of the batch lowered the size to its own, and every later
 * copy of 1,024 bytes or more went without its value. */
static void test_pipeline_dlq_batch_refused_small_copies_kept(void) {
        static char garbage[200000];
        const void *values[4] = { garbage, garbage, garbage, garbage };
        const size_t first[4] = { 200000, 1024, 3000, 5000 }, later[4] = { 1024, 2048, 4096, 5000 };
        const char *types[4] = { "image/jpeg", NULL, NULL, NULL }, *none[4] = { NULL, NULL, NULL, NULL };
        uint64_t end;
        tp_t t;

        memset(garbage, 'g', sizeof(garbage));
        if (tp_setup(&t) < 0)
                return;
        t.redeliver = true;
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 4, values, first, types), 0);
        /* The feeder's produce went; the next two Produce requests are the
         * DLQ's: the batch of four, then the first copy retried alone. */
        rd_kafka_mock_push_request_errors(t.cluster, 0 /* Produce */, 2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
                                          RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        tp_run_to(&t, 4);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 4);
        CU_ASSERT_EQUAL(t.dlq_value_len[0], 0);         /* refused alone: cut */
        CU_ASSERT_EQUAL(t.dlq_value_len[1], 1024);
        CU_ASSERT_EQUAL(t.dlq_value_len[2], 3000);
        CU_ASSERT_EQUAL(t.dlq_value_len[3], 5000);
        CU_ASSERT_EQUAL(t.pipeline->dlq_cut_bytes, 200000);
        CU_ASSERT_EQUAL(t.next_offset, 4);
        /* Later copies of 1 KB to 5 KB keep their values. */
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 4, values, later, none), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_dlq < 8 && !t.fails && !t.delivery_errors && pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.delivered_dlq, 8);
        for (int i = 0; i < 4; i++)
                CU_ASSERT_EQUAL(t.dlq_value_len[4 + i], later[i]);
        CU_ASSERT_EQUAL(t.next_offset, 8);
        /* The size is lifted once it is old (an hour; here at once): a
         * 200 KB copy is tried whole again, and goes. */
        t.pipeline->dlq_cut_ttl_us = 0;
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 1, values, first, none), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        while (t.delivered_dlq < 9 && !t.fails && !t.delivery_errors && pipeline_now_us() < end)
                tp_turn(&t);
        CU_ASSERT_EQUAL(t.dlq_value_len[8], 200000);
        CU_ASSERT_EQUAL(t.pipeline->dlq_cut_bytes, SIZE_MAX);
        CU_ASSERT_EQUAL(t.next_offset, 9);
        tp_teardown(&t);
}

/* An RGB8 record of the right size with two content-type headers (both
 * image/x-rgb8) is refused as bad-content-type: which one holds is not
 * guessed (issue 26, item 7: the last won silently). */
static void test_pipeline_two_content_types_refused(void) {
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_big_ct(t.cfg->kafka.brokers, RECORD_RGB8_BYTES, 0, 2), 0);
        tp_run_to_dlq(&t);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_STRING_EQUAL(t.dlq_code, RECORD_ERR_BAD_CONTENT_TYPE);
        CU_ASSERT_EQUAL(t.dlq_value_bytes, RECORD_RGB8_BYTES);
        CU_ASSERT_EQUAL(t.next_offset, 1);
        tp_teardown(&t);
}

/* Consumes the first n records of tp.in's partition 0 (assigned, no
 * group), into ms, with a consumer of its own (*rkp, to be destroyed after
 * the messages). Returns how many came. */
static int tp_consume_direct(const char *bootstraps, rd_kafka_message_t **ms, int n, rd_kafka_t **rkp) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_topic_partition_list_t *parts;
        rd_kafka_t *rk;
        uint64_t end = pipeline_now_us() + TP_TIMEOUT_US;
        char why[256];
        int got = 0;

        /* rd_kafka_consumer_poll needs a group.id; assigned, it joins none. */
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "group.id", "tp-direct", why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "enable.auto.commit", "false", why, sizeof(why)) != RD_KAFKA_CONF_OK) {
                rd_kafka_conf_destroy(conf);
                return 0;
        }
        *rkp = rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why));
        if (!rk) {
                rd_kafka_conf_destroy(conf);
                return 0;
        }
        parts = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(parts, "tp.in", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_assign(rk, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        while (got < n && pipeline_now_us() < end) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);

                if (m && !m->err)
                        ms[got++] = m;
                else if (m)
                        rd_kafka_message_destroy(m);
        }
        return got;
}

/* A record placed in a slot lets its librdkafka message go
 * (pipeline_source.c): its topic, partition, offset, timestamp, key and
 * headers are copied, and its value is the slot's copy. A record whose
 * value is not in the slot (a decoded one) keeps its message whole. */
static void test_pipeline_source_lets_the_message_go(void) {
        static const char v0[] = "0123456789abcdef", v1[] = "no headers";
        const void *values[] = { v0, v1 };
        const size_t lens[] = { sizeof(v0) - 1, sizeof(v1) - 1 };
        const char *types[] = { "image/x-test", NULL };
        rd_kafka_message_t *ms[2];
        rd_kafka_t *rk = NULL;
        pipeline_source_t s;
        unsigned char slot[32];
        const void *v;
        size_t len;
        int got;
        tp_t t;

        if (tp_setup(&t) < 0)
                return;
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t.cfg->kafka.brokers, 2, values, lens, types), 0);
        got = tp_consume_direct(t.cfg->kafka.brokers, ms, 2, &rk);
        if (got != 2) {
                CU_FAIL("the two records were not consumed");
                while (got > 0)
                        rd_kafka_message_destroy(ms[--got]);
                if (rk)
                        rd_kafka_destroy(rk);
                tp_teardown(&t);
                return;
        }

        /* Let go: a copy of what the outputs read, the value the slot's. */
        memcpy(slot, ms[0]->payload, ms[0]->len);
        pipeline_source_keep(&s, ms[0], slot, lens[0]);
        CU_ASSERT_PTR_NULL(s.msg);
        CU_ASSERT_STRING_EQUAL(s.topic, "tp.in");
        CU_ASSERT_EQUAL(s.partition, 0);
        CU_ASSERT_EQUAL(s.offset, 0);
        CU_ASSERT(s.timestamp_ms > 0);
        CU_ASSERT_EQUAL(s.key_len, 2);
        CU_ASSERT(s.key && memcmp(s.key, "k0", 2) == 0);
        CU_ASSERT_PTR_EQUAL(s.value, slot);
        CU_ASSERT_EQUAL(s.len, lens[0]);
        CU_ASSERT_FATAL(s.headers != NULL);
        CU_ASSERT_EQUAL(rd_kafka_header_get_last(s.headers, "content-type", &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR);
        CU_ASSERT(len == strlen(types[0]) && memcmp(v, types[0], len) == 0);
        pipeline_source_release(&s);
        CU_ASSERT(s.msg == NULL && s.copied == NULL && s.copied_headers == NULL && s.topic == NULL);
        pipeline_source_release(&s);    /* empty: a no-op */

        /* Kept whole: the value is the message's own; no headers. */
        pipeline_source_keep(&s, ms[1], NULL, 0);
        CU_ASSERT_PTR_EQUAL(s.msg, ms[1]);
        CU_ASSERT_PTR_EQUAL(s.value, ms[1]->payload);
        CU_ASSERT_EQUAL(s.len, lens[1]);
        CU_ASSERT_EQUAL(s.offset, 1);
        CU_ASSERT(s.key && memcmp(s.key, "k1", 2) == 0);
        CU_ASSERT_PTR_NULL(s.headers);
        CU_ASSERT_PTR_NULL(s.copied);
        pipeline_source_release(&s);
        CU_ASSERT_PTR_NULL(s.msg);
        rd_kafka_destroy(rk);
        tp_teardown(&t);
}

int test_pipeline_register(void) {
        static CU_TestInfo tests[] = {
                { "live_settings_and_stats", test_pipeline_live_settings_and_stats },
                { "records_to_predictions_and_dlq", test_pipeline_records_to_predictions_and_dlq },
                { "redelivered_dropped", test_pipeline_redelivered_dropped },
                { "intake_closed_takes_nothing", test_pipeline_intake_closed_takes_nothing },
                { "intake_reopened_within_the_hold", test_pipeline_intake_reopened_within_the_hold },
                { "cap_holds_batches", test_pipeline_cap_holds_batches },
                { "cap_long_wait_pauses_then_lifted", test_pipeline_cap_long_wait_pauses_then_lifted },
                { "full_holds_then_pauses", test_pipeline_full_holds_then_pauses },
                { "rewound_outputs_given_up", test_pipeline_rewound_outputs_given_up },
                { "full_takes_again_when_a_slot_frees", test_pipeline_full_takes_again_when_a_slot_frees },
                { "drain_while_holding", test_pipeline_drain_while_holding },
                { "expired_to_dlq", test_pipeline_expired_to_dlq },
                { "expired_skipped", test_pipeline_expired_skipped },
                { "dlq_value_over_the_limit", test_pipeline_dlq_value_over_the_limit },
                { "dlq_big_header", test_pipeline_dlq_big_header },
                { "dlq_broker_refuses_size", test_pipeline_dlq_broker_refuses_size },
                { "two_content_types_refused", test_pipeline_two_content_types_refused },
                { "copied_headers_bounded", test_pipeline_copied_headers_bounded },
                { "prediction_too_large_to_dlq", test_pipeline_prediction_too_large_to_dlq },
                { "dlq_batch_refused_small_copies_kept", test_pipeline_dlq_batch_refused_small_copies_kept },
                { "prediction_refused_by_broker", test_pipeline_prediction_refused_by_broker },
                { "source_lets_the_message_go", test_pipeline_source_lets_the_message_go },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("pipeline", tests);
}

/* Unit tests of the pipeline's decoding (pipeline_decode.c), driven as
 * daemon.c drives it (pipeline_harness.h) with a real decode pool: a slow
 * decode holds up no record that was ready (issue 26, item 5), its offset
 * still commits in partition order, a refused decode goes to the DLQ as
 * soon as it ends, and a flush (the exactly-once commit point, a drain, a
 * revoke) submits the records still decoding once they are placed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "core/record.h"
#include "jpeg_build.h"
#include "pipeline_harness.h"
#include "unit.h"

#define TPD_SIDE 5000           /* the slow JPEG: 25 MP, progressive, smooth (small in bytes) */
#define TPD_RGB8 4              /* RGB8 records behind it: one full batch */

/* A large progressive greyscale JPEG: a smooth pattern, so that it stays
 * well under the mock broker's 1 MB while its 25 MP take a decode thread a
 * few hundred milliseconds (many times what the RGB8 records' whole path
 * takes). */
static uint8_t *tpd_slow_jpeg(size_t *len) {
        uint8_t *img = malloc((size_t)TPD_SIDE * TPD_SIDE * 3);

        CU_ASSERT_PTR_NOT_NULL_FATAL(img);
        for (size_t y = 0; y < TPD_SIDE; y++)
                for (size_t x = 0; x < TPD_SIDE; x++) {
                        uint8_t v = (uint8_t)((x / 40 + y / 30) & 0xff);

                        img[(y * TPD_SIDE + x) * 3] = img[(y * TPD_SIDE + x) * 3 + 1] =
                                img[(y * TPD_SIDE + x) * 3 + 2] = v;
                }
        return jpeg_build_flags(img, TPD_SIDE, TPD_SIDE, TJSAMP_GRAY, 90, TJFLAG_PROGRESSIVE, len);
}

/* The slow JPEG at offset 0 and TPD_RGB8 RGB8 records behind it, in one
 * partition. */
static void tpd_feed(tp_t *t, const void *first, size_t first_len, const char *first_type) {
        uint8_t *rgb = calloc(1, RECORD_RGB8_BYTES);
        const void *values[1 + TPD_RGB8] = { first };
        size_t lens[1 + TPD_RGB8] = { first_len };
        const char *types[1 + TPD_RGB8] = { first_type };

        CU_ASSERT_PTR_NOT_NULL_FATAL(rgb);
        for (int i = 1; i <= TPD_RGB8; i++) {
                values[i] = rgb;
                lens[i] = RECORD_RGB8_BYTES;
                types[i] = "image/x-rgb8";
        }
        CU_ASSERT_EQUAL_FATAL(tp_feed_records(t->cfg->kafka.brokers, 1 + TPD_RGB8, values, lens, types), 0);
        free(rgb);
}

static void tpd_run_until(tp_t *t, int outputs) {
        uint64_t end = pipeline_now_us() + TP_TIMEOUT_US;

        while (t->delivered_predictions + t->delivered_dlq < outputs && !t->fails && !t->delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(t);
}

/* The RGB8 records behind a slow JPEG are predicted first, in a batch of
 * their own; nothing of the partition is committable until the JPEG is
 * done, and then everything is. Before the staging, the JPEG and three of
 * them shared a slot, which waited for the decode. */
static void test_pipeline_decode_slow_holds_nothing_ready(void) {
        pipeline_stats_t st;
        size_t len;
        uint8_t *jpeg;
        tp_t t;

        jpeg = tpd_slow_jpeg(&len);
        CU_ASSERT_FATAL(len < 900000);
        if (tp_setup_with(&t, 0, 1) < 0)
                return;
        tpd_feed(&t, jpeg, len, "image/jpeg");
        free(jpeg);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        tpd_run_until(&t, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_dlq, 0);
        CU_ASSERT_EQUAL_FATAL(t.delivered_predictions, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL_FATAL(t.n_predictions_in_order, 1 + TPD_RGB8);
        for (int i = 0; i < TPD_RGB8; i++) {
                /* An RGB8 record, delivered with offset 0 unfinished: nothing
                 * of the partition committable yet. */
                CU_ASSERT(t.prediction_offsets[i] >= 1 && t.prediction_offsets[i] <= TPD_RGB8);
                CU_ASSERT_EQUAL(t.next_offset_at[i], -1);
        }
        CU_ASSERT_EQUAL(t.prediction_offsets[TPD_RGB8], 0);
        CU_ASSERT_EQUAL(t.next_offset_at[TPD_RGB8], 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(batch_offsets_pending(t.offsets), 0);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(st.batches, 2);
        CU_ASSERT_EQUAL(st.batch_records, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(st.records_in_slots + st.records_decoding, 0);
        tp_teardown(&t);
}

/* A JPEG that cannot be decoded goes to the DLQ when its decode ends,
 * never into a batch; the records behind it are predicted, and the
 * partition's offsets all commit. */
static void test_pipeline_decode_refused_to_dlq(void) {
        static const uint8_t broken[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00, 0x01 };
        pipeline_stats_t st;
        tp_t t;

        if (tp_setup_with(&t, 0, 1) < 0)
                return;
        tpd_feed(&t, broken, sizeof(broken), "image/jpeg");
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        tpd_run_until(&t, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivery_errors, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, TPD_RGB8);
        CU_ASSERT_EQUAL(t.delivered_dlq, 1);
        CU_ASSERT_STRING_EQUAL(t.dlq_code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_EQUAL(t.dlq_value_bytes, sizeof(broken));
        CU_ASSERT_EQUAL(t.next_offset, 1 + TPD_RGB8);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.batch_records, TPD_RGB8);
        CU_ASSERT_EQUAL(st.dlq_out, 1);
        CU_ASSERT_EQUAL(st.records_in_slots + st.records_decoding, 0);
        tp_teardown(&t);
}

/* The intake closes (the exactly-once commit point) while the slow JPEG
 * decodes: the slot it is placed in afterwards goes at once, without the
 * batch delay (held back here), so that the commit point can finish. */
static void test_pipeline_decode_flush_waits_for_decodes(void) {
        pipeline_stats_t st;
        uint64_t end;
        size_t len;
        uint8_t *jpeg;
        tp_t t;

        jpeg = tpd_slow_jpeg(&len);
        if (tp_setup_with(&t, 0, 1) < 0)
                return;
        tpd_feed(&t, jpeg, len, "image/jpeg");
        free(jpeg);
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t.kafka, &(errbuf_t){}), 0);
        end = pipeline_now_us() + TP_TIMEOUT_US;
        do {
                tp_turn(&t);
                pipeline_get_stats(t.pipeline, &st);
        } while (st.records_in < 1 + TPD_RGB8 && !t.fails && pipeline_now_us() < end);
        CU_ASSERT_EQUAL_FATAL(st.records_in, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL_FATAL(st.records_decoding, 1);  /* still decoding: slow enough */
        t.delay_timer_held = true;
        pipeline_set_intake(t.pipeline, false);
        tpd_run_until(&t, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(t.fails, 0);
        CU_ASSERT_EQUAL(t.delivered_predictions, 1 + TPD_RGB8);
        CU_ASSERT_EQUAL(t.next_offset, 1 + TPD_RGB8);
        pipeline_get_stats(t.pipeline, &st);
        CU_ASSERT_EQUAL(st.records_in_slots + st.records_decoding, 0);
        CU_ASSERT_EQUAL(st.batches, 2);
        tp_teardown(&t);
}

int test_pipeline_decode_register(void) {
        static CU_TestInfo tests[] = {
                { "slow_holds_nothing_ready", test_pipeline_decode_slow_holds_nothing_ready },
                { "refused_to_dlq", test_pipeline_decode_refused_to_dlq },
                { "flush_waits_for_decodes", test_pipeline_decode_flush_waits_for_decodes },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("pipeline_decode", tests);
}

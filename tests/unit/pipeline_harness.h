/* The unit tests' stand-in for the daemon around a pipeline (pipeline.h):
 * librdkafka's mock cluster in process, the no-compute executor of
 * pipebench.h, a decode pool when asked, the pipeline's calls up recorded,
 * and one turn of the loop daemon.c runs. test_pipeline.c and
 * test_pipeline_decode.c drive it. */
#ifndef INFERD_TEST_PIPELINE_HARNESS_H
#define INFERD_TEST_PIPELINE_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "core/model.h"
#include "pipeline/batch.h"
#include "config/cfg.h"
#include "kafka/kafka.h"
#include "pipeline/pipeline.h"
#include "decode/pool.h"
#include "engine/engine.h"

#define TP_GOOD 6               /* RGB8 records: one full batch of 4 and a partial one of 2 */
#define TP_MAX_BATCH 4
#define TP_MAX_DELAY_MS 1000    /* long enough that the first batch fills before it, on a loaded machine */
#define TP_TIMEOUT_US (60 * 1000 * 1000ULL)
#define TP_ORDER_MAX 64         /* predictions whose order is kept */

/* Plays the daemon: what the pipeline's ops and Kafka's callbacks did. */
typedef struct tp {
        rd_kafka_t *mock_rk;            /* owns the mock cluster */
        rd_kafka_mock_cluster_t *cluster;
        cfg_t *cfg;
        model_t *model;
        engine_t *engine;
        kafka_t *kafka;
        batch_offsets_t *offsets;
        pipeline_t *pipeline;

        int fails, arms, pump_laters;
        uint64_t deadline_us;           /* armed by ops->arm_delay; 0 = not armed */
        int hold_arms, hold_expiries;
        uint64_t hold_deadline_us;      /* armed by ops->arm_hold; 0 = not armed */
        bool hold_timer_held;           /* the test keeps the hold deadline from firing (a late timer) */
        bool delay_timer_held;          /* ... and the batch-delay deadline */
        bool engine_stalled;            /* tp_turn reaps nothing: the slots stay in flight */
        int delivered_predictions, delivered_dlq, delivery_errors, assigned;
        size_t dlq_value_bytes;         /* the last delivered DLQ copy's value */
        char dlq_omitted[32];           /* ... its inferd-dlq-value-omitted header ("" = none) */
        char dlq_code[32];              /* ... its inferd-error header */
        size_t dlq_big_header_bytes;    /* ... its "big" header's value (SIZE_MAX = none) */
        bool dlq_has_correlation;       /* ... kept the correlation-id header */
        bool redeliver;                 /* tp_delivered hands failed deliveries to pipeline_delivery_failed */
        int skipped;                    /* ops->skipped: expired records finished without output */
        int64_t next_offset;            /* the highest offset the deliveries made committable (-1 = none) */
        decode_pool_t *decode;          /* tp_setup_decode's; NULL: none */
        int64_t prediction_offsets[TP_ORDER_MAX]; /* the source offsets of the predictions, as delivered */
        int64_t next_offset_at[TP_ORDER_MAX];   /* next_offset when each of them was delivered */
        int n_predictions_in_order;
        rd_kafka_headers_t *pred_headers[TP_ORDER_MAX]; /* copies of the predictions' headers, by source
                                                         * offset (owned; NULL: none delivered) */
        char dlq_detail[512];           /* the last delivered DLQ copy's inferd-error-detail */
        char *pred_values[TP_ORDER_MAX]; /* copies of the predictions' values, by source offset (owned) */
        size_t pred_value_len[TP_ORDER_MAX];
        int dlq_codes_seen[TP_ORDER_MAX]; /* DLQ copies delivered by source offset */
        size_t dlq_value_len[TP_ORDER_MAX]; /* ... the last one's value bytes */
} tp_t;

/* Produces n records to "tp.in", RGB8 but for the one at bad (-1: none),
 * of a bad size (the DLQ's); the i-th record's Kafka timestamp is
 * ages_ms[i] milliseconds old (ages_ms NULL: now). Returns 0 or -1. */
int tp_feed_aged(const char *bootstraps, int n, int bad, const int64_t *ages_ms);
int tp_feed_n(const char *bootstraps, int n, int bad);
/* One record of value_len bytes ('x', no content-type, n_ct content-type
 * headers of image/x-rgb8) with a header "big" of header_len bytes, under
 * key "big". Returns 0 or -1. */
int tp_feed_big_ct(const char *bootstraps, size_t value_len, size_t header_len, int n_ct);
int tp_feed_big(const char *bootstraps, size_t value_len, size_t header_len);
/* TP_GOOD RGB8 records and one of a bad size, between the two batches. */
int tp_feed(const char *bootstraps);
/* Records to "tp.in", partition 0, in order: values[i] of lens[i] bytes
 * with content-type types[i] (NULL: none), under key "k<i>". 0 or -1. */
int tp_feed_records(const char *bootstraps, int n, const void *const *values, const size_t *lens,
                    const char *const *types);

/* n RGB8 records to "tp.in", partition 0, under keys "k<i>", the i-th
 * with a copy of headers[i] (NULL: none); the producer may send up to
 * 4 MB. 0 or -1. */
int tp_feed_headers(const char *bootstraps, int n, rd_kafka_headers_t *const *headers);

/* Wires it all as daemon_start does, with a throughput cap (0 = none) and
 * decode_threads decode threads (0: no decode pool). 0, or -1 with a CUnit
 * failure. */
int tp_setup_with(tp_t *t, int max_images_per_s, int decode_threads);
/* tp_setup_with a result cache of cache_entries ([cache] entries). */
int tp_setup_cache(tp_t *t, int cache_entries, int decode_threads);
/* tp_setup with the producer's message.max.bytes set (NULL: librdkafka's). */
int tp_setup_producer_max(tp_t *t, const char *message_max_bytes);
int tp_setup_capped(tp_t *t, int max_images_per_s);
int tp_setup(tp_t *t);
void tp_teardown(tp_t *t);

/* One turn of the loop daemon.c runs. */
void tp_turn(tp_t *t);

/* Runs the pipeline until n outputs in all (or a failure) are delivered;
 * tp_run_to subscribes first. */
void tp_run_until(tp_t *t, int n);
void tp_run_to(tp_t *t, int n);

/* The value of h's last header name into buf ("" when absent: *present). */
const char *tp_header(const rd_kafka_headers_t *h, const char *name, char *buf, size_t size, bool *present);

#endif

/* The unit tests' stand-in for the daemon around a pipeline: see
 * pipeline_harness.h. */
#include "pipeline_harness.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/record.h"
#include "pipeline/pipebench.h"
#include "unit.h"

static void tp_fail(void *userdata, int status) {
        tp_t *t = userdata;

        (void)status;
        t->fails++;
}

static void tp_arm_delay(void *userdata, uint64_t deadline_us) {
        tp_t *t = userdata;

        t->arms++;
        t->deadline_us = deadline_us;
}

static void tp_pump_later(void *userdata) {
        ((tp_t *)userdata)->pump_laters++;
}

static void tp_arm_hold(void *userdata, uint64_t deadline_us) {
        tp_t *t = userdata;

        t->hold_arms++;
        t->hold_deadline_us = deadline_us;
}

static void tp_assigned(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
        tp_t *t = userdata;

        for (int i = 0; i < parts->cnt; i++)
                if (batch_offsets_assign(t->offsets, parts->elems[i].topic, parts->elems[i].partition) > 0)
                        t->assigned++;
}

static bool tp_revoking(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost,
                        bool may_defer) {
        (void)userdata;
        (void)parts;
        (void)lost;
        (void)may_defer;
        return false;
}

static void tp_revoked(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
        tp_t *t = userdata;

        for (int i = 0; i < parts->cnt; i++)
                batch_offsets_revoke(t->offsets, parts->elems[i].topic, parts->elems[i].partition);
}

static void tp_delivered(void *userdata, const rd_kafka_message_t *m) {
        tp_t *t = userdata;
        pipeline_ticket_t *k = m->_private;     /* ours now, as the daemon's */
        const char *topic;
        int32_t partition;
        int64_t next;

        if (!k)
                return;
        if (m->err && t->redeliver && pipeline_delivery_failed(t->pipeline, m) == 0)
                return;         /* produced again: the ticket went with it */
        if (m->err)
                t->delivery_errors++;
        else if (k->dlq) {
                rd_kafka_headers_t *h = NULL;
                const void *v;
                size_t len;

                t->delivered_dlq++;
                if (k->offset >= 0 && k->offset < TP_ORDER_MAX) {
                        t->dlq_codes_seen[k->offset]++;
                        t->dlq_value_len[k->offset] = m->len;
                }
                t->dlq_value_bytes = m->len;
                t->dlq_omitted[0] = 0;
                t->dlq_big_header_bytes = SIZE_MAX;
                t->dlq_has_correlation = false;
                if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                        if (rd_kafka_header_get_last(h, "inferd-dlq-value-omitted", &v, &len) == 0)
                                snprintf(t->dlq_omitted, sizeof(t->dlq_omitted), "%.*s", (int)len, (const char *)v);
                        if (rd_kafka_header_get_last(h, "inferd-error", &v, &len) == 0)
                                snprintf(t->dlq_code, sizeof(t->dlq_code), "%.*s", (int)len, (const char *)v);
                        if (rd_kafka_header_get_last(h, "inferd-error-detail", &v, &len) == 0)
                                snprintf(t->dlq_detail, sizeof(t->dlq_detail), "%.*s", (int)len, (const char *)v);
                        if (rd_kafka_header_get_last(h, "big", &v, &len) == 0)
                                t->dlq_big_header_bytes = len;
                        t->dlq_has_correlation = rd_kafka_header_get_last(h, "correlation-id", &v, &len) == 0;
                }
        }
        else {
                rd_kafka_headers_t *h = NULL;

                t->delivered_predictions++;
                if (k->offset >= 0 && k->offset < TP_ORDER_MAX && !t->pred_headers[k->offset] &&
                    rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
                        t->pred_headers[k->offset] = rd_kafka_headers_copy(h);
                if (k->offset >= 0 && k->offset < TP_ORDER_MAX && !t->pred_values[k->offset] &&
                    (t->pred_values[k->offset] = malloc(m->len + 1))) {
                        memcpy(t->pred_values[k->offset], m->payload, m->len);
                        t->pred_values[k->offset][m->len] = '\0';
                        t->pred_value_len[k->offset] = m->len;
                }
        }
        if (!m->err)
                pipeline_output_delivered(t->pipeline, m);
        if (!m->err && !k->dlq)
                pipeline_delivered(t->pipeline, k, pipeline_now_us());
        if (!m->err && k->part_id > 0 &&
            batch_offsets_done(t->offsets, k->part_id, k->offset, &topic, &partition, &next) == 1 &&
            next > t->next_offset)
                t->next_offset = next;
        if (!m->err && !k->dlq && t->n_predictions_in_order < TP_ORDER_MAX) {
                t->prediction_offsets[t->n_predictions_in_order] = k->offset;
                t->next_offset_at[t->n_predictions_in_order++] = t->next_offset;
        }
        free(k);
}

/* ops->skipped: the ticket is ours, handled as a delivered one. */
static void tp_skipped(void *userdata, pipeline_ticket_t *k) {
        tp_t *t = userdata;
        const char *topic;
        int32_t partition;
        int64_t next;

        t->skipped++;
        if (k->part_id > 0 && batch_offsets_done(t->offsets, k->part_id, k->offset, &topic, &partition, &next) == 1 &&
            next > t->next_offset)
                t->next_offset = next;
        free(k);
}

static void tp_fatal(void *userdata, const char *reason) {
        (void)reason;
        ((tp_t *)userdata)->fails++;
}

/* Produces value (len bytes) to "tp.in", partition 0, under key "k<i>",
 * with headers h (taken; NULL: none) and Kafka timestamp ts_ms (0: now).
 * Returns 0, or -1 (h destroyed). */
static int tp_produce_k(rd_kafka_t *rk, int i, const void *value, size_t len, rd_kafka_headers_t *h, int64_t ts_ms) {
        char key[16];

        if (!h && !(h = rd_kafka_headers_new(0)))
                return -1;
        snprintf(key, sizeof(key), "k%d", i);
        if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("tp.in"), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(ts_ms),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR)
                return 0;
        rd_kafka_headers_destroy(h);
        return -1;
}

/* Produces n records to "tp.in", RGB8 but for the one at bad (-1: none),
 * of a bad size (the DLQ's), with a plain producer of our own; the i-th
 * record's Kafka timestamp is ages_ms[i] milliseconds old (ages_ms NULL:
 * now). Returns 0 or -1. */
int tp_feed_aged(const char *bootstraps, int n, int bad, const int64_t *ages_ms) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        unsigned char *img = calloc(1, RECORD_RGB8_BYTES);
        char why[256];
        rd_kafka_t *rk;
        int r = 0;

        if (!img || rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
                rd_kafka_conf_destroy(conf);
                free(img);
                return -1;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
        if (!rk) {
                rd_kafka_conf_destroy(conf);
                free(img);
                return -1;
        }
        /* conf belongs to rk now. */
        for (int i = 0; i < n && r == 0; i++) {
                size_t len = i == bad ? 3 : RECORD_RGB8_BYTES;

                r = tp_produce_k(rk, i, img, len, NULL, ages_ms ? rectime_now_ms() - ages_ms[i] : 0);
        }
        if (rd_kafka_flush(rk, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
                r = -1;
        rd_kafka_destroy(rk);
        free(img);
        return r;
}

int tp_feed_n(const char *bootstraps, int n, int bad) {
        return tp_feed_aged(bootstraps, n, bad, NULL);
}

/* One record to "tp.in" of value_len bytes (every byte 'x'; no
 * content-type) with a header "big" of header_len bytes when header_len > 0,
 * under key "big". The producer may send up to 4 MB. Returns 0 or -1. */
int tp_feed_big_ct(const char *bootstraps, size_t value_len, size_t header_len, int n_ct) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char *value = malloc(value_len + 1), *hv = malloc(header_len + 1);
        rd_kafka_headers_t *h = rd_kafka_headers_new(2);
        char why[256];
        rd_kafka_t *rk = NULL;
        int r = -1;

        if (!value || !hv || !h)
                goto out;
        memset(value, 'x', value_len);
        memset(hv, 'h', header_len);
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "message.max.bytes", "4000000", why, sizeof(why)) != RD_KAFKA_CONF_OK)
                goto out;
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
        if (!rk)
                goto out;
        conf = NULL;    /* rk's now */
        if (header_len > 0)
                rd_kafka_header_add(h, "big", -1, hv, (ssize_t)header_len);
        rd_kafka_header_add(h, "correlation-id", -1, "c-1", -1);
        for (int i = 0; i < n_ct; i++)
                rd_kafka_header_add(h, "content-type", -1, "image/x-rgb8", -1);
        if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("tp.in"), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY("big", 3),
                              RD_KAFKA_V_VALUE(value, value_len), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                h = NULL;       /* rk's now */
                r = rd_kafka_flush(rk, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
        }
out:
        if (h)
                rd_kafka_headers_destroy(h);
        if (rk)
                rd_kafka_destroy(rk);
        if (conf)
                rd_kafka_conf_destroy(conf);
        free(value);
        free(hv);
        return r;
}

int tp_feed_headers(const char *bootstraps, int n, rd_kafka_headers_t *const *headers) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        unsigned char *img = calloc(1, RECORD_RGB8_BYTES);
        char why[256];
        rd_kafka_t *rk = NULL;
        int r = -1;

        if (!img || rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "message.max.bytes", "4000000", why, sizeof(why)) != RD_KAFKA_CONF_OK)
                goto out;
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
        if (!rk)
                goto out;
        conf = NULL;    /* rk's now */
        r = 0;
        for (int i = 0; i < n && r == 0; i++) {
                r = tp_produce_k(rk, i, img, RECORD_RGB8_BYTES, headers[i] ? rd_kafka_headers_copy(headers[i]) : NULL, 0);
        }
        if (rd_kafka_flush(rk, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
                r = -1;
out:
        if (rk)
                rd_kafka_destroy(rk);
        if (conf)
                rd_kafka_conf_destroy(conf);
        free(img);
        return r;
}

/* The same, without a content-type. */
int tp_feed_big(const char *bootstraps, size_t value_len, size_t header_len) {
        return tp_feed_big_ct(bootstraps, value_len, header_len, 0);
}

/* TP_GOOD RGB8 records and one of a bad size, in the middle, between the
 * two batches. */
int tp_feed(const char *bootstraps) {
        return tp_feed_n(bootstraps, TP_GOOD + 1, TP_MAX_BATCH);
}

int tp_feed_records(const char *bootstraps, int n, const void *const *values, const size_t *lens,
                    const char *const *types) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char why[256];
        rd_kafka_t *rk;
        int r = 0;

        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "message.max.bytes", "4000000", why, sizeof(why)) != RD_KAFKA_CONF_OK) {
                rd_kafka_conf_destroy(conf);
                return -1;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
        if (!rk) {
                rd_kafka_conf_destroy(conf);
                return -1;
        }
        for (int i = 0; i < n && r == 0; i++) {
                rd_kafka_headers_t *h = rd_kafka_headers_new(1);

                if (h && types[i])
                        rd_kafka_header_add(h, "content-type", -1, types[i], -1);
                r = tp_produce_k(rk, i, values[i], lens[i], h, 0);
        }
        if (rd_kafka_flush(rk, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
                r = -1;
        rd_kafka_destroy(rk);
        return r;
}

/* The mock cluster, the engine stand-in, Kafka, the decode pool and the
 * pipeline, wired as daemon_start wires them. */
static int tp_setup_full(tp_t *t, int max_images_per_s, int decode_threads, const char *message_max_bytes,
                         int cache_entries) {
        static const kafka_callbacks_t cb = {
                .assigned = tp_assigned,
                .revoking = tp_revoking,
                .revoked = tp_revoked,
                .delivered = tp_delivered,
                .fatal = tp_fatal,
        };
        static const pipeline_ops_t ops = {
                .fail = tp_fail,
                .arm_delay = tp_arm_delay,
                .pump_later = tp_pump_later,
                .arm_hold = tp_arm_hold,
                .skipped = tp_skipped,
        };
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        engine_options_t o;
        kafka_limits_t lim;
        pipeline_config_t pc;
        plan_t plan;
        errbuf_t err = {};
        char why[256];

        memset(t, 0, sizeof(*t));
        t->next_offset = -1;
        /* This handle only hosts the cluster: it connects nowhere, and says so
         * at level 5 unless told to keep quiet. */
        rd_kafka_conf_set(conf, "log_level", "3", why, sizeof(why));
        t->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->mock_rk);
        t->cluster = rd_kafka_mock_cluster_new(t->mock_rk, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->cluster);
        CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_topic_create(t->cluster, "tp.in", 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
        CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_topic_create(t->cluster, "tp.out", 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
        CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_topic_create(t->cluster, "tp.dlq", 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

        CU_ASSERT_EQUAL_FATAL(cfg_new_defaults(&t->cfg), 0);
        snprintf(t->cfg->kafka.brokers, sizeof(t->cfg->kafka.brokers), "%s",
                 rd_kafka_mock_cluster_bootstraps(t->cluster));
        snprintf(t->cfg->kafka.group_id, sizeof(t->cfg->kafka.group_id), "tp");
        snprintf(t->cfg->kafka.input_topic, sizeof(t->cfg->kafka.input_topic), "tp.in");
        snprintf(t->cfg->kafka.output_topic, sizeof(t->cfg->kafka.output_topic), "tp.out");
        snprintf(t->cfg->kafka.dlq_topic, sizeof(t->cfg->kafka.dlq_topic), "tp.dlq");
        if (message_max_bytes) {
                cfg_kv_t *kv = calloc(1, sizeof(*kv));

                CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
                kv->name = strdup("message.max.bytes");
                kv->value = strdup(message_max_bytes);
                t->cfg->kafka_producer = (cfg_kv_list_t){ .items = kv, .n = 1 };    /* cfg_free's */
        }

        CU_ASSERT_EQUAL_FATAL(model_describe(&t->model), 0);
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = PRECISION_AUTO;
        o.max_batch = TP_MAX_BATCH;
        o.pipeline_depth = 2;
        o.top_k = 5;
        CU_ASSERT_EQUAL_FATAL(engine_plan(t->model, &o, &plan, NULL, 0, &err), 0);
        CU_ASSERT_EQUAL_FATAL(pipebench_open(&t->engine, &plan, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_max_batch(t->engine), TP_MAX_BATCH);
        CU_ASSERT_EQUAL_FATAL(batch_offsets_new(&t->offsets), 0);
        kafka_limits_from_budget(64ULL << 20, &lim);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&t->kafka, t->cfg, &lim, &cb, t, &err), 0);
        if (decode_threads > 0)
                /* Images of up to 30 MP and 4 MB, no cost limit: a test may
                 * send a slow one. One job per slot position, as the
                 * daemon's. */
                CU_ASSERT_EQUAL_FATAL(decode_pool_new(&t->decode, decode_threads, 30000000, 4000000, false, false,
                                                      (size_t)engine_slots(t->engine) * TP_MAX_BATCH, &err),
                                      0);

        pc = (pipeline_config_t){
                .engine = t->engine,
                .kafka = t->kafka,
                .offsets = t->offsets,
                .output_topic = t->cfg->kafka.output_topic,
                .dlq_topic = t->cfg->kafka.dlq_topic,
                .max_batch = TP_MAX_BATCH,
                .top_k = 3,
                .max_delay_ms = TP_MAX_DELAY_MS,
                .max_images_per_s = max_images_per_s,
                .meta = { .model_id = "none", .backend = engine_backend(t->engine), .precision = "fp32" },
                .trace_headers = true,  /* the daemon's default */
                .cache_entries = cache_entries,
                .cache_preprocessing = "decode_fast=0;exif_orientation=0",
                .decode = t->decode,
        };
        CU_ASSERT_EQUAL_FATAL(pipeline_new(&t->pipeline, &pc, &ops, t), 0);
        return 0;
}

int tp_setup_with(tp_t *t, int max_images_per_s, int decode_threads) {
        return tp_setup_full(t, max_images_per_s, decode_threads, NULL, 0);
}

int tp_setup_cache(tp_t *t, int cache_entries, int decode_threads) {
        return tp_setup_full(t, 0, decode_threads, NULL, cache_entries);
}

int tp_setup_producer_max(tp_t *t, const char *message_max_bytes) {
        return tp_setup_full(t, 0, 0, message_max_bytes, 0);
}

int tp_setup_capped(tp_t *t, int max_images_per_s) {
        return tp_setup_with(t, max_images_per_s, 0);
}

int tp_setup(tp_t *t) {
        return tp_setup_capped(t, 0);
}

void tp_teardown(tp_t *t) {
        errbuf_t err = {};

        if (t->kafka)
                kafka_close(t->kafka, &err);
        /* The decode jobs point into the pipeline's staging, and the
         * pipeline's messages go before their handle. */
        decode_pool_free(t->decode);
        pipeline_free(t->pipeline);
        kafka_free(t->kafka);
        engine_free(t->engine);
        batch_offsets_free(t->offsets);
        model_free(t->model);
        cfg_free(t->cfg);
        rd_kafka_mock_cluster_destroy(t->cluster);
        rd_kafka_destroy(t->mock_rk);
        for (int i = 0; i < TP_ORDER_MAX; i++) {
                if (t->pred_headers[i])
                        rd_kafka_headers_destroy(t->pred_headers[i]);
                free(t->pred_values[i]);
        }
}

/* One turn of the loop daemon.c runs. */
void tp_turn(tp_t *t) {
        struct pollfd p[4] = {
                { .fd = kafka_consumer_fd(t->kafka), .events = POLLIN },
                { .fd = kafka_producer_fd(t->kafka), .events = POLLIN },
                { .fd = engine_completion_fd(t->engine), .events = POLLIN },
                { .fd = t->decode ? decode_pool_fd(t->decode) : -1, .events = POLLIN },
        };

        poll(p, 4, 10);
        kafka_fd_clear(p[0].fd);
        kafka_fd_clear(p[1].fd);
        if (t->deadline_us && !t->delay_timer_held && pipeline_now_us() >= t->deadline_us) {
                t->deadline_us = 0;
                pipeline_delay_expired(t->pipeline);
        }
        if (t->hold_deadline_us && !t->hold_timer_held && pipeline_now_us() >= t->hold_deadline_us) {
                t->hold_deadline_us = 0;
                t->hold_expiries++;
                pipeline_hold_expired(t->pipeline);
        }
        if (t->decode)
                pipeline_decoded(t->pipeline);
        pipeline_pump(t->pipeline);
        if (!t->engine_stalled)
                pipeline_reap(t->pipeline);
        kafka_poll_producer(t->kafka);
        pipeline_produce_pending(t->pipeline);
}

void tp_run_until(tp_t *t, int n) {
        uint64_t end = pipeline_now_us() + TP_TIMEOUT_US;

        while (t->delivered_predictions + t->delivered_dlq < n && !t->fails && !t->delivery_errors &&
               pipeline_now_us() < end)
                tp_turn(t);
}

void tp_run_to(tp_t *t, int n) {
        CU_ASSERT_EQUAL_FATAL(kafka_subscribe(t->kafka, &(errbuf_t){}), 0);
        tp_run_until(t, n);
}

const char *tp_header(const rd_kafka_headers_t *h, const char *name, char *buf, size_t size, bool *present) {
        const void *v;
        size_t len;

        *present = h && rd_kafka_header_get_last(h, name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
        snprintf(buf, size, "%.*s", *present ? (int)len : 0, *present ? (const char *)v : "");
        return buf;
}

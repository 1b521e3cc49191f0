/* kafka: librdkafka consumer and producer for the daemon's event loop.
 * See kafka.h. It logs librdkafka's own lines and errors (it is part of the
 * daemon layer), but decides nothing about records, batches or offsets.
 * Exactly-once's transactions and rewind are in kafka_txn.c, rebalances
 * and pausing in kafka_rebalance.c; the struct they share in kafka_priv.h. */
#include "kafka/kafka_priv.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config/log.h"

/* A broker that stays down fails every reconnection (librdkafka backs off
 * from 100 ms to 10 s): each kind of error is logged at most once in this
 * interval, and the next line says how many were not. */
#define KAFKA_ERROR_LOG_INTERVAL_US (60ULL * 1000 * 1000)
#define KAFKA_STATS_INTERVAL_MS "1000"
/* The producer's linger.ms unless [kafka.producer] sets it: 20 ms, not
 * librdkafka's 5. At thousands of predictions a second, each produce request
 * carries four times as many, and the brokers (acks=all, each request
 * replicated) spent 15-55% less CPU on them in paired runs on the real
 * 3-broker cluster sharing two cores with the daemon, which went 1-29%
 * faster (docs/perf.md). A prediction waits at most 15 ms more. */
#define KAFKA_PRODUCER_LINGER_MS "20"

/* librdkafka writes this 8-byte payload to the eventfd (eventfd writes are
 * always 8 bytes: a counter increment of 1). */
static const uint64_t kafka_io_payload = 1;

/* Half of what is left for the prefetch queue, a quarter for the fetch
 * responses, never below what one float32 record needs. fetch.max.bytes
 * (and max.partition.fetch.bytes) is the fetch term over the responses'
 * scale: librdkafka decompresses a response whole, from every leader at
 * once, beyond the queue's limit (plan_kafka_fetch_scale). The last quarter
 * bounds the producer's queue, which librdkafka would otherwise let grow to
 * 1 GiB whatever the budget, e.g. while the output topic's leader is away
 * but the input is still read; when it is full, produce returns QUEUE_FULL
 * and the pipeline holds back. Its floor, 4 MiB, is above the producer's
 * message.max.bytes (1,000,000 by default), so that the largest DLQ copy
 * always fits in an empty queue. The split is the planner's
 * (plan_kafka_split), which shows it. */
static void kafka_limits_set(uint64_t queue, uint64_t fetch_wire, uint64_t producer, kafka_limits_t *ret) {
        ret->queued_max_kbytes = queue / 1024;
        ret->fetch_max_bytes = fetch_wire;
        ret->partition_fetch_max_bytes = fetch_wire;
        ret->producer_queue_kbytes = producer / 1024;
}

void kafka_limits_from_budget(uint64_t bytes, kafka_limits_t *ret) {
        uint64_t q, f, w, p;

        plan_kafka_split(bytes, 0,
                         plan_kafka_fetch_scale(PLAN_KAFKA_FETCH_RESPONSES_DEFAULT,
                                                PLAN_KAFKA_COMPRESSION_RATIO_DEFAULT),
                         &q, &f, &w, &p);
        kafka_limits_set(q, w, p, ret);
}

void kafka_limits_from_plan(const plan_t *p, kafka_limits_t *ret) {
        kafka_limits_set(p->kafka_queue_bytes, p->kafka_fetch_wire_bytes, p->kafka_producer_bytes, ret);
}

static int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, errbuf_t *err) {
        char why[512];

        if (rd_kafka_conf_set(conf, name, value, why, sizeof(why)) != RD_KAFKA_CONF_OK)
                return errbuf_set(err, -EINVAL, "librdkafka refused %s=%s: %s", name, value, why);
        return 0;
}

int kafka_conf_set_pair(rd_kafka_conf_t *conf, const char *kv, char *why, size_t why_len) {
        const char *eq = strchr(kv, '=');
        char *name;
        int r = 0;

        assert(why_len > 0);
        why[0] = '\0';
        if (!eq || eq == kv)
                return -EINVAL;
        name = strndup(kv, (size_t)(eq - kv));
        if (!name) {
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        if (rd_kafka_conf_set(conf, name, eq + 1, why, why_len) != RD_KAFKA_CONF_OK)
                r = -EINVAL;
        free(name);
        return r;
}

/* kafka_conf_set for the planner's limits, which are numbers. */
static int kafka_conf_set_u64(rd_kafka_conf_t *conf, const char *name, uint64_t value, errbuf_t *err) {
        char num[32];

        snprintf(num, sizeof(num), "%" PRIu64, value);
        return kafka_conf_set(conf, name, num, err);
}

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
        (void)rk;
        /* kafka_auth says it once, with the broker and the mechanism; a
         * broker failure (FAIL) also comes as an error event
         * (kafka_error_cb), which logs it once, rate-limited: here both are
         * only debug detail. */
        if ((kafka_auth_is_repeat(fac, buf) || !strcmp(fac, "FAIL")) && level < LOG_DEBUG)
                level = LOG_DEBUG;
        log_full(level, "librdkafka %s: %s", fac, buf);
}

static uint64_t kafka_now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* Counts an error under its librdkafka name, lower-cased and without the
 * leading '_' of client-side errors ("_TRANSPORT" -> "transport"); TLS and
 * SASL failures as "tls" and "auth" (two codes are "auth": one series).
 * Returns its index in k->errors, or -1 when it could not be counted. */
static int kafka_count_error(kafka_t *k, int err) {
        const char *name = kafka_auth_kind(err) ? kafka_auth_kind(err) : rd_kafka_err2name(err);
        char label[64];
        size_t i;
        int r;

        while (*name == '_')
                name++;
        for (i = 0; name[i] && i < sizeof(label) - 1; i++)
                label[i] = (char)tolower((unsigned char)name[i]);
        label[i] = '\0';
        r = metrics_count_add(k->errors, &k->n_errors, KAFKA_ERROR_KINDS_MAX, label);
        return r < 0 ? -1 : r;
}

/* Whether err says the cluster refused who we are (SASL, SSL, ACLs). */
static bool kafka_is_auth_error(int err) {
        if (kafka_auth_kind(err))       /* a refused TLS handshake or SASL authentication */
                return true;
        switch (err) {
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                return true;
        }
        return false;
}

/* Something worked end to end (a record consumed, an output acknowledged,
 * partitions assigned): the cluster is reachable and accepts us. */
void kafka_health_ok(kafka_t *k) {
        k->brokers_down = false;
        k->auth_failed = false;
        kafka_auth_clear(&k->auth);
}

static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
        kafka_t *k = opaque;
        char fatal[512];
        uint64_t now = kafka_now_us();
        int i;

        i = kafka_count_error(k, err);
        if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                k->brokers_down = true;
        if (kafka_is_auth_error(err))
                k->auth_failed = true;
        if (err == RD_KAFKA_RESP_ERR__FATAL) {
                rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
                log_error("Kafka fatal error: %s", fatal);
                if (k->cb.fatal)
                        k->cb.fatal(k->userdata, fatal);
                return;
        }
        if (kafka_auth_kind(err)) {
                kafka_auth_on_error(&k->auth, rk, err, reason);
                return;
        }
        /* Broker outages come here and recover by themselves. Every one is
         * counted (inferd_kafka_errors_total); the journal gets one line per
         * kind a minute at most. */
        if (i < 0) {
                log_warning("Kafka error (%s): %s", rd_kafka_err2name(err), reason);
                return;
        }
        if (k->error_logged_us[i] && now - k->error_logged_us[i] < KAFKA_ERROR_LOG_INTERVAL_US) {
                k->error_unlogged[i]++;
                return;
        }
        if (k->error_unlogged[i])
                log_warning("Kafka error (%s): %s (and %" PRIu64 " more of this kind not logged in the last %.0f s; "
                            "at most one line a minute per kind)",
                            rd_kafka_err2name(err), reason, k->error_unlogged[i],
                            (double)(now - k->error_logged_us[i]) / 1e6);
        else
                log_warning("Kafka error (%s): %s (repeats of this kind are logged at most once a minute)",
                            rd_kafka_err2name(err), reason);
        k->error_logged_us[i] = now;
        k->error_unlogged[i] = 0;
}

static void kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        kafka_t *k = opaque;

        (void)rk;
        if (!m->err)
                kafka_health_ok(k);
        /* librdkafka fails a transaction (an abortable error: a partition
         * it could not add to it, a request timed out) by purging the
         * outputs it still holds, each reported with ERR__PURGE_QUEUE or
         * _INFLIGHT (rdkafka_txnmgr.c's set_abortable_error). With no abort
         * of ours under way, that is how the failure is learned: from the
         * API, not from its TXNERR log line, which a [kafka.producer]
         * log_level hides (issue 36). An abort's own purged outputs are
         * served when it is collected, with the transaction closed. */
        if (k->transactional && k->txn_open && !k->txn_job.busy &&
            (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT))
                k->txn_failed = true;
        if (k->cb.delivered)
                k->cb.delivered(k->userdata, m);
}

/* --- the partitions' lag, for the metrics ------------------------------------ */

kafka_part_t *kafka_part(kafka_t *k, int32_t partition, bool add) {
        for (size_t i = 0; i < k->n_parts; i++)
                if (k->parts[i].partition == partition)
                        return &k->parts[i];
        if (!add)
                return NULL;
        if (k->n_parts == k->cap_parts) {
                size_t cap = k->cap_parts ? k->cap_parts * 2 : 16;
                kafka_part_t *p = realloc(k->parts, cap * sizeof(*p));

                if (!p)
                        return NULL;
                k->parts = p;
                k->cap_parts = cap;
        }
        k->parts[k->n_parts] = (kafka_part_t){ .partition = partition, .lag_records = -1, .last_taken_ts_ms = -1 };
        return &k->parts[k->n_parts++];
}

void kafka_parts_assigned(kafka_t *k, const rd_kafka_topic_partition_list_t *parts, bool assigned) {
        for (int i = 0; i < parts->cnt; i++) {
                kafka_part_t *p;

                if (strcmp(parts->elems[i].topic, k->cfg->kafka.input_topic) != 0)
                        continue;
                p = kafka_part(k, parts->elems[i].partition, assigned);
                if (!p)
                        continue;
                p->assigned = assigned;
                p->lag_records = -1;    /* what we knew is another owner's now */
        }
}

int64_t kafka_json_int(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);

        return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* librdkafka's statistics (statistics.interval.ms), served on the consumer
 * queue, so on the loop thread: each assigned partition's lag is its high
 * watermark (the last stable offset under read_committed, which is what the
 * consumer can read) minus its position (app_offset: the next offset to hand
 * to us; before the first record, the committed offset, or the low
 * watermark where the group has none, as auto.offset.reset=earliest does).
 * Returns 0: librdkafka frees json. */
static int kafka_stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque) {
        kafka_t *k = opaque;
        json_t *root, *parts;
        json_error_t jerr;
        const char *key;
        json_t *v;
        bool committed = k->cfg->kafka.delivery == CFG_DELIVERY_EXACTLY_ONCE;

        (void)rk;
        root = json_loadb(json, json_len, 0, &jerr);
        if (!root) {
                log_debug("Unreadable librdkafka statistics: %s", jerr.text);
                return 0;
        }
        if (kafka_json_int(root, "rxmsgs") >= 0)
                k->rx_msgs = kafka_json_int(root, "rxmsgs");
        kafka_fetch_check(k, root);
        parts = json_object_get(json_object_get(json_object_get(root, "topics"), k->cfg->kafka.input_topic),
                                "partitions");
        /* A broker the consumer is connected to again ends an outage. */
        json_object_foreach(json_object_get(root, "brokers"), key, v)
                if (kafka_json_int(v, "nodeid") >= 0 && json_is_string(json_object_get(v, "state")) &&
                    !strcmp(json_string_value(json_object_get(v, "state")), "UP"))
                        k->brokers_down = false;
        json_object_foreach(parts, key, v) {
                int64_t id = kafka_json_int(v, "partition"), hw, pos;
                kafka_part_t *p;

                if (id < 0 || !(p = kafka_part(k, (int32_t)id, false)) || !p->assigned)
                        continue;
                hw = kafka_json_int(v, committed ? "ls_offset" : "hi_offset");
                pos = kafka_json_int(v, "app_offset");
                if (pos < 0)
                        pos = kafka_json_int(v, "committed_offset");
                if (pos < 0)
                        pos = kafka_json_int(v, "lo_offset");
                if (hw >= 0 && pos >= 0)
                        p->lag_records = hw > pos ? hw - pos : 0;
        }
        json_decref(root);
        return 0;
}

size_t kafka_get_lag(const kafka_t *k, metrics_lag_t *out, size_t max, int64_t now_ms) {
        size_t n = 0;

        for (size_t i = 0; i < k->n_parts && n < max; i++) {
                const kafka_part_t *p = &k->parts[i];
                double s = 0;

                if (!p->assigned || p->lag_records < 0)
                        continue;
                if (p->lag_records > 0 && p->last_taken_ts_ms >= 0 && now_ms > p->last_taken_ts_ms)
                        s = (double)(now_ms - p->last_taken_ts_ms) / 1e3;
                out[n++] = (metrics_lag_t){ .topic = k->cfg->kafka.input_topic,
                                            .partition = p->partition,
                                            .records = p->lag_records,
                                            .seconds = s };
        }
        return n;
}

const char *kafka_get_auth_error(const kafka_t *k) {
        return kafka_auth_reason(&k->auth);
}

int kafka_get_assigned(const kafka_t *k) {
        int n = 0;

        for (size_t i = 0; i < k->n_parts; i++)
                n += k->parts[i].assigned;
        return n;
}

kafka_health_t kafka_get_health(const kafka_t *k) {
        if (k->auth_failed)
                return KAFKA_HEALTH_AUTH_FAILED;
        if (k->brokers_down)
                return KAFKA_HEALTH_UNREACHABLE;
        return KAFKA_HEALTH_OK;
}

size_t kafka_get_errors(const kafka_t *k, const metrics_count_t **ret) {
        *ret = k->errors;
        return k->n_errors;
}

/* ssl.certificate.verify_cb, on librdkafka's threads: see kafka_auth_verify. */
static int kafka_verify_cb(rd_kafka_t *rk, const char *broker_name, int32_t broker_id, int *x509_error, int depth,
                           const char *buf, size_t size, char *errstr, size_t errstr_size, void *opaque) {
        kafka_t *k = opaque;

        (void)rk;
        (void)broker_id;
        (void)buf;
        (void)size;
        return kafka_auth_verify(&k->auth, broker_name, depth, x509_error, errstr, errstr_size);
}

static int kafka_new_handle(kafka_t *k, rd_kafka_type_t type, rd_kafka_conf_t *conf, rd_kafka_t **ret,
                            errbuf_t *err) {
        char why[512];
        rd_kafka_t *rk;

        rd_kafka_conf_set_opaque(conf, k);
        rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
        rd_kafka_conf_set_error_cb(conf, kafka_error_cb);
        /* The reason of a refused certificate; RD_KAFKA_CONF_INVALID only
         * for a librdkafka built without SSL, where it cannot matter. */
        (void)rd_kafka_conf_set_ssl_cert_verify_cb(conf, kafka_verify_cb);
        rk = rd_kafka_new(type, conf, why, sizeof(why));
        if (!rk) {
                rd_kafka_conf_destroy(conf);
                return errbuf_set(err, -EINVAL, "Kafka %s: %s", type == RD_KAFKA_CONSUMER ? "consumer" : "producer",
                                  why);
        }
        /* conf belongs to rk now. */
        *ret = rk;
        return 0;
}

static int kafka_new_consumer(kafka_t *k, const cfg_t *c, const kafka_limits_t *lim, errbuf_t *err) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        int r;

        if (!conf)
                return -ENOMEM;
        if ((r = kafka_conf_set(conf, "bootstrap.servers", c->kafka.brokers, err)) < 0 ||
            (r = kafka_conf_set(conf, "group.id", c->kafka.group_id, err)) < 0 ||
            (r = kafka_conf_set(conf, "auto.offset.reset", "earliest", err)) < 0 ||
            /* Exactly-once commits offsets only inside transactions. */
            (r = kafka_conf_set(conf, "enable.auto.commit",
                                c->kafka.delivery == CFG_DELIVERY_EXACTLY_ONCE ? "false" : "true", err)) < 0 ||
            (r = kafka_conf_set(conf, "enable.partition.eof", "false", err)) < 0 ||
            (r = kafka_conf_set(conf, "log.queue", "true", err)) < 0 ||
            /* The metrics' lag, and the fetch responses against the plan
             * (kafka_fetch_check), when the endpoint is on (the default);
             * [kafka.consumer] may set another interval, or set one
             * without it. */
            (c->metrics.listen[0] &&
             (r = kafka_conf_set(conf, "statistics.interval.ms", KAFKA_STATS_INTERVAL_MS, err)) < 0))
                goto fail;
        if ((r = kafka_conf_set_u64(conf, "queued.max.messages.kbytes", lim->queued_max_kbytes, err)) < 0 ||
            (r = kafka_conf_set_u64(conf, "fetch.max.bytes", lim->fetch_max_bytes, err)) < 0 ||
            (r = kafka_conf_set_u64(conf, "max.partition.fetch.bytes", lim->partition_fetch_max_bytes, err)) < 0)
                goto fail;
        if (c->kafka.delivery == CFG_DELIVERY_EXACTLY_ONCE &&
            (r = kafka_conf_set(conf, "isolation.level", "read_committed", err)) < 0)
                goto fail;
        if (c->kafka.static_membership) {
                /* Static membership (KIP-345): an id per group and instance,
                 * so that a restart within session.timeout.ms gets its
                 * partitions back without a rebalance, while blue and green
                 * (different instances) never share one. */
                char id[2 * CFG_STRING_MAX + 2];

                snprintf(id, sizeof(id), "%s-%s", c->kafka.group_id, c->service.instance);
                if ((r = kafka_conf_set(conf, "group.instance.id", id, err)) < 0)
                        goto fail;
                log_info("Static membership: group.instance.id %s", id);
        }
        r = cfg_kafka_apply(c, 0, conf, err);
        if (r < 0)
                goto fail;
        /* Served only when statistics.interval.ms is set: by the metrics'
         * default above or by [kafka.consumer]. */
        rd_kafka_conf_set_stats_cb(conf, kafka_stats_cb);
        /* Not negotiable: at-least-once rests on storing offsets ourselves. */
        if ((r = kafka_conf_set(conf, "enable.auto.offset.store", "false", err)) < 0)
                goto fail;
        rd_kafka_conf_set_rebalance_cb(conf, kafka_rebalance_cb);
        return kafka_new_handle(k, RD_KAFKA_CONSUMER, conf, &k->consumer, err);
fail:
        rd_kafka_conf_destroy(conf);
        return r;
}

static int kafka_new_producer(kafka_t *k, const cfg_t *c, const kafka_limits_t *lim, errbuf_t *err) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        int r;

        if (!conf)
                return -ENOMEM;
        if ((r = kafka_conf_set(conf, "bootstrap.servers", c->kafka.brokers, err)) < 0 ||
            (r = kafka_conf_set(conf, "linger.ms", KAFKA_PRODUCER_LINGER_MS, err)) < 0 ||
            (r = kafka_conf_set(conf, "log.queue", "true", err)) < 0)
                goto fail;
        if ((r = kafka_conf_set_u64(conf, "queue.buffering.max.kbytes", lim->producer_queue_kbytes, err)) < 0)
                goto fail;
        r = cfg_kafka_apply(c, 1, conf, err);
        if (r < 0)
                goto fail;
        /* No duplicates from the producer's own retries. */
        if ((r = kafka_conf_set(conf, "enable.idempotence", "true", err)) < 0)
                goto fail;
        if (c->kafka.delivery == CFG_DELIVERY_EXACTLY_ONCE) {
                /* One id per group, instance and input topic: a restart of
                 * the same instance fences its previous incarnation, while
                 * blue and green (and other groups) never fence each other;
                 * a zombie of another instance is fenced by the group
                 * generation instead (KIP-447). */
                char id[3 * CFG_STRING_MAX + 3];

                snprintf(id, sizeof(id), "%s-%s-%s", c->kafka.group_id, c->service.instance, c->kafka.input_topic);
                if ((r = kafka_conf_set(conf, "transactional.id", id, err)) < 0)
                        goto fail;
                k->transactional = true;
        }
        rd_kafka_conf_set_dr_msg_cb(conf, kafka_dr_cb);
        return kafka_new_handle(k, RD_KAFKA_PRODUCER, conf, &k->producer, err);
fail:
        rd_kafka_conf_destroy(conf);
        return r;
}

int kafka_new(kafka_t **ret, const cfg_t *c, const kafka_limits_t *limits, const kafka_callbacks_t *cb,
              void *userdata, errbuf_t *err) {
        kafka_t *k;
        rd_kafka_resp_err_t re;
        int r;

        assert(ret && c && limits && cb);
        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        k->consumer_fd = k->producer_fd = k->txn_job.fd = -1;
        k->rx_msgs = -1;
        k->limits = *limits;
        kafka_fetch_say_overrides(c, limits);
        kafka_auth_init(&k->auth);
        k->cfg = c;
        k->cb = *cb;
        k->userdata = userdata;

        k->consumer_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        k->producer_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (k->consumer_fd < 0 || k->producer_fd < 0) {
                r = errbuf_set(err, -errno, "eventfd: %s", strerror(errno));
                goto fail;
        }
        r = kafka_new_consumer(k, c, limits, err);
        if (r < 0)
                goto fail;
        r = kafka_new_producer(k, c, limits, err);
        if (r < 0)
                goto fail;
        if ((r = kafka_txn_thread_start(k, err)) < 0)
                goto fail;

        /* Logs, errors and rebalances on the consumer's main queue go to the
         * consumer queue, so one fd covers them all. */
        re = rd_kafka_poll_set_consumer(k->consumer);
        if (re) {
                r = errbuf_set(err, -EIO, "Kafka consumer: %s", rd_kafka_err2str(re));
                goto fail;
        }
        rd_kafka_set_log_queue(k->consumer, NULL);
        rd_kafka_set_log_queue(k->producer, NULL);
        k->consumer_q = rd_kafka_queue_get_consumer(k->consumer);
        k->producer_q = rd_kafka_queue_get_main(k->producer);
        if (!k->consumer_q || !k->producer_q) {
                r = errbuf_set(err, -EIO, "Kafka: no queue to wait on");
                goto fail;
        }
        rd_kafka_queue_io_event_enable(k->consumer_q, k->consumer_fd, &kafka_io_payload, sizeof(kafka_io_payload));
        rd_kafka_queue_io_event_enable(k->producer_q, k->producer_fd, &kafka_io_payload, sizeof(kafka_io_payload));
        *ret = k;
        return 0;
fail:
        kafka_free(k);
        return r;
}

void kafka_free(kafka_t *k) {
        if (!k)
                return;
        kafka_txn_thread_stop(k);
        if (k->revoke)
                rd_kafka_topic_partition_list_destroy(k->revoke);
        if (k->consumer_q) {
                rd_kafka_queue_io_event_enable(k->consumer_q, -1, NULL, 0);
                rd_kafka_queue_destroy(k->consumer_q);
        }
        if (k->producer_q) {
                rd_kafka_queue_io_event_enable(k->producer_q, -1, NULL, 0);
                rd_kafka_queue_destroy(k->producer_q);
        }
        if (k->close_q) {
                rd_kafka_queue_io_event_enable(k->close_q, -1, NULL, 0);
                rd_kafka_queue_destroy(k->close_q);
        }
        /* Without a close that finished (an abort, or a drain that timed
         * out while leaving): leave the group to the session timeout rather
         * than run the revoke callback, or wait for the group, from here. */
        if (k->consumer)
                rd_kafka_destroy_flags(k->consumer, rd_kafka_consumer_closed(k->consumer) ?
                                                    0 : RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        if (k->producer)
                rd_kafka_destroy(k->producer);
        if (k->consumer_fd >= 0)
                close(k->consumer_fd);
        if (k->producer_fd >= 0)
                close(k->producer_fd);
        for (size_t i = 0; i < k->n_errors; i++)
                free((char *)k->errors[i].label);
        free(k->parts);
        kafka_auth_done(&k->auth);
        free(k);
}

int kafka_subscribe(kafka_t *k, errbuf_t *err) {
        rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
        rd_kafka_resp_err_t re;

        if (!topics)
                return -ENOMEM;
        rd_kafka_topic_partition_list_add(topics, k->cfg->kafka.input_topic, RD_KAFKA_PARTITION_UA);
        re = rd_kafka_subscribe(k->consumer, topics);
        rd_kafka_topic_partition_list_destroy(topics);
        if (re)
                return errbuf_set(err, -EIO, "Failed to subscribe to '%s': %s", k->cfg->kafka.input_topic,
                                  rd_kafka_err2str(re));
        return 0;
}

int kafka_consumer_fd(const kafka_t *k) {
        return k->consumer_fd;
}

int kafka_producer_fd(const kafka_t *k) {
        return k->producer_fd;
}

void kafka_fd_clear(int fd) {
        uint64_t v;

        while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
                ;
}

int kafka_consume(kafka_t *k, rd_kafka_message_t **ret) {
        rd_kafka_message_t *m;

        /* A deferred revoke: nothing is served until its unassign. */
        if (k->closed || k->revoke)
                return 0;
        m = rd_kafka_consumer_poll(k->consumer, 0);
        if (!m)
                return 0;
        if (!m->err) {
                kafka_part_t *p = kafka_part(k, m->partition, false);

                kafka_health_ok(k);
                if (p)
                        p->last_taken_ts_ms = rd_kafka_message_timestamp(m, NULL);
                if (k->paused)
                        kafka_pause_again(k, m);
        }
        *ret = m;
        return 1;
}

void kafka_poll_producer(kafka_t *k) {
        rd_kafka_poll(k->producer, 0);
}

size_t kafka_headers_bytes(const rd_kafka_headers_t *headers) {
        const char *name;
        const void *v;
        size_t len, i = 0, n = 0;

        while (headers && rd_kafka_header_get_all(headers, i++, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                n += strlen(name) + len;
        return n;
}

int kafka_produce(kafka_t *k, const char *topic, const void *key, size_t key_len, const void *value,
                  size_t value_len, rd_kafka_headers_t *headers, void *opaque, errbuf_t *err) {
        rd_kafka_resp_err_t re;
        char limit[32] = "?";
        size_t limit_len = sizeof(limit), header_bytes;
        int r;

        /* Exactly-once: the first output after a commit opens the next
         * transaction, so an idle daemon holds none open. */
        if (k->transactional && !k->txn_open && (r = kafka_txn_begin(k, err)) < 0)
                return r;

        re = rd_kafka_producev(k->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                               RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                               RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        if (re == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                return -ENOBUFS;
        if (re == RD_KAFKA_RESP_ERR__STATE && k->transactional)
                return errbuf_set(err, -ECANCELED, "Failed to produce to '%s': the transaction has failed and "
                                  "must be aborted", topic);
        if (re == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
                /* The headers count: a large one alone can make it too large. */
                header_bytes = kafka_headers_bytes(headers);
                if (rd_kafka_conf_get(rd_kafka_conf(k->producer), "message.max.bytes", limit, &limit_len) !=
                    RD_KAFKA_CONF_OK)
                        snprintf(limit, sizeof(limit), "?");
                return errbuf_set(err, -EMSGSIZE, "Failed to produce to '%s': a record of %zu bytes (key %zu, "
                                  "value %zu, headers %zu) is over the producer's message.max.bytes (%s)", topic,
                                  key_len + value_len + header_bytes, key_len, value_len, header_bytes, limit);
        }
        if (re)
                return errbuf_set(err, -EIO, "Failed to produce to '%s': %s", topic, rd_kafka_err2str(re));
        /* headers belong to librdkafka now. */
        return 0;
}

int kafka_store_offset(kafka_t *k, const char *topic, int32_t partition, int64_t next_offset, errbuf_t *err) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_resp_err_t re;

        if (!l)
                return -ENOMEM;
        rd_kafka_topic_partition_list_add(l, topic, partition)->offset = next_offset;
        re = rd_kafka_offsets_store(k->consumer, l);
        if (!re && l->elems[0].err)
                re = l->elems[0].err;
        rd_kafka_topic_partition_list_destroy(l);
        if (re)
                return errbuf_set(err, -EIO, "Failed to store offset %" PRId64 " of %s [%" PRId32 "]: %s",
                                  next_offset, topic, partition, rd_kafka_err2str(re));
        return 0;
}

int kafka_commit_async(kafka_t *k) {
        rd_kafka_resp_err_t re;

        if (k->closed)
                return 0;
        re = rd_kafka_commit(k->consumer, NULL, 1);
        return re && re != RD_KAFKA_RESP_ERR__NO_OFFSET ? -EIO : 0;
}

int kafka_flush(kafka_t *k, int timeout_ms, int *left) {
        rd_kafka_resp_err_t re = rd_kafka_flush(k->producer, timeout_ms);

        if (left)
                *left = rd_kafka_outq_len(k->producer);
        return re == RD_KAFKA_RESP_ERR__TIMED_OUT ? -ETIMEDOUT : 0;
}

int kafka_producer_outstanding(const kafka_t *k) {
        return rd_kafka_outq_len(k->producer);
}

/* Leaving the group without waiting (issue 36): librdkafka's close runs on
 * its own threads (the last revoke, the final commit of at-least-once's
 * auto-commit, the LeaveGroup and its answer) and posts its ops to a queue
 * of ours, whose eventfd is the consumer's: the owner's loop, woken as for
 * records, serves it with kafka_close_serve until the consumer has left. */
int kafka_close_start(kafka_t *k, errbuf_t *err) {
        rd_kafka_error_t *e;

        if (k->closed)
                return 0;
        kafka_revoke_done(k);   /* the owner's pipeline is empty: none should be pending */
        k->closed = true;
        /* Refetches show here: a pause drops what librdkafka had prefetched
         * for the partition, and its resume fetches it again
         * (tools/bench-pipeline's fetches per record). */
        if (k->rx_msgs >= 0)
                log_info("The consumer fetched %" PRId64 " records from the brokers "
                         "(librdkafka's rxmsgs at its last statistics)", k->rx_msgs);
        k->close_q = rd_kafka_queue_new(k->consumer);
        if (!k->close_q) {
                k->close_done = true;
                return errbuf_set(err, -ENOMEM, "Failed to leave the consumer group: out of memory");
        }
        rd_kafka_queue_io_event_enable(k->close_q, k->consumer_fd, &kafka_io_payload, sizeof(kafka_io_payload));
        k->close_started_us = kafka_now_us();
        e = rd_kafka_consumer_close_queue(k->consumer, k->close_q);
        if (e) {
                errbuf_set(err, -EIO, "Failed to leave the consumer group: %s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
                k->close_done = true;
                return -EIO;
        }
        return 0;
}

int kafka_close_serve(kafka_t *k) {
        rd_kafka_message_t *m;

        if (!k->closed || k->close_done)
                return k->close_done;
        /* The revoke's callback runs from here. Records still queued are
         * dropped: no offset of theirs was stored, so their partitions'
         * next owner reads them again. */
        while ((m = rd_kafka_consume_queue(k->close_q, 0)))
                rd_kafka_message_destroy(m);
        if (!rd_kafka_consumer_closed(k->consumer))
                return 0;
        k->close_done = true;
        log_info("Left the consumer group in %.2f s", (double)(kafka_now_us() - k->close_started_us) / 1e6);
        return 1;
}

int kafka_close(kafka_t *k, errbuf_t *err) {
        struct pollfd p = { .fd = k->consumer_fd, .events = POLLIN };
        int r = kafka_close_start(k, err);

        while (r == 0 && !kafka_close_serve(k)) {
                if (poll(&p, 1, 100) > 0)
                        kafka_fd_clear(k->consumer_fd);
        }
        return r;
}

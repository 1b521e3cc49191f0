/* kafka: librdkafka consumer and producer for the daemon's event loop.
 * See kafka.h. It logs librdkafka's own lines and errors (it is part of the
 * daemon layer), but decides nothing about records, batches or offsets. */
#include "daemon/kafka.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/log.h"

struct kafka {
        rd_kafka_t *consumer;
        rd_kafka_t *producer;
        rd_kafka_queue_t *consumer_q;   /* the consumer queue; the main queue is forwarded to it */
        rd_kafka_queue_t *producer_q;   /* the producer's main queue */
        int consumer_fd;                /* eventfd: the consumer queue became non-empty */
        int producer_fd;                /* eventfd: the producer queue became non-empty */
        const cfg_t *cfg;               /* borrowed, for the topic names */
        kafka_callbacks_t cb;
        void *userdata;
        bool paused;
        bool closed;
};

/* librdkafka writes this 8-byte payload to the eventfd (eventfd writes are
 * always 8 bytes: a counter increment of 1). */
static const uint64_t kafka_io_payload = 1;

void kafka_limits_from_budget(uint64_t bytes, kafka_limits_t *ret) {
        /* Half of what is left for the prefetch queue, a quarter for one fetch
         * response; never below what one float32 record needs. The last
         * quarter bounds the producer's queue, which librdkafka would
         * otherwise let grow to 1 GiB whatever the budget, e.g. while the
         * output topic's leader is away but the input is still read; when it
         * is full, produce returns QUEUE_FULL and the pipeline holds back.
         * Its floor, 4 MiB, is above the producer's message.max.bytes
         * (1,000,000 by default), so that the largest DLQ copy always fits in
         * an empty queue. */
        uint64_t q = bytes / 2, f = bytes / 4, p = bytes / 4;

        if (q < 4ull << 20)
                q = 4ull << 20;
        if (q > 1ull << 30)
                q = 1ull << 30;
        if (f < 2ull << 20)
                f = 2ull << 20;
        if (f > 256ull << 20)
                f = 256ull << 20;
        if (p < 4ull << 20)
                p = 4ull << 20;
        if (p > 1ull << 30)
                p = 1ull << 30;
        ret->queued_max_kbytes = q / 1024;
        ret->fetch_max_bytes = f;
        ret->partition_fetch_max_bytes = f;
        ret->producer_queue_kbytes = p / 1024;
}

static int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, errbuf_t *err) {
        char why[512];

        if (rd_kafka_conf_set(conf, name, value, why, sizeof(why)) != RD_KAFKA_CONF_OK)
                return errbuf_set(err, -EINVAL, "librdkafka refused %s=%s: %s", name, value, why);
        return 0;
}

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
        (void)rk;
        log_full(level, "librdkafka %s: %s", fac, buf);
}

static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
        kafka_t *k = opaque;
        char fatal[512];

        if (err == RD_KAFKA_RESP_ERR__FATAL) {
                rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
                log_error("Kafka fatal error: %s", fatal);
                if (k->cb.fatal)
                        k->cb.fatal(k->userdata, fatal);
                return;
        }
        /* Broker outages come here and recover by themselves. */
        log_warning("Kafka error (%s): %s", rd_kafka_err2name(err), reason);
}

static void kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        kafka_t *k = opaque;

        (void)rk;
        if (k->cb.delivered)
                k->cb.delivered(k->userdata, m);
}

static bool kafka_cooperative(kafka_t *k) {
        return strcmp(rd_kafka_rebalance_protocol(k->consumer), "COOPERATIVE") == 0;
}

static void kafka_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                               void *opaque) {
        kafka_t *k = opaque;
        bool coop = kafka_cooperative(k);
        rd_kafka_error_t *e = NULL;
        rd_kafka_resp_err_t re = RD_KAFKA_RESP_ERR_NO_ERROR;

        switch (err) {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
                log_info("Assigned %d partition(s) (%s rebalance)", parts->cnt, coop ? "cooperative" : "eager");
                if (coop)
                        e = rd_kafka_incremental_assign(rk, parts);
                else
                        re = rd_kafka_assign(rk, parts);
                if (e || re) {
                        log_error("Failed to assign partitions: %s",
                                  e ? rd_kafka_error_string(e) : rd_kafka_err2str(re));
                        rd_kafka_error_destroy(e);
                        break;
                }
                if (k->cb.assigned)
                        k->cb.assigned(k->userdata, parts);
                /* Set the pause state either way: librdkafka keeps a
                 * partition's pause flag across an unassign, so a partition
                 * paused when it was revoked would come back paused. */
                if (k->paused)
                        rd_kafka_pause_partitions(rk, parts);
                else
                        rd_kafka_resume_partitions(rk, parts);
                break;

        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS: {
                bool lost = rd_kafka_assignment_lost(rk);

                log_info("Revoking %d partition(s)%s (%s rebalance)", parts->cnt, lost ? ", lost" : "",
                         coop ? "cooperative" : "eager");
                if (k->cb.revoking)
                        k->cb.revoking(k->userdata, parts, lost);
                if (coop)
                        e = rd_kafka_incremental_unassign(rk, parts);
                else
                        re = rd_kafka_assign(rk, NULL);
                if (e || re)
                        log_error("Failed to unassign partitions: %s",
                                  e ? rd_kafka_error_string(e) : rd_kafka_err2str(re));
                rd_kafka_error_destroy(e);
                if (k->cb.revoked)
                        k->cb.revoked(k->userdata, parts);
                break;
        }
        default:
                log_error("Kafka rebalance failed: %s", rd_kafka_err2str(err));
                if (coop)
                        rd_kafka_error_destroy(rd_kafka_incremental_unassign(rk, parts));
                else
                        rd_kafka_assign(rk, NULL);
                break;
        }
}

static int kafka_new_handle(kafka_t *k, rd_kafka_type_t type, rd_kafka_conf_t *conf, rd_kafka_t **ret,
                            errbuf_t *err) {
        char why[512];
        rd_kafka_t *rk;

        rd_kafka_conf_set_opaque(conf, k);
        rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
        rd_kafka_conf_set_error_cb(conf, kafka_error_cb);
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
        char num[32];
        int r;

        if (!conf)
                return -ENOMEM;
        if ((r = kafka_conf_set(conf, "bootstrap.servers", c->kafka.brokers, err)) < 0 ||
            (r = kafka_conf_set(conf, "group.id", c->kafka.group_id, err)) < 0 ||
            (r = kafka_conf_set(conf, "auto.offset.reset", "earliest", err)) < 0 ||
            (r = kafka_conf_set(conf, "enable.auto.commit", "true", err)) < 0 ||
            (r = kafka_conf_set(conf, "enable.partition.eof", "false", err)) < 0 ||
            (r = kafka_conf_set(conf, "log.queue", "true", err)) < 0)
                goto fail;
        snprintf(num, sizeof(num), "%" PRIu64, lim->queued_max_kbytes);
        if ((r = kafka_conf_set(conf, "queued.max.messages.kbytes", num, err)) < 0)
                goto fail;
        snprintf(num, sizeof(num), "%" PRIu64, lim->fetch_max_bytes);
        if ((r = kafka_conf_set(conf, "fetch.max.bytes", num, err)) < 0)
                goto fail;
        snprintf(num, sizeof(num), "%" PRIu64, lim->partition_fetch_max_bytes);
        if ((r = kafka_conf_set(conf, "max.partition.fetch.bytes", num, err)) < 0)
                goto fail;
        r = cfg_kafka_apply(c, 0, conf, err);
        if (r < 0)
                goto fail;
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
        char num[32];
        int r;

        if (!conf)
                return -ENOMEM;
        if ((r = kafka_conf_set(conf, "bootstrap.servers", c->kafka.brokers, err)) < 0 ||
            (r = kafka_conf_set(conf, "linger.ms", "5", err)) < 0 ||
            (r = kafka_conf_set(conf, "log.queue", "true", err)) < 0)
                goto fail;
        snprintf(num, sizeof(num), "%" PRIu64, lim->producer_queue_kbytes);
        if ((r = kafka_conf_set(conf, "queue.buffering.max.kbytes", num, err)) < 0)
                goto fail;
        r = cfg_kafka_apply(c, 1, conf, err);
        if (r < 0)
                goto fail;
        /* No duplicates from the producer's own retries. */
        if ((r = kafka_conf_set(conf, "enable.idempotence", "true", err)) < 0)
                goto fail;
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
        k->consumer_fd = k->producer_fd = -1;
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
        if (k->consumer_q) {
                rd_kafka_queue_io_event_enable(k->consumer_q, -1, NULL, 0);
                rd_kafka_queue_destroy(k->consumer_q);
        }
        if (k->producer_q) {
                rd_kafka_queue_io_event_enable(k->producer_q, -1, NULL, 0);
                rd_kafka_queue_destroy(k->producer_q);
        }
        /* Without kafka_close (an abort): leave the group to the session
         * timeout rather than run the revoke callback from here. */
        if (k->consumer)
                rd_kafka_destroy_flags(k->consumer, k->closed ? 0 : RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        if (k->producer)
                rd_kafka_destroy(k->producer);
        if (k->consumer_fd >= 0)
                close(k->consumer_fd);
        if (k->producer_fd >= 0)
                close(k->producer_fd);
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

        if (k->closed)
                return 0;
        m = rd_kafka_consumer_poll(k->consumer, 0);
        if (!m)
                return 0;
        *ret = m;
        return 1;
}

void kafka_poll_producer(kafka_t *k) {
        rd_kafka_poll(k->producer, 0);
}

int kafka_set_paused(kafka_t *k, bool paused) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        rd_kafka_resp_err_t re;

        if (k->paused == paused || k->closed)
                return 0;
        re = rd_kafka_assignment(k->consumer, &parts);
        if (re)
                return -EIO;
        re = paused ? rd_kafka_pause_partitions(k->consumer, parts) : rd_kafka_resume_partitions(k->consumer, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        if (re)
                return -EIO;
        k->paused = paused;
        return 0;
}

bool kafka_is_paused(const kafka_t *k) {
        return k->paused;
}

int kafka_produce(kafka_t *k, const char *topic, const void *key, size_t key_len, const void *value,
                  size_t value_len, rd_kafka_headers_t *headers, void *opaque, errbuf_t *err) {
        rd_kafka_resp_err_t re;

        re = rd_kafka_producev(k->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                               RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                               RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        if (re == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                return -ENOBUFS;
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

int kafka_commit_sync(kafka_t *k, errbuf_t *err) {
        rd_kafka_resp_err_t re = rd_kafka_commit(k->consumer, NULL, 0);

        if (re == RD_KAFKA_RESP_ERR__NO_OFFSET || re == RD_KAFKA_RESP_ERR_NO_ERROR)
                return 0;
        return errbuf_set(err, -EIO, "Failed to commit offsets: %s", rd_kafka_err2str(re));
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

int kafka_close(kafka_t *k, errbuf_t *err) {
        rd_kafka_resp_err_t re;

        if (k->closed)
                return 0;
        k->closed = true;
        re = rd_kafka_consumer_close(k->consumer);
        if (re)
                return errbuf_set(err, -EIO, "Failed to leave the consumer group: %s", rd_kafka_err2str(re));
        return 0;
}

int kafka_assigned_count(kafka_t *k) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        int n;

        if (rd_kafka_assignment(k->consumer, &parts))
                return 0;
        n = parts->cnt;
        rd_kafka_topic_partition_list_destroy(parts);
        return n;
}

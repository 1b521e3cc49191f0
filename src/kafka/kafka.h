/* kafka: the daemon's consumer and producer, wired for an event loop.
 *
 * Two librdkafka handles: a consumer in the configured group (subscribed to
 * the input topic, enable.auto.offset.store=false, so only offsets that the
 * daemon stores after a delivery report are committed) and an idempotent
 * producer for the predictions and the DLQ. Each handle's queue signals an
 * eventfd when it becomes non-empty (rd_kafka_queue_io_event_enable), so the
 * event loop waits on two fds; librdkafka's own log lines are routed to those
 * queues and reach the caller's thread.
 *
 * Rebalances (eager and cooperative) are handled here, and the daemon is
 * called back before partitions are given up so that it can finish and
 * commit their records first. This module does not decide what a record
 * becomes (the daemon does) and keeps no offsets of its own (batch_ does). */
#ifndef INFERD_KAFKA_H
#define INFERD_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "config/cfg.h"
#include "core/counters.h"
#include "core/errbuf.h"
#include "core/plan.h"

typedef struct kafka kafka_t;

typedef struct kafka_callbacks {
        /* After partitions were added to the assignment. */
        void (*assigned)(void *userdata, const rd_kafka_topic_partition_list_t *parts);
        /* Before partitions are given up: finish the records taken from them
         * and commit (unless lost: another member owns them already). With
         * may_defer, the owner may return true and do that on its own loop:
         * the partitions stay assigned (librdkafka waits, and nothing more is
         * consumed) until it calls kafka_revoke_done. Without (the consumer
         * is closing), it finishes before it returns false. */
        bool (*revoking)(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost,
                         bool may_defer);
        /* After they were removed from the assignment. */
        void (*revoked)(void *userdata, const rd_kafka_topic_partition_list_t *parts);
        /* The delivery report of a produced record; m->_private is the
         * opaque given to kafka_produce. */
        void (*delivered)(void *userdata, const rd_kafka_message_t *m);
        /* A fatal error: the handle cannot go on. */
        void (*fatal)(void *userdata, const char *reason);
        /* Optional: a transactional call (sending the offsets, a commit,
         * an abort) is still waiting; called about every 100 ms while it
         * blocks the caller's thread (to ping a watchdog, say). */
        void (*txn_waiting)(void *userdata);
} kafka_callbacks_t;

/* Fetch and queue limits derived from the host budget: the fetched bytes
 * librdkafka may hold before the pipeline takes them, and the produced bytes
 * (predictions, DLQ copies) it may hold before the broker acknowledges them. */
typedef struct kafka_limits {
        uint64_t queued_max_kbytes;     /* queued.max.messages.kbytes */
        uint64_t fetch_max_bytes;       /* fetch.max.bytes */
        uint64_t partition_fetch_max_bytes;     /* max.partition.fetch.bytes */
        uint64_t producer_queue_kbytes; /* queue.buffering.max.kbytes */
} kafka_limits_t;

/* The fetch responses librdkafka may read at once: one per broker that
 * leads an assigned partition, planned as the addresses in [kafka] brokers
 * (at least 1). */
int kafka_fetch_responses(const cfg_t *c);

/* The least host memory librdkafka's limits take, however small the budget
 * left for them: a 4 MiB prefetch queue, a 4 MiB producer queue, and
 * c's fetch responses of the least fetch.max.bytes (plan_kafka_min_bytes).
 * The planner keeps it free of the pinned buffers and the decode contexts. */
uint64_t kafka_limits_min_bytes(const cfg_t *c);

/* Derives the limits from the bytes of host memory left for Kafka
 * (plan_kafka_split, with no hold to keep, for fetch responses of the
 * planner's default shape: one broker, uncompressed records). */
void kafka_limits_from_budget(uint64_t bytes, kafka_limits_t *ret);

/* The limits a plan made (its kafka_* terms: the consumer queue holds the
 * back-pressure hold's records). */
void kafka_limits_from_plan(const plan_t *p, kafka_limits_t *ret);

/* Creates both handles from c (brokers, group, [kafka.consumer] and
 * [kafka.producer] applied over our defaults; librdkafka's refusal is the
 * error sentence). Nothing is subscribed yet. */
int kafka_new(kafka_t **ret, const cfg_t *c, const kafka_limits_t *limits, const kafka_callbacks_t *cb,
              void *userdata, errbuf_t *err);

/* Destroys both handles (call kafka_close first to leave the group). NULL is
 * a no-op. */
void kafka_free(kafka_t *k);

int kafka_subscribe(kafka_t *k, errbuf_t *err);

/* Sets one librdkafka property written "NAME=VALUE" (a tool's -X). Returns
 * 0; or -EINVAL with why empty when kv is not NAME=VALUE (no '=', or no
 * name), and -EINVAL (-ENOMEM) with librdkafka's refusal (or "out of
 * memory") in why otherwise. kv is left as it was. */
int kafka_conf_set_pair(rd_kafka_conf_t *conf, const char *kv, char *why, size_t why_len);

/* The eventfds to wait on. Read them with kafka_fd_clear before serving. */
int kafka_consumer_fd(const kafka_t *k);
int kafka_producer_fd(const kafka_t *k);
void kafka_fd_clear(int fd);

/* Serves the consumer queue once without blocking: rebalances, errors and
 * logs are handled (and call back); returns 1 with a message in *ret (the
 * caller destroys it), or 0 when the queue is empty. */
int kafka_consume(kafka_t *k, rd_kafka_message_t **ret);
/* Completes a revoke that the revoking callback deferred: the partitions
 * leave the assignment (librdkafka's unassign; the group's rebalance goes
 * on), then the revoked callback. No-op when none is pending. */
void kafka_revoke_done(kafka_t *k);
/* The partitions of a deferred revoke, or NULL when none is pending. */
const rd_kafka_topic_partition_list_t *kafka_revoke_pending(const kafka_t *k);

/* Serves the producer queue (delivery reports, errors, logs). */
void kafka_poll_producer(kafka_t *k);

/* Pauses or resumes every assigned partition; partitions assigned while
 * paused are paused too. */
int kafka_set_paused(kafka_t *k, bool paused);
bool kafka_is_paused(const kafka_t *k);

/* Produces a copy of value to topic with key and headers (whose ownership
 * moves to librdkafka on success only). -ENOBUFS when the producer's queue is
 * full (poll and retry), -EMSGSIZE when the record is over the producer's
 * message.max.bytes, -ECANCELED with exactly-once when the open transaction
 * has failed (a delivery failed in it) and must be aborted, other -errno
 * with a sentence otherwise. */
int kafka_produce(kafka_t *k, const char *topic, const void *key, size_t key_len, const void *value,
                  size_t value_len, rd_kafka_headers_t *headers, void *opaque, errbuf_t *err);

/* The bytes of a record's headers as the producer counts them: every
 * name and value (NULL: none). */
size_t kafka_headers_bytes(const rd_kafka_headers_t *headers);

/* Stores next_offset (the next record to read) for commit. */
int kafka_store_offset(kafka_t *k, const char *topic, int32_t partition, int64_t next_offset, errbuf_t *err);

/* Starts a commit of the stored offsets without waiting: the daemon commits
 * shortly after storing, so that a rebalance or a crash finds little that
 * was done and not committed (librdkafka's auto-commit stays on as well). */
int kafka_commit_async(kafka_t *k);

/* Waits up to timeout_ms for every produced record's delivery report.
 * Returns 0, or -ETIMEDOUT with the number left in *left. */
int kafka_flush(kafka_t *k, int timeout_ms, int *left);

/* Records produced and not yet reported. */
int kafka_producer_outstanding(const kafka_t *k);

/* Begins leaving the group without waiting. Returns 0, or -errno with err
 * set when the close could not begin (kafka_free then drops the group
 * membership to the session timeout). */
int kafka_close_start(kafka_t *k, errbuf_t *err);

/* Serves the close (the revoke callback runs from here) when the consumer's
 * fd is readable: 1 once the consumer has left the group, or the close has
 * ended otherwise; 0 while it goes on. */
int kafka_close_serve(kafka_t *k);

/* Leaves the group, waiting (kafka_close_start, then kafka_close_serve until
 * done): for callers without a loop. */
int kafka_close(kafka_t *k, errbuf_t *err);

/* --- for the metrics ----------------------------------------------------------
 * Cheap reads of what the callbacks kept (no call into librdkafka's threads).
 * With [metrics] listen set, the consumer emits statistics every second
 * (statistics.interval.ms, unless [kafka.consumer] sets it), and each
 * assigned partition's lag is taken from them. */

/* Fills out (up to max) with the assigned input partitions whose lag is
 * known; now_ms is the wall clock (epoch ms) for the lag in seconds. The
 * topic strings are borrowed from the config. Returns the count. */
size_t kafka_get_lag(const kafka_t *k, metrics_lag_t *out, size_t max, int64_t now_ms);

/* Partitions currently assigned, as the rebalance callbacks saw them. */
int kafka_get_assigned(const kafka_t *k);

/* What the last errors said of the cluster, for /readyz: AUTH_FAILED after
 * an authentication or authorization error (SASL, SSL, ACLs), UNREACHABLE
 * after librdkafka's ALL_BROKERS_DOWN; each holds until something proves it
 * over (a record consumed, an output acknowledged, partitions assigned;
 * for UNREACHABLE also a broker UP in the statistics). */
typedef enum kafka_health {
        KAFKA_HEALTH_OK,
        KAFKA_HEALTH_UNREACHABLE,
        KAFKA_HEALTH_AUTH_FAILED,
} kafka_health_t;

kafka_health_t kafka_get_health(const kafka_t *k);

/* Errors by kind since kafka_new; *ret points into k. */
size_t kafka_get_errors(const kafka_t *k, const metrics_count_t **ret);

/* The last refused TLS handshake or SASL authentication, as logged ("TLS
 * handshake with ssl://... failed (...): ..."), or "" when none since the
 * last partition assignment or delivered record. For /healthz. */
const char *kafka_get_auth_error(const kafka_t *k);

/* --- exactly-once ([kafka] delivery = exactly-once) ---------------------------
 * The producer is transactional (transactional.id <group>-<instance>-<input
 * topic>); kafka_produce opens a transaction before the first output after a
 * commit. The consumer commits nothing by itself (enable.auto.commit=false):
 * offsets reach the group only through a transaction's commit. The calls
 * that wait on the brokers run on a transaction thread of the module's own
 * (kafka_txn_submit, then kafka_txn_collect once kafka_txn_fd is readable),
 * so that the owner's loop never waits on a coordinator; kafka_txn_wait is
 * the blocking form of the collect. Failures are sorted into librdkafka's
 * classes:
 *   -EAGAIN     retriable, and still failing after a few retries;
 *   -ECANCELED  abortable: the job aborted the transaction; with its rewind,
 *               kafka_seek_to the offsets it read, and redo;
 *   -EPERM      fatal or fenced: the producer cannot go on (exit);
 *   -EIO        anything else. */
/* How long one transactional call (init, commit, abort, sending the
 * offsets) and each of the rewind's reads of the brokers may wait. The
 * daemon passes it to the txn calls. */
#define KAFKA_TXN_TIMEOUT_MS 30000

bool kafka_transactional(const kafka_t *k);
bool kafka_txn_is_open(const kafka_t *k);
/* librdkafka failed the open transaction (an abortable error, such as a
 * partition it could not add to it): it can only be aborted. Learned from
 * its API: the outputs it purged without a delivery report. */
bool kafka_txn_failed(const kafka_t *k);

/* init_transactions (at start-up; fences an earlier incarnation of the same
 * transactional.id and aborts its open transaction). No-op without EOS.
 * A retriable failure (no coordinator yet, a previous incarnation's
 * transaction still being aborted) is retried, each attempt waiting up to
 * timeout_ms, until total_ms have passed; then -ETIMEDOUT with a sentence
 * that says how long, how many attempts and what the last one was told. */
int kafka_txn_init(kafka_t *k, int timeout_ms, int total_ms, errbuf_t *err);
int kafka_txn_begin(kafka_t *k, errbuf_t *err);

/* The transaction thread's jobs: a commit (offsets, if any, sent to the
 * transaction with the consumer's group metadata, then the commit; on an
 * abortable failure the transaction is aborted there and then), or an abort.
 * With rewind, after an abort the job also reads every assigned partition's
 * committed offset, for kafka_seek_to. Without exactly-once the thread runs
 * too, for one job: the consumer's commit of its stored offsets
 * (KAFKA_TXN_JOB_OFFSETS, a revoke's at-least-once commit), which waits as
 * long as the group coordinator takes, off the loop; it is given up only
 * when the module is freed. KAFKA_TXN_JOB_INIT is kafka_txn_init at
 * start-up, attempts of KAFKA_TXN_TIMEOUT_MS within the job's timeout_ms, so
 * that the daemon's endpoint answers while a coordinator is awaited. */
typedef enum kafka_txn_job_kind {
        KAFKA_TXN_JOB_COMMIT,
        KAFKA_TXN_JOB_ABORT,
        KAFKA_TXN_JOB_OFFSETS,
        KAFKA_TXN_JOB_INIT,
} kafka_txn_job_kind_t;

typedef struct kafka_txn_result {
        kafka_txn_job_kind_t kind;
        bool committed;                 /* the transaction was committed */
        bool aborted;                   /* it was aborted (asked, or after an abortable failure) */
        char cause[512];                /* a commit's abortable failure, the sentence; "" when none */
        rd_kafka_topic_partition_list_t *rewind_to;     /* with rewind after an abort: the partitions and
                                                         * their committed offsets (the caller's) */
} kafka_txn_result_t;

/* Readable when a submitted job is done. */
int kafka_txn_fd(const kafka_t *k);
/* A job was submitted and its result not yet collected: submit no other,
 * and produce nothing meanwhile (the commit point has the intake closed). */
bool kafka_txn_busy(const kafka_t *k);
/* Hands a job to the thread (offsets copied; a transaction is begun for
 * offsets when none is open). timeout_ms: each call's wait, -1 for
 * librdkafka's recommended. */
int kafka_txn_submit(kafka_t *k, kafka_txn_job_kind_t kind, const rd_kafka_topic_partition_list_t *offsets,
                     int timeout_ms, bool rewind, errbuf_t *err);
/* The done job's result: its status (0, or a class above: -ECANCELED is a
 * commit's abortable failure, aborted by the job) with err, and *res.
 * -EINPROGRESS while it runs, or when none was submitted. */
int kafka_txn_collect(kafka_t *k, kafka_txn_result_t *res, errbuf_t *err);
/* kafka_txn_collect, waiting for the job (the owner's txn_waiting callback
 * called about every 100 ms meanwhile). */
int kafka_txn_wait(kafka_t *k, kafka_txn_result_t *res, errbuf_t *err);

/* Seeks each partition of parts to its offset (kafka_txn_result_t's
 * rewind_to), dropping what was fetched beyond it. */
int kafka_seek_to(kafka_t *k, const rd_kafka_topic_partition_list_t *parts, errbuf_t *err);

#endif

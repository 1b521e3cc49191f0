/* kafka_txn: exactly-once ([kafka] delivery = exactly-once) on the kafka
 * module's handles: init, begin, commit (with the consumer's offsets and
 * group metadata) and abort of the producer's transactions, their failures
 * sorted into librdkafka's classes, and the rewind to the group's committed
 * offsets after an abort. See kafka.h.
 *
 * Not here: when a transaction is committed or aborted (daemon_txn.c), the
 * handles themselves (kafka.c). */
#include "kafka/kafka_priv.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "config/log.h"

bool kafka_transactional(const kafka_t *k) {
        return k->transactional;
}

bool kafka_txn_is_open(const kafka_t *k) {
        return k->txn_open;
}

bool kafka_txn_failed(const kafka_t *k) {
        return k->txn_failed;
}

/* Sorts a failed transactional call into the classes librdkafka defines and
 * fills err. Takes e (destroys it). */
static int kafka_txn_error(rd_kafka_error_t *e, const char *what, errbuf_t *err) {
        int r;

        if (rd_kafka_error_is_fatal(e) || rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR__FENCED ||
            rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
            rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)
                r = -EPERM;
        else if (rd_kafka_error_txn_requires_abort(e))
                r = -ECANCELED;
        else if (rd_kafka_error_is_retriable(e))
                r = -EAGAIN;
        else
                r = -EIO;
        errbuf_set(err, r, "Failed to %s: %s (%s)", what, rd_kafka_error_string(e),
                   r == -EPERM ? "fatal" : r == -ECANCELED ? "abortable" : r == -EAGAIN ? "retriable" : "other");
        rd_kafka_error_destroy(e);
        return r;
}

int kafka_txn_init(kafka_t *k, int timeout_ms, int total_ms, errbuf_t *err) {
        struct timespec ts;
        int64_t now_ms, deadline_ms;
        rd_kafka_error_t *e;
        char last[256];
        int attempts = 0;

        if (!k->transactional)
                return 0;
        assert(timeout_ms > 0 && total_ms > 0);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        deadline_ms = now_ms + total_ms;
        for (;;) {
                int wait_ms = deadline_ms - now_ms < timeout_ms ? (int)(deadline_ms - now_ms) : timeout_ms;

                e = rd_kafka_init_transactions(k->producer, wait_ms);
                attempts++;
                if (!e)
                        return 0;
                /* A coordinator still loading, or a previous incarnation's
                 * transaction being aborted: retriable, until total_ms. */
                if (!rd_kafka_error_is_retriable(e) || rd_kafka_error_is_fatal(e))
                        return kafka_txn_error(e, "initialise transactions", err);
                snprintf(last, sizeof(last), "%s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
                clock_gettime(CLOCK_MONOTONIC, &ts);
                now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
                if (now_ms >= deadline_ms)
                        return errbuf_set(err, -ETIMEDOUT,
                                          "Failed to initialise transactions: no transaction coordinator accepted "
                                          "this producer within %.1f s (%d attempt%s, the last failing with \"%s\"); "
                                          "check that [kafka] brokers are reachable and that the cluster can host "
                                          "its transaction state log (transaction.state.log.replication.factor and "
                                          "min.isr at most its brokers)",
                                          (double)total_ms / 1000.0, attempts, attempts == 1 ? "" : "s", last);
                log_info("Initialising transactions: %s; retrying", last);
        }
}

int kafka_txn_begin(kafka_t *k, errbuf_t *err) {
        rd_kafka_error_t *e;

        assert(k->transactional && !k->txn_open);
        e = rd_kafka_begin_transaction(k->producer);
        if (e)
                return kafka_txn_error(e, "begin a transaction", err);
        k->txn_open = true;
        k->txn_failed = false;
        return 0;
}

/* How often a retriable failure of a commit's step is tried again. */
#define KAFKA_TXN_RETRIES 5

/* One step of a commit, tried up to KAFKA_TXN_RETRIES times while it fails
 * retriably, each try a whole call (send_offsets_to_transaction is
 * retriable but not resumable): with md, the offsets are sent to the
 * transaction (waiting up to timeout_ms, KAFKA_TXN_TIMEOUT_MS for -1); without,
 * it is committed (timeout_ms, -1: the transaction's remaining timeout, as
 * librdkafka recommends). Returns 0, or kafka_txn_error's -errno for the last
 * failure (what names the step). Touches none of k's state: the transaction
 * thread calls it. */
static int kafka_txn_step(kafka_t *k, const rd_kafka_topic_partition_list_t *offsets,
                          const rd_kafka_consumer_group_metadata_t *md, int timeout_ms, const char *what,
                          errbuf_t *err) {
        for (int i = 1;; i++) {
                rd_kafka_error_t *e = md ? rd_kafka_send_offsets_to_transaction(
                                                   k->producer, offsets, md,
                                                   timeout_ms < 0 ? KAFKA_TXN_TIMEOUT_MS : timeout_ms)
                                         : rd_kafka_commit_transaction(k->producer, timeout_ms);

                if (!e)
                        return 0;
                if (i == KAFKA_TXN_RETRIES || !rd_kafka_error_is_retriable(e) ||
                    rd_kafka_error_txn_requires_abort(e))
                        return kafka_txn_error(e, what, err);
                log_warning("Could not %s yet: %s; retrying", what, rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
        }
}

int kafka_txn_commit_calls(kafka_t *k, const rd_kafka_topic_partition_list_t *offsets, int timeout_ms,
                           errbuf_t *err) {
        rd_kafka_consumer_group_metadata_t *md;
        int r;

        if (offsets && offsets->cnt > 0) {
                /* The consumer's group metadata (member id, generation)
                 * lets the coordinator refuse the offsets of a member the
                 * group has moved on from: a zombie's transaction fails. */
                md = rd_kafka_consumer_group_metadata(k->consumer);
                if (!md)
                        return errbuf_set(err, -EIO, "Failed to send offsets: no consumer group metadata");
                r = kafka_txn_step(k, offsets, md, timeout_ms, "send the offsets to the transaction", err);
                rd_kafka_consumer_group_metadata_destroy(md);
                if (r < 0)
                        return r;
        }
        return kafka_txn_step(k, NULL, NULL, timeout_ms, "commit the transaction", err);
}

int kafka_txn_abort_call(kafka_t *k, int timeout_ms, errbuf_t *err) {
        rd_kafka_error_t *e = rd_kafka_abort_transaction(k->producer, timeout_ms);

        return e ? kafka_txn_error(e, "abort the transaction", err) : 0;
}

int kafka_committed_read(kafka_t *k, rd_kafka_topic_partition_list_t **ret, errbuf_t *err) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        rd_kafka_resp_err_t re;

        re = rd_kafka_assignment(k->consumer, &parts);
        if (re)
                return errbuf_set(err, -EIO, "Failed to read the assignment: %s", rd_kafka_err2str(re));
        if (parts->cnt > 0) {
                re = rd_kafka_committed(k->consumer, parts, KAFKA_TXN_TIMEOUT_MS);
                if (re) {
                        rd_kafka_topic_partition_list_destroy(parts);
                        return errbuf_set(err, -EIO, "Failed to read the committed offsets: %s",
                                          rd_kafka_err2str(re));
                }
                for (int i = 0; i < parts->cnt; i++)
                        if (parts->elems[i].offset < 0)
                                parts->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        }
        *ret = parts;
        return 0;
}

int kafka_seek_to(kafka_t *k, const rd_kafka_topic_partition_list_t *parts, errbuf_t *err) {
        rd_kafka_topic_partition_list_t *copy;
        rd_kafka_error_t *e;

        if (!parts || parts->cnt == 0)
                return 0;
        /* rd_kafka_seek_partitions writes each element's err. */
        copy = rd_kafka_topic_partition_list_copy(parts);
        if (!copy)
                return errbuf_set(err, -ENOMEM, "Out of memory rewinding");
        /* A seek also drops what was fetched beyond it. */
        e = rd_kafka_seek_partitions(k->consumer, copy, KAFKA_TXN_TIMEOUT_MS);
        rd_kafka_topic_partition_list_destroy(copy);
        if (e) {
                errbuf_set(err, -EIO, "Failed to rewind to the committed offsets: %s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
                return -EIO;
        }
        return 0;
}

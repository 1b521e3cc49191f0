/* daemon_rebalance: Kafka's callbacks into the daemon (kafka_callbacks_t):
 * partitions assigned, revoking (the wait for the records taken before it,
 * then the commit), revoked, a delivery report (the record finished, its
 * offset stored or noted for the transaction), a fatal error.
 *
 * Not here: the rebalance protocol itself, eager or cooperative (kafka.c);
 * the commit point of a transaction (daemon_txn.c). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/daemon_priv.h"
#include "config/log.h"

void daemon_on_assigned(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
        daemon_t *d = userdata;

        for (int i = 0; i < parts->cnt; i++) {
                if (batch_offsets_assign(d->offsets, parts->elems[i].topic, parts->elems[i].partition) < 0)
                        log_error("Out of memory tracking partition %" PRId32, parts->elems[i].partition);
                log_info_f(((log_fields_t){ LOG_TOPIC(parts->elems[i].topic), LOG_PARTITION(parts->elems[i].partition) }),
                           "Partition assigned");
        }
}

/* Before partitions go: every record taken so far is finished, produced,
 * acknowledged and its offset stored, then committed. Blocks the loop (a
 * rebalance is rare and bounded by drain.timeout_s). */
void daemon_on_revoking(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost) {
        daemon_t *d = userdata;
        uint64_t start = daemon_now_us(), deadline = start + (uint64_t)d->cfg->drain.timeout_s * 1000000ULL;
        /* The waits below block the event loop, and with it the watchdog
         * timer: they ping themselves, on the same rule (daemon_watchdog_ping),
         * waking at least every quarter interval. */
        int wait_ms = d->watchdog_usec > 0 && d->watchdog_usec / 4000 < 100 ? (int)(d->watchdog_usec / 4000) + 1 : 100;
        int in_pipeline;
        bool unfinished;
        errbuf_t err = {};
        int left = 0;

        if (!d->pipeline)
                return;         /* not started: nothing was taken */
        d->in_revoke = true;
        /* A commit point's job on the transaction thread ends first: how
         * the transaction ended decides what this revoke commits. */
        daemon_txn_settle(d);
        in_pipeline = daemon_records_in_pipeline(d);
        pipeline_held_drop(d->pipeline, parts);
        pipeline_flush_filling(d->pipeline);
        while (daemon_records_in_pipeline(d) > 0 && !d->exit_status && daemon_now_us() < deadline) {
                struct pollfd p[2] = { { .fd = engine_completion_fd(d->engine), .events = POLLIN },
                                       { .fd = decode_pool_fd(d->decode), .events = POLLIN } };

                poll(p, 2, wait_ms);
                pipeline_decoded(d->pipeline);
                pipeline_reap(d->pipeline);
                kafka_poll_producer(d->kafka);
                pipeline_produce_pending(d->pipeline);
                daemon_watchdog_ping(d);
        }
        while (batch_offsets_pending(d->offsets) > 0 && daemon_now_us() < deadline) {
                kafka_flush(d->kafka, wait_ms, &left);
                daemon_watchdog_ping(d);
        }
        /* CLOCK_MONOTONIC seconds, as systemd's own timestamps: the
         * notify test matches this window against the pings it received. */
        log_info("Revoke: waited %.3f s for the records taken before it (%d in the pipeline), monotonic %.3f to %.3f s",
                 (double)(daemon_now_us() - start) / 1e6, in_pipeline, (double)start / 1e6,
                 (double)daemon_now_us() / 1e6);
        unfinished = daemon_records_in_pipeline(d) > 0 || batch_offsets_pending(d->offsets) > 0;
        if (unfinished)
                daemon_log_left(d, "Giving up partitions before their records were finished");
        if (daemon_eos(d)) {
                /* The open transaction ends here, with the offsets of the
                 * records finished above; for lost partitions the group has
                 * moved on and would refuse them, so it is aborted. So is
                 * one with records left unfinished (the deadline passed) or
                 * doomed: an output becomes visible only in the transaction
                 * that also commits an offset past its input, and a DLQ copy
                 * or a prediction that overtook an unfinished record of its
                 * partition would be committed without its offset, and
                 * produced again by the next owner. When partitions are kept
                 * (cooperative), the end rewinds them to the committed
                 * offsets if it aborts, and what was taken before is given
                 * up, so that none moves past an aborted output and no
                 * record taken before the abort makes a second output (the
                 * revoked ones' outputs are given up once they are revoked:
                 * pipeline_output_stale). */
                bool kept = !lost && kafka_get_assigned(d->kafka) > parts->cnt;
                bool aborting = lost || d->txn_doomed || unfinished;

                d->txn_doomed = false;
                daemon_txn_end(d, aborting, kept);
                if (d->txn_closing && !d->exit_status) {
                        d->txn_closing = false;
                        if (!d->swap_paused_us)
                                pipeline_set_intake(d->pipeline, true);
                }
        } else if (!lost && kafka_commit_sync(d->kafka, &err) < 0)
                log_warning("%s", err.msg);
        d->in_revoke = false;
}

void daemon_on_revoked(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
        daemon_t *d = userdata;

        for (int i = 0; i < parts->cnt; i++)
                batch_offsets_revoke(d->offsets, parts->elems[i].topic, parts->elems[i].partition);
}

/* A record is finished (its output acknowledged, or skipped without one):
 * marks its offset done, and stores it (or notes it for the open
 * transaction) when that advances its partition. Frees t. */
static void daemon_ticket_done(daemon_t *d, pipeline_ticket_t *t) {
        const char *topic;
        int32_t partition;
        int64_t next;
        errbuf_t err = {};
        int r = 0;

        if (t->part_id > 0) {
                r = batch_offsets_done(d->offsets, t->part_id, t->offset, &topic, &partition, &next);
                if (r == 1 && daemon_eos(d)) {
                        if (daemon_txn_note(d, topic, partition, next) < 0) {
                                log_error("Out of memory noting an offset for the transaction");
                                daemon_fail(d, 1);
                        }
                } else if (r == 1) {
                        if (kafka_store_offset(d->kafka, topic, partition, next, &err) < 0)
                                log_warning("%s", err.msg);
                        else
                                d->stored_uncommitted = true;
                }
        }
        free(t);
}

/* pipeline_ops_t.skipped: an expired record finished without output. Under
 * exactly-once its offset goes into a transaction like any other, so one is
 * opened if none is (no output opened one): the commit point commits it. */
void daemon_pipeline_skipped(void *userdata, pipeline_ticket_t *t) {
        daemon_t *d = userdata;
        errbuf_t err = {};

        if (daemon_eos(d) && !kafka_txn_is_open(d->kafka) && kafka_txn_begin(d->kafka, &err) < 0) {
                log_error("%s; stopping", err.msg);
                free(t);
                daemon_fail(d, 1);
                return;
        }
        daemon_ticket_done(d, t);
}

void daemon_on_delivered(void *userdata, const rd_kafka_message_t *m) {
        daemon_t *d = userdata;
        pipeline_ticket_t *t = m->_private;     /* ours from here: the pipeline handed it over */
        int r = 0;

        if (!t)
                return;
        if (m->err && d->pipeline && (r = pipeline_delivery_failed(d->pipeline, m)) == 0)
                return;         /* an output too large: retried alone, without its value, or as a DLQ copy */
        if (!m->err && d->pipeline)
                pipeline_output_delivered(d->pipeline, m);
        if (m->err && daemon_eos(d) && (d->txn_doomed || m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
                                        m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)) {
                /* An output of a doomed or aborted transaction: never
                 * visible, its record comes again after the rewind. */
                free(t);
                return;
        }
        if (m->err && daemon_eos(d)) {
                /* Exactly-once: an output that failed (the broker refused a
                 * DLQ copy as too large, or it timed out, as for an instance
                 * stopped past its transaction's timeout) dooms the open
                 * transaction in librdkafka. It is aborted once the slots
                 * are empty (daemon_txn_check) and its records read again;
                 * DAEMON_TXN_DOOMED_MAX such aborts in a row stop the daemon. */
                if (r == -ECANCELED)
                        log_warning_f(((log_fields_t){ LOG_TOPIC(d->cfg->kafka.input_topic),
                                                       LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                                      "The broker refused %s as too large for '%s' (its max.message.bytes): "
                                      "aborting the transaction and reading its records again; the largest of the "
                                      "refused batch goes %s then", t->dlq ? "DLQ copies" : "predictions",
                                      t->dlq ? d->cfg->kafka.dlq_topic : d->cfg->kafka.output_topic,
                                      t->dlq ? "without its value" : "to the DLQ as output-too-large");
                else
                        log_warning_f(((log_fields_t){ LOG_TOPIC(d->cfg->kafka.input_topic),
                                                       LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                                      "Failed to deliver the %s of a record: %s; aborting the transaction and "
                                      "reading its records again", t->dlq ? "DLQ copy" : "prediction",
                                      rd_kafka_err2str(m->err));
                d->txn_doomed = true;
                if (!d->txn_closing && !d->draining && d->pipeline) {
                        d->txn_closing = true;
                        pipeline_set_intake(d->pipeline, false);
                }
                free(t);
                return;
        }
        if (m->err) {
                /* The record's offset is never stored, so everything from it
                 * on in its partition is redelivered after a restart. */
                log_error_f(((log_fields_t){ LOG_TOPIC(d->cfg->kafka.input_topic), LOG_PARTITION(t->partition),
                                             LOG_OFFSET(t->offset) }),
                            "Failed to deliver the %s of a record: %s; stopping", t->dlq ? "DLQ copy" : "prediction",
                            rd_kafka_err2str(m->err));
                free(t);
                daemon_fail(d, 1);
                return;
        }
        d->delivered++;
        if (!t->dlq && t->timestamp_ms >= 0) {
                struct timespec ts;

                /* The two clocks read together: the stages (monotonic
                 * after the take) add up to the latency (realtime). */
                clock_gettime(CLOCK_REALTIME, &ts);
                metrics_hist_observe(&d->latency, ((double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 -
                                                   (double)t->timestamp_ms) / 1e3);
                if (d->pipeline)
                        pipeline_delivered(d->pipeline, t, daemon_now_us());
        }
        daemon_ticket_done(d, t);
}

/* kafka.c has logged the error with librdkafka's reason (one journal line
 * for it): the daemon only stops, with status 1. */
void daemon_on_fatal(void *userdata, const char *reason) {
        daemon_t *d = userdata;

        (void)reason;
        daemon_fail(d, 1);
}

/* daemon_rebalance: Kafka's callbacks into the daemon (kafka_callbacks_t):
 * partitions assigned, revoking (a state of the loop: the records taken
 * before it finished, then the commit, then the unassign), revoked, a delivery report (the record finished, its
 * offset stored or noted for the transaction), a fatal error.
 *
 * Not here: the rebalance protocol itself, eager or cooperative (kafka.c);
 * the commit point of a transaction (daemon_txn.c). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
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

/* --- a revoke, a state of the loop (issue 36) --------------------------------
 * Before partitions go, every record taken from them is finished: produced,
 * acknowledged and its offset stored (or noted for the transaction), then
 * committed. The callback only begins it (daemon_on_revoking): the intake
 * closes, and the loop goes on serving the engine, the decoders, the
 * producer's delivery reports, the probes, the watchdog and the timers.
 * daemon_revoke_check, after every event, ends it once nothing taken is
 * left or [drain] timeout_s has passed: the commit or the abort goes to the
 * transaction thread, and once it is done the partitions are unassigned
 * (kafka_revoke_done) and the intake opens again. */

/* Ends the revoke: the unassign, then the intake opens (unless a swap, the
 * drain or the daemon's end holds it). The revoke ended the transaction, so
 * a commit point that was under way is over too. */
static void daemon_revoke_complete(daemon_t *d) {
        d->in_revoke = false;
        d->revoke_ending = false;
        if (d->revoke_timer)
                sd_event_source_set_enabled(d->revoke_timer, SD_EVENT_OFF);
        kafka_revoke_done(d->kafka);
        if (d->exit_status)
                return;
        d->txn_closing = false;
        if (!d->draining && !d->swap_paused_us)
                pipeline_set_intake(d->pipeline, true);
}

/* What was taken is finished, or the deadline passed: logs the wait, then
 * commits what was finished (or aborts, under exactly-once, when something
 * was not, the partitions were lost or the transaction failed). Returns true
 * when a job went to the transaction thread (the revoke ends when it is
 * done), false when the revoke can end now. */
static bool daemon_revoke_end(daemon_t *d, const rd_kafka_topic_partition_list_t *parts) {
        uint64_t now = daemon_now_us();
        bool unfinished = daemon_records_in_pipeline(d) > 0 || batch_offsets_pending(d->offsets) > 0;

        /* CLOCK_MONOTONIC seconds, as systemd's own timestamps: the
         * notify test matches this window against the pings it received. */
        log_info("Revoke: waited %.3f s for the records taken before it (%d in the pipeline), monotonic %.3f to %.3f s",
                 (double)(now - d->revoke_start_us) / 1e6, d->revoke_in_pipeline, (double)d->revoke_start_us / 1e6,
                 (double)now / 1e6);
        if (unfinished) {
                /* Which partitions, as well as how many records. */
                char why[512];
                size_t n = (size_t)snprintf(why, sizeof(why),
                                            "Giving up partitions before their records were finished (%s",
                                            parts->cnt > 0 ? parts->elems[0].topic : "none");

                for (int i = 0; i < parts->cnt && n < sizeof(why) - 16; i++)
                        n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%" PRId32, i ? ", " : " partitions ",
                                              parts->elems[i].partition);
                if (n < sizeof(why) - 1)
                        snprintf(why + n, sizeof(why) - n, ")");
                daemon_log_left(d, why);
        }
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
                bool kept = !d->revoke_lost && kafka_get_assigned(d->kafka) > parts->cnt;
                bool aborting = d->revoke_lost || d->txn_doomed || unfinished;

                d->txn_doomed = false;
                return daemon_commit_start(d, aborting, kept) > 0;
        }
        /* At least once: the stored offsets, unless the group has moved
         * the partitions on (the loop answers meanwhile, and the revoke
         * waits for the commit). */
        return !d->revoke_lost && daemon_commit_start(d, false, false) > 0;
}

/* After every event (daemon_progress): moves a revoke on, or ends it. */
void daemon_revoke_check(daemon_t *d) {
        const rd_kafka_topic_partition_list_t *parts;
        bool doomed;

        if (!d->in_revoke || d->exit_status || !d->kafka || !(parts = kafka_revoke_pending(d->kafka)))
                return;
        /* A commit point's job, or the revoke's own end, on the thread:
         * its result (daemon_txn_done) comes back here. */
        if (kafka_txn_busy(d->kafka))
                return;
        if (d->revoke_ending) {
                daemon_revoke_complete(d);
                return;
        }
        /* A failed transaction's outputs are never acknowledged: it is
         * aborted as soon as the slots are empty, not at the deadline. */
        doomed = daemon_eos(d) && (d->txn_doomed || kafka_txn_failed(d->kafka));
        if (daemon_now_us() < d->revoke_deadline_us &&
            (daemon_records_in_pipeline(d) > 0 || (!doomed && batch_offsets_pending(d->offsets) > 0)))
                return;
        if (doomed)
                d->txn_doomed = true;
        d->revoke_ending = true;
        if (!daemon_revoke_end(d, parts))
                daemon_revoke_complete(d);
}

static int daemon_on_revoke_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "revoke deadline");
        (void)s;
        (void)usec;
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

/* The revoking callback. Closing (no deferring), the daemon has drained:
 * nothing is in flight, and the drain ended the transaction or committed
 * the offsets; what is left to end is ended here: at least once, a commit
 * that librdkafka's close waits for on its own threads (the loop serves the
 * close meanwhile, kafka_close_serve). */
bool daemon_on_revoking(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost, bool may_defer) {
        daemon_t *d = userdata;
        uint64_t now = daemon_now_us();
        int r;

        if (!d->pipeline)
                return false;   /* not started: nothing was taken */
        pipeline_held_drop(d->pipeline, parts);
        if (!may_defer) {
                if (daemon_eos(d))
                        daemon_txn_end(d, lost || d->txn_doomed || daemon_records_in_pipeline(d) > 0, false);
                else if (!lost)
                        kafka_commit_async(d->kafka);
                return false;
        }
        d->in_revoke = true;
        d->revoke_lost = lost;
        d->revoke_ending = false;
        d->revoke_start_us = now;
        d->revoke_deadline_us = now + (uint64_t)d->cfg->drain.timeout_s * 1000000ULL;
        d->revoke_in_pipeline = daemon_records_in_pipeline(d);
        /* Closed, the intake takes nothing, and a partly filled slot goes
         * to the engine now rather than after its batch delay. */
        pipeline_set_intake(d->pipeline, false);
        if (!d->revoke_timer)
                r = sd_event_add_time(d->event, &d->revoke_timer, CLOCK_MONOTONIC, d->revoke_deadline_us, 1000,
                                      daemon_on_revoke_deadline, d);
        else
                r = sd_event_source_set_time(d->revoke_timer, d->revoke_deadline_us);
        if (r >= 0)
                r = sd_event_source_set_enabled(d->revoke_timer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_warning("Failed to arm the revoke's deadline: %s (it is checked at each event)", strerror(-r));
        /* Ends at once when nothing was taken: after this callback returns,
         * at the loop's next turn. */
        sd_event_source_set_enabled(d->defer, SD_EVENT_ONESHOT);
        return true;
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

/* daemon_txn: the daemon's exactly-once commit points ([kafka]
 * exactly_once): the offsets the open transaction covers, when a commit
 * point starts (the intake closed), and the commit or abort (and rewind)
 * once the slots are empty and every output is acknowledged.
 *
 * Not here: the transactions' calls to librdkafka (kafka.c), the commit
 * that a revoke or a drain makes (daemon_rebalance.c, daemon.c call these). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "daemon/daemon_priv.h"
#include "config/log.h"

/* Failed transactions aborted and redone in a row, with no commit between,
 * before the daemon stops: a failure that comes back each time (not a DLQ
 * copy, which is cut when redone) is not retried for ever. */
#define DAEMON_TXN_DOOMED_MAX 5

bool daemon_eos(const daemon_t *d) {
        return d->kafka && kafka_transactional(d->kafka);
}

/* Records a partition's next offset for the open transaction's commit. */
int daemon_txn_note(daemon_t *d, const char *topic, int32_t partition, int64_t next) {
        rd_kafka_topic_partition_t *e;

        if (!d->txn_offsets && !(d->txn_offsets = rd_kafka_topic_partition_list_new(8)))
                return -ENOMEM;
        e = rd_kafka_topic_partition_list_find(d->txn_offsets, topic, partition);
        if (!e)
                e = rd_kafka_topic_partition_list_add(d->txn_offsets, topic, partition);
        e->offset = next;
        return 0;
}

static void daemon_txn_forget(daemon_t *d) {
        if (d->txn_offsets)
                rd_kafka_topic_partition_list_destroy(d->txn_offsets);
        d->txn_offsets = NULL;
        d->txn_opened_us = 0;
        d->txn_closed_us = 0;
}

/* After an abort: reads every assigned partition again from parts, the
 * group's committed offsets as the transaction thread read them (what the
 * aborted transaction would have moved on is redone). Takes parts. */
static void daemon_txn_rewound(daemon_t *d, rd_kafka_topic_partition_list_t *parts) {
        errbuf_t err = {};

        pipeline_held_drop(d->pipeline, NULL);
        if (kafka_seek_to(d->kafka, parts, &err) < 0) {
                log_error("%s; stopping", err.msg);
                daemon_fail(d, 1);
        } else {
                /* Fresh tracking: the same offsets come again. */
                for (int i = 0; i < parts->cnt; i++)
                        batch_offsets_assign(d->offsets, parts->elems[i].topic, parts->elems[i].partition);
                log_warning("Aborted the transaction and rewound %d partition(s) to the committed offsets",
                            parts->cnt);
        }
        rd_kafka_topic_partition_list_destroy(parts);
}

/* A committed transaction: its commit point's costs counted. */
static void daemon_txn_committed(daemon_t *d, int n, uint64_t t0) {
        uint64_t t1 = daemon_now_us();

        d->txn_doomed_aborts = 0;
        if (d->txn_closed_us) {
                /* A commit point's two costs: the intake closed while what
                 * was in flight finished, then the commit's round trips
                 * (send_offsets_to_transaction, commit) on the transaction
                 * thread. */
                d->txn_totals.commits++;
                d->txn_totals.inflight_us += t0 - d->txn_closed_us;
                d->txn_totals.commit_us += t1 - t0;
                log_debug("Committed transaction: %d partition offset(s); its commit point waited %.1f ms for the "
                          "outputs in flight, then %.1f ms for the commit",
                          n, (double)(t0 - d->txn_closed_us) / 1e3, (double)(t1 - t0) / 1e3);
        } else if (n > 0 || d->txn_opened_us)
                log_debug("Committed transaction: %d partition offset(s)", n);
        daemon_txn_forget(d);
}

/* Hands a job to the transaction thread: the commit with the offsets the
 * open transaction covers, or its abort; with rewind, the read of the
 * committed offsets when it aborts. Returns kafka_txn_submit's. */
static int daemon_txn_submit(daemon_t *d, kafka_txn_job_kind_t kind, bool rewind, errbuf_t *err) {
        d->txn_job_us = daemon_now_us();
        return kafka_txn_submit(d->kafka, kind, kind == KAFKA_TXN_JOB_COMMIT ? d->txn_offsets : NULL,
                                DAEMON_TXN_CALL_TIMEOUT_MS, rewind, err);
}

/* Hands the commit point's job to the transaction thread (the commit, or
 * the abort of a doomed transaction, rewinding if it aborts). The loop goes
 * on serving meanwhile (probes, the watchdog, the timers); daemon_txn_done
 * takes the result. */
static void daemon_txn_start(daemon_t *d, kafka_txn_job_kind_t kind) {
        errbuf_t err = {};

        if (daemon_txn_submit(d, kind, true, &err) < 0) {
                log_error("%s; stopping", err.msg);
                daemon_fail(d, 1);
        }
}

/* What the transaction thread's job came to: committed (the costs
 * counted), aborted after an abortable failure or as asked (the partitions
 * rewound when the job read where to), or failed for good (the daemon stops
 * with status 1). */
static void daemon_txn_settled(daemon_t *d, int r, kafka_txn_result_t *res, const errbuf_t *err) {
        int n = d->txn_offsets ? d->txn_offsets->cnt : 0;

        if (r == 0 && res->committed) {
                daemon_txn_committed(d, n, d->txn_job_us);
                return;
        }
        daemon_txn_forget(d);
        if (res->aborted && (r == 0 || r == -ECANCELED)) {
                if (res->cause[0])
                        log_warning("%s", res->cause);
                if (res->rewind_to)
                        daemon_txn_rewound(d, res->rewind_to);
                else
                        log_warning("Aborted the transaction");
                return;
        }
        if (res->rewind_to)
                rd_kafka_topic_partition_list_destroy(res->rewind_to);
        log_error("%s; stopping", err->msg);
        daemon_fail(d, 1);
}

/* Ends the open transaction, waiting for the transaction thread: commits
 * it with the offsets it covers (every output in it acknowledged), or
 * aborts it (aborting). An abortable failure is aborted there. With rewind,
 * every assigned partition is then read again from the group's committed
 * offsets, and what was taken before is given up (pipeline_output_stale):
 * a revoke's, since a kept partition (cooperative) must not move past an
 * aborted output, nor a record taken before the abort produce a second
 * output (issue 36). Without, the offsets stay where they were (the
 * drain's: the next owner redoes those records, and the aborted outputs are
 * never visible). A fatal failure (fenced: another incarnation took over)
 * stops the daemon with status 1, and returns it. */
int daemon_txn_end(daemon_t *d, bool aborting, bool rewind) {
        kafka_txn_result_t res = {};
        errbuf_t err = {};
        int r = daemon_txn_end_start(d, aborting, rewind);

        if (r > 0) {
                r = kafka_txn_wait(d->kafka, &res, &err);
                daemon_txn_settled(d, r, &res, &err);
        }
        return d->exit_status ? -EIO : 0;
}

/* daemon_txn_end's job handed to the transaction thread without waiting (a
 * revoke's, on the loop): 1 when one went (daemon_txn_done settles it), 0
 * when there was nothing to end, and -1 when the daemon stops (the submit
 * failed). */
int daemon_txn_end_start(daemon_t *d, bool aborting, bool rewind) {
        errbuf_t err = {};

        /* Nothing open: nothing to abort, and nothing to commit unless
         * offsets wait (a transaction is begun for them). */
        if (!kafka_txn_is_open(d->kafka) && (aborting || !d->txn_offsets || d->txn_offsets->cnt == 0)) {
                daemon_txn_forget(d);
                return 0;
        }
        if (daemon_txn_submit(d, aborting ? KAFKA_TXN_JOB_ABORT : KAFKA_TXN_JOB_COMMIT, rewind, &err) < 0) {
                log_error("%s; stopping", err.msg);
                daemon_fail(d, 1);
                return -1;
        }
        return 1;
}

/* The last commit of a revoke or the drain, handed to the transaction
 * thread: under exactly-once the open transaction's end
 * (daemon_txn_end_start: aborting, rewind), at least once the consumer's
 * stored offsets, committed however long the coordinator takes. 1 when a
 * job went (daemon_txn_done takes its result), 0 when there was none to
 * hand (nothing to end; at least once, a submit that failed, logged: the
 * next owner reads those records again), -1 when the daemon stops. */
int daemon_commit_start(daemon_t *d, bool aborting, bool rewind) {
        errbuf_t err = {};

        if (daemon_eos(d))
                return daemon_txn_end_start(d, aborting, rewind);
        if (kafka_txn_submit(d->kafka, KAFKA_TXN_JOB_OFFSETS, NULL, -1, false, &err) == 0)
                return 1;
        log_warning("%s", err.msg);
        return 0;
}

/* The transaction thread is done (its fd readable): settles the result,
 * and opens the intake again, unless a revoke is in progress (it does that
 * itself: daemon_revoke_check), the daemon stops, drains or swaps its model.
 * At least once, the job was a revoke's commit of the consumer's offsets. */
void daemon_txn_done(daemon_t *d) {
        kafka_txn_result_t res;
        errbuf_t err = {};
        int r = kafka_txn_collect(d->kafka, &res, &err);

        if (r == -EINPROGRESS)
                return;
        if (res.kind == KAFKA_TXN_JOB_OFFSETS) {
                /* Not committed: the next owner reads them again (at least once). */
                if (r < 0)
                        log_warning("%s", err.msg);
                return;
        }
        daemon_txn_settled(d, r, &res, &err);
        if (d->in_revoke)
                return;
        d->txn_closing = false;
        if (d->exit_status || d->draining || d->swap_paused_us)
                return;         /* a model swap keeps the intake closed (daemon_swap_end opens it) */
        pipeline_set_intake(d->pipeline, true);
        daemon_pump(d);
}

/* Starts a commit point when the open transaction is old enough: nothing
 * new is taken until the slots are done and acknowledged. */
void daemon_txn_maybe_close(daemon_t *d) {
        uint64_t t = daemon_now_us();

        /* A revoke ends the open transaction itself. */
        if (!daemon_eos(d) || d->txn_closing || d->draining || d->in_revoke || !d->pipeline)
                return;
        if (!kafka_txn_is_open(d->kafka)) {
                d->txn_opened_us = 0;
                return;
        }
        if (kafka_txn_failed(d->kafka)) {
                /* Failed by librdkafka: abort it as soon as the slots
                 * are empty (daemon_txn_check). */
                d->txn_doomed = true;
                d->txn_closing = true;
                pipeline_set_intake(d->pipeline, false);
                return;
        }
        if (!d->txn_opened_us)
                d->txn_opened_us = t;
        if (t - d->txn_opened_us < (uint64_t)d->cfg->kafka.transaction_max_ms * 1000ULL)
                return;
        d->txn_closing = true;
        d->txn_closed_us = t;
        pipeline_set_intake(d->pipeline, false);
}

/* At the commit point (every output acknowledged, nothing in the slots),
 * hands the commit to the transaction thread; daemon_txn_done opens the
 * intake again. A doomed transaction is aborted as soon as the slots are
 * empty (its outputs will never be acknowledged), and the partitions
 * rewound: its records come again, and a DLQ copy the broker refused is then
 * cut before it is sent (pipeline_delivery_failed). */
void daemon_txn_check(daemon_t *d) {
        if (!d->txn_closing || d->exit_status || d->in_revoke || kafka_txn_busy(d->kafka))
                return;
        if (kafka_txn_failed(d->kafka))
                d->txn_doomed = true;
        if (d->txn_doomed) {
                if (daemon_records_in_pipeline(d) > 0)
                        return;
                d->txn_doomed = false;
                if (++d->txn_doomed_aborts > DAEMON_TXN_DOOMED_MAX) {
                        log_error("The transaction failed %d times in a row, each aborted and its records read "
                                  "again; stopping", d->txn_doomed_aborts - 1);
                        daemon_fail(d, 1);
                        return;
                }
                log_warning("The transaction failed (an output failed, or librdkafka dropped its outputs "
                            "without a delivery report: an abortable error); aborting it");
                daemon_txn_start(d, KAFKA_TXN_JOB_ABORT);
                return;
        }
        if (!daemon_nothing_in_flight(d))
                return;
        daemon_txn_start(d, KAFKA_TXN_JOB_COMMIT);
}

/* Says, once the daemon drains, what its commit points cost in all: the
 * share of the run that exactly-once kept the intake closed (issue 18's
 * benchmark reads this line). */
void daemon_txn_log_totals(const daemon_t *d) {
        if (!daemon_eos(d) || !d->txn_totals.commits)
                return;
        log_info("Exactly-once: %" PRIu64 " commit points closed the intake for %.2f s in all: %.2f s while the "
                 "outputs in flight were acknowledged, %.2f s in the commit calls",
                 d->txn_totals.commits, (double)(d->txn_totals.inflight_us + d->txn_totals.commit_us) / 1e6,
                 (double)d->txn_totals.inflight_us / 1e6, (double)d->txn_totals.commit_us / 1e6);
}

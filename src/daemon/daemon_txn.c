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

/* After an abortable failure: abort, then read every assigned partition
 * again from the group's committed offsets (what the aborted transaction
 * would have moved on is redone). rewind is false while partitions are being
 * revoked: the next owner reads them from the committed offsets anyway. */
int daemon_txn_abort(daemon_t *d, bool rewind) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        errbuf_t err = {};
        int r;

        daemon_txn_forget(d);
        r = kafka_txn_abort(d->kafka, DAEMON_TXN_TIMEOUT_MS, &err);
        if (r < 0) {
                log_error("%s; stopping", err.msg);
                daemon_fail(d, 1);
                return r;
        }
        if (!rewind) {
                log_warning("Aborted the transaction");
                return 0;
        }
        pipeline_held_drop(d->pipeline, NULL);
        r = kafka_rewind(d->kafka, &parts, &err);
        if (r < 0) {
                log_error("%s; stopping", err.msg);
                daemon_fail(d, 1);
                return r;
        }
        /* Fresh tracking: the same offsets come again. */
        for (int i = 0; i < parts->cnt; i++)
                batch_offsets_assign(d->offsets, parts->elems[i].topic, parts->elems[i].partition);
        log_warning("Aborted the transaction and rewound %d partition(s) to the committed offsets", parts->cnt);
        rd_kafka_topic_partition_list_destroy(parts);
        return 0;
}

/* Commits the open transaction with the offsets it covers. Every output in
 * it must be acknowledged and every record taken before it finished (the
 * caller's commit point). Retriable failures were retried in kafka_txn_commit;
 * an abortable one aborts (and rewinds unless revoking); a fatal one (fenced:
 * another incarnation took over) stops the daemon with status 1. */
int daemon_txn_commit(daemon_t *d, bool rewind) {
        int n = d->txn_offsets ? d->txn_offsets->cnt : 0;
        uint64_t t0 = daemon_now_us(), t1;
        errbuf_t err = {};
        int r;

        r = kafka_txn_commit(d->kafka, d->txn_offsets, DAEMON_TXN_TIMEOUT_MS, &err);
        if (r == 0) {
                t1 = daemon_now_us();
                d->txn_doomed_aborts = 0;
                if (d->txn_closed_us) {
                        /* A commit point's two costs: the intake closed while
                         * what was in flight finished, then the commit's round
                         * trips (send_offsets_to_transaction, commit). */
                        d->txn_totals.commits++;
                        d->txn_totals.inflight_us += t0 - d->txn_closed_us;
                        d->txn_totals.commit_us += t1 - t0;
                        log_debug("Committed transaction: %d partition offset(s); its commit point waited %.1f ms "
                                  "for the outputs in flight, then %.1f ms for the commit",
                                  n, (double)(t0 - d->txn_closed_us) / 1e3, (double)(t1 - t0) / 1e3);
                } else if (n > 0 || d->txn_opened_us)
                        log_debug("Committed transaction: %d partition offset(s)", n);
                daemon_txn_forget(d);
                return 0;
        }
        if (r == -ECANCELED) {
                log_warning("%s", err.msg);
                return daemon_txn_abort(d, rewind);
        }
        log_error("%s; stopping", err.msg);
        daemon_fail(d, 1);
        return r;
}

/* Starts a commit point when the open transaction is old enough: nothing
 * new is taken until the slots are done and acknowledged. */
void daemon_txn_maybe_close(daemon_t *d) {
        uint64_t t = daemon_now_us();

        if (!daemon_eos(d) || d->txn_closing || d->draining || !d->pipeline)
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
 * commits and opens the intake again. A doomed transaction is aborted as
 * soon as the slots are empty (its outputs will never be acknowledged), and
 * the partitions rewound: its records come again, and a DLQ copy the broker
 * refused is then cut before it is sent (pipeline_delivery_failed). */
void daemon_txn_check(daemon_t *d) {
        if (!d->txn_closing || d->exit_status)
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
                log_warning("The transaction failed (librdkafka: see the line above); aborting it");
                daemon_txn_abort(d, true);
                d->txn_closing = false;
                if (d->exit_status || d->swap_paused_us)
                        return;
                pipeline_set_intake(d->pipeline, true);
                daemon_pump(d);
                return;
        }
        if (!daemon_nothing_in_flight(d))
                return;
        daemon_txn_commit(d, true);
        d->txn_closing = false;
        if (d->exit_status)
                return;
        if (d->swap_paused_us)
                return;         /* a model swap keeps the intake closed (daemon_swap_end opens it) */
        pipeline_set_intake(d->pipeline, true);
        daemon_pump(d);
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

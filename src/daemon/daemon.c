/* daemon: inferd's manager object: life cycle, signals, rebalances,
 * delivery reports and offsets, drain, reload, sd_notify. See daemon.h.
 *
 * One thread runs everything. The engine computes on its own thread (or the
 * GPU) and librdkafka on its own threads; both reach this loop through fds
 * only. The records' own path (take, pack, submit, reap, produce, DLQ,
 * back-pressure) is the pipeline object (pipeline.h), which this file owns
 * and drives from its event handlers; the pipeline calls back only through
 * the pipeline_ops_t below and knows nothing else of the daemon. What
 * follows a produced record is here:
 *
 *   producer fd -> delivery report -> batch_offsets_done -> store offset
 *   -> commit (shortly after, on the poll timer; synchronously on revoke and
 *      drain; librdkafka's auto-commit as well)
 *
 * Not here: argument parsing (inferd.c), Kafka handles and rebalance
 * protocol details (kafka.c), slot/offset data structures (batch.c). */
#include "daemon/daemon.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/batch.h"
#include "daemon/daemon_model.h"
#include "daemon/httpd.h"
#include "daemon/kafka.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/pipebench.h"
#include "daemon/pipeline.h"
#include "daemon/probes.h"
#include "daemon/rectime.h"
#include "core/labels.h"
#include "core/model.h"
#include "core/units.h"
#include "decode/decode.h"
#include "decode/pool.h"
#include "engine/engine.h"

#define DAEMON_POLL_INTERVAL_US (100 * 1000ULL)
#define DAEMON_STATUS_INTERVAL_US (5 * 1000 * 1000ULL)
#define DAEMON_PIPELINE_DEPTH 2
#define DAEMON_START_EXTEND_US ((uint64_t)120 * 1000 * 1000)
/* The costly numbers (/proc, the device's memory) are sampled this often,
 * never by a scrape. */
#define DAEMON_SAMPLE_INTERVAL_US (1000 * 1000ULL)
#define DAEMON_METRICS_LAG_MAX 1024

struct daemon {
        cfg_t *cfg;                     /* owned; live keys are updated on reload */
        char *config_path;              /* owned */
        sd_event *event;
        sd_event_source *sig_term, *sig_int, *sig_hup;
        sd_event_source *consumer_io, *producer_io, *engine_io, *decode_io;
        sd_event_source *poll_timer, *delay_timer, *hold_timer, *drain_timer, *watchdog_timer, *defer;

        model_t *model;
        labels_t *labels;
        engine_t *engine;
        kafka_t *kafka;
        batch_offsets_t *offsets;       /* lent to the pipeline; the delivery reports mark it here */
        pipeline_t *pipeline;           /* borrows engine, kafka and offsets: freed before them */
        decode_pool_t *decode;          /* JPEG/PNG threads; lent to the pipeline, freed before it */

        bool started, draining, in_revoke;
        bool bench_pipeline;            /* the no-compute pipeline benchmark (pipebench.h) */
        bool stored_uncommitted;        /* an offset was stored since the last commit */

        /* Exactly-once: the positions after the records whose outputs are
         * in the open transaction (what its commit sends), and the commit
         * point in progress (the intake closed until what is in the slots is
         * produced and acknowledged). */
        rd_kafka_topic_partition_list_t *txn_offsets;
        uint64_t txn_opened_us;         /* when the open transaction was first seen; 0 = none */
        bool txn_closing;
        bool txn_doomed;                /* a delivery failed in the open transaction (a DLQ copy too large
                                         * for the broker): once the slots are empty it is aborted and the
                                         * partitions rewound; outputs meanwhile are dropped */
        int txn_doomed_aborts;          /* such aborts since the last commit (a limit stops a loop) */
        int exit_status;
        uint64_t drain_started_us;

        /* A model swap in place (a reload that changes the weights file,
         * the precision or a budget). The new file is loaded on its own
         * thread while the loop keeps serving (stage_*); then the plan is
         * checked, fetching paused, and once the slots are empty and their
         * offsets stored, the engine swaps (daemon_swap_*). */
        cfg_t *swap_cfg;                /* owned: the reloaded file, whose swap keys are adopted on success */
        pthread_t stage_thread;
        bool stage_running;             /* the thread was started and not yet joined */
        int stage_efd;                  /* eventfd: the thread is done */
        sd_event_source *stage_io;
        model_t *stage_model;           /* the thread's result; owned from the join on */
        labels_t *stage_labels;         /* the new config's labels, read against stage_model's classes */
        struct stat stage_stat;         /* the staged file's identity, read before its load */
        bool stage_have_stat;
        /* The identity of the weights file the running model came from, so
         * that a reload notices a new file written at the same path. */
        struct stat weights_stat;
        bool have_weights_stat;
        int stage_r;
        errbuf_t stage_err;
        model_t *swap_model;            /* owned: staged, its plan checked, waiting for the slots to empty */
        labels_t *swap_labels;          /* owned: swap_model's labels (NULL: none configured) */
        char model_name[MODEL_ARCH_MAX + 32];   /* build_info's model label: daemon_model_name */
        plan_t swap_plan;
        uint64_t swap_paused_us;        /* when fetching was paused for the swap */
        daemon_reload_stats_t reload_stats;

        /* Progress and statistics (the pipeline counts its own). */
        uint64_t delivered;
        uint64_t status_last_us, status_last_delivered, status_last_batches, status_last_batch_records;
        uint64_t watchdog_usec;
        uint64_t watchdog_next_us;      /* the next WATCHDOG=1 is due (daemon_watchdog_ping) */

        /* Metrics ([metrics] listen): the server, and what the sampling
         * timer last read; the counters are the pipeline's and Kafka's. */
        httpd_t *httpd;
        sd_event_source *sample_timer;
        const char *version;            /* borrowed (daemon_set_version) */
        bool reloading;
        metrics_hist_t latency;         /* Kafka timestamp to the prediction's delivery report */
        bool have_process, have_gpu, gpu_failed;
        metrics_process_t process;
        engine_device_memory_t gpu;
};

/* The daemon's times are on the pipeline's clock, so that deadlines and
 * progress times from either compare. */
static uint64_t daemon_now_us(void) {
        return pipeline_now_us();
}

/* Ends the loop with a non-zero exit status (the first one set wins). */
static void daemon_fail(daemon_t *d, int status) {
        if (!d->exit_status)
                d->exit_status = status;
        sd_event_exit(d->event, status);
}

static void daemon_stats(const daemon_t *d, pipeline_stats_t *st) {
        pipeline_get_stats(d->pipeline, st);
}

/* Records taken and not finished: in the engine's slots, not yet produced. */
static int daemon_records_in_slots(const daemon_t *d) {
        pipeline_stats_t st;

        daemon_stats(d, &st);
        return st.records_in_slots;
}

/* Serving the consumer queue is not re-entered from a revoke callback, which
 * runs inside it (kafka_consume) and finishes the slots itself. */
static void daemon_pump(daemon_t *d) {
        if (d->in_revoke || !d->pipeline)
                return;
        pipeline_pump(d->pipeline);
}

/* The model swap's steps (below, before the reload) that the drain and the
 * event handlers call. */
static void daemon_swap_end(daemon_t *d, const char *result);
static void daemon_swap_check(daemon_t *d);

/* --- pipeline_ops_t: the pipeline's calls up ----------------------------------- */

static void daemon_pipeline_fail(void *userdata, int status) {
        daemon_fail(userdata, status);
}

static void daemon_pipeline_arm_delay(void *userdata, uint64_t deadline_us) {
        daemon_t *d = userdata;

        sd_event_source_set_time(d->delay_timer, deadline_us);
        sd_event_source_set_enabled(d->delay_timer, SD_EVENT_ONESHOT);
}

static void daemon_pipeline_pump_later(void *userdata) {
        daemon_t *d = userdata;

        sd_event_source_set_enabled(d->defer, SD_EVENT_ONESHOT);
}

static void daemon_pipeline_arm_hold(void *userdata, uint64_t deadline_us) {
        daemon_t *d = userdata;

        if (!d->hold_timer)
                return;
        sd_event_source_set_time(d->hold_timer, deadline_us);
        sd_event_source_set_enabled(d->hold_timer, SD_EVENT_ONESHOT);
}

/* --- exactly-once: the commit point ---------------------------------------- */

#define DAEMON_TXN_TIMEOUT_MS 30000
/* init_transactions retries a coordinator that does not answer for this
 * long, then the daemon stops and says why: within the start-up extension
 * (DAEMON_START_EXTEND_US) sent before it, so that the reason reaches the
 * log before systemd's timeout would. */
#define DAEMON_TXN_INIT_MAX_MS 90000

/* Failed transactions aborted and redone in a row, with no commit between,
 * before the daemon stops: a failure that comes back each time (not a DLQ
 * copy, which is cut when redone) is not retried for ever. */
#define DAEMON_TXN_DOOMED_MAX 5

static bool daemon_eos(const daemon_t *d) {
        return d->kafka && kafka_transactional(d->kafka);
}

/* Records a partition's next offset for the open transaction's commit. */
static int daemon_txn_note(daemon_t *d, const char *topic, int32_t partition, int64_t next) {
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
}

/* After an abortable failure: abort, then read every assigned partition
 * again from the group's committed offsets (what the aborted transaction
 * would have moved on is redone). rewind is false while partitions are being
 * revoked: the next owner reads them from the committed offsets anyway. */
static int daemon_txn_abort(daemon_t *d, bool rewind) {
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
static int daemon_txn_commit(daemon_t *d, bool rewind) {
        int n = d->txn_offsets ? d->txn_offsets->cnt : 0;
        errbuf_t err = {};
        int r;

        r = kafka_txn_commit(d->kafka, d->txn_offsets, DAEMON_TXN_TIMEOUT_MS, &err);
        if (r == 0) {
                d->txn_doomed_aborts = 0;
                if (n > 0 || d->txn_opened_us)
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
static void daemon_txn_maybe_close(daemon_t *d) {
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
        pipeline_set_intake(d->pipeline, false);
}

/* At the commit point (every output acknowledged, nothing in the slots),
 * commits and opens the intake again. A doomed transaction is aborted as
 * soon as the slots are empty (its outputs will never be acknowledged), and
 * the partitions rewound: its records come again, and a DLQ copy the broker
 * refused is then cut before it is sent (pipeline_delivery_failed). */
static void daemon_txn_check(daemon_t *d) {
        if (!d->txn_closing || d->exit_status)
                return;
        if (kafka_txn_failed(d->kafka))
                d->txn_doomed = true;
        if (d->txn_doomed) {
                if (daemon_records_in_slots(d) > 0)
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
        if (daemon_records_in_slots(d) > 0 || batch_offsets_pending(d->offsets) > 0 ||
            kafka_producer_outstanding(d->kafka) > 0)
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

/* --- drain ------------------------------------------------------------------ */

static void daemon_log_left(daemon_t *d, const char *why) {
        log_error("%s: %d record(s) in the pipeline, %zu delivery report(s) awaited, %d in the producer; "
                  "their offsets are not committed and they will be redelivered",
                  why, daemon_records_in_slots(d), batch_offsets_pending(d->offsets),
                  kafka_producer_outstanding(d->kafka));
}

static void daemon_check_drained(daemon_t *d) {
        pipeline_stats_t st;
        errbuf_t err = {};
        int r;

        if (!d->draining || d->exit_status)
                return;
        daemon_stats(d, &st);
        if (st.records_in_slots > 0 || batch_offsets_pending(d->offsets) > 0 ||
            kafka_producer_outstanding(d->kafka) > 0)
                return;
        if (daemon_eos(d)) {
                /* An abortable failure here leaves the offsets where they
                 * were: the next owner redoes those records, and the
                 * aborted outputs are never visible. */
                if (daemon_txn_commit(d, false) < 0 && d->exit_status)
                        return;
        } else {
                r = kafka_commit_sync(d->kafka, &err);
                if (r < 0)
                        log_warning("%s", err.msg);
        }
        r = kafka_close(d->kafka, &err);
        if (r < 0)
                log_warning("%s", err.msg);
        log_info("Drained in %.1f s: %" PRIu64 " records in, %" PRIu64 " predictions, %" PRIu64 " to the DLQ",
                 (double)(daemon_now_us() - d->drain_started_us) / 1e6, st.records_in, st.predictions_out, st.dlq_out);
        sd_event_exit(d->event, 0);
}

static void daemon_extend_stop(daemon_t *d) {
        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64, (uint64_t)(d->cfg->drain.timeout_s + 10) * (uint64_t)1000000);
}

static int daemon_on_drain_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)usec;
        daemon_log_left(d, "Drain timed out");
        daemon_fail(d, 1);
        return 0;
}

static void daemon_begin_drain(daemon_t *d) {
        pipeline_stats_t st;
        int r;

        d->draining = true;
        d->drain_started_us = daemon_now_us();
        if (d->swap_model) {
                /* Its intake stays closed for the drain; the staged file goes. */
                log_info("Reload: not swapping the model: draining");
                daemon_swap_end(d, "rejected");
        }
        daemon_stats(d, &st);
        sd_notifyf(0, "STOPPING=1\nSTATUS=Draining %d record(s)", st.records_in_slots);
        daemon_extend_stop(d);
        log_info("Draining: %d record(s) in the pipeline, %zu held back (redelivered later)", st.records_in_slots,
                 st.records_held);
        if (!d->pipeline) {
                sd_event_exit(d->event, 0);
                return;
        }
        pipeline_begin_drain(d->pipeline);
        r = sd_event_add_time_relative(d->event, &d->drain_timer, CLOCK_MONOTONIC,
                                       (uint64_t)d->cfg->drain.timeout_s * 1000000ULL, 0, daemon_on_drain_timeout,
                                       d);
        if (r < 0)
                log_warning("Failed to arm the drain timer: %s", strerror(-r));
        daemon_check_drained(d);
}

static int daemon_on_stop_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        if (d->draining) {
                log_warning("Second %s while draining: stopping now", strsignal((int)si->ssi_signo));
                daemon_log_left(d, "Stopped before the drain finished");
                daemon_fail(d, 1);
                return 0;
        }
        log_info("Received %s: draining", strsignal((int)si->ssi_signo));
        daemon_begin_drain(d);
        return 0;
}

/* --- rebalance callbacks ----------------------------------------------------- */

static void daemon_on_assigned(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
        daemon_t *d = userdata;

        for (int i = 0; i < parts->cnt; i++) {
                if (batch_offsets_assign(d->offsets, parts->elems[i].topic, parts->elems[i].partition) < 0)
                        log_error("Out of memory tracking partition %" PRId32, parts->elems[i].partition);
                log_info_f(((log_fields_t){ LOG_TOPIC(parts->elems[i].topic), LOG_PARTITION(parts->elems[i].partition) }),
                           "Partition assigned");
        }
}

static void daemon_watchdog_ping(daemon_t *d);

/* Before partitions go: every record taken so far is finished, produced,
 * acknowledged and its offset stored, then committed. Blocks the loop (a
 * rebalance is rare and bounded by drain.timeout_s). */
static void daemon_on_revoking(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost) {
        daemon_t *d = userdata;
        uint64_t start = daemon_now_us(), deadline = start + (uint64_t)d->cfg->drain.timeout_s * 1000000ULL;
        /* The waits below block the event loop, and with it the watchdog
         * timer: they ping themselves, on the same rule (daemon_watchdog_ping),
         * waking at least every quarter interval. */
        int wait_ms = d->watchdog_usec > 0 && d->watchdog_usec / 4000 < 100 ? (int)(d->watchdog_usec / 4000) + 1 : 100;
        int in_slots;
        errbuf_t err = {};
        int left = 0;

        if (!d->pipeline)
                return;         /* not started: nothing was taken */
        d->in_revoke = true;
        in_slots = daemon_records_in_slots(d);
        pipeline_held_drop(d->pipeline, parts);
        pipeline_flush_filling(d->pipeline);
        while (daemon_records_in_slots(d) > 0 && !d->exit_status && daemon_now_us() < deadline) {
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
        log_info("Revoke: waited %.3f s for the records taken before it (%d in slots), monotonic %.3f to %.3f s",
                 (double)(daemon_now_us() - start) / 1e6, in_slots, (double)start / 1e6,
                 (double)daemon_now_us() / 1e6);
        if (daemon_records_in_slots(d) > 0 || batch_offsets_pending(d->offsets) > 0)
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
                 * produced again by the next owner. */
                if (lost || d->txn_doomed || daemon_records_in_slots(d) > 0 ||
                    batch_offsets_pending(d->offsets) > 0) {
                        d->txn_doomed = false;
                        daemon_txn_abort(d, false);
                } else
                        daemon_txn_commit(d, false);
                if (d->txn_closing && !d->exit_status) {
                        d->txn_closing = false;
                        if (!d->swap_paused_us)
                                pipeline_set_intake(d->pipeline, true);
                }
        } else if (!lost && kafka_commit_sync(d->kafka, &err) < 0)
                log_warning("%s", err.msg);
        d->in_revoke = false;
}

static void daemon_on_revoked(void *userdata, const rd_kafka_topic_partition_list_t *parts) {
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
static void daemon_pipeline_skipped(void *userdata, pipeline_ticket_t *t) {
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

static void daemon_on_delivered(void *userdata, const rd_kafka_message_t *m) {
        daemon_t *d = userdata;
        pipeline_ticket_t *t = m->_private;     /* ours from here: the pipeline handed it over */
        int r = 0;

        if (!t)
                return;
        if (m->err && d->pipeline && (r = pipeline_delivery_failed(d->pipeline, m)) == 0)
                return;         /* a DLQ copy too large: produced again without its value, with t */
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
                                      "The broker refused DLQ copies as too large for '%s' (its "
                                      "max.message.bytes): aborting the transaction and reading its records "
                                      "again; copies that large go without their value then",
                                      d->cfg->kafka.dlq_topic);
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

static void daemon_on_fatal(void *userdata, const char *reason) {
        daemon_t *d = userdata;

        log_error("Stopping on a fatal Kafka error: %s", reason);
        daemon_fail(d, 1);
}

/* --- event handlers ------------------------------------------------------------ */

static int daemon_on_consumer_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)revents;
        kafka_fd_clear(fd);
        daemon_pump(d);
        daemon_check_drained(d);
        return 0;
}

static int daemon_on_producer_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)revents;
        kafka_fd_clear(fd);
        kafka_poll_producer(d->kafka);
        /* Delivery reports make room in the producer's queue: a slot that
         * waited for it is produced and freed now, and the records held
         * behind it are taken (fetching resumed) at once, not at the poll
         * timer's next turn. */
        if (d->pipeline && pipeline_produce_pending(d->pipeline) == 0)
                daemon_pump(d);
        daemon_txn_check(d);
        daemon_swap_check(d);
        daemon_check_drained(d);
        return 0;
}

static int daemon_on_engine_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)fd;
        (void)revents;
        pipeline_reap(d->pipeline);
        daemon_txn_maybe_close(d);
        daemon_pump(d);
        daemon_txn_check(d);
        daemon_swap_check(d);
        daemon_check_drained(d);
        return 0;
}

static int daemon_on_decode_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)fd;
        (void)revents;
        pipeline_decoded(d->pipeline);
        daemon_pump(d);
        daemon_check_drained(d);
        return 0;
}

static int daemon_on_delay(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)usec;
        pipeline_delay_expired(d->pipeline);
        return 0;
}

/* The intake has been stopped (records held, or closed) for
 * PIPELINE_HOLD_MAX_US: the pipeline pauses fetching if it still is, and
 * pumps later. */
static int daemon_on_hold(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)usec;
        pipeline_hold_expired(d->pipeline);
        return 0;
}

static int daemon_on_defer(sd_event_source *s, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        daemon_pump(d);
        return 0;
}

static void daemon_status(daemon_t *d, uint64_t t) {
        double secs = (double)(t - d->status_last_us) / 1e6;
        pipeline_stats_t st;
        uint64_t nb;

        if (secs <= 0)
                return;
        daemon_stats(d, &st);
        nb = st.batches - d->status_last_batches;
        /* The partition count is what inferd-cutover reads (systemctl show
         * -p StatusText) to see that an instance holds every partition. */
        sd_notifyf(0, "STATUS=%.1f records/s, batch %.1f, %d/%d slots busy, %zu deliveries awaited, %" PRIu64
                      " records, %" PRIu64 " to the DLQ%s%.0d%s, %d partition(s) assigned", /* %.0d prints nothing for 0 */
                   (double)(d->delivered - d->status_last_delivered) / secs,
                   nb ? (double)(st.batch_records - d->status_last_batch_records) / (double)nb : 0.0,
                   st.slots_in_flight, st.slots, batch_offsets_pending(d->offsets), st.records_in, st.dlq_out,
                   st.max_images_per_s ? ", capped at " : "", st.max_images_per_s,
                   st.max_images_per_s ? " images/s" : "", kafka_get_assigned(d->kafka));
        d->status_last_us = t;
        d->status_last_delivered = d->delivered;
        d->status_last_batches = st.batches;
        d->status_last_batch_records = st.batch_records;
}

static int daemon_on_poll(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;
        uint64_t t = daemon_now_us();

        (void)usec;
        kafka_poll_producer(d->kafka);
        if (d->stored_uncommitted) {
                kafka_commit_async(d->kafka);
                d->stored_uncommitted = false;
        }
        if (pipeline_produce_pending(d->pipeline) == 0)
                daemon_pump(d);
        daemon_txn_maybe_close(d);
        daemon_txn_check(d);
        daemon_swap_check(d);
        daemon_check_drained(d);
        if (!d->draining && t - d->status_last_us >= DAEMON_STATUS_INTERVAL_US)
                daemon_status(d, t);
        sd_event_source_set_time(s, t + DAEMON_POLL_INTERVAL_US);
        return 0;
}

/* WATCHDOG=1 only while the pipeline makes progress: it is idle, or a batch
 * completed within the watchdog interval. A stuck batch stops the pings.
 * Called by the timer and by the loops that block the event loop (the
 * revoke's wait), at most once every quarter interval. */
static void daemon_watchdog_ping(daemon_t *d) {
        uint64_t t = daemon_now_us();
        pipeline_stats_t st;

        if (d->watchdog_usec == 0 || t < d->watchdog_next_us)
                return;
        d->watchdog_next_us = t + d->watchdog_usec / 4;
        daemon_stats(d, &st);
        if (st.slots_in_flight == 0 || t - st.last_progress_us < d->watchdog_usec)
                sd_notify(0, "WATCHDOG=1");
        else
                log_warning("No batch completed for %.1f s: not pinging the watchdog",
                            (double)(t - st.last_progress_us) / 1e6);
}

static int daemon_on_watchdog(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)usec;
        daemon_watchdog_ping(d);
        sd_event_source_set_time(s, d->watchdog_next_us);
        return 0;
}

/* --- model swap in place ------------------------------------------------------------- */

static void daemon_engine_options(const cfg_t *c, engine_options_t *o, char *host_budget, size_t len);

/* Ends a reload that took a swap path: READY=1 again, and the counters. */
static void daemon_swap_end(daemon_t *d, const char *result) {
        if (!strcmp(result, "applied")) {
                d->reload_stats.swaps_applied++;
                d->reload_stats.reloads_applied++;
        } else if (!strcmp(result, "failed")) {
                d->reload_stats.swaps_failed++;
                d->reload_stats.reloads_rejected++;
        } else {
                d->reload_stats.swaps_rejected++;
                d->reload_stats.reloads_rejected++;
        }
        cfg_free(d->swap_cfg);
        d->swap_cfg = NULL;
        model_free(d->swap_model);
        d->swap_model = NULL;
        labels_free(d->swap_labels);
        d->swap_labels = NULL;
        if (d->swap_paused_us && !d->txn_closing && !d->exit_status && !d->draining && d->pipeline) {
                pipeline_set_intake(d->pipeline, true);
                daemon_pump(d);
        }
        d->swap_paused_us = 0;
        d->reloading = false;
        if (!d->draining && !d->exit_status)
                sd_notify(0, "READY=1\nSTATUS=Reloaded");
}

static void daemon_swap_reject(daemon_t *d, const char *why) {
        log_error("Reload rejected: %s; the running model (%s) keeps serving and nothing changed", why,
                  d->model->id);
        daemon_swap_end(d, "rejected");
}

/* Step 4, once the slots are empty and every result is acknowledged (its
 * offset stored): the engine frees the old weights and puts the new ones in
 * the same arena (engine_swap); the old host model is freed; predictions
 * carry the new model id from the next batch on. */
static void daemon_swap_apply(daemon_t *d) {
        uint64_t t0 = daemon_now_us(), t1;
        model_t *old = d->model;
        const plan_t *plan;
        errbuf_t err = {};
        char size[32], arena[32], host[32], budget[32], pinned[32];
        int r;

        r = engine_swap(d->engine, d->swap_model, &d->swap_plan, &err);
        if (r == -EBUSY) {
                /* Not idle after all: nothing changed, so it is only refused. */
                daemon_swap_reject(d, err.msg);
                return;
        }
        if (r < 0) {
                log_error("Failed to swap the model after the old weights were freed: %s; exiting with status 1, "
                          "so that systemd restarts inferd on '%s' as configured",
                          err.msg, d->swap_cfg->model.weights);
                daemon_swap_end(d, "failed");
                daemon_fail(d, 1);
                return;
        }
        /* The engine reads the new model's weights; the old set goes. The
         * labels go with the model (the pipeline borrows them). */
        d->model = d->swap_model;
        d->swap_model = NULL;
        model_free(old);
        pipeline_set_labels(d->pipeline, d->swap_labels);
        labels_free(d->labels);
        d->labels = d->swap_labels;
        d->swap_labels = NULL;
        memcpy(d->cfg->model.labels, d->swap_cfg->model.labels, sizeof(d->cfg->model.labels));
        memcpy(d->cfg->model.weights, d->swap_cfg->model.weights, sizeof(d->cfg->model.weights));
        d->weights_stat = d->stage_stat;
        d->have_weights_stat = d->stage_have_stat;
        d->cfg->model.precision = d->swap_cfg->model.precision;
        memcpy(d->cfg->memory.gpu_budget, d->swap_cfg->memory.gpu_budget, sizeof(d->cfg->memory.gpu_budget));
        d->cfg->memory.gpu_budget_is_percent = d->swap_cfg->memory.gpu_budget_is_percent;
        d->cfg->memory.host_budget_bytes = d->swap_cfg->memory.host_budget_bytes;
        r = pipeline_engine_swapped(d->pipeline, d->model->id, precision_name(engine_precision(d->engine)),
                                    d->cfg->memory.max_batch);
        assert(r == 0);
        t1 = daemon_now_us();
        d->reload_stats.last_swap_s = (double)(t1 - t0) / 1e6;
        d->reload_stats.last_swap_pause_s = (double)(t1 - d->swap_paused_us) / 1e6;
        plan = engine_plan_of(d->engine);
        /* The plan charges what the engine holds since start: its whole
         * arena and staging, whatever this batch carves of them. */
        log_info("Swapped the model in place to %s (%s, %d class%s, '%s'): engine %s %s, batch %d, device plan %s with the %s "
                 "arena allocated at start, host plan %s of %s with the %d decode thread%s running since start "
                 "and the %s of pinned buffers allocated at start; the swap took %.1f ms, fetching was paused for "
                 "%.1f ms",
                 d->model->id, d->model->arch.name, d->model->classes, d->model->classes == 1 ? "" : "es",
                 d->cfg->model.weights, engine_backend(d->engine),
                 precision_name(engine_precision(d->engine)), engine_max_batch(d->engine),
                 units_format_size(plan->total_bytes, size, sizeof(size)),
                 units_format_size(plan->held_arena_bytes, arena, sizeof(arena)),
                 units_format_size(plan->pinned_host_bytes + plan->decode_host_bytes, host, sizeof(host)),
                 units_format_size(plan->host_budget_bytes, budget, sizeof(budget)), plan->decode_threads,
                 plan->decode_threads == 1 ? "" : "s",
                 units_format_size(plan->pinned_host_bytes, pinned, sizeof(pinned)),
                 d->reload_stats.last_swap_s * 1e3, d->reload_stats.last_swap_pause_s * 1e3);
        daemon_swap_end(d, "applied");
}

/* Step 3's end: whether the slots are empty and every result acknowledged
 * (its offset stored); then the swap. Called wherever those change. */
static void daemon_swap_check(daemon_t *d) {
        if (!d->swap_model || !d->swap_paused_us || d->exit_status || d->draining)
                return;
        if (daemon_records_in_slots(d) > 0 || batch_offsets_pending(d->offsets) > 0 ||
            kafka_producer_outstanding(d->kafka) > 0)
                return;
        daemon_swap_apply(d);
}

/* The staging thread: step 1, off the loop. */
static void *daemon_stage_main(void *userdata) {
        daemon_t *d = userdata;
        uint64_t one = 1;

        d->stage_have_stat = stat(d->swap_cfg->model.weights, &d->stage_stat) == 0;
        d->stage_r = model_load(&d->stage_model, d->swap_cfg->model.weights, &d->stage_err);
        if (d->stage_r == 0)
                d->stage_r = daemon_model_check(d->swap_cfg, d->stage_model, &d->stage_labels, &d->stage_err);
        if (write(d->stage_efd, &one, sizeof(one)) != sizeof(one))
                abort();        /* an eventfd write of 1 cannot fail */
        return NULL;
}

static void daemon_stage_join(daemon_t *d) {
        if (!d->stage_running)
                return;
        pthread_join(d->stage_thread, NULL);
        d->stage_running = false;
}

/* The new file is loaded and validated (or refused): step 2, the plan. */
static int daemon_on_stage_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;
        engine_options_t o;
        errbuf_t err = {};
        char host[32], pinned[32], why[sizeof(err.msg) + PATH_MAX + 64];
        uint64_t v;
        int r;

        (void)s;
        (void)revents;
        if (read(fd, &v, sizeof(v)) != sizeof(v))
                return 0;
        daemon_stage_join(d);
        if (d->stage_r < 0) {
                model_free(d->stage_model);
                d->stage_model = NULL;
                snprintf(why, sizeof(why), "%s", d->stage_err.msg);
                daemon_swap_reject(d, why);
                return 0;
        }
        d->swap_model = d->stage_model;
        d->stage_model = NULL;
        d->swap_labels = d->stage_labels;
        d->stage_labels = NULL;
        if (d->draining || d->exit_status) {
                log_info("Reload: not swapping the model: the daemon is stopping");
                daemon_swap_end(d, "rejected");
                return 0;
        }
        /* The decode pool stays as made at start: the plan charges it. */
        daemon_swap_engine_options(d->swap_cfg, d->decode ? decode_pool_threads(d->decode) : 0,
                                   d->decode ? decode_pool_max_pixels(d->decode) : 0, &o, host, sizeof(host));
        r = engine_swap_plan(d->engine, d->swap_model, &o, &d->swap_plan, &err);
        if (r < 0) {
                snprintf(why, sizeof(why), "the new plan for '%s': %s", d->swap_cfg->model.weights, err.msg);
                daemon_swap_reject(d, why);
                return 0;
        }
        if (d->swap_cfg->memory.host_budget_bytes != d->cfg->memory.host_budget_bytes)
                log_warning("Reload: [memory] host_budget changed: the new plan charges it with the pinned "
                            "buffers allocated at start (%s) and the %d decode thread%s running since start; "
                            "librdkafka's queue limits stay as set at start",
                            units_format_size(d->swap_plan.pinned_host_bytes, pinned, sizeof(pinned)),
                            d->swap_plan.decode_threads, d->swap_plan.decode_threads == 1 ? "" : "s");
        /* Step 3: nothing new is taken; what is in the slots finishes. */
        log_info("Reload: %s (%s, %d class%s) from '%s' validated (%s, batch %d); pausing fetching and finishing %d record(s) in "
                 "flight",
                 d->swap_model->id, d->swap_model->arch.name, d->swap_model->classes,
                 d->swap_model->classes == 1 ? "" : "es", d->swap_cfg->model.weights,
                 precision_name(d->swap_plan.precision),
                 d->swap_plan.max_batch, daemon_records_in_slots(d));
        d->swap_paused_us = daemon_now_us();
        pipeline_set_intake(d->pipeline, false);
        daemon_swap_check(d);
        return 0;
}

/* Step 1: the new file (next's weights) is read, validated and folded on a
 * thread, in host memory beside the running model, which keeps serving.
 * Takes next. */
static void daemon_swap_begin(daemon_t *d, cfg_t *next) {
        int r;

        d->swap_cfg = next;
        d->stage_r = 0;
        d->stage_err = (errbuf_t){};
        if (!d->stage_io) {
                r = sd_event_add_io(d->event, &d->stage_io, d->stage_efd, EPOLLIN, daemon_on_stage_io, d);
                if (r < 0) {
                        log_error("Reload rejected: Failed to watch the staging thread: %s", strerror(-r));
                        daemon_swap_end(d, "rejected");
                        return;
                }
        }
        log_info("Reload: loading '%s' beside the running model %s", next->model.weights, d->model->id);
        r = -pthread_create(&d->stage_thread, NULL, daemon_stage_main, d);
        if (r < 0) {
                log_error("Reload rejected: Failed to start the staging thread: %s", strerror(-r));
                daemon_swap_end(d, "rejected");
                return;
        }
        d->stage_running = true;
}

/* Whether the file at path (the running model's path) is no longer the one
 * the running model was loaded from: a new file written or renamed over it.
 * A file that is gone is not a new model (it is logged: a restart would
 * fail). */
static bool daemon_weights_replaced(daemon_t *d, const char *path) {
        struct stat sb;

        if (!d->have_weights_stat)
                return false;
        if (stat(path, &sb) < 0) {
                log_warning("Reload: the running model's file '%s' cannot be read (%s); it keeps serving, but a "
                            "restart would fail",
                            path, strerror(errno));
                return false;
        }
        return sb.st_dev != d->weights_stat.st_dev || sb.st_ino != d->weights_stat.st_ino ||
               sb.st_size != d->weights_stat.st_size || sb.st_mtim.tv_sec != d->weights_stat.st_mtim.tv_sec ||
               sb.st_mtim.tv_nsec != d->weights_stat.st_mtim.tv_nsec;
}

/* [model] weights, precision and labels (a new model may have another
 * class count) and the budgets are taken by a swap. */
static bool daemon_is_swap_key(const cfg_change_t *c) {
        return (!strcmp(c->section, "model") && (!strcmp(c->key, "weights") || !strcmp(c->key, "precision") ||
                                                 !strcmp(c->key, "labels"))) ||
               (!strcmp(c->section, "memory") && (!strcmp(c->key, "gpu_budget") || !strcmp(c->key, "host_budget")));
}

void daemon_get_reload_stats(const daemon_t *d, daemon_reload_stats_t *ret) {
        *ret = d->reload_stats;
}

/* --- reload ------------------------------------------------------------------------ */

static void daemon_reload(daemon_t *d) {
        pipeline_stats_t st;
        cfg_change_t changes[64];
        cfg_t *next = NULL;
        errbuf_t err = {};
        size_t n = 0;
        int r;

        bool swap = false;

        sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=Reloading %s", daemon_now_us(), d->config_path);
        d->reloading = true;
        r = cfg_load(&next, d->config_path, &err);
        if (r < 0) {
                log_error("Failed to reload '%s', keeping the running configuration: %s", d->config_path, err.msg);
                d->reload_stats.reloads_rejected++;
                goto done;
        }
        cfg_diff(d->cfg, next, changes, sizeof(changes) / sizeof(changes[0]), &n);
        daemon_stats(d, &st);
        if (n == 0)
                log_info("Reloaded '%s': no key changed", d->config_path);
        for (size_t i = 0; i < n && i < sizeof(changes) / sizeof(changes[0]); i++) {
                const cfg_change_t *c = &changes[i];

                if (!strcmp(c->section, "model") && !strcmp(c->key, "precision") && d->engine &&
                    !strcmp(engine_backend(d->engine), "cpu")) {
                        /* Nothing to swap for it: the CPU engine computes in fp32. */
                        d->cfg->model.precision = next->model.precision;
                        log_info("Reload: [model] precision applied (the CPU engine computes in fp32 whatever it "
                                 "says)");
                        continue;
                }
                if (daemon_is_swap_key(c)) {
                        /* Taken together, after the live keys: a model swap. */
                        log_info("Reload: [%s] %s changed: swapping the model in place", c->section, c->key);
                        swap = true;
                        continue;
                }
                if (!c->live) {
                        log_warning("Reload: [%s] %s changed; this needs a restart and is not applied", c->section,
                                    c->key);
                        continue;
                }
                if (!strcmp(c->section, "service") && !strcmp(c->key, "log_level")) {
                        d->cfg->service.log_level = next->service.log_level;
                        log_set_level(next->service.log_level);
                } else if (!strcmp(c->section, "service") && !strcmp(c->key, "top_k")) {
                        if (next->service.top_k > d->model->classes) {
                                log_warning("Reload: [service] top_k = %d is above the %d class%s of the running "
                                            "model (%s); keeping %d",
                                            next->service.top_k, d->model->classes,
                                            d->model->classes == 1 ? "" : "es", d->model->arch.name, st.top_k);
                                continue;
                        }
                        if (pipeline_set_top_k(d->pipeline, next->service.top_k) < 0) {
                                log_warning("Reload: [service] top_k = %d is above the %d the engine was opened "
                                            "with; this needs a restart, keeping %d",
                                            next->service.top_k, st.engine_top_k, st.top_k);
                                continue;
                        }
                        d->cfg->service.top_k = next->service.top_k;
                } else if (!strcmp(c->section, "batching") && !strcmp(c->key, "max_delay_ms")) {
                        d->cfg->batching.max_delay_ms = next->batching.max_delay_ms;
                        pipeline_set_max_delay_ms(d->pipeline, next->batching.max_delay_ms);
                } else if (!strcmp(c->section, "batching") && !strcmp(c->key, "max_images_per_s")) {
                        /* 0 lifts the cap; a batch waiting for it goes now. */
                        d->cfg->batching.max_images_per_s = next->batching.max_images_per_s;
                        pipeline_set_max_images_per_s(d->pipeline, next->batching.max_images_per_s);
                } else if (!strcmp(c->section, "batching") && (!strcmp(c->key, "max_record_age") ||
                                                               !strcmp(c->key, "max_record_age_action"))) {
                        d->cfg->batching.max_record_age_ms = next->batching.max_record_age_ms;
                        d->cfg->batching.max_record_age_action = next->batching.max_record_age_action;
                        pipeline_set_max_record_age(d->pipeline, next->batching.max_record_age_ms,
                                                    next->batching.max_record_age_action == CFG_AGE_SKIP);
                } else if (!strcmp(c->section, "service") &&
                           (!strcmp(c->key, "trace_headers") || !strcmp(c->key, "timing_header"))) {
                        d->cfg->service.trace_headers = next->service.trace_headers;
                        d->cfg->service.timing_header = next->service.timing_header;
                        pipeline_set_headers(d->pipeline, next->service.trace_headers, next->service.timing_header);
                } else if (!strcmp(c->section, "memory") && !strcmp(c->key, "max_batch")) {
                        int got = pipeline_set_max_batch(d->pipeline, next->memory.max_batch);

                        d->cfg->memory.max_batch = next->memory.max_batch;
                        if (got != next->memory.max_batch)
                                log_warning("Reload: [memory] max_batch = %d is above the plan's %d; using %d",
                                            next->memory.max_batch, st.batch_capacity, got);
                } else if (!strcmp(c->section, "drain") && !strcmp(c->key, "timeout_s")) {
                        d->cfg->drain.timeout_s = next->drain.timeout_s;
                } else {
                        log_warning("Reload: [%s] %s changed; this needs a restart and is not applied", c->section,
                                    c->key);
                        continue;
                }
                log_info("Reload: [%s] %s applied", c->section, c->key);
        }
        if (n > sizeof(changes) / sizeof(changes[0]))
                log_warning("Reload: %zu more changes not listed; they need a restart",
                            n - sizeof(changes) / sizeof(changes[0]));
        if (!swap && !strcmp(next->model.weights, d->cfg->model.weights) &&
            daemon_weights_replaced(d, next->model.weights)) {
                log_info("Reload: '%s' is a new file at the same path: swapping the model in place",
                         next->model.weights);
                swap = true;
        }
        if (swap) {
                /* READY=1 comes when the swap ends (daemon_swap_end). */
                daemon_swap_begin(d, next);
                return;
        }
        d->reload_stats.reloads_applied++;
done:
        cfg_free(next);
        d->reloading = false;
        sd_notify(0, "READY=1\nSTATUS=Reloaded");
}

static int daemon_on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)si;
        if (d->draining) {
                log_info("Ignoring SIGHUP while draining");
                return 0;
        }
        if (d->swap_cfg) {
                log_warning("Ignoring SIGHUP: the model swap of the previous reload is still in progress");
                return 0;
        }
        daemon_reload(d);
        return 0;
}

/* --- metrics ---------------------------------------------------------------------- */

/* Start-up runs before the loop: its long steps (loading the weights,
 * opening the engine, Kafka's transactions) hold the thread, and the
 * requests that arrive meanwhile are answered between them
 * (daemon_serve_starting), so they see "starting". A reload's model swap
 * stages and drains while the loop runs, so it is seen as "reloading" until
 * the swap ends; a reload without a swap ends within its callback. */
static const char *daemon_state(const daemon_t *d) {
        if (d->draining)
                return "draining";
        if (!d->started)
                return "starting";
        if (d->reloading)
                return "reloading";
        return "ready";
}

/* The costly numbers, once a second: /proc/self and the device's memory. */
static void daemon_sample(daemon_t *d) {
        errbuf_t err = {};
        int r;

        d->have_process = metrics_process_sample(&d->process) == 0;
        if (!d->engine)
                return;
        r = engine_device_memory(d->engine, &d->gpu, &err);
        d->have_gpu = r == 0;
        if (r < 0 && r != -EOPNOTSUPP && !d->gpu_failed)
                log_warning("%s; the GPU memory metrics are left out until it answers", err.msg);
        d->gpu_failed = r < 0 && r != -EOPNOTSUPP;
}

static int daemon_on_sample(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)usec;
        daemon_sample(d);
        sd_event_source_set_time(s, daemon_now_us() + DAEMON_SAMPLE_INTERVAL_US);
        return 0;
}

/* GET /metrics: formats what the counters and the last sample hold; reads
 * nothing that can block. */
static int daemon_metrics(daemon_t *d, char **ret, size_t *len) {
        static metrics_lag_t lag[DAEMON_METRICS_LAG_MAX];       /* one loop thread: no concurrent scrapes */
        metrics_snapshot_t s = {};
        pipeline_stats_t st;
        struct timespec now;

        if (d->pipeline)
                pipeline_get_stats(d->pipeline, &st);
        else
                st = (pipeline_stats_t){};      /* starting: no pipeline yet */
        s.predicted = st.predictions_out;
        s.dead_lettered = st.dlq_out;
        s.expired = st.expired_skipped;
        s.stage_seconds = st.stage_seconds;
        s.stage_names = rectime_stage_names;
        s.n_stages = RECTIME_STAGES;
        s.dlq_values_omitted = st.dlq_values_omitted;
        s.batches = st.batches;
        s.dead_letters = st.dlq_codes;
        s.n_dead_letters = st.n_dlq_codes;
        s.batch_size = st.batch_size;
        s.batch_seconds = st.batch_seconds;
        s.latency_seconds = &d->latency;
        if (d->kafka) {
                clock_gettime(CLOCK_REALTIME, &now);
                s.lag = lag;
                s.n_lag = kafka_get_lag(d->kafka, lag, DAEMON_METRICS_LAG_MAX,
                                        (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
                s.assigned_partitions = kafka_get_assigned(d->kafka);
                /* Back-pressure, or the throughput cap holding records. */
                s.paused = kafka_is_paused(d->kafka) || st.paused_by_cap || st.holding;
                s.n_kafka_errors = kafka_get_errors(d->kafka, &s.kafka_errors);
        }
        s.slots = st.slots;
        s.slots_busy = st.slots_in_flight;
        if (d->engine) {
                s.plan = engine_plan_of(d->engine);
                s.backend = engine_backend(d->engine);
                s.precision = precision_name(engine_precision(d->engine));
        }
        s.have_gpu = d->have_gpu;
        s.gpu_used_bytes = d->gpu.used_bytes;
        s.gpu_total_bytes = d->gpu.total_bytes;
        s.gpu_arena_bytes = d->gpu.arena_bytes;
        s.state = daemon_state(d);
        s.version = d->version;
        s.model = d->model ? daemon_model_name(d->model, d->model_name, sizeof(d->model_name)) : NULL;
        s.reloads_applied = d->reload_stats.reloads_applied;
        s.reloads_rejected = d->reload_stats.reloads_rejected;
        s.swaps_applied = d->reload_stats.swaps_applied;
        s.swaps_rejected = d->reload_stats.swaps_rejected;
        s.swaps_failed = d->reload_stats.swaps_failed;
        s.last_swap_s = d->reload_stats.last_swap_s;
        s.last_swap_pause_s = d->reload_stats.last_swap_pause_s;
        s.have_process = d->have_process;
        s.process = d->process;
        return metrics_format(&s, ret, len);
}

static int daemon_text(httpd_response_t *ret, unsigned status, const char *text) {
        ret->status = status;
        ret->content_type = "text/plain; charset=utf-8";
        if (asprintf(&ret->body, "%s\n", text) < 0) {
                ret->body = NULL;
                return -ENOMEM;
        }
        ret->len = strlen(ret->body);
        return 0;
}

/* GET /readyz's state (probes.h). */
static void daemon_probes_state(const daemon_t *d, probes_state_t *ret) {
        kafka_health_t h = d->kafka ? kafka_get_health(d->kafka) : KAFKA_HEALTH_OK;

        *ret = (probes_state_t){
                .started = d->started,
                .draining = d->draining || d->exit_status,
                .reloading = d->reloading,
                .auth_failed = h == KAFKA_HEALTH_AUTH_FAILED,
                .kafka_unreachable = h == KAFKA_HEALTH_UNREACHABLE,
                .assigned_partitions = d->kafka ? kafka_get_assigned(d->kafka) : 0,
        };
}

static int daemon_on_http(void *userdata, const char *path, httpd_response_t *ret) {
        daemon_t *d = userdata;
        probes_state_t ps;
        const char *state;

        if (!strcmp(path, "/metrics")) {
                ret->status = 200;
                ret->content_type = METRICS_CONTENT_TYPE;
                return daemon_metrics(d, &ret->body, &ret->len);
        }
        if (!strcmp(path, "/healthz")) {
                /* Ready: started, consuming, neither reloading nor draining
                 * nor stopping on a failure. */
                state = d->exit_status ? "stopping" : daemon_state(d);
                /* Ready but refused by the brokers: say why. */
                if (!strcmp(state, "ready") && d->kafka && *kafka_get_auth_error(d->kafka)) {
                        char why[640];

                        snprintf(why, sizeof(why), "not ready: Kafka %s", kafka_get_auth_error(d->kafka));
                        return daemon_text(ret, 503, why);
                }
                return daemon_text(ret, strcmp(state, "ready") ? 503 : 200, state);
        }
        if (!strcmp(path, "/livez"))
                /* Answered on the loop thread: the loop turns. */
                return daemon_text(ret, 200, "alive");
        if (!strcmp(path, "/readyz")) {
                daemon_probes_state(d, &ps);
                state = probes_ready_reason(&ps);
                return daemon_text(ret, state ? 503 : 200, state ? state : "ready");
        }
        return daemon_text(ret, 404, "not found: GET /metrics, /healthz, /livez or /readyz");
}

/* The endpoint first, before anything slow: a port that cannot be bound
 * stops the start at once, naming the address. */
static int daemon_metrics_start(daemon_t *d, errbuf_t *err) {
        const httpd_security_t sec = {
                .tls_cert_path = d->cfg->metrics.tls_cert[0] ? d->cfg->metrics.tls_cert : NULL,
                .tls_key_path = d->cfg->metrics.tls_key[0] ? d->cfg->metrics.tls_key : NULL,
                .users_path = d->cfg->metrics.basic_auth_users[0] ? d->cfg->metrics.basic_auth_users : NULL,
                .open_paths = d->cfg->metrics.auth_healthz ? NULL : "/healthz /livez /readyz",
        };
        int r;

        if (!d->cfg->metrics.listen[0])
                return 0;
        r = httpd_new_secure(&d->httpd, d->event, d->cfg->metrics.listen,
                             &(httpd_limits_t){ .max_connections = (unsigned)d->cfg->metrics.max_connections,
                                                .max_connections_per_ip =
                                                        (unsigned)d->cfg->metrics.max_connections_per_ip,
                                                .timeout_s = (unsigned)d->cfg->metrics.timeout_s },
                             &sec, daemon_on_http, d, err);
        if (r < 0)
                return errbuf_prefix(err, r, "[metrics]");
        r = sd_event_add_time(d->event, &d->sample_timer, CLOCK_MONOTONIC, daemon_now_us() + DAEMON_SAMPLE_INTERVAL_US,
                              0, daemon_on_sample, d);
        if (r < 0)
                return errbuf_set(err, r, "Failed to add the metrics timer: %s", strerror(-r));
        sd_event_source_set_enabled(d->sample_timer, SD_EVENT_ON);
        log_info("Metrics on %s://%s/metrics, probes on /livez and /readyz (and /healthz)%s%s",
                 sec.tls_cert_path ? "https" : "http", d->cfg->metrics.listen,
                 sec.users_path ? "; basic auth on " : "",
                 sec.users_path ? (sec.open_paths ? "/metrics (the probes open)" : "all") : "");
        return 0;
}

void daemon_set_version(daemon_t *d, const char *version) {
        d->version = version;
}

/* --- life cycle --------------------------------------------------------------------- */

int daemon_new(daemon_t **ret, cfg_t *cfg, const char *config_path, errbuf_t *err) {
        daemon_t *d;
        int r;

        assert(ret && cfg);
        d = calloc(1, sizeof(*d));
        if (!d) {
                cfg_free(cfg);
                return -ENOMEM;
        }
        d->cfg = cfg;
        d->stage_efd = -1;
        d->config_path = strdup(config_path ? config_path : CFG_DEFAULT_PATH);
        if (!d->config_path) {
                r = -ENOMEM;
                goto fail;
        }
        r = batch_offsets_new(&d->offsets);
        if (r < 0)
                goto fail;
        d->stage_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (d->stage_efd < 0) {
                r = -errno;
                errbuf_set(err, r, "Failed to create an eventfd: %s", strerror(-r));
                goto fail;
        }
        r = sd_event_default(&d->event);
        if (r < 0) {
                errbuf_set(err, r, "Failed to create the event loop: %s", strerror(-r));
                goto fail;
        }
        /* The signals were blocked by main before any thread started. */
        if ((r = sd_event_add_signal(d->event, &d->sig_term, SIGTERM, daemon_on_stop_signal, d)) < 0 ||
            (r = sd_event_add_signal(d->event, &d->sig_int, SIGINT, daemon_on_stop_signal, d)) < 0 ||
            (r = sd_event_add_signal(d->event, &d->sig_hup, SIGHUP, daemon_on_sighup, d)) < 0) {
                errbuf_set(err, r, "Failed to add the signal sources: %s", strerror(-r));
                goto fail;
        }
        metrics_hist_init(&d->latency, METRICS_HIST_LATENCY_SECONDS);
        log_setup(cfg->service.instance, LOG_TARGET_AUTO);
        log_set_level(cfg->service.log_level);
        *ret = d;
        return 0;
fail:
        daemon_free(d);
        return r;
}

void daemon_free(daemon_t *d) {
        if (!d)
                return;
        /* Every message goes before its handle (rd_kafka_destroy waits for
         * them): the pipeline destroys those it holds. It borrows the engine,
         * Kafka and the offset store, so it goes first. */
        /* The decode threads write into the engine's slots and read the
         * pipeline's messages: they stop first. */
        decode_pool_free(d->decode);
        d->decode = NULL;
        /* A staging thread still loading a file reads d->swap_cfg. */
        daemon_stage_join(d);
        model_free(d->stage_model);
        labels_free(d->stage_labels);
        model_free(d->swap_model);
        labels_free(d->swap_labels);
        cfg_free(d->swap_cfg);
        sd_event_source_unref(d->stage_io);
        if (d->stage_efd >= 0)
                close(d->stage_efd);
        pipeline_free(d->pipeline);
        d->pipeline = NULL;
        /* Then Kafka, before the rest: its callbacks point into d. */
        kafka_free(d->kafka);
        d->kafka = NULL;
        httpd_free(d->httpd);
        sd_event_source_unref(d->sample_timer);
        sd_event_source_unref(d->sig_term);
        sd_event_source_unref(d->sig_int);
        sd_event_source_unref(d->sig_hup);
        sd_event_source_unref(d->consumer_io);
        sd_event_source_unref(d->producer_io);
        sd_event_source_unref(d->engine_io);
        sd_event_source_unref(d->decode_io);
        sd_event_source_unref(d->poll_timer);
        sd_event_source_unref(d->delay_timer);
        sd_event_source_unref(d->hold_timer);
        sd_event_source_unref(d->drain_timer);
        sd_event_source_unref(d->watchdog_timer);
        sd_event_source_unref(d->defer);
        sd_event_unref(d->event);
        engine_free(d->engine);
        labels_free(d->labels);
        model_free(d->model);
        batch_offsets_free(d->offsets);
        if (d->txn_offsets)
                rd_kafka_topic_partition_list_destroy(d->txn_offsets);
        cfg_free(d->cfg);
        free(d->config_path);
        free(d);
}

/* The engine options a config gives (shared with inferd --plan). */
static void daemon_engine_options(const cfg_t *c, engine_options_t *o, char *host_budget, size_t len) {
        engine_options_init(o);
        o->backend = c->engine.backend;
        /* The config's precision is CUDA's; the CPU engine computes in fp32
         * whatever it says (the file's comment says so), as AUTO does. */
        o->precision = c->engine.backend == BACKEND_CPU ? PRECISION_AUTO : c->model.precision;
        o->device = c->engine.device;
        o->device_budget = c->memory.gpu_budget;
        snprintf(host_budget, len, "%" PRIu64, c->memory.host_budget_bytes);
        o->host_budget = host_budget;
        o->max_batch = c->memory.max_batch;
        o->pipeline_depth = DAEMON_PIPELINE_DEPTH;
        o->top_k = c->service.top_k;
        /* The decode contexts are planned as the daemon makes them, from the
         * host budget (plan_decode_fit); librdkafka keeps at least its
         * floor of it. */
        o->decode_threads = c->decode.threads;
        o->decode_threads_auto = decode_default_threads();
        o->decode_max_pixels = (uint64_t)c->decode.max_pixels;
        o->host_reserve_bytes = KAFKA_LIMITS_MIN_BYTES;
        /* ... and more when the back-pressure hold needs it: its queue
         * holds the records left in it while the pipeline is full. */
        o->kafka_hold_us = PIPELINE_HOLD_MAX_US;
        o->kafka_hold_rate_per_s = c->batching.max_images_per_s;
}

void daemon_swap_engine_options(const cfg_t *next, int decode_threads, uint64_t decode_max_pixels,
                                engine_options_t *o, char *host_budget, size_t len) {
        daemon_engine_options(next, o, host_budget, len);
        /* Not next's [decode] threads and max_pixels (they need a restart),
         * nor the automatic rule on its budget: the contexts that exist. */
        o->decode_threads = decode_threads;
        o->decode_threads_auto = 0;
        o->decode_max_pixels = decode_threads > 0 ? decode_max_pixels : 0;
        o->decode_running = decode_threads > 0;
}

int daemon_check_host_budget(const cfg_t *c, errbuf_t *err) {
        plan_decode_terms_t t;
        plan_decode_limit_t limit;
        uint64_t per_thread;
        int n, r;

        r = plan_decode_terms((uint64_t)c->decode.max_pixels, 0, &t);
        if (r < 0)
                return errbuf_set(err, r, "[decode] max_pixels = %d cannot be planned", c->decode.max_pixels);
        per_thread = t.buffer_bytes + t.library_bytes;
        r = plan_decode_fit(c->memory.host_budget_bytes, KAFKA_LIMITS_MIN_BYTES, c->decode.threads,
                            decode_default_threads(), per_thread, &n, &limit);
        if (r < 0)
                return plan_decode_refuse(err, c->memory.host_budget_bytes, 0, KAFKA_LIMITS_MIN_BYTES,
                                          c->decode.threads, (uint64_t)c->decode.max_pixels, per_thread);
        return 0;
}

int daemon_plan(const cfg_t *c, plan_t *ret, char *warning, size_t warning_len, errbuf_t *err) {
        engine_options_t o;
        model_t *m = NULL;
        char host[32];
        int r;

        char note[PATH_MAX + 96];

        daemon_engine_options(c, &o, host, sizeof(host));
        r = daemon_model_describe(c, &m, note, sizeof(note), err);
        if (r < 0)
                return r;
        r = daemon_model_check(c, m, NULL, err);
        if (r == 0)
                r = engine_plan(m, &o, ret, warning, warning_len, err);
        model_free(m);
        if (r == 0 && note[0] && warning && warning_len && !warning[0])
                snprintf(warning, warning_len, "%s", note);
        return r;
}

/* Between start-up's long steps: the metrics requests that waited meanwhile
 * are answered ("starting"; the metrics known so far). */
static void daemon_serve_starting(daemon_t *d) {
        httpd_serve_pending(d->httpd);
}

int daemon_start(daemon_t *d, errbuf_t *err) {
        const kafka_callbacks_t cb = {
                .assigned = daemon_on_assigned,
                .revoking = daemon_on_revoking,
                .revoked = daemon_on_revoked,
                .delivered = daemon_on_delivered,
                .fatal = daemon_on_fatal,
        };
        const pipeline_ops_t ops = {
                .fail = daemon_pipeline_fail,
                .arm_delay = daemon_pipeline_arm_delay,
                .pump_later = daemon_pipeline_pump_later,
                .arm_hold = daemon_pipeline_arm_hold,
                .skipped = daemon_pipeline_skipped,
        };
        pipeline_config_t pcfg;
        pipeline_stats_t st;
        engine_options_t o;
        kafka_limits_t lim;
        const plan_t *plan;
        char host[32], warning[512] = "", size[32];
        int r;

        r = daemon_metrics_start(d, err);
        if (r < 0)
                return r;
        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Loading %s", DAEMON_START_EXTEND_US,
                   d->cfg->model.weights);
        if (d->bench_pipeline) {
                /* The layer table only: nothing is computed. */
                r = model_describe(&d->model);
                if (r < 0)
                        return errbuf_set(err, r, "Failed to describe the model: %s", strerror(-r));
                snprintf(d->model->id, sizeof(d->model->id), "none");
        } else {
                d->have_weights_stat = stat(d->cfg->model.weights, &d->weights_stat) == 0;
                r = model_load(&d->model, d->cfg->model.weights, err);
                if (r < 0)
                        return r;
                log_info("Model %s: %s with %d class%s from '%s'%s%s", d->model->id, d->model->arch.name,
                         d->model->classes, d->model->classes == 1 ? "" : "es", d->cfg->model.weights,
                         d->cfg->model.labels[0] ? ", labels " : "", d->cfg->model.labels);
        }
        r = daemon_model_check(d->cfg, d->model, &d->labels, err);
        if (r < 0)
                return r;
        daemon_serve_starting(d);
        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Planning and opening the engine",
                   DAEMON_START_EXTEND_US);
        daemon_engine_options(d->cfg, &o, host, sizeof(host));
        if (d->bench_pipeline) {
                plan_t bench_plan;

                o.backend = BACKEND_CPU;
                o.precision = PRECISION_AUTO;
                r = engine_plan(d->model, &o, &bench_plan, NULL, 0, err);
                if (r < 0)
                        return r;
                r = pipebench_open(&d->engine, &bench_plan, err);
                if (r < 0)
                        return r;
                log_warning("PIPELINE BENCHMARK MODE: the model is not run; every prediction is a placeholder "
                            "(backend \"%s\")", PIPEBENCH_BACKEND_NAME);
        } else {
                r = engine_open(&d->engine, d->model, &o, warning, sizeof(warning), err);
                if (r < 0)
                        return r;
        }
        if (warning[0])
                log_warning("%s", warning);
        daemon_serve_starting(d);
        plan = engine_plan_of(d->engine);
        log_info("Engine %s %s: batch %d, %d slots, device plan %s", engine_backend(d->engine),
                 precision_name(engine_precision(d->engine)), engine_max_batch(d->engine), engine_slots(d->engine),
                 units_format_size(plan->total_bytes, size, sizeof(size)));
        /* What the host budget leaves after the pinned buffers and the
         * decode contexts bounds the records librdkafka may prefetch (at
         * least KAFKA_LIMITS_MIN_BYTES: the plan kept that free). */
        kafka_limits_from_plan(plan, &lim);
        r = kafka_new(&d->kafka, d->cfg, &lim, &cb, d, err);
        if (r < 0)
                return r;
        if (kafka_transactional(d->kafka)) {
                /* Fences an earlier incarnation of this instance and aborts
                 * the transaction it left open. */
                sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Initialising Kafka transactions",
                           DAEMON_START_EXTEND_US);
                r = kafka_txn_init(d->kafka, DAEMON_TXN_TIMEOUT_MS, DAEMON_TXN_INIT_MAX_MS, err);
                if (r < 0)
                        return r;
                log_info("Exactly-once delivery: transactions of up to %d ms, read_committed input",
                         d->cfg->kafka.transaction_max_ms);
                daemon_serve_starting(d);
        }
        /* The decode contexts the plan counted, one job per slot position. */
        r = decode_pool_new(&d->decode, plan->decode_threads, plan->decode_max_pixels, d->cfg->decode.max_bytes,
                            d->cfg->decode.fast, d->cfg->decode.exif_orientation,
                            (size_t)engine_slots(d->engine) * (size_t)engine_max_batch(d->engine), err);
        if (r < 0)
                return errbuf_prefix(err, r, "Failed to start the decode threads");
        decode_pool_set_max_scan_megapixels(d->decode, (uint64_t)d->cfg->decode.max_scan_megapixels);
        log_info("Decode: %d thread%s (%s) for images up to %d pixels and %s%s%s; their buffers %s of the host budget",
                 plan->decode_threads,
                 plan->decode_threads == 1 ? "" : "s",
                 plan->decode_limit == PLAN_DECODE_LIMIT_THREADS ? "[decode] threads"
                 : plan->decode_limit == PLAN_DECODE_LIMIT_CORES ? "the cores minus one"
                                                                 : "half the host budget left by the pinned buffers",
                 d->cfg->decode.max_pixels, units_format_size(d->cfg->decode.max_bytes, size, sizeof(size)),
                 d->cfg->decode.fast ? ", fast JPEG mode ([decode] fast = yes: not identical to torchvision)" : "",
                 d->cfg->decode.exif_orientation ? ", turned by their EXIF orientation ([decode] exif_orientation = yes)"
                                                 : "",
                 units_format_size(plan->decode_host_bytes, host, sizeof(host)));

        /* The pipeline borrows what it is given here (the topic strings and
         * the meta's strings live in d->cfg, d->model and d->engine, which
         * outlive it: daemon_free frees it first). */
        pcfg = (pipeline_config_t){
                .engine = d->engine,
                .kafka = d->kafka,
                .offsets = d->offsets,
                .output_topic = d->cfg->kafka.output_topic,
                .dlq_topic = d->cfg->kafka.dlq_topic,
                .max_batch = d->cfg->memory.max_batch,
                .top_k = d->cfg->service.top_k,
                .max_delay_ms = d->cfg->batching.max_delay_ms,
                .max_images_per_s = d->cfg->batching.max_images_per_s,
                .max_record_age_ms = d->cfg->batching.max_record_age_ms,
                .expired_skip = d->cfg->batching.max_record_age_action == CFG_AGE_SKIP,
                .trace_headers = d->cfg->service.trace_headers,
                .timing_header = d->cfg->service.timing_header,
                .meta = {
                        .model_id = d->model->id,
                        .backend = engine_backend(d->engine),
                        .precision = precision_name(engine_precision(d->engine)),
                        .instance = d->cfg->service.instance,
                        .labels = d->labels,
                },
                .decode = d->decode,
        };
        r = pipeline_new(&d->pipeline, &pcfg, &ops, d);
        if (r < 0)
                return errbuf_set(err, r, "Failed to set up the pipeline: %s", strerror(-r));

        if ((r = sd_event_add_io(d->event, &d->consumer_io, kafka_consumer_fd(d->kafka), EPOLLIN,
                                 daemon_on_consumer_io, d)) < 0 ||
            (r = sd_event_add_io(d->event, &d->producer_io, kafka_producer_fd(d->kafka), EPOLLIN,
                                 daemon_on_producer_io, d)) < 0 ||
            (r = sd_event_add_io(d->event, &d->engine_io, engine_completion_fd(d->engine), EPOLLIN,
                                 daemon_on_engine_io, d)) < 0 ||
            (r = sd_event_add_io(d->event, &d->decode_io, decode_pool_fd(d->decode), EPOLLIN,
                                 daemon_on_decode_io, d)) < 0 ||
            (r = sd_event_add_time(d->event, &d->poll_timer, CLOCK_MONOTONIC, daemon_now_us() + DAEMON_POLL_INTERVAL_US,
                                   0, daemon_on_poll, d)) < 0 ||
            /* Accuracy 1 us: 0 would be sd-event's default of 250 ms, which
             * may fire a 5 ms batch delay, or the cap's wake-up, 250 ms late. */
            (r = sd_event_add_time(d->event, &d->delay_timer, CLOCK_MONOTONIC, 0, 1, daemon_on_delay, d)) < 0 ||
            /* The same accuracy: a late hold timer is time with nothing
             * taken from the consumer (rebalances wait for it). */
            (r = sd_event_add_time(d->event, &d->hold_timer, CLOCK_MONOTONIC, 0, 1, daemon_on_hold, d)) < 0 ||
            (r = sd_event_add_defer(d->event, &d->defer, daemon_on_defer, d)) < 0)
                return errbuf_set(err, r, "Failed to add the event sources: %s", strerror(-r));
        sd_event_source_set_enabled(d->poll_timer, SD_EVENT_ON);
        sd_event_source_set_enabled(d->delay_timer, SD_EVENT_OFF);
        sd_event_source_set_enabled(d->hold_timer, SD_EVENT_OFF);
        sd_event_source_set_enabled(d->defer, SD_EVENT_OFF);
        if (sd_watchdog_enabled(0, &d->watchdog_usec) > 0 && d->watchdog_usec > 0) {
                d->watchdog_next_us = daemon_now_us();
                r = sd_event_add_time(d->event, &d->watchdog_timer, CLOCK_MONOTONIC, d->watchdog_next_us, 0,
                                      daemon_on_watchdog, d);
                if (r < 0)
                        return errbuf_set(err, r, "Failed to add the watchdog timer: %s", strerror(-r));
                sd_event_source_set_enabled(d->watchdog_timer, SD_EVENT_ON);
        }

        r = kafka_subscribe(d->kafka, err);
        if (r < 0)
                return r;
        d->started = true;
        d->status_last_us = daemon_now_us();
        daemon_sample(d);
        log_info("Consuming '%s' from %s as group '%s': predictions to '%s', refused records to '%s'",
                 d->cfg->kafka.input_topic, d->cfg->kafka.brokers, d->cfg->kafka.group_id,
                 d->cfg->kafka.output_topic, d->cfg->kafka.dlq_topic);
        pipeline_get_stats(d->pipeline, &st);
        if (st.max_images_per_s)
                log_info("Throughput capped at %d images/s ([batching] max_images_per_s)", st.max_images_per_s);
        sd_notifyf(0, "READY=1\nSTATUS=Consuming %s, batch up to %d", d->cfg->kafka.input_topic, st.batch_limit);
        return 0;
}

void daemon_set_bench_pipeline(daemon_t *d, bool on) {
        d->bench_pipeline = on;
}

int daemon_run(daemon_t *d) {
        int r = sd_event_loop(d->event);

        if (r < 0) {
                log_error("The event loop failed: %s", strerror(-r));
                return 1;
        }
        return d->exit_status ? d->exit_status : r;
}

/* daemon: inferd's manager object: its life cycle (new, start, run, free),
 * its one sd-event loop's handlers, the drain and the stop signals, and
 * sd_notify's READY/STATUS/STOPPING/WATCHDOG. See daemon.h.
 *
 * One thread runs everything. The engine computes on its own thread (or the
 * GPU) and librdkafka on its own threads; both reach this loop through fds
 * only. The records' own path (take, pack, submit, reap, produce, DLQ,
 * back-pressure) is the pipeline object (pipeline.h), which this file owns
 * and drives from its event handlers; the pipeline calls back only through
 * the pipeline_ops_t below and knows nothing else of the daemon. After each
 * event, daemon_progress runs the commit point's, the swap's and the drain's
 * checks in one fixed order (see there). What follows a produced record is
 * in daemon_rebalance.c:
 *
 *   producer fd -> delivery report -> batch_offsets_done -> store offset
 *   -> commit (shortly after, on the poll timer; synchronously on revoke and
 *      drain; librdkafka's auto-commit as well)
 *
 * The object's other jobs have files of their own, sharing its struct
 * (daemon_priv.h): exactly-once commit points (daemon_txn.c), Kafka's
 * rebalance and delivery callbacks (daemon_rebalance.c), reload and the
 * model swap (daemon_reload.c), the metrics endpoint (daemon_metrics.c) and
 * the config's engine options and plan (daemon_plan.c).
 *
 * Not here: argument parsing (inferd.c), Kafka handles and rebalance
 * protocol details (kafka.c), slot/offset data structures (batch.c). */
#include "daemon/daemon.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/daemon_model.h"
#include "daemon/daemon_priv.h"
#include "config/log.h"
#include "pipeline/pipebench.h"
#include "core/units.h"

#define DAEMON_POLL_INTERVAL_US (100 * 1000ULL)
#define DAEMON_STATUS_INTERVAL_US (5 * 1000 * 1000ULL)
#define DAEMON_START_EXTEND_US ((uint64_t)120 * 1000 * 1000)

/* Ends the loop with a non-zero exit status (the first one set wins). */
void daemon_fail(daemon_t *d, int status) {
        if (!d->exit_status)
                d->exit_status = status;
        sd_event_exit(d->event, status);
}

void daemon_stats(const daemon_t *d, pipeline_stats_t *st) {
        pipeline_get_stats(d->pipeline, st);
}

/* Records taken and not finished: decoding, or in the engine's slots and
 * not yet produced. */
int daemon_records_in_pipeline(const daemon_t *d) {
        pipeline_stats_t st;

        daemon_stats(d, &st);
        return st.records_in_slots + st.records_decoding;
}

/* Nothing is taken while a revoke is in progress (its partitions stay
 * assigned until it ends: daemon_revoke_check). */
void daemon_pump(daemon_t *d) {
        if (d->in_revoke || !d->pipeline)
                return;
        pipeline_pump(d->pipeline);
}

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

/* Nothing taken is unfinished: no record in the slots, no delivery report
 * awaited, nothing in the producer's queue. A commit point, a model swap
 * and the drain each wait for this. */
bool daemon_nothing_in_flight(const daemon_t *d) {
        return daemon_records_in_pipeline(d) == 0 && batch_offsets_pending(d->offsets) == 0 &&
               kafka_producer_outstanding(d->kafka) == 0;
}

/* --- drain ------------------------------------------------------------------ */

void daemon_log_left(daemon_t *d, const char *why) {
        log_error("%s: %d record(s) in the pipeline, %zu delivery report(s) awaited, %d in the producer; "
                  "their offsets are not committed and they will be redelivered",
                  why, daemon_records_in_pipeline(d), batch_offsets_pending(d->offsets),
                  kafka_producer_outstanding(d->kafka));
}

/* The consumer has left the group (or its close ended otherwise): the
 * drain is done and the loop ends. */
static void daemon_drain_done(daemon_t *d) {
        pipeline_stats_t st;

        daemon_stats(d, &st);
        log_info("Drained in %.1f s: %" PRIu64 " records in, %" PRIu64 " predictions, %" PRIu64 " to the DLQ",
                 (double)(daemon_now_us() - d->drain_started_us) / 1e6, st.records_in, st.predictions_out, st.dlq_out);
        sd_event_exit(d->event, 0);
}

/* The drain's end, once nothing is in flight: the last commit goes to the
 * transaction thread (the loop answers meanwhile, and the drain's timer
 * bounds it); when it is done the consumer begins to leave the group, and
 * the loop goes on serving until it has left (daemon_on_consumer_io), under
 * the same timer. */
static void daemon_check_drained(daemon_t *d) {
        errbuf_t err = {};
        int r;

        if (!d->draining || d->leaving || d->exit_status || d->in_revoke || !daemon_nothing_in_flight(d))
                return;
        /* A job on the transaction thread (a commit point's, or the
         * drain's own commit): its result (daemon_on_txn_io) comes back
         * here. */
        if (kafka_txn_busy(d->kafka))
                return;
        if (!d->drain_committing) {
                d->drain_committing = true;
                /* Exactly-once, an abortable failure leaves the offsets
                 * where they were: the next owner redoes those records,
                 * and the aborted outputs are never visible. */
                if (daemon_commit_start(d, false, false) != 0)
                        return;         /* submitted (1), or the daemon stops (-1) */
        }
        daemon_txn_log_totals(d);
        d->leaving = true;
        r = kafka_close_start(d->kafka, &err);
        if (r < 0)
                log_warning("%s", err.msg);
        if (kafka_close_serve(d->kafka))
                daemon_drain_done(d);
}

static void daemon_extend_stop(daemon_t *d) {
        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64, (uint64_t)(d->cfg->drain.timeout_s + 10) * (uint64_t)1000000);
}

static int daemon_on_drain_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "drain timeout");
        (void)s;
        (void)usec;
        if (d->leaving) {
                /* Everything was finished and committed: only the group
                 * has not heard this member leave. */
                log_warning("Drain timed out while leaving the consumer group: its other members take this one's "
                            "partitions after session.timeout.ms");
                sd_event_exit(d->event, 0);
                daemon_loop_leave(d);
                return 0;
        }
        daemon_log_left(d, "Drain timed out");
        daemon_fail(d, 1);
        daemon_loop_leave(d);
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
        sd_notifyf(0, "STOPPING=1\nSTATUS=Draining %d record(s)", st.records_in_slots + st.records_decoding);
        daemon_extend_stop(d);
        log_info("Draining: %d record(s) in the pipeline, %zu held back (redelivered later)",
                 st.records_in_slots + st.records_decoding,
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
}

static int daemon_on_stop_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "stop signal");
        (void)s;
        if (d->draining) {
                log_warning("Second %s while draining: stopping now", strsignal((int)si->ssi_signo));
                daemon_log_left(d, "Stopped before the drain finished");
                daemon_fail(d, 1);
                daemon_loop_leave(d);
                return 0;
        }
        log_info("Received %s: draining", strsignal((int)si->ssi_signo));
        daemon_begin_drain(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

/* --- after every event ----------------------------------------------------------- */

/* Runs after every event that can change what is in flight (each handler
 * below, SIGHUP, the staging thread's end, a stop signal), once the event's
 * own work is done (reaping, pumping, delivery reports). The order is fixed:
 *
 * 0. A revoke in progress (daemon_revoke_check): ends it once what was taken
 *    from its partitions is finished (or its deadline passed), then the
 *    commit or abort on the transaction thread, then the unassign. While it
 *    lasts, the commit points and the swap wait, and the drain too.
 * 1. The open transaction's age (daemon_txn_maybe_close): a commit point
 *    closes the intake, so that what it waits for stops growing.
 * 2. The commit point (daemon_txn_check): commits (or aborts) once nothing is
 *    in flight, and opens the intake again unless a swap holds it. Before
 *    the swap: a swap waits for the same state, and the commit must not
 *    find the new model's outputs in its transaction.
 * 3. The model swap (daemon_swap_check): once nothing is in flight, with the
 *    intake paused; it opens the intake again unless a commit point holds it.
 * 4. The drain (daemon_check_drained): last, because it commits, closes the
 *    Kafka handles and ends the loop; nothing may run after it.
 *
 * Nothing runs before daemon_start made the pipeline (the signals are
 * dispatched only from daemon_run on; a start that failed never runs it). */
void daemon_progress(daemon_t *d) {
        if (!d->pipeline)
                return;
        daemon_revoke_check(d);
        daemon_txn_maybe_close(d);
        daemon_txn_check(d);
        daemon_swap_check(d);
        daemon_check_drained(d);
}

/* --- event handlers ------------------------------------------------------------ */

static int daemon_on_consumer_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "Kafka consumer");
        (void)s;
        (void)revents;
        kafka_fd_clear(fd);
        if (d->leaving) {
                if (kafka_close_serve(d->kafka))
                        daemon_drain_done(d);
                daemon_loop_leave(d);
                return 0;
        }
        daemon_pump(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

/* The transaction thread's job is done: the commit point's result. */
static int daemon_on_txn_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "transaction thread");
        (void)s;
        (void)fd;
        (void)revents;
        daemon_txn_done(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

static int daemon_on_producer_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "Kafka producer");
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
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

static int daemon_on_engine_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "engine completion");
        (void)s;
        (void)fd;
        (void)revents;
        pipeline_reap(d->pipeline);
        daemon_pump(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

static int daemon_on_decode_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "decode completion");
        (void)s;
        (void)fd;
        (void)revents;
        pipeline_decoded(d->pipeline);
        daemon_pump(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

static int daemon_on_delay(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "batch delay timer");
        (void)s;
        (void)usec;
        pipeline_delay_expired(d->pipeline);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

/* The intake has been stopped (records held, or closed) for
 * PIPELINE_HOLD_MAX_US: the pipeline pauses fetching if it still is, and
 * pumps later. */
static int daemon_on_hold(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "hold timer");
        (void)s;
        (void)usec;
        pipeline_hold_expired(d->pipeline);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

static int daemon_on_defer(sd_event_source *s, void *userdata) {
        daemon_t *d = userdata;

        daemon_loop_enter(d, "deferred pump");
        (void)s;
        daemon_pump(d);
        daemon_progress(d);
        daemon_loop_leave(d);
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

        daemon_loop_enter(d, "poll timer");
        (void)usec;
        kafka_poll_producer(d->kafka);
        if (d->stored_uncommitted) {
                kafka_commit_async(d->kafka);
                d->stored_uncommitted = false;
        }
        if (pipeline_produce_pending(d->pipeline) == 0)
                daemon_pump(d);
        daemon_progress(d);
        if (!d->draining && t - d->status_last_us >= DAEMON_STATUS_INTERVAL_US)
                daemon_status(d, t);
        sd_event_source_set_time(s, t + DAEMON_POLL_INTERVAL_US);
        daemon_loop_leave(d);
        return 0;
}

/* WATCHDOG=1 only while the pipeline makes progress: it is idle, or a batch
 * completed within the watchdog interval. A stuck batch stops the pings.
 * Called by the timer and by the loops that block the event loop (the
 * revoke's wait), at most once every quarter interval. */
void daemon_watchdog_ping(daemon_t *d) {
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

        daemon_loop_enter(d, "watchdog timer");
        (void)usec;
        daemon_watchdog_ping(d);
        sd_event_source_set_time(s, d->watchdog_next_us);
        daemon_loop_leave(d);
        return 0;
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
        /* The endpoint first: the loop that answered it has ended, and a
         * probe should find it closed (refused) rather than accepted and
         * never answered while the rest is torn down (librdkafka's destroy
         * may wait for the group after a drain that timed out leaving it). */
        httpd_free(d->httpd);
        d->httpd = NULL;
        httpd_free(d->probes_httpd);
        d->probes_httpd = NULL;
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
        sd_event_source_unref(d->sample_timer);
        sd_event_source_unref(d->sig_term);
        sd_event_source_unref(d->sig_int);
        sd_event_source_unref(d->sig_hup);
        sd_event_source_unref(d->consumer_io);
        sd_event_source_unref(d->producer_io);
        sd_event_source_unref(d->txn_io);
        sd_event_source_unref(d->engine_io);
        sd_event_source_unref(d->decode_io);
        sd_event_source_unref(d->poll_timer);
        sd_event_source_unref(d->delay_timer);
        sd_event_source_unref(d->hold_timer);
        sd_event_source_unref(d->drain_timer);
        sd_event_source_unref(d->revoke_timer);
        sd_event_source_unref(d->watchdog_timer);
        sd_event_source_unref(d->defer);
        sd_event_source_unref(d->loop_probe);
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

/* Between start-up's long steps: the metrics requests that waited meanwhile
 * are answered ("starting"; the metrics known so far). */
static void daemon_serve_starting(daemon_t *d) {
        httpd_serve_pending(d->httpd);
        httpd_serve_pending(d->probes_httpd);
}

/* Called about every 100 ms while the daemon waits for the transaction
 * thread: start-up for init_transactions, and a revoke inside the
 * consumer's close (the loop has ended) for its commit or abort. Pings the
 * watchdog on the usual rule and, starting, answers the endpoint. */
static void daemon_on_txn_waiting(void *userdata) {
        daemon_t *d = userdata;

        daemon_watchdog_ping(d);
        if (!d->started)
                daemon_serve_starting(d);
}

/* init_transactions, on the transaction thread: fences an earlier
 * incarnation of this instance and aborts the transaction it left open,
 * retrying a coordinator that does not answer for up to
 * DAEMON_TXN_INIT_MAX_MS. Start-up waits for it while the endpoint answers
 * (/livez within about 100 ms, /readyz "starting"). */
static int daemon_txn_init(daemon_t *d, errbuf_t *err) {
        kafka_txn_result_t res;
        int r = kafka_txn_submit(d->kafka, KAFKA_TXN_JOB_INIT, NULL, DAEMON_TXN_INIT_MAX_MS, false, err);

        if (r < 0)
                return r;
        return kafka_txn_wait(d->kafka, &res, err);
}

/* Start-up's first long step: the weights (or, for the pipeline benchmark,
 * the layer table only: nothing is computed), checked against the config. */
static int daemon_start_model(daemon_t *d, errbuf_t *err) {
        int r;

        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Loading %s", DAEMON_START_EXTEND_US,
                   d->cfg->model.weights);
        if (d->bench_pipeline) {
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
        return daemon_model_check(d->cfg, d->model, &d->labels, err);
}

/* The plan and the engine (the no-compute executor for the pipeline
 * benchmark). */
static int daemon_start_engine(daemon_t *d, errbuf_t *err) {
        engine_options_t o;
        const plan_t *plan;
        char host[32], warning[512] = "", size[32];
        int r;

        sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Planning and opening the engine",
                   DAEMON_START_EXTEND_US);
        daemon_engine_options(d->cfg, &o, host, sizeof(host));
        /* The CUDA engine's experiment switches, read once: a swap keeps them. */
        engine_cuda_options_from_env(&o.cuda);
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
        return 0;
}

/* librdkafka's share of the host budget, as the plan set it. */
static void daemon_log_kafka_limits(const plan_t *p) {
        char q[32], f[32], w[32], o[32];

        log_info("librdkafka: a consumer queue of %s, fetch responses of %s (%d at once, fetch.max.bytes = %s, "
                 "decompressed up to %d:1), a producer queue of %s",
                 units_format_size(p->kafka_queue_bytes, q, sizeof(q)),
                 units_format_size(p->kafka_fetch_bytes, f, sizeof(f)), p->kafka_fetch_responses,
                 units_format_size(p->kafka_fetch_wire_bytes, w, sizeof(w)), p->kafka_compression_ratio,
                 units_format_size(p->kafka_producer_bytes, o, sizeof(o)));
}

/* The Kafka handles, within the plan's host budget, and the transactions
 * under exactly-once. */
static int daemon_start_kafka(daemon_t *d, errbuf_t *err) {
        const kafka_callbacks_t cb = {
                .assigned = daemon_on_assigned,
                .revoking = daemon_on_revoking,
                .revoked = daemon_on_revoked,
                .delivered = daemon_on_delivered,
                .fatal = daemon_on_fatal,
                .txn_waiting = daemon_on_txn_waiting,
        };
        kafka_limits_t lim;
        int r;

        /* What the host budget leaves after the pinned buffers and the
         * decode contexts bounds the records librdkafka may prefetch (at
         * least kafka_limits_min_bytes: the plan kept that free). */
        kafka_limits_from_plan(engine_plan_of(d->engine), &lim);
        r = kafka_new(&d->kafka, d->cfg, &lim, &cb, d, err);
        if (r < 0)
                return r;
        daemon_log_kafka_limits(engine_plan_of(d->engine));
        if (kafka_transactional(d->kafka)) {
                /* Fences an earlier incarnation of this instance and aborts
                 * the transaction it left open. */
                sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=Initialising Kafka transactions",
                           DAEMON_START_EXTEND_US);
                r = daemon_txn_init(d, err);
                if (r < 0)
                        return r;
                log_info("Exactly-once delivery: transactions of up to %d ms, read_committed input",
                         d->cfg->kafka.transaction_max_ms);
                daemon_serve_starting(d);
        }
        return 0;
}

/* The decode contexts the plan counted, one job per slot position. */
static int daemon_start_decode(daemon_t *d, errbuf_t *err) {
        const plan_t *plan = engine_plan_of(d->engine);
        char host[32], size[32], staging[32];
        int r;

        r = decode_pool_new(&d->decode, plan->decode_threads, plan->decode_max_pixels, d->cfg->decode.max_bytes,
                            d->cfg->decode.fast, d->cfg->decode.exif_orientation,
                            (size_t)engine_slots(d->engine) * (size_t)engine_max_batch(d->engine), err);
        if (r < 0)
                return errbuf_prefix(err, r, "Failed to start the decode threads");
        decode_pool_set_max_scan_megapixels(d->decode, (uint64_t)d->cfg->decode.max_scan_megapixels);
        log_info("Decode: %d thread%s (%s) for images up to %d pixels and %s%s%s; their buffers and the staging (%s) %s "
                 "of the host budget",
                 plan->decode_threads,
                 plan->decode_threads == 1 ? "" : "s",
                 plan->decode_limit == PLAN_DECODE_LIMIT_THREADS ? "[decode] threads"
                 : plan->decode_limit == PLAN_DECODE_LIMIT_CORES ? "the cores minus one"
                                                                 : "half the host budget left by the pinned buffers",
                 d->cfg->decode.max_pixels, units_format_size(d->cfg->decode.max_bytes, size, sizeof(size)),
                 d->cfg->decode.fast ? ", fast JPEG mode ([decode] fast = yes: not identical to torchvision)" : "",
                 d->cfg->decode.exif_orientation ? ", turned by their EXIF orientation ([decode] exif_orientation = yes)"
                                                 : "",
                 units_format_size(plan->decode_staging_bytes, staging, sizeof(staging)),
                 units_format_size(plan->decode_host_bytes, host, sizeof(host)));
        return 0;
}

/* The pipeline borrows what it is given here (the topic strings and the
 * meta's strings live in d->cfg, d->model and d->engine, which outlive it:
 * daemon_free frees it first). */
static int daemon_start_pipeline(daemon_t *d, errbuf_t *err) {
        const pipeline_ops_t ops = {
                .fail = daemon_pipeline_fail,
                .arm_delay = daemon_pipeline_arm_delay,
                .pump_later = daemon_pipeline_pump_later,
                .arm_hold = daemon_pipeline_arm_hold,
                .skipped = daemon_pipeline_skipped,
        };
        pipeline_config_t pcfg;
        char preprocessing[96];
        int r;

        /* What a record's decoded pixels depend on beyond its bytes: part
         * of every result cache key. */
        snprintf(preprocessing, sizeof(preprocessing), "decode_fast=%d;exif_orientation=%d", d->cfg->decode.fast,
                 d->cfg->decode.exif_orientation);
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
                        .output = {
                                .kind = d->cfg->output.kind,
                                .format = d->cfg->output.embedding_format,
                                .normalize = d->cfg->output.embedding_normalize,
                        },
                },
                .cache_entries = d->cfg->cache.entries,
                .cache_preprocessing = preprocessing,
                .decode = d->decode,
        };
        r = pipeline_new(&d->pipeline, &pcfg, &ops, d);
        if (r < 0)
                return errbuf_set(err, r, "Failed to set up the pipeline: %s", strerror(-r));
        return 0;
}

/* The loop's sources of the running pipeline: the fds, the timers and the
 * watchdog's timer when systemd asks for pings. */
static int daemon_start_sources(daemon_t *d, errbuf_t *err) {
        int r;

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
        if ((r = sd_event_add_io(d->event, &d->txn_io, kafka_txn_fd(d->kafka), EPOLLIN, daemon_on_txn_io, d)) < 0)
                return errbuf_set(err, r, "Failed to add the transaction thread's event source: %s", strerror(-r));
        if ((r = daemon_loop_start(d, err)) < 0)
                return r;
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
        return 0;
}

int daemon_start(daemon_t *d, errbuf_t *err) {
        pipeline_stats_t st;
        int r;

        /* The endpoint first, then the long steps, answering the requests
         * that waited between them. */
        if ((r = daemon_metrics_start(d, err)) < 0 || (r = daemon_start_model(d, err)) < 0)
                return r;
        daemon_serve_starting(d);
        if ((r = daemon_start_engine(d, err)) < 0 || (r = daemon_start_kafka(d, err)) < 0 ||
            (r = daemon_start_decode(d, err)) < 0 || (r = daemon_start_pipeline(d, err)) < 0 ||
            (r = daemon_start_sources(d, err)) < 0)
                return r;

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

/* daemon_priv: the daemon's object as its files share it (daemon.c,
 * daemon_txn.c, daemon_rebalance.c, daemon_reload.c, daemon_metrics.c,
 * daemon_plan.c), and the calls they make across those files.
 *
 * Private to src/daemon/daemon*.c: nothing else includes it (the public
 * interface is daemon.h). Each function is defined in the file its comment
 * names; the prefix stays daemon_ for all of them, as they are the same
 * object's. */
#ifndef INFERD_DAEMON_PRIV_H
#define INFERD_DAEMON_PRIV_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>

#include "pipeline/batch.h"
#include "config/cfg.h"
#include "daemon/daemon.h"
#include "http/httpd.h"
#include "kafka/kafka.h"
#include "http/metrics.h"
#include "pipeline/pipeline.h"
#include "core/errbuf.h"
#include "core/labels.h"
#include "core/model.h"
#include "core/plan.h"
#include "decode/pool.h"
#include "engine/engine.h"

/* The commit's and the abort's wait on the transaction thread: librdkafka's
 * recommended -1, the transaction's remaining timeout (the offsets' is
 * KAFKA_TXN_TIMEOUT_MS). */
#define DAEMON_TXN_CALL_TIMEOUT_MS (-1)
/* init_transactions retries a coordinator that does not answer for this
 * long, then the daemon stops and says why: within the start-up extension
 * (DAEMON_START_EXTEND_US) sent before it, so that the reason reaches the
 * log before systemd's timeout would. */
#define DAEMON_TXN_INIT_MAX_MS 90000

/* A scrape reads the lag of this many partitions at most. */
#define DAEMON_METRICS_LAG_MAX 1024
/* The event loop's probe (daemon_loop.c): due every 100 ms; a lag of 1 s is
 * a stall, logged with what held the loop. */
#define DAEMON_LOOP_PROBE_US 100000
#define DAEMON_LOOP_STALL_US 1000000
/* A lag logged at debug level: the goal's bound for its p99.9. */
#define DAEMON_LOOP_SLOW_US 50000

/* Reloads and model swaps in place, since start (for the metrics). A
 * reload is applied when its file was valid and whatever it asked was done
 * (live keys, and a swap when the weights, precision or a budget changed);
 * rejected when nothing changed (an invalid file, a new weights file that
 * does not load, a plan that does not fit); a swap that failed after the
 * old weights were freed stops the daemon. */
typedef struct daemon_reload_stats {
        uint64_t reloads_applied, reloads_rejected;
        uint64_t swaps_applied, swaps_rejected, swaps_failed;
        double last_swap_s;             /* the last swap's own time: free, upload, re-plan, capture */
        double last_swap_pause_s;       /* how long fetching was paused for it (finishing the slots, then the swap) */
} daemon_reload_stats_t;

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

        bool started, draining;
        bool drain_committing;          /* the drain's last commit went to the transaction thread */
        bool leaving;                   /* then the consumer began to leave the group (kafka_close_start) */

        /* A revoke in progress, a state of the loop (daemon_rebalance.c):
         * the intake closed until the records taken from the partitions are
         * finished or the deadline passes, then the commit or abort on the
         * transaction thread, then the unassign (kafka_revoke_done). */
        bool in_revoke;
        bool revoke_lost;               /* the group has already moved the partitions on */
        bool revoke_ending;             /* its commit or abort went to the transaction thread */
        uint64_t revoke_start_us, revoke_deadline_us;
        int revoke_in_pipeline;         /* records in the pipeline when it began */
        sd_event_source *revoke_timer;  /* its deadline ([drain] timeout_s) */
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
        uint64_t txn_closed_us;         /* when the commit point in progress closed the intake; 0 = none */
        uint64_t txn_job_us;            /* when its job went to the transaction thread */
        sd_event_source *txn_io;        /* the transaction thread's result (exactly-once) */
        struct {                        /* the commit points' cost, logged when the daemon drains */
                uint64_t commits, inflight_us, commit_us;
        } txn_totals;
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
        httpd_t *probes_httpd;          /* [metrics] probes_listen; NULL without */
        sd_event_source *sample_timer;
        const char *version;            /* borrowed (daemon_set_version) */
        bool reloading;
        metrics_hist_t latency;         /* Kafka timestamp to the prediction's delivery report */
        bool have_process, have_gpu, gpu_failed;
        metrics_process_t process;
        engine_device_memory_t gpu;
        metrics_lag_t lag[DAEMON_METRICS_LAG_MAX];     /* a scrape's (one loop thread: one at a time) */

        /* The loop's own latency (daemon_loop.c). */
        sd_event_source *loop_probe;
        metrics_hist_t loop_lag;        /* the probe's lateness, inferd_loop_lag_seconds */
        const char *loop_what;          /* the handler running now, NULL between them */
        uint64_t loop_entered_us;
        const char *loop_longest_what;  /* the longest since the last probe, and how long */
        uint64_t loop_longest_us;
};

/* The daemon's times are on the pipeline's clock, so that deadlines and
 * progress times from either compare. */
static inline uint64_t daemon_now_us(void) {
        return pipeline_now_us();
}

/* daemon.c: the object, its loop and the drain. */
void daemon_progress(daemon_t *d);
bool daemon_nothing_in_flight(const daemon_t *d);
void daemon_fail(daemon_t *d, int status);
void daemon_stats(const daemon_t *d, pipeline_stats_t *st);
int daemon_records_in_pipeline(const daemon_t *d);
void daemon_pump(daemon_t *d);
void daemon_log_left(daemon_t *d, const char *why);
void daemon_watchdog_ping(daemon_t *d);

/* daemon_txn.c: exactly-once, the commit points. */
bool daemon_eos(const daemon_t *d);
int daemon_txn_note(daemon_t *d, const char *topic, int32_t partition, int64_t next);
int daemon_txn_end(daemon_t *d, bool aborting, bool rewind);
void daemon_txn_maybe_close(daemon_t *d);
void daemon_txn_check(daemon_t *d);
void daemon_txn_done(daemon_t *d);
int daemon_txn_end_start(daemon_t *d, bool aborting, bool rewind);
int daemon_commit_start(daemon_t *d, bool aborting, bool rewind);
void daemon_txn_log_totals(const daemon_t *d);

/* daemon_rebalance.c: Kafka's callbacks (kafka_callbacks_t) and the
 * pipeline's skipped record. */
void daemon_on_assigned(void *userdata, const rd_kafka_topic_partition_list_t *parts);
bool daemon_on_revoking(void *userdata, const rd_kafka_topic_partition_list_t *parts, bool lost, bool may_defer);
void daemon_revoke_check(daemon_t *d);
void daemon_on_revoked(void *userdata, const rd_kafka_topic_partition_list_t *parts);
void daemon_on_delivered(void *userdata, const rd_kafka_message_t *m);
void daemon_on_fatal(void *userdata, const char *reason);
void daemon_pipeline_skipped(void *userdata, pipeline_ticket_t *t);

/* daemon_reload.c: SIGHUP, and the model swap's steps that the drain and
 * the event handlers call. */
int daemon_on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata);
void daemon_swap_end(daemon_t *d, const char *result);
void daemon_swap_check(daemon_t *d);
void daemon_stage_join(daemon_t *d);

/* daemon_metrics.c: the endpoint and the sampling timer. */
int daemon_metrics_start(daemon_t *d, errbuf_t *err);
void daemon_sample(daemon_t *d);

/* daemon_loop.c: the loop's lag and what held it. A handler brackets its
 * work with enter (what names it in a stall's log line) and leave. */
int daemon_loop_start(daemon_t *d, errbuf_t *err);
void daemon_loop_enter(daemon_t *d, const char *what);
void daemon_loop_leave(daemon_t *d);

/* daemon_plan.c: the engine options a config gives (shared with inferd --plan). */
void daemon_engine_options(const cfg_t *c, engine_options_t *o, char *host_budget, size_t len);

#endif

/* metrics: inferd's numbers in the Prometheus text exposition format
 * (version 0.0.4). The counters and histograms themselves are
 * core/counters.h's.
 *
 * The counters are kept where their events happen (pipeline.c, kafka.c,
 * daemon_rebalance.c). At a scrape, the daemon gathers them into a metrics_snapshot_t
 * by reading them (cheap: no I/O, no locks), together with what a 1 s timer
 * sampled (device memory, /proc/self; librdkafka's statistics arrive on
 * their own cadence), and this module formats the snapshot. It also reads
 * /proc/self for the process_* numbers (metrics_process_sample), which is
 * the timer's to call, never a scrape's.
 *
 * Not here: HTTP (httpd.c), when to sample and what state the daemon is in
 * (daemon_metrics.c). */
#ifndef INFERD_METRICS_H
#define INFERD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/counters.h"
#include "core/plan.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* --- the snapshot ------------------------------------------------------------ */

typedef struct metrics_process {
        uint64_t resident_bytes;
        double cpu_seconds;             /* user + system */
        uint64_t open_fds;
        uint64_t max_fds;               /* RLIMIT_NOFILE's soft limit */
        double start_time_s;            /* since the epoch */
} metrics_process_t;

typedef struct metrics_snapshot {
        /* Records. */
        uint64_t predicted, dead_lettered, batches;
        uint64_t expired;                       /* past max_record_age and skipped (no DLQ copy) */
        uint64_t redelivered;                   /* records librdkafka handed out again, dropped */
        uint64_t dlq_values_omitted;            /* DLQ copies sent without their value (too large) */
        const metrics_count_t *dead_letters;    /* by DLQ code */
        size_t n_dead_letters;
        const metrics_count_t *headers_cut;     /* predictions' copied headers cut, by header name */
        size_t n_headers_cut;
        const metrics_hist_t *batch_size, *batch_seconds, *latency_seconds;     /* NULL: not yet */
        const metrics_hist_t *loop_lag_seconds;                                 /* NULL: not yet */
        const metrics_hist_t *stage_seconds;    /* (n_stages) NULL: not yet */
        const char *const *stage_names;         /* (n_stages) their stage label */
        int n_stages;

        /* Kafka. */
        const metrics_lag_t *lag;
        size_t n_lag;
        int assigned_partitions;
        bool paused;
        const metrics_count_t *kafka_errors;    /* by kind */
        size_t n_kafka_errors;

        /* Pipeline. */
        int slots, slots_busy;
        /* The result cache ([cache] entries). */
        uint64_t cache_hits, cache_misses;
        int cache_entries;

        /* Plan; NULL before the engine is open. */
        const plan_t *plan;

        /* Device memory: only with the CUDA engine (have_gpu). */
        bool have_gpu;
        uint64_t gpu_used_bytes, gpu_total_bytes, gpu_arena_bytes;

        /* State: "starting", "ready", "reloading" or "draining". */
        const char *state;
        const char *version, *backend, *precision, *model;     /* build_info's labels; NULL = "" */
        uint64_t reloads_applied, reloads_rejected;
        /* Model swaps in place (a reload that changes the weights, the
         * precision or a budget), and the last one's times. */
        uint64_t swaps_applied, swaps_rejected, swaps_failed;
        double last_swap_s, last_swap_pause_s;

        bool have_process;
        metrics_process_t process;

        /* The endpoint's own refusals (httpd.h). */
        uint64_t http_auth_failures;
        const uint64_t *http_rejected;          /* (n_http_rejected) by reason; NULL: none */
        const char *const *http_rejected_names; /* (n_http_rejected) their reason label */
        int n_http_rejected;
} metrics_snapshot_t;

/* The exposition of s, malloc'd into *ret (NUL-terminated, *len bytes).
 * Returns 0 or -ENOMEM. */
int metrics_format(const metrics_snapshot_t *s, char **ret, size_t *len);

/* Reads /proc/self (stat, fd/) and the fd limit. Returns 0 or -errno. */
int metrics_process_sample(metrics_process_t *ret);

#endif

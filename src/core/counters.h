/* counters: the numbers inferd counts where their events happen (the
 * pipeline, the Kafka module, the daemon), for the metrics endpoint to
 * format (http/metrics.h): histograms with fixed bounds, labelled counters,
 * and a partition's lag. Plain memory, read and written on the loop thread:
 * no I/O, no locks.
 *
 * Here in core, below every layer that counts, so that kafka and pipeline
 * count without including the HTTP endpoint's module. */
#ifndef INFERD_COUNTERS_H
#define INFERD_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

/* --- histograms ----------------------------------------------------------- */

#define METRICS_HIST_BUCKETS_MAX 20

typedef struct metrics_hist {
        const double *bounds;                           /* upper bounds, ascending; +Inf follows */
        int n_bounds;
        uint64_t counts[METRICS_HIST_BUCKETS_MAX + 1];  /* per bucket, not cumulative; [n_bounds] is +Inf */
        uint64_t count;
        double sum;
} metrics_hist_t;

typedef enum metrics_hist_kind {
        METRICS_HIST_BATCH_SIZE,        /* records: 1, 2, 4 ... 1024 */
        METRICS_HIST_BATCH_SECONDS,     /* engine submit to results: 1 ms .. 30 s */
        METRICS_HIST_LATENCY_SECONDS,   /* Kafka timestamp to delivery report: 5 ms .. 10 min */
        METRICS_HIST_STAGE_SECONDS,     /* one stage of a record: 50 us .. 10 min */
        METRICS_HIST_LOOP_LAG_SECONDS,  /* the event loop's probe, how late: 100 us .. 30 s */
} metrics_hist_kind_t;

void metrics_hist_init(metrics_hist_t *h, metrics_hist_kind_t kind);
void metrics_hist_observe(metrics_hist_t *h, double v);

/* One labelled counter (a DLQ code, a Kafka error kind, ...). label is
 * borrowed for the scrape. */
typedef struct metrics_count {
        const char *label;
        uint64_t n;
} metrics_count_t;

/* Adds one to the counter of label among counts[0..*n), or, for a label not
 * there yet, appends it with n = 1 and a copy of label (malloc'd: the
 * caller frees the labels it did not put there itself) while *n < max.
 * Returns its index, -ENOSPC when the table is full, or -ENOMEM. */
int metrics_count_add(metrics_count_t *counts, size_t *n, size_t max, const char *label);

typedef struct metrics_lag {
        const char *topic;              /* borrowed */
        int32_t partition;
        int64_t records;                /* high watermark (last stable offset under read_committed) minus position */
        double seconds;                 /* now minus the last taken record's timestamp while records wait; else 0 */
} metrics_lag_t;

#endif

/* counters: see counters.h. */
#include "core/counters.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* --- labelled counters ------------------------------------------------------ */

int metrics_count_add(metrics_count_t *counts, size_t *n, size_t max, const char *label) {
        char *copy;
        size_t i;

        for (i = 0; i < *n; i++)
                if (!strcmp(counts[i].label, label)) {
                        counts[i].n++;
                        return (int)i;
                }
        if (i >= max)
                return -ENOSPC;
        copy = strdup(label);
        if (!copy)
                return -ENOMEM;
        counts[i] = (metrics_count_t){ .label = copy, .n = 1 };
        (*n)++;
        return (int)i;
}

/* --- histograms ----------------------------------------------------------- */

static const double metrics_batch_size_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 };
static const double metrics_batch_seconds_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                       0.25,  0.5,    1,     2.5,  5,     10,   30 };
/* A stage of one record: 50 us resolves a GPU batch's engine time and a
 * raw record's decode (none), seconds a CPU batch, minutes a queue after an
 * outage. 20 bounds, METRICS_HIST_BUCKETS_MAX. */
static const double metrics_stage_seconds_bounds[] = { 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                       0.01,    0.025,  0.05,    0.1,    0.25,  0.5,    1,
                                                       2.5,     5,      10,      30,     120,   600 };
static const double metrics_latency_seconds_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                         2.5,   5,    10,    30,   60,  120,  300, 600 };

/* The loop's lag: 100 us is a quiet loop, 50 ms and 250 ms the goals of a
 * loop that never waits, 1 s a stall (a probe's timeout). */
static const double metrics_loop_lag_seconds_bounds[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                                          5,      10,      30 };

#define METRICS_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

void metrics_hist_init(metrics_hist_t *h, metrics_hist_kind_t kind) {
        *h = (metrics_hist_t){};
        switch (kind) {
        case METRICS_HIST_BATCH_SIZE:
                h->bounds = metrics_batch_size_bounds;
                h->n_bounds = METRICS_N(metrics_batch_size_bounds);
                break;
        case METRICS_HIST_BATCH_SECONDS:
                h->bounds = metrics_batch_seconds_bounds;
                h->n_bounds = METRICS_N(metrics_batch_seconds_bounds);
                break;
        case METRICS_HIST_LATENCY_SECONDS:
                h->bounds = metrics_latency_seconds_bounds;
                h->n_bounds = METRICS_N(metrics_latency_seconds_bounds);
                break;
        case METRICS_HIST_STAGE_SECONDS:
                h->bounds = metrics_stage_seconds_bounds;
                h->n_bounds = METRICS_N(metrics_stage_seconds_bounds);
                break;
        case METRICS_HIST_LOOP_LAG_SECONDS:
                h->bounds = metrics_loop_lag_seconds_bounds;
                h->n_bounds = METRICS_N(metrics_loop_lag_seconds_bounds);
                break;
        }
}

void metrics_hist_observe(metrics_hist_t *h, double v) {
        int i = 0;

        while (i < h->n_bounds && v > h->bounds[i])
                i++;
        h->counts[i]++;
        h->count++;
        h->sum += v;
}

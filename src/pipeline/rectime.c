/* rectime: a record's deadline and its stage times. See rectime.h.
 *
 * Not here: where the times are read (pipeline.c, daemon.c), the
 * histograms (metrics.c). */
#include "pipeline/rectime.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

const char *const rectime_stage_names[RECTIME_STAGES] = {
        [RECTIME_QUEUE] = "queue",     [RECTIME_DECODE] = "decode",   [RECTIME_BATCH_WAIT] = "batch_wait",
        [RECTIME_ENGINE] = "engine",   [RECTIME_PRODUCE] = "produce",
};

int64_t rectime_now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double rectime_now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool rectime_expired(int64_t ts_ms, int64_t now_ms, uint64_t max_age_ms, int64_t *age_ms) {
        int64_t age = ts_ms >= 0 && now_ms > ts_ms ? now_ms - ts_ms : 0;

        *age_ms = age;
        return max_age_ms > 0 && age > 0 && (uint64_t)age > max_age_ms;
}

double rectime_queue_s(int64_t ts_ms, double now_s) {
        double q = now_s - (double)ts_ms / 1e3;

        return ts_ms >= 0 && q > 0 ? q : 0.0;
}

/* b - a in seconds, or 0 when either is unset or time went backwards. */
static double rectime_span_s(uint64_t a_us, uint64_t b_us) {
        return a_us && b_us > a_us ? (double)(b_us - a_us) / 1e6 : 0.0;
}

void rectime_stages(const rectime_t *t, uint64_t end_us, double ret_s[RECTIME_STAGES]) {
        ret_s[RECTIME_QUEUE] = t->queue_s > 0 ? t->queue_s : 0.0;
        ret_s[RECTIME_DECODE] = rectime_span_s(t->taken_us, t->decoded_us);
        ret_s[RECTIME_BATCH_WAIT] = rectime_span_s(t->decoded_us, t->submitted_us);
        ret_s[RECTIME_ENGINE] = rectime_span_s(t->submitted_us, t->done_us);
        ret_s[RECTIME_PRODUCE] = rectime_span_s(t->done_us, end_us);
}

int rectime_format_header(const double stages_s[RECTIME_STAGES], char *buf, size_t len) {
        size_t at = 0;

        for (int i = 0; i < RECTIME_STAGES; i++) {
                int n = snprintf(buf + at, len - at, "%s%s=%.3f", i ? ";" : "", rectime_stage_names[i],
                                 stages_s[i] * 1e3);

                if (n < 0 || (size_t)n >= len - at)
                        return -ENOSPC;
                at += (size_t)n;
        }
        return (int)at;
}

/* rectime: a record's times: the deadline on its age ([batching]
 * max_record_age) and where it spent its time on the way to its prediction,
 * stage by stage (the inferd-timing header and the
 * inferd_stage_duration_seconds histograms).
 *
 * A record's latency (inferd_record_latency_seconds) runs from its Kafka
 * timestamp to its prediction's delivery report. The stages split that
 * span without gap or overlap, so that they add up to it:
 *
 *   queue       Kafka timestamp -> taken by the pipeline (the broker,
 *               librdkafka's queue, the held records)
 *   decode      taken -> its decode job reaped (0 for raw records)
 *   batch_wait  decoded -> its batch handed to the engine
 *   engine      the batch's submit -> its results reaped (the batch's time,
 *               the same for each of its records)
 *   produce     results -> the delivery report (the header, written before
 *               the record is handed to the producer, says results -> hand-over)
 *
 * Plain arithmetic and formatting only: the pipeline keeps the times, the
 * daemon observes the histograms on the delivery report. */
#ifndef INFERD_RECTIME_H
#define INFERD_RECTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rectime_stage {
        RECTIME_QUEUE,
        RECTIME_DECODE,
        RECTIME_BATCH_WAIT,
        RECTIME_ENGINE,
        RECTIME_PRODUCE,
        RECTIME_STAGES,
} rectime_stage_t;

/* "queue", "decode", "batch_wait", "engine", "produce", by
 * rectime_stage_t: the metric's stage label and the header's keys. */
extern const char *const rectime_stage_names[RECTIME_STAGES];

/* One record's clock readings. The _us ones are CLOCK_MONOTONIC (the
 * pipeline's clock); 0 = not reached yet. */
typedef struct rectime {
        double queue_s;         /* its Kafka timestamp to taken (CLOCK_REALTIME at the take); >= 0 */
        uint64_t taken_us;
        uint64_t decoded_us;    /* = taken_us for a record that needs no decoding */
        uint64_t submitted_us;  /* its batch handed to the engine */
        uint64_t done_us;       /* its batch's results reaped */
} rectime_t;

/* CLOCK_REALTIME in epoch milliseconds, the clock of Kafka timestamps, and
 * in seconds to the microsecond (the queue stage, measured against the
 * latency's reading of the same clock). */
int64_t rectime_now_ms(void);
double rectime_now_s(void);

/* Whether a record with Kafka timestamp ts_ms is past the deadline at
 * now_ms: older than max_age_ms, strictly (a record exactly max_age_ms old
 * is not). Never for max_age_ms 0 (off), a record without a timestamp
 * (ts_ms < 0) or one from the future (clock skew). *age_ms receives its age
 * (0 when it has none, or is from the future). */
bool rectime_expired(int64_t ts_ms, int64_t now_ms, uint64_t max_age_ms, int64_t *age_ms);

/* The queue stage of a record with Kafka timestamp ts_ms taken at now_s
 * (CLOCK_REALTIME, epoch seconds), in seconds; 0 for none or a future one. */
double rectime_queue_s(int64_t ts_ms, double now_s);

/* The stages' seconds (RECTIME_STAGES of them) of t, produce ending at
 * end_us (monotonic). A reading that went backwards counts 0. */
void rectime_stages(const rectime_t *t, uint64_t end_us, double ret_s[RECTIME_STAGES]);

/* The inferd-timing header's value: "queue=1.234;decode=0.512;..." in
 * milliseconds with three decimals, in stage order. Returns its length, or
 * -ENOSPC when len is too small (64 bytes is always enough for sane times). */
int rectime_format_header(const double stages_s[RECTIME_STAGES], char *buf, size_t len);

#endif

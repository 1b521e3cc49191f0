/* pipeline_hold: back-pressure. Records that find no room wait, in order,
 * in the held queue, and while they do (or while the intake is closed) the
 * pump takes nothing more from the consumer: the records stay in
 * librdkafka's bounded queue. Only if that lasts PIPELINE_HOLD_MAX_US (or at
 * once for a drain or a long wait for the cap) is fetching paused. Here are
 * the held queue, the hold's clock, the pause, the pump, closing and
 * reopening the intake, and the drain's start.
 *
 * Not here: what a record becomes when it is taken (pipeline.c,
 * pipeline_take), the cap's bucket (ratelimit.c). */
#include "pipeline/pipeline_priv.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "config/log.h"

#define PIPELINE_PUMP_BUDGET 512

static int pipeline_held_push(pipeline_t *p, rd_kafka_message_t *m) {
        if (p->held_len == p->held_cap) {
                size_t cap = p->held_cap ? p->held_cap * 2 : 256;
                rd_kafka_message_t **h = malloc(cap * sizeof(*h));

                if (!h)
                        return -ENOMEM;
                for (size_t i = 0; i < p->held_len; i++)
                        h[i] = p->held[(p->held_head + i) % p->held_cap];
                free(p->held);
                p->held = h;
                p->held_cap = cap;
                p->held_head = 0;
        }
        p->held[(p->held_head + p->held_len) % p->held_cap] = m;
        p->held_len++;
        return 0;
}

static rd_kafka_message_t *pipeline_held_front(pipeline_t *p) {
        return p->held_len ? p->held[p->held_head] : NULL;
}

static void pipeline_held_pop(pipeline_t *p) {
        assert(p->held_len > 0);
        p->held_head = (p->held_head + 1) % p->held_cap;
        p->held_len--;
}

/* Drops held records (all, or those of the listed partitions): they were
 * never tracked, so their offsets are not committed and they come back. */
void pipeline_held_drop(pipeline_t *p, const rd_kafka_topic_partition_list_t *parts) {
        size_t n = p->held_len;

        pipeline_cache_held(p, NULL, NULL);     /* its record may go */

        for (size_t i = 0; i < n; i++) {
                rd_kafka_message_t *m = pipeline_held_front(p);
                bool drop = !parts;

                pipeline_held_pop(p);
                if (parts && rd_kafka_topic_partition_list_find(parts, rd_kafka_topic_name(m->rkt), m->partition))
                        drop = true;
                if (drop)
                        rd_kafka_message_destroy(m);
                else
                        pipeline_held_push(p, m);  /* cannot fail: the ring has room */
        }
}

/* Whether the cap stops the intake now: the FILLING slot is full and waits
 * for its tokens. */
bool pipeline_cap_stops_intake(const pipeline_t *p) {
        int slot = batch_filling(p->batch, NULL);

        return p->capped && slot >= 0 && pipeline_slot_full(p, slot);
}

/* The intake takes nothing now: records are held (no room for them) or it
 * is closed. */
static bool pipeline_stopped(const pipeline_t *p) {
        return p->held_len > 0 || p->intake_closed;
}

/* Why fetching should be paused now, or NULL: a drain (at once), the intake
 * stopped (records held, or closed) since PIPELINE_HOLD_MAX_US, or records
 * held behind a batch that waits that long or longer for the cap. A shorter
 * stop leaves the records in librdkafka's queue instead. */
static const char *pipeline_pause_reason(const pipeline_t *p) {
        if (p->draining)
                return "draining";
        if (!pipeline_stopped(p))
                return NULL;
        if (p->hold_expired)
                return p->held_len > 0 ? "the pipeline stayed full" : "the intake stayed closed";
        if (p->held_len > 0 && p->capped && !p->cap_short && pipeline_cap_stops_intake(p))
                return "a long wait for the cap";
        return NULL;
}

/* The intake is stopped and fetching is not paused: the pump takes nothing
 * from the consumer until it may take again or the hold expires. */
bool pipeline_holding(const pipeline_t *p) {
        return pipeline_stopped(p) && !pipeline_pause_reason(p);
}

/* Pauses or resumes fetching as pipeline_pause_reason says. */
static void pipeline_update_pause(pipeline_t *p) {
        const char *why = pipeline_pause_reason(p);
        bool want = why != NULL;

        if (kafka_is_paused(p->kafka) == want)
                return;
        kafka_set_paused(p->kafka, want);
        if (want && p->hold_since_us)
                log_debug("Paused fetching (%s, held for %.0f ms, %zu records held)", why,
                          (double)(pipeline_now_us() - p->hold_since_us) / 1000.0, p->held_len);
        else if (want)
                log_debug("Paused fetching (%s, %zu records held)", why, p->held_len);
        else
                log_debug("Resumed fetching (%zu records held)", p->held_len);
}

/* Keeps the hold's clock: it starts when the intake stops (records held, or
 * closed; the deadline goes to the owner's timer) and ends when it takes
 * again; then pauses or resumes fetching. */
static void pipeline_hold_update(pipeline_t *p) {
        bool pausing;

        if (!pipeline_stopped(p) && p->hold_since_us) {
                if (!p->hold_expired && !kafka_is_paused(p->kafka))
                        log_debug("Intake took records again after %.1f ms stopped, without pausing",
                                  (double)(pipeline_now_us() - p->hold_since_us) / 1000.0);
                p->hold_since_us = 0;
                p->hold_expired = false;
        } else if (pipeline_stopped(p) && !p->hold_since_us) {
                /* Stopped with fetching paused for another reason (a drain,
                 * the cap) too: if that reason goes first, the hold's clock
                 * is already running. */
                p->hold_since_us = pipeline_now_us();
                p->hold_expired = false;
                p->ops.arm_hold(p->userdata, p->hold_since_us + PIPELINE_HOLD_MAX_US);
                pausing = pipeline_pause_reason(p) != NULL;
                if (!pausing && p->held_len > 0) {
                        p->holds++;
                        log_debug("Pipeline full: %zu record(s) held, the rest left in librdkafka's queue; "
                                  "fetching pauses if still full in %.1f s",
                                  p->held_len, (double)PIPELINE_HOLD_MAX_US / 1e6);
                } else if (!pausing)
                        log_debug("Intake closed: records left in librdkafka's queue; fetching pauses if still "
                                  "closed in %.1f s", (double)PIPELINE_HOLD_MAX_US / 1e6);
        }
        pipeline_update_pause(p);
}

void pipeline_hold_expired(pipeline_t *p) {
        uint64_t now = pipeline_now_us();

        if (!p->hold_since_us || p->hold_expired)
                return;
        if (now < p->hold_since_us + PIPELINE_HOLD_MAX_US) {
                /* Early (a timer armed for an earlier hold, say). */
                p->ops.arm_hold(p->userdata, p->hold_since_us + PIPELINE_HOLD_MAX_US);
                return;
        }
        p->hold_expired = true;
        if (!kafka_is_paused(p->kafka))
                p->hold_pauses++;
        pipeline_update_pause(p);
        /* Serve the consumer queue again: rebalances and the poll interval
         * waited for this; what was prefetched is dropped by the pause. */
        p->ops.pump_later(p->userdata);
}

/* Moves records from the held queue and the consumer queue into the
 * pipeline until it is full or the queue is empty. A record that finds no
 * room is held, and then, while the hold lasts (pipeline_holding), nothing
 * more is taken from the consumer queue: the records stay in librdkafka's
 * bounded queue and fetching goes on, so that room is filled at once. A
 * closed intake takes nothing the same way. Once fetching is paused (the
 * hold expired, a drain, a long wait for the cap), serving the consumer
 * queue goes on (rebalances, max.poll.interval.ms): librdkafka drops what it
 * had prefetched for the paused partitions, so `held` stays at the records
 * taken before. */
void pipeline_pump(pipeline_t *p) {
        /* With the intake closed, records are only held. */
        bool blocked = p->intake_closed;
        int budget = PIPELINE_PUMP_BUDGET;

        /* Decoded records first: they were taken before any held one. */
        if (pipeline_staging_place(p) < 0)
                return;

        while (budget-- > 0) {
                rd_kafka_message_t *m;

                while (!blocked && p->held_len > 0) {
                        m = pipeline_held_front(p);
                        if (p->draining) {
                                pipeline_held_drop(p, NULL);
                                break;
                        }
                        if (pipeline_take(p, m) == -ENOBUFS)
                                blocked = true;
                        else
                                pipeline_held_pop(p);
                }
                /* The held records went: no hold any more, and fetching
                 * resumes (if the hold had paused it) before taking more. */
                pipeline_hold_update(p);
                /* A short wait for the cap: the records stay in librdkafka's
                 * queue (see PIPELINE_HOLD_MAX_US); the deadline pumps. */
                if (p->cap_short && pipeline_cap_stops_intake(p))
                        break;
                /* Back-pressure within the hold: the same. */
                if (pipeline_holding(p))
                        break;
                if (kafka_consume(p->kafka, &m) <= 0)
                        break;
                /* Behind held records, or the intake is closed: held, in
                 * order. (Not `blocked`: a revoke inside kafka_consume may
                 * have finished the slots and dropped the held records.) */
                if (p->intake_closed || p->held_len > 0 || pipeline_take(p, m) == -ENOBUFS) {
                        if (pipeline_held_push(p, m) < 0) {
                                log_error("Out of memory holding a record");
                                rd_kafka_message_destroy(m);
                                pipeline_fail(p, 1);
                                return;
                        }
                        blocked = true;
                        /* Starts the hold (or pauses at once, for a long
                         * wait for the cap). */
                        pipeline_hold_update(p);
                }
        }
        if (budget < 0)
                p->ops.pump_later(p->userdata);
        pipeline_hold_update(p);
}

void pipeline_set_intake(pipeline_t *p, bool open) {
        p->intake_closed = !open;
        pipeline_hold_update(p);
        if (!open)
                pipeline_flush_filling(p);
        else
                /* Records may wait in librdkafka's queue, whose fd does
                 * not fire again for them. */
                p->ops.pump_later(p->userdata);
}

void pipeline_begin_drain(pipeline_t *p) {
        p->draining = true;
        pipeline_held_drop(p, NULL);
        pipeline_hold_update(p);
        pipeline_flush_filling(p);
}

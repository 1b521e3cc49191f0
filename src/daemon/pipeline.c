/* pipeline: the records' path through the daemon, on the event loop thread.
 *
 *   consumer -> pipeline_pump -> take: classify
 *        bad  -> produce a copy to the DLQ                (tracked offset)
 *        good -> batch_add + copy into the engine's slot  (tracked offset)
 *   slot full (or the delay timer, in daemon.c) -> engine_submit
 *   engine fd -> pipeline_reap -> one prediction per record
 *
 * A record that cannot be placed (every slot busy, or the producer's queue
 * full) waits in `held`, in order, and fetching is paused until there is
 * room. Delivery reports, offsets, commits, signals and the life cycle are in
 * daemon.c; the data structures in batch.c. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon-internal.h"
#include "daemon/log.h"
#include "core/record.h"

#define PIPELINE_PUMP_BUDGET 512

/* --- the held queue ------------------------------------------------------- */

static int pipeline_held_push(daemon_t *d, rd_kafka_message_t *m) {
        if (d->held_len == d->held_cap) {
                size_t cap = d->held_cap ? d->held_cap * 2 : 256;
                rd_kafka_message_t **h = malloc(cap * sizeof(*h));

                if (!h)
                        return -ENOMEM;
                for (size_t i = 0; i < d->held_len; i++)
                        h[i] = d->held[(d->held_head + i) % d->held_cap];
                free(d->held);
                d->held = h;
                d->held_cap = cap;
                d->held_head = 0;
        }
        d->held[(d->held_head + d->held_len) % d->held_cap] = m;
        d->held_len++;
        return 0;
}

static rd_kafka_message_t *pipeline_held_front(daemon_t *d) {
        return d->held_len ? d->held[d->held_head] : NULL;
}

static void pipeline_held_pop(daemon_t *d) {
        assert(d->held_len > 0);
        d->held_head = (d->held_head + 1) % d->held_cap;
        d->held_len--;
}

/* Drops held records (all, or those of the listed partitions): they were
 * never tracked, so their offsets are not committed and they come back. */
void pipeline_held_drop(daemon_t *d, const rd_kafka_topic_partition_list_t *parts) {
        size_t n = d->held_len;

        for (size_t i = 0; i < n; i++) {
                rd_kafka_message_t *m = pipeline_held_front(d);
                bool drop = !parts;

                pipeline_held_pop(d);
                if (parts && rd_kafka_topic_partition_list_find(parts, rd_kafka_topic_name(m->rkt), m->partition))
                        drop = true;
                if (drop)
                        rd_kafka_message_destroy(m);
                else
                        pipeline_held_push(d, m);  /* cannot fail: the ring has room */
        }
}

/* --- producing ------------------------------------------------------------ */

static rd_kafka_headers_t *pipeline_source_headers(const rd_kafka_message_t *m) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(4), *in = NULL;
        const void *v;
        size_t len;
        char num[32];

        if (!h)
                return NULL;
        rd_kafka_header_add(h, "inferd-source-topic", -1, rd_kafka_topic_name(m->rkt), -1);
        snprintf(num, sizeof(num), "%" PRId32, m->partition);
        rd_kafka_header_add(h, "inferd-source-partition", -1, num, -1);
        snprintf(num, sizeof(num), "%" PRId64, m->offset);
        rd_kafka_header_add(h, "inferd-source-offset", -1, num, -1);
        if (rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            rd_kafka_header_get_last(in, "correlation-id", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                rd_kafka_header_add(h, "correlation-id", -1, v, (ssize_t)len);
        return h;
}

static daemon_ticket_t *pipeline_ticket_new(const rd_kafka_message_t *m, bool dlq) {
        daemon_ticket_t *t = calloc(1, sizeof(*t));

        if (t) {
                t->offset = m->offset;
                t->partition = m->partition;
                t->dlq = dlq;
        }
        return t;
}

/* Starts tracking m's offset. Returns the partition id, or 0 when it cannot
 * be tracked (its delivery then stores nothing). */
static int pipeline_track(daemon_t *d, const rd_kafka_message_t *m) {
        int id = batch_offsets_track(d->offsets, rd_kafka_topic_name(m->rkt), m->partition, m->offset);

        if (id > 0)
                return id;
        log_warning_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                       LOG_OFFSET(m->offset) }),
                      "Record not tracked for commit (%s): it will be processed but its offset not stored",
                      strerror(-id));
        return 0;
}

/* part_id of pipeline_dead_letter: the record is not tracked yet. */
#define PIPELINE_TRACK_NOW (-1)

/* Sends a refused record to the DLQ with its key, value and headers, plus
 * inferd-error and inferd-error-detail. part_id is the offset store's id
 * when the record was already tracked (a batched record refused after the
 * engine ran), or PIPELINE_TRACK_NOW. Consumes m on success. */
static int pipeline_dead_letter(daemon_t *d, rd_kafka_message_t *m, const char *code, const char *detail,
                                int part_id) {
        rd_kafka_headers_t *in = NULL, *h;
        daemon_ticket_t *t;
        errbuf_t err = {};
        int r;

        if (rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR)
                h = rd_kafka_headers_copy(in);
        else
                h = pipeline_source_headers(m);
        t = pipeline_ticket_new(m, true);
        if (!h || !t) {
                r = -ENOMEM;
                goto fail;
        }
        if (in) {
                /* Copied the original headers: add where it came from. */
                rd_kafka_headers_t *src = pipeline_source_headers(m);
                size_t i = 0;
                const char *name;
                const void *v;
                size_t len;

                while (src && rd_kafka_header_get_all(src, i++, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                        if (strcmp(name, "correlation-id") != 0)
                                rd_kafka_header_add(h, name, -1, v, (ssize_t)len);
                if (src)
                        rd_kafka_headers_destroy(src);
        }
        rd_kafka_header_add(h, "inferd-error", -1, code, -1);
        rd_kafka_header_add(h, "inferd-error-detail", -1, detail, -1);
        r = kafka_produce(d->kafka, d->cfg->kafka.dlq_topic, m->key, m->key_len, m->payload, m->len, h, t, &err);
        if (r < 0) {
                if (r != -ENOBUFS)
                        log_error("%s", err.msg);
                goto fail;
        }
        /* h and t belong to librdkafka now. */
        t->part_id = part_id == PIPELINE_TRACK_NOW ? pipeline_track(d, m) : part_id;
        d->dlq_out++;
        log_warning_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                       LOG_OFFSET(m->offset), LOG_ERROR_CODE(code) }),
                      "Record refused, sent to '%s': %s", d->cfg->kafka.dlq_topic, detail);
        rd_kafka_message_destroy(m);
        return 0;
fail:
        if (h)
                rd_kafka_headers_destroy(h);
        free(t);
        return r;
}

/* Produces the predictions of a DONE slot, from where it stopped; releases
 * the slot when all are out. -ENOBUFS: the producer's queue is full (the
 * poll timer retries). Other errors are fatal. */
static int pipeline_produce_slot(daemon_t *d, int slot) {
        const engine_topk_t *top = engine_slot_topk(d->engine, slot); /* (n, engine_top_k) */
        int n = batch_slot_count(d->batch, slot);
        uint64_t t_now = daemon_now_us();
        errbuf_t err = {};
        int r;

        for (int i = d->slot_produced[slot]; i < n; i++) {
                batch_entry_t *e = batch_slot_entry(d->batch, slot, i);
                rd_kafka_message_t *m = e->msg;
                rd_kafka_headers_t *h = pipeline_source_headers(m);
                daemon_ticket_t *t = pipeline_ticket_new(m, false);
                char *json = NULL;
                int len;

                if (!engine_topk_is_finite(top + (size_t)i * d->engine_top_k)) {
                        /* No prediction: the record goes to the DLQ instead,
                         * under the offset it was tracked with. */
                        if (h)
                                rd_kafka_headers_destroy(h);
                        free(t);
                        r = pipeline_dead_letter(d, m, RECORD_ERR_NON_FINITE_OUTPUT,
                                                 "the model's output for this record is not finite (a NaN or "
                                                 "infinite logit), so it has no prediction",
                                                 e->tag);
                        if (r < 0) {
                                d->slot_produced[slot] = i;
                                return r;
                        }
                        e->msg = NULL;
                        continue;
                }
                len = prediction_format(&json, top + (size_t)i * d->engine_top_k, d->top_k,
                                        (double)(t_now - e->arrived_us) / 1000.0, &d->meta);
                if (!h || !t || len < 0) {
                        r = -ENOMEM;
                        log_error("Failed to format the prediction of offset %" PRId64 ": %s", m->offset,
                                  strerror(ENOMEM));
                        goto fail;
                }
                t->part_id = e->tag;
                r = kafka_produce(d->kafka, d->cfg->kafka.output_topic, m->key, m->key_len, json, (size_t)len, h,
                                  t, &err);
                free(json);
                if (r < 0) {
                        if (r != -ENOBUFS)
                                log_error("%s", err.msg);
                        rd_kafka_headers_destroy(h);
                        free(t);
                        d->slot_produced[slot] = i;
                        return r;
                }
                /* h and t belong to librdkafka now. */
                rd_kafka_message_destroy(m);
                e->msg = NULL;
                d->predictions_out++;
                continue;
fail:
                if (h)
                        rd_kafka_headers_destroy(h);
                free(t);
                free(json);
                d->slot_produced[slot] = i;
                return r;
        }
        d->slot_produced[slot] = 0;
        batch_release(d->batch, slot);
        return 0;
}

/* Retries every DONE slot. Returns -ENOBUFS while the producer is full. */
int pipeline_produce_pending(daemon_t *d) {
        for (int s = 0; s < batch_depth(d->batch); s++) {
                int r;

                if (batch_slot_state(d->batch, s) != BATCH_SLOT_DONE)
                        continue;
                r = pipeline_produce_slot(d, s);
                if (r == -ENOBUFS)
                        return r;
                if (r < 0) {
                        daemon_fail(d, 1);
                        return r;
                }
        }
        return 0;
}

/* --- the engine ------------------------------------------------------------ */

int pipeline_submit(daemon_t *d, int slot) {
        errbuf_t err = {};
        int n, r;

        if (batch_in_flight(d->batch) == 0)
                d->last_progress_us = daemon_now_us();
        n = batch_submit(d->batch, slot);
        r = engine_submit(d->engine, slot, n, &err);
        if (r < 0) {
                log_error("Failed to submit a batch of %d: %s", n, err.msg);
                daemon_fail(d, 1);
                return r;
        }
        d->batches++;
        d->batch_records += (uint64_t)n;
        log_debug_f(((log_fields_t){ LOG_BATCH(n) }), "Submitted slot %d", slot);
        return 0;
}

void pipeline_arm_delay(daemon_t *d, uint64_t oldest_us) {
        sd_event_source_set_time(d->delay_timer, oldest_us + (uint64_t)d->cfg->batching.max_delay_ms * 1000ULL);
        sd_event_source_set_enabled(d->delay_timer, SD_EVENT_ONESHOT);
}

/* Submits the FILLING slot, if any. */
void pipeline_flush_filling(daemon_t *d) {
        int slot = batch_filling(d->batch, NULL);

        if (slot >= 0)
                pipeline_submit(d, slot);
}

/* Takes every completed slot and produces its predictions. */
int pipeline_reap(daemon_t *d) {
        errbuf_t err = {};
        int slot, r;

        for (;;) {
                r = engine_reap(d->engine, &slot, &err);
                if (r < 0) {
                        log_error("The engine failed: %s", err.msg);
                        daemon_fail(d, 1);
                        return r;
                }
                if (r == 0)
                        break;
                if (batch_complete(d->batch, slot) < 0) {
                        log_error("The engine completed slot %d, which was not in flight", slot);
                        continue;
                }
                d->last_progress_us = daemon_now_us();
                log_debug_f(((log_fields_t){ LOG_BATCH(batch_slot_count(d->batch, slot)) }), "Slot %d complete",
                            slot);
                d->slot_produced[slot] = 0;
                r = pipeline_produce_slot(d, slot);
                if (r < 0 && r != -ENOBUFS) {
                        daemon_fail(d, 1);
                        return r;
                }
        }
        return 0;
}

/* --- records in ----------------------------------------------------------- */

/* Handles one consumed message. Returns 0 when it was handled (and
 * consumed), -ENOBUFS when it cannot be placed now (the caller keeps it). */
static int pipeline_take(daemon_t *d, rd_kafka_message_t *m) {
        rd_kafka_headers_t *hdrs = NULL;
        const void *ct = NULL;
        size_t ct_len = 0;
        record_format_t fmt;
        const char *code = NULL;
        errbuf_t err = {};
        batch_entry_t *e;
        void *dst;
        int slot, idx, full, r;

        if (m->err) {
                if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
                        log_error("Kafka consumer fatal error: %s", rd_kafka_message_errstr(m));
                        daemon_fail(d, 1);
                } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                        log_warning("Kafka consumer: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                return 0;
        }
        if (d->draining) {
                /* Not tracked, so not committed: the next owner gets it. */
                rd_kafka_message_destroy(m);
                return 0;
        }
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR)
                rd_kafka_header_get_last(hdrs, "content-type", &ct, &ct_len);

        r = record_classify(m->payload, m->len, ct, ct_len, &fmt, &code, &err);
        if (r < 0) {
                r = pipeline_dead_letter(d, m, code ? code : RECORD_ERR_DECODE_FAILED, err.msg, PIPELINE_TRACK_NOW);
                if (r == -ENOBUFS)
                        return r;
                if (r < 0) {
                        /* Tracked and never done: no later offset of its
                         * partition is stored, so it is redelivered. */
                        pipeline_track(d, m);
                        rd_kafka_message_destroy(m);
                        daemon_fail(d, 1);
                        return 0;
                }
                d->records_in++;
                return 0;
        }
        if (batch_is_busy(d->batch))
                return -ENOBUFS;

        full = batch_add(d->batch, m, daemon_now_us(), &slot, &idx);
        assert(full >= 0);
        e = batch_slot_entry(d->batch, slot, idx);
        e->tag = pipeline_track(d, m);
        /* The record's bytes go straight into the slot's (pinned) input,
         * packed by format. It fits: a slot is submitted as soon as it has
         * no room for a record of either format (below). */
        dst = engine_slot_place(d->engine, slot, idx, fmt);
        assert(dst && m->len == pack_row_bytes(fmt));
        memcpy(dst, m->payload, m->len);
        d->records_in++;
        /* Full by count, or by bytes (the next record could be float32). */
        if (full || !engine_slot_has_room(d->engine, slot))
                pipeline_submit(d, slot);
        else if (idx == 0)
                pipeline_arm_delay(d, e->arrived_us);
        return 0;
}

void pipeline_update_pause(daemon_t *d) {
        bool want = d->draining || d->held_len > 0;

        if (kafka_is_paused(d->kafka) != want) {
                kafka_set_paused(d->kafka, want);
                log_debug("%s fetching (%zu records held)", want ? "Paused" : "Resumed", d->held_len);
        }
}

/* Moves records from the held queue and the consumer queue into the
 * pipeline until it is full or the queue is empty. Serving the consumer
 * queue also runs rebalances and keeps max.poll.interval.ms satisfied, so
 * it goes on (into `held`) while the pipeline is full. */
void pipeline_pump(daemon_t *d) {
        bool blocked = false;
        int budget = PIPELINE_PUMP_BUDGET;

        if (d->in_revoke || !d->kafka)
                return;
        while (budget-- > 0) {
                rd_kafka_message_t *m;

                while (!blocked && d->held_len > 0) {
                        m = pipeline_held_front(d);
                        if (d->draining) {
                                pipeline_held_drop(d, NULL);
                                break;
                        }
                        if (pipeline_take(d, m) == -ENOBUFS)
                                blocked = true;
                        else
                                pipeline_held_pop(d);
                }
                if (kafka_consume(d->kafka, &m) <= 0)
                        break;
                if (blocked || d->held_len > 0 || pipeline_take(d, m) == -ENOBUFS) {
                        if (pipeline_held_push(d, m) < 0) {
                                log_error("Out of memory holding a record");
                                rd_kafka_message_destroy(m);
                                daemon_fail(d, 1);
                                return;
                        }
                        blocked = true;
                        /* Pause at once: librdkafka then drops what it had
                         * prefetched for these partitions (it fetches again
                         * from the held record on resume), so `held` stays at
                         * the records taken before the pause, and the loop
                         * goes on serving rebalances and other events. */
                        pipeline_update_pause(d);
                }
        }
        if (budget < 0)
                sd_event_source_set_enabled(d->defer, SD_EVENT_ONESHOT);
        pipeline_update_pause(d);
}

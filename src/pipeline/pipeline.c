/* pipeline: the records' path through the daemon, on the event loop
 * thread. See pipeline.h for the interface and the path; this file holds
 * taking records from the consumer, submitting and reaping the engine's
 * slots, the life cycle, the live settings and the statistics. The outputs
 * are in pipeline_produce.c, back-pressure (the held queue, the hold, the
 * pump) in pipeline_hold.c; pipeline_priv.h is the struct they share.
 *
 * It knows nothing of daemon.c (it includes no daemon.h): what it needs from
 * its owner goes through pipeline_ops_t, so the daemon depends on the
 * pipeline and not the other way round. Delivery reports, offsets,
 * commits, signals and the life cycle are in daemon.c; the data structures
 * in batch.c. */
#include "pipeline/pipeline_priv.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/log.h"
#include "core/record.h"
#include "core/units.h"

/* The DLQ codes counted from the start (0 or more), each code the record,
 * decode and engine layers give (PIPELINE_DLQ_CODES_MAX leaves room for
 * more). */
static const char *const pipeline_dlq_known[] = {
        RECORD_ERR_BAD_SIZE,    RECORD_ERR_BAD_CONTENT_TYPE,  RECORD_ERR_DECODE_FAILED,
        RECORD_ERR_TOO_LARGE,   RECORD_ERR_NON_FINITE_OUTPUT, RECORD_ERR_EXPIRED,
        RECORD_ERR_TOO_COSTLY,  RECORD_ERR_OUTPUT_TOO_LARGE,
};

uint64_t pipeline_now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* --- the engine ------------------------------------------------------------ */

/* Submits a FILLING slot to the engine: closed to new records at once.
 * The cap is not asked (pipeline_submit_ready asks it); a forced submission
 * is charged to it. Returns 0, or -errno after ops->fail. */
static int pipeline_submit(pipeline_t *p, int slot) {
        errbuf_t err = {};
        int n, r;

        if (batch_in_flight(p->batch) == 0)
                p->last_progress_us = pipeline_now_us();
        n = batch_submit(p->batch, slot);
        r = engine_submit(p->engine, slot, n, &err);
        if (r < 0) {
                log_error("Failed to submit a batch of %d: %s", n, err.msg);
                pipeline_fail(p, 1);
                return r;
        }
        p->batches++;
        p->batch_records += (uint64_t)n;
        p->slot_submitted_us[slot] = pipeline_now_us();
        for (int i = 0; i < n; i++)
                p->times[pipeline_pos(p, slot, i)].submitted_us = p->slot_submitted_us[slot];
        metrics_hist_observe(&p->batch_size, n);
        log_debug_f(((log_fields_t){ LOG_BATCH(n) }), "Submitted slot %d", slot);
        return 0;
}

/* (Re)arms the owner's batch-delay timer for a slot whose first record
 * came at oldest_us. */
static void pipeline_arm_delay(pipeline_t *p, uint64_t oldest_us) {
        p->ops.arm_delay(p->userdata, oldest_us + (uint64_t)p->max_delay_ms * 1000ULL);
}

/* Whether the FILLING slot can take no more records: full by count, or by
 * bytes (the next record could be float32). */
bool pipeline_slot_full(const pipeline_t *p, int slot) {
        return batch_slot_count(p->batch, slot) >= batch_limit(p->batch) || !engine_slot_has_room(p->engine, slot);
}

/* The FILLING slot is ready (full, or its delay passed): submits it if the
 * cap has its records' tokens, else leaves it FILLING (capped) and asks for
 * the deadline at which they will be there. Returns 1 when it was
 * submitted, 0 when it waits, -errno after ops->fail. */
static int pipeline_submit_ready(pipeline_t *p, int slot) {
        int n = batch_slot_count(p->batch, slot), r;
        uint64_t now = pipeline_now_us(), ready;

        if (ratelimit_take(&p->cap, n, now) == 0) {
                p->capped = false;
                r = pipeline_submit(p, slot);
                return r < 0 ? r : 1;
        }
        ready = ratelimit_ready_us(&p->cap, n, now);
        p->cap_short = ready - now < PIPELINE_HOLD_MAX_US;
        if (!p->capped) {
                p->capped = true;
                p->cap_waits++;
                log_debug("Batch of %d waits %.1f ms for [batching] max_images_per_s = %" PRId64, n,
                          (double)(ready - now) / 1000.0, p->cap.rate_per_s);
        }
        p->ops.arm_delay(p->userdata, ready);
        return 0;
}

/* Goes now, whatever the cap says (no more records will come to fill it,
 * or what is in flight must finish): charged to the cap, whose bucket may go
 * into debt, so the rate over time still holds. */
void pipeline_submit_filling(pipeline_t *p) {
        int slot = batch_filling(p->batch, NULL);

        if (slot < 0)
                return;
        ratelimit_charge(&p->cap, batch_slot_count(p->batch, slot), pipeline_now_us());
        p->capped = false;
        pipeline_submit(p, slot);
}

/* Records still decoding are placed after it: the slot they then fill goes
 * too, once the last of them is placed (pipeline_staging_place). */
void pipeline_flush_filling(pipeline_t *p) {
        p->flush_after_decodes = pipeline_staging_busy(p) > 0;
        pipeline_submit_filling(p);
}

/* Whether a ready record can be placed now: a slot is FILLING with room, or
 * one is FREE. */
static bool pipeline_has_room(const pipeline_t *p) {
        int slot = batch_filling(p->batch, NULL);

        return !batch_is_busy(p->batch) && !(slot >= 0 && pipeline_slot_full(p, slot));
}

int pipeline_place(pipeline_t *p, rd_kafka_message_t *msg, int tag, const rectime_t *times, record_format_t fmt,
                   const void *bytes, size_t len, const pipeline_cache_key_t *key) {
        batch_entry_t *e;
        void *dst;
        int slot, idx, full;

        if (!pipeline_has_room(p))
                return -ENOBUFS;
        full = batch_add(p->batch, NULL, pipeline_now_us(), &slot, &idx);
        assert(full >= 0);
        e = batch_slot_entry(p->batch, slot, idx);
        e->tag = tag;
        p->times[pipeline_pos(p, slot, idx)] = *times;
        pipeline_cache_keep(p, pipeline_pos(p, slot, idx), key);
        /* The record's bytes go straight into the slot's (pinned) input,
         * packed by format. It fits: a slot is submitted as soon as it has
         * no room for a record of either format (below). */
        dst = engine_slot_place(p->engine, slot, idx, fmt);
        assert(dst && len == pack_row_bytes(fmt));
        engine_slot_copy(dst, bytes, len);
        /* A raw record's value is the slot's copy from now on, and its
         * message goes back to librdkafka (pipeline_source.c). */
        pipeline_source_keep(&p->sources[pipeline_pos(p, slot, idx)], msg, bytes == msg->payload ? dst : NULL, len);
        /* Full by count, or by bytes (the next record could be float32). */
        if (full || !engine_slot_has_room(p->engine, slot))
                pipeline_submit_ready(p, slot);
        else if (idx == 0)
                pipeline_arm_delay(p, e->arrived_us);
        return 0;
}

/* The deadline is checked again: max_delay_ms may have been lowered or the
 * slot submitted and another started since the timer was armed. The same
 * deadline serves the cap: a capped slot is ready (its delay passed or it is
 * full) and goes once the tokens are there; records held behind it are then
 * taken at the next pump. */
void pipeline_delay_expired(pipeline_t *p) {
        uint64_t oldest;
        int slot = batch_filling(p->batch, &oldest);

        if (slot < 0)
                return;
        if (oldest + (uint64_t)p->max_delay_ms * 1000ULL <= pipeline_now_us() || pipeline_slot_full(p, slot)) {
                bool was_capped = p->capped;

                /* Records may be held behind it, or left in the queue. */
                if (pipeline_submit_ready(p, slot) > 0 && (was_capped || p->held_len > 0))
                        p->ops.pump_later(p->userdata);
        } else
                pipeline_arm_delay(p, oldest);
}

/* Takes every completed slot and produces its predictions. */
int pipeline_reap(pipeline_t *p) {
        errbuf_t err = {};
        int slot, r;

        for (;;) {
                r = engine_reap(p->engine, &slot, &err);
                if (r < 0) {
                        log_error("The engine failed: %s", err.msg);
                        pipeline_fail(p, 1);
                        return r;
                }
                if (r == 0)
                        break;
                if (batch_complete(p->batch, slot) < 0) {
                        log_error("The engine completed slot %d, which was not in flight", slot);
                        continue;
                }
                p->last_progress_us = pipeline_now_us();
                for (int i = 0; i < batch_slot_count(p->batch, slot); i++)
                        p->times[pipeline_pos(p, slot, i)].done_us = p->last_progress_us;
                metrics_hist_observe(&p->batch_seconds,
                                     (double)(p->last_progress_us - p->slot_submitted_us[slot]) / 1e6);
                log_debug_f(((log_fields_t){ LOG_BATCH(batch_slot_count(p->batch, slot)) }), "Slot %d complete",
                            slot);
                p->slot_produced[slot] = 0;
                r = pipeline_produce_slot(p, slot);
                if (r < 0 && r != -ENOBUFS) {
                        pipeline_fail(p, 1);
                        return r;
                }
        }
        /* A released slot has room for decoded records waiting. */
        return pipeline_staging_place(p);
}

/* --- a record's source: what its outputs need of it (pipeline_source_t),
 * and letting its librdkafka message go once its bytes are in a slot -------
 *
 * A consumed message keeps the whole decompressed message set it came in
 * alive (librdkafka decompresses a set into one buffer that its messages
 * share). Kept until its prediction was produced, each slot's records kept
 * 64 or more 150 KB images' worth of those buffers alive beside the slots'
 * own copies, so the broker thread decompressed every set into memory that
 * had left the cache; kcat frees each message at once. A raw record's bytes
 * are in its slot once placed, unchanged until the slot is released
 * (engine.h), so its message goes then: the record keeps a copy of its
 * topic, key and headers, and its value is the slot's copy. A decoded
 * record keeps its message whole (its value, the encoded image, is not in
 * the slot).
 *
 * Not here: the outputs themselves (pipeline_produce.c). */
void pipeline_source_of(pipeline_source_t *s, const rd_kafka_message_t *m) {
        rd_kafka_headers_t *h = NULL;

        if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
                h = NULL;
        *s = (pipeline_source_t){
                .topic = rd_kafka_topic_name(m->rkt),
                .partition = m->partition,
                .offset = m->offset,
                .timestamp_ms = rd_kafka_message_timestamp(m, NULL),
                .key = m->key,
                .key_len = m->key ? m->key_len : 0,
                .headers = h,
                .value = m->payload,
                .len = m->len,
        };
}

/* Copies what s views of its message (topic, key, headers) into s's own
 * memory, and takes value (len bytes) as its value. false: out of memory,
 * s unchanged. */
static bool pipeline_source_copy(pipeline_source_t *s, const void *value, size_t len) {
        size_t topic_len = strlen(s->topic) + 1;
        char *copied = malloc(topic_len + s->key_len);
        rd_kafka_headers_t *headers = NULL;

        if (!copied)
                return false;
        if (s->headers && !(headers = rd_kafka_headers_copy(s->headers))) {
                free(copied);
                return false;
        }
        memcpy(copied, s->topic, topic_len);
        if (s->key)
                memcpy(copied + topic_len, s->key, s->key_len);
        s->topic = copied;
        s->key = s->key ? copied + topic_len : NULL;
        s->headers = headers;
        s->value = value;
        s->len = len;
        s->copied = copied;
        s->copied_headers = headers;
        return true;
}

void pipeline_source_keep(pipeline_source_t *s, rd_kafka_message_t *m, const void *value, size_t len) {
        pipeline_source_of(s, m);
        s->msg = m;
        /* Out of memory: the message stays, as a decoded record's does. */
        if (value && pipeline_source_copy(s, value, len)) {
                assert(len == m->len);
                rd_kafka_message_destroy(m);
                s->msg = NULL;
        }
}

void pipeline_source_release(pipeline_source_t *s) {
        if (s->msg)
                rd_kafka_message_destroy(s->msg);
        if (s->copied_headers)
                rd_kafka_headers_destroy(s->copied_headers);
        free(s->copied);
        *s = (pipeline_source_t){};
}

/* --- records in ----------------------------------------------------------- */

/* A record past [batching] max_record_age (age_ms old): to the DLQ as
 * expired, or with the skip action finished at once without output (the
 * owner stores its offset: ops->skipped). Returns as pipeline_take. */
static int pipeline_expire(pipeline_t *p, rd_kafka_message_t *m, int64_t age_ms) {
        char detail[192], limit[32];

        if (p->expired_skip && p->ops.skipped) {
                pipeline_source_t s;
                pipeline_ticket_t *t;

                pipeline_source_of(&s, m);
                t = pipeline_ticket_new(&s, false);
                if (!t) {
                        log_error("Out of memory skipping an expired record");
                        pipeline_track(p, &s);  /* never done: redelivered */
                        rd_kafka_message_destroy(m);
                        pipeline_fail(p, 1);
                        return 0;
                }
                t->part_id = pipeline_track(p, &s);
                p->records_in++;
                p->expired_skipped++;
                log_debug_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                             LOG_OFFSET(m->offset), LOG_ERROR_CODE(RECORD_ERR_EXPIRED) }),
                            "Record skipped: %.3f s old, past [batching] max_record_age", (double)age_ms / 1e3);
                rd_kafka_message_destroy(m);
                p->ops.skipped(p->userdata, t);         /* t is the owner's now */
                return 0;
        }
        snprintf(detail, sizeof(detail),
                 "the record was %.3f s old when taken (by its Kafka timestamp), past [batching] "
                 "max_record_age = %s", (double)age_ms / 1e3,
                 units_format_duration_ms(p->max_record_age_ms, limit, sizeof(limit)));
        return pipeline_refuse_taken(p, m, RECORD_ERR_EXPIRED, detail);
}

/* The same record again from librdkafka, without a rewind of ours (each
 * assigns the partition's tracking afresh): its first copy was taken and is
 * answered, so this one is dropped, not produced twice. librdkafka 2.0.2
 * does this when a pause races the fetch that an assignment starts: the
 * pause's version barrier is drawn before the fetch start's but queued after
 * it, so what the fetch brought slips past the pause, and the resume
 * fetches again from the start (seen in unit pipeline
 * intake_closed_takes_nothing, about one run in 90). Logged at most once a
 * minute, with the count. */
#define PIPELINE_REDELIVERED_LOG_US (60 * 1000 * 1000ULL)

static int pipeline_drop_redelivered(pipeline_t *p, rd_kafka_message_t *m) {
        uint64_t now = pipeline_now_us();

        p->redelivered++;
        if (!p->redelivered_logged_us || now - p->redelivered_logged_us >= PIPELINE_REDELIVERED_LOG_US) {
                p->redelivered_logged_us = now;
                log_warning_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                               LOG_OFFSET(m->offset) }),
                              "librdkafka handed out a record that was taken already, without a rewind; dropped, "
                              "its first copy is answered (%" PRIu64 " so far, inferd_records_redelivered_total)",
                              p->redelivered);
        }
        rd_kafka_message_destroy(m);
        return 0;
}

/* Handles one consumed message. Returns 0 when it was handled (and
 * consumed), -ENOBUFS when it cannot be placed now (the caller keeps it). */
int pipeline_take(pipeline_t *p, rd_kafka_message_t *m) {
        rd_kafka_headers_t *hdrs = NULL;
        pipeline_source_t src;
        const void *ct = NULL;
        size_t ct_len = 0;
        record_format_t fmt;
        const char *code = NULL;
        errbuf_t err = {};
        pipeline_cache_key_t key;
        rectime_t times;
        uint64_t now;
        int64_t age_ms;
        bool hit;
        int tag, r;

        if (m->err) {
                if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
                        log_error("Kafka consumer fatal error: %s", rd_kafka_message_errstr(m));
                        pipeline_fail(p, 1);
                } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                        log_warning("Kafka consumer: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                return 0;
        }
        if (p->draining) {
                /* Not tracked, so not committed: the next owner gets it. */
                rd_kafka_message_destroy(m);
                return 0;
        }
        if (batch_offsets_taken(p->offsets, rd_kafka_topic_name(m->rkt), m->partition, m->offset))
                return pipeline_drop_redelivered(p, m);
        /* The deadline: before anything is spent on the record. */
        if (p->max_record_age_ms &&
            rectime_expired(rd_kafka_message_timestamp(m, NULL), rectime_now_ms(), p->max_record_age_ms, &age_ms))
                return pipeline_expire(p, m, age_ms);
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR)
                rd_kafka_header_get_last(hdrs, "content-type", &ct, &ct_len);

        /* With a decode pool, JPEG and PNG are taken too (record_identify);
         * without one, they are refused (record_classify). Two content-types
         * are refused: which one the producer meant is not guessed. */
        if (ct && rd_kafka_header_get(hdrs, 1, "content-type", &(const void *){ NULL }, &(size_t){ 0 }) ==
                          RD_KAFKA_RESP_ERR_NO_ERROR) {
                code = RECORD_ERR_BAD_CONTENT_TYPE;
                r = errbuf_set(&err, -EINVAL, "the record has more than one content-type header; one is expected");
        } else if (p->decode)
                r = record_identify(m->payload, m->len, ct, ct_len, &fmt, &code, &err);
        else
                r = record_classify(m->payload, m->len, ct, ct_len, &fmt, &code, &err);
        if (r < 0) {
                return pipeline_refuse_taken(p, m, code ? code : RECORD_ERR_DECODE_FAILED, err.msg);
        }
        /* A result in the cache: produced now, needing no room. */
        hit = pipeline_cache_take(p, m, fmt, &key, &r);
        pipeline_cache_held(p, NULL, NULL);
        if (hit)
                return r;
        /* Back-pressure: a record to decode needs a staging entry, a ready
         * one room in the slots (none while the FILLING slot is full and
         * waits for the cap). Nothing is tracked before there is room. */
        if (record_is_encoded(fmt) ? !pipeline_staging_has_room(p) : !pipeline_has_room(p)) {
                pipeline_cache_held(p, m, &key);
                return -ENOBUFS;
        }
        p->cache_misses += key.set;
        now = pipeline_now_us();
        times = (rectime_t){
                .queue_s = rectime_queue_s(rd_kafka_message_timestamp(m, NULL), rectime_now_s()),
                .taken_us = now,
                .decoded_us = record_is_encoded(fmt) ? 0 : now,
        };
        pipeline_source_of(&src, m);
        tag = pipeline_track(p, &src);
        p->records_in++;
        if (record_is_encoded(fmt)) {
                /* A decode thread writes its RGB8 into the entry; it is
                 * placed in a slot once decoded (pipeline_decode.c). */
                pipeline_staging_take(p, m, tag, &times, fmt, &key);
                return 0;
        }
        r = pipeline_place(p, m, tag, &times, fmt, m->payload, m->len, &key);
        assert(r == 0);         /* room: checked above, on this thread */
        return 0;
}

/* --- life cycle, live settings, statistics ------------------------------------- */

int pipeline_new(pipeline_t **ret, const pipeline_config_t *cfg, const pipeline_ops_t *ops, void *userdata) {
        pipeline_t *p;
        int r;

        assert(ret && cfg && ops && ops->fail && ops->arm_delay && ops->pump_later && ops->arm_hold);
        assert(cfg->engine && cfg->kafka && cfg->offsets && cfg->output_topic && cfg->dlq_topic);
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (pipeline_t){
                .ops = *ops,
                .userdata = userdata,
                .engine = cfg->engine,
                .kafka = cfg->kafka,
                .offsets = cfg->offsets,
                .output_topic = cfg->output_topic,
                .dlq_topic = cfg->dlq_topic,
                .meta = cfg->meta,
                .engine_top_k = engine_plan_of(cfg->engine)->top_k,
                .max_delay_ms = cfg->max_delay_ms,
                .max_record_age_ms = cfg->max_record_age_ms,
                .expired_skip = cfg->expired_skip,
                .trace_headers = cfg->trace_headers,
                .timing_header = cfg->timing_header,
                .last_progress_us = pipeline_now_us(),
                .dlq_cut_bytes = SIZE_MAX,
                .dlq_cut_ttl_us = PIPELINE_DLQ_CUT_TTL_US,
                .out_cut_bytes = SIZE_MAX,
        };
        p->top_k = cfg->top_k < p->engine_top_k ? cfg->top_k : p->engine_top_k;
        for (size_t i = 0; i < sizeof(pipeline_dlq_known) / sizeof(pipeline_dlq_known[0]); i++)
                p->dlq_codes[p->n_dlq_codes++] = (metrics_count_t){ .label = pipeline_dlq_known[i] };
        p->n_dlq_known = p->n_dlq_codes;
        for (int i = 0; i < PIPELINE_N_COPIED; i++)
                p->headers_cut[i] = (metrics_count_t){ .label = pipeline_copied_headers[i] };
        metrics_hist_init(&p->batch_size, METRICS_HIST_BATCH_SIZE);
        metrics_hist_init(&p->batch_seconds, METRICS_HIST_BATCH_SECONDS);
        for (int i = 0; i < RECTIME_STAGES; i++)
                metrics_hist_init(&p->stage_seconds[i], METRICS_HIST_STAGE_SECONDS);
        r = batch_new(&p->batch, engine_slots(cfg->engine), engine_max_batch(cfg->engine));
        if (r < 0)
                goto fail;
        pipeline_set_max_batch(p, cfg->max_batch);
        assert(cfg->max_images_per_s >= 0);
        ratelimit_set(&p->cap, cfg->max_images_per_s, batch_limit(p->batch), pipeline_now_us());
        p->slot_produced = calloc((size_t)engine_slots(cfg->engine), sizeof(int));
        p->slot_submitted_us = calloc((size_t)engine_slots(cfg->engine), sizeof(uint64_t));
        if (!p->slot_produced || !p->slot_submitted_us) {
                r = -ENOMEM;
                goto fail;
        }
        p->capacity = batch_capacity(p->batch);
        p->times = calloc((size_t)engine_slots(cfg->engine) * (size_t)p->capacity, sizeof(*p->times));
        p->sources = calloc((size_t)engine_slots(cfg->engine) * (size_t)p->capacity, sizeof(*p->sources));
        if (!p->times || !p->sources) {
                r = -ENOMEM;
                goto fail;
        }
        if (cfg->decode) {
                p->decode = cfg->decode;
                r = pipeline_staging_new(p, engine_slots(cfg->engine) * p->capacity);
                if (r < 0)
                        goto fail;
        }
        r = pipeline_cache_new(p, cfg->cache_entries, cfg->cache_preprocessing);
        if (r < 0)
                goto fail;
        *ret = p;
        return 0;
fail:
        pipeline_free(p);
        return r;
}

void pipeline_free(pipeline_t *p) {
        if (!p)
                return;
        pipeline_held_drop(p, NULL);
        /* The records still in slots (released positions are empty). */
        if (p->sources)
                for (size_t i = 0; i < (size_t)batch_depth(p->batch) * (size_t)p->capacity; i++)
                        pipeline_source_release(&p->sources[i]);
        batch_free(p->batch);
        free(p->sources);
        prediction_encoder_free(p->encoder);
        free(p->slot_produced);
        free(p->slot_submitted_us);
        free(p->times);
        for (size_t i = p->n_dlq_known; i < p->n_dlq_codes; i++)
                free((char *)p->dlq_codes[i].label);
        pipeline_staging_free(p);
        pipeline_cache_free(p);
        pipeline_dlq_retry_free(p);
        free(p->held);
        free(p);
}

int pipeline_set_top_k(pipeline_t *p, int top_k) {
        if (top_k > p->engine_top_k)
                return -ERANGE;
        p->top_k = top_k;
        return 0;
}

void pipeline_set_max_delay_ms(pipeline_t *p, int max_delay_ms) {
        p->max_delay_ms = max_delay_ms;
}

void pipeline_set_max_record_age(pipeline_t *p, uint64_t max_age_ms, bool skip) {
        p->max_record_age_ms = max_age_ms;
        p->expired_skip = skip;
}

void pipeline_set_headers(pipeline_t *p, bool trace_headers, bool timing_header) {
        p->trace_headers = trace_headers;
        p->timing_header = timing_header;
}

void pipeline_delivered(pipeline_t *p, const pipeline_ticket_t *t, uint64_t now_us) {
        double stages[RECTIME_STAGES];

        if (!t->timed)
                return;
        rectime_stages(&t->times, now_us, stages);
        for (int i = 0; i < RECTIME_STAGES; i++)
                metrics_hist_observe(&p->stage_seconds[i], stages[i]);
}

/* After a live change, the FILLING slot is looked at again: a capped one
 * may go now or at another time, and one that a lower max_batch made full
 * goes (or waits for the cap) instead of waiting for its delay. */
static void pipeline_recheck_filling(pipeline_t *p) {
        int slot = batch_filling(p->batch, NULL);

        if (slot < 0) {
                p->capped = false;
                return;
        }
        if ((p->capped || pipeline_slot_full(p, slot)) && pipeline_submit_ready(p, slot) > 0)
                p->ops.pump_later(p->userdata);
}

int pipeline_set_max_batch(pipeline_t *p, int max_batch) {
        int got;

        /* The engine's batch, which a model swap may have lowered below the
         * batcher's capacity. */
        if (max_batch > engine_max_batch(p->engine))
                max_batch = engine_max_batch(p->engine);
        got = batch_set_limit(p->batch, max_batch);
        /* The bucket holds one batch. */
        if (ratelimit_enabled(&p->cap))
                ratelimit_set(&p->cap, (int)p->cap.rate_per_s, got, pipeline_now_us());
        pipeline_recheck_filling(p);
        return got;
}

void pipeline_set_max_images_per_s(pipeline_t *p, int max_images_per_s) {
        assert(max_images_per_s >= 0);
        ratelimit_set(&p->cap, max_images_per_s, batch_limit(p->batch), pipeline_now_us());
        pipeline_recheck_filling(p);
}

int pipeline_engine_swapped(pipeline_t *p, const char *model_id, const char *precision, int max_batch) {
        if (batch_records_held(p->batch) > 0 || batch_in_flight(p->batch) > 0 || pipeline_staging_busy(p) > 0)
                return -EBUSY;
        p->meta.model_id = model_id;
        p->meta.precision = precision;
        pipeline_meta_changed(p);
        pipeline_set_max_batch(p, max_batch);
        /* A model of fewer classes may have lowered the engine's top-k. */
        p->engine_top_k = engine_plan_of(p->engine)->top_k;
        if (p->top_k > p->engine_top_k)
                p->top_k = p->engine_top_k;
        pipeline_cache_swapped(p);
        return 0;
}

void pipeline_set_labels(pipeline_t *p, const labels_t *labels) {
        p->meta.labels = labels;
        pipeline_meta_changed(p);
}

void pipeline_get_stats(const pipeline_t *p, pipeline_stats_t *ret) {
        *ret = (pipeline_stats_t){};
        if (!p)
                return;
        *ret = (pipeline_stats_t){
                .records_in = p->records_in,
                .predictions_out = p->predictions_out,
                .dlq_out = p->dlq_out,
                .expired_skipped = p->expired_skipped,
                .redelivered = p->redelivered,
                .dlq_values_omitted = p->dlq_values_omitted,
                .outputs_given_up = p->outputs_given_up,
                .batches = p->batches,
                .batch_records = p->batch_records,
                .dlq_codes = p->dlq_codes,
                .n_dlq_codes = p->n_dlq_codes,
                .headers_cut = p->headers_cut,
                .n_headers_cut = PIPELINE_N_COPIED,
                .batch_size = &p->batch_size,
                .batch_seconds = &p->batch_seconds,
                .stage_seconds = p->stage_seconds,
                .slots = batch_depth(p->batch),
                .slots_in_flight = batch_in_flight(p->batch),
                .records_in_slots = batch_records_held(p->batch),
                .records_decoding = pipeline_staging_busy(p),
                .records_held = p->held_len,
                .batch_limit = batch_limit(p->batch),
                .batch_capacity = engine_max_batch(p->engine),
                .top_k = p->top_k,
                .engine_top_k = p->engine_top_k,
                .last_progress_us = p->last_progress_us,
                .max_images_per_s = (int)p->cap.rate_per_s,
                .capped = p->capped,
                .paused = kafka_is_paused(p->kafka),
                .holding = pipeline_holding(p),
                .holds = p->holds,
                .hold_pauses = p->hold_pauses,
                .paused_by_cap = pipeline_cap_stops_intake(p),
                .cap_waits = p->cap_waits,
                .cache_hits = p->cache_hits,
                .cache_misses = p->cache_misses,
                .cache_entries = cache_entries(p->cache),
                .cache_limit = cache_limit(p->cache),
                .cache_room = cache_room(p->cache),
        };
}

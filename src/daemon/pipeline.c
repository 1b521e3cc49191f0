/* pipeline: the records' path through the daemon, on the event loop
 * thread. See pipeline.h for the interface and the path; this file holds the
 * held queue, the producing of predictions and DLQ copies, submitting and
 * reaping the engine's slots, and taking records from the consumer.
 *
 * It knows nothing of daemon.c (it includes no daemon.h): what it needs from
 * its owner goes through pipeline_ops_t, so the daemon depends on the
 * pipeline and not the other way round. Delivery reports, offsets,
 * commits, signals and the life cycle are in daemon.c; the data structures
 * in batch.c. */
#include "daemon/pipeline.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/dlq.h"
#include "daemon/log.h"
#include "daemon/ratelimit.h"
#include "core/record.h"
#include "core/units.h"

#define PIPELINE_PUMP_BUDGET 512

/* The DLQ codes counted by name: every code the record, decode and engine
 * layers give, plus room for one that a later layer adds without telling
 * this table (it is then counted under its own name, not lost). */
#define PIPELINE_DLQ_CODES_MAX 16
static const char *const pipeline_dlq_known[] = {
        RECORD_ERR_BAD_SIZE,    RECORD_ERR_BAD_CONTENT_TYPE,  RECORD_ERR_DECODE_FAILED,
        RECORD_ERR_TOO_LARGE,   RECORD_ERR_NON_FINITE_OUTPUT, RECORD_ERR_EXPIRED,
        RECORD_ERR_TOO_COSTLY,
};

struct pipeline {
        pipeline_ops_t ops;             /* copied */
        void *userdata;                 /* the owner's, handed back to ops */

        engine_t *engine;               /* borrowed */
        kafka_t *kafka;                 /* borrowed */
        batch_offsets_t *offsets;       /* borrowed */
        const char *output_topic;       /* borrowed */
        const char *dlq_topic;          /* borrowed */
        batch_t *batch;                 /* owned; the slots' entries own their messages */
        prediction_meta_t meta;
        int engine_top_k;               /* the top-k the engine computes (a live top_k may only go below) */
        int top_k;                      /* live */
        int max_delay_ms;               /* live */
        uint64_t max_record_age_ms;     /* live; 0 = no deadline */
        bool expired_skip;              /* live: past it, commit without output */
        bool trace_headers, timing_header;      /* live */
        int *slot_produced;             /* (depth) records of a DONE slot already produced */

        /* Decoding (when decode is not NULL): one job per slot position,
         * (depth, capacity); a slot is submitted to the engine once
         * slot_decoding reaches 0, with the n batch_submit gave it. */
        decode_pool_t *decode;          /* borrowed */
        decode_job_t *jobs;             /* (depth * capacity) */
        bool *refused;                  /* (depth * capacity): the job's decode was refused: DLQ, not a prediction */
        int *slot_decoding;             /* (depth) jobs not yet reaped */
        int *slot_waiting;              /* (depth) batch_submit's n, while the engine waits for decodes; 0 = none */
        int capacity;                   /* the batcher's capacity (positions per slot) */

        /* Records consumed but not placed yet, in order (a ring); owned. */
        rd_kafka_message_t **held;
        size_t held_head, held_len, held_cap;

        /* The hold (see PIPELINE_HOLD_MAX_US): while records are held (the
         * pipeline is full) or the intake is closed, the pump takes nothing
         * more from the consumer; fetching is paused only once that has
         * lasted PIPELINE_HOLD_MAX_US (at once for a drain or a long wait
         * for the cap). */
        uint64_t hold_since_us;         /* when the intake stopped (records held, or closed); 0 = it takes */
        bool hold_expired;              /* stopped for PIPELINE_HOLD_MAX_US: pause */
        uint64_t holds, hold_pauses;    /* times the pipeline filled (a hold began); times a hold ended in a pause */

        bool draining;                  /* pipeline_begin_drain: take no more records */
        bool intake_closed;             /* pipeline_set_intake: take nothing new for now */

        /* [batching] max_images_per_s: a ready FILLING slot (full, or its
         * delay passed) is submitted only when the bucket has its records'
         * tokens; until then it stays FILLING (capped) and takes records
         * while it has room. Once it is full, the intake stops: for a short
         * wait the pump takes nothing more (see PIPELINE_HOLD_MAX_US),
         * for a longer one the next record is held and fetching paused at
         * once (pipeline_pause_reason). The batch-delay deadline (ops->arm_delay) is
         * then the time the tokens will be there. */
        ratelimit_t cap;                /* images a second, a bucket of one batch; rate 0 = no cap */
        bool capped;                    /* the FILLING slot is ready and waits for tokens */
        bool cap_short;                 /* ... for less than PIPELINE_HOLD_MAX_US: take nothing, do not pause */
        uint64_t cap_waits;             /* times a ready slot had to wait */

        /* Counted here, read by the owner through pipeline_get_stats. */
        uint64_t records_in, predictions_out, dlq_out, batches, batch_records;
        uint64_t dlq_values_omitted;    /* DLQ copies sent without their value (dlq.h) */
        size_t dlq_cut_bytes;           /* values of this size or more are left out of DLQ copies at once: the
                                         * broker refused one that large (SIZE_MAX: none was refused) */
        uint64_t last_progress_us;      /* last completion, or when the engine left idle */
        metrics_count_t dlq_codes[PIPELINE_DLQ_CODES_MAX];      /* labels: static strings or owned copies */
        size_t n_dlq_codes, n_dlq_known;
        metrics_hist_t batch_size, batch_seconds;
        uint64_t *slot_submitted_us;    /* (depth) when the engine was given the slot */
        rectime_t *times;               /* (depth * capacity) each position's record's times */
        uint64_t expired_skipped;
        metrics_hist_t stage_seconds[RECTIME_STAGES];
};

uint64_t pipeline_now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* Asks the owner to stop with a failure; the caller has logged why. */
static void pipeline_fail(pipeline_t *p, int status) {
        p->ops.fail(p->userdata, status);
}

/* Position i of slot in the (depth, capacity) arrays: jobs, refused, times. */
static size_t pipeline_pos(const pipeline_t *p, int slot, int i) {
        return (size_t)slot * (size_t)p->capacity + (size_t)i;
}

/* --- the held queue ------------------------------------------------------- */

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

/* --- producing ------------------------------------------------------------ */

static void pipeline_count_dlq(pipeline_t *p, const char *code) {
        size_t i;

        p->dlq_out++;
        for (i = 0; i < p->n_dlq_codes; i++)
                if (!strcmp(p->dlq_codes[i].label, code)) {
                        p->dlq_codes[i].n++;
                        return;
                }
        if (i < PIPELINE_DLQ_CODES_MAX) {
                char *copy = strdup(code);

                if (copy) {
                        p->dlq_codes[i] = (metrics_count_t){ .label = copy, .n = 1 };
                        p->n_dlq_codes++;
                }
        }
}

/* The headers copied from an input record to its outputs, as they were:
 * correlation-id always, the W3C trace context with [service]
 * trace_headers. */
static const char *const pipeline_copied_headers[] = { "correlation-id", "traceparent", "tracestate" };
#define PIPELINE_N_COPIED(p) ((p)->trace_headers ? 3 : 1)

static bool pipeline_is_copied_header(const pipeline_t *p, const char *name) {
        for (int i = 0; i < PIPELINE_N_COPIED(p); i++)
                if (!strcmp(name, pipeline_copied_headers[i]))
                        return true;
        return false;
}

static rd_kafka_headers_t *pipeline_source_headers(const pipeline_t *p, const rd_kafka_message_t *m) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(8), *in = NULL;
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
        if (rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR)
                for (int i = 0; i < PIPELINE_N_COPIED(p); i++)
                        if (rd_kafka_header_get_last(in, pipeline_copied_headers[i], &v, &len) ==
                            RD_KAFKA_RESP_ERR_NO_ERROR)
                                rd_kafka_header_add(h, pipeline_copied_headers[i], -1, v, (ssize_t)len);
        return h;
}

static pipeline_ticket_t *pipeline_ticket_new(const rd_kafka_message_t *m, bool dlq) {
        pipeline_ticket_t *t = calloc(1, sizeof(*t));

        if (t) {
                t->offset = m->offset;
                t->partition = m->partition;
                t->dlq = dlq;
                t->timestamp_ms = rd_kafka_message_timestamp(m, NULL);
        }
        return t;
}

/* Starts tracking m's offset. Returns the partition id, or 0 when it cannot
 * be tracked (its delivery then stores nothing). */
static int pipeline_track(pipeline_t *p, const rd_kafka_message_t *m) {
        int id = batch_offsets_track(p->offsets, rd_kafka_topic_name(m->rkt), m->partition, m->offset);

        if (id > 0)
                return id;
        log_warning_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                       LOG_OFFSET(m->offset) }),
                      "Record not tracked for commit (%s): it will be processed but its offset not stored",
                      strerror(-id));
        return 0;
}

/* Produces the cut copy of a DLQ record (dlq.h): key kept, no value, the
 * headers of full (borrowed, may be NULL) cut, under ticket t. Returns 0
 * (t is librdkafka's) or kafka_produce's -errno. */
static int pipeline_dlq_produce_cut(pipeline_t *p, const void *key, size_t key_len, const rd_kafka_headers_t *full,
                                    size_t value_bytes, pipeline_ticket_t *t, errbuf_t *err) {
        rd_kafka_headers_t *cut = dlq_headers_cut(full, value_bytes);
        int r;

        if (!cut)
                return errbuf_set(err, -ENOMEM, "Out of memory cutting a DLQ copy's headers");
        /* An empty value, not a null one: a null value is a tombstone
         * (a delete) on a compacted topic. */
        r = kafka_produce(p->kafka, p->dlq_topic, key, key_len, "", 0, cut, t, err);
        if (r < 0) {
                rd_kafka_headers_destroy(cut);
                return r;
        }
        t->dlq_cut_tries = 1;
        p->dlq_values_omitted++;
        return 0;
}

/* part_id of pipeline_dead_letter: the record is not tracked yet. */
#define PIPELINE_TRACK_NOW (-1)

/* Sends a refused record to the DLQ with its key, value and headers, plus
 * inferd-error and inferd-error-detail. part_id is the offset store's id
 * when the record was already tracked (a batched record refused after the
 * engine ran), or PIPELINE_TRACK_NOW. Consumes m on success. */
static int pipeline_dead_letter(pipeline_t *p, rd_kafka_message_t *m, const char *code, const char *detail,
                                int part_id) {
        rd_kafka_headers_t *in = NULL, *h;
        pipeline_ticket_t *t;
        errbuf_t err = {};
        bool omitted = false;
        int r;

        if (rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR)
                h = rd_kafka_headers_copy(in);
        else
                h = pipeline_source_headers(p, m);
        t = pipeline_ticket_new(m, true);
        if (!h || !t) {
                r = -ENOMEM;
                goto fail;
        }
        if (in) {
                /* Copied the original headers: add where it came from. */
                rd_kafka_headers_t *src = pipeline_source_headers(p, m);
                size_t i = 0;
                const char *name;
                const void *v;
                size_t len;

                while (src && rd_kafka_header_get_all(src, i++, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                        if (!pipeline_is_copied_header(p, name))        /* already there */
                                rd_kafka_header_add(h, name, -1, v, (ssize_t)len);
                if (src)
                        rd_kafka_headers_destroy(src);
        }
        rd_kafka_header_add(h, "inferd-error", -1, code, -1);
        rd_kafka_header_add(h, "inferd-error-detail", -1, detail, -1);
        if (m->len >= p->dlq_cut_bytes)
                r = -EMSGSIZE;  /* the broker refused one this large */
        else
                r = kafka_produce(p->kafka, p->dlq_topic, m->key, m->key_len, m->payload, m->len, h, t, &err);
        if (r == -EMSGSIZE) {
                /* Too large whole: without the value (dlq.h). h stays ours. */
                r = pipeline_dlq_produce_cut(p, m->key, m->key_len, h, m->len, t, &err);
                if (r == 0) {
                        rd_kafka_headers_destroy(h);
                        omitted = true;
                }
        }
        if (r < 0) {
                if (r != -ENOBUFS && r != -ECANCELED)
                        log_error("%s", err.msg);
                goto fail;
        }
        /* h (or its cut copy) and t belong to librdkafka now. */
        t->part_id = part_id == PIPELINE_TRACK_NOW ? pipeline_track(p, m) : part_id;
        pipeline_count_dlq(p, code);
        log_warning_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                       LOG_OFFSET(m->offset), LOG_ERROR_CODE(code) }),
                      "Record refused, sent to '%s'%s: %s", p->dlq_topic,
                      omitted ? " without its value (too large for the DLQ)" : "", detail);
        rd_kafka_message_destroy(m);
        return 0;
fail:
        if (h)
                rd_kafka_headers_destroy(h);
        free(t);
        return r;
}

/* A record refused as it is taken (its type, or its age): its DLQ copy, and
 * the same returns as pipeline_take's. */
static int pipeline_refuse_taken(pipeline_t *p, rd_kafka_message_t *m, const char *code, const char *detail) {
        int r = pipeline_dead_letter(p, m, code, detail, PIPELINE_TRACK_NOW);

        if (r == -ENOBUFS)
                return r;
        if (r == -ECANCELED) {
                /* Exactly-once, the transaction doomed: not tracked, so it
                 * comes again after the rewind. */
                rd_kafka_message_destroy(m);
                return 0;
        }
        if (r < 0) {
                /* Tracked and never done: no later offset of its
                 * partition is stored, so it is redelivered. */
                pipeline_track(p, m);
                rd_kafka_message_destroy(m);
                pipeline_fail(p, 1);
                return 0;
        }
        p->records_in++;
        return 0;
}

/* A record of a DONE slot that gets no prediction (its decode was refused,
 * or its output is not finite) goes to the DLQ under the offset it was
 * tracked with; with exactly-once and the transaction doomed, it is dropped
 * instead (the rewind after the abort brings it back). Returns 0 when the
 * record has left the slot, else pipeline_dead_letter's -errno (it stays). */
static int pipeline_produce_dead(pipeline_t *p, batch_entry_t *e, const char *code, const char *detail) {
        int r = pipeline_dead_letter(p, e->msg, code, detail, e->tag);

        if (r == -ECANCELED) {
                rd_kafka_message_destroy(e->msg);
                r = 0;
        }
        if (r == 0)
                e->msg = NULL;
        return r;
}

/* Produces position i of a DONE slot: its prediction (top: the slot's
 * results, (n, engine_top_k)), or its DLQ copy. t_now is when the slot's
 * results are produced. Returns 0 when the record has left the slot,
 * -ENOBUFS when the producer's queue is full (it stays, to be retried),
 * other -errno (fatal; it stays). */
static int pipeline_produce_one(pipeline_t *p, int slot, int i, const engine_topk_t *top, uint64_t t_now) {
        batch_entry_t *e = batch_slot_entry(p->batch, slot, i);
        const engine_topk_t *scores = top + (size_t)i * p->engine_top_k;
        size_t pos = pipeline_pos(p, slot, i);
        rd_kafka_message_t *m = e->msg;
        rd_kafka_headers_t *h;
        pipeline_ticket_t *t;
        errbuf_t err = {};
        char *json = NULL;
        int len, r;

        if (p->refused && p->refused[pos]) {
                /* Its decode was refused: the engine ran on a placeholder. */
                const decode_job_t *j = &p->jobs[pos];

                r = pipeline_produce_dead(p, e, j->code ? j->code : RECORD_ERR_DECODE_FAILED, j->err.msg);
                if (r == 0)
                        p->refused[pos] = false;
                return r;
        }
        if (!engine_topk_is_finite(scores))
                return pipeline_produce_dead(p, e, RECORD_ERR_NON_FINITE_OUTPUT,
                                             "the model's output for this record is not finite (a NaN or "
                                             "infinite logit), so it has no prediction");
        h = pipeline_source_headers(p, m);
        t = pipeline_ticket_new(m, false);
        if (t) {
                t->times = p->times[pos];
                t->timed = t->timestamp_ms >= 0;
        }
        if (h && p->timing_header) {
                double stages[RECTIME_STAGES];
                char timing[128];

                rectime_stages(&p->times[pos], t_now, stages);
                if (rectime_format_header(stages, timing, sizeof(timing)) > 0)
                        rd_kafka_header_add(h, "inferd-timing", -1, timing, -1);
        }
        len = prediction_format(&json, scores, p->top_k, (double)(t_now - e->arrived_us) / 1000.0, &p->meta);
        if (!h || !t || len < 0) {
                r = -ENOMEM;
                log_error("Failed to format the prediction of offset %" PRId64 ": %s", m->offset, strerror(ENOMEM));
                goto fail;
        }
        t->part_id = e->tag;
        r = kafka_produce(p->kafka, p->output_topic, m->key, m->key_len, json, (size_t)len, h, t, &err);
        free(json);
        json = NULL;
        if (r == -ECANCELED) {
                /* Exactly-once, the transaction doomed: no output; the
                 * rewind after the abort brings the record back. */
                rd_kafka_headers_destroy(h);
                free(t);
                rd_kafka_message_destroy(m);
                e->msg = NULL;
                return 0;
        }
        if (r < 0) {
                if (r != -ENOBUFS)
                        log_error("%s", err.msg);
                goto fail;
        }
        /* h and t belong to librdkafka now. */
        rd_kafka_message_destroy(m);
        e->msg = NULL;
        p->predictions_out++;
        return 0;
fail:
        if (h)
                rd_kafka_headers_destroy(h);
        free(t);
        free(json);
        return r;
}

/* Produces the predictions of a DONE slot, from where it stopped; releases
 * the slot when all are out. -ENOBUFS: the producer's queue is full (the
 * owner retries with pipeline_produce_pending). Other errors are fatal. */
static int pipeline_produce_slot(pipeline_t *p, int slot) {
        const engine_topk_t *top = engine_slot_topk(p->engine, slot); /* (n, engine_top_k) */
        int n = batch_slot_count(p->batch, slot);
        uint64_t t_now = pipeline_now_us();

        for (int i = p->slot_produced[slot]; i < n; i++) {
                int r = pipeline_produce_one(p, slot, i, top, t_now);

                if (r < 0) {
                        p->slot_produced[slot] = i;
                        return r;
                }
        }
        p->slot_produced[slot] = 0;
        batch_release(p->batch, slot);
        return 0;
}

/* Retries every DONE slot. Returns -ENOBUFS while the producer is full. */
int pipeline_produce_pending(pipeline_t *p) {
        for (int s = 0; s < batch_depth(p->batch); s++) {
                int r;

                if (batch_slot_state(p->batch, s) != BATCH_SLOT_DONE)
                        continue;
                r = pipeline_produce_slot(p, s);
                if (r == -ENOBUFS)
                        return r;
                if (r < 0) {
                        pipeline_fail(p, 1);
                        return r;
                }
        }
        return 0;
}

int pipeline_delivery_failed(pipeline_t *p, const rd_kafka_message_t *m) {
        pipeline_ticket_t *t = m->_private;
        rd_kafka_headers_t *in = NULL;
        errbuf_t err = {};
        int r;

        if (!t || !t->dlq || m->err != RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
                return -EINVAL;
        if (kafka_transactional(p->kafka)) {
                if (m->len > 0 && m->len < p->dlq_cut_bytes)
                        p->dlq_cut_bytes = m->len;
                return -ECANCELED;
        }
        if (rd_kafka_message_headers(m, &in) != RD_KAFKA_RESP_ERR_NO_ERROR)
                in = NULL;
        if (t->dlq_cut_tries > 0) {
                /* Already cut: refused with a larger copy batched beside it
                 * (the broker refuses the whole batch), or too large even
                 * so. Once more, as it is; then it stops the daemon. */
                rd_kafka_headers_t *again = in ? rd_kafka_headers_copy(in) : NULL;

                if (t->dlq_cut_tries > 1 || !again) {
                        if (again)
                                rd_kafka_headers_destroy(again);
                        return -EMSGSIZE;
                }
                r = kafka_produce(p->kafka, p->dlq_topic, m->key, m->key_len, "", 0, again, t, &err);
                if (r < 0) {
                        rd_kafka_headers_destroy(again);
                        log_error("%s", err.msg);
                        return r;
                }
                t->dlq_cut_tries++;
                return 0;
        }
        if (m->len < p->dlq_cut_bytes)
                p->dlq_cut_bytes = m->len;
        r = pipeline_dlq_produce_cut(p, m->key, m->key_len, in, m->len, t, &err);
        if (r < 0) {
                log_error("%s", err.msg);
                return r;
        }
        /* t is librdkafka's again. */
        log_warning_f(((log_fields_t){ LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                      "The broker refused a DLQ copy of %zu bytes as too large for '%s': sent again without its "
                      "value; copies of %zu bytes or more go without it from now on",
                      m->len, p->dlq_topic, p->dlq_cut_bytes);
        return 0;
}

/* --- the engine ------------------------------------------------------------ */

/* Starts the engine on a slot of n records whose decodes are done. */
static int pipeline_engine_submit(pipeline_t *p, int slot, int n) {
        errbuf_t err = {};
        int r;

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

/* Submits a FILLING slot: closed to new records at once (it counts as in
 * flight), and handed to the engine when its decodes are done. The cap is
 * not asked (pipeline_submit_ready asks it); a forced submission is charged
 * to it. Returns 0, or -errno after ops->fail. */
static int pipeline_submit(pipeline_t *p, int slot) {
        int n;

        if (batch_in_flight(p->batch) == 0)
                p->last_progress_us = pipeline_now_us();
        n = batch_submit(p->batch, slot);
        if (p->slot_decoding && p->slot_decoding[slot] > 0) {
                p->slot_waiting[slot] = n;
                return 0;
        }
        return pipeline_engine_submit(p, slot, n);
}

/* Whether the FILLING slot can take no more records: full by count, or by
 * bytes (the next record could be float32). */
static bool pipeline_slot_full(const pipeline_t *p, int slot) {
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

int pipeline_decoded(pipeline_t *p) {
        decode_job_t *j;
        int r;

        if (!p->decode)
                return 0;
        while ((j = decode_pool_reap(p->decode))) {
                int pos = (int)(j - p->jobs), slot = pos / p->capacity;

                assert(pos >= 0 && slot < batch_depth(p->batch) && p->slot_decoding[slot] > 0);
                p->refused[pos] = j->r < 0;
                p->times[pos].decoded_us = pipeline_now_us();
                if (--p->slot_decoding[slot] == 0 && p->slot_waiting[slot] > 0) {
                        int n = p->slot_waiting[slot];

                        p->slot_waiting[slot] = 0;
                        r = pipeline_engine_submit(p, slot, n);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* (Re)arms the owner's batch-delay timer for a slot whose first record
 * came at oldest_us. */
static void pipeline_arm_delay(pipeline_t *p, uint64_t oldest_us) {
        p->ops.arm_delay(p->userdata, oldest_us + (uint64_t)p->max_delay_ms * 1000ULL);
}

/* Goes now, whatever the cap says (no more records will come to fill it,
 * or what is in flight must finish): charged to the cap, whose bucket may go
 * into debt, so the rate over time still holds. */
void pipeline_flush_filling(pipeline_t *p) {
        int slot = batch_filling(p->batch, NULL);

        if (slot < 0)
                return;
        ratelimit_charge(&p->cap, batch_slot_count(p->batch, slot), pipeline_now_us());
        p->capped = false;
        pipeline_submit(p, slot);
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
        return 0;
}

/* --- records in ----------------------------------------------------------- */

/* A record past [batching] max_record_age (age_ms old): to the DLQ as
 * expired, or with the skip action finished at once without output (the
 * owner stores its offset: ops->skipped). Returns as pipeline_take. */
static int pipeline_expire(pipeline_t *p, rd_kafka_message_t *m, int64_t age_ms) {
        char detail[192], limit[32];

        if (p->expired_skip && p->ops.skipped) {
                pipeline_ticket_t *t = pipeline_ticket_new(m, false);

                if (!t) {
                        log_error("Out of memory skipping an expired record");
                        pipeline_track(p, m);   /* never done: redelivered */
                        rd_kafka_message_destroy(m);
                        pipeline_fail(p, 1);
                        return 0;
                }
                t->part_id = pipeline_track(p, m);
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

/* Handles one consumed message. Returns 0 when it was handled (and
 * consumed), -ENOBUFS when it cannot be placed now (the caller keeps it). */
static int pipeline_take(pipeline_t *p, rd_kafka_message_t *m) {
        rd_kafka_headers_t *hdrs = NULL;
        const void *ct = NULL;
        size_t ct_len = 0;
        record_format_t fmt;
        const char *code = NULL;
        errbuf_t err = {};
        batch_entry_t *e;
        void *dst;
        int64_t age_ms;
        int slot, idx, full, r;

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
        /* Back-pressure: no room in the slots, or in the decode queue, or
         * the FILLING slot is full and waits for the cap. */
        slot = batch_filling(p->batch, NULL);
        if (batch_is_busy(p->batch) || (record_is_encoded(fmt) && decode_pool_full(p->decode)) ||
            (slot >= 0 && pipeline_slot_full(p, slot)))
                return -ENOBUFS;

        full = batch_add(p->batch, m, pipeline_now_us(), &slot, &idx);
        assert(full >= 0);
        e = batch_slot_entry(p->batch, slot, idx);
        e->tag = pipeline_track(p, m);
        p->times[pipeline_pos(p, slot, idx)] = (rectime_t){
                .queue_s = rectime_queue_s(rd_kafka_message_timestamp(m, NULL), rectime_now_s()),
                .taken_us = e->arrived_us,
                .decoded_us = record_is_encoded(fmt) ? 0 : e->arrived_us,
        };
        if (record_is_encoded(fmt)) {
                /* A decode thread writes the slot's record, placed as RGB8;
                 * the message (and so its payload) stays in the slot until
                 * it is produced. */
                decode_job_t *j = &p->jobs[pipeline_pos(p, slot, idx)];

                dst = engine_slot_place(p->engine, slot, idx, RECORD_RGB8);
                assert(dst);
                *j = (decode_job_t){ .data = m->payload, .len = m->len, .format = fmt, .out = dst };
                p->refused[pipeline_pos(p, slot, idx)] = false;
                r = decode_pool_submit(p->decode, j);
                assert(r == 0);         /* not full: checked above, on this thread */
                p->slot_decoding[slot]++;
        } else {
                /* The record's bytes go straight into the slot's (pinned) input,
                 * packed by format. It fits: a slot is submitted as soon as it has
                 * no room for a record of either format (below). */
                dst = engine_slot_place(p->engine, slot, idx, fmt);
                assert(dst && m->len == pack_row_bytes(fmt));
                memcpy(dst, m->payload, m->len);
        }
        p->records_in++;
        /* Full by count, or by bytes (the next record could be float32). */
        if (full || !engine_slot_has_room(p->engine, slot))
                pipeline_submit_ready(p, slot);
        else if (idx == 0)
                pipeline_arm_delay(p, e->arrived_us);
        return 0;
}

/* Whether the cap stops the intake now: the FILLING slot is full and waits
 * for its tokens. */
static bool pipeline_cap_stops_intake(const pipeline_t *p) {
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
static bool pipeline_holding(const pipeline_t *p) {
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

/* --- life cycle, live settings, statistics ------------------------------------- */

int pipeline_new(pipeline_t **ret, const pipeline_config_t *cfg, const pipeline_ops_t *ops, void *userdata) {
        pipeline_t *p;
        int r;

        assert(ret && cfg && ops && ops->fail && ops->arm_delay && ops->pump_later && ops->arm_hold);
        assert(cfg->engine && cfg->kafka && cfg->offsets && cfg->output_topic && cfg->dlq_topic);
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->ops = *ops;
        p->userdata = userdata;
        p->engine = cfg->engine;
        p->kafka = cfg->kafka;
        p->offsets = cfg->offsets;
        p->output_topic = cfg->output_topic;
        p->dlq_topic = cfg->dlq_topic;
        p->meta = cfg->meta;
        p->engine_top_k = engine_plan_of(cfg->engine)->top_k;
        p->top_k = cfg->top_k < p->engine_top_k ? cfg->top_k : p->engine_top_k;
        p->max_delay_ms = cfg->max_delay_ms;
        p->max_record_age_ms = cfg->max_record_age_ms;
        p->expired_skip = cfg->expired_skip;
        p->trace_headers = cfg->trace_headers;
        p->timing_header = cfg->timing_header;
        p->last_progress_us = pipeline_now_us();
        p->dlq_cut_bytes = SIZE_MAX;
        for (size_t i = 0; i < sizeof(pipeline_dlq_known) / sizeof(pipeline_dlq_known[0]); i++)
                p->dlq_codes[p->n_dlq_codes++] = (metrics_count_t){ .label = pipeline_dlq_known[i] };
        p->n_dlq_known = p->n_dlq_codes;
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
        if (!p->times) {
                r = -ENOMEM;
                goto fail;
        }
        if (cfg->decode) {
                size_t positions = (size_t)engine_slots(cfg->engine) * (size_t)p->capacity;

                p->decode = cfg->decode;
                p->jobs = calloc(positions, sizeof(*p->jobs));
                p->refused = calloc(positions, sizeof(*p->refused));
                p->slot_decoding = calloc((size_t)engine_slots(cfg->engine), sizeof(int));
                p->slot_waiting = calloc((size_t)engine_slots(cfg->engine), sizeof(int));
                if (!p->jobs || !p->refused || !p->slot_decoding || !p->slot_waiting) {
                        r = -ENOMEM;
                        goto fail;
                }
        }
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
        if (p->batch)
                for (int s = 0; s < batch_depth(p->batch); s++) {
                        if (batch_slot_state(p->batch, s) == BATCH_SLOT_FREE)
                                continue;
                        for (int i = 0; i < batch_slot_count(p->batch, s); i++) {
                                batch_entry_t *e = batch_slot_entry(p->batch, s, i);

                                if (e->msg)
                                        rd_kafka_message_destroy(e->msg);
                                e->msg = NULL;
                        }
                }
        batch_free(p->batch);
        free(p->slot_produced);
        free(p->slot_submitted_us);
        free(p->times);
        for (size_t i = p->n_dlq_known; i < p->n_dlq_codes; i++)
                free((char *)p->dlq_codes[i].label);
        free(p->jobs);
        free(p->refused);
        free(p->slot_decoding);
        free(p->slot_waiting);
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
        if (batch_records_held(p->batch) > 0 || batch_in_flight(p->batch) > 0)
                return -EBUSY;
        p->meta.model_id = model_id;
        p->meta.precision = precision;
        pipeline_set_max_batch(p, max_batch);
        /* A model of fewer classes may have lowered the engine's top-k. */
        p->engine_top_k = engine_plan_of(p->engine)->top_k;
        if (p->top_k > p->engine_top_k)
                p->top_k = p->engine_top_k;
        return 0;
}

void pipeline_set_labels(pipeline_t *p, const labels_t *labels) {
        p->meta.labels = labels;
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
                .dlq_values_omitted = p->dlq_values_omitted,
                .batches = p->batches,
                .batch_records = p->batch_records,
                .dlq_codes = p->dlq_codes,
                .n_dlq_codes = p->n_dlq_codes,
                .batch_size = &p->batch_size,
                .batch_seconds = &p->batch_seconds,
                .stage_seconds = p->stage_seconds,
                .slots = batch_depth(p->batch),
                .slots_in_flight = batch_in_flight(p->batch),
                .records_in_slots = batch_records_held(p->batch),
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
        };
}

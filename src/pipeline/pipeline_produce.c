/* pipeline_produce: the pipeline's outputs. Each record of a completed
 * slot becomes a prediction to the output topic, or a copy to the DLQ (its
 * output not finite); a record refused as it is taken, or when its decode
 * ends, becomes a DLQ copy at once. Here are their headers (the source, the copied
 * trace context, inferd-timing), their tickets (pipeline.h), the offsets
 * they are tracked under, and a DLQ copy over the producer's limit,
 * produced without its value (dlq.h; the broker's refusals are
 * pipeline_dlq.c's).
 *
 * Not here: when a slot is produced (pipeline.c reaps it), the delivery
 * reports and storing offsets (the daemon). */
#include "pipeline/pipeline_priv.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/dlq.h"
#include "pipeline/tracectx.h"
#include "config/log.h"
#include "core/record.h"

void pipeline_count_dlq(pipeline_t *p, const char *code) {
        p->dlq_out++;
        /* A code beyond the table's room (or out of memory) goes uncounted by
         * name; dlq_out has it. */
        (void)metrics_count_add(p->dlq_codes, &p->n_dlq_codes, PIPELINE_DLQ_CODES_MAX, code);
}

/* The headers copied from an input record to its prediction, bounded:
 * correlation-id always, cut to PIPELINE_COPIED_MAX_BYTES; with [service]
 * trace_headers the W3C trace context, checked and cut as tracectx.h says
 * (a tracestate without a valid traceparent is not propagated either: the
 * spec parses it only after one). Each cut adds a header
 * inferd-header-cut: <name>=<bytes it had>, and is counted by name
 * (inferd_copied_headers_cut_total). A DLQ copy keeps its record's headers
 * as they were (dlq.h cuts them only when the copy is too large). */
const char *const pipeline_copied_headers[PIPELINE_N_COPIED] = { "correlation-id", "traceparent", "tracestate" };

static unsigned pipeline_header_cut(rd_kafka_headers_t *h, int which, size_t had_bytes) {
        char note[64];

        snprintf(note, sizeof(note), "%s=%zu", pipeline_copied_headers[which], had_bytes);
        rd_kafka_header_add(h, PIPELINE_HEADER_CUT, -1, note, -1);
        return 1u << which;
}

/* Adds s's copied headers to h. Returns the cut ones, a bit each
 * (1 << PIPELINE_COPIED_*), counted by pipeline_count_cuts once the
 * prediction is out. */
static unsigned pipeline_copy_headers(const pipeline_t *p, const pipeline_source_t *s, rd_kafka_headers_t *h) {
        char state[TRACECTX_STATE_MAX_CHARS + 1];
        bool parent_ok = false, cut = false;
        unsigned cuts = 0;
        const void *v;
        size_t len, n;

        if (!s->headers)
                return 0;
        if (rd_kafka_header_get_last(s->headers, "correlation-id", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                rd_kafka_header_add(h, "correlation-id", -1, v,
                                    (ssize_t)(len > PIPELINE_COPIED_MAX_BYTES ? PIPELINE_COPIED_MAX_BYTES : len));
                if (len > PIPELINE_COPIED_MAX_BYTES)
                        cuts |= pipeline_header_cut(h, PIPELINE_COPIED_CORRELATION_ID, len);
        }
        if (!p->trace_headers)
                return cuts;
        if (rd_kafka_header_get_last(s->headers, "traceparent", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                parent_ok = len <= PIPELINE_COPIED_MAX_BYTES && tracectx_parent_valid(v, len);
                if (parent_ok)
                        rd_kafka_header_add(h, "traceparent", -1, v, (ssize_t)len);
                else
                        cuts |= pipeline_header_cut(h, PIPELINE_COPIED_TRACEPARENT, len);
        }
        if (rd_kafka_header_get_last(s->headers, "tracestate", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                n = parent_ok ? tracectx_state_cut(v, len, state, &cut) : 0;
                if (n > 0)
                        rd_kafka_header_add(h, "tracestate", -1, state, (ssize_t)n);
                if (cut || (!parent_ok && len > 0))
                        cuts |= pipeline_header_cut(h, PIPELINE_COPIED_TRACESTATE, len);
        }
        return cuts;
}

static void pipeline_count_cuts(pipeline_t *p, unsigned cuts) {
        for (int i = 0; i < PIPELINE_N_COPIED; i++)
                if (cuts & (1u << i))
                        p->headers_cut[i].n++;
}

/* A new header list saying where s came from (inferd-source-*). */
static rd_kafka_headers_t *pipeline_source_headers(const pipeline_source_t *s) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(8);
        char num[32];

        if (!h)
                return NULL;
        rd_kafka_header_add(h, "inferd-source-topic", -1, s->topic, -1);
        snprintf(num, sizeof(num), "%" PRId32, s->partition);
        rd_kafka_header_add(h, "inferd-source-partition", -1, num, -1);
        snprintf(num, sizeof(num), "%" PRId64, s->offset);
        rd_kafka_header_add(h, "inferd-source-offset", -1, num, -1);
        return h;
}

pipeline_ticket_t *pipeline_ticket_new(const pipeline_source_t *s, bool dlq) {
        pipeline_ticket_t *t = calloc(1, sizeof(*t));

        if (t) {
                t->offset = s->offset;
                t->partition = s->partition;
                t->dlq = dlq;
                t->timestamp_ms = s->timestamp_ms;
        }
        return t;
}

/* Starts tracking s's offset. Returns the partition id, or 0 when it cannot
 * be tracked (its delivery then stores nothing). */
int pipeline_track(pipeline_t *p, const pipeline_source_t *s) {
        int id = batch_offsets_track(p->offsets, s->topic, s->partition, s->offset);

        if (id > 0)
                return id;
        log_warning_f(((log_fields_t){ LOG_TOPIC(s->topic), LOG_PARTITION(s->partition), LOG_OFFSET(s->offset) }),
                      "Record not tracked for commit (%s): it will be processed but its offset not stored",
                      strerror(-id));
        return 0;
}

/* part_id of pipeline_dead_letter: the record is not tracked yet. */
#define PIPELINE_TRACK_NOW (-1)

/* Whether the output of s, tracked under part_id, is to be given up: its
 * partition was revoked or rewound since the record was taken (a revoke
 * that gave up on it, an aborted transaction's rewind). Its next reader
 * (this instance after the rewind, or the partition's new owner) takes it
 * again from the committed offset, so an output now would be a second one:
 * under exactly-once a duplicate in the next transaction (issue 36). Said. */
static bool pipeline_output_stale(pipeline_t *p, const pipeline_source_t *s, int part_id) {
        if (part_id <= 0 || batch_offsets_current(p->offsets, part_id))
                return false;
        p->outputs_given_up++;
        log_info_f(((log_fields_t){ LOG_TOPIC(s->topic), LOG_PARTITION(s->partition), LOG_OFFSET(s->offset) }),
                   "Output given up: the record's partition was revoked or rewound since it was taken, and its "
                   "next reader takes it again");
        return true;
}

/* Sends refused record s to the DLQ with its key, value and headers, plus
 * inferd-error and inferd-error-detail. part_id is the offset store's id
 * when the record was already tracked (a batched record refused after the
 * engine ran), or PIPELINE_TRACK_NOW. s stays the caller's. Returns 0 when
 * it was sent, -ECANCELED (exactly-once, the transaction doomed: nothing
 * sent), -ENOBUFS (the producer is full) or another -errno. */
static int pipeline_dead_letter(pipeline_t *p, const pipeline_source_t *s, const char *code, const char *detail,
                                int part_id) {
        rd_kafka_headers_t *h;
        pipeline_ticket_t *t;
        errbuf_t err = {};
        bool omitted = false;
        int r;

        if (pipeline_output_stale(p, s, part_id))
                return 0;
        h = s->headers ? rd_kafka_headers_copy(s->headers) : pipeline_source_headers(s);
        t = pipeline_ticket_new(s, true);
        if (!h || !t) {
                r = -ENOMEM;
                goto fail;
        }
        if (s->headers) {
                /* Copied the original headers: add where it came from. */
                rd_kafka_headers_t *src = pipeline_source_headers(s);
                size_t i = 0;
                const char *name;
                const void *v;
                size_t len;

                while (src && rd_kafka_header_get_all(src, i++, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                        rd_kafka_header_add(h, name, -1, v, (ssize_t)len);
                if (src)
                        rd_kafka_headers_destroy(src);
        }
        rd_kafka_header_add(h, "inferd-error", -1, code, -1);
        rd_kafka_header_add(h, "inferd-error-detail", -1, detail, -1);
        if (s->len >= pipeline_dlq_cut_bytes(p))
                r = -EMSGSIZE;  /* the broker refused one this large, alone */
        else if ((r = kafka_produce(p->kafka, p->dlq_topic, s->key, s->key_len, s->value, s->len, h, t, &err)) == 0)
                pipeline_dlq_sent(p, t);
        if (r == -EMSGSIZE) {
                /* Too large whole: without the value (dlq.h). h stays ours. */
                r = pipeline_dlq_produce_cut(p, s->key, s->key_len, h, s->len, t, &err);
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
        t->part_id = part_id == PIPELINE_TRACK_NOW ? pipeline_track(p, s) : part_id;
        pipeline_count_dlq(p, code);
        log_warning_f(((log_fields_t){ LOG_TOPIC(s->topic), LOG_PARTITION(s->partition), LOG_OFFSET(s->offset),
                                       LOG_ERROR_CODE(code) }),
                      "Record refused, sent to '%s'%s: %s", p->dlq_topic,
                      omitted ? " without its value (too large for the DLQ)" : "", detail);
        return 0;
fail:
        if (h)
                rd_kafka_headers_destroy(h);
        free(t);
        return r;
}

/* The end of taking m, which went to its output (s: a view of m) with r:
 * pipeline_take's returns. */
static int pipeline_taken(pipeline_t *p, rd_kafka_message_t *m, const pipeline_source_t *s, int r) {
        if (r == -ENOBUFS)
                return r;
        if (r < 0 && r != -ECANCELED) {
                /* Tracked and never done: no later offset of its
                 * partition is stored, so it is redelivered. */
                pipeline_track(p, s);
                rd_kafka_message_destroy(m);
                pipeline_fail(p, 1);
                return 0;
        }
        /* -ECANCELED: exactly-once, the transaction doomed: not tracked,
         * so it comes again after the rewind. */
        rd_kafka_message_destroy(m);
        if (r == 0)
                p->records_in++;
        return 0;
}

/* A record refused as it is taken (its type, or its age): its DLQ copy, and
 * the same returns as pipeline_take's. */
int pipeline_refuse_taken(pipeline_t *p, rd_kafka_message_t *m, const char *code, const char *detail) {
        pipeline_source_t s;

        pipeline_source_of(&s, m);
        return pipeline_taken(p, m, &s, pipeline_dead_letter(p, &s, code, detail, PIPELINE_TRACK_NOW));
}

int pipeline_produce_dead(pipeline_t *p, rd_kafka_message_t **mp, int tag, const char *code, const char *detail) {
        pipeline_source_t s;
        int r;

        pipeline_source_of(&s, *mp);
        r = pipeline_dead_letter(p, &s, code, detail, tag);
        if (r == 0 || r == -ECANCELED) {
                rd_kafka_message_destroy(*mp);
                *mp = NULL;
                r = 0;
        }
        return r;
}

/* One output being made: its value, and the buffers it may point into (on
 * the loop's stack: an embedding's JSON fits line without an allocation). */
typedef struct pipeline_out {
        char line[PIPELINE_JSON_LINE + PREDICTION_EMBEDDING_TEXT_MAX_BYTES];    /* the JSON, when it fits */
        char *big;                      /* malloc'd: the JSON when it is longer */
        float embedding[PREDICTION_EMBEDDING_DIM_MAX];  /* prepared (normalised) */
        unsigned char f32le[PREDICTION_EMBEDDING_DIM_MAX * sizeof(float)];
        int dim;                        /* 0: no embedding */
        const void *value;
        size_t len;
} pipeline_out_t;

/* A record's embedding (raw: the engine's, engine_embedding_dim fp32),
 * prepared for output into o (normalised as [output] says). Returns its
 * length, 0 when the output has none, or -EDOM when a value of it is not
 * finite. */
static int pipeline_embedding_of(pipeline_t *p, const float *raw, pipeline_out_t *o) {
        int dim = engine_embedding_dim(p->engine);

        o->dim = 0;
        if (!prediction_has_embedding(&p->meta.output))
                return 0;
        /* The engine was opened for embeddings whenever the output has them. */
        assert(raw && dim > 0 && dim <= PREDICTION_EMBEDDING_DIM_MAX);
        if (prediction_embedding_prepare(&p->meta.output, raw, dim, o->embedding) < 0)
                return -EDOM;
        o->dim = dim;
        return dim;
}

/* A prediction's value into o (scores: its top-k; o's embedding when it
 * has one): its JSON in o->line, or in a malloc'd o->big when it is
 * longer; with f32le, the vector, the JSON going to a header of h. An
 * embedding's headers go to h. Returns 0 or -ENOMEM. The encoder is made
 * again after the meta changed (pipeline_meta_changed). */
static int pipeline_prediction_value(pipeline_t *p, pipeline_out_t *o, const engine_topk_t *scores,
                                     double latency_ms, rd_kafka_headers_t *h) {
        prediction_row_t row = { .top = scores, .k = p->top_k, .embedding = o->embedding, .dim = o->dim,
                                 .latency_ms = latency_ms };
        char num[16];
        int n;

        o->big = NULL;
        if (!p->encoder && prediction_encoder_new(&p->encoder, &p->meta) < 0)
                return -ENOMEM;
        n = prediction_encode_row(p->encoder, o->line, sizeof(o->line), &row);
        if (n >= 0 && (size_t)n >= sizeof(o->line)) {
                if (!(o->big = malloc((size_t)n + 1)))
                        return -ENOMEM;
                n = prediction_encode_row(p->encoder, o->big, (size_t)n + 1, &row);
        }
        if (n < 0)
                return -ENOMEM;
        o->value = o->big ? o->big : o->line;
        o->len = (size_t)n;
        if (o->dim == 0)
                return 0;
        snprintf(num, sizeof(num), "%d", o->dim);
        rd_kafka_header_add(h, PREDICTION_HEADER_DIM, -1, num, -1);
        rd_kafka_header_add(h, PREDICTION_HEADER_MODEL, -1, p->meta.model_id ? p->meta.model_id : "", -1);
        if (p->meta.output.format == PREDICTION_EMBEDDING_F32LE) {
                rd_kafka_header_add(h, PREDICTION_HEADER_JSON, -1, o->value, (ssize_t)o->len);
                prediction_embedding_f32le(o->embedding, o->dim, o->f32le);
                o->value = o->f32le;
                o->len = (size_t)o->dim * sizeof(float);
        }
        return 0;
}

/* The prediction of src (tracked under tag) could not be produced because
 * of its size (why: kafka_produce's sentence, with the sizes): the record
 * goes to the DLQ as output-too-large instead. 0 when it has left its slot
 * position (sent, or exactly-once and the transaction doomed: the rewind
 * brings it back), else pipeline_dead_letter's -errno (it stays). */
static int pipeline_prediction_too_large(pipeline_t *p, pipeline_source_t *src, int tag, const errbuf_t *why) {
        const char *sizes = strstr(why->msg, ": a record of ");
        char detail[800];
        int r;

        snprintf(detail, sizeof(detail), "its prediction could not be produced to '%.200s': %s", p->output_topic,
                 sizes ? sizes + 2 : why->msg);
        r = pipeline_dead_letter(p, src, RECORD_ERR_OUTPUT_TOO_LARGE, detail, tag);
        return r == -ECANCELED ? 0 : r;
}

/* The prediction of src: from scores (engine_top_k classes) and raw (the
 * engine's embedding, NULL without one), or its DLQ copy when they are not
 * finite. tag: its offset's id, or PIPELINE_TRACK_NOW (a cache hit: tracked
 * once its output is handed over). times: its stages up to t_now, when the
 * results are produced. A hit has the header inferd-cache: hit and stays
 * out of the stage histograms (it spent nothing in decode or the engine).
 * Returns 0 when the record is done with (produced, sent to the DLQ, or
 * exactly-once with the transaction doomed: the rewind brings it back; the
 * caller releases src), with *produced set for a prediction handed over;
 * -ENOBUFS when the producer's queue is full (retry), other -errno
 * (fatal). */
static int pipeline_produce_prediction(pipeline_t *p, pipeline_source_t *src, int tag, const rectime_t *times,
                                       const engine_topk_t *scores, const float *raw, bool hit, uint64_t t_now,
                                       bool *produced) {
        rd_kafka_headers_t *h;
        pipeline_ticket_t *t;
        errbuf_t err = {};
        pipeline_out_t o;
        unsigned cuts = 0;
        size_t header_bytes;
        int r;

        *produced = false;
        if (!engine_topk_is_finite(scores) || pipeline_embedding_of(p, raw, &o) < 0) {
                r = pipeline_dead_letter(p, src, RECORD_ERR_NON_FINITE_OUTPUT,
                                         "the model's output for this record is not finite (a NaN or infinite "
                                         "logit or embedding value), so it has no prediction",
                                         tag);
                /* Sent, or exactly-once and the transaction doomed: the
                 * rewind after the abort brings it back. */
                return r == -ECANCELED ? 0 : r;
        }
        h = pipeline_source_headers(src);
        if (h)
                cuts = pipeline_copy_headers(p, src, h);
        if (h && hit)
                rd_kafka_header_add(h, PIPELINE_HEADER_CACHE, -1, "hit", -1);
        t = pipeline_ticket_new(src, false);
        if (t) {
                t->times = *times;
                t->timed = t->timestamp_ms >= 0 && !hit;
        }
        if (h && p->timing_header) {
                double stages[RECTIME_STAGES];
                char timing[128];

                rectime_stages(times, t_now, stages);
                if (rectime_format_header(stages, timing, sizeof(timing)) > 0)
                        rd_kafka_header_add(h, "inferd-timing", -1, timing, -1);
        }
        o.big = NULL;
        if (!h || !t || pipeline_prediction_value(p, &o, scores, (double)(t_now - times->taken_us) / 1000.0, h) < 0) {
                r = -ENOMEM;
                log_error("Failed to format the prediction of offset %" PRId64 ": %s", src->offset, strerror(ENOMEM));
                goto fail;
        }
        header_bytes = kafka_headers_bytes(h);
        if (src->key_len + o.len + header_bytes >= pipeline_out_cut_bytes(p))
                /* Exactly-once: the broker refused a prediction this large. */
                r = errbuf_set(&err, -EMSGSIZE, "Failed to produce to '%s': a record of %zu bytes (key %zu, value %zu, "
                               "headers %zu) is at least as large as one the broker refused (%zu)", p->output_topic,
                               src->key_len + o.len + header_bytes, src->key_len, o.len, header_bytes,
                               p->out_cut_bytes);
        else
                r = kafka_produce(p->kafka, p->output_topic, src->key, src->key_len, o.value, o.len, h, t, &err);
        free(o.big);
        o.big = NULL;
        if (r == -ECANCELED) {
                /* Exactly-once, the transaction doomed: no output; the
                 * rewind after the abort brings the record back. */
                rd_kafka_headers_destroy(h);
                free(t);
                return 0;
        }
        if (r == -EMSGSIZE) {
                /* Too large to produce, however it came to be (labels,
                 * top_k, a small message.max.bytes): the record goes to the
                 * DLQ and its partition goes on (issue 41, item 4). */
                rd_kafka_headers_destroy(h);
                h = NULL;
                free(t);
                t = NULL;
                r = pipeline_prediction_too_large(p, src, tag, &err);
                if (r < 0)
                        return r;       /* it stays */
                pipeline_count_cuts(p, cuts);
                return 0;
        }
        if (r < 0) {
                if (r != -ENOBUFS)
                        log_error("%s", err.msg);
                goto fail;
        }
        /* h and t belong to librdkafka now; its delivery report comes
         * through this thread's poll, after this. */
        t->part_id = tag == PIPELINE_TRACK_NOW ? pipeline_track(p, src) : tag;
        pipeline_count_cuts(p, cuts);
        p->predictions_out++;
        *produced = true;
        return 0;
fail:
        if (h)
                rd_kafka_headers_destroy(h);
        free(t);
        free(o.big);
        return r;
}

/* Produces position i of a DONE slot (top: the slot's results, (n,
 * engine_top_k)); a prediction made is kept in the result cache under the
 * record's key. Returns 0 when the record has left the slot, -ENOBUFS when
 * the producer's queue is full (it stays, to be retried), other -errno
 * (fatal; it stays). */
static int pipeline_produce_one(pipeline_t *p, int slot, int i, const engine_topk_t *top, uint64_t t_now) {
        batch_entry_t *e = batch_slot_entry(p->batch, slot, i);
        const engine_topk_t *scores = top + (size_t)i * p->engine_top_k;
        const float *all = engine_slot_embedding(p->engine, slot);     /* (n, dim); NULL: none */
        const float *raw = all ? all + (size_t)i * engine_embedding_dim(p->engine) : NULL;
        size_t pos = pipeline_pos(p, slot, i);
        pipeline_source_t *src = &p->sources[pos];
        bool produced;
        int r;

        if (pipeline_output_stale(p, src, e->tag)) {
                pipeline_source_release(src);
                return 0;
        }
        r = pipeline_produce_prediction(p, src, e->tag, &p->times[pos], scores, raw, false, t_now, &produced);
        if (r < 0)
                return r;       /* it stays */
        if (produced)
                pipeline_cache_put(p, pos, scores, raw);
        pipeline_source_release(src);
        return 0;
}

int pipeline_produce_hit(pipeline_t *p, rd_kafka_message_t *m, const engine_topk_t *scores, const float *raw) {
        uint64_t now = pipeline_now_us();
        rectime_t times = {
                .queue_s = rectime_queue_s(rd_kafka_message_timestamp(m, NULL), rectime_now_s()),
                .taken_us = now, .decoded_us = now, .submitted_us = now, .done_us = now,
        };
        pipeline_source_t s;
        bool produced;
        int r;

        pipeline_source_of(&s, m);
        r = pipeline_produce_prediction(p, &s, PIPELINE_TRACK_NOW, &times, scores, raw, true, now, &produced);
        if (r == 0)
                p->cache_hits++;
        return pipeline_taken(p, m, &s, r);
}

/* Produces the predictions of a DONE slot, from where it stopped; releases
 * the slot when all are out. -ENOBUFS: the producer's queue is full (the
 * owner retries with pipeline_produce_pending). Other errors are fatal. */
int pipeline_produce_slot(pipeline_t *p, int slot) {
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
        /* DLQ copies waiting to be retried alone (pipeline_dlq.c), refused
         * decodes' DLQ copies that found the producer full, and decoded
         * records for the slots released above. */
        if (pipeline_dlq_retry_pump(p) < 0)
                return -EIO;
        return pipeline_staging_place(p);
}

size_t pipeline_out_cut_bytes(pipeline_t *p) {
        if (p->out_cut_bytes != SIZE_MAX && pipeline_now_us() - p->out_cut_since_us >= p->dlq_cut_ttl_us) {
                log_info("Predictions of %zu bytes or more are tried again: the broker's refusal that set that size "
                         "is an hour old", p->out_cut_bytes);
                p->out_cut_bytes = SIZE_MAX;
        }
        return p->out_cut_bytes;
}

int pipeline_prediction_refused(pipeline_t *p, const rd_kafka_message_t *m) {
        pipeline_ticket_t *t = m->_private;
        rd_kafka_headers_t *in = NULL, *h;
        size_t header_bytes, total;
        char detail[640];
        errbuf_t err = {};
        int r;

        if (rd_kafka_message_headers(m, &in) != RD_KAFKA_RESP_ERR_NO_ERROR)
                in = NULL;
        header_bytes = kafka_headers_bytes(in);
        total = m->key_len + m->len + header_bytes;
        if (kafka_transactional(p->kafka)) {
                /* No retry inside a doomed transaction: the records come
                 * again after the abort, and a prediction as large as the
                 * largest refused in this run of refusals (one batch's)
                 * sends its record to the DLQ then, with its value. */
                if (!p->out_refusal_run) {
                        p->out_refusal_run = true;
                        p->out_run_base_bytes = p->out_cut_bytes;
                        p->out_run_max_bytes = 0;
                }
                if (total > p->out_run_max_bytes)
                        p->out_run_max_bytes = total;
                if (p->out_run_max_bytes <= p->out_run_base_bytes) {
                        p->out_cut_bytes = p->out_run_max_bytes;
                        p->out_cut_since_us = pipeline_now_us();
                }
                return -ECANCELED;
        }
        /* At least once: the record's value is gone from the pipeline; its
         * DLQ copy says where it is. */
        h = in ? rd_kafka_headers_copy(in) : rd_kafka_headers_new(4);
        if (!h)
                return -ENOMEM;
        snprintf(detail, sizeof(detail), "the broker refused its prediction, a record of %zu bytes (key %zu, value %zu, "
                 "headers %zu), as too large for '%.200s' (its max.message.bytes); this copy has no value: the record "
                 "is in the input topic at its inferd-source-* offset", total, m->key_len, m->len, header_bytes,
                 p->output_topic);
        rd_kafka_header_add(h, "inferd-error", -1, RECORD_ERR_OUTPUT_TOO_LARGE, -1);
        rd_kafka_header_add(h, "inferd-error-detail", -1, detail, -1);
        t->dlq = true;
        t->dlq_cut_tries = 1;   /* already without a value: refused again, it is tried once more (pipeline_dlq.c) */
        r = kafka_produce(p->kafka, p->dlq_topic, m->key, m->key_len, "", 0, h, t, &err);
        if (r < 0) {
                t->dlq = false;
                rd_kafka_headers_destroy(h);
                log_error("%s", err.msg);
                return r;
        }
        /* h and t are librdkafka's now. */
        pipeline_dlq_sent(p, t);
        pipeline_count_dlq(p, RECORD_ERR_OUTPUT_TOO_LARGE);
        log_warning_f(((log_fields_t){ LOG_PARTITION(t->partition), LOG_OFFSET(t->offset),
                                       LOG_ERROR_CODE(RECORD_ERR_OUTPUT_TOO_LARGE) }),
                      "Record sent to '%s' without its value: %s", p->dlq_topic, detail);
        return 0;
}

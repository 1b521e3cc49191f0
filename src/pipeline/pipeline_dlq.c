/* pipeline_dlq: DLQ copies that the broker refuses as too large for the
 * DLQ topic (its max.message.bytes), and the size the pipeline learns from
 * the refusals (dlq.h says what a cut copy keeps).
 *
 * The broker refuses a whole batch when it is too large: every copy in it
 * gets the refusal, the small ones too (issue 41, item 5: each lowered the
 * size from which values are left out to its own, for good). So only a
 * copy refused alone (no other DLQ copy in flight when it was sent, and
 * none sent after it) tells its size: it is cut, and copies of that size
 * or more go without their value at once, for PIPELINE_DLQ_CUT_TTL_US or
 * until a copy that large is delivered whole. Each other refused copy is
 * retried whole, one at a time: a queue, whose head is sent once no other
 * DLQ copy is in flight (or it has waited PIPELINE_DLQ_SOLO_WAIT_US), until
 * it is delivered or refused alone; refused PIPELINE_DLQ_SOLO_TRIES times
 * beside others, it is cut without lowering the size.
 *
 * Exactly-once cannot retry: a refusal dooms the open transaction, and its
 * records are read again after the abort. The size then comes from a copy
 * refused alone, or else from the largest copy of the run of refusals (the
 * reports of one batch come together, with no success between them): the
 * likely culprit, cut on the next round, while the copies beside it keep
 * their values.
 *
 * Not here: a record's first DLQ copy (pipeline_produce.c); the delivery
 * reports' other outcomes (the daemon). */
#include "pipeline/pipeline_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "pipeline/dlq.h"

void pipeline_dlq_sent(pipeline_t *p, pipeline_ticket_t *t) {
        t->dlq_seq = ++p->dlq_sent_seq;
        t->dlq_alone = p->dlq_in_flight == 0;
        p->dlq_in_flight++;
}

/* t's copy has a delivery report: it has left librdkafka. */
static void pipeline_dlq_reported(pipeline_t *p, const pipeline_ticket_t *t) {
        if (p->dlq_in_flight > 0)
                p->dlq_in_flight--;
        if (p->dlq_solo == t)
                p->dlq_solo = NULL;
}

/* Whether t's copy went alone: nothing in flight when it was sent, and no
 * DLQ copy sent after it (so none could share its batch). */
static bool pipeline_dlq_was_alone(const pipeline_t *p, const pipeline_ticket_t *t) {
        return t->dlq_alone && t->dlq_seq == p->dlq_sent_seq;
}

size_t pipeline_dlq_cut_bytes(pipeline_t *p) {
        uint64_t now = pipeline_now_us();

        if (p->dlq_cut_bytes != SIZE_MAX && now - p->dlq_cut_since_us >= p->dlq_cut_ttl_us) {
                log_info("DLQ copies of %zu bytes or more are tried whole again: the broker's refusal that "
                         "set that size is %" PRIu64 " s old", p->dlq_cut_bytes,
                         (now - p->dlq_cut_since_us) / 1000000);
                p->dlq_cut_bytes = SIZE_MAX;
        }
        return p->dlq_cut_bytes;
}

/* Copies of bytes or more go without their value from now on. */
static void pipeline_dlq_lower(pipeline_t *p, size_t bytes) {
        if (bytes == 0 || bytes > p->dlq_cut_bytes)
                return;
        p->dlq_cut_bytes = bytes;
        p->dlq_cut_since_us = pipeline_now_us();
}

int pipeline_dlq_produce_cut(pipeline_t *p, const void *key, size_t key_len, const rd_kafka_headers_t *full,
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
        pipeline_dlq_sent(p, t);
        t->dlq_cut_tries = 1;
        p->dlq_values_omitted++;
        return 0;
}

static void *pipeline_memdup(const void *v, size_t len) {
        void *c = len ? malloc(len) : NULL;

        if (c)
                memcpy(c, v, len);
        return c;
}

static void pipeline_dlq_retry_clear(pipeline_dlq_retry_t *e) {
        free(e->key);
        free(e->value);
        if (e->headers)
                rd_kafka_headers_destroy(e->headers);
        *e = (pipeline_dlq_retry_t){};
}

/* Queues refused copy m (ticket t, which the queue owns now) to be retried
 * alone. 0 or -ENOMEM (t stays the caller's). */
static int pipeline_dlq_retry_add(pipeline_t *p, const rd_kafka_message_t *m, pipeline_ticket_t *t) {
        rd_kafka_headers_t *in = NULL;
        pipeline_dlq_retry_t e = {
                .t = t,
                .key = pipeline_memdup(m->key, m->key_len),
                .key_len = m->key_len,
                .value = pipeline_memdup(m->payload, m->len),
                .len = m->len,
                .queued_us = pipeline_now_us(),
        };

        if (rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR)
                e.headers = rd_kafka_headers_copy(in);
        else
                e.headers = rd_kafka_headers_new(0);
        if (p->n_dlq_retry == p->dlq_retry_cap) {
                size_t cap = p->dlq_retry_cap ? 2 * p->dlq_retry_cap : 8;
                pipeline_dlq_retry_t *a = realloc(p->dlq_retry, cap * sizeof(*a));

                if (a) {
                        p->dlq_retry = a;
                        p->dlq_retry_cap = cap;
                }
        }
        if ((m->key_len && !e.key) || (m->len && !e.value) || !e.headers || p->n_dlq_retry == p->dlq_retry_cap) {
                e.t = NULL;
                pipeline_dlq_retry_clear(&e);
                return -ENOMEM;
        }
        p->dlq_retry[p->n_dlq_retry++] = e;
        return 0;
}

int pipeline_dlq_retry_pump(pipeline_t *p) {
        while (p->n_dlq_retry > 0 && !p->dlq_solo) {
                pipeline_dlq_retry_t *e = &p->dlq_retry[0];
                errbuf_t err = {};
                int r;

                if (p->dlq_in_flight > 0 && pipeline_now_us() - e->queued_us < PIPELINE_DLQ_SOLO_WAIT_US)
                        return 0;       /* the others' reports come first */
                r = kafka_produce(p->kafka, p->dlq_topic, e->key, e->key_len, e->value ? e->value : "", e->len,
                                  e->headers, e->t, &err);
                if (r == -ENOBUFS)
                        return 0;       /* the producer is full: the next report or turn */
                if (r < 0) {
                        /* It went whole before, so this is no size: stop
                         * (the queue is freed with the pipeline). */
                        log_error("%s", err.msg);
                        pipeline_fail(p, 1);
                        return r;
                }
                /* e->headers and e->t belong to librdkafka now. */
                pipeline_dlq_sent(p, e->t);
                p->dlq_solo = e->t;
                e->headers = NULL;
                pipeline_dlq_retry_clear(e);
                memmove(&p->dlq_retry[0], &p->dlq_retry[1], --p->n_dlq_retry * sizeof(p->dlq_retry[0]));
        }
        return 0;
}

void pipeline_dlq_retry_free(pipeline_t *p) {
        for (size_t i = 0; i < p->n_dlq_retry; i++) {
                free(p->dlq_retry[i].t);
                pipeline_dlq_retry_clear(&p->dlq_retry[i]);
        }
        free(p->dlq_retry);
        p->dlq_retry = NULL;
        p->n_dlq_retry = p->dlq_retry_cap = 0;
}

/* Exactly-once: a DLQ copy of len bytes refused (alone or not). */
static void pipeline_dlq_refused_eos(pipeline_t *p, size_t len, bool alone) {
        if (alone) {
                pipeline_dlq_lower(p, len);
                return;
        }
        if (!p->dlq_refusal_run) {
                p->dlq_refusal_run = true;
                p->dlq_run_base_bytes = p->dlq_cut_bytes;
                p->dlq_run_max_bytes = 0;
        }
        if (len > p->dlq_run_max_bytes)
                p->dlq_run_max_bytes = len;
        if (p->dlq_run_max_bytes > 0 && p->dlq_run_max_bytes <= p->dlq_run_base_bytes) {
                p->dlq_cut_bytes = p->dlq_run_max_bytes;
                p->dlq_cut_since_us = pipeline_now_us();
        }
}

/* A copy already cut, refused again: beside a larger one (the broker
 * refuses the whole batch), or too large even so. Once more as it is; then
 * it stops the daemon. 0 or -errno (said). */
static int pipeline_dlq_cut_again(pipeline_t *p, const rd_kafka_message_t *m, pipeline_ticket_t *t,
                                  rd_kafka_headers_t *in) {
        rd_kafka_headers_t *again = in ? rd_kafka_headers_copy(in) : NULL;
        errbuf_t err = {};
        int r;

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
        pipeline_dlq_sent(p, t);
        t->dlq_cut_tries++;
        return 0;
}

int pipeline_delivery_failed(pipeline_t *p, const rd_kafka_message_t *m) {
        pipeline_ticket_t *t = m->_private;
        rd_kafka_headers_t *in = NULL;
        errbuf_t err = {};
        bool alone;
        int r;

        if (t && !t->dlq && m->err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
                return pipeline_prediction_refused(p, m);
        if (!t || !t->dlq)
                return -EINVAL;
        alone = pipeline_dlq_was_alone(p, t);
        pipeline_dlq_reported(p, t);
        if (m->err != RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
                return -EINVAL;
        if (kafka_transactional(p->kafka)) {
                pipeline_dlq_refused_eos(p, m->len, alone);
                return -ECANCELED;
        }
        if (rd_kafka_message_headers(m, &in) != RD_KAFKA_RESP_ERR_NO_ERROR)
                in = NULL;
        if (t->dlq_cut_tries > 0)
                return pipeline_dlq_cut_again(p, m, t, in);
        if (!alone && m->len < pipeline_dlq_cut_bytes(p) && t->dlq_solo_tries < PIPELINE_DLQ_SOLO_TRIES) {
                /* Refused beside others: whole again, alone. */
                t->dlq_solo_tries++;
                if ((r = pipeline_dlq_retry_add(p, m, t)) < 0) {
                        log_error("Out of memory keeping a DLQ copy of %zu bytes to retry", m->len);
                        return r;
                }
                (void)pipeline_dlq_retry_pump(p);
                return 0;
        }
        if (alone)
                pipeline_dlq_lower(p, m->len);
        r = pipeline_dlq_produce_cut(p, m->key, m->key_len, in, m->len, t, &err);
        if (r < 0) {
                log_error("%s", err.msg);
                return r;
        }
        /* t is librdkafka's again. */
        if (alone)
                log_warning_f(((log_fields_t){ LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                              "The broker refused a DLQ copy of %zu bytes, sent alone, as too large for '%s': "
                              "sent again without its value; copies of %zu bytes or more go without it for the "
                              "next %" PRIu64 " s, or until one that large is delivered whole",
                              m->len, p->dlq_topic, p->dlq_cut_bytes, p->dlq_cut_ttl_us / 1000000);
        else if (m->len >= p->dlq_cut_bytes)
                log_warning_f(((log_fields_t){ LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                              "The broker refused a DLQ copy of %zu bytes as too large for '%s': sent again "
                              "without its value (copies of %zu bytes or more go without it)",
                              m->len, p->dlq_topic, p->dlq_cut_bytes);
        else
                log_warning_f(((log_fields_t){ LOG_PARTITION(t->partition), LOG_OFFSET(t->offset) }),
                              "The broker refused a DLQ copy of %zu bytes as too large for '%s' %d times, each "
                              "time beside other copies: sent without its value; the size for other copies "
                              "is unchanged", m->len, p->dlq_topic, t->dlq_solo_tries + 1);
        return 0;
}

void pipeline_output_delivered(pipeline_t *p, const rd_kafka_message_t *m) {
        const pipeline_ticket_t *t = m->_private;

        /* A success: a run of refusals (one batch's) is over. */
        p->dlq_refusal_run = false;
        p->out_refusal_run = false;
        if (!t || !t->dlq)
                return;
        pipeline_dlq_reported(p, t);
        if (m->len > 0 && m->len >= p->dlq_cut_bytes) {
                log_info("A DLQ copy of %zu bytes was delivered whole: copies of %zu bytes or more are tried whole "
                         "again", m->len, p->dlq_cut_bytes);
                p->dlq_cut_bytes = SIZE_MAX;
        }
        (void)pipeline_dlq_retry_pump(p);
}

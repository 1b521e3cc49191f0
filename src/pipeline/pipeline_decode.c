/* pipeline_decode: the records that need decoding (JPEG, PNG, WebP). Each
 * is taken into a staging entry of its own (its offset tracked at once, in
 * partition order), decoded there by the decode pool's threads, and only
 * then placed in the FILLING slot, as a raw record is; a refused decode
 * goes to the DLQ as soon as it ends. So a slow decode holds up no record
 * that was ready: the records taken after it go into earlier batches, and
 * their offsets still commit in partition order (batch_offsets: an offset
 * is stored only once every earlier one of its partition is done).
 *
 * The entries, one per slot position, and their RGB8 images are made at
 * start; the plan counts them (plan_t decode_staging_bytes). Decoded
 * records wait in their entries, in the order their decodes ended, while
 * the slots are busy.
 *
 * Not here: taking records (pipeline.c, pipeline_take), the decode threads
 * (src/decode/pool.c), the DLQ copy itself (pipeline_produce.c). */
#include "pipeline/pipeline_priv.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "core/record.h"

int pipeline_staging_new(pipeline_t *p, int n) {
        assert(n > 0);
        p->staged = calloc((size_t)n, sizeof(*p->staged));
        p->staging = malloc((size_t)n * RECORD_RGB8_BYTES);
        p->staged_free = calloc((size_t)n, sizeof(int));
        p->decoded = calloc((size_t)n, sizeof(int));
        if (!p->staged || !p->staging || !p->staged_free || !p->decoded)
                return -ENOMEM;
        p->n_staged = n;
        for (int i = 0; i < n; i++) {
                p->staged[i].job.out = p->staging + (size_t)i * RECORD_RGB8_BYTES;
                p->staged[i].job.userdata = &p->staged[i];
                /* Taken lowest first: easier to follow in a debugger. */
                p->staged_free[i] = n - 1 - i;
        }
        p->n_staged_free = n;
        return 0;
}

void pipeline_staging_free(pipeline_t *p) {
        if (p->staged)
                for (int i = 0; i < p->n_staged; i++)
                        if (p->staged[i].msg)
                                rd_kafka_message_destroy(p->staged[i].msg);
        free(p->staged);
        free(p->staging);
        free(p->staged_free);
        free(p->decoded);
}

bool pipeline_staging_has_room(const pipeline_t *p) {
        return p->n_staged_free > 0;
}

int pipeline_staging_busy(const pipeline_t *p) {
        return p->n_staged - p->n_staged_free;
}

void pipeline_staging_take(pipeline_t *p, rd_kafka_message_t *m, int tag, const rectime_t *times,
                           record_format_t fmt, const pipeline_cache_key_t *key) {
        pipeline_staged_t *s;
        int r;

        assert(p->n_staged_free > 0);
        s = &p->staged[p->staged_free[--p->n_staged_free]];
        s->msg = m;
        s->tag = tag;
        s->times = *times;
        s->key = *key;
        s->job.data = m->payload;
        s->job.len = m->len;
        s->job.format = fmt;
        s->job.r = 0;
        s->job.code = NULL;
        s->job.err = (errbuf_t){};
        /* The pool holds as many jobs as there are entries, and a decoded
         * entry's job has left it (reaped). */
        r = decode_pool_submit(p->decode, &s->job);
        assert(r == 0);
        (void)r;
}

int pipeline_decoded(pipeline_t *p) {
        decode_job_t *j;

        if (!p->decode)
                return 0;
        while ((j = decode_pool_reap(p->decode))) {
                pipeline_staged_t *s = j->userdata;

                assert(s >= p->staged && s < p->staged + p->n_staged && s->msg);
                s->times.decoded_us = pipeline_now_us();
                p->decoded[(p->decoded_head + p->decoded_len) % p->n_staged] = (int)(s - p->staged);
                p->decoded_len++;
        }
        return pipeline_staging_place(p);
}

int pipeline_staging_place(pipeline_t *p) {
        if (!p->decode)
                return 0;
        while (p->decoded_len > 0) {
                int i = p->decoded[p->decoded_head], r;
                pipeline_staged_t *s = &p->staged[i];

                if (s->job.r < 0)
                        r = pipeline_produce_dead(p, &s->msg, s->tag,
                                                  s->job.code ? s->job.code : RECORD_ERR_DECODE_FAILED,
                                                  s->job.err.msg);
                else {
                        r = pipeline_place(p, s->msg, s->tag, &s->times, RECORD_RGB8, s->job.out,
                                           RECORD_RGB8_BYTES, &s->key);
                        if (r == 0)
                                s->msg = NULL;  /* the slot's now */
                }
                if (r == -ENOBUFS)
                        break;  /* no room in the slots, or the producer's queue: later */
                if (r < 0) {
                        pipeline_fail(p, 1);
                        return r;
                }
                p->decoded_head = (p->decoded_head + 1) % p->n_staged;
                p->decoded_len--;
                p->staged_free[p->n_staged_free++] = i;
        }
        if (p->flush_after_decodes && pipeline_staging_busy(p) == 0) {
                p->flush_after_decodes = false;
                pipeline_submit_filling(p);
        }
        return 0;
}

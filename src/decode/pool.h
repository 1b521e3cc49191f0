/* decode_pool: a fixed pool of decode threads for an event loop.
 *
 * The caller submits jobs (an encoded record and where its 224x224 RGB8
 * goes, typically a batch slot's record) and learns of their completion
 * through an eventfd that becomes readable, as it does for the engine: an
 * event loop waits on it beside everything else, and never waits for a
 * decode. Each thread owns one decode context (decode.h), made at start for
 * max_pixels; the queues are rings of job pointers sized at start; jobs are
 * the caller's memory. Nothing is allocated after decode_pool_new.
 *
 * Jobs complete in any order. The queue is bounded: decode_pool_submit says
 * -EAGAIN when `capacity` jobs are in the pool (queued, running, or done and
 * not yet reaped), which is the caller's signal to stop taking records
 * (back-pressure). Not here: which record goes where, the DLQ, commits. */
#ifndef INFERD_DECODE_POOL_H
#define INFERD_DECODE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/record.h"

typedef struct decode_pool decode_pool_t;

typedef struct decode_job {
        /* In: owned by the caller, untouched by the pool until it is reaped. */
        const void *data;               /* the encoded record, borrowed until reaped */
        size_t len;
        record_format_t format;         /* RECORD_JPEG, RECORD_PNG or RECORD_WEBP */
        uint8_t *out;                   /* (224, 224, 3) RGB8 HWC destination */
        void *userdata;                 /* the caller's */
        /* Out: valid once reaped. */
        int r;                          /* 0, or -EINVAL with code and err */
        const char *code;               /* RECORD_ERR_* of a refusal */
        errbuf_t err;
} decode_job_t;

/* Starts `threads` threads (>= 1), each with a decode context for images of
 * up to max_pixels and max_bytes (in the fast mode when fast: see
 * decode_set_fast; turning images by their EXIF orientation when
 * exif_orientation: see decode_set_exif_orientation), and queues for
 * `capacity` jobs. Returns 0, -EINVAL, -ENOMEM, or the error of a thread or
 * eventfd that cannot start. */
int decode_pool_new(decode_pool_t **ret, int threads, uint64_t max_pixels, size_t max_bytes, bool fast,
                    bool exif_orientation, size_t capacity, errbuf_t *err);

/* Sets every context's decode cost limit (decode_set_max_scan_megapixels);
 * call it right after decode_pool_new, before the first job. */
void decode_pool_set_max_scan_megapixels(decode_pool_t *p, uint64_t megapixels);

/* The threads the pool runs and the max_pixels their contexts were made
 * for: fixed from decode_pool_new on (a model swap plans with them). */
int decode_pool_threads(const decode_pool_t *p);
uint64_t decode_pool_max_pixels(const decode_pool_t *p);

/* Stops the threads after their current job (queued jobs are dropped
 * unreaped) and frees the pool. NULL is a no-op. */
void decode_pool_free(decode_pool_t *p);

/* Queues job. -EAGAIN when the pool holds `capacity` jobs already. */
int decode_pool_submit(decode_pool_t *p, decode_job_t *job);

/* The eventfd that is readable while completed jobs wait to be reaped. */
int decode_pool_fd(const decode_pool_t *p);

/* One completed job, or NULL when none is done. Never blocks. */
decode_job_t *decode_pool_reap(decode_pool_t *p);

/* Jobs in the pool (queued, running, done and not reaped), and whether it
 * is full. */
size_t decode_pool_pending(decode_pool_t *p);
int decode_pool_full(decode_pool_t *p);

#endif

/* pipeline_priv: the pipeline's own header, shared by its files and by
 * nothing else (the interface is pipeline.h).
 *
 *   pipeline.c          the engine's slots (submit, decode, reap, the
 *                       batch delay), taking records in and what their
 *                       outputs need of them (their source, kept once
 *                       their librdkafka message is let go), the life
 *                       cycle, live settings and statistics
 *   pipeline_produce.c  the outputs: predictions and DLQ copies, their
 *                       headers and tickets
 *   pipeline_dlq.c      DLQ copies the broker refuses as too large: retried
 *                       alone, cut, and the size learned from it
 *   pipeline_hold.c     the held queue, the hold and pausing fetching, the
 *                       pump, closing the intake and the drain
 *   pipeline_decode.c   records that need decoding: their staging entries,
 *                       the decode jobs, placing decoded records in slots
 *   pipeline_cache.c    the result cache on the path: keys, hits, puts
 *
 * Not a module boundary: each file reads and writes struct pipeline. */
#ifndef INFERD_PIPELINE_PRIV_H
#define INFERD_PIPELINE_PRIV_H

#include "pipeline/cache.h"
#include "pipeline/pipeline.h"
#include "pipeline/ratelimit.h"

/* The DLQ codes counted by name: every code the record, decode and engine
 * layers give, plus room for one that a later layer adds without telling
 * this table (it is then counted under its own name, not lost). */
#define PIPELINE_DLQ_CODES_MAX 16

/* The headers a prediction copies from its input (pipeline_produce.c), by
 * index into pipeline_copied_headers, and the bound on any of their values
 * (the trace context has tighter ones of its own, tracectx.h). A cut one is
 * named in an inferd-header-cut header: <name>=<bytes it had>. */
enum {
        PIPELINE_COPIED_CORRELATION_ID,
        PIPELINE_COPIED_TRACEPARENT,
        PIPELINE_COPIED_TRACESTATE,
        PIPELINE_N_COPIED,
};
extern const char *const pipeline_copied_headers[PIPELINE_N_COPIED];
#define PIPELINE_COPIED_MAX_BYTES 1024
#define PIPELINE_HEADER_CUT "inferd-header-cut"

/* pipeline_dlq.c: the size from which DLQ copies go without their value
 * is learned from a copy the broker refused alone; it holds this long, or
 * until a copy that large is delivered whole. */
#define PIPELINE_DLQ_CUT_TTL_US (3600ULL * 1000000ULL)
/* A refused copy is retried alone this many times at most. */
#define PIPELINE_DLQ_SOLO_TRIES 4
/* The next copy to retry waits at most this long for the DLQ copies in
 * flight to be reported (then it goes beside them, not alone). */
#define PIPELINE_DLQ_SOLO_WAIT_US (1000ULL * 1000ULL)

/* A DLQ copy the broker refused beside others, kept to be retried alone. */
typedef struct pipeline_dlq_retry {
        pipeline_ticket_t *t;           /* owned while queued */
        void *key, *value;              /* owned copies of the refused copy's (NULL: none) */
        size_t key_len, len;
        rd_kafka_headers_t *headers;    /* owned while queued */
        uint64_t queued_us;
} pipeline_dlq_retry_t;

/* A record's key in the result cache (pipeline_cache.c), kept with it from
 * its take (a miss) to its prediction, whose result is then put under it. */
typedef struct pipeline_cache_key {
        cache_key_t k;
        bool set;                       /* false: no cache, or not to be put */
} pipeline_cache_key_t;

/* The header a prediction made from the cache has: inferd-cache: hit. */
#define PIPELINE_HEADER_CACHE "inferd-cache"

/* A record taken for decoding (pipeline_decode.c): from its take until it
 * is placed in a slot (decoded) or sent to the DLQ (refused). */
typedef struct pipeline_staged {
        rd_kafka_message_t *msg;        /* owned while the entry is busy */
        int tag;                        /* its offset's partition id (batch_offsets) */
        rectime_t times;                /* taken_us and decoded_us so far */
        pipeline_cache_key_t key;       /* its key in the result cache (a miss) */
        decode_job_t job;               /* its out: the entry's buffer in staging */
} pipeline_staged_t;

/* What a record's outputs (its prediction or DLQ copy) need of it. A view
 * of a message (pipeline_source_of: owns nothing), or a slot position's
 * record (pipeline_source_keep: owns its message, or the copies made when
 * the message was let go; pipeline_source_release frees them). */
typedef struct pipeline_source {
        const char *topic;
        int32_t partition;
        int64_t offset;
        int64_t timestamp_ms;                   /* -1: none */
        const void *key;                        /* NULL: no key */
        size_t key_len;
        const rd_kafka_headers_t *headers;      /* NULL: none */
        const void *value;                      /* the message's payload, or the slot's copy of it */
        size_t len;
        rd_kafka_message_t *msg;                /* owned: kept whole (a decoded record) */
        char *copied;                           /* owned: the topic and the key, once msg was let go */
        rd_kafka_headers_t *copied_headers;     /* owned: the headers, likewise */
} pipeline_source_t;

struct pipeline {
        pipeline_ops_t ops;             /* copied */
        void *userdata;                 /* the owner's, handed back to ops */

        engine_t *engine;               /* borrowed */
        kafka_t *kafka;                 /* borrowed */
        batch_offsets_t *offsets;       /* borrowed */
        const char *output_topic;       /* borrowed */
        const char *dlq_topic;          /* borrowed */
        batch_t *batch;                 /* owned; its positions' records are in sources */
        prediction_meta_t meta;
        prediction_encoder_t *encoder;  /* owned: meta's strings encoded; NULL: made at the next prediction */
        int engine_top_k;               /* the top-k the engine computes (a live top_k may only go below) */
        int top_k;                      /* live */
        int max_delay_ms;               /* live */
        uint64_t max_record_age_ms;     /* live; 0 = no deadline */
        bool expired_skip;              /* live: past it, commit without output */
        bool trace_headers, timing_header;      /* live */
        int *slot_produced;             /* (depth) records of a DONE slot already produced */

        /* Decoding (when decode is not NULL, pipeline_decode.c): an
         * encoded record is taken into a staging entry, decoded there by
         * the pool, and placed into the FILLING slot once it is decoded,
         * like a raw record; records taken after it that were ready at
         * once go into batches before it. The entries and their RGB8
         * buffers are made at start, one per slot position. */
        decode_pool_t *decode;          /* borrowed */
        pipeline_staged_t *staged;      /* (n_staged) */
        uint8_t *staging;               /* (n_staged, RECORD_RGB8_BYTES): the decoded images */
        int n_staged;
        int *staged_free;               /* a stack of free entries' indices */
        int n_staged_free;
        int *decoded;                   /* a ring of decoded entries' indices, in the order they were reaped */
        int decoded_head, decoded_len;
        bool flush_after_decodes;       /* pipeline_flush_filling came with records still staged: submit the
                                         * FILLING slot again once the last of them is placed */
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
        uint64_t outputs_given_up;      /* outputs not produced: the partition revoked or rewound since */
        size_t dlq_cut_bytes;           /* values of this size or more are left out of DLQ copies at once: the
                                         * broker refused one that large alone (SIZE_MAX: none was refused) */
        uint64_t dlq_cut_since_us;      /* when it was set; after dlq_cut_ttl_us it is lifted */
        uint64_t dlq_cut_ttl_us;        /* PIPELINE_DLQ_CUT_TTL_US (a test shortens it) */
        int dlq_in_flight;              /* DLQ copies handed to librdkafka and not yet reported */
        uint64_t dlq_sent_seq;          /* DLQ copies handed to librdkafka so far */
        pipeline_dlq_retry_t *dlq_retry; /* (dlq_retry_cap) refused copies to retry alone, oldest first */
        size_t n_dlq_retry, dlq_retry_cap;
        const pipeline_ticket_t *dlq_solo; /* the retried copy in flight (NULL: none); compared, never read */
        bool dlq_refusal_run;           /* exactly-once: the last reports were refusals (one batch's) */
        size_t out_cut_bytes;           /* exactly-once: predictions of this size or more send their record to the
                                         * DLQ at once (the broker refused one that large); SIZE_MAX: none */
        uint64_t out_cut_since_us;      /* when it was set; lifted after dlq_cut_ttl_us */
        bool out_refusal_run;           /* as dlq_refusal_run, for predictions */
        size_t out_run_base_bytes, out_run_max_bytes;
        size_t dlq_run_base_bytes, dlq_run_max_bytes; /* dlq_cut_bytes before the run; its largest copy */
        metrics_count_t headers_cut[PIPELINE_N_COPIED]; /* copied headers cut or left out, by name */
        uint64_t last_progress_us;      /* last completion, or when the engine left idle */
        metrics_count_t dlq_codes[PIPELINE_DLQ_CODES_MAX];      /* labels: static strings or owned copies */
        size_t n_dlq_codes, n_dlq_known;
        metrics_hist_t batch_size, batch_seconds;
        uint64_t *slot_submitted_us;    /* (depth) when the engine was given the slot */
        rectime_t *times;               /* (depth * capacity) each position's record's times */
        pipeline_source_t *sources;     /* (depth * capacity) each position's record (owned while placed) */
        uint64_t expired_skipped;
        uint64_t redelivered;           /* records handed out again by librdkafka, dropped */
        uint64_t redelivered_logged_us; /* when that was last logged (0: never) */
        metrics_hist_t stage_seconds[RECTIME_STAGES];

        /* The result cache (pipeline_cache.c); NULL: [cache] entries was 0
         * at start. */
        cache_t *cache;                 /* owned */
        pipeline_cache_key_t *cache_keys; /* (depth * capacity) each position's record's key */
        char cache_preprocessing[96];   /* the config's, copied */
        char cache_context[256];        /* the model's and the options' part of every key */
        const rd_kafka_message_t *cache_held; /* the record held for room after its key was made (compared, never
                                         * read: cleared before any held record is let go) */
        pipeline_cache_key_t cache_held_key;    /* ... its key, not made again when it is taken */
        uint64_t cache_hits, cache_misses;
};

/* Asks the owner to stop with a failure; the caller has logged why. */
static inline void pipeline_fail(pipeline_t *p, int status) {
        p->ops.fail(p->userdata, status);
}

/* A prediction's JSON on the stack up to this length (a top-5 is about 350
 * bytes with the model's id; longer labels go to the heap). */
#define PIPELINE_JSON_LINE 1024

/* The meta's strings or labels changed: the encoder is made again. */
static inline void pipeline_meta_changed(pipeline_t *p) {
        prediction_encoder_free(p->encoder);
        p->encoder = NULL;
}

/* Position i of slot in the (depth, capacity) arrays times and sources. */
static inline size_t pipeline_pos(const pipeline_t *p, int slot, int i) {
        return (size_t)slot * (size_t)p->capacity + (size_t)i;
}

/* --- pipeline.c ------------------------------------------------------------- */

/* Handles one consumed message. Returns 0 when it was handled (and
 * consumed), -ENOBUFS when it cannot be placed now (the caller keeps it). */
int pipeline_take(pipeline_t *p, rd_kafka_message_t *m);

/* Whether the FILLING slot can take no more records: full by count, or by
 * bytes (the next record could be float32). */
bool pipeline_slot_full(const pipeline_t *p, int slot);

/* Places a ready record's bytes (len of format fmt, or RGB8 when decoded)
 * as the next record of the FILLING slot (or a FREE one), msg and times
 * with it, and submits the slot when full or arms its delay. -ENOBUFS: no
 * room now (nothing done). */
int pipeline_place(pipeline_t *p, rd_kafka_message_t *msg, int tag, const rectime_t *times, record_format_t fmt,
                   const void *bytes, size_t len, const pipeline_cache_key_t *key);

/* Submits the FILLING slot, if any, whatever the cap says (charged to it). */
void pipeline_submit_filling(pipeline_t *p);

/* --- pipeline_decode.c ------------------------------------------------------ */

/* Makes the staging entries for n records (decode set). 0 or -ENOMEM. */
int pipeline_staging_new(pipeline_t *p, int n);
/* Frees them and the records they still hold. */
void pipeline_staging_free(pipeline_t *p);

/* Whether an encoded record can be taken now (a free entry). */
bool pipeline_staging_has_room(const pipeline_t *p);

/* Takes encoded record m of format fmt (tracked under tag, times as taken)
 * into a free entry and queues its decode job. There must be room. */
void pipeline_staging_take(pipeline_t *p, rd_kafka_message_t *m, int tag, const rectime_t *times,
                           record_format_t fmt, const pipeline_cache_key_t *key);

/* Records taken and not yet placed in a slot or sent to the DLQ (0
 * without decoding: there are no entries). */
int pipeline_staging_busy(const pipeline_t *p);

/* Places decoded records in the slots, and sends refused ones to the DLQ,
 * in the order their decodes ended, while there is room; after a flush
 * (flush_after_decodes) submits the FILLING slot once none is left. 0, or
 * -errno after ops->fail. */
int pipeline_staging_place(pipeline_t *p);

/* --- pipeline.c: a record's source ------------------------------------------- */

/* s views m (owns nothing; valid while m is). */
void pipeline_source_of(pipeline_source_t *s, const rd_kafka_message_t *m);

/* Takes m into s, a slot position's record. value: where m's payload was
 * copied (len bytes: the slot's copy, which stays until the slot is
 * released), and m is let go; NULL: m is kept whole (a decoded record, whose
 * value is not in the slot). Out of memory, m is kept whole. */
void pipeline_source_keep(pipeline_source_t *s, rd_kafka_message_t *m, const void *value, size_t len);

/* Frees what s owns; s is then empty (releasing an empty one is a no-op). */
void pipeline_source_release(pipeline_source_t *s);

/* --- pipeline_produce.c ----------------------------------------------------- */

/* A ticket for an output of s (calloc'd); NULL when out of memory. */
pipeline_ticket_t *pipeline_ticket_new(const pipeline_source_t *s, bool dlq);

/* Starts tracking s's offset. Returns the partition id, or 0 when it cannot
 * be tracked (its delivery then stores nothing). */
int pipeline_track(pipeline_t *p, const pipeline_source_t *s);

/* A record refused as it is taken (its type, or its age): its DLQ copy, and
 * the same returns as pipeline_take's. */
int pipeline_refuse_taken(pipeline_t *p, rd_kafka_message_t *m, const char *code, const char *detail);

/* A record found in the result cache as it is taken (pipeline_cache.c):
 * its prediction from the cached scores (engine_top_k) and raw embedding
 * (NULL: none), with inferd-cache: hit, produced and tracked now, as a
 * refused record's DLQ copy is; it takes no slot and no decode. The same
 * returns as pipeline_take's (-ENOBUFS: the producer is full, m stays the
 * caller's). */
int pipeline_produce_hit(pipeline_t *p, rd_kafka_message_t *m, const engine_topk_t *scores, const float *raw);

/* Sends a record already tracked under tag, that gets no prediction, to
 * the DLQ: 0 when *mp is gone (sent, or dropped with exactly-once and the
 * transaction doomed: the rewind brings it back), else -ENOBUFS (the
 * producer is full) or another -errno (fatal), and *mp stays the caller's. */
int pipeline_produce_dead(pipeline_t *p, rd_kafka_message_t **mp, int tag, const char *code, const char *detail);

/* Produces the predictions of a DONE slot, from where it stopped; releases
 * the slot when all are out. -ENOBUFS: the producer's queue is full (the
 * owner retries with pipeline_produce_pending). Other errors are fatal. */
int pipeline_produce_slot(pipeline_t *p, int slot);

/* Counts a DLQ copy under its code. */
void pipeline_count_dlq(pipeline_t *p, const char *code);

/* The size from which predictions send their record to the DLQ at once
 * (exactly-once, after the broker refused one that large; SIZE_MAX: none),
 * lifted here once it is an hour old. */
size_t pipeline_out_cut_bytes(pipeline_t *p);

/* pipeline_delivery_failed for a prediction the broker refused as too
 * large: at least once, its record goes to the DLQ as output-too-large,
 * without its value (gone from the pipeline), with t: 0. Exactly-once, the
 * size is learned and -ECANCELED returned (the transaction is doomed).
 * Else -errno (said), t the caller's. */
int pipeline_prediction_refused(pipeline_t *p, const rd_kafka_message_t *m);

/* --- pipeline_cache.c ------------------------------------------------------- */

/* Makes the cache of entries results (0: none) and the positions' keys;
 * preprocessing names the decode options for the keys' context. 0 or
 * -ENOMEM. */
int pipeline_cache_new(pipeline_t *p, int entries, const char *preprocessing);
void pipeline_cache_free(pipeline_t *p);

/* Looks m (of format fmt, classified) up: a hit is produced at once
 * (pipeline_produce_hit), *r set to what pipeline_take returns, and true
 * returned; a miss returns false with *key its key (key->set), to keep
 * with the record. Without a cache (or emptied to 0), false, key unset. */
bool pipeline_cache_take(pipeline_t *p, rd_kafka_message_t *m, record_format_t fmt, pipeline_cache_key_t *key,
                         int *r);

/* m (NULL: none) is held for room with its key made (a miss): the next
 * try takes the key instead of hashing m again. Any other take, and
 * letting held records go, forgets it. */
void pipeline_cache_held(pipeline_t *p, const rd_kafka_message_t *m, const pipeline_cache_key_t *key);

/* Slot position pos (pipeline_pos) holds a record of key (NULL: none). */
void pipeline_cache_keep(pipeline_t *p, size_t pos, const pipeline_cache_key_t *key);

/* Position pos's prediction was handed over: its result (scores:
 * engine_top_k; raw: the engine's embedding, NULL: none) is put under its
 * key, if it has one. */
void pipeline_cache_put(pipeline_t *p, size_t pos, const engine_topk_t *scores, const float *raw);

/* After a model swap: emptied, and carved for the new result size. */
void pipeline_cache_swapped(pipeline_t *p);

/* --- pipeline_dlq.c --------------------------------------------------------- */

/* DLQ copy t was handed to librdkafka: counted in flight, and whether it
 * went alone noted in t. */
void pipeline_dlq_sent(pipeline_t *p, pipeline_ticket_t *t);

/* The size from which DLQ copies go without their value at once (SIZE_MAX:
 * none), lifted here once it is PIPELINE_DLQ_CUT_TTL_US old. */
size_t pipeline_dlq_cut_bytes(pipeline_t *p);

/* Produces the cut copy of a DLQ record (dlq.h): key kept, no value, the
 * headers of full (borrowed, may be NULL) cut, under ticket t. Returns 0
 * (t is librdkafka's) or kafka_produce's -errno. */
int pipeline_dlq_produce_cut(pipeline_t *p, const void *key, size_t key_len, const rd_kafka_headers_t *full,
                             size_t value_bytes, pipeline_ticket_t *t, errbuf_t *err);

/* Sends the next refused copy to retry, alone, when none is in flight.
 * 0, or -errno after ops->fail. */
int pipeline_dlq_retry_pump(pipeline_t *p);

/* Frees the copies still waiting (pipeline_free). */
void pipeline_dlq_retry_free(pipeline_t *p);

/* --- pipeline_hold.c -------------------------------------------------------- */

/* Whether the cap stops the intake now: the FILLING slot is full and waits
 * for its tokens. */
bool pipeline_cap_stops_intake(const pipeline_t *p);

/* The intake is stopped and fetching is not paused: the pump takes nothing
 * from the consumer until it may take again or the hold expires. */
bool pipeline_holding(const pipeline_t *p);

#endif

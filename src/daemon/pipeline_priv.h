/* pipeline_priv: the pipeline's own header, shared by its files and by
 * nothing else (the interface is pipeline.h).
 *
 *   pipeline.c          the engine's slots (submit, decode, reap, the
 *                       batch delay), taking records in, the life cycle,
 *                       live settings and statistics
 *   pipeline_produce.c  the outputs: predictions and DLQ copies, their
 *                       headers and tickets, and the DLQ's refusals
 *   pipeline_hold.c     the held queue, the hold and pausing fetching, the
 *                       pump, closing the intake and the drain
 *
 * Not a module boundary: each file reads and writes struct pipeline. */
#ifndef INFERD_PIPELINE_PRIV_H
#define INFERD_PIPELINE_PRIV_H

#include "daemon/pipeline.h"
#include "daemon/ratelimit.h"

/* The DLQ codes counted by name: every code the record, decode and engine
 * layers give, plus room for one that a later layer adds without telling
 * this table (it is then counted under its own name, not lost). */
#define PIPELINE_DLQ_CODES_MAX 16

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

/* Asks the owner to stop with a failure; the caller has logged why. */
static inline void pipeline_fail(pipeline_t *p, int status) {
        p->ops.fail(p->userdata, status);
}

/* Position i of slot in the (depth, capacity) arrays: jobs, refused, times. */
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

/* --- pipeline_produce.c ----------------------------------------------------- */

/* A ticket for an output of m (calloc'd); NULL when out of memory. */
pipeline_ticket_t *pipeline_ticket_new(const rd_kafka_message_t *m, bool dlq);

/* Starts tracking m's offset. Returns the partition id, or 0 when it cannot
 * be tracked (its delivery then stores nothing). */
int pipeline_track(pipeline_t *p, const rd_kafka_message_t *m);

/* A record refused as it is taken (its type, or its age): its DLQ copy, and
 * the same returns as pipeline_take's. */
int pipeline_refuse_taken(pipeline_t *p, rd_kafka_message_t *m, const char *code, const char *detail);

/* Produces the predictions of a DONE slot, from where it stopped; releases
 * the slot when all are out. -ENOBUFS: the producer's queue is full (the
 * owner retries with pipeline_produce_pending). Other errors are fatal. */
int pipeline_produce_slot(pipeline_t *p, int slot);

/* --- pipeline_hold.c -------------------------------------------------------- */

/* Whether the cap stops the intake now: the FILLING slot is full and waits
 * for its tokens. */
bool pipeline_cap_stops_intake(const pipeline_t *p);

/* The intake is stopped and fetching is not paused: the pump takes nothing
 * from the consumer until it may take again or the hold expires. */
bool pipeline_holding(const pipeline_t *p);

#endif

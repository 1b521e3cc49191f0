/* pipeline: the records' path, on the event loop thread.
 *
 *   consumer -> pipeline_pump -> take: the deadline, then classify
 *        past [batching] max_record_age -> the DLQ (expired), or with skip
 *                finished at once without output (ops->skipped; tracked offset)
 *        bad  -> produce a copy to the DLQ                (tracked offset)
 *        in the result cache ([cache] entries) -> its prediction at once,
 *                with inferd-cache: hit, no decode, no slot (tracked offset)
 *        good -> batch_add + copy into the engine's slot  (tracked offset)
 *        JPEG/PNG/WebP -> a staging entry and a decode job writing its
 *                    RGB8 there (the decode pool's threads; tracked offset)
 *   decode fd -> pipeline_decoded -> a decoded record: batch_add + copy
 *        into the engine's slot, as a good one; a refused one: the DLQ.
 *        Records ready before a slow decode ends go in earlier batches.
 *   slot full (or pipeline_delay_expired) -> engine_submit
 *   engine fd -> pipeline_reap -> one prediction per record (or the DLQ
 *        copy of one whose output is not finite)
 *
 * A record that cannot be placed (every slot busy, the decode queue or the
 * producer's queue full) waits, in order, among the held records, and the
 * pump takes nothing more from the consumer: the records stay in
 * librdkafka's queue, which the plan bounds. Only if records are still held
 * PIPELINE_HOLD_MAX_US later (ops->arm_hold, pipeline_hold_expired) is
 * fetching paused; room for them (a slot completes: the owner pumps) takes
 * them and the consumer again at once.
 *
 * [batching] max_images_per_s puts a token bucket (ratelimit.h, one batch
 * deep) in front of submission: a slot ready to go waits for its records'
 * tokens; the batch-delay deadline wakes it when the tokens are there. A wait
 * under PIPELINE_HOLD_MAX_US takes nothing from the consumer; for a longer
 * one the next record is held and fetching paused at once.
 *
 * Each record's clock readings (rectime.h) go with its prediction's ticket:
 * the inferd-timing header is written from them, and the owner's delivery
 * report observes the stage histograms (pipeline_delivered).
 *
 * The pipeline knows nothing of its owner (the daemon): what it needs from
 * it goes up through pipeline_ops_t (stop with a failure, arm the
 * batch-delay timer, pump again soon), and the owner reads its counters with
 * pipeline_get_stats. It borrows the engine, the Kafka handles and the
 * offset store; it owns the batcher (batch_t) and the records it holds.
 *
 * Not here: delivery reports, storing and committing offsets, rebalances,
 * signals, the life cycle (daemon.c); the data structures (batch.c). */
#ifndef INFERD_PIPELINE_H
#define INFERD_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "pipeline/batch.h"
#include "kafka/kafka.h"
#include "core/counters.h"
#include "pipeline/rectime.h"
#include "decode/pool.h"
#include "engine/engine.h"
#include "engine/prediction.h"

typedef struct pipeline pipeline_t;

/* How long records may be left in librdkafka's queue, taking nothing from
 * the consumer, before fetching is paused: when the pipeline is full
 * (back-pressure), when the intake is closed (the exactly-once commit
 * point, a model swap) and when a batch waits for the cap. A pause drops what
 * librdkafka prefetched (it is fetched again after the resume), and
 * librdkafka 2.0's broker thread notices a resume only at its next wake-up,
 * up to a second later (docs/perf.md, "Back-pressure"): pausing whenever the
 * slots filled held the pipeline to 4-10% of kcat's rate on a real cluster.
 * Not pausing costs nothing in memory (librdkafka's queue is bounded by
 * the plan: queued.max.messages.kbytes, and it stops fetching when the queue
 * is full), but while the consumer queue is not served, rebalance callbacks
 * wait and the poll interval (max.poll.interval.ms) runs: this bounds both,
 * far below any session or poll timeout. */
#define PIPELINE_HOLD_MAX_US (1000 * 1000ULL)

/* The opaque of every record the pipeline produces (kafka_produce's, then
 * the delivery report's m->_private). Allocated here with malloc; from a
 * successful kafka_produce on, whoever handles the delivery report owns it
 * and frees it with free(). */
typedef struct pipeline_ticket {
        int part_id;            /* batch_offsets id; 0 = untracked (store nothing) */
        int64_t offset;         /* of the source record */
        int32_t partition;
        bool dlq;               /* a DLQ copy, not a prediction */
        int dlq_cut_tries;      /* times this DLQ copy was produced without its value (dlq.h) */
        int dlq_solo_tries;     /* times it was retried alone after a refusal beside others (pipeline_dlq.c) */
        uint64_t dlq_seq;       /* the pipeline's count of DLQ copies sent, when it was last sent */
        bool dlq_alone;         /* ... with no other DLQ copy in flight */
        int64_t timestamp_ms;   /* the source record's Kafka timestamp (epoch ms); -1 = none */
        bool timed;             /* a prediction whose times are read: times is valid */
        rectime_t times;        /* the record's stages up to its batch's results (pipeline_delivered) */
} pipeline_ticket_t;

/* Calls up to the owner. All run on the loop thread, from inside the
 * pipeline_ call that needs them; none may call back into the pipeline. */
typedef struct pipeline_ops {
        /* The pipeline cannot go on (the engine failed, a fatal consumer
         * error, out of memory): stop with this exit status. Why was logged. */
        void (*fail)(void *userdata, int status);
        /* Call pipeline_delay_expired once at deadline_us (the clock of
         * pipeline_now_us), replacing any earlier deadline: a partial
         * batch's delay, or when the cap's tokens are there. */
        void (*arm_delay)(void *userdata, uint64_t deadline_us);
        /* Records may be waiting (the pump stopped on its budget, or a
         * capped slot went and records are held behind it): call
         * pipeline_pump again soon, after the other pending events. */
        void (*pump_later)(void *userdata);
        /* Call pipeline_hold_expired once at deadline_us (the clock of
         * pipeline_now_us), replacing any earlier deadline: the intake
         * stopped (records held, or closed) PIPELINE_HOLD_MAX_US before it. A timer of its
         * own: the batch-delay deadline may be armed at the same time. */
        void (*arm_hold)(void *userdata, uint64_t deadline_us);
        /* A record was finished without any output ([batching]
         * max_record_age_action = skip): handle t as a delivered one
         * (store or note its offset). t is the owner's from here (free()).
         * May be NULL for an owner that never sets the skip action. */
        void (*skipped)(void *userdata, pipeline_ticket_t *t);
} pipeline_ops_t;

typedef struct pipeline_config {
        engine_t *engine;               /* borrowed: slots, submit, reap, top-k results */
        kafka_t *kafka;                 /* borrowed: consume, produce, pause */
        batch_offsets_t *offsets;       /* borrowed: shared with the delivery reports */
        const char *output_topic;       /* borrowed; must outlive the pipeline */
        const char *dlq_topic;          /* borrowed; must outlive the pipeline */
        int max_batch;                  /* the batch limit, clamped to the engine's batch */
        int top_k;                      /* classes per prediction, clamped to the engine's top-k */
        int max_delay_ms;               /* how long a partial batch may wait for more */
        int max_images_per_s;           /* the throughput cap (token bucket before submission); 0 = none */
        uint64_t max_record_age_ms;     /* the deadline on a record's Kafka timestamp when taken; 0 = none */
        bool expired_skip;              /* past the deadline: commit without output (ops->skipped), not the DLQ */
        bool trace_headers;             /* copy traceparent and tracestate to predictions */
        bool timing_header;             /* add inferd-timing to predictions */
        prediction_meta_t meta;         /* copied; its strings and labels are borrowed */
        int cache_entries;              /* the result cache's records ([cache] entries; 0: none); the plan
                                         * counts it (plan_cache_bytes) */
        const char *cache_preprocessing; /* the decode options a record's result depends on, as text for
                                         * the cache's keys ("fast=no;exif_orientation=no"); copied */
        decode_pool_t *decode;          /* borrowed; NULL: JPEG/PNG records go to the DLQ undecoded. Its
                                         * capacity should be the engine's slots x batch. Free it before
                                         * the pipeline: its jobs point into the slots and messages. */
} pipeline_config_t;

/* A snapshot for STATUS=, the drain, the watchdog and the metrics. Its
 * pointers point into the pipeline: valid until the next pipeline_ call. */
typedef struct pipeline_stats {
        /* Counters since pipeline_new. */
        uint64_t records_in;            /* taken: packed into a slot or sent to the DLQ */
        uint64_t predictions_out;       /* predictions handed to the producer */
        uint64_t dlq_out;               /* DLQ copies handed to the producer */
        uint64_t expired_skipped;       /* past max_record_age, finished without output (skip) */
        uint64_t redelivered;           /* records librdkafka handed out again without a rewind: dropped,
                                         * their first copy answered */
        uint64_t dlq_values_omitted;    /* of those, copies sent without their value (too large) */
        uint64_t outputs_given_up;      /* records whose partition was revoked or rewound after they were
                                         * taken: no output (their next reader takes them again) */
        uint64_t batches;               /* slots submitted */
        uint64_t batch_records;         /* records in those slots */
        const metrics_count_t *dlq_codes;       /* DLQ copies by inferd-error code (every known code, 0 or more) */
        size_t n_dlq_codes;
        const metrics_count_t *headers_cut;     /* predictions' copied headers cut or left out, by name */
        size_t n_headers_cut;
        const metrics_hist_t *batch_size;       /* records per submitted batch */
        const metrics_hist_t *batch_seconds;    /* engine submit to reap */
        const metrics_hist_t *stage_seconds;    /* (RECTIME_STAGES) per delivered prediction, by rectime_stage_t */
        /* Now. */
        int slots;                      /* the engine's pipeline depth */
        int slots_in_flight;            /* submitted, not yet complete */
        int records_in_slots;           /* in FILLING, IN FLIGHT or DONE slots */
        int records_decoding;           /* taken for decoding, not yet in a slot (or the DLQ) */
        size_t records_held;            /* consumed, waiting for room (not tracked) */
        int batch_limit;                /* the live max_batch */
        int batch_capacity;             /* the plan's batch (the engine's, after a model swap) */
        int top_k;                      /* the live top_k */
        int engine_top_k;               /* what the engine computes; top_k may not go above */
        uint64_t last_progress_us;      /* last completion, or when the engine left idle */
        int max_images_per_s;           /* the live cap; 0 = none */
        bool capped;                    /* a ready batch waits for the cap's tokens */
        bool paused;                    /* fetching is paused (back-pressure, the cap, a drain, the commit point) */
        bool holding;                   /* the intake is stopped (records held, or closed) and fetching is
                                         * not paused (yet): the records are left in librdkafka's queue */
        uint64_t holds;                 /* counter: times records had to be held (the pipeline was full) */
        uint64_t hold_pauses;           /* counter: times the intake stayed stopped (records held, or
                                         * closed) PIPELINE_HOLD_MAX_US, so that fetching was paused */
        bool paused_by_cap;             /* the cap stops the intake now: a full batch waits for its tokens, and
                                         * fetching is paused or the records are left in librdkafka's queue */
        uint64_t cap_waits;             /* counter: times a ready batch had to wait for the cap */
        uint64_t cache_hits;            /* counter: records produced from the result cache */
        uint64_t cache_misses;          /* counter: records looked up and not found (then computed) */
        int cache_entries;              /* results held now */
        int cache_limit;                /* the most it holds now (0: no cache, or emptied to 0) */
        int cache_room;                 /* the most its memory holds (a live resize may go up to it) */
} pipeline_stats_t;

/* The clock of every time the pipeline keeps or asks for: CLOCK_MONOTONIC
 * in microseconds, the clock of sd-event's CLOCK_MONOTONIC timers. */
uint64_t pipeline_now_us(void);

/* Creates the pipeline over cfg's engine (its slots and batch size make the
 * batcher). ops and userdata are kept; cfg is not. Returns 0 or -errno. */
int pipeline_new(pipeline_t **ret, const pipeline_config_t *cfg, const pipeline_ops_t *ops, void *userdata);

/* Destroys every record the pipeline still owns (held, or in slots after an
 * abort: the engine copied their bytes and never reads the messages), so
 * call it before kafka_free (rd_kafka_destroy waits for its messages). NULL
 * is a no-op. */
void pipeline_free(pipeline_t *p);

/* Moves records from the held queue and the consumer queue into the
 * pipeline until it is full or the queue is empty, and pauses or resumes
 * fetching. While records are held and fetching is not paused, it takes
 * nothing from the consumer queue. */
void pipeline_pump(pipeline_t *p);

/* Takes every completed slot and produces its predictions. Returns 0, or
 * -errno after ops->fail. */
int pipeline_reap(pipeline_t *p);

/* Takes every completed decode job (the decode pool's fd became readable):
 * a decoded record goes into the FILLING slot (submitted when full, as
 * ever), a refused one to the DLQ. Returns 0, or -errno after ops->fail.
 * The owner pumps again after it: a full decode queue may have held records
 * back. */
int pipeline_decoded(pipeline_t *p);

/* Retries the DONE slots whose predictions did not all fit the producer.
 * Returns -ENOBUFS while the producer is full, -errno after ops->fail. */
int pipeline_produce_pending(pipeline_t *p);

/* A delivery report failed (m->err). For a DLQ copy that the broker
 * refused as too large (MSG_SIZE_TOO_LARGE: the topic's max.message.bytes
 * is below the producer's message.max.bytes): refused beside other copies
 * (the broker refuses a whole batch), it is kept and retried whole, alone;
 * refused alone, it is produced again without its value, with large header
 * values cut, and inferd-dlq-value-omitted, and copies at least as large
 * are cut before they are sent for a while (pipeline_dlq.c). Either way the
 * ticket (m->_private) goes with it, and 0 is returned. Otherwise (another
 * error, a prediction, a copy that was already cut) returns -errno and the
 * ticket stays the caller's. With exactly-once the failed delivery has
 * doomed the open transaction: -ECANCELED (the copy is cut when the record
 * comes again, after the abort, if the refusal showed it too large).
 * Every failed report of a pipeline output goes through here. */
int pipeline_delivery_failed(pipeline_t *p, const rd_kafka_message_t *m);

/* A delivery report without error for an output of the pipeline (its
 * ticket, m->_private, stays the caller's): DLQ copies waiting to be
 * retried alone may go now, and a copy delivered whole at or above the
 * learned size lifts it. */
void pipeline_output_delivered(pipeline_t *p, const rd_kafka_message_t *m);

/* Submits the FILLING slot, if any (a drain or a revoke: no more records
 * will come to fill it); records still decoding then fill another, which is
 * submitted as soon as the last of them is placed. */
void pipeline_flush_filling(pipeline_t *p);

/* The batch-delay deadline (ops->arm_delay) came: submits the FILLING slot
 * if its oldest record has waited max_delay_ms, else re-arms. */
void pipeline_delay_expired(pipeline_t *p);

/* The hold's deadline (ops->arm_hold) came: if the intake is still stopped
 * (records held, or closed) since PIPELINE_HOLD_MAX_US, pauses fetching and asks for a pump
 * (ops->pump_later), which goes on serving the consumer queue (rebalances,
 * the poll interval) while nothing more is taken. Else a no-op. */
void pipeline_hold_expired(pipeline_t *p);

/* Drops held records (all when parts is NULL, or those of the listed
 * partitions): they were never tracked, so their offsets are not committed
 * and they come back. */
void pipeline_held_drop(pipeline_t *p, const rd_kafka_topic_partition_list_t *parts);

/* From now on takes no more records (they are dropped untracked, for the
 * next owner): drops the held ones, pauses fetching and submits the FILLING
 * slot. What is in the slots finishes. */
void pipeline_begin_drain(pipeline_t *p);

/* Closes (open = false) or reopens the intake: while closed, nothing new is
 * taken and the FILLING slot is submitted, so that what is in the slots can
 * finish with nothing new behind it (the exactly-once commit point, a model
 * swap). The records wait in librdkafka's queue; fetching is paused only if
 * the intake stays closed PIPELINE_HOLD_MAX_US (then what arrives meanwhile
 * is held). Reopening asks for a pump (ops->pump_later), which takes them. */
void pipeline_set_intake(pipeline_t *p, bool open);

/* A prediction's delivery report came at now_us (monotonic): observes its
 * stages (rectime.h) when t->timed. The owner observes the record's
 * latency from the same report. */
void pipeline_delivered(pipeline_t *p, const pipeline_ticket_t *t, uint64_t now_us);

/* Live changes (a reload). top_k above the engine's is -ERANGE (a restart
 * is needed); max_batch is clamped to 1..capacity and the value used is
 * returned. */
int pipeline_set_top_k(pipeline_t *p, int top_k);
void pipeline_set_max_delay_ms(pipeline_t *p, int max_delay_ms);
int pipeline_set_max_batch(pipeline_t *p, int max_batch);
/* 0 lifts the cap: a batch waiting for it goes at once. The bucket keeps
 * what it had earned, up to one batch. */
void pipeline_set_max_images_per_s(pipeline_t *p, int max_images_per_s);
/* From the next record taken on. skip needs ops->skipped. */
void pipeline_set_max_record_age(pipeline_t *p, uint64_t max_age_ms, bool skip);
void pipeline_set_headers(pipeline_t *p, bool trace_headers, bool timing_header);
/* [cache] entries: the cache is emptied and holds at most entries from now
 * on (0: off). -ENOSPC, nothing changed, above what the cache made at start
 * holds (none when it was 0 then): a restart plans more. */
int pipeline_set_cache_entries(pipeline_t *p, int entries);

/* After a model swap in place (engine_swap on the borrowed engine, with
 * nothing in the slots): predictions carry model_id and precision (borrowed
 * strings, which must outlive the pipeline or the next swap) from the next
 * batch on, the result cache is emptied, and the batch limit becomes max_batch within the engine's
 * batch, which the swap may have lowered. -EBUSY, and nothing changed,
 * while records are in the slots. */
int pipeline_engine_swapped(pipeline_t *p, const char *model_id, const char *precision, int max_batch);

/* The labels of a swapped-in model (borrowed; NULL: none), set with it. */
void pipeline_set_labels(pipeline_t *p, const labels_t *labels);

/* Fills *ret; all zero for a NULL pipeline (not started yet). */
void pipeline_get_stats(const pipeline_t *p, pipeline_stats_t *ret);

#endif

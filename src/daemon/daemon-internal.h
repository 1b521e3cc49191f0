/* daemon-internal: the manager object's state, shared by daemon.c (life
 * cycle, signals, rebalances, reload, notifications) and pipeline.c (the
 * records' path: take, pack, submit, reap, produce, DLQ, back-pressure).
 * Only those two files include it; nothing here is an interface. */
#ifndef INFERD_DAEMON_INTERNAL_H
#define INFERD_DAEMON_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <librdkafka/rdkafka.h>
#include <systemd/sd-event.h>

#include "daemon/batch.h"
#include "daemon/cfg.h"
#include "daemon/daemon.h"
#include "engine/engine.h"
#include "daemon/kafka.h"
#include "core/labels.h"
#include "core/model.h"
#include "engine/prediction.h"

typedef struct daemon_ticket {
        int part_id;            /* batch_offsets id; 0 = untracked */
        int64_t offset;         /* of the source record */
        int32_t partition;
        bool dlq;
} daemon_ticket_t;

struct daemon {
        cfg_t *cfg;                     /* owned; live keys are updated on reload */
        char *config_path;              /* owned */
        sd_event *event;
        sd_event_source *sig_term, *sig_int, *sig_hup;
        sd_event_source *consumer_io, *producer_io, *engine_io;
        sd_event_source *poll_timer, *delay_timer, *drain_timer, *watchdog_timer, *defer;

        model_t *model;
        labels_t *labels;
        engine_t *engine;
        kafka_t *kafka;
        batch_t *batch;
        batch_offsets_t *offsets;
        prediction_meta_t meta;
        int engine_top_k;               /* the top-k the engine computes (a live top_k may only go below) */
        int top_k;                      /* live */
        int *slot_produced;             /* (depth) records of a DONE slot already produced */

        /* Records consumed but not placed yet, in order (a ring). */
        rd_kafka_message_t **held;
        size_t held_head, held_len, held_cap;

        bool started, draining, in_revoke;
        bool bench_pipeline;            /* the no-compute pipeline benchmark (pipebench.h) */
        bool stored_uncommitted;        /* an offset was stored since the last commit */
        int exit_status;
        uint64_t drain_started_us;

        /* Progress and statistics. */
        uint64_t records_in, predictions_out, dlq_out, delivered, batches, batch_records;
        uint64_t status_last_us, status_last_delivered, status_last_batches, status_last_batch_records;
        uint64_t last_progress_us;      /* last completion, or when the pipeline left idle */
        uint64_t watchdog_usec;
};

static inline uint64_t daemon_now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* Ends the loop with a non-zero exit status (the first one set wins). */
void daemon_fail(daemon_t *d, int status);

/* pipeline.c */
/* Moves records from the held queue and the consumer queue into the
 * pipeline until it is full or the queue is empty (and pauses or resumes). */
void pipeline_pump(daemon_t *d);
/* Takes every completed slot and produces its predictions. */
int pipeline_reap(daemon_t *d);
/* Retries the DONE slots whose predictions did not all fit the producer. */
int pipeline_produce_pending(daemon_t *d);
/* Submits a FILLING slot / the FILLING slot, if any. */
int pipeline_submit(daemon_t *d, int slot);
void pipeline_flush_filling(daemon_t *d);
/* (Re)arms the batch-delay timer for a slot whose first record came at oldest_us. */
void pipeline_arm_delay(daemon_t *d, uint64_t oldest_us);
/* Drops held records (all, or those of the listed partitions). */
void pipeline_held_drop(daemon_t *d, const rd_kafka_topic_partition_list_t *parts);
/* Pauses fetching while records are held or a drain runs; resumes after. */
void pipeline_update_pause(daemon_t *d);

#endif

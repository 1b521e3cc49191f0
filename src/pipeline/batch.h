/* batch: the pipeline's bookkeeping between Kafka and the engine.
 *
 * Two small structures, both free of Kafka and of the engine so that they can
 * be tested alone:
 *
 * batch_t: the state of each of the engine's slots. A slot is FREE, FILLING
 * (records are being packed into it), IN FLIGHT (submitted to the engine) or
 * DONE (computed; its predictions are being produced). For every record
 * packed, the slot keeps an opaque pointer (the daemon's consumed message,
 * which the slot owns until the prediction is produced) and the time it
 * arrived, so that a partial batch can be flushed after max_delay_ms. One
 * slot at most is FILLING at a time, so records keep their order.
 *
 * batch_offsets_t: the partition-ordered offset store. Each assigned
 * partition keeps the offsets it handed out, in order, and marks each one
 * done when its prediction (or DLQ copy) is acknowledged. The offset that may
 * be stored for commit is the one after the longest done prefix, so an offset
 * is never committed while an earlier record of its partition is in flight.
 *
 * Neither copies record bytes (the daemon packs them straight into the
 * engine's slot), nor talks to librdkafka. */
#ifndef INFERD_BATCH_H
#define INFERD_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum batch_slot_state {
        BATCH_SLOT_FREE,
        BATCH_SLOT_FILLING,
        BATCH_SLOT_IN_FLIGHT,
        BATCH_SLOT_DONE,
} batch_slot_state_t;

typedef struct batch_entry {
        void *msg;              /* owned by the slot until the caller releases it */
        uint64_t arrived_us;    /* CLOCK_MONOTONIC */
        int tag;                /* the caller's (the offset store's partition id); 0 from batch_add */
} batch_entry_t;

typedef struct batch batch_t;

/* depth slots (>= 1) of capacity records each (>= 1). */
int batch_new(batch_t **ret, int depth, int capacity);
/* NULL is a no-op. Does not touch the entries' msg pointers. */
void batch_free(batch_t *b);

int batch_depth(const batch_t *b);
int batch_capacity(const batch_t *b);

/* The batch size at which a FILLING slot counts as full: 1..capacity (a
 * live [memory] max_batch change lowers it within the plan). The value is
 * clamped to that range; the effective value is returned. */
int batch_set_limit(batch_t *b, int limit);
int batch_limit(const batch_t *b);

/* Places one record: the FILLING slot, or a FREE one that becomes FILLING.
 * *slot and *index tell where its bytes go. Returns 1 when the slot is now
 * full (submit it), 0 when it can take more, -ENOBUFS when every slot is in
 * flight or done (back-pressure: nothing was placed). */
int batch_add(batch_t *b, void *msg, uint64_t now_us, int *slot, int *index);

/* Whether batch_add would return -ENOBUFS. */
bool batch_is_busy(const batch_t *b);

/* The FILLING slot, or -1; *oldest_us receives the arrival of its first
 * record (the flush deadline is that plus max_delay_ms). */
int batch_filling(const batch_t *b, uint64_t *oldest_us);

/* Moves the FILLING slot (there must be one, with >= 1 record) to IN FLIGHT
 * and returns its record count. */
int batch_submit(batch_t *b, int slot);

/* IN FLIGHT -> DONE, once the engine reports the slot complete. Returns
 * -EINVAL when the slot was not in flight (the caller's bug or a stray
 * completion). */
int batch_complete(batch_t *b, int slot);

/* DONE -> FREE once every record's result was handed on. */
void batch_release(batch_t *b, int slot);

batch_slot_state_t batch_slot_state(const batch_t *b, int slot);
int batch_slot_count(const batch_t *b, int slot);
batch_entry_t *batch_slot_entry(batch_t *b, int slot, int index);
/* Slots in flight (submitted, not yet complete). */
int batch_in_flight(const batch_t *b);
/* Records held in FILLING, IN FLIGHT or DONE slots. */
int batch_records_held(const batch_t *b);

/* --- the partition-ordered offset store --- */

typedef struct batch_offsets batch_offsets_t;

int batch_offsets_new(batch_offsets_t **ret);
void batch_offsets_free(batch_offsets_t *o);

/* Starts tracking topic/partition with a fresh id (> 0), replacing any
 * earlier tracking of it: acknowledgements that still carry the old id are
 * ignored. Returns the id, or -ENOMEM. */
int batch_offsets_assign(batch_offsets_t *o, const char *topic, int32_t partition);

/* Stops tracking it (revoked). Returns the records still pending there. */
int batch_offsets_revoke(batch_offsets_t *o, const char *topic, int32_t partition);

/* Records that offset as handed out. Returns the partition's id (> 0), or
 * -ENOENT when the partition is not assigned, -ESTALE when offset is not
 * above the last one tracked there (a rewind: the record is not tracked),
 * -ENOMEM. */
int batch_offsets_track(batch_offsets_t *o, const char *topic, int32_t partition, int64_t offset);

/* Whether that offset was handed out before in the partition's current
 * tracking (at or below the last one tracked): librdkafka gave the same
 * record out again without a rewind of the owner's, which would assign the
 * partition afresh. False for a partition not assigned. */
bool batch_offsets_taken(const batch_offsets_t *o, const char *topic, int32_t partition, int64_t offset);

/* Marks (id, offset) done. Returns 1 when the partition's committable
 * position moved: *topic, *partition and *next_offset then tell what to store
 * (the offset after the last record of the done prefix). Returns 0 when it
 * did not move, -ESTALE when id is no longer assigned (revoked since), and
 * -ENOENT when that offset is not pending there. */
int batch_offsets_done(batch_offsets_t *o, int id, int64_t offset, const char **topic, int32_t *partition,
                       int64_t *next_offset);

/* Whether id is still a partition's current id: false once the partition
 * was revoked or assigned again (a rewind) since the id was handed out. */
bool batch_offsets_current(const batch_offsets_t *o, int id);

/* Records tracked and not yet done, over every partition. */
size_t batch_offsets_pending(const batch_offsets_t *o);

/* Pending records of one partition (0 when not assigned). */
size_t batch_offsets_pending_in(const batch_offsets_t *o, const char *topic, int32_t partition);

#endif

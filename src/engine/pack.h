/* pack: how one batch's records are packed into a slot's input staging.
 *
 * Records are packed back to back in the order they are placed, each taking
 * only its own format's bytes: an rgb8 record 150,528 bytes (uint8 HWC), a
 * float32 CHW record 602,112. Both are multiples of PACK_ALIGN_BYTES, so
 * every record starts 256-byte aligned (the float32 view needs 4). The H2D
 * copy then carries just the bytes of the batch: at 50,000 rgb8 images/s,
 * 7.5 GB/s rather than the 30 GB/s of a fixed 602,112-byte place per record.
 *
 * The worst case is bounded by falling back, not by sizing for it: a slot's
 * input holds pack_capacity_bytes(batch) = (batch - 1) * 150,528 + 602,112
 * bytes, room for batch - 1 rgb8 records and one more of either format. A
 * slot takes another record only while that record would fit whatever its
 * format (pack_has_room), so a batch of rgb8 records fills all `batch` rows,
 * and a batch of float32 records closes early, at ceil(batch / 4) rows (a
 * mixed one in between): it is then submitted as it is. Staging a whole
 * batch of float32 records would need four times the pinned and device
 * bytes for a format that is the exception.
 *
 * Plain arithmetic on offsets: no allocation, no engine, no copying. */
#ifndef INFERD_PACK_H
#define INFERD_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/record.h"

#define PACK_ALIGN_BYTES ((uint64_t)256)

/* The packing state of one slot's batch. */
typedef struct pack {
        int max_rows;                   /* the plan's batch */
        int rows;                       /* records placed */
        uint64_t capacity_bytes;        /* pack_capacity_bytes(max_rows) */
        uint64_t used_bytes;            /* end of the last record placed */
} pack_t;

/* The bytes of one record of format f in the packed input: 150,528 for
 * RECORD_RGB8, 602,112 for RECORD_F32_CHW, 0 for anything else (not
 * runnable). */
size_t pack_row_bytes(record_format_t f);

/* A slot's packed input for a batch of `batch` records:
 * (batch - 1) * 150,528 + 602,112 bytes (a multiple of PACK_ALIGN_BYTES);
 * 0 for batch < 1. */
uint64_t pack_capacity_bytes(int batch);

/* An empty batch of at most max_rows records (>= 1). */
void pack_init(pack_t *p, int max_rows);

/* Whether one more record of either format fits: fewer than max_rows placed
 * and at least 602,112 bytes left. While this holds, pack_add cannot fail
 * for a runnable format. */
bool pack_has_room(const pack_t *p);

/* Places the next record, of format f: *offset receives where its bytes go
 * (from the start of the slot's input). Returns 0, -EINVAL for a format
 * that is not runnable, or -ENOSPC when it does not fit (nothing placed). */
int pack_add(pack_t *p, record_format_t f, uint64_t *offset);

#endif

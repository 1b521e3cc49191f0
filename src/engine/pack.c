/* pack: packing a batch's records by format. See pack.h for the layout and
 * the bound on the worst case. */
#include "engine/pack.h"

#include <assert.h>
#include <errno.h>

_Static_assert(RECORD_RGB8_BYTES % PACK_ALIGN_BYTES == 0, "rgb8 rows keep the packing aligned");
_Static_assert(RECORD_F32_CHW_BYTES % PACK_ALIGN_BYTES == 0, "float32 rows keep the packing aligned");

size_t pack_row_bytes(record_format_t f) {
        switch (f) {
        case RECORD_RGB8:
                return RECORD_RGB8_BYTES;
        case RECORD_F32_CHW:
                return RECORD_F32_CHW_BYTES;
        default:
                return 0;
        }
}

uint64_t pack_capacity_bytes(int batch) {
        if (batch < 1)
                return 0;
        return (uint64_t)(batch - 1) * RECORD_RGB8_BYTES + RECORD_MAX_BYTES;
}

void pack_init(pack_t *p, int max_rows) {
        assert(p && max_rows >= 1);
        *p = (pack_t){ .max_rows = max_rows, .capacity_bytes = pack_capacity_bytes(max_rows) };
}

bool pack_has_room(const pack_t *p) {
        return p->rows < p->max_rows && p->capacity_bytes - p->used_bytes >= RECORD_MAX_BYTES;
}

int pack_add(pack_t *p, record_format_t f, uint64_t *offset) {
        size_t bytes = pack_row_bytes(f);

        if (bytes == 0)
                return -EINVAL;
        if (p->rows >= p->max_rows || p->capacity_bytes - p->used_bytes < bytes)
                return -ENOSPC;
        *offset = p->used_bytes;
        p->used_bytes += bytes;
        p->rows++;
        return 0;
}

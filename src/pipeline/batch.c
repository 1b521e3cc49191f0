/* batch: slot states and the partition-ordered offset store. See batch.h.
 *
 * Plain arrays and one ring per partition; no Kafka, no engine, no clock of
 * its own (the caller passes the time), so the unit tests drive it directly.
 * Not thread-safe: the event loop owns it. */
#include "pipeline/batch.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct batch_slot {
        batch_slot_state_t state;
        int n;                  /* records packed */
        batch_entry_t *entries; /* (capacity) */
} batch_slot_t;

struct batch {
        int depth;
        int capacity;
        int limit;
        int filling;            /* slot index, or -1 */
        batch_slot_t *slots;    /* (depth) */
};

int batch_new(batch_t **ret, int depth, int capacity) {
        batch_t *b;
        int r = -ENOMEM;

        assert(ret);
        if (depth < 1 || capacity < 1)
                return -EINVAL;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->depth = depth;
        b->capacity = capacity;
        b->limit = capacity;
        b->filling = -1;
        b->slots = calloc((size_t)depth, sizeof(*b->slots));
        if (!b->slots)
                goto fail;
        for (int i = 0; i < depth; i++) {
                b->slots[i].entries = calloc((size_t)capacity, sizeof(batch_entry_t));
                if (!b->slots[i].entries)
                        goto fail;
        }
        *ret = b;
        return 0;
fail:
        batch_free(b);
        return r;
}

void batch_free(batch_t *b) {
        if (!b)
                return;
        if (b->slots)
                for (int i = 0; i < b->depth; i++)
                        free(b->slots[i].entries);
        free(b->slots);
        free(b);
}

int batch_depth(const batch_t *b) {
        return b->depth;
}

int batch_capacity(const batch_t *b) {
        return b->capacity;
}

int batch_set_limit(batch_t *b, int limit) {
        if (limit < 1)
                limit = 1;
        if (limit > b->capacity)
                limit = b->capacity;
        b->limit = limit;
        return limit;
}

int batch_limit(const batch_t *b) {
        return b->limit;
}

/* The slot batch_add would use, or -1. */
static int batch_target(const batch_t *b) {
        if (b->filling >= 0)
                return b->filling;
        for (int i = 0; i < b->depth; i++)
                if (b->slots[i].state == BATCH_SLOT_FREE)
                        return i;
        return -1;
}

bool batch_is_busy(const batch_t *b) {
        return batch_target(b) < 0;
}

int batch_add(batch_t *b, void *msg, uint64_t now_us, int *slot, int *index) {
        batch_slot_t *s;
        int t = batch_target(b);

        if (t < 0)
                return -ENOBUFS;
        s = &b->slots[t];
        if (s->state == BATCH_SLOT_FREE) {
                s->state = BATCH_SLOT_FILLING;
                s->n = 0;
                b->filling = t;
        }
        assert(s->state == BATCH_SLOT_FILLING && s->n < b->capacity);
        s->entries[s->n] = (batch_entry_t){ .msg = msg, .arrived_us = now_us };
        *slot = t;
        *index = s->n++;
        return s->n >= b->limit ? 1 : 0;
}

int batch_filling(const batch_t *b, uint64_t *oldest_us) {
        if (b->filling < 0)
                return -1;
        if (oldest_us)
                *oldest_us = b->slots[b->filling].entries[0].arrived_us;
        return b->filling;
}

int batch_submit(batch_t *b, int slot) {
        batch_slot_t *s;

        assert(slot >= 0 && slot < b->depth && slot == b->filling);
        s = &b->slots[slot];
        assert(s->state == BATCH_SLOT_FILLING && s->n > 0);
        s->state = BATCH_SLOT_IN_FLIGHT;
        b->filling = -1;
        return s->n;
}

int batch_complete(batch_t *b, int slot) {
        if (slot < 0 || slot >= b->depth || b->slots[slot].state != BATCH_SLOT_IN_FLIGHT)
                return -EINVAL;
        b->slots[slot].state = BATCH_SLOT_DONE;
        return 0;
}

void batch_release(batch_t *b, int slot) {
        assert(slot >= 0 && slot < b->depth && b->slots[slot].state == BATCH_SLOT_DONE);
        b->slots[slot].state = BATCH_SLOT_FREE;
        memset(b->slots[slot].entries, 0, (size_t)b->slots[slot].n * sizeof(batch_entry_t));
        b->slots[slot].n = 0;
}

batch_slot_state_t batch_slot_state(const batch_t *b, int slot) {
        assert(slot >= 0 && slot < b->depth);
        return b->slots[slot].state;
}

int batch_slot_count(const batch_t *b, int slot) {
        assert(slot >= 0 && slot < b->depth);
        return b->slots[slot].n;
}

batch_entry_t *batch_slot_entry(batch_t *b, int slot, int index) {
        assert(slot >= 0 && slot < b->depth && index >= 0 && index < b->slots[slot].n);
        return &b->slots[slot].entries[index];
}

int batch_in_flight(const batch_t *b) {
        int n = 0;

        for (int i = 0; i < b->depth; i++)
                n += b->slots[i].state == BATCH_SLOT_IN_FLIGHT;
        return n;
}

int batch_records_held(const batch_t *b) {
        int n = 0;

        for (int i = 0; i < b->depth; i++)
                if (b->slots[i].state != BATCH_SLOT_FREE)
                        n += b->slots[i].n;
        return n;
}

/* --- offsets --------------------------------------------------------------- */

typedef struct batch_pending {
        int64_t offset;
        bool done;
} batch_pending_t;

typedef struct batch_part {
        char *topic;
        int32_t partition;
        int id;
        int64_t last_tracked;   /* -1: none yet */
        batch_pending_t *ring;  /* (cap), a power of two */
        size_t cap, head, len;
} batch_part_t;

struct batch_offsets {
        batch_part_t *parts;    /* (n), unordered; assignments are small */
        size_t n, cap;
        int next_id;
        size_t pending;         /* not done, over all parts */
};

int batch_offsets_new(batch_offsets_t **ret) {
        batch_offsets_t *o = calloc(1, sizeof(*o));

        if (!o)
                return -ENOMEM;
        o->next_id = 1;
        *ret = o;
        return 0;
}

static void batch_part_clear(batch_part_t *p) {
        free(p->topic);
        free(p->ring);
}

void batch_offsets_free(batch_offsets_t *o) {
        if (!o)
                return;
        for (size_t i = 0; i < o->n; i++)
                batch_part_clear(&o->parts[i]);
        free(o->parts);
        free(o);
}

static batch_part_t *batch_offsets_find(const batch_offsets_t *o, const char *topic, int32_t partition) {
        for (size_t i = 0; i < o->n; i++)
                if (o->parts[i].partition == partition && strcmp(o->parts[i].topic, topic) == 0)
                        return &o->parts[i];
        return NULL;
}

static batch_part_t *batch_offsets_find_id(const batch_offsets_t *o, int id) {
        for (size_t i = 0; i < o->n; i++)
                if (o->parts[i].id == id)
                        return &o->parts[i];
        return NULL;
}

bool batch_offsets_current(const batch_offsets_t *o, int id) {
        return batch_offsets_find_id(o, id) != NULL;
}

static size_t batch_part_undone(const batch_part_t *p) {
        size_t n = 0;

        for (size_t i = 0; i < p->len; i++)
                n += !p->ring[(p->head + i) & (p->cap - 1)].done;
        return n;
}

int batch_offsets_revoke(batch_offsets_t *o, const char *topic, int32_t partition) {
        batch_part_t *p = batch_offsets_find(o, topic, partition);
        size_t undone;

        if (!p)
                return 0;
        undone = batch_part_undone(p);
        o->pending -= undone;
        batch_part_clear(p);
        *p = o->parts[--o->n];
        return (int)undone;
}

int batch_offsets_assign(batch_offsets_t *o, const char *topic, int32_t partition) {
        batch_part_t *p;

        batch_offsets_revoke(o, topic, partition);
        if (o->n == o->cap) {
                size_t cap = o->cap ? o->cap * 2 : 16;
                batch_part_t *parts = realloc(o->parts, cap * sizeof(*parts));

                if (!parts)
                        return -ENOMEM;
                o->parts = parts;
                o->cap = cap;
        }
        p = &o->parts[o->n];
        *p = (batch_part_t){ .partition = partition, .last_tracked = -1, .cap = 64 };
        p->topic = strdup(topic);
        p->ring = calloc(p->cap, sizeof(*p->ring));
        if (!p->topic || !p->ring) {
                batch_part_clear(p);
                return -ENOMEM;
        }
        p->id = o->next_id++;
        if (o->next_id <= 0)    /* wrapped after 2^31 assignments: ids stay > 0 */
                o->next_id = 1;
        o->n++;
        return p->id;
}

/* Doubles the ring, keeping the order. */
static int batch_part_grow(batch_part_t *p) {
        size_t cap = p->cap * 2;
        batch_pending_t *ring = malloc(cap * sizeof(*ring));

        if (!ring)
                return -ENOMEM;
        for (size_t i = 0; i < p->len; i++)
                ring[i] = p->ring[(p->head + i) & (p->cap - 1)];
        free(p->ring);
        p->ring = ring;
        p->cap = cap;
        p->head = 0;
        return 0;
}

int batch_offsets_track(batch_offsets_t *o, const char *topic, int32_t partition, int64_t offset) {
        batch_part_t *p = batch_offsets_find(o, topic, partition);

        if (!p)
                return -ENOENT;
        if (offset <= p->last_tracked)
                return -ESTALE;
        if (p->len == p->cap && batch_part_grow(p) < 0)
                return -ENOMEM;
        p->ring[(p->head + p->len) & (p->cap - 1)] = (batch_pending_t){ .offset = offset };
        p->len++;
        p->last_tracked = offset;
        o->pending++;
        return p->id;
}

bool batch_offsets_taken(const batch_offsets_t *o, const char *topic, int32_t partition, int64_t offset) {
        const batch_part_t *p = batch_offsets_find(o, topic, partition);

        return p && offset <= p->last_tracked;
}

int batch_offsets_done(batch_offsets_t *o, int id, int64_t offset, const char **topic, int32_t *partition,
                       int64_t *next_offset) {
        batch_part_t *p = batch_offsets_find_id(o, id);
        size_t lo = 0, hi, mask;
        int64_t last = -1;

        if (!p)
                return -ESTALE;
        mask = p->cap - 1;
        hi = p->len;
        /* The ring holds ascending offsets: binary search. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (p->ring[(p->head + mid) & mask].offset < offset)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == p->len || p->ring[(p->head + lo) & mask].offset != offset || p->ring[(p->head + lo) & mask].done)
                return -ENOENT;
        p->ring[(p->head + lo) & mask].done = true;
        o->pending--;

        while (p->len > 0 && p->ring[p->head].done) {
                last = p->ring[p->head].offset;
                p->head = (p->head + 1) & mask;
                p->len--;
        }
        if (last < 0)
                return 0;
        *topic = p->topic;
        *partition = p->partition;
        *next_offset = last + 1;
        return 1;
}

size_t batch_offsets_pending(const batch_offsets_t *o) {
        return o->pending;
}

size_t batch_offsets_pending_in(const batch_offsets_t *o, const char *topic, int32_t partition) {
        const batch_part_t *p = batch_offsets_find(o, topic, partition);

        return p ? batch_part_undone(p) : 0;
}

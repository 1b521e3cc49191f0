/* cache: the result cache of [cache] entries, a fixed table of keys to
 * values of one size, with least-recently-used eviction.
 *
 * A key is 32 bytes, the SHA-256 of a record's value and of a context
 * string naming what else its result depends on (cache_key_of); a value is
 * value_bytes the caller writes and reads (the
 * engine's result for one record). Every byte is allocated by cache_new, in
 * one block whose size cache_bytes gives (the plan's "cache" term counts the
 * same: core/plan.h, plan_cache_bytes); nothing is allocated afterwards, so
 * shrinking, emptying and a new value size (a model swap) carve the same
 * block again.
 *
 * Not here: the context's text, when a value is put (only a result that
 * became a prediction), the metrics: the pipeline's (pipeline.c,
 * pipeline_produce.c). Not thread-safe: the loop's alone. */
#ifndef INFERD_CACHE_H
#define INFERD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_KEY_BYTES 32

/* Per entry beside its value: the key and four int32 links (the bucket's
 * head, the chain, the LRU list's two). plan.h's PLAN_CACHE_ENTRY_BYTES is
 * the same figure (pipeline.c asserts it). */
#define CACHE_ENTRY_OVERHEAD_BYTES (CACHE_KEY_BYTES + 4 * sizeof(int32_t))

typedef struct cache_key {
        unsigned char b[CACHE_KEY_BYTES];
} cache_key_t;

typedef struct cache cache_t;

/* The bytes of a cache of entries values of value_bytes each. */
uint64_t cache_bytes(int entries, size_t value_bytes);

/* A cache of up to entries (>= 1) values of value_bytes (a multiple of 4,
 * >= 4). 0 or -ENOMEM. */
int cache_new(cache_t **ret, int entries, size_t value_bytes);

/* cache_free(NULL) is a no-op. */
void cache_free(cache_t *c);

/* k = SHA-256 of value (len bytes), a NUL and context (a string naming
 * what else the value's result depends on). 0, or -EIO from libcrypto. */
int cache_key_of(cache_t *c, const void *value, size_t len, const char *context, cache_key_t *k);

/* The value under k, made the most recently used; NULL: not there. The
 * pointer is valid until the next cache_put, cache_clear, cache_resize or
 * cache_reshape. */
const void *cache_get(cache_t *c, const cache_key_t *k);

/* Where to write k's value (value_bytes): k's own entry when it is there,
 * else a new one, evicting the least recently used when the cache is full.
 * The entry is the most recently used. NULL when the cache holds nothing
 * (its limit is 0). */
void *cache_put(cache_t *c, const cache_key_t *k);

/* Empties it. */
void cache_clear(cache_t *c);

/* Empties it and holds at most entries from now on. -ENOSPC (nothing
 * changed) above cache_room: the block was made for fewer. */
int cache_resize(cache_t *c, int entries);

/* Empties it for values of value_bytes (a model swap's new result size):
 * its room becomes what the block holds of them, and its limit the one
 * asked for last (cache_new, cache_resize) within that room. 0 or -ENOSPC
 * (a value larger than the block; nothing changed). */
int cache_reshape(cache_t *c, size_t value_bytes);

/* Values held now; the most it holds (its limit); the most the block
 * holds at this value size (a resize may go up to it). */
int cache_entries(const cache_t *c);
int cache_limit(const cache_t *c);
int cache_room(const cache_t *c);

#endif

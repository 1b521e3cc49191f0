/* cache: a fixed table of 32-byte keys to fixed-size values, least
 * recently used out first. See cache.h.
 *
 * One block, carved for the room it has at this value size (n entries):
 *
 *   int32 bucket[n]     the first entry of each bucket's chain (-1: none)
 *   int32 chain[n]      the next entry of the same bucket (-1: end)
 *   int32 newer[n], older[n]   the LRU list, newest at mru, oldest at lru
 *   key[n]              CACHE_KEY_BYTES each
 *   value[n]            value_bytes each (4-byte aligned: the int32s and
 *                       keys before them are multiples of 4)
 *
 * Entries are used in index order until the limit is reached; then the
 * oldest is taken for the new key. Nothing is removed alone, so there is no
 * free list: emptying sets every bucket to -1 and the count to 0. A key is
 * a SHA-256 digest, so its first 8 bytes spread the buckets as well as any
 * hash would. Chained rather than open-addressed: an eviction unlinks one
 * entry from its short chain, with no tombstones. */
#include "pipeline/cache.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

struct cache {
        unsigned char *block;   /* owned; block_bytes */
        uint64_t block_bytes;
        size_t value_bytes;
        int room;               /* entries the block holds at value_bytes (and buckets) */
        int want;               /* the limit asked for (cache_new, cache_resize) */
        int limit;              /* entries held at most: want, within room */
        int used;               /* entries 0..used-1 hold a key */
        int mru, lru;           /* newest and oldest entry; -1 when empty */
        int32_t *bucket, *chain, *newer, *older;
        cache_key_t *keys;
        unsigned char *values;
        EVP_MD *sha256;         /* owned: fetched once */
        EVP_MD_CTX *md;         /* owned: reused for every key (no allocation per record) */
};

uint64_t cache_bytes(int entries, size_t value_bytes) {
        return entries > 0 ? (uint64_t)entries * (CACHE_ENTRY_OVERHEAD_BYTES + value_bytes) : 0;
}

/* Carves the block for value_bytes and empties the table. */
static void cache_carve(cache_t *c, size_t value_bytes) {
        size_t n;

        c->value_bytes = value_bytes;
        c->room = (int)(c->block_bytes / (CACHE_ENTRY_OVERHEAD_BYTES + value_bytes));
        n = (size_t)c->room;
        c->bucket = (int32_t *)c->block;
        c->chain = c->bucket + n;
        c->newer = c->chain + n;
        c->older = c->newer + n;
        c->keys = (cache_key_t *)(c->older + n);
        c->values = (unsigned char *)(c->keys + n);
        c->limit = c->want < c->room ? c->want : c->room;
        cache_clear(c);
}

int cache_new(cache_t **ret, int entries, size_t value_bytes) {
        cache_t *c;

        assert(entries >= 1 && value_bytes >= 4 && value_bytes % 4 == 0);
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->block_bytes = cache_bytes(entries, value_bytes);
        c->block = malloc(c->block_bytes);
        c->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
        c->md = EVP_MD_CTX_new();
        if (!c->block || !c->sha256 || !c->md) {
                cache_free(c);
                return -ENOMEM;
        }
        c->want = entries;
        cache_carve(c, value_bytes);
        assert(c->room == entries);
        *ret = c;
        return 0;
}

void cache_free(cache_t *c) {
        if (!c)
                return;
        EVP_MD_CTX_free(c->md);
        EVP_MD_free(c->sha256);
        free(c->block);
        free(c);
}

int cache_key_of(cache_t *c, const void *value, size_t len, const char *context, cache_key_t *k) {
        unsigned int n = 0;

        /* The NUL between them: no value and context run into another's. */
        if (!EVP_DigestInit_ex(c->md, c->sha256, NULL) || !EVP_DigestUpdate(c->md, value, len) ||
            !EVP_DigestUpdate(c->md, "", 1) || !EVP_DigestUpdate(c->md, context, strlen(context)) ||
            !EVP_DigestFinal_ex(c->md, k->b, &n) || n != CACHE_KEY_BYTES)
                return -EIO;
        return 0;
}

static int cache_bucket_of(const cache_t *c, const cache_key_t *k) {
        uint64_t h;

        memcpy(&h, k->b, sizeof(h));
        return (int)(h % (uint64_t)c->room);
}

static void cache_lru_unlink(cache_t *c, int i) {
        if (c->newer[i] >= 0)
                c->older[c->newer[i]] = c->older[i];
        else
                c->mru = c->older[i];
        if (c->older[i] >= 0)
                c->newer[c->older[i]] = c->newer[i];
        else
                c->lru = c->newer[i];
}

static void cache_lru_push(cache_t *c, int i) {
        c->newer[i] = -1;
        c->older[i] = c->mru;
        if (c->mru >= 0)
                c->newer[c->mru] = i;
        c->mru = i;
        if (c->lru < 0)
                c->lru = i;
}

/* The entry holding k, or -1. */
static int cache_find(const cache_t *c, const cache_key_t *k) {
        if (c->used == 0)
                return -1;
        for (int i = c->bucket[cache_bucket_of(c, k)]; i >= 0; i = c->chain[i])
                if (memcmp(c->keys[i].b, k->b, CACHE_KEY_BYTES) == 0)
                        return i;
        return -1;
}

const void *cache_get(cache_t *c, const cache_key_t *k) {
        int i = cache_find(c, k);

        if (i < 0)
                return NULL;
        if (c->mru != i) {
                cache_lru_unlink(c, i);
                cache_lru_push(c, i);
        }
        return c->values + (size_t)i * c->value_bytes;
}

/* Takes the oldest entry out of its bucket's chain and the LRU list. */
static int cache_evict(cache_t *c) {
        int i = c->lru, b;
        int32_t *at;

        assert(i >= 0);
        b = cache_bucket_of(c, &c->keys[i]);
        for (at = &c->bucket[b]; *at != i; at = &c->chain[*at])
                assert(*at >= 0);
        *at = c->chain[i];
        cache_lru_unlink(c, i);
        return i;
}

void *cache_put(cache_t *c, const cache_key_t *k) {
        int i, b;

        if (c->limit == 0)
                return NULL;
        i = cache_find(c, k);
        if (i >= 0) {
                cache_get(c, k);        /* the newest */
                return c->values + (size_t)i * c->value_bytes;
        }
        i = c->used < c->limit ? c->used++ : cache_evict(c);
        c->keys[i] = *k;
        b = cache_bucket_of(c, k);
        c->chain[i] = c->bucket[b];
        c->bucket[b] = i;
        cache_lru_push(c, i);
        return c->values + (size_t)i * c->value_bytes;
}

void cache_clear(cache_t *c) {
        for (int i = 0; i < c->room; i++)
                c->bucket[i] = -1;
        c->used = 0;
        c->mru = c->lru = -1;
}

int cache_resize(cache_t *c, int entries) {
        if (entries < 0 || entries > c->room)
                return -ENOSPC;
        c->want = c->limit = entries;
        cache_clear(c);
        return 0;
}

int cache_reshape(cache_t *c, size_t value_bytes) {
        assert(value_bytes >= 4 && value_bytes % 4 == 0);
        if (c->block_bytes / (CACHE_ENTRY_OVERHEAD_BYTES + value_bytes) < 1)
                return -ENOSPC;
        cache_carve(c, value_bytes);
        return 0;
}

int cache_entries(const cache_t *c) {
        return c ? c->used : 0;
}

int cache_limit(const cache_t *c) {
        return c ? c->limit : 0;
}

int cache_room(const cache_t *c) {
        return c ? c->room : 0;
}

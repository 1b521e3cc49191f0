/* Unit tests of cache_, the result cache's table (pipeline/cache.h): a hit
 * gives back what was put, a miss gives nothing, the least recently used goes
 * first, keys differ with their context, emptying, resizing within the
 * block and a new value size (a model swap), and the block's size. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "pipeline/cache.h"
#include "unit.h"

#define VALUE_BYTES 16

/* A key from a small number, as a digest would spread it (the bucket is
 * its first 8 bytes). */
static cache_key_t key_n(int n) {
        cache_key_t k;
        uint64_t s = (uint64_t)n * 0x9e3779b97f4a7c15ULL + 1;

        for (int i = 0; i < CACHE_KEY_BYTES; i += 8) {
                uint64_t v = unit_rand_u64(&s);

                memcpy(k.b + i, &v, 8);
        }
        return k;
}

static void put_n(cache_t *c, int n) {
        cache_key_t k = key_n(n);
        int32_t *v = cache_put(c, &k);

        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        for (int i = 0; i < VALUE_BYTES / 4; i++)
                v[i] = n * 10 + i;
}

/* Whether n is there with the value put_n wrote. */
static bool has_n(cache_t *c, int n) {
        cache_key_t k = key_n(n);
        const int32_t *v = cache_get(c, &k);

        if (!v)
                return false;
        for (int i = 0; i < VALUE_BYTES / 4; i++)
                CU_ASSERT_EQUAL(v[i], n * 10 + i);
        return true;
}

static void test_cache_hit_and_miss(void) {
        cache_t *c;

        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 8, VALUE_BYTES), 0);
        CU_ASSERT_EQUAL(cache_entries(c), 0);
        CU_ASSERT_FALSE(has_n(c, 1));
        put_n(c, 1);
        put_n(c, 2);
        CU_ASSERT_TRUE(has_n(c, 1));
        CU_ASSERT_TRUE(has_n(c, 2));
        CU_ASSERT_FALSE(has_n(c, 3));
        CU_ASSERT_EQUAL(cache_entries(c), 2);
        /* Put again: the same entry, written over. */
        put_n(c, 1);
        CU_ASSERT_EQUAL(cache_entries(c), 2);
        CU_ASSERT_EQUAL(cache_limit(c), 8);
        CU_ASSERT_EQUAL(cache_room(c), 8);
        cache_free(c);
        cache_free(NULL);
}

/* Full, the least recently used goes: a get makes an entry the newest. */
static void test_cache_eviction_order(void) {
        cache_t *c;

        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 3, VALUE_BYTES), 0);
        put_n(c, 1);
        put_n(c, 2);
        put_n(c, 3);
        CU_ASSERT_TRUE(has_n(c, 1));    /* order now (oldest first): 2 3 1 */
        put_n(c, 4);                    /* 2 goes */
        CU_ASSERT_EQUAL(cache_entries(c), 3);
        CU_ASSERT_FALSE(has_n(c, 2));
        CU_ASSERT_TRUE(has_n(c, 3));    /* 1 4 3 */
        put_n(c, 5);                    /* 1 goes */
        CU_ASSERT_FALSE(has_n(c, 1));
        CU_ASSERT_TRUE(has_n(c, 4));
        CU_ASSERT_TRUE(has_n(c, 5));
        CU_ASSERT_TRUE(has_n(c, 3));
        /* Many more than it holds, through every bucket: the last 3 stay. */
        for (int n = 100; n < 1100; n++)
                put_n(c, n);
        CU_ASSERT_EQUAL(cache_entries(c), 3);
        for (int n = 100; n < 1097; n++)
                CU_ASSERT_FALSE(has_n(c, n));
        for (int n = 1097; n < 1100; n++)
                CU_ASSERT_TRUE(has_n(c, n));
        cache_free(c);
}

/* The key is the value's and its context's: another model, preprocessing
 * or output kind is another key; the same bytes and context the same key. */
static void test_cache_key_includes_context(void) {
        static unsigned char img[150528];
        cache_key_t a, b, c2, d, e;
        cache_t *c;

        for (size_t i = 0; i < sizeof(img); i++)
                img[i] = (unsigned char)(i * 7);
        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 2, VALUE_BYTES), 0);
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:aa;kind=classes;fast=no", &a), 0);
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:aa;kind=classes;fast=no", &b), 0);
        CU_ASSERT_EQUAL(memcmp(a.b, b.b, CACHE_KEY_BYTES), 0);
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:ab;kind=classes;fast=no", &c2), 0);
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:aa;kind=both;fast=no", &d), 0);
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:aa;kind=classes;fast=yes", &e), 0);
        CU_ASSERT_NOT_EQUAL(memcmp(a.b, c2.b, CACHE_KEY_BYTES), 0);
        CU_ASSERT_NOT_EQUAL(memcmp(a.b, d.b, CACHE_KEY_BYTES), 0);
        CU_ASSERT_NOT_EQUAL(memcmp(a.b, e.b, CACHE_KEY_BYTES), 0);
        /* One byte of the value. */
        img[75000] ^= 1;
        CU_ASSERT_EQUAL(cache_key_of(c, img, sizeof(img), "model=sha256:aa;kind=classes;fast=no", &b), 0);
        CU_ASSERT_NOT_EQUAL(memcmp(a.b, b.b, CACHE_KEY_BYTES), 0);
        /* A put under one key is no hit under another. */
        CU_ASSERT_PTR_NOT_NULL(cache_put(c, &a));
        CU_ASSERT_PTR_NOT_NULL(cache_get(c, &a));
        CU_ASSERT_PTR_NULL(cache_get(c, &d));
        CU_ASSERT_PTR_NULL(cache_get(c, &c2));
        cache_free(c);
}

static void test_cache_empty(void) {
        cache_t *c;

        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 4, VALUE_BYTES), 0);
        for (int n = 0; n < 4; n++)
                put_n(c, n);
        cache_clear(c);
        CU_ASSERT_EQUAL(cache_entries(c), 0);
        for (int n = 0; n < 4; n++)
                CU_ASSERT_FALSE(has_n(c, n));
        /* Used again from empty, evicting in order. */
        for (int n = 10; n < 15; n++)
                put_n(c, n);
        CU_ASSERT_FALSE(has_n(c, 10));
        CU_ASSERT_TRUE(has_n(c, 11));
        CU_ASSERT_TRUE(has_n(c, 14));
        cache_free(c);
}

/* Shrink, empty (0: off) and grow back within the block; never above it. */
static void test_cache_resize(void) {
        cache_t *c;

        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 4, VALUE_BYTES), 0);
        put_n(c, 1);
        CU_ASSERT_EQUAL(cache_resize(c, 5), -ENOSPC);
        CU_ASSERT_TRUE(has_n(c, 1));    /* refused: nothing changed */
        CU_ASSERT_EQUAL(cache_resize(c, 2), 0);
        CU_ASSERT_EQUAL(cache_limit(c), 2);
        CU_ASSERT_EQUAL(cache_entries(c), 0);
        for (int n = 1; n <= 3; n++)
                put_n(c, n);
        CU_ASSERT_EQUAL(cache_entries(c), 2);
        CU_ASSERT_FALSE(has_n(c, 1));
        CU_ASSERT_EQUAL(cache_resize(c, 0), 0);
        CU_ASSERT_PTR_NULL(cache_put(c, &(cache_key_t){}));
        CU_ASSERT_EQUAL(cache_entries(c), 0);
        CU_ASSERT_EQUAL(cache_resize(c, 4), 0);
        for (int n = 1; n <= 4; n++)
                put_n(c, n);
        for (int n = 1; n <= 4; n++)
                CU_ASSERT_TRUE(has_n(c, n));
        cache_free(c);
}

/* A model swap's new result size carves the same block: more entries of a
 * smaller value, up to the limit asked for; fewer of a larger one. */
static void test_cache_reshape(void) {
        cache_t *c;

        CU_ASSERT_EQUAL(cache_bytes(0, 64), 0);
        CU_ASSERT_EQUAL(cache_bytes(10, 64), 10 * (CACHE_ENTRY_OVERHEAD_BYTES + 64));
        CU_ASSERT_EQUAL_FATAL(cache_new(&c, 10, 64), 0);
        put_n(c, 1);
        CU_ASSERT_EQUAL(cache_reshape(c, 4), 0);
        CU_ASSERT_EQUAL(cache_entries(c), 0);
        CU_ASSERT(cache_room(c) > 10);
        CU_ASSERT_EQUAL(cache_limit(c), 10);
        CU_ASSERT_EQUAL(cache_reshape(c, 2 * 64 + 2 * CACHE_ENTRY_OVERHEAD_BYTES), 0);
        CU_ASSERT_EQUAL(cache_room(c), 10 * (CACHE_ENTRY_OVERHEAD_BYTES + 64) /
                                               (3 * CACHE_ENTRY_OVERHEAD_BYTES + 2 * 64));
        CU_ASSERT_EQUAL(cache_limit(c), cache_room(c));
        CU_ASSERT_EQUAL(cache_reshape(c, 64 * 1024), -ENOSPC);
        /* Back to the first size: the limit asked for again. */
        CU_ASSERT_EQUAL(cache_reshape(c, 64), 0);
        CU_ASSERT_EQUAL(cache_room(c), 10);
        CU_ASSERT_EQUAL(cache_limit(c), 10);
        cache_free(c);
        CU_ASSERT_EQUAL(cache_entries(NULL) + cache_limit(NULL) + cache_room(NULL), 0);
}

int test_cache_register(void) {
        static CU_TestInfo tests[] = {
                { "hit_and_miss", test_cache_hit_and_miss },
                { "eviction_order", test_cache_eviction_order },
                { "key_includes_context", test_cache_key_includes_context },
                { "empty", test_cache_empty },
                { "resize", test_cache_resize },
                { "reshape", test_cache_reshape },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("cache", tests);
}

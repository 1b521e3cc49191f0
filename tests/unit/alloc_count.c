/* alloc_count: the unit-tests binary's allocator, counting while asked
 * (alloc_count.h). Every function forwards to glibc's own; only the counts
 * are ours. */
#include "alloc_count.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* glibc's allocator under its exported internal names. */
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

static atomic_bool alloc_counting;
static atomic_uint_fast64_t alloc_calls, alloc_bytes, alloc_largest;
static atomic_int_fast64_t alloc_live;

static void alloc_count_one(size_t size) {
        uint_fast64_t big;

        if (!atomic_load_explicit(&alloc_counting, memory_order_relaxed))
                return;
        atomic_fetch_add(&alloc_calls, 1);
        atomic_fetch_add(&alloc_live, 1);
        atomic_fetch_add(&alloc_bytes, size);
        big = atomic_load(&alloc_largest);
        while (size > big && !atomic_compare_exchange_weak(&alloc_largest, &big, size))
                ;
}

void alloc_count_start(void) {
        atomic_store(&alloc_calls, 0);
        atomic_store(&alloc_bytes, 0);
        atomic_store(&alloc_largest, 0);
        atomic_store(&alloc_live, 0);
        atomic_store(&alloc_counting, true);
}

void alloc_count_stop(alloc_count_t *ret) {
        atomic_store(&alloc_counting, false);
        ret->calls = atomic_load(&alloc_calls);
        ret->bytes = atomic_load(&alloc_bytes);
        ret->largest_bytes = atomic_load(&alloc_largest);
        ret->live = atomic_load(&alloc_live);
}

void *malloc(size_t size) {
        alloc_count_one(size);
        return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
        alloc_count_one(n * size);
        return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
        alloc_count_one(size);
        if (p && atomic_load_explicit(&alloc_counting, memory_order_relaxed))
                atomic_fetch_sub(&alloc_live, 1);       /* the same block, moved or grown */
        return __libc_realloc(p, size);
}

void free(void *p) {
        if (p && atomic_load_explicit(&alloc_counting, memory_order_relaxed))
                atomic_fetch_sub(&alloc_live, 1);
        __libc_free(p);
}

void *memalign(size_t align, size_t size) {
        alloc_count_one(size);
        return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size) {
        alloc_count_one(size);
        return __libc_memalign(align, size);
}

int posix_memalign(void **ret, size_t align, size_t size) {
        void *p;

        if (align < sizeof(void *) || (align & (align - 1)))
                return EINVAL;
        alloc_count_one(size);
        p = __libc_memalign(align, size);
        if (!p)
                return ENOMEM;
        *ret = p;
        return 0;
}

void *valloc(size_t size) {
        alloc_count_one(size);
        return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size);
}

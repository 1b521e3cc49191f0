/* alloc_count: counts the heap allocations of the whole process (every
 * thread: the engine's worker, oneDNN's OpenMP threads) between
 * alloc_count_start and alloc_count_stop, for the tests that check that
 * nothing is allocated after open.
 *
 * The unit-tests binary defines malloc, calloc, realloc, free and the
 * aligned allocators itself (alloc_count.c), forwarding to glibc's
 * __libc_* functions; the shared libraries (oneDNN, OpenBLAS, libgomp)
 * resolve to them as to any interposed allocator. While stopped they only
 * forward. Not for production code: a test's instrument. */
#ifndef INFERD_TEST_ALLOC_COUNT_H
#define INFERD_TEST_ALLOC_COUNT_H

#include <stddef.h>
#include <stdint.h>

typedef struct alloc_count {
        uint64_t calls;         /* malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc */
        uint64_t bytes;         /* asked for, all calls together */
        uint64_t largest_bytes; /* the largest single request */
        int64_t live;           /* blocks allocated less blocks freed (a realloc of a block is neither) */
} alloc_count_t;

void alloc_count_start(void);
/* The counts since alloc_count_start; counting stops. */
void alloc_count_stop(alloc_count_t *ret);

#endif

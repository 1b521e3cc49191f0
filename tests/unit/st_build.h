/* A safetensors writer for the unit tests: lays out tensors given by name,
 * dtype string, shape and raw bytes into one file image in memory, so that
 * suites can craft valid and malformed weights files without Python. */
#ifndef INFERD_TEST_ST_BUILD_H
#define INFERD_TEST_ST_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_build_tensor {
        const char *name;
        const char *dtype;      /* "F32", "BF16", "I32", ... written as given */
        unsigned ndim;
        int64_t shape[4];
        const void *data;       /* nbytes bytes, copied */
        size_t nbytes;
} st_build_tensor_t;

/* Writes a file image of the n tensors, contiguous in the given order, into
 * a malloc'd buffer (*ret, *len). Returns 0 or -ENOMEM. */
int st_build(const st_build_tensor_t *t, size_t n, unsigned char **ret, size_t *len);

/* Writes the image to a new file in dir named name; returns a malloc'd path or NULL. */
char *st_build_write(const char *dir, const char *name, const unsigned char *img, size_t len);

#endif

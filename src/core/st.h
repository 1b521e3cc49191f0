/* st: a safetensors reader.
 *
 * It maps a file read-only (or wraps a caller's buffer, for the fuzzer), parses
 * the JSON header with jansson and validates the layout the way the reference
 * reader does: an 8-byte little-endian header length capped at
 * ST_HEADER_MAX_BYTES, a JSON object of tensors (plus an optional
 * "__metadata__" map of strings), known dtypes, shapes whose byte size
 * (with overflow guards) equals each tensor's [begin, end) range, ranges that
 * are contiguous from 0 in file order with no overlap and no hole, and a data
 * section that ends exactly at the end of the file.
 *
 * It does not know about ResNet-50 or any tensor names (that is model_), and
 * it converts only the floating dtypes the model accepts (F32, F16, BF16).
 * Every failure returns a negative errno and leaves one sentence naming the
 * file (and the tensor, when there is one) in the errbuf_t. */
#ifndef INFERD_ST_H
#define INFERD_ST_H

#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"

#define ST_HEADER_MAX_BYTES ((uint64_t)100 * 1000 * 1000)
#define ST_MAX_DIMS 8

typedef enum st_dtype {
        ST_BOOL,
        ST_U8,
        ST_I8,
        ST_F8_E4M3,
        ST_F8_E5M2,
        ST_I16,
        ST_U16,
        ST_F16,
        ST_BF16,
        ST_I32,
        ST_U32,
        ST_F32,
        ST_F64,
        ST_I64,
        ST_U64,
        ST_DTYPE_COUNT,
} st_dtype_t;

typedef struct st_tensor {
        const char *name;       /* owned by the st_file_t */
        st_dtype_t dtype;
        unsigned ndim;          /* 0 for a scalar */
        int64_t shape[ST_MAX_DIMS];
        size_t numel;           /* product of shape (1 for a scalar) */
        size_t nbytes;          /* numel * st_dtype_bytes(dtype) */
        const void *data;       /* into the mapping, little-endian, may be unaligned */
} st_tensor_t;

typedef struct st_file st_file_t;

/* Maps and validates path. Returns 0, or -errno with a sentence in err
 * (-ENOENT/-EACCES for open failures, -EINVAL for a malformed file). */
int st_open(st_file_t **ret, const char *path, errbuf_t *err);

/* Validates a file image held in memory; name is used in messages only.
 * The buffer must outlive the st_file_t. For the fuzzer and unit tests. */
int st_open_buffer(st_file_t **ret, const char *name, const void *data, size_t len, errbuf_t *err);

/* NULL is a no-op. */
void st_free(st_file_t *f);

size_t st_count(const st_file_t *f);
/* Tensors in ascending data-offset order. */
const st_tensor_t *st_get(const st_file_t *f, size_t i);
/* NULL when there is no tensor of that name. */
const st_tensor_t *st_find(const st_file_t *f, const char *name);
/* The name given to st_open / st_open_buffer. */
const char *st_name(const st_file_t *f);

/* The whole file image (header and data), e.g. to hash it. */
const void *st_bytes(const st_file_t *f, size_t *len);

/* "F32", "BF16", ... */
const char *st_dtype_name(st_dtype_t d);
size_t st_dtype_bytes(st_dtype_t d);
/* True for F32, F16 and BF16: the dtypes st_to_float converts. */
int st_dtype_is_float(st_dtype_t d);

/* Converts all numel elements of an F32/F16/BF16 tensor to float (out holds
 * t->numel floats). Returns 0, or -EINVAL for another dtype. */
int st_to_float(const st_tensor_t *t, float *out);

#endif

/* st: the safetensors reader. See st.h for the contract.
 *
 * The layout it accepts is the reference (Rust) reader's: an 8-byte
 * little-endian header length N, N bytes of JSON (padding spaces allowed
 * after the object), then the data section, which the tensors tile exactly.
 * Every check happens here, at open time, so that st_get()/st_find() callers
 * can trust each tensor's data pointer and byte count without re-checking.
 *
 * It deliberately does not: copy tensor data (it points into the mapping or
 * the caller's buffer), convert integer or 8-bit float dtypes, expose the
 * "__metadata__" map (it is validated, then dropped), or write safetensors. */
#include "core/st.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_LEN_BYTES 8 /* the u64 header length that opens every file */

/* One tensor as parsed, with the offsets that the public view leaves out. */
typedef struct st_entry {
        st_tensor_t t;          /* t.name is owned (strdup) by this entry */
        uint64_t begin;         /* byte offsets into the data section, [begin, end) */
        uint64_t end;
} st_entry_t;

struct st_file {
        char *name;             /* owned copy, for messages and st_name() */
        const uint8_t *base;    /* the whole file image, len bytes */
        size_t len;
        bool mapped;            /* base is our mmap (st_open) rather than the caller's */
        st_entry_t *entries;    /* n entries, ascending by begin after parsing */
        size_t n;
};

static const struct {
        const char *name;
        size_t bytes;
} st_dtypes[ST_DTYPE_COUNT] = {
        [ST_BOOL] = { "BOOL", 1 },
        [ST_U8] = { "U8", 1 },
        [ST_I8] = { "I8", 1 },
        [ST_F8_E4M3] = { "F8_E4M3", 1 },
        [ST_F8_E5M2] = { "F8_E5M2", 1 },
        [ST_I16] = { "I16", 2 },
        [ST_U16] = { "U16", 2 },
        [ST_F16] = { "F16", 2 },
        [ST_BF16] = { "BF16", 2 },
        [ST_I32] = { "I32", 4 },
        [ST_U32] = { "U32", 4 },
        [ST_F32] = { "F32", 4 },
        [ST_F64] = { "F64", 8 },
        [ST_I64] = { "I64", 8 },
        [ST_U64] = { "U64", 8 },
};

const char *st_dtype_name(st_dtype_t d) {
        if ((unsigned)d >= ST_DTYPE_COUNT)
                return "?";
        return st_dtypes[d].name;
}

size_t st_dtype_bytes(st_dtype_t d) {
        if ((unsigned)d >= ST_DTYPE_COUNT)
                return 0;
        return st_dtypes[d].bytes;
}

int st_dtype_is_float(st_dtype_t d) {
        return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

/* Returns 0 and the dtype for its exact (case-sensitive) name, or -EINVAL. */
static int st_dtype_from_name(const char *s, st_dtype_t *ret) {
        for (unsigned i = 0; i < ST_DTYPE_COUNT; i++)
                if (strcmp(s, st_dtypes[i].name) == 0) {
                        *ret = (st_dtype_t)i;
                        return 0;
                }
        return -EINVAL;
}

void st_free(st_file_t *f) {
        if (!f)
                return;
        for (size_t i = 0; i < f->n; i++)
                free((char *)f->entries[i].t.name);
        free(f->entries);
        if (f->mapped && f->base)
                munmap((void *)f->base, f->len);
        free(f->name);
        free(f);
}

size_t st_count(const st_file_t *f) {
        return f->n;
}

const st_tensor_t *st_get(const st_file_t *f, size_t i) {
        if (i >= f->n)
                return NULL;
        return &f->entries[i].t;
}

/* Linear: a ResNet-50 file has ~320 tensors and the model looks each up once. */
const st_tensor_t *st_find(const st_file_t *f, const char *name) {
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->entries[i].t.name, name) == 0)
                        return &f->entries[i].t;
        return NULL;
}

const char *st_name(const st_file_t *f) {
        return f->name;
}

const void *st_bytes(const st_file_t *f, size_t *len) {
        if (len)
                *len = f->len;
        return f->base;
}

/* IEEE binary16 -> binary32, exact for every input (normals, subnormals,
 * signed zeros, infinities; NaN payloads are kept in the top mantissa bits). */
static float st_f16_to_float(uint16_t h) {
        uint32_t sign = (uint32_t)(h >> 15) << 31;
        uint32_t exp = (h >> 10) & 0x1f;
        uint32_t mant = h & 0x3ff;
        uint32_t bits;
        float f;

        if (exp == 0) {
                /* zero or subnormal: mant * 2^-24, exact in binary32 */
                f = (float)mant * 0x1p-24f;
                return sign ? -f : f;
        }
        if (exp == 0x1f)
                bits = sign | 0x7f800000u | (mant << 13);
        else
                bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
        memcpy(&f, &bits, sizeof(f));
        return f;
}

/* bfloat16 is the top half of a binary32. */
static float st_bf16_to_float(uint16_t h) {
        uint32_t bits = (uint32_t)h << 16;
        float f;

        memcpy(&f, &bits, sizeof(f));
        return f;
}

int st_to_float(const st_tensor_t *t, float *out) {
        const uint8_t *p = t->data;     /* (numel,) little-endian, maybe unaligned */
        uint16_t h;

        switch (t->dtype) {
        case ST_F32:
                if (t->numel > 0)
                        memcpy(out, p, t->numel * sizeof(float));
                return 0;
        case ST_F16:
                for (size_t i = 0; i < t->numel; i++) {
                        h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
                        out[i] = st_f16_to_float(h);
                }
                return 0;
        case ST_BF16:
                for (size_t i = 0; i < t->numel; i++) {
                        h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
                        out[i] = st_bf16_to_float(h);
                }
                return 0;
        default:
                return -EINVAL;
        }
}

/* Writes "[d0, d1, ...]" into buf, for messages. */
static const char *st_format_shape(char *buf, size_t size, const int64_t *shape, unsigned ndim) {
        size_t o = 0;
        int k;

        k = snprintf(buf, size, "[");
        o = k > 0 ? (size_t)k : 0;
        for (unsigned i = 0; i < ndim && o < size; i++) {
                k = snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
                if (k < 0)
                        break;
                o += (size_t)k;
        }
        if (o < size)
                snprintf(buf + o, size - o, "]");
        return buf;
}

/* Reads a JSON integer that must be >= 0; returns 0 or -EINVAL. */
static int st_json_uint(const json_t *v, uint64_t *ret) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return -EINVAL;
        *ret = (uint64_t)json_integer_value(v);
        return 0;
}

/* A short description of a JSON value that failed a check, for messages. */
static const char *st_json_describe(const json_t *v, char *buf, size_t size) {
        switch (json_typeof(v)) {
        case JSON_INTEGER:
                snprintf(buf, size, "%lld", (long long)json_integer_value(v));
                break;
        case JSON_REAL:
                snprintf(buf, size, "%g", json_real_value(v));
                break;
        case JSON_STRING:
                snprintf(buf, size, "\"%.64s\"", json_string_value(v));
                break;
        case JSON_OBJECT:
                snprintf(buf, size, "an object");
                break;
        case JSON_ARRAY:
                snprintf(buf, size, "an array");
                break;
        case JSON_TRUE:
        case JSON_FALSE:
                snprintf(buf, size, "a boolean");
                break;
        default:
                snprintf(buf, size, "null");
                break;
        }
        return buf;
}

/* Parses one tensor's {"dtype", "shape", "data_offsets"} object into e,
 * checking everything that does not depend on the other tensors. data_len is
 * the data section's length. */
static int st_parse_entry(const char *file, const char *name, const json_t *obj, uint64_t data_len,
                          st_entry_t *e, errbuf_t *err) {
        const json_t *dtype, *shape, *offsets, *v;
        const char *key;
        char what[96], sbuf[256];
        size_t numel = 1, nbytes, i;
        uint64_t dim;
        int r;

        if (!json_is_object(obj))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': entry is %s, not an object", file, name,
                                  st_json_describe(obj, what, sizeof(what)));
        json_object_foreach((json_t *)obj, key, v)
                if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "data_offsets") != 0)
                        return errbuf_set(err, -EINVAL, "%s: tensor '%s': unknown key '%.64s'", file, name, key);

        dtype = json_object_get(obj, "dtype");
        shape = json_object_get(obj, "shape");
        offsets = json_object_get(obj, "data_offsets");
        if (!dtype || !shape || !offsets)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': missing \"%s\"", file, name,
                                  !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

        if (!json_is_string(dtype))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': dtype is %s, not a string", file, name,
                                  st_json_describe(dtype, what, sizeof(what)));
        r = st_dtype_from_name(json_string_value(dtype), &e->t.dtype);
        if (r < 0)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': unknown dtype \"%.64s\"", file, name,
                                  json_string_value(dtype));

        if (!json_is_array(shape))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': shape is %s, not an array", file, name,
                                  st_json_describe(shape, what, sizeof(what)));
        if (json_array_size(shape) > ST_MAX_DIMS)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': shape has %zu dimensions, more than the %d supported",
                                  file, name, json_array_size(shape), ST_MAX_DIMS);
        e->t.ndim = (unsigned)json_array_size(shape);
        for (i = 0; i < e->t.ndim; i++) {
                v = json_array_get(shape, i);
                if (st_json_uint(v, &dim) < 0 || dim > INT64_MAX)
                        return errbuf_set(err, -EINVAL,
                                          "%s: tensor '%s': shape dimension %zu is %s, not a non-negative integer",
                                          file, name, i, st_json_describe(v, what, sizeof(what)));
                e->t.shape[i] = (int64_t)dim;
        }
        /* The product is taken in size_t with an overflow check at every step,
         * so no shape can wrap around to a small byte count. */
        for (i = 0; i < e->t.ndim; i++)
                if (__builtin_mul_overflow(numel, (uint64_t)e->t.shape[i], &numel))
                        return errbuf_set(err, -EINVAL, "%s: tensor '%s': shape %s has too many elements (overflow)",
                                          file, name, st_format_shape(sbuf, sizeof(sbuf), e->t.shape, e->t.ndim));
        if (__builtin_mul_overflow(numel, st_dtype_bytes(e->t.dtype), &nbytes))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': %s shape %s is too many bytes (overflow)", file, name,
                                  st_dtype_name(e->t.dtype), st_format_shape(sbuf, sizeof(sbuf), e->t.shape, e->t.ndim));
        e->t.numel = numel;
        e->t.nbytes = nbytes;

        if (!json_is_array(offsets))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': data_offsets is %s, not an array of 2 integers", file,
                                  name, st_json_describe(offsets, what, sizeof(what)));
        if (json_array_size(offsets) != 2)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': data_offsets has %zu elements, not 2", file, name,
                                  json_array_size(offsets));
        for (i = 0; i < 2; i++) {
                v = json_array_get(offsets, i);
                if (st_json_uint(v, i == 0 ? &e->begin : &e->end) < 0)
                        return errbuf_set(err, -EINVAL, "%s: tensor '%s': data_offsets[%zu] is %s, not a non-negative integer",
                                          file, name, i, st_json_describe(v, what, sizeof(what)));
        }
        if (e->begin > e->end)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s': data_offsets [%llu, %llu] are reversed", file, name,
                                  (unsigned long long)e->begin, (unsigned long long)e->end);
        if (e->end > data_len)
                return errbuf_set(err, -EINVAL,
                                  "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data section (%llu bytes)",
                                  file, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                                  (unsigned long long)data_len);
        if (e->end - e->begin != nbytes)
                return errbuf_set(err, -EINVAL,
                                  "%s: tensor '%s': %s shape %s needs %zu bytes but data_offsets [%llu, %llu] hold %llu",
                                  file, name, st_dtype_name(e->t.dtype),
                                  st_format_shape(sbuf, sizeof(sbuf), e->t.shape, e->t.ndim), nbytes,
                                  (unsigned long long)e->begin, (unsigned long long)e->end,
                                  (unsigned long long)(e->end - e->begin));
        return 0;
}

/* File order: by begin, then end (zero-byte tensors share a begin), then name. */
static int st_entry_cmp(const void *a, const void *b) {
        const st_entry_t *x = a, *y = b;

        if (x->begin != y->begin)
                return x->begin < y->begin ? -1 : 1;
        if (x->end != y->end)
                return x->end < y->end ? -1 : 1;
        return strcmp(x->t.name, y->t.name);
}

/* "__metadata__" is an optional map of strings to strings. */
static int st_check_metadata(const char *file, const json_t *meta, errbuf_t *err) {
        const char *key;
        const json_t *v;
        char what[96];

        if (!json_is_object(meta))
                return errbuf_set(err, -EINVAL, "%s: __metadata__ is %s, not an object of strings", file,
                                  st_json_describe(meta, what, sizeof(what)));
        json_object_foreach((json_t *)meta, key, v)
                if (!json_is_string(v))
                        return errbuf_set(err, -EINVAL, "%s: __metadata__ key '%.64s' is %s, not a string", file, key,
                                          st_json_describe(v, what, sizeof(what)));
        return 0;
}

/* jansson quotes a duplicate key in its message only when the key is short.
 * Its position is then just past the key's closing quote, so the key is
 * taken from the header itself (raw, escapes and all). Returns 0 when the
 * error is something else, for the generic message. */
static int st_duplicate_error(const char *file, const char *hdr, size_t n, const json_error_t *jerr, errbuf_t *err) {
        size_t end, start, k;

        if (json_error_code(jerr) != json_error_duplicate_key || jerr->position < 2 || (size_t)jerr->position > n ||
            hdr[jerr->position - 1] != '"')
                return 0;
        end = (size_t)jerr->position - 1;       /* the closing quote */
        for (start = end; start > 0;) {
                start--;
                if (hdr[start] != '"')
                        continue;
                for (k = start; k > 0 && hdr[k - 1] == '\\'; k--)
                        ;
                if ((start - k) % 2 == 0)
                        break;
        }
        if (start == end || hdr[start] != '"')
                return 0;
        return errbuf_set(err, -EINVAL, "%s: tensor '%.*s' appears twice in the header (duplicate key)", file,
                          (int)(end - start - 1 < 200 ? end - start - 1 : 200), hdr + start + 1);
}

/* Validates f->base/f->len and fills f->entries. On failure f keeps whatever
 * it had allocated, for st_free(). */
static int st_parse(st_file_t *f, errbuf_t *err) {
        const char *file = f->name;
        json_t *root = NULL;
        json_error_t jerr;
        const char *key;
        json_t *v;
        uint64_t n, data_len, expect = 0;
        const uint8_t *data;
        size_t cap;
        int r;

        if (f->len < ST_LEN_BYTES)
                return errbuf_set(err, -EINVAL, "%s: file is %zu bytes, too short for the 8-byte header length", file,
                                  f->len);
        n = 0;
        for (int i = ST_LEN_BYTES - 1; i >= 0; i--)
                n = (n << 8) | f->base[i];
        if (n > ST_HEADER_MAX_BYTES)
                return errbuf_set(err, -EINVAL, "%s: header length %llu is larger than the %llu-byte limit", file,
                                  (unsigned long long)n, (unsigned long long)ST_HEADER_MAX_BYTES);
        if (n > f->len - ST_LEN_BYTES)
                return errbuf_set(err, -EINVAL, "%s: header length %llu runs past the end of the file (%zu bytes)", file,
                                  (unsigned long long)n, f->len);
        data_len = f->len - ST_LEN_BYTES - n;
        data = f->base + ST_LEN_BYTES + n;

        /* json_loadb() takes a length, so the header needs no NUL; its EOF
         * check allows the trailing spaces writers pad the header with. */
        root = json_loadb((const char *)f->base + ST_LEN_BYTES, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                r = st_duplicate_error(file, (const char *)f->base + ST_LEN_BYTES, (size_t)n, &jerr, err);
                if (r < 0)
                        return r;
                return errbuf_set(err, -EINVAL, "%s: header is not valid JSON: %s (header byte %d)", file, jerr.text,
                                  jerr.position);
        }
        if (!json_is_object(root)) {
                r = errbuf_set(err, -EINVAL, "%s: header is a JSON %s, not an object", file,
                               json_is_array(root) ? "array" : "value");
                goto fail;
        }

        cap = json_object_size(root);
        f->entries = calloc(cap ? cap : 1, sizeof(*f->entries));
        if (!f->entries) {
                r = errbuf_set(err, -ENOMEM, "%s: out of memory for %zu tensors", file, cap);
                goto fail;
        }
        json_object_foreach(root, key, v) {
                st_entry_t *e;

                if (strcmp(key, "__metadata__") == 0) {
                        r = st_check_metadata(file, v, err);
                        if (r < 0)
                                goto fail;
                        continue;
                }
                if (key[0] == '\0') {
                        r = errbuf_set(err, -EINVAL, "%s: a tensor has an empty name", file);
                        goto fail;
                }
                assert(f->n < cap);
                e = &f->entries[f->n];
                r = st_parse_entry(file, key, v, data_len, e, err);
                if (r < 0)
                        goto fail;
                e->t.name = strdup(key);
                if (!e->t.name) {
                        r = errbuf_set(err, -ENOMEM, "%s: out of memory", file);
                        goto fail;
                }
                e->t.data = data + e->begin;
                f->n++;
        }

        /* Sorted by offset, the ranges must tile [0, data_len) exactly. */
        qsort(f->entries, f->n, sizeof(*f->entries), st_entry_cmp);
        for (size_t i = 0; i < f->n; i++) {
                const st_entry_t *e = &f->entries[i], *prev = i ? &f->entries[i - 1] : NULL;

                if (e->begin < expect) {
                        assert(prev);
                        r = errbuf_set(err, -EINVAL, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                                       file, e->t.name, (unsigned long long)e->begin, (unsigned long long)e->end,
                                       prev->t.name, (unsigned long long)prev->begin, (unsigned long long)prev->end);
                        goto fail;
                }
                if (e->begin > expect) {
                        if (prev)
                                r = errbuf_set(err, -EINVAL,
                                               "%s: tensor '%s': data_offsets [%llu, %llu] leave a hole of %llu bytes after tensor '%s', which ends at %llu",
                                               file, e->t.name, (unsigned long long)e->begin, (unsigned long long)e->end,
                                               (unsigned long long)(e->begin - expect), prev->t.name,
                                               (unsigned long long)expect);
                        else
                                r = errbuf_set(err, -EINVAL,
                                               "%s: tensor '%s': data_offsets [%llu, %llu] leave a hole of %llu bytes at the start of the data section",
                                               file, e->t.name, (unsigned long long)e->begin, (unsigned long long)e->end,
                                               (unsigned long long)e->begin);
                        goto fail;
                }
                expect = e->end;
        }
        if (expect != data_len) {
                r = errbuf_set(err, -EINVAL,
                               "%s: the data section is %llu bytes but the tensors end at %llu: %llu trailing bytes", file,
                               (unsigned long long)data_len, (unsigned long long)expect,
                               (unsigned long long)(data_len - expect));
                goto fail;
        }
        json_decref(root);
        return 0;

fail:
        json_decref(root);
        return r;
}

static int st_file_alloc(st_file_t **ret, const char *name, errbuf_t *err) {
        st_file_t *f;

        f = calloc(1, sizeof(*f));
        if (!f)
                return errbuf_set(err, -ENOMEM, "%s: out of memory", name);
        f->name = strdup(name);
        if (!f->name) {
                free(f);
                return errbuf_set(err, -ENOMEM, "%s: out of memory", name);
        }
        *ret = f;
        return 0;
}

int st_open_buffer(st_file_t **ret, const char *name, const void *data, size_t len, errbuf_t *err) {
        st_file_t *f = NULL;
        int r;

        assert(ret);
        assert(name);
        assert(data || len == 0);
        r = st_file_alloc(&f, name, err);
        if (r < 0)
                return r;
        f->base = data;         /* borrowed: the caller keeps it alive */
        f->len = len;
        r = st_parse(f, err);
        if (r < 0)
                goto fail;
        *ret = f;
        return 0;

fail:
        st_free(f);
        return r;
}

int st_open(st_file_t **ret, const char *path, errbuf_t *err) {
        st_file_t *f = NULL;
        struct stat sb;
        void *m;
        int fd, r;

        assert(ret);
        assert(path);
        /* O_NONBLOCK so that a FIFO given by mistake fails below instead of
         * hanging in open(); it changes nothing for a regular file. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                r = -errno;
                return errbuf_set(err, r, "%s: cannot open: %s", path, strerror(-r));
        }
        if (fstat(fd, &sb) < 0) {
                r = -errno;
                errbuf_set(err, r, "%s: cannot stat: %s", path, strerror(-r));
                goto fail;
        }
        if (S_ISDIR(sb.st_mode)) {
                r = errbuf_set(err, -EISDIR, "%s: is a directory, not a safetensors file", path);
                goto fail;
        }
        if (!S_ISREG(sb.st_mode)) {
                r = errbuf_set(err, -EINVAL, "%s: is not a regular file", path);
                goto fail;
        }
        r = st_file_alloc(&f, path, err);
        if (r < 0)
                goto fail;
        f->len = (size_t)sb.st_size;
        if (f->len > 0) {
                /* A file truncated by someone else while mapped would SIGBUS on
                 * access; weights files are written once and renamed in. */
                m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
                if (m == MAP_FAILED) {
                        r = -errno;
                        errbuf_set(err, r, "%s: cannot map %zu bytes: %s", path, f->len, strerror(-r));
                        goto fail;
                }
                f->base = m;
                f->mapped = true;
        }
        close(fd);
        fd = -1;
        r = st_parse(f, err);
        if (r < 0)
                goto fail;
        *ret = f;
        return 0;

fail:
        if (fd >= 0)
                close(fd);
        st_free(f);
        return r;
}

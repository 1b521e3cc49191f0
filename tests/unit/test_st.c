/* Unit tests for st_, the safetensors reader.
 *
 * Every file is laid out in memory by a small writer below (8-byte length,
 * space-padded JSON header, data), so the tests need no fixtures and no
 * Python. Expected float values come from bit patterns worked out by hand
 * (hex float literals), not from the reader's own conversion code. This is
 * not a fuzzer: tests/fuzz/fuzz_st.c is. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/st.h"
#include "unit.h"

#define BAD "bad.safetensors"

/* Lays out an image whose length field is hlen_field (whatever the header
 * really is), then the header bytes exactly as given, then data_len bytes
 * from data (or a byte pattern when data is NULL). Returns a malloc'd buffer. */
static uint8_t *stw_build_raw(uint64_t hlen_field, const char *header, const void *data, size_t data_len,
                              size_t *len) {
        size_t hlen = strlen(header);
        uint8_t *buf;

        *len = 8 + hlen + data_len;
        buf = malloc(*len ? *len : 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        for (int i = 0; i < 8; i++)
                buf[i] = (uint8_t)(hlen_field >> (8 * i));
        memcpy(buf + 8, header, hlen);
        for (size_t i = 0; i < data_len; i++)
                buf[8 + hlen + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)(i * 37 + 1);
        return buf;
}

/* The usual writer: the header padded with spaces to a multiple of 8 bytes,
 * as the reference writer does, and a truthful length field. */
static uint8_t *stw_build(const char *header, const void *data, size_t data_len, size_t *len) {
        size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
        char *h = malloc(padded + 1);
        uint8_t *buf;

        CU_ASSERT_PTR_NOT_NULL_FATAL(h);
        memcpy(h, header, hlen);
        memset(h + hlen, ' ', padded - hlen);
        h[padded] = '\0';
        buf = stw_build_raw(padded, h, data, data_len, len);
        free(h);
        return buf;
}

/* Opens buf as BAD and checks that it is refused with -EINVAL and a message
 * holding the file name and each of the (up to two) substrings. */
static void expect_reject_buf(uint8_t *buf, size_t len, const char *sub1, const char *sub2) {
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        int r;

        r = st_open_buffer(&f, BAD, buf, len, &err);
        CU_ASSERT_EQUAL(r, -EINVAL);
        CU_ASSERT_PTR_NULL(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, BAD ": "));
        if (sub1)
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, sub1));
        if (sub2)
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, sub2));
        if (r != -EINVAL || !strstr(err.msg, BAD) || (sub1 && !strstr(err.msg, sub1)) ||
            (sub2 && !strstr(err.msg, sub2)))
                printf("    r=%d msg: %s\n", r, err.msg);
        st_free(f);
        free(buf);
}

static void expect_reject(const char *header, size_t data_len, const char *sub1, const char *sub2) {
        size_t len;
        uint8_t *buf = stw_build(header, NULL, data_len, &len);

        expect_reject_buf(buf, len, sub1, sub2);
}

/* --- a valid file ---------------------------------------------------------- */

static const char valid_header[] =
        "{\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[1,25]},"
        "\"__metadata__\":{\"format\":\"pt\",\"note\":\"test\"},"
        "\"b.bf16\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[45,55]},"
        "\"z.empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[63,63]},"
        "\"h.f16\":{\"data_offsets\":[25,45],\"shape\":[10],\"dtype\":\"F16\"},"
        "\"i.i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[55,63]},"
        "\"pad\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";

static const float valid_f32[6] = { 0.5f, -1.0f, 3.25f, 1e-3f, 100.0f, -0.0f };
/* 1.0, -2.5, 65504 (max), 2^-24 (min subnormal), 1023 * 2^-24 (max
 * subnormal), +inf, -inf, -0.0, 0.333251953125, NaN */
static const uint16_t valid_f16[10] = { 0x3c00, 0xc100, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x8000, 0x3555, 0x7e00 };
/* 1.0, -2.5, +inf, 2^-133 (a binary32 subnormal), 3.140625 */
static const uint16_t valid_bf16[5] = { 0x3f80, 0xc020, 0x7f80, 0x0001, 0x4049 };
#define VALID_DATA_BYTES 63

/* The data section of valid_header, little-endian, with the F32 tensor at
 * the odd offset 1 so that st_to_float has to cope with unaligned data. */
static void valid_data(uint8_t d[VALID_DATA_BYTES]) {
        int64_t i64 = -5;

        memset(d, 0xee, VALID_DATA_BYTES);
        d[0] = 0x7f;
        for (int i = 0; i < 6; i++) {
                uint32_t b;

                memcpy(&b, &valid_f32[i], 4);
                for (int k = 0; k < 4; k++)
                        d[1 + 4 * i + k] = (uint8_t)(b >> (8 * k));
        }
        for (int i = 0; i < 10; i++) {
                d[25 + 2 * i] = (uint8_t)valid_f16[i];
                d[25 + 2 * i + 1] = (uint8_t)(valid_f16[i] >> 8);
        }
        for (int i = 0; i < 5; i++) {
                d[45 + 2 * i] = (uint8_t)valid_bf16[i];
                d[45 + 2 * i + 1] = (uint8_t)(valid_bf16[i] >> 8);
        }
        for (int k = 0; k < 8; k++)
                d[55 + k] = (uint8_t)((uint64_t)i64 >> (8 * k));
}

static uint8_t *valid_build(size_t *len) {
        uint8_t d[VALID_DATA_BYTES];

        valid_data(d);
        return stw_build(valid_header, d, sizeof(d), len);
}

/* Checks everything about an opened copy of the valid file; base is where
 * its data section starts. */
static void check_valid(const st_file_t *f, const uint8_t *image, size_t image_len) {
        static const char *order[] = { "pad", "w.f32", "h.f16", "b.bf16", "i.i64", "z.empty" };
        const size_t header_bytes = (strlen(valid_header) + 7) / 8 * 8;
        const uint8_t *data;
        const st_tensor_t *t;
        const void *bytes;
        size_t len;
        float out[10];
        int64_t i64;

        bytes = st_bytes(f, &len);
        CU_ASSERT_EQUAL_FATAL(len, image_len);
        CU_ASSERT_EQUAL(memcmp(bytes, image, len), 0);
        data = (const uint8_t *)bytes + 8 + header_bytes;

        CU_ASSERT_EQUAL_FATAL(st_count(f), 6);
        for (size_t i = 0; i < 6; i++) {
                t = st_get(f, i);
                CU_ASSERT_PTR_NOT_NULL_FATAL(t);
                CU_ASSERT_STRING_EQUAL(t->name, order[i]);
                CU_ASSERT_PTR_EQUAL(st_find(f, order[i]), t);
        }
        CU_ASSERT_PTR_NULL(st_get(f, 6));
        CU_ASSERT_PTR_NULL(st_find(f, "missing"));
        CU_ASSERT_PTR_NULL(st_find(f, "__metadata__"));

        t = st_find(f, "pad");
        CU_ASSERT_EQUAL(t->dtype, ST_U8);
        CU_ASSERT_EQUAL(t->ndim, 1);
        CU_ASSERT_EQUAL(t->nbytes, 1);
        CU_ASSERT_PTR_EQUAL(t->data, data);
        CU_ASSERT_EQUAL(((const uint8_t *)t->data)[0], 0x7f);
        CU_ASSERT_EQUAL(st_to_float(t, out), -EINVAL);

        t = st_find(f, "w.f32");
        CU_ASSERT_EQUAL(t->dtype, ST_F32);
        CU_ASSERT_EQUAL(t->ndim, 2);
        CU_ASSERT_EQUAL(t->shape[0], 2);
        CU_ASSERT_EQUAL(t->shape[1], 3);
        CU_ASSERT_EQUAL(t->numel, 6);
        CU_ASSERT_EQUAL(t->nbytes, 24);
        CU_ASSERT_PTR_EQUAL(t->data, data + 1);
        memset(out, 0x55, sizeof(out));
        CU_ASSERT_EQUAL(st_to_float(t, out), 0);
        CU_ASSERT_EQUAL(memcmp(out, valid_f32, sizeof(valid_f32)), 0);
        CU_ASSERT(signbit(out[5]));

        t = st_find(f, "h.f16");
        CU_ASSERT_EQUAL(t->dtype, ST_F16);
        CU_ASSERT_EQUAL(t->ndim, 1);
        CU_ASSERT_EQUAL(t->shape[0], 10);
        CU_ASSERT_EQUAL(t->numel, 10);
        CU_ASSERT_EQUAL(t->nbytes, 20);
        CU_ASSERT_PTR_EQUAL(t->data, data + 25);
        memset(out, 0x55, sizeof(out));
        CU_ASSERT_EQUAL(st_to_float(t, out), 0);
        CU_ASSERT_EQUAL(out[0], 1.0f);
        CU_ASSERT_EQUAL(out[1], -2.5f);
        CU_ASSERT_EQUAL(out[2], 65504.0f);
        CU_ASSERT_EQUAL(out[3], 0x1p-24f);
        CU_ASSERT_EQUAL(out[4], 0x1.ff8p-15f);  /* 1023 * 2^-24 */
        CU_ASSERT(isinf(out[5]) && out[5] > 0);
        CU_ASSERT(isinf(out[6]) && out[6] < 0);
        CU_ASSERT(out[7] == 0.0f && signbit(out[7]));
        CU_ASSERT_EQUAL(out[8], 0.333251953125f);
        CU_ASSERT(isnan(out[9]));

        t = st_find(f, "b.bf16");
        CU_ASSERT_EQUAL(t->dtype, ST_BF16);
        CU_ASSERT_EQUAL(t->numel, 5);
        CU_ASSERT_EQUAL(t->nbytes, 10);
        CU_ASSERT_PTR_EQUAL(t->data, data + 45);
        memset(out, 0x55, sizeof(out));
        CU_ASSERT_EQUAL(st_to_float(t, out), 0);
        CU_ASSERT_EQUAL(out[0], 1.0f);
        CU_ASSERT_EQUAL(out[1], -2.5f);
        CU_ASSERT(isinf(out[2]) && out[2] > 0);
        CU_ASSERT_EQUAL(out[3], 0x1p-133f);
        CU_ASSERT_EQUAL(out[4], 3.140625f);

        t = st_find(f, "i.i64");
        CU_ASSERT_EQUAL(t->dtype, ST_I64);
        CU_ASSERT_EQUAL(t->ndim, 0);
        CU_ASSERT_EQUAL(t->numel, 1);
        CU_ASSERT_EQUAL(t->nbytes, 8);
        CU_ASSERT_PTR_EQUAL(t->data, data + 55);
        memcpy(&i64, t->data, 8);
        CU_ASSERT_EQUAL(i64, -5);
        CU_ASSERT_EQUAL(st_to_float(t, out), -EINVAL);

        t = st_find(f, "z.empty");
        CU_ASSERT_EQUAL(t->dtype, ST_F32);
        CU_ASSERT_EQUAL(t->ndim, 2);
        CU_ASSERT_EQUAL(t->numel, 0);
        CU_ASSERT_EQUAL(t->nbytes, 0);
        CU_ASSERT_PTR_EQUAL(t->data, data + 63);
        CU_ASSERT_EQUAL(st_to_float(t, out), 0);
}

static void test_st_valid_file_parses(void) {
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        size_t len;
        uint8_t *buf = valid_build(&len);
        int r;

        r = st_open_buffer(&f, "good.safetensors", buf, len, &err);
        CU_ASSERT_EQUAL_FATAL(r, 0);
        if (r < 0)
                printf("    %s\n", err.msg);
        CU_ASSERT_STRING_EQUAL(st_name(f), "good.safetensors");
        check_valid(f, buf, len);
        st_free(f);
        free(buf);
}

static void test_st_dtype_helpers(void) {
        CU_ASSERT_STRING_EQUAL(st_dtype_name(ST_F32), "F32");
        CU_ASSERT_STRING_EQUAL(st_dtype_name(ST_BF16), "BF16");
        CU_ASSERT_STRING_EQUAL(st_dtype_name(ST_F8_E5M2), "F8_E5M2");
        CU_ASSERT_EQUAL(st_dtype_bytes(ST_BOOL), 1);
        CU_ASSERT_EQUAL(st_dtype_bytes(ST_F16), 2);
        CU_ASSERT_EQUAL(st_dtype_bytes(ST_U32), 4);
        CU_ASSERT_EQUAL(st_dtype_bytes(ST_F64), 8);
        CU_ASSERT_EQUAL(st_dtype_bytes(ST_U64), 8);
        CU_ASSERT(st_dtype_is_float(ST_F32));
        CU_ASSERT(st_dtype_is_float(ST_F16));
        CU_ASSERT(st_dtype_is_float(ST_BF16));
        CU_ASSERT(!st_dtype_is_float(ST_F64));
        CU_ASSERT(!st_dtype_is_float(ST_F8_E4M3));
        CU_ASSERT(!st_dtype_is_float(ST_I64));
        st_free(NULL);
}

/* Every dtype name the reference reader knows is accepted, with its size. */
static void test_st_all_dtypes_accepted(void) {
        char header[256];
        st_file_t *f;
        size_t len;
        uint8_t *buf;

        for (int d = 0; d < ST_DTYPE_COUNT; d++) {
                size_t nbytes = 3 * st_dtype_bytes((st_dtype_t)d);

                snprintf(header, sizeof(header), "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%zu]}}",
                         st_dtype_name((st_dtype_t)d), nbytes);
                buf = stw_build(header, NULL, nbytes, &len);
                f = NULL;
                CU_ASSERT_EQUAL(st_open_buffer(&f, "t", buf, len, NULL), 0);
                if (f) {
                        CU_ASSERT_EQUAL(st_get(f, 0)->dtype, (st_dtype_t)d);
                        CU_ASSERT_EQUAL(st_get(f, 0)->nbytes, nbytes);
                }
                st_free(f);
                free(buf);
        }
}

/* An exact-length header (no padding), zero-byte tensors, and an empty
 * file ("{}", no data). */
static void test_st_unpadded_and_empty(void) {
        static const char h[] = "{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}";
        st_file_t *f = NULL;
        size_t len;
        uint8_t *buf;

        buf = stw_build_raw(strlen(h), h, NULL, 2, &len);
        CU_ASSERT_EQUAL(st_open_buffer(&f, "u", buf, len, NULL), 0);
        CU_ASSERT(f && st_count(f) == 1);
        st_free(f);
        free(buf);

        /* a zero-byte tensor may share its offset with the next one; it sorts first */
        f = NULL;
        buf = stw_build("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                        NULL, 8, &len);
        CU_ASSERT_EQUAL(st_open_buffer(&f, "z", buf, len, NULL), 0);
        CU_ASSERT(f && st_count(f) == 2 && strcmp(st_get(f, 0)->name, "e") == 0 &&
                  strcmp(st_get(f, 1)->name, "a") == 0);
        st_free(f);
        free(buf);

        f = NULL;
        buf = stw_build_raw(2, "{}", NULL, 0, &len);
        CU_ASSERT_EQUAL(st_open_buffer(&f, "e", buf, len, NULL), 0);
        CU_ASSERT(f && st_count(f) == 0);
        st_free(f);
        free(buf);
}

/* --- malformed files: each one -EINVAL with a sentence that says why --------- */

static void test_st_rejects_short_file(void) {
        uint8_t *buf = malloc(5);

        memset(buf, 0, 5);
        expect_reject_buf(buf, 5, "5 bytes", "too short");
        /* and an empty buffer, which must not be dereferenced */
        expect_reject_buf(NULL, 0, "0 bytes", NULL);
}

static void test_st_rejects_header_past_end(void) {
        size_t len;
        uint8_t *buf = stw_build_raw(100, "{}        ", NULL, 0, &len);

        expect_reject_buf(buf, len, "header length 100", "past the end");
}

static void test_st_rejects_huge_header(void) {
        size_t len;
        uint8_t *buf = stw_build_raw(200000000, "{}", NULL, 0, &len);

        expect_reject_buf(buf, len, "header length 200000000", "limit");
        /* a length that would wrap 8 + N around */
        buf = stw_build_raw(UINT64_MAX - 3, "{}", NULL, 0, &len);
        expect_reject_buf(buf, len, "header length", "limit");
}

static void test_st_rejects_not_json(void) {
        expect_reject("{\"a\": nope}", 0, "not valid JSON", NULL);
        /* garbage after the object is not padding */
        expect_reject("{} x", 0, "not valid JSON", NULL);
        /* a header cut in the middle */
        expect_reject("{\"a\":{\"dtype\":\"F32\",", 0, "not valid JSON", NULL);
}

static void test_st_rejects_not_object(void) {
        expect_reject("[1, 2, 3]", 0, "not an object", NULL);
}

static void test_st_rejects_entry_not_object(void) {
        expect_reject("{\"w\": [1]}", 0, "tensor 'w'", "not an object");
}

static void test_st_rejects_unknown_dtype(void) {
        expect_reject("{\"fc.weight\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'fc.weight'",
                      "unknown dtype \"F31\"");
        expect_reject("{\"fc.weight\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'fc.weight'",
                      "unknown dtype");
        expect_reject("{\"fc.weight\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'fc.weight'",
                      "not a string");
}

static void test_st_rejects_negative_shape(void) {
        expect_reject("{\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}", 0,
                      "tensor 'conv1.weight'", "shape dimension 1 is -1");
}

static void test_st_rejects_noninteger_shape(void) {
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                      "shape dimension 0 is 2.5");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                      "not a non-negative integer");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                      "shape is 2, not an array");
}

static void test_st_rejects_too_many_dims(void) {
        expect_reject("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "tensor 'w'",
                      "9 dimensions");
}

static void test_st_rejects_offsets_arity(void) {
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, "tensor 'w'",
                      "data_offsets has 1 elements");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "tensor 'w'",
                      "data_offsets has 3 elements");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4, "tensor 'w'",
                      "data_offsets[1] is -4");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}", 4, "tensor 'w'",
                      "data_offsets is \"0,4\", not an array");
}

static void test_st_rejects_reversed_offsets(void) {
        size_t len;
        uint8_t *buf = stw_build("{\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[400,396]}}", NULL, 400, &len);
        st_file_t *f = NULL;
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL(st_open_buffer(&f, "w.safetensors", buf, len, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, "w.safetensors: tensor 'fc.bias': data_offsets [400, 396] are reversed");
        CU_ASSERT_PTR_NULL(f);
        free(buf);
}

static void test_st_rejects_overlap(void) {
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]", NULL);
        /* two tensors on the very same bytes */
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      8, "overlap", "tensor 'a'");
}

static void test_st_rejects_hole(void) {
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                      20, "tensor 'b'", "hole of 4 bytes after tensor 'a'");
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "tensor 'a'",
                      "hole of 4 bytes at the start");
}

static void test_st_rejects_offsets_past_end(void) {
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "tensor 'a'",
                      "past the end of the data section (4 bytes)");
        /* offsets far past anything size_t arithmetic could wrap */
        expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9223372036854775807,9223372036854775807]}}",
                      0, "tensor 'a'", "past the end");
}

static void test_st_rejects_trailing_bytes(void) {
        expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "12 bytes",
                      "4 trailing bytes");
        /* no tensors at all, but data */
        expect_reject("{}", 3, "3 trailing bytes", NULL);
}

static void test_st_rejects_size_mismatch(void) {
        expect_reject("{\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "tensor 'fc.bias'",
                      "F32 shape [3] needs 12 bytes but data_offsets [0, 8] hold 8");
}

static void test_st_rejects_shape_overflow(void) {
        /* 2^40 * 2^40 elements */
        expect_reject("{\"big\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0,
                      "tensor 'big'", "overflow");
        /* 2^62 elements fit, 2^64 bytes do not */
        expect_reject("{\"big\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
                      "tensor 'big'", "overflow");
        /* a product that wraps to exactly 0 must not pass as an empty tensor */
        expect_reject("{\"big\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
                      "tensor 'big'", "overflow");
}

static void test_st_rejects_duplicate_names(void) {
        expect_reject("{\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      8, "tensor 'fc.bias'", "duplicate");
        /* a name too long for jansson to quote, after a space */
        expect_reject("{\"layer4.2.bn3.running_mean\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}, "
                      "\"layer4.2.bn3.running_mean\" :{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      8, "tensor 'layer4.2.bn3.running_mean' appears twice", NULL);
        /* a name with an escaped quote in it, quoted raw */
        expect_reject("{\"a\\\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\\\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      8, "tensor 'a\\\"b' appears twice", NULL);
}

static void test_st_rejects_empty_name(void) {
        expect_reject("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name", NULL);
}

static void test_st_rejects_bad_metadata(void) {
        expect_reject("{\"__metadata__\":{\"format\":\"pt\",\"epoch\":3}}", 0, "__metadata__ key 'epoch' is 3",
                      "not a string");
        expect_reject("{\"__metadata__\":[\"pt\"]}", 0, "__metadata__ is an array", NULL);
}

static void test_st_rejects_bad_entry_keys(void) {
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "tensor 'w'",
                      "unknown key 'extra'");
        expect_reject("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w'", "missing \"dtype\"");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'w'", "missing \"shape\"");
        expect_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'w'", "missing \"data_offsets\"");
}

/* --- st_open on real paths --------------------------------------------------- */

static void test_st_open_missing_file(void) {
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        const char *path = "/nonexistent-inferd-dir/none.safetensors";

        CU_ASSERT_EQUAL(st_open(&f, path, &err), -ENOENT);
        CU_ASSERT_PTR_NULL(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
}

static void test_st_open_directory(void) {
        char dir[] = "/tmp/inferd-st-test-XXXXXX";
        st_file_t *f = NULL;
        errbuf_t err = { "" };

        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
        CU_ASSERT_EQUAL(st_open(&f, dir, &err), -EISDIR);
        CU_ASSERT_PTR_NULL(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, dir));
        rmdir(dir);
}

/* Writes image to a fresh temporary file; path receives its name. */
static int write_temp(char *path, const void *image, size_t len) {
        int fd = mkstemp(path);
        int ok;

        if (fd < 0)
                return -1;
        ok = write(fd, image, len) == (ssize_t)len;
        close(fd);
        return ok ? 0 : -1;
}

static void test_st_open_real_file(void) {
        char path[] = "/tmp/inferd-st-test-XXXXXX";
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        size_t len;
        uint8_t *buf = valid_build(&len);
        int r;

        CU_ASSERT_EQUAL_FATAL(write_temp(path, buf, len), 0);
        r = st_open(&f, path, &err);
        CU_ASSERT_EQUAL(r, 0);
        if (r < 0) {
                printf("    %s\n", err.msg);
        } else {
                CU_ASSERT_STRING_EQUAL(st_name(f), path);
                /* the mapping, not the buffer, holds the data */
                CU_ASSERT_PTR_NOT_EQUAL(st_bytes(f, NULL), buf);
                check_valid(f, buf, len);
        }
        st_free(f);
        unlink(path);
        free(buf);
}

static void test_st_open_real_bad_files(void) {
        char path[] = "/tmp/inferd-st-test-XXXXXX";
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        size_t len;
        uint8_t *buf;

        /* empty: nothing to map */
        CU_ASSERT_EQUAL_FATAL(write_temp(path, "", 0), 0);
        CU_ASSERT_EQUAL(st_open(&f, path, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "too short"));
        unlink(path);

        strcpy(path, "/tmp/inferd-st-test-XXXXXX");
        buf = stw_build("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", NULL, 7, &len);
        CU_ASSERT_EQUAL_FATAL(write_temp(path, buf, len), 0);
        CU_ASSERT_EQUAL(st_open(&f, path, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "tensor 'a'"));
        unlink(path);
        free(buf);
}

int test_st_register(void) {
        static CU_TestInfo tests[] = {
                { "valid_file_parses", test_st_valid_file_parses },
                { "dtype_helpers", test_st_dtype_helpers },
                { "all_dtypes_accepted", test_st_all_dtypes_accepted },
                { "unpadded_and_empty", test_st_unpadded_and_empty },
                { "rejects_short_file", test_st_rejects_short_file },
                { "rejects_header_past_end", test_st_rejects_header_past_end },
                { "rejects_huge_header", test_st_rejects_huge_header },
                { "rejects_not_json", test_st_rejects_not_json },
                { "rejects_not_object", test_st_rejects_not_object },
                { "rejects_entry_not_object", test_st_rejects_entry_not_object },
                { "rejects_unknown_dtype", test_st_rejects_unknown_dtype },
                { "rejects_negative_shape", test_st_rejects_negative_shape },
                { "rejects_noninteger_shape", test_st_rejects_noninteger_shape },
                { "rejects_too_many_dims", test_st_rejects_too_many_dims },
                { "rejects_offsets_arity", test_st_rejects_offsets_arity },
                { "rejects_reversed_offsets", test_st_rejects_reversed_offsets },
                { "rejects_overlap", test_st_rejects_overlap },
                { "rejects_hole", test_st_rejects_hole },
                { "rejects_offsets_past_end", test_st_rejects_offsets_past_end },
                { "rejects_trailing_bytes", test_st_rejects_trailing_bytes },
                { "rejects_size_mismatch", test_st_rejects_size_mismatch },
                { "rejects_shape_overflow", test_st_rejects_shape_overflow },
                { "rejects_duplicate_names", test_st_rejects_duplicate_names },
                { "rejects_empty_name", test_st_rejects_empty_name },
                { "rejects_bad_metadata", test_st_rejects_bad_metadata },
                { "rejects_bad_entry_keys", test_st_rejects_bad_entry_keys },
                { "open_missing_file", test_st_open_missing_file },
                { "open_directory", test_st_open_directory },
                { "open_real_file", test_st_open_real_file },
                { "open_real_bad_files", test_st_open_real_bad_files },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("st", tests);
}

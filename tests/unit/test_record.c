/* Unit tests of record_: recognising the two raw formats by header or by
 * size, and the DLQ code of every refusal. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/record.h"
#include "unit.h"

static int record_try(const void *data, size_t len, const char *ct, record_format_t *f, const char **code) {
        errbuf_t err;

        *code = NULL;
        return record_classify(data, len, ct, ct ? strlen(ct) : 0, f, code, &err);
}

static void test_record_sniffs_by_size(void) {
        unsigned char *buf = calloc(1, RECORD_MAX_BYTES + 16);
        record_format_t f;
        const char *code;

        CU_ASSERT_EQUAL(record_try(buf, RECORD_RGB8_BYTES, NULL, &f, &code), 0);
        CU_ASSERT_EQUAL(f, RECORD_RGB8);
        CU_ASSERT_EQUAL(record_try(buf, RECORD_F32_CHW_BYTES, NULL, &f, &code), 0);
        CU_ASSERT_EQUAL(f, RECORD_F32_CHW);
        CU_ASSERT_EQUAL(record_try(buf, RECORD_RGB8_BYTES - 1, NULL, &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_SIZE);
        CU_ASSERT_EQUAL(record_try(buf, 0, NULL, &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_SIZE);
        CU_ASSERT_EQUAL(record_try(buf, RECORD_MAX_BYTES + 1, NULL, &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_LARGE);
        free(buf);
}

static void test_record_uses_content_type(void) {
        unsigned char *buf = calloc(1, RECORD_MAX_BYTES);
        record_format_t f;
        const char *code;

        CU_ASSERT_EQUAL(record_try(buf, RECORD_RGB8_BYTES, "image/x-rgb8", &f, &code), 0);
        CU_ASSERT_EQUAL(f, RECORD_RGB8);
        CU_ASSERT_EQUAL(record_try(buf, RECORD_F32_CHW_BYTES, " Application/X-Float32-CHW; v=1", &f, &code), 0);
        CU_ASSERT_EQUAL(f, RECORD_F32_CHW);
        /* The header wins over the size: an rgb8 label on a float-sized record is refused. */
        CU_ASSERT_EQUAL(record_try(buf, RECORD_F32_CHW_BYTES, "image/x-rgb8", &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_SIZE);
        CU_ASSERT_EQUAL(record_try(buf, RECORD_RGB8_BYTES, "text/plain", &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_CONTENT_TYPE);
        free(buf);
}

/* A NUL (or any byte that is not printable ASCII) inside the content-type
 * is escaped in the refusal's sentence, so that the DLQ detail does not
 * quote a valid type (issue 26, item 7). */
static void test_record_content_type_escaped(void) {
        static const char ct[] = "image/x-rgb8\0junk\n";
        unsigned char *buf = calloc(1, RECORD_RGB8_BYTES);
        record_format_t f;
        const char *code = NULL;
        errbuf_t err = {};

        CU_ASSERT_EQUAL(record_classify(buf, RECORD_RGB8_BYTES, ct, sizeof(ct) - 1, &f, &code, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_CONTENT_TYPE);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'image/x-rgb8\\x00junk\\x0a' is not one of"));
        free(buf);
}

static void test_record_refuses_encoded_images(void) {
        unsigned char jpeg[64] = { 0xff, 0xd8, 0xff, 0xe0 }, png[64] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        record_format_t f;
        const char *code;

        CU_ASSERT_EQUAL(record_try(jpeg, sizeof(jpeg), NULL, &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_EQUAL(record_try(png, sizeof(png), NULL, &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_EQUAL(record_try(png, sizeof(png), "image/png", &f, &code), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_STRING_EQUAL(record_format_mime(RECORD_F32_CHW), "application/x-float32-chw");
}

static void test_record_identifies_encoded_images(void) {
        unsigned char jpeg[64] = { 0xff, 0xd8, 0xff, 0xe0 }, png[64] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        unsigned char webp[64] = { 'R', 'I', 'F', 'F', 56, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', ' ' };
        record_format_t f;
        const char *code;
        errbuf_t err;

        /* By magic, at any length (the decoder has its own limits). */
        CU_ASSERT_EQUAL(record_identify(jpeg, sizeof(jpeg), NULL, 0, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_JPEG);
        CU_ASSERT_EQUAL(record_identify(png, RECORD_RGB8_BYTES, NULL, 0, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_PNG);
        /* By content-type, whatever the bytes say. */
        CU_ASSERT_EQUAL(record_identify(png, sizeof(png), "image/jpeg", 10, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_JPEG);
        CU_ASSERT_EQUAL(record_identify(jpeg, 0, "IMAGE/PNG; x=1", 14, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_PNG);
        CU_ASSERT(record_is_encoded(RECORD_JPEG) && record_is_encoded(RECORD_PNG) && !record_is_encoded(RECORD_RGB8));
        /* WebP: RIFF, a length, WEBP; by content-type too. */
        CU_ASSERT_EQUAL(record_identify(webp, sizeof(webp), NULL, 0, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_WEBP);
        CU_ASSERT_EQUAL(record_identify(webp, 12, NULL, 0, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_WEBP);
        CU_ASSERT_EQUAL(record_identify(jpeg, sizeof(jpeg), "image/webp", 10, &f, &code, &err), 0);
        CU_ASSERT_EQUAL(f, RECORD_WEBP);
        CU_ASSERT(record_is_encoded(RECORD_WEBP));
        CU_ASSERT_STRING_EQUAL(record_format_mime(RECORD_WEBP), "image/webp");
        /* RIFF of another kind (WAVE), or cut before WEBP, is not WebP. */
        memcpy(webp + 8, "WAVE", 4);
        CU_ASSERT_EQUAL(record_identify(webp, sizeof(webp), NULL, 0, &f, &code, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_SIZE);
        memcpy(webp + 8, "WEBP", 4);
        CU_ASSERT_EQUAL(record_identify(webp, 11, NULL, 0, &f, &code, &err), -EINVAL);
        /* An unknown content-type's sentence lists it among the accepted. */
        CU_ASSERT_EQUAL(record_identify(webp, sizeof(webp), "image/avif", 10, &f, &code, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_CONTENT_TYPE);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "image/webp"));
        /* Two bytes of JPEG magic are not enough. */
        CU_ASSERT_EQUAL(record_identify(jpeg, 2, NULL, 0, &f, &code, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_SIZE);
}

int test_record_register(void) {
        static CU_TestInfo tests[] = {
                { "sniffs_by_size", test_record_sniffs_by_size },
                { "uses_content_type", test_record_uses_content_type },
                { "content_type_escaped", test_record_content_type_escaped },
                { "refuses_encoded_images", test_record_refuses_encoded_images },
                { "identifies_encoded_images", test_record_identifies_encoded_images },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("record", tests);
}

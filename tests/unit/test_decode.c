/* Unit tests of decode_ and resize_: valid JPEG and PNG records decode to
 * their size, and every bad one (truncated, a bomb header, random bytes
 * after the magic, a bad CRC, empty, zero or absurd geometry, over the byte
 * limit) is refused with its DLQ code and a sentence, without a crash. The
 * images are made here with TurboJPEG and libspng's encoder; the numerics
 * against torchvision are tests/decode's. */
#include <errno.h>
#include <libdeflate.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode/decode.h"
#include "decode/resize.h"
#include "decode_check.h"
#include "jpeg_build.h"
#include "unit.h"

#define W 300
#define H 200

static uint8_t *test_image(int w, int h) {
        uint8_t *p = malloc((size_t)w * h * 3);

        for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                        uint8_t *q = p + ((size_t)y * w + x) * 3;

                        q[0] = (uint8_t)(x * 255 / w);
                        q[1] = (uint8_t)(y * 255 / h);
                        q[2] = (uint8_t)((x ^ y) & 0xff);
                }
        return p;
}

/* A baseline 4:2:0 JPEG of the test image; free() the result. */
static uint8_t *test_jpeg(int w, int h, size_t *len) {
        return jpeg_build(test_image(w, h), w, h, TJSAMP_420, 90, len);
}

static uint8_t *test_png(int w, int h, size_t *len) {
        struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                                  .color_type = SPNG_COLOR_TYPE_TRUECOLOR };
        uint8_t *img = test_image(w, h), *out;
        spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);
        int e = 0;

        CU_ASSERT_FATAL(c != NULL);
        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_ihdr(c, &ihdr);
        CU_ASSERT_FATAL(spng_encode_image(c, img, (size_t)w * h * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0);
        out = spng_get_png_buffer(c, len, &e);
        CU_ASSERT_FATAL(out != NULL && e == 0);
        spng_ctx_free(c);
        free(img);
        return out;
}

static int test_try(decode_t *d, const void *data, size_t len, record_format_t f, const char **code, errbuf_t *err,
                    decode_info_t *info) {
        static uint8_t out[224 * 224 * 3];

        *code = NULL;
        err->msg[0] = '\0';
        return decode_record(d, data, len, f, out, info, code, err);
}

static decode_t *test_decoder(uint64_t max_pixels, size_t max_bytes) {
        decode_t *d = NULL;
        errbuf_t err;

        CU_ASSERT_FATAL(decode_new(&d, max_pixels, max_bytes, false, &err) == 0);
        return d;
}

/* A progressive 4:2:0 JPEG of the test image (libjpeg's default
 * progression: 10 scans for colour); free() the result. */
static uint8_t *test_jpeg_progressive(int w, int h, size_t *len) {
        return jpeg_build_flags(test_image(w, h), w, h, TJSAMP_420, 90, TJFLAG_PROGRESSIVE, len);
}

/* The decode cost limit (issue 26, item 5): a JPEG's scans times its
 * pixels. A progressive JPEG over it is refused as too-costly before a scan
 * is decoded, naming the scans; under it, and a baseline JPEG (one scan) of
 * the same size, decode. The limit is in megapixel-scans. */
static void test_decode_scan_cost(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        decode_info_t info;
        const char *code = NULL;
        size_t pl, bl;
        uint8_t *p = test_jpeg_progressive(1000, 1000, &pl), *b = test_jpeg(1000, 1000, &bl);
        errbuf_t err;

        /* 1 MP: 10 scans are 10 megapixel-scans. */
        decode_set_max_scan_megapixels(d, 5);
        CU_ASSERT_EQUAL(test_try(d, p, pl, RECORD_JPEG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_COSTLY);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "10 scans"));
        CU_ASSERT_EQUAL(test_try(d, b, bl, RECORD_JPEG, &code, &err, &info), 0);
        decode_set_max_scan_megapixels(d, 20);
        CU_ASSERT_EQUAL(test_try(d, p, pl, RECORD_JPEG, &code, &err, &info), 0);
        free(p);
        free(b);
        decode_free(d);
}

static void test_decode_valid_images(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        uint8_t out[224 * 224 * 3];
        decode_info_t info;
        const char *code = NULL;
        size_t jl, pl;
        uint8_t *j = test_jpeg(W, H, &jl), *p = test_png(W, H, &pl);
        errbuf_t err;

        memset(out, 0, sizeof(out));
        CU_ASSERT_EQUAL(decode_record(d, j, jl, RECORD_JPEG, out, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(info.width, W);
        CU_ASSERT_EQUAL(info.height, H);
        CU_ASSERT_EQUAL(info.channels, 3);
        CU_ASSERT_EQUAL(decode_record(d, p, pl, RECORD_PNG, out, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(info.width, W);
        /* The gradient survives: red grows from left to right. */
        CU_ASSERT(out[3 * 223] > out[0] + 100);
        free(j);
        free(p);
        decode_free(d);
}

static void test_decode_truncated_jpeg(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        const char *code;
        size_t len;
        uint8_t *j = test_jpeg(W, H, &len);
        errbuf_t err;

        /* Cut in the middle of the scan: libjpeg warns of a premature end and
         * fills the rest with grey, which PIL refuses and so do we. */
        CU_ASSERT_EQUAL(test_try(d, j, len / 2, RECORD_JPEG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT(strstr(err.msg, "JPEG: ") == err.msg);
        CU_ASSERT(strstr(err.msg, "Premature end") != NULL);
        /* Cut inside the headers. */
        CU_ASSERT_EQUAL(test_try(d, j, 40, RECORD_JPEG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        /* The same context decodes the whole image after those failures
         * (TurboJPEG's handle is left broken by a failed header). */
        CU_ASSERT_EQUAL(test_try(d, j, len, RECORD_JPEG, &code, &err, NULL), 0);
        for (size_t cut = 20; cut < len; cut += len / 7) {
                CU_ASSERT_EQUAL(test_try(d, j, cut, RECORD_JPEG, &code, &err, NULL), -EINVAL);
                CU_ASSERT_EQUAL(test_try(d, j, len, RECORD_JPEG, &code, &err, NULL), 0);
        }
        /* A Huffman table whose counts add up to more than 256 codes: an
         * error inside the header (skimage's truncated.jpg has one), which
         * broke every later image on the handle before it was replaced. */
        {
                uint8_t *bad = malloc(len);
                size_t i;

                memcpy(bad, j, len);
                for (i = 2; i + 21 < len && !(bad[i] == 0xff && bad[i + 1] == 0xc4); i++)
                        ;
                CU_ASSERT_FATAL(i + 21 < len);
                memset(bad + i + 5, 0xff, 16);  /* the 16 code counts after length and class/id */
                for (int k = 0; k < 3; k++) {
                        CU_ASSERT_EQUAL(test_try(d, bad, len, RECORD_JPEG, &code, &err, NULL), -EINVAL);
                        CU_ASSERT(strstr(err.msg, "Huffman") != NULL);
                        CU_ASSERT_EQUAL(test_try(d, j, len, RECORD_JPEG, &code, &err, NULL), 0);
                }
                free(bad);
        }
        free(j);
        decode_free(d);
}

/* Finds the baseline SOF0 marker and writes height and width into it. */
static int test_patch_sof(uint8_t *j, size_t len, uint16_t w, uint16_t h) {
        for (size_t i = 2; i + 9 < len; i++)
                if (j[i] == 0xff && j[i + 1] == 0xc0) {
                        j[i + 5] = h >> 8;
                        j[i + 6] = h & 0xff;
                        j[i + 7] = w >> 8;
                        j[i + 8] = w & 0xff;
                        return 0;
                }
        return -1;
}

/* PNG's CRC-32 (ISO 3309, reflected, polynomial 0xedb88320), bit by bit. */
static uint32_t test_crc32(const uint8_t *p, size_t n) {
        uint32_t c = 0xffffffffu;

        for (size_t i = 0; i < n; i++) {
                c ^= p[i];
                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
        }
        return c ^ 0xffffffffu;
}

/* Rewrites the IHDR's size and its CRC, so that only the size is wrong. */
static void test_patch_ihdr(uint8_t *p, uint32_t w, uint32_t h) {
        uint32_t crc;

        for (int i = 0; i < 4; i++) {
                p[16 + i] = (uint8_t)(w >> (24 - 8 * i));
                p[20 + i] = (uint8_t)(h >> (24 - 8 * i));
        }
        crc = test_crc32(p + 12, 17);
        for (int i = 0; i < 4; i++)
                p[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
}

static void test_decode_bomb_headers(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        const char *code;
        decode_info_t info;
        size_t jl, pl;
        uint8_t *j = test_jpeg(W, H, &jl), *p = test_png(W, H, &pl);
        errbuf_t err;

        CU_ASSERT_FATAL(test_patch_sof(j, jl, 60000, 60000) == 0);
        CU_ASSERT_EQUAL(test_try(d, j, jl, RECORD_JPEG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_LARGE);
        CU_ASSERT_EQUAL(info.width, 60000);
        CU_ASSERT(strstr(err.msg, "60000x60000") != NULL && strstr(err.msg, "max_pixels") != NULL);

        test_patch_ihdr(p, 60000, 60000);
        CU_ASSERT_EQUAL(test_try(d, p, pl, RECORD_PNG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_LARGE);
        CU_ASSERT(strstr(err.msg, "PNG header says 60000x60000") != NULL);

        /* Within max_pixels but a side longer than any JPEG could have: absurd. */
        test_patch_ihdr(p, 70000, 2);
        CU_ASSERT_EQUAL(test_try(d, p, pl, RECORD_PNG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT(strstr(err.msg, "longer than 65535") != NULL);
        /* Zero is refused by libspng's own IHDR check, and by ours. */
        test_patch_ihdr(p, 0, 10);
        CU_ASSERT_EQUAL(test_try(d, p, pl, RECORD_PNG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_FATAL(test_patch_sof(j, jl, 300, 0) == 0);
        CU_ASSERT_EQUAL(test_try(d, j, jl, RECORD_JPEG, &code, &err, &info), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        free(j);
        free(p);
        decode_free(d);
}

static void test_decode_random_after_magic(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        uint8_t buf[4096];
        uint64_t s = 42;
        const char *code;
        errbuf_t err;

        for (int round = 0; round < 50; round++) {
                for (size_t i = 0; i < sizeof(buf); i++)
                        buf[i] = (uint8_t)unit_rand_u64(&s);
                buf[0] = 0xff, buf[1] = 0xd8, buf[2] = 0xff;
                CU_ASSERT_EQUAL(test_try(d, buf, sizeof(buf), RECORD_JPEG, &code, &err, NULL), -EINVAL);
                CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
                memcpy(buf, png_magic, 8);
                CU_ASSERT_EQUAL(test_try(d, buf, sizeof(buf), RECORD_PNG, &code, &err, NULL), -EINVAL);
                CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
                CU_ASSERT(strncmp(err.msg, "PNG: ", 5) == 0);
        }
        decode_free(d);
}

static void test_decode_bad_crc(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        const char *code;
        size_t len;
        uint8_t *p = test_png(W, H, &len);
        errbuf_t err;

        p[31] ^= 0x5a;                  /* a byte of the IHDR's CRC */
        CU_ASSERT_EQUAL(test_try(d, p, len, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT(strstr(err.msg, "checksum") != NULL);
        p[31] ^= 0x5a;
        /* A corrupt byte in the compressed pixels (the IDAT's data starts
         * after the 8-byte signature, 25-byte IHDR and its 8-byte header). */
        p[8 + 25 + 8 + 20] ^= 0xff;
        CU_ASSERT_EQUAL(test_try(d, p, len, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        free(p);
        decode_free(d);
}

/* p (a PNG of len bytes) with n tEXt chunks after its IHDR; malloc'd. */
static uint8_t *test_png_with_text(const uint8_t *p, size_t len, int n, size_t *ret_len) {
        const size_t head = 8 + 25;             /* the signature and the IHDR chunk */
        uint8_t *out = malloc(len + (size_t)n * 32), *q;

        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        memcpy(out, p, head);
        q = out + head;
        for (int i = 0; i < n; i++) {
                char data[24];
                int k = snprintf(data, sizeof(data), "Comment%c%05d", 0, i);
                uint32_t crc;

                q[0] = 0, q[1] = 0, q[2] = 0, q[3] = (uint8_t)k;
                memcpy(q + 4, "tEXt", 4);
                memcpy(q + 8, data, (size_t)k);
                crc = libdeflate_crc32(0, q + 4, 4 + (size_t)k);
                q[8 + k] = (uint8_t)(crc >> 24), q[9 + k] = (uint8_t)(crc >> 16);
                q[10 + k] = (uint8_t)(crc >> 8), q[11 + k] = (uint8_t)crc;
                q += 12 + k;
        }
        memcpy(q, p + head, len - head);
        *ret_len = (size_t)(q - out) + len - head;
        return out;
}

/* libspng keeps at most 1000 ancillary chunks per image, and 0.7.3 cannot
 * raise that (decode_png.c): a valid PNG with 20,000 tEXt chunks, which PIL
 * reads, is refused as decode-failed with libspng's sentence, as docs/records.md
 * says; one with 900 decodes like the same image without them. */
static void test_decode_many_text_chunks(void) {
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        static uint8_t plain[224 * 224 * 3], texts[224 * 224 * 3];
        decode_info_t info;
        const char *code = NULL;
        size_t len, tlen;
        uint8_t *p = test_png(W, H, &len), *t = test_png_with_text(p, len, 900, &tlen);
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL(decode_record(d, p, len, RECORD_PNG, plain, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(decode_record(d, t, tlen, RECORD_PNG, texts, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(info.width, W);
        CU_ASSERT_EQUAL(memcmp(plain, texts, sizeof(plain)), 0);
        free(t);
        t = test_png_with_text(p, len, 20000, &tlen);
        CU_ASSERT_EQUAL(test_try(d, t, tlen, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_STRING_EQUAL(err.msg, "PNG: reached chunk/cache limits");
        free(t);
        free(p);
        decode_free(d);
}

static void test_decode_empty_and_limits(void) {
        decode_t *d = test_decoder(1000, 100);
        const char *code;
        size_t len;
        uint8_t *p = test_png(W, H, &len);
        errbuf_t err;

        CU_ASSERT_EQUAL(test_try(d, "", 0, RECORD_JPEG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        CU_ASSERT_EQUAL(test_try(d, "", 0, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_DECODE_FAILED);
        /* Over max_bytes: refused before the library sees it. */
        CU_ASSERT_EQUAL(test_try(d, p, len, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_LARGE);
        CU_ASSERT(strstr(err.msg, "max_bytes") != NULL);
        /* Under max_bytes, over max_pixels (60000 > 1000). */
        decode_free(d);
        d = test_decoder(1000, DECODE_DEFAULT_MAX_BYTES);
        CU_ASSERT_EQUAL(test_try(d, p, len, RECORD_PNG, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_TOO_LARGE);
        CU_ASSERT(strstr(err.msg, "max_pixels") != NULL);
        CU_ASSERT_EQUAL(test_try(d, p, len, RECORD_RGB8, &code, &err, NULL), -EINVAL);
        CU_ASSERT_STRING_EQUAL(code, RECORD_ERR_BAD_CONTENT_TYPE);
        free(p);
        decode_free(d);
        CU_ASSERT_EQUAL(decode_new(&d, 0, 10, false, &err), -EINVAL);
}

static void test_decode_geometry(void) {
        resize_geometry_t g;

        resize_geometry(451, 300, &g);          /* int(256 * 451 / 300) = 384 */
        CU_ASSERT(g.out_w == 384 && g.out_h == 256 && g.crop_x == 80 && g.crop_y == 16);
        resize_geometry(300, 451, &g);
        CU_ASSERT(g.out_w == 256 && g.out_h == 384 && g.crop_x == 16 && g.crop_y == 80);
        resize_geometry(256, 257, &g);          /* (257 - 224) / 2 = 16.5 rounds to 16 */
        CU_ASSERT(g.out_h == 257 && g.crop_y == 16);
        resize_geometry(256, 259, &g);          /* 17.5 rounds to 18 */
        CU_ASSERT(g.out_h == 259 && g.crop_y == 18);
        resize_geometry(7, 5, &g);              /* upscaled: int(256 * 7 / 5) = 358 */
        CU_ASSERT(g.out_w == 358 && g.out_h == 256 && g.crop_x == 67);
        resize_geometry(1, 65535, &g);
        CU_ASSERT(g.out_w == 256 && g.out_h == 16776960);
}

/* The planned scratch is enough for the worst geometries within the limit. */
static void test_decode_extreme_geometries(void) {
        const uint32_t sizes[][2] = { { 7071, 7071 }, { 65535, 762 }, { 762, 65535 }, { 1, 65535 }, { 65535, 1 } };
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        plan_decode_terms_t t;
        resize_scratch_t s;
        uint8_t out[224 * 224 * 3], *src;
        errbuf_t err;

        CU_ASSERT_FATAL(plan_decode_terms(DECODE_DEFAULT_MAX_PIXELS, 0, &t) == 0);
        s.rows_cap = t.resize_rows;
        s.taps_cap = t.resize_taps;
        s.rows = malloc(224 * s.rows_cap * 3);
        s.coef_x = malloc(224 * s.taps_cap * 4);
        s.coef_y = malloc(224 * s.taps_cap * 4);
        s.first_x = malloc(224 * 4), s.first_y = malloc(224 * 4), s.count_x = malloc(224 * 4), s.count_y = malloc(224 * 4);
        src = calloc(DECODE_DEFAULT_MAX_PIXELS, 1);
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                CU_ASSERT((uint64_t)sizes[i][0] * sizes[i][1] <= DECODE_DEFAULT_MAX_PIXELS);
                CU_ASSERT_EQUAL(resize_crop(src, sizes[i][0], sizes[i][1], sizes[i][0], 1, &s, out, &err), 0);
        }
        free(src);
        free(s.rows), free(s.coef_x), free(s.coef_y), free(s.first_x), free(s.first_y), free(s.count_x), free(s.count_y);
        decode_free(d);
}

/* [decode] fast on a large JPEG (2048x1536, reduced by 3/8 to 768x576) of
 * a smooth pattern with strong gradients: its 224x224 is close to the
 * accurate path's, and of the same region: closer to the accurate crop than
 * to the accurate crops of the same scene drawn one output pixel (6 pixels
 * of the scene) over in each direction. A smaller JPEG (shorter side below
 * 1024) is not reduced: identical. */
static uint8_t *test_pattern_jpeg(int w, int h, int dx, int dy, int subsamp, size_t *len) {
        uint8_t *img = malloc((size_t)w * h * 3);

        for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                        double u = (x + dx) * 2 * 3.14159265358979 / 97.0, v = (y + dy) * 2 * 3.14159265358979 / 131.0;
                        uint8_t *q = img + ((size_t)y * w + x) * 3;

                        q[0] = (uint8_t)(128 + 100 * sin(u) * cos(v));
                        q[1] = (uint8_t)(128 + 100 * cos(u * 0.7 + v));
                        q[2] = (uint8_t)(128 + 100 * sin(v * 1.3 - u * 0.4));
                }
        return jpeg_build(img, w, h, subsamp, 95, len);
}

static double test_mean_abs(const uint8_t *a, const uint8_t *b) {
        double s = 0;

        for (size_t i = 0; i < 224 * 224 * 3; i++)
                s += abs((int)a[i] - (int)b[i]);
        return s / (224 * 224 * 3);
}

static void test_decode_fast_mode(void) {
        /* The resized image is 341x256 of the 2048x1536 scene at a scale of
         * 6: a one-pixel move of the output is 6 pixels of the scene. */
        static const int moves[][2] = { { 6, 0 }, { -6, 0 }, { 0, 6 }, { 0, -6 } };
        decode_t *d = test_decoder(DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES);
        uint8_t *jpeg, acc[224 * 224 * 3], fast[224 * 224 * 3], moved[224 * 224 * 3];
        size_t len, mlen;
        const char *code;
        errbuf_t err;
        double d0, worst = 0;

        jpeg = test_pattern_jpeg(2048, 1536, 0, 0, TJSAMP_420, &len);
        CU_ASSERT_EQUAL_FATAL(decode_record(d, jpeg, len, RECORD_JPEG, acc, NULL, &code, &err), 0);
        decode_set_fast(d, true);
        CU_ASSERT_EQUAL_FATAL(decode_record(d, jpeg, len, RECORD_JPEG, fast, NULL, &code, &err), 0);
        d0 = test_mean_abs(acc, fast);
        for (size_t i = 0; i < sizeof(acc); i++)
                if (abs((int)acc[i] - (int)fast[i]) > worst)
                        worst = abs((int)acc[i] - (int)fast[i]);
        CU_ASSERT(memcmp(acc, fast, sizeof(acc)) != 0);        /* it did take the fast path */
        CU_ASSERT(d0 < 1.5);
        CU_ASSERT(worst <= 16);
        decode_set_fast(d, false);
        for (size_t m = 0; m < sizeof(moves) / sizeof(moves[0]); m++) {
                uint8_t *mj = test_pattern_jpeg(2048, 1536, moves[m][0], moves[m][1], TJSAMP_420, &mlen);

                CU_ASSERT_EQUAL_FATAL(decode_record(d, mj, mlen, RECORD_JPEG, moved, NULL, &code, &err), 0);
                CU_ASSERT(d0 < test_mean_abs(moved, fast));
                free(mj);
        }
        free(jpeg);

        /* Small: not reduced, so identical. */
        jpeg = test_pattern_jpeg(1200, 1023, 0, 0, TJSAMP_420, &len);
        CU_ASSERT_EQUAL_FATAL(decode_record(d, jpeg, len, RECORD_JPEG, acc, NULL, &code, &err), 0);
        decode_set_fast(d, true);
        CU_ASSERT_EQUAL_FATAL(decode_record(d, jpeg, len, RECORD_JPEG, fast, NULL, &code, &err), 0);
        CU_ASSERT(memcmp(acc, fast, sizeof(acc)) == 0);
        free(jpeg);
        decode_free(d);
}

/* The input of planned_memory_against_rss: a progressive CMYK 4:4:4 JPEG of
 * noise (every coefficient busy), made in the child. */
enum { RSS_W = 3000, RSS_H = 2000 };

static uint8_t *test_rss_jpeg(size_t *len) {
        uint8_t *img = malloc((size_t)RSS_W * RSS_H * 4), *jpeg = NULL;
        unsigned long n = 0;
        tjhandle tj;

        if (!img)
                return NULL;
        for (size_t i = 0; i < (size_t)RSS_W * RSS_H * 4; i++)
                img[i] = (uint8_t)(i * 2654435761u >> 13);
        tj = tjInitCompress();
        if (!tj || tjCompress2(tj, img, RSS_W, 0, RSS_H, TJPF_CMYK, &jpeg, &n, TJSAMP_444, 90, TJFLAG_PROGRESSIVE) != 0)
                jpeg = NULL;
        tjDestroy(tj);
        free(img);
        *len = n;
        return jpeg;
}

static void test_rss_jpeg_free(uint8_t *jpeg) {
        tjFree(jpeg);
}

/* The planner's per-context figure against what a context really takes at
 * its worst: a progressive CMYK 4:4:4 JPEG (libjpeg keeps all four
 * components' coefficients whole, 8 bytes a pixel, the largest library
 * term) of exactly max_pixels, decoded by a fresh context in a child
 * process (decode_check_peak_rss). The peak resident set grows by the
 * context's buffers and libjpeg's working memory: it must stay within
 * buffer_bytes + library_bytes, and exceed the pixels and coefficients the
 * decode must touch (or the measurement saw nothing). */
static void test_decode_planned_memory_against_rss(void) {
        uint64_t got[3];
        plan_decode_terms_t t;

        CU_ASSERT_FATAL(plan_decode_terms((uint64_t)RSS_W * RSS_H, 0, &t) == 0);
        decode_check_peak_rss((uint64_t)RSS_W * RSS_H, RECORD_JPEG, test_rss_jpeg, test_rss_jpeg_free, got);
        CU_ASSERT(got[0] > 0 && got[1] > got[0]);
        /* Touched at least: the CMYK pixels (4 a pixel) and the coefficients (8). */
        CU_ASSERT(got[1] - got[0] >= 11ULL * RSS_W * RSS_H);  /* 12, less a margin for pages the heap reused */
        CU_ASSERT(got[1] - got[0] <= t.buffer_bytes + t.library_bytes);
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "decode context, %dx%d progressive CMYK (%llu bytes): peak RSS +%llu bytes, planned "
                        "%llu (buffers %llu, library bound %llu)\n", RSS_W, RSS_H, (unsigned long long)got[2],
                        (unsigned long long)(got[1] - got[0]), (unsigned long long)(t.buffer_bytes + t.library_bytes),
                        (unsigned long long)t.buffer_bytes, (unsigned long long)t.library_bytes);
}

int test_decode_register(void) {
        static CU_TestInfo tests[] = {
                { "valid_images", test_decode_valid_images },
                { "truncated_jpeg", test_decode_truncated_jpeg },
                { "bomb_headers", test_decode_bomb_headers },
                { "random_after_magic", test_decode_random_after_magic },
                { "bad_crc", test_decode_bad_crc },
                { "empty_and_limits", test_decode_empty_and_limits },
                { "many_text_chunks", test_decode_many_text_chunks },
                { "geometry", test_decode_geometry },
                { "extreme_geometries", test_decode_extreme_geometries },
                { "planned_memory_against_rss", test_decode_planned_memory_against_rss },
                { "fast_mode", test_decode_fast_mode },
                { "scan_cost", test_decode_scan_cost },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("decode", tests);
}

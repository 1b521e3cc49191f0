/* Unit tests of the WebP path of decode_record: lossless WebPs (whose
 * pixels are exact) decode to what resize_crop makes of the source image,
 * alpha dropped without premultiplying; lossy ones decode; every bad one
 * (truncated, random bytes after the magic, a header claiming more than
 * max_pixels, animated, over max_bytes) is refused with its DLQ code and a
 * sentence naming WebP, before any pixel is decoded where the header
 * decides. The images are made here with libwebp's encoder; the numerics
 * against PIL and torchvision are tests/decode's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>

#include "decode/decode.h"
#include "decode_check.h"
#include "unit.h"

/* A w x h image of ch channels (3 RGB, 4 RGBA with alpha 1..255): a
 * gradient and, with noise, noise in blue, so that a shifted or flipped
 * result shows; without, a third smooth gradient (for lossy tests). */
static uint8_t *webp_test_image(int w, int h, int ch, bool noise) {
        uint8_t *p = malloc((size_t)w * h * ch);
        uint64_t s = 0x5eed;

        for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                        uint8_t *q = p + ((size_t)y * w + x) * ch;

                        q[0] = (uint8_t)(x * 255 / w);
                        q[1] = (uint8_t)(y * 255 / h);
                        q[2] = noise ? (uint8_t)unit_rand_u64(&s) : (uint8_t)((x + y) * 255 / (w + h));
                        if (ch == 4)
                                q[3] = (uint8_t)(1 + unit_rand_u64(&s) % 255);
                }
        return p;
}

/* img as a WebP: lossless or lossy (quality 80); WebPFree() the result. */
static uint8_t *webp_encode(const uint8_t *img, int w, int h, int ch, bool lossless, size_t *len) {
        uint8_t *out = NULL;

        if (ch == 4)
                *len = lossless ? WebPEncodeLosslessRGBA(img, w, h, w * 4, &out)
                                : WebPEncodeRGBA(img, w, h, w * 4, 80, &out);
        else
                *len = lossless ? WebPEncodeLosslessRGB(img, w, h, w * 3, &out)
                                : WebPEncodeRGB(img, w, h, w * 3, 80, &out);
        CU_ASSERT_FATAL(*len > 0 && out != NULL);
        return out;
}

static decode_t *webp_decoder(uint64_t max_pixels, size_t max_bytes) {
        decode_t *d = NULL;
        errbuf_t err;

        CU_ASSERT_FATAL(decode_new(&d, max_pixels, max_bytes, false, &err) == 0);
        return d;
}

/* What resize_crop makes of the RGB of img (ch 3 or 4). */
static void webp_expected(const uint8_t *img, int w, int h, int ch, uint8_t *out) {
        uint8_t *rgb = malloc((size_t)w * h * 3);

        for (size_t i = 0; i < (size_t)w * h; i++)
                memcpy(rgb + 3 * i, img + ch * i, 3);
        decode_check_resize(rgb, w, h, 3, out);
        free(rgb);
}

static void test_decode_webp_lossless_exact(void) {
        static uint8_t out[224 * 224 * 3], want[224 * 224 * 3];
        static const int sizes[][2] = { { 300, 200 }, { 131, 517 }, { 256, 256 }, { 100, 80 } };
        decode_t *d = webp_decoder(1 << 20, 1 << 20);

        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
                for (int ch = 3; ch <= 4; ch++) {
                        int w = sizes[k][0], h = sizes[k][1];
                        uint8_t *img = webp_test_image(w, h, ch, true), *webp;
                        decode_info_t info;
                        const char *code = NULL;
                        errbuf_t err = { "" };
                        size_t len;

                        webp = webp_encode(img, w, h, ch, true, &len);
                        memset(out, 0xa5, sizeof(out));
                        CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, &info, &code, &err), 0);
                        CU_ASSERT(info.format == RECORD_WEBP && info.width == (uint32_t)w &&
                                  info.height == (uint32_t)h && info.channels == 3 && info.orientation == 1);
                        webp_expected(img, w, h, ch, want);
                        /* Alpha dropped, the colour as stored: not premultiplied. */
                        CU_ASSERT(memcmp(out, want, sizeof(out)) == 0);
                        WebPFree(webp);
                        free(img);
                }
        decode_free(d);
}

static void test_decode_webp_lossy(void) {
        static uint8_t out[224 * 224 * 3], want[224 * 224 * 3];
        decode_t *d = webp_decoder(1 << 20, 1 << 20);

        for (int ch = 3; ch <= 4; ch++) {
                uint8_t *img = webp_test_image(300, 200, ch, false), *webp;
                const char *code = NULL;
                errbuf_t err = { "" };
                size_t len, close = 0;

                webp = webp_encode(img, 300, 200, ch, false, &len);
                CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, NULL, &code, &err), 0);
                /* Lossy, of smooth gradients: within a few levels of the
                 * source nearly everywhere. */
                webp_expected(img, 300, 200, ch, want);
                for (size_t i = 0; i < sizeof(out); i++)
                        close += abs(out[i] - want[i]) <= 6;
                CU_ASSERT(close >= sizeof(out) * 95 / 100);
                WebPFree(webp);
                free(img);
        }
        decode_free(d);
}

static void webp_le32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

/* A lossless (VP8L) header claiming w x h, then filler: 32 bytes. */
static void webp_vp8l_header(uint8_t *p, uint32_t w, uint32_t h) {
        memset(p, 0x55, 32);
        memcpy(p, "RIFF", 4);
        webp_le32(p + 4, 24);
        memcpy(p + 8, "WEBPVP8L", 8);
        webp_le32(p + 16, 12);
        p[20] = 0x2f;
        webp_le32(p + 21, (w - 1) | (h - 1) << 14);     /* alpha 0, version 0 */
}

static void test_decode_webp_refusals(void) {
        decode_t *d = webp_decoder(1000000, 1 << 20);
        uint8_t *img = webp_test_image(300, 200, 3, true), *webp, bomb[32], anim[30], *junk;
        static uint8_t out[224 * 224 * 3];
        const char *code;
        errbuf_t err;
        size_t len;
        uint64_t s = 7;

        webp = webp_encode(img, 300, 200, 3, false, &len);
        /* Truncated: every cut is refused as decode-failed, never a crash. */
        for (size_t cut = 1; cut < len; cut += cut < 40 ? 1 : 97) {
                code = NULL;
                err.msg[0] = '\0';
                CU_ASSERT_EQUAL(decode_record(d, webp, cut, RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
                CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
                CU_ASSERT(strncmp(err.msg, "WebP: ", 6) == 0);
        }
        /* Random bytes after a valid RIFF/WEBP/VP8 start. */
        junk = malloc(len);
        for (int round = 0; round < 50; round++) {
                memcpy(junk, webp, len);
                for (size_t i = 30; i < len; i++)
                        junk[i] = (uint8_t)unit_rand_u64(&s);
                code = NULL;
                if (decode_record(d, junk, len, RECORD_WEBP, out, NULL, &code, &err) != 0)
                        CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
        }
        free(junk);
        /* A header claiming 16384 x 16384: too-large before decoding. */
        webp_vp8l_header(bomb, 16384, 16384);
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, bomb, sizeof(bomb), RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_TOO_LARGE) == 0);
        CU_ASSERT(strstr(err.msg, "WebP header says 16384x16384") != NULL);
        CU_ASSERT(strstr(err.msg, "max_pixels (1000000)") != NULL);
        /* The same header within the limit: refused by libwebp, as corrupt. */
        webp_vp8l_header(bomb, 100, 100);
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, bomb, sizeof(bomb), RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
        /* An animated file (VP8X with the animation flag, then ANIM). */
        memset(anim, 0, sizeof(anim));
        memcpy(anim, "RIFF", 4);
        webp_le32(anim + 4, 22);
        memcpy(anim + 8, "WEBPVP8X", 8);
        webp_le32(anim + 16, 10);
        anim[20] = 0x02;
        anim[24] = 9;                           /* canvas 10 x 10 */
        anim[27] = 9;
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, anim, sizeof(anim), RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
        CU_ASSERT(strstr(err.msg, "WebP") != NULL);
        /* Over max_bytes, and empty. */
        decode_free(d);
        d = webp_decoder(1000000, len - 1);
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_TOO_LARGE) == 0);
        CU_ASSERT(strstr(err.msg, "image/webp") != NULL);
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, webp, 0, RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_DECODE_FAILED) == 0);
        /* After all that, the same context still decodes a good one. */
        decode_free(d);
        d = webp_decoder(1000000, 1 << 20);
        code = NULL;
        CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, NULL, &code, &err), 0);
        decode_free(d);
        WebPFree(webp);
        free(img);
}

/* A max_pixels just below a real image's size refuses it (too-large) and
 * just at it decodes it: the check is on the header's w x h. */
static void test_decode_webp_max_pixels_edge(void) {
        uint8_t *img = webp_test_image(120, 90, 3, true), *webp;
        static uint8_t out[224 * 224 * 3];
        const char *code = NULL;
        errbuf_t err;
        size_t len;
        decode_t *d;

        webp = webp_encode(img, 120, 90, 3, true, &len);
        d = webp_decoder(120 * 90 - 1, 1 << 20);
        CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, NULL, &code, &err), -EINVAL);
        CU_ASSERT(code && strcmp(code, RECORD_ERR_TOO_LARGE) == 0);
        decode_free(d);
        d = webp_decoder(120 * 90, 1 << 20);
        CU_ASSERT_EQUAL(decode_record(d, webp, len, RECORD_WEBP, out, NULL, &code, &err), 0);
        decode_free(d);
        WebPFree(webp);
        free(img);
}

/* The input of planned_memory_against_rss: a lossless WebP with alpha of
 * noise, made in the child. */
enum { RSS_W = 2000, RSS_H = 1500 };

static uint8_t *webp_rss_input(size_t *len) {
        uint8_t *img = webp_test_image(RSS_W, RSS_H, 4, true), *webp = NULL;

        *len = WebPEncodeLosslessRGBA(img, RSS_W, RSS_H, RSS_W * 4, &webp);
        free(img);
        return *len ? webp : NULL;
}

static void webp_rss_free(uint8_t *webp) {
        WebPFree(webp);
}

/* The planner's per-context figure against what a context takes for
 * libwebp's worst case: a lossless image with alpha (libwebp holds its
 * ARGB pixels whole, 4 bytes a pixel, beside our 3-byte RGB buffer), as
 * test_decode's planned_memory_against_rss does for JPEG: the peak
 * resident set's growth over the decode (decode_check_peak_rss), within
 * the plan. */
static void test_decode_webp_planned_memory_against_rss(void) {
        uint64_t got[3];
        plan_decode_terms_t t;

        CU_ASSERT_FATAL(plan_decode_terms((uint64_t)RSS_W * RSS_H, 0, &t) == 0);
        decode_check_peak_rss((uint64_t)RSS_W * RSS_H, RECORD_WEBP, webp_rss_input, webp_rss_free, got);
        CU_ASSERT(got[0] > 0 && got[1] > got[0]);
        /* Touched at least: our RGB (3 a pixel) and libwebp's ARGB (4). */
        CU_ASSERT(got[1] - got[0] >= 6ULL * RSS_W * RSS_H);
        CU_ASSERT(got[1] - got[0] <= t.buffer_bytes + t.library_bytes);
        if (getenv("INFERD_TEST_VERBOSE"))
                fprintf(stderr, "decode context, %dx%d lossless WebP with alpha: peak RSS +%llu bytes, planned %llu "
                        "(buffers %llu, library bound %llu)\n", RSS_W, RSS_H, (unsigned long long)(got[1] - got[0]),
                        (unsigned long long)(t.buffer_bytes + t.library_bytes), (unsigned long long)t.buffer_bytes,
                        (unsigned long long)t.library_bytes);
}

int test_decode_webp_register(void) {
        static CU_TestInfo tests[] = {
                { "lossless_exact", test_decode_webp_lossless_exact },
                { "lossy", test_decode_webp_lossy },
                { "refusals", test_decode_webp_refusals },
                { "max_pixels_edge", test_decode_webp_max_pixels_edge },
                { "planned_memory_against_rss", test_decode_webp_planned_memory_against_rss },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("decode_webp", tests);
}

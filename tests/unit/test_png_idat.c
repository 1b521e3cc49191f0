/* Unit tests of png_idat.c, inferd's own decode of a plain PNG's image
 * data: against the pixels the PNG was made from (every plain colour type,
 * each of the five filters alone and chosen per row, odd and one-pixel
 * geometries), against libspng's decode of the same record (decode_record
 * with the path on and off), and on streams it must leave to libspng (a bad
 * IDAT CRC, a zlib stream too short or too long, an unknown filter type,
 * images it does not take). The PNGs are made with libspng's encoder. */
#include <errno.h>
#include <libdeflate.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode-internal.h"
#include "unit.h"

static const int test_filters[] = { SPNG_FILTER_CHOICE_NONE, SPNG_FILTER_CHOICE_SUB, SPNG_FILTER_CHOICE_UP,
                                    SPNG_FILTER_CHOICE_AVG, SPNG_FILTER_CHOICE_PAETH, SPNG_FILTER_CHOICE_ALL };
static const struct {
        int color_type, channels;
} test_types[] = {
        { SPNG_COLOR_TYPE_GRAYSCALE, 1 },
        { SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 2 },
        { SPNG_COLOR_TYPE_TRUECOLOR, 3 },
        { SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 4 },
};
static const struct {
        int w, h;
} test_sizes[] = { { 1, 1 }, { 1, 9 }, { 9, 1 }, { 2, 3 }, { 31, 17 }, { 300, 200 } };

/* Pixels with every difference the predictors can meet: noise, with flat
 * and smooth stretches so that each filter wins some rows under ALL. */
static uint8_t *test_pixels(int w, int h, int ch, unsigned seed) {
        uint8_t *p = malloc((size_t)w * h * ch);
        uint32_t s = seed * 2654435761u + 1;

        for (size_t i = 0; i < (size_t)w * h * ch; i++) {
                s = s * 1103515245u + 12345u;
                switch ((i / ((size_t)w * ch)) % 3) {
                case 0:
                        p[i] = (uint8_t)(s >> 16);
                        break;
                case 1:
                        p[i] = (uint8_t)(i % ((size_t)w * ch));
                        break;
                default:
                        p[i] = (uint8_t)(200 + (s >> 29));
                }
        }
        return p;
}

static uint8_t *test_encode(const uint8_t *px, int w, int h, int color_type, int ch, int filters, size_t *len) {
        struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                                  .color_type = (uint8_t)color_type };
        spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);
        uint8_t *out;
        int e = 0;

        CU_ASSERT_FATAL(c != NULL);
        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_option(c, SPNG_FILTER_CHOICE, filters);
        spng_set_ihdr(c, &ihdr);
        CU_ASSERT_FATAL(spng_encode_image(c, px, (size_t)w * h * ch, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0);
        out = spng_get_png_buffer(c, len, &e);
        CU_ASSERT_FATAL(out != NULL && e == 0);
        spng_ctx_free(c);
        return out;
}

static decode_t *test_decoder(void) {
        decode_t *d = NULL;
        errbuf_t err;

        CU_ASSERT_FATAL(decode_new(&d, DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES, false, &err) == 0);
        return d;
}

/* The decoded pixels are the ones encoded, alpha dropped, for every plain
 * colour type, filter and geometry. */
static void test_png_idat_pixels(void) {
        decode_t *d = test_decoder();
        unsigned seed = 0;

        for (size_t t = 0; t < sizeof(test_types) / sizeof(test_types[0]); t++)
                for (size_t f = 0; f < sizeof(test_filters) / sizeof(test_filters[0]); f++)
                        for (size_t s = 0; s < sizeof(test_sizes) / sizeof(test_sizes[0]); s++) {
                                int w = test_sizes[s].w, h = test_sizes[s].h, ch = test_types[t].channels;
                                int out_ch = ch >= 3 ? 3 : 1;
                                uint8_t *px = test_pixels(w, h, ch, ++seed), *png;
                                size_t len, bad = 0;

                                png = test_encode(px, w, h, test_types[t].color_type, ch, test_filters[f], &len);
                                CU_ASSERT_FATAL(decode_png_idat(d, png, len, (uint32_t)w, (uint32_t)h, ch, out_ch));
                                for (size_t i = 0; i < (size_t)w * h; i++)
                                        for (int k = 0; k < out_ch; k++)
                                                bad += d->pixels[i * out_ch + k] != px[i * ch + k];
                                if (bad)
                                        fprintf(stderr, "png_idat: type %d filters %d %dx%d: %zu bytes differ\n",
                                                test_types[t].color_type, test_filters[f], w, h, bad);
                                CU_ASSERT_EQUAL(bad, 0);
                                free(png);
                                free(px);
                        }
        decode_free(d);
}

/* decode_record gives the same 224x224 output, return and message with the
 * path on and off (libspng alone), on good records and on every one-byte
 * corruption of a small one's chunks after the header. */
static int test_both(decode_t *d, const uint8_t *png, size_t len) {
        static uint8_t out_own[224 * 224 * 3], out_spng[224 * 224 * 3];
        const char *code_own = NULL, *code_spng = NULL;
        errbuf_t err_own = { "" }, err_spng = { "" };
        int r_own, r_spng;

        memset(out_own, 0x5a, sizeof(out_own));
        memset(out_spng, 0x5a, sizeof(out_spng));
        decode_set_png_own_idat(d, true);
        r_own = decode_record(d, png, len, RECORD_PNG, out_own, NULL, &code_own, &err_own);
        decode_set_png_own_idat(d, false);
        r_spng = decode_record(d, png, len, RECORD_PNG, out_spng, NULL, &code_spng, &err_spng);
        decode_set_png_own_idat(d, true);
        CU_ASSERT_EQUAL(r_own, r_spng);
        if (r_own == 0 && r_spng == 0)
                CU_ASSERT(memcmp(out_own, out_spng, sizeof(out_own)) == 0);
        if (r_own != 0 && r_spng != 0) {
                CU_ASSERT_STRING_EQUAL(code_own, code_spng);
                CU_ASSERT_STRING_EQUAL(err_own.msg, err_spng.msg);
        }
        return r_own;
}

static void test_png_idat_same_as_libspng(void) {
        decode_t *d = test_decoder();
        uint8_t *px = test_pixels(37, 23, 4, 7), *png;
        size_t len, refused = 0;

        for (size_t t = 0; t < sizeof(test_types) / sizeof(test_types[0]); t++) {
                png = test_encode(px, 37, 23, test_types[t].color_type, test_types[t].channels, SPNG_FILTER_CHOICE_ALL,
                                  &len);
                CU_ASSERT_EQUAL(test_both(d, png, len), 0);
                free(png);
        }
        png = test_encode(px, 37, 23, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 4, SPNG_FILTER_CHOICE_ALL, &len);
        for (size_t i = 33; i < len; i++)
                for (int bit = 0; bit < 8; bit += 3) {
                        png[i] ^= (uint8_t)(1u << bit);
                        refused += test_both(d, png, len) != 0;
                        png[i] ^= (uint8_t)(1u << bit);
                }
        /* Most corruptions are refused (by a CRC); the rest decode alike. */
        CU_ASSERT(refused > (len - 33) * 3 / 2);
        free(png);
        free(px);
        decode_free(d);
}

/* Rewrites the IDAT chunks of a PNG as one chunk holding data (CRC made
 * right), keeping the chunks around it. */
static uint8_t *test_with_idat(const uint8_t *png, size_t len, const uint8_t *data, size_t n, size_t *out_len) {
        uint8_t *out = malloc(len + n + 12), *o = out;
        size_t off = 8;
        int done = 0;

        memcpy(o, png, 8);
        o += 8;
        while (off + 12 <= len) {
                uint32_t cl = (uint32_t)png[off] << 24 | (uint32_t)png[off + 1] << 16 | (uint32_t)png[off + 2] << 8 |
                              png[off + 3];

                if (memcmp(png + off + 4, "IDAT", 4) != 0) {
                        memcpy(o, png + off, 12 + cl);
                        o += 12 + cl;
                } else if (!done) {
                        uint32_t crc;

                        o[0] = (uint8_t)(n >> 24);
                        o[1] = (uint8_t)(n >> 16);
                        o[2] = (uint8_t)(n >> 8);
                        o[3] = (uint8_t)n;
                        memcpy(o + 4, "IDAT", 4);
                        memcpy(o + 8, data, n);
                        crc = libdeflate_crc32(0, o + 4, n + 4);
                        o[8 + n] = (uint8_t)(crc >> 24);
                        o[9 + n] = (uint8_t)(crc >> 16);
                        o[10 + n] = (uint8_t)(crc >> 8);
                        o[11 + n] = (uint8_t)crc;
                        o += 12 + n;
                        done = 1;
                }
                off += 12 + cl;
        }
        *out_len = (size_t)(o - out);
        return out;
}

/* A zlib stream of the given filtered rows. */
static uint8_t *test_zlib(const uint8_t *raw, size_t n, size_t *zn) {
        struct libdeflate_compressor *c = libdeflate_alloc_compressor(6);
        size_t cap;
        uint8_t *z;

        CU_ASSERT_FATAL(c != NULL);
        cap = libdeflate_zlib_compress_bound(c, n);
        z = malloc(cap);
        *zn = libdeflate_zlib_compress(c, raw, n, z, cap);
        CU_ASSERT_FATAL(*zn > 0);
        libdeflate_free_compressor(c);
        return z;
}

/* What the path leaves to libspng, and libspng's verdict then stands. */
static void test_png_idat_leaves_to_libspng(void) {
        enum { TW = 5, TH = 4, TS = TW * 3 + 1 };
        decode_t *d = test_decoder();
        uint8_t *px = test_pixels(TW, TH, 3, 3), *png, *bad, raw[TS * TH + TS], *z;
        size_t len, bad_len, zn;

        png = test_encode(px, TW, TH, SPNG_COLOR_TYPE_TRUECOLOR, 3, SPNG_FILTER_CHOICE_NONE, &len);
        for (int y = 0; y < TH + 1; y++) {
                raw[y * TS] = 0;
                memcpy(raw + y * TS + 1, px + (size_t)(y % TH) * TW * 3, TW * 3);
        }
        /* The stream as it should be, then one that also decodes (a row
         * filtered Up). */
        z = test_zlib(raw, TS * TH, &zn);
        bad = test_with_idat(png, len, z, zn, &bad_len);
        CU_ASSERT(decode_png_idat(d, bad, bad_len, TW, TH, 3, 3));
        CU_ASSERT_EQUAL(test_both(d, bad, bad_len), 0);
        free(bad);
        free(z);
        /* An unknown filter type (5): refused by libspng. */
        raw[TS] = 5;
        z = test_zlib(raw, TS * TH, &zn);
        bad = test_with_idat(png, len, z, zn, &bad_len);
        CU_ASSERT(!decode_png_idat(d, bad, bad_len, TW, TH, 3, 3));
        CU_ASSERT_EQUAL(test_both(d, bad, bad_len), -EINVAL);
        free(bad);
        free(z);
        raw[TS] = 0;
        /* A stream one row short: refused. */
        z = test_zlib(raw, TS * (TH - 1), &zn);
        bad = test_with_idat(png, len, z, zn, &bad_len);
        CU_ASSERT(!decode_png_idat(d, bad, bad_len, TW, TH, 3, 3));
        CU_ASSERT_EQUAL(test_both(d, bad, bad_len), -EINVAL);
        free(bad);
        free(z);
        /* A stream one row long: not this path's to judge (libspng decides). */
        z = test_zlib(raw, TS * (TH + 1), &zn);
        bad = test_with_idat(png, len, z, zn, &bad_len);
        CU_ASSERT(!decode_png_idat(d, bad, bad_len, TW, TH, 3, 3));
        test_both(d, bad, bad_len);
        free(bad);
        free(z);
        /* A bad CRC on the image data: this path refuses it; libspng 0.7.3
         * does not read the CRC of the IDAT chunk in which the zlib stream
         * ends (here the only one), so its verdict, which stands, is a
         * success. PIL does not check IDAT CRCs at all. */
        {
                size_t off = 8 + 25;            /* the first chunk after IHDR is the IDAT */
                uint32_t n = (uint32_t)png[off] << 24 | (uint32_t)png[off + 1] << 16 | (uint32_t)png[off + 2] << 8 |
                             png[off + 3];

                CU_ASSERT_FATAL(memcmp(png + off + 4, "IDAT", 4) == 0);
                png[off + 8 + n] ^= 1;
                CU_ASSERT(!decode_png_idat(d, png, len, TW, TH, 3, 3));
                test_both(d, png, len);
                png[off + 8 + n] ^= 1;
        }
        /* No room in the pixel buffer (an image near max_pixels): left to
         * libspng, which decodes it. */
        {
                decode_t *small = NULL;
                errbuf_t err;

                CU_ASSERT_FATAL(decode_new(&small, TW * TH, DECODE_DEFAULT_MAX_BYTES, false, &err) == 0);
                CU_ASSERT(!decode_png_idat(small, png, len, TW, TH, 3, 3));
                CU_ASSERT_EQUAL(test_both(small, png, len), 0);
                decode_free(small);
        }
        free(png);
        free(px);
        decode_free(d);
}

int test_png_idat_register(void) {
        static CU_TestInfo tests[] = {
                { "pixels", test_png_idat_pixels },
                { "same_as_libspng", test_png_idat_same_as_libspng },
                { "leaves_to_libspng", test_png_idat_leaves_to_libspng },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("png_idat", tests);
}

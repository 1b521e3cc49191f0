/* Unit tests of [decode] exif_orientation: the EXIF reader
 * (decode_orientation) on blocks made here, in the three containers, and
 * the turned resize: a PNG carrying each of the eight orientations decodes
 * to what resize_crop makes of the image turned by hand as PIL's
 * Image.transpose turns it, in RGB and grey. With the option off the tag
 * changes nothing. The comparison with PIL's ImageOps.exif_transpose
 * itself is tests/decode's. */
#include <errno.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "decode_check.h"
#include "jpeg_build.h"
#include "unit.h"

static void exif_put16(uint8_t *p, uint32_t v, bool be) {
        p[be ? 0 : 1] = (uint8_t)(v >> 8);
        p[be ? 1 : 0] = (uint8_t)v;
}

static void exif_put32(uint8_t *p, uint32_t v, bool be) {
        for (int i = 0; i < 4; i++)
                p[be ? i : 3 - i] = (uint8_t)(v >> (24 - 8 * i));
}

typedef struct exif_entry {
        uint16_t tag, type;
        uint32_t count, value;          /* value: inline (left-justified, as TIFF stores it) or an offset */
} exif_entry_t;

/* A TIFF block: header, one IFD of n entries, and 8 bytes of zeros for
 * values stored after it. Returns its length. */
static size_t exif_block(uint8_t *p, bool be, const exif_entry_t *e, int n) {
        size_t off = 8;

        memcpy(p, be ? "MM\0*" : "II*\0", 4);
        exif_put32(p + 4, 8, be);
        exif_put16(p + off, (uint32_t)n, be);
        off += 2;
        for (int i = 0; i < n; i++, off += 12) {
                exif_put16(p + off, e[i].tag, be);
                exif_put16(p + off + 2, e[i].type, be);
                exif_put32(p + off + 4, e[i].count, be);
                memset(p + off + 8, 0, 4);
                if ((e[i].type == 3 || e[i].type == 8) && e[i].count <= 2)
                        exif_put16(p + off + 8, e[i].value, be);
                else if (e[i].type == 1 && e[i].count <= 4)
                        p[off + 8] = (uint8_t)e[i].value;
                else
                        exif_put32(p + off + 8, e[i].value, be);
        }
        memset(p + off, 0, 12);         /* the next IFD (none), then room for a value */
        return off + 12;
}

/* The same block in a JPEG APP1, a PNG eXIf and a WebP EXIF chunk must read
 * the same; returns the JPEG's reading after checking the others. */
static int exif_read_all(const uint8_t *tiff, size_t n) {
        uint8_t buf[512];
        int oj, op, ow;

        /* JPEG: SOI, APP0 (JFIF), APP1 "Exif\0\0" + tiff, EOI. */
        memcpy(buf, "\xff\xd8\xff\xe0\x00\x10JFIF\0\x01\x01\0\0\x01\0\x01\0\0\xff\xe1", 22);
        exif_put16(buf + 22, (uint32_t)(n + 8), true);
        memcpy(buf + 24, "Exif\0\0", 6);
        memcpy(buf + 30, tiff, n);
        memcpy(buf + 30 + n, "\xff\xd9", 2);
        oj = decode_orientation(RECORD_JPEG, buf, 32 + n);
        /* PNG: signature, eXIf (CRC not checked by the reader), IEND. */
        memcpy(buf, "\x89PNG\r\n\x1a\n", 8);
        exif_put32(buf + 8, (uint32_t)n, true);
        memcpy(buf + 12, "eXIf", 4);
        memcpy(buf + 16, tiff, n);
        memset(buf + 16 + n, 0, 4);
        memcpy(buf + 20 + n, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
        op = decode_orientation(RECORD_PNG, buf, 32 + n);
        /* WebP: RIFF, VP8X, EXIF. */
        memcpy(buf, "RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\x08\0\0\0\0\0\0\0\0\0EXIF", 34);
        exif_put32(buf + 34, (uint32_t)n, false);
        memcpy(buf + 38, tiff, n);
        ow = decode_orientation(RECORD_WEBP, buf, 38 + n);
        CU_ASSERT_EQUAL(op, oj);
        CU_ASSERT_EQUAL(ow, oj);
        return oj;
}

static void test_decode_exif_reader(void) {
        uint8_t t[256];
        size_t n;

        for (int be = 0; be <= 1; be++) {
                for (uint32_t o = 1; o <= 8; o++) {
                        exif_entry_t e[] = { { 0x010f, 2, 4, 0 }, { 0x0112, 3, 1, o }, { 0x0131, 2, 4, 0 } };

                        n = exif_block(t, be, e, 3);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), (int)o);
                        /* As LONG, BYTE and SSHORT too. */
                        e[1].type = 4;
                        n = exif_block(t, be, e, 3);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), (int)o);
                        e[1].type = 1;
                        n = exif_block(t, be, e, 3);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), (int)o);
                        e[1].type = 8;
                        n = exif_block(t, be, e, 3);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), (int)o);
                }
                /* Out of range: as stored. */
                for (uint32_t o = 0; o <= 300; o += o < 10 ? 9 : 291) {
                        exif_entry_t e[] = { { 0x0112, 3, 1, o } };

                        n = exif_block(t, be, e, 1);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 1);
                }
                /* Two values: the first counts (PIL keeps it). */
                {
                        exif_entry_t e[] = { { 0x0112, 3, 2, 6 } };

                        n = exif_block(t, be, e, 1);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 6);
                }
                /* A later entry replaces an earlier one; a rational one
                 * replaces it with nothing to apply. */
                {
                        exif_entry_t e[] = { { 0x0112, 3, 1, 3 }, { 0x0112, 3, 1, 8 } };

                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 8);
                        e[1] = (exif_entry_t){ 0x0112, 5, 1, 34 };     /* RATIONAL at offset 34 (zeros) */
                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 1);
                        /* A type PIL cannot read, or a value outside the block: skipped. */
                        e[1] = (exif_entry_t){ 0x0112, 99, 1, 8 };
                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 3);
                        e[1] = (exif_entry_t){ 0x0112, 4, 3, 0xfffffff0 };
                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 3);
                        /* No value at all: skipped. */
                        e[1] = (exif_entry_t){ 0x0112, 3, 0, 8 };
                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 3);
                }
                /* Truncated after the first entry: what was read counts. */
                {
                        exif_entry_t e[] = { { 0x0112, 3, 1, 5 }, { 0x0131, 2, 4, 0 } };

                        n = exif_block(t, be, e, 2);
                        CU_ASSERT_EQUAL(exif_read_all(t, 10 + 12 + 5), 5);
                        CU_ASSERT_EQUAL(exif_read_all(t, 10 + 11), 1);
                }
                /* The IFD's offset beyond the block. */
                {
                        exif_entry_t e[] = { { 0x0112, 3, 1, 6 } };

                        n = exif_block(t, be, e, 1);
                        exif_put32(t + 4, 4000, be);
                        CU_ASSERT_EQUAL(exif_read_all(t, n), 1);
                }
        }
        /* Not TIFF, empty, and a record with no EXIF at all. */
        memcpy(t, "XX*\0\x08\0\0\0", 8);
        CU_ASSERT_EQUAL(exif_read_all(t, 8), 1);
        CU_ASSERT_EQUAL(exif_read_all(t, 0), 1);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_JPEG, "\xff\xd8\xff\xd9", 4), 1);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_PNG, "\x89PNG", 4), 1);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_WEBP, "RIFF\0\0\0\0WEBPVP8 ", 16), 1);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_RGB8, "", 0), 1);
}

/* JPEG: the first APP1 Exif segment counts, and none after the scan. */
static void test_decode_exif_jpeg_segments(void) {
        uint8_t t[64], buf[512], *p = buf;
        exif_entry_t e6[] = { { 0x0112, 3, 1, 6 } }, e3[] = { { 0x0112, 3, 1, 3 } };
        size_t n;

        memcpy(p, "\xff\xd8", 2);
        p += 2;
        /* An APP1 that is XMP, not Exif, first: skipped. */
        memcpy(p, "\xff\xe1\x00\x06http", 8);
        p += 8;
        n = exif_block(t, false, e6, 1);
        memcpy(p, "\xff\xe1", 2);
        exif_put16(p + 2, (uint32_t)(n + 8), true);
        memcpy(p + 4, "Exif\0\0", 6);
        memcpy(p + 10, t, n);
        p += 10 + n;
        n = exif_block(t, false, e3, 1);
        memcpy(p, "\xff\xff\xe1", 3);   /* a fill byte before the marker */
        exif_put16(p + 3, (uint32_t)(n + 8), true);
        memcpy(p + 5, "Exif\0\0", 6);
        memcpy(p + 11, t, n);
        p += 11 + n;
        CU_ASSERT_EQUAL(decode_orientation(RECORD_JPEG, buf, (size_t)(p - buf)), 6);
        /* After a start of scan, nothing is read. */
        memcpy(buf + 2, "\xff\xda\x00\x08", 4);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_JPEG, buf, (size_t)(p - buf)), 1);
        /* A segment length past the end. */
        memcpy(buf + 2, "\xff\xe1\xff\xff", 4);
        CU_ASSERT_EQUAL(decode_orientation(RECORD_JPEG, buf, (size_t)(p - buf)), 1);
}

/* The image turned as PIL's Image.transpose turns it for orientation o
 * (ImageOps.exif_transpose's table); *tw x *th. */
static uint8_t *exif_turn(const uint8_t *src, int w, int h, int ch, int o, int *tw, int *th) {
        bool swap = o >= 5;
        uint8_t *dst = malloc((size_t)w * h * ch);

        *tw = swap ? h : w;
        *th = swap ? w : h;
        for (int v = 0; v < *th; v++)
                for (int u = 0; u < *tw; u++) {
                        int x = 0, y = 0;

                        switch (o) {
                        case 1: x = u, y = v; break;
                        case 2: x = w - 1 - u, y = v; break;                    /* FLIP_LEFT_RIGHT */
                        case 3: x = w - 1 - u, y = h - 1 - v; break;            /* ROTATE_180 */
                        case 4: x = u, y = h - 1 - v; break;                    /* FLIP_TOP_BOTTOM */
                        case 5: x = v, y = u; break;                            /* TRANSPOSE */
                        case 6: x = v, y = h - 1 - u; break;                    /* ROTATE_270 */
                        case 7: x = w - 1 - v, y = h - 1 - u; break;            /* TRANSVERSE */
                        case 8: x = w - 1 - v, y = u; break;                    /* ROTATE_90 */
                        }
                        memcpy(dst + ((size_t)v * *tw + u) * ch, src + ((size_t)y * w + x) * ch, (size_t)ch);
                }
        return dst;
}

/* A PNG (8-bit RGB or grey) of img carrying orientation o (none for 0). */
static uint8_t *exif_png(const uint8_t *img, int w, int h, int ch, int o, size_t *len) {
        struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                                  .color_type = ch == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR };
        uint8_t t[64], *out;
        exif_entry_t e[] = { { 0x0112, 3, 1, (uint32_t)o } };
        struct spng_exif exif = { .length = exif_block(t, true, e, 1), .data = (char *)t };
        spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);
        int err = 0;

        CU_ASSERT_FATAL(c != NULL);
        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_ihdr(c, &ihdr);
        if (o)
                CU_ASSERT_FATAL(spng_set_exif(c, &exif) == 0);
        CU_ASSERT_FATAL(spng_encode_image(c, img, (size_t)w * h * ch, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0);
        out = spng_get_png_buffer(c, len, &err);
        CU_ASSERT_FATAL(out != NULL && err == 0);
        spng_ctx_free(c);
        return out;
}

/* Each orientation, RGB and grey, of sizes whose turned margins around the
 * crop are odd, and one whose turned shorter side is exactly 256. */
static void test_decode_exif_turned_resize(void) {
        static const int sizes[][2] = { { 451, 301 }, { 256, 397 }, { 300, 700 } };
        static uint8_t out[224 * 224 * 3], want[224 * 224 * 3], plain[224 * 224 * 3];
        decode_t *d = NULL;
        errbuf_t err;
        uint64_t s = 11;

        CU_ASSERT_FATAL(decode_new(&d, 1 << 20, 4 << 20, false, &err) == 0);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
                for (int ch = 1; ch <= 3; ch += 2) {
                        int w = sizes[k][0], h = sizes[k][1];
                        uint8_t *img = malloc((size_t)w * h * ch);

                        for (size_t i = 0; i < (size_t)w * h * ch; i++)
                                img[i] = (uint8_t)(((i / ch) % w) * 3 + ((i / ch) / w) * 5 + (unit_rand_u64(&s) & 31));
                        decode_check_resize(img, w, h, ch, plain);
                        for (int o = 1; o <= 8; o++) {
                                int tw, th;
                                uint8_t *turned = exif_turn(img, w, h, ch, o, &tw, &th), *png;
                                const char *code = NULL;
                                decode_info_t info;
                                size_t len;

                                decode_check_resize(turned, tw, th, ch, want);
                                png = exif_png(img, w, h, ch, o, &len);
                                decode_set_exif_orientation(d, true);
                                CU_ASSERT_EQUAL(decode_record(d, png, len, RECORD_PNG, out, &info, &code, &err), 0);
                                CU_ASSERT_EQUAL(info.orientation, o);
                                CU_ASSERT(info.width == (uint32_t)w && info.height == (uint32_t)h);
                                CU_ASSERT(memcmp(out, want, sizeof(out)) == 0);
                                /* Off: the tag changes nothing. */
                                decode_set_exif_orientation(d, false);
                                CU_ASSERT_EQUAL(decode_record(d, png, len, RECORD_PNG, out, &info, &code, &err), 0);
                                CU_ASSERT_EQUAL(info.orientation, 1);
                                CU_ASSERT(memcmp(out, plain, sizeof(out)) == 0);
                                free(png);
                                free(turned);
                        }
                        free(img);
                }
        decode_free(d);
}

/* A JPEG's orientation, read in the decode itself (the reader on a real
 * TurboJPEG stream with an APP1 inserted after its SOI). */
static void test_decode_exif_jpeg_decoded(void) {
        int w = 320, h = 240;
        uint8_t *img = malloc((size_t)w * h * 3), *jpeg, *with, t[64];
        static uint8_t a[224 * 224 * 3], b[224 * 224 * 3];
        exif_entry_t e[] = { { 0x0112, 3, 1, 8 } };
        const char *code = NULL;
        decode_info_t info;
        decode_t *d = NULL;
        errbuf_t err;
        size_t len, n;

        for (size_t i = 0; i < (size_t)w * h * 3; i++)
                img[i] = (uint8_t)(i * 7 / 3);
        jpeg = jpeg_build(img, w, h, 2 /* TJSAMP_420 */, 90, &len);
        n = exif_block(t, false, e, 1);
        with = malloc(len + n + 10);
        memcpy(with, jpeg, 2);
        memcpy(with + 2, "\xff\xe1", 2);
        exif_put16(with + 4, (uint32_t)(n + 8), true);
        memcpy(with + 6, "Exif\0\0", 6);
        memcpy(with + 12, t, n);
        memcpy(with + 12 + n, jpeg + 2, len - 2);
        CU_ASSERT_FATAL(decode_new(&d, 1 << 20, 1 << 20, false, &err) == 0);
        decode_set_exif_orientation(d, true);
        CU_ASSERT_EQUAL(decode_record(d, with, len + n + 10, RECORD_JPEG, a, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(info.orientation, 8);
        decode_set_exif_orientation(d, false);
        CU_ASSERT_EQUAL(decode_record(d, with, len + n + 10, RECORD_JPEG, b, &info, &code, &err), 0);
        CU_ASSERT_EQUAL(info.orientation, 1);
        CU_ASSERT(memcmp(a, b, sizeof(a)) != 0);        /* turned: a 4:3 image's crop is not its turned crop */
        decode_free(d);
        free(with);
        free(jpeg);
}

int test_decode_exif_register(void) {
        static CU_TestInfo tests[] = {
                { "reader", test_decode_exif_reader },
                { "jpeg_segments", test_decode_exif_jpeg_segments },
                { "turned_resize", test_decode_exif_turned_resize },
                { "jpeg_decoded", test_decode_exif_jpeg_decoded },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("decode_exif", tests);
}

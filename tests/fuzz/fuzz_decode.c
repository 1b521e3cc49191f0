/* fuzz_decode: a libFuzzer target for the JPEG/PNG/WebP path: decode_record()
 * (TurboJPEG, libspng or libwebp, inferd's own decode of plain PNGs' image
 * data (png_idat.c), the colour conversions, the EXIF orientation's reader
 * (decode_exif.c) and the turned resize, the resize and crop).
 *
 * Each input is a record; its format comes from its magic bytes, as the
 * daemon would sniff it (inputs with no magic are tried as each). The
 * limits are small (1 MP, 1 MiB) so that the search stays fast, and the
 * checks are: a refusal is -EINVAL with one of the DLQ codes and a sentence;
 * a success writes all of the 224x224x3 output (it is poisoned with a
 * pattern first, and a success that leaves every byte of it untouched is a
 * bug); a PNG gives the same result (return, code, message and every
 * output byte) with png_idat.c on and off, so that path never accepts
 * what libspng refuses nor decodes differently; after a refusal, the same context still decodes a good JPEG (a
 * failed TurboJPEG call once left the handle broken for every later image);
 * the EXIF orientation of every input, read as each format, is 1..8, and a
 * success with exif_orientation on (half the inputs) reports the one
 * decode_orientation reads;
 * nothing crashes, leaks or trips ASan/UBSan in our code. The libraries
 * themselves are not instrumented.
 *
 * Built with -DFUZZ_DECODE_GEN instead, it writes the seed corpus: images
 * made with TurboJPEG, libspng's and libwebp's encoders in the modes inferd
 * reads (and JPEG, PNG and WebP files carrying an EXIF orientation), so
 * that no binary seeds live in git (tools/fuzz adds the small photographs of
 * tests/decode's cache when it is there). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

#define FUZZ_MAX_PIXELS (1u << 20)
#define FUZZ_MAX_BYTES ((size_t)1 << 20)

#ifndef FUZZ_DECODE_GEN

#include <libdeflate.h>
#include <turbojpeg.h>

static decode_t *fuzz_decoder;
static uint8_t *fuzz_good_jpeg;         /* a valid 40x30 JPEG, made at start */
static unsigned long fuzz_good_len;

static void fuzz_make_good(void) {
        static uint8_t px[40 * 30 * 3];
        tjhandle t = tjInitCompress();

        for (size_t i = 0; i < sizeof(px); i++)
                px[i] = (uint8_t)(i * 13);
        if (!t || tjCompress2(t, px, 40, 0, 30, TJPF_RGB, &fuzz_good_jpeg, &fuzz_good_len, TJSAMP_420, 80, 0) != 0)
                abort();
        tjDestroy(t);
}

/* The same record decoded by libspng alone must give the same result. */
static void fuzz_png_same_without_own(const uint8_t *data, size_t size, int r, const char *code, const errbuf_t *err,
                                      const uint8_t *out) {
        static uint8_t out_spng[224 * 224 * 3];
        const char *code_spng = NULL;
        errbuf_t err_spng = { "" };
        int r_spng;

        memset(out_spng, 0xa5, sizeof(out_spng));
        decode_set_png_own_idat(fuzz_decoder, false);
        r_spng = decode_record(fuzz_decoder, data, size, RECORD_PNG, out_spng, NULL, &code_spng, &err_spng);
        decode_set_png_own_idat(fuzz_decoder, true);
        if (r_spng != r)
                abort();
        if (r == 0 && memcmp(out, out_spng, sizeof(out_spng)) != 0)
                abort();
        if (r != 0 && (strcmp(code, code_spng) != 0 || strcmp(err->msg, err_spng.msg) != 0))
                abort();
}

static void fuzz_one(const uint8_t *data, size_t size, record_format_t f, bool exif) {
        static uint8_t out[224 * 224 * 3];
        const char *code = NULL;
        errbuf_t err = { "" };
        size_t untouched = 0;
        decode_info_t info;
        int r, o;

        /* The EXIF reader on every input, whatever the decoder says. */
        o = decode_orientation(f, data, size);
        if (o < 1 || o > 8)
                abort();
        memset(out, 0xa5, sizeof(out));
        decode_set_exif_orientation(fuzz_decoder, exif);
        r = decode_record(fuzz_decoder, data, size, f, out, &info, &code, &err);
        if (r == 0 && info.orientation != (exif ? o : 1))
                abort();
        if (f == RECORD_PNG && !exif)
                fuzz_png_same_without_own(data, size, r, code, &err, out);
        if (r == 0) {
                for (size_t i = 0; i < sizeof(out); i++)
                        untouched += out[i] == 0xa5;
                if (untouched == sizeof(out))
                        abort();
                return;
        }
        if (r != -EINVAL && r != -E2BIG)
                abort();
        if (!code || !err.msg[0])
                abort();
        if (strcmp(code, RECORD_ERR_DECODE_FAILED) != 0 && strcmp(code, RECORD_ERR_TOO_LARGE) != 0)
                abort();
        if (decode_record(fuzz_decoder, fuzz_good_jpeg, fuzz_good_len, RECORD_JPEG, out, NULL, &code, &err) != 0)
                abort();        /* a refusal broke the context */
}

/* The PNG again with every chunk's CRC-32 made right, so that mutations
 * of the image data reach the inflate and the unfilter instead of stopping
 * at a CRC. */
static void fuzz_png_crcs_made_right(const uint8_t *data, size_t size) {
        uint8_t *p = malloc(size);
        size_t off = 8;

        if (!p)
                abort();
        memcpy(p, data, size);
        while (off + 12 <= size) {
                uint32_t n = (uint32_t)p[off] << 24 | (uint32_t)p[off + 1] << 16 | (uint32_t)p[off + 2] << 8 | p[off + 3];
                uint32_t crc;

                if (n > size - off - 12)
                        break;
                crc = libdeflate_crc32(0, p + off + 4, (size_t)n + 4);
                p[off + 8 + n] = (uint8_t)(crc >> 24);
                p[off + 9 + n] = (uint8_t)(crc >> 16);
                p[off + 10 + n] = (uint8_t)(crc >> 8);
                p[off + 11 + n] = (uint8_t)crc;
                off += 12 + (size_t)n;
        }
        fuzz_one(p, size, RECORD_PNG, false);
        free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        record_format_t f;
        const char *code;
        errbuf_t err;

        if (!fuzz_decoder) {
                if (decode_new(&fuzz_decoder, FUZZ_MAX_PIXELS, FUZZ_MAX_BYTES, false, &err) < 0)
                        abort();
                fuzz_make_good();
        }
        /* [decode] fast's reduced path on half the inputs (it only changes
         * JPEGs whose shorter side is 1024 or more). */
        decode_set_fast(fuzz_decoder, size & 1);
        if (record_identify(data, size, NULL, 0, &f, &code, &err) == 0 && record_is_encoded(f)) {
                /* exif_orientation on half the inputs (never with the PNG
                 * differential, which compares two decodes of one image). */
                fuzz_one(data, size, f, size & 4);
                if (f == RECORD_PNG && (size & 2))
                        fuzz_png_crcs_made_right(data, size);
        }
        else {
                fuzz_one(data, size, RECORD_JPEG, size & 4);
                fuzz_one(data, size, RECORD_PNG, false);
                fuzz_one(data, size, RECORD_WEBP, size & 4);
        }
        return 0;
}

#else /* FUZZ_DECODE_GEN: the seed corpus */

#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

static const char *gen_dir;

static void gen_write(const char *name, const void *p, size_t n) {
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/seed-%s", gen_dir, name);
        f = fopen(path, "wb");
        if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
                perror(path);
                exit(1);
        }
}

static uint8_t *gen_pixels(int w, int h, int ch) {
        uint8_t *p = malloc((size_t)w * h * ch * 2);

        for (int i = 0; i < w * h * ch * 2; i++)
                p[i] = (uint8_t)((i * 37) ^ (i / (w * ch) * 11));
        return p;
}

static void gen_jpeg(const char *name, int w, int h, int pf, int ch, int samp, int flags) {
        uint8_t *img = gen_pixels(w, h, ch), *buf = NULL;
        unsigned long n = 0;
        tjhandle t = tjInitCompress();

        if (!t || tjCompress2(t, img, w, 0, h, pf, &buf, &n, samp, 80, flags) != 0) {
                fprintf(stderr, "%s: %s\n", name, tjGetErrorStr2(t));
                exit(1);
        }
        gen_write(name, buf, n);
        tjFree(buf);
        tjDestroy(t);
        free(img);
}

/* Writes the PNG that encoder c made (into its buffer), then frees c and
 * the pixels it was made of. */
static void gen_png_write(const char *name, spng_ctx *c, uint8_t *img) {
        size_t n = 0;
        int e = 0;
        uint8_t *out = spng_get_png_buffer(c, &n, &e);

        gen_write(name, out, n);
        free(out);
        spng_ctx_free(c);
        free(img);
}

static void gen_png(const char *name, int w, int h, int color_type, int depth, int ch) {
        struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = (uint8_t)depth,
                                  .color_type = (uint8_t)color_type };
        struct spng_plte plte = { .n_entries = 16 };
        uint8_t *img = gen_pixels(w, h, ch);
        size_t row = ((size_t)w * ch * depth + 7) / 8;
        spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);

        for (int i = 0; i < 16; i++)
                plte.entries[i] = (struct spng_plte_entry){ (uint8_t)(i * 16), (uint8_t)(255 - i * 16), 7, 255 };
        if (color_type == SPNG_COLOR_TYPE_INDEXED)
                for (size_t i = 0; i < row * h; i++)
                        img[i] &= depth == 8 ? 0x0f : 0xff;
        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_ihdr(c, &ihdr);
        if (color_type == SPNG_COLOR_TYPE_INDEXED)
                spng_set_plte(c, &plte);
        if (spng_encode_image(c, img, row * h, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) != 0) {
                fprintf(stderr, "%s: cannot encode\n", name);
                exit(1);
        }
        gen_png_write(name, c, img);
}

/* A little-endian TIFF block with one IFD entry: Orientation = o (SHORT). */
static size_t gen_tiff(uint8_t *p, int o) {
        static const uint8_t head[] = { 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0 };

        memcpy(p, head, sizeof(head));
        p[18] = (uint8_t)o;
        memset(p + 19, 0, 7);   /* the value's other bytes, then no next IFD */
        return 26;
}

/* A JPEG with an APP1 Exif segment of orientation o after its SOI. */
static void gen_jpeg_exif(const char *name, int o) {
        uint8_t *img = gen_pixels(48, 20, 3), *buf = NULL, *out;
        unsigned long n = 0;
        tjhandle t = tjInitCompress();
        size_t tl;
        uint8_t app1[4 + 6 + 26];

        if (!t || tjCompress2(t, img, 48, 0, 20, TJPF_RGB, &buf, &n, TJSAMP_420, 80, 0) != 0)
                exit(1);
        memcpy(app1, "\xff\xe1\0\0Exif\0\0", 10);
        tl = gen_tiff(app1 + 10, o);
        app1[2] = (uint8_t)((tl + 8) >> 8);
        app1[3] = (uint8_t)(tl + 8);
        out = malloc(n + sizeof(app1));
        memcpy(out, buf, 2);
        memcpy(out + 2, app1, 10 + tl);
        memcpy(out + 12 + tl, buf + 2, n - 2);
        gen_write(name, out, n + 10 + tl);
        free(out);
        tjFree(buf);
        tjDestroy(t);
        free(img);
}

/* A PNG with an eXIf chunk of orientation o. */
static void gen_png_exif(const char *name, int o) {
        struct spng_ihdr ihdr = { .width = 30, .height = 12, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR };
        uint8_t *img = gen_pixels(30, 12, 3), tiff[32];
        struct spng_exif exif = { .length = gen_tiff(tiff, o), .data = (char *)tiff };
        spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);

        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_ihdr(c, &ihdr);
        if (spng_set_exif(c, &exif) != 0 || spng_encode_image(c, img, 30 * 12 * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE))
                exit(1);
        gen_png_write(name, c, img);
}

static void gen_le32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

/* A WebP: lossy or lossless, RGB or RGBA; with o > 0, an extended file
 * (VP8X) with an EXIF chunk of orientation o before the image's chunk. */
static void gen_webp(const char *name, int w, int h, bool alpha, bool lossless, int o) {
        uint8_t *img = gen_pixels(w, h, alpha ? 4 : 3), *buf = NULL, *out;
        size_t n, m, tl;
        uint8_t tiff[32];

        if (alpha)
                n = lossless ? WebPEncodeLosslessRGBA(img, w, h, w * 4, &buf) : WebPEncodeRGBA(img, w, h, w * 4, 80, &buf);
        else
                n = lossless ? WebPEncodeLosslessRGB(img, w, h, w * 3, &buf) : WebPEncodeRGB(img, w, h, w * 3, 80, &buf);
        if (n == 0)
                exit(1);
        if (o == 0 || memcmp(buf + 12, "VP8X", 4) == 0) {
                /* A file that is extended already (alpha) keeps its own. */
                gen_write(name, buf, n);
                WebPFree(buf);
                free(img);
                return;
        }
        tl = gen_tiff(tiff, o);
        m = 12 + 18 + 8 + tl + (tl & 1) + (n - 12);
        out = calloc(1, m);
        memcpy(out, "RIFF", 4);
        gen_le32(out + 4, (uint32_t)(m - 8));
        memcpy(out + 8, "WEBPVP8X", 8);
        gen_le32(out + 16, 10);
        out[20] = 0x08;                                 /* the EXIF flag */
        gen_le32(out + 24, (uint32_t)(w - 1));          /* 24 bits each, */
        gen_le32(out + 27, (uint32_t)(h - 1));          /* the last byte overwritten below */
        memcpy(out + 30, "EXIF", 4);
        gen_le32(out + 34, (uint32_t)tl);
        memcpy(out + 38, tiff, tl);
        memcpy(out + 38 + tl + (tl & 1), buf + 12, n - 12);
        gen_write(name, out, m);
        free(out);
        WebPFree(buf);
        free(img);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: fuzz-decode-gen DIR\n");
                return 2;
        }
        gen_dir = argv[1];
        gen_jpeg("rgb-420.jpg", 61, 37, TJPF_RGB, 3, TJSAMP_420, 0);
        gen_jpeg("rgb-444.jpg", 40, 300, TJPF_RGB, 3, TJSAMP_444, 0);
        gen_jpeg("rgb-422-progressive.jpg", 77, 19, TJPF_RGB, 3, TJSAMP_422, TJFLAG_PROGRESSIVE);
        gen_jpeg("grey.jpg", 33, 33, TJPF_GRAY, 1, TJSAMP_GRAY, 0);
        gen_jpeg("ycck.jpg", 50, 20, TJPF_CMYK, 4, TJSAMP_420, 0);
        gen_png("rgb8.png", 40, 30, SPNG_COLOR_TYPE_TRUECOLOR, 8, 3);
        gen_png("rgba16.png", 17, 300, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 16, 4);
        gen_png("grey16.png", 260, 9, SPNG_COLOR_TYPE_GRAYSCALE, 16, 1);
        gen_png("grey2.png", 31, 31, SPNG_COLOR_TYPE_GRAYSCALE, 2, 1);
        gen_png("grey-alpha8.png", 25, 25, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, 8, 2);
        gen_png("grey8.png", 19, 40, SPNG_COLOR_TYPE_GRAYSCALE, 8, 1);
        gen_png("rgba8.png", 33, 21, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8, 4);
        gen_png("palette4.png", 45, 12, SPNG_COLOR_TYPE_INDEXED, 4, 1);
        gen_png("palette8.png", 12, 45, SPNG_COLOR_TYPE_INDEXED, 8, 1);
        gen_webp("lossy.webp", 61, 37, false, false, 0);
        gen_webp("lossless.webp", 40, 30, false, true, 0);
        gen_webp("lossy-alpha.webp", 33, 21, true, false, 0);
        gen_webp("lossless-alpha.webp", 17, 50, true, true, 0);
        gen_webp("lossy-exif6.webp", 30, 12, false, false, 6);
        gen_jpeg_exif("exif8.jpg", 8);
        gen_jpeg_exif("exif3.jpg", 3);
        gen_png_exif("exif5.png", 5);
        return 0;
}

#endif

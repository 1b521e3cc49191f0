/* png_idat: the image data of a plain PNG (8-bit grey, grey+alpha, RGB or
 * RGBA, not interlaced), inflated by libdeflate and unfiltered here, with
 * SSE2 for the Average and Paeth filters of 3- and 4-byte pixels.
 *
 * Why it exists: issue 11 asks for 2x PIL's speed per core, and 80% of a PNG's
 * time in libspng 0.7.3 as Debian builds it is its scalar Paeth unfilter and
 * zlib's inflate (docs/perf.md); this path is about 2.3x faster on the test
 * photographs. It is deliberately narrow:
 *   - libspng still reads and checks the signature, the header and every
 *     chunk before the image data (decode_png calls it first);
 *   - this file only decodes streams it finds clean: every IDAT chunk's
 *     CRC-32 right, the zlib stream whole (libdeflate checks its Adler-32) and
 *     exactly the image's size, every filter type known. Anything else
 *     returns false and decode_png decodes the record again with libspng,
 *     whose verdict (and message) is final. So a record this path decodes is
 *     one libspng decodes too, to the same bytes: the unit tests and the
 *     fuzzer's differential check hold it to that.
 * Not here: palette, 1/2/4/16-bit and interlaced images (libspng), the
 * conversion PIL makes of them, and the resize. */
#include <libdeflate.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "decode/decode-internal.h"

static uint32_t png_be32(const uint8_t *p) {
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The Paeth predictor of the PNG specification (section 9.4). */
static uint8_t png_paeth(int a, int b, int c) {
        int pa = b - c, pb = a - c, pc = pa + pb;

        pa = pa < 0 ? -pa : pa;
        pb = pb < 0 ? -pb : pb;
        pc = pc < 0 ? -pc : pc;
        if (pa <= pb && pa <= pc)
                return (uint8_t)a;
        return (uint8_t)(pb <= pc ? b : c);
}

/* One row in place, any pixel size; prev is the row above, unfiltered, or
 * NULL for the first row (whose row above is zeros). */
static void png_unfilter_row_plain(int filter, uint8_t *row, const uint8_t *prev, size_t n, size_t bpp) {
        size_t i;

        switch (filter) {
        case 1:         /* Sub */
                for (i = bpp; i < n; i++)
                        row[i] = (uint8_t)(row[i] + row[i - bpp]);
                break;
        case 2:         /* Up */
                if (prev)
                        for (i = 0; i < n; i++)
                                row[i] = (uint8_t)(row[i] + prev[i]);
                break;
        case 3:         /* Average */
                for (i = 0; i < n; i++) {
                        int a = i >= bpp ? row[i - bpp] : 0, b = prev ? prev[i] : 0;

                        row[i] = (uint8_t)(row[i] + ((a + b) >> 1));
                }
                break;
        case 4:         /* Paeth */
                if (!prev) {            /* b = c = 0: the predictor is a, as in Sub */
                        png_unfilter_row_plain(1, row, NULL, n, bpp);
                        break;
                }
                for (i = 0; i < bpp; i++)
                        row[i] = (uint8_t)(row[i] + prev[i]);
                for (; i < n; i++)
                        row[i] = (uint8_t)(row[i] + png_paeth(row[i - bpp], prev[i], prev[i - bpp]));
                break;
        default:        /* 0, None */
                break;
        }
}

#if defined(__SSE2__)
/* A pixel of 3 or 4 bytes as 16-bit lanes. Reads 4 bytes: for a 3-byte
 * pixel the 4th is the next pixel's (or, at the end of a row, the next
 * row's filter byte or the slack byte after the image, see below). */
static inline __m128i png_load_px(const uint8_t *p) {
        uint32_t v;

        memcpy(&v, p, 4);
        return _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)v), _mm_setzero_si128());
}

/* Stores bpp bytes only: a 3-byte pixel must not overwrite the next one's
 * filtered bytes, which are still to be read. */
static inline void png_store_px(uint8_t *p, __m128i px, size_t bpp) {
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(px, px));

        if (bpp == 4)
                memcpy(p, &v, 4);
        else {
                uint16_t lo = (uint16_t)v;

                memcpy(p, &lo, 2);
                p[2] = (uint8_t)(v >> 16);
        }
}

static inline __m128i png_abs16(__m128i x) {
        return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x));
}

/* Average and Paeth, whose pixels depend on the one before: all of a
 * pixel's bytes at once. prev is not NULL. */
static void png_unfilter_row_sse2(int filter, uint8_t *row, const uint8_t *prev, size_t n, size_t bpp) {
        const __m128i mask = _mm_set1_epi16(0xff);
        __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();

        for (size_t i = 0; i < n; i += bpp) {
                __m128i b = png_load_px(prev + i), x = png_load_px(row + i), pred;

                if (filter == 3)
                        pred = _mm_srli_epi16(_mm_add_epi16(a, b), 1);
                else {
                        __m128i bc = _mm_sub_epi16(b, c), ac = _mm_sub_epi16(a, c);
                        __m128i pa = png_abs16(bc), pb = png_abs16(ac), pc = png_abs16(_mm_add_epi16(bc, ac));
                        __m128i least = _mm_min_epi16(_mm_min_epi16(pa, pb), pc);
                        __m128i take_b = _mm_cmpeq_epi16(pb, least), take_a = _mm_cmpeq_epi16(pa, least);

                        /* a where pa is least, else b where pb is, else c:
                         * the specification's order of ties */
                        pred = _mm_or_si128(_mm_and_si128(take_b, b), _mm_andnot_si128(take_b, c));
                        pred = _mm_or_si128(_mm_and_si128(take_a, a), _mm_andnot_si128(take_a, pred));
                        c = b;
                }
                a = _mm_and_si128(_mm_add_epi16(x, pred), mask);
                png_store_px(row + i, a, bpp);
        }
}
#endif

static void png_unfilter_row(int filter, uint8_t *row, const uint8_t *prev, size_t n, size_t bpp) {
#if defined(__SSE2__)
        if ((filter == 3 || filter == 4) && prev && (bpp == 3 || bpp == 4)) {
                png_unfilter_row_sse2(filter, row, prev, n, bpp);
                return;
        }
#endif
        png_unfilter_row_plain(filter, row, prev, n, bpp);
}

/* Moves an unfiltered row to its place in the output, dropping alpha:
 * front to back, each output byte at or before its input byte. */
static void png_compact_row(uint8_t *dst, const uint8_t *src, uint32_t w, int in_ch, int out_ch) {
        if (in_ch == out_ch) {
                memmove(dst, src, (size_t)w * in_ch);
                return;
        }
        for (uint32_t x = 0; x < w; x++)
                for (int k = 0; k < out_ch; k++)
                        dst[(size_t)x * out_ch + k] = src[(size_t)x * in_ch + k];
}

bool decode_png_idat(decode_t *d, const uint8_t *data, size_t len, uint32_t w, uint32_t h, int in_ch,
                     int out_ch) {
        /* In d->pixels: the filtered image ((stride + 1) x h: a filter byte
         * before each row), one slack byte (the SSE2 loads read one byte past
         * a 3-byte pixel), then the IDAT chunks' data joined. */
        size_t stride = (size_t)w * in_ch, filtered = (stride + 1) * h, cap = d->terms.pixel_bytes;
        size_t off = 8, joined = 0, got_in, got_out;
        uint8_t *z = d->pixels + filtered + 1;
        bool in_idat = false;

        if (!d->inflater || filtered + 1 > cap)
                return false;
        while (off + 12 <= len) {
                uint32_t n = png_be32(data + off);
                const uint8_t *type = data + off + 4;
                bool idat = memcmp(type, "IDAT", 4) == 0;

                if (n > 0x7fffffffu || n > len - off - 12)
                        return false;
                if (!idat && in_idat)
                        break;          /* the image data is one run of IDAT chunks */
                if (idat) {
                        if (libdeflate_crc32(0, type, (size_t)n + 4) != png_be32(type + 4 + n) ||
                            n > cap - filtered - 1 - joined)
                                return false;
                        memcpy(z + joined, type + 4, n);
                        joined += n;
                        in_idat = true;
                }
                off += 12 + (size_t)n;
        }
        if (!in_idat)
                return false;
        d->pixels[filtered] = 0;        /* the slack byte: read, never used */
        if (libdeflate_zlib_decompress_ex(d->inflater, z, joined, d->pixels, filtered, &got_in, &got_out) !=
                    LIBDEFLATE_SUCCESS ||
            got_in != joined || got_out != filtered)
                return false;
        for (uint32_t y = 0; y < h; y++) {
                uint8_t *row = d->pixels + (size_t)y * (stride + 1) + 1;
                const uint8_t *prev = y ? row - stride - 1 : NULL;

                if (row[-1] > 4)
                        return false;
                png_unfilter_row(row[-1], row, prev, stride, (size_t)in_ch);
                /* The row above is no longer needed once this one is done,
                 * and its output place is before this row's bytes. */
                if (y)
                        png_compact_row(d->pixels + (size_t)(y - 1) * w * out_ch, prev, w, in_ch, out_ch);
        }
        png_compact_row(d->pixels + (size_t)(h - 1) * w * out_ch, d->pixels + (size_t)(h - 1) * (stride + 1) + 1, w,
                        in_ch, out_ch);
        return true;
}

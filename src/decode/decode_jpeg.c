/* decode_jpeg: a JPEG record into grey or RGB8 pixels, through TurboJPEG.
 *
 * The flags are PIL's choices: the accurate (ISLOW) IDCT and fancy
 * upsampling, both TurboJPEG's defaults when decompressing, asked for
 * explicitly so that no default can drift. Warnings stop the decode
 * (TJFLAG_STOPONWARNING): a premature end of data is a failure, as in PIL.
 * TJFLAG_LIMITSCANS refuses progressive files with absurd scan counts, a
 * known way to make libjpeg spin. Not here: the resize (resize.c). */
#include <errno.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode/decode-internal.h"

#define DECODE_JPEG_FLAGS (TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

/* The reduction [decode] fast uses for a w x h image: the smallest of
 * TurboJPEG's factors 1/8 .. 4/8 whose reduced shorter side is still at
 * least DECODE_FAST_MIN_SIDE (twice the Resize(256) target, so that the
 * bilinear filter still averages two or more samples: PIL's reducing_gap
 * of 2). None (1/1) below a shorter side of 2 x DECODE_FAST_MIN_SIDE: a
 * reduction by 5/8 to 7/8 saves little and costs the most accuracy. */
static void decode_jpeg_reduction(uint32_t w, uint32_t h, int *num, int *denom) {
        uint32_t s = w < h ? w : h;

        *num = *denom = 1;
        for (int m = 1; m <= 4; m++) {
                /* s * m / 8 exactly, not TJSCALED's ceiling: a shorter
                 * side of 1023 is not reduced. */
                if ((uint64_t)s * m >= 8 * (uint64_t)DECODE_FAST_MIN_SIDE) {
                        *num = m;
                        *denom = 8;
                        return;
                }
        }
}

/* PIL reads every 4-component JPEG as CMYK in Adobe's inverted polarity
 * ("CMYK;I": it inverts each sample), then converts to RGB as
 * r = (255 - k) - (c * (255 - k)) / 255, its division by 255 rounded as
 * ((t + 128) + ((t + 128) >> 8)) >> 8. After the inversion 255 - k is the
 * stored K, and c is 255 - the stored C. In place: each 4-byte pixel
 * becomes a 3-byte one at or before it. */
static void decode_cmyk_to_rgb(uint8_t *p, size_t n_pixels) {
        const uint8_t *in = p;
        uint8_t *out = p;

        for (size_t i = 0; i < n_pixels; i++, in += 4, out += 3) {
                uint32_t nk = in[3];
                uint8_t c[3] = { in[0], in[1], in[2] };

                for (int j = 0; j < 3; j++) {
                        uint32_t t = (255u - c[j]) * nk + 128;

                        out[j] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
                }
        }
}

/* The scans (SOS markers) of a JPEG stream, counted by walking its marker
 * segments and skipping each scan's entropy-coded data up to the next
 * marker (a 0xFF not followed by a stuffed 0x00 or a restart marker). A
 * stream that stops making sense ends the count: the decoder judges it. */
static uint64_t decode_jpeg_scans(const uint8_t *p, size_t len) {
        uint64_t scans = 0;
        size_t i = 2;   /* after SOI */

        while (i + 4 <= len) {
                uint8_t m;

                if (p[i] != 0xff)
                        break;
                m = p[i + 1];
                if (m == 0xff) {        /* a fill byte */
                        i++;
                        continue;
                }
                if (m == 0xd9)          /* EOI */
                        break;
                if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) {
                        i += 2;
                        continue;
                }
                i += 2 + (((size_t)p[i + 2] << 8) | p[i + 3]);
                if (m != 0xda)
                        continue;
                scans++;
                while (i + 1 < len) {
                        const uint8_t *f = memchr(p + i, 0xff, len - i - 1);

                        if (!f)
                                return scans;
                        i = (size_t)(f - p);
                        if (p[i + 1] != 0x00 && (p[i + 1] < 0xd0 || p[i + 1] > 0xd7))
                                break;
                        i += 2;
                }
        }
        return scans;
}

/* A failed call can leave TurboJPEG's decompressor mid-stream (2.1's
 * header reader does not abort it), and every later image on the handle
 * then fails with the same message: the handle is replaced after any
 * failure. Only refusals pay for it; a good image reuses the handle. */
static int decode_jpeg_fail(decode_t *d, const char **code, errbuf_t *err) {
        *code = RECORD_ERR_DECODE_FAILED;
        errbuf_set(err, -EINVAL, "JPEG: %s", tjGetErrorStr2(d->jpeg));
        tjDestroy(d->jpeg);
        d->jpeg = tjInitDecompress();
        return -EINVAL;
}

int decode_jpeg(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
                const char **code, errbuf_t *err) {
        int w = 0, h = 0, subsamp = -1, cs = -1, pf, r, sw, sh;

        if (!d->jpeg && !(d->jpeg = tjInitDecompress())) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "JPEG: cannot make a decompressor: %s", tjGetErrorStr2(NULL));
        }
        if (tjDecompressHeader3(d->jpeg, data, (unsigned long)len, &w, &h, &subsamp, &cs) < 0)
                return decode_jpeg_fail(d, code, err);
        /* A stream of tables alone (or one that ends before its frame
         * header) is a success for TurboJPEG that sets nothing. */
        if (w <= 0 || h <= 0) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "JPEG: the stream has no frame header (no image)");
        }
        info->width = (uint32_t)w;
        info->height = (uint32_t)h;
        info->channels = cs == TJCS_GRAY ? 1 : cs == TJCS_CMYK || cs == TJCS_YCCK ? 4 : 3;
        r = decode_check_geometry(d, "JPEG", (uint32_t)w, (uint32_t)h, code, err);
        if (r < 0)
                return r;
        if (d->max_scan_megapixels) {
                /* The decode's cost, before any of it is paid. */
                uint64_t scans = decode_jpeg_scans(data, len), cost = scans * (uint64_t)w * (uint64_t)h;

                if (cost > d->max_scan_megapixels * 1000000ULL) {
                        *code = RECORD_ERR_TOO_COSTLY;
                        return errbuf_set(err, -EINVAL, "JPEG: %llu scans of %dx%d pixels, %.0f megapixel-scans, cost "
                                          "more to decode than [decode] max_scan_megapixels (%llu)",
                                          (unsigned long long)scans, w, h, (double)cost / 1e6,
                                          (unsigned long long)d->max_scan_megapixels);
                }
        }
        pf = info->channels == 1 ? TJPF_GRAY : info->channels == 4 ? TJPF_CMYK : TJPF_RGB;
        img->full_width = (uint32_t)w;
        img->full_height = (uint32_t)h;
        img->num = img->denom = 1;
        /* Fast upsampling (TJFLAG_FASTUPSAMPLE) is not used: measured on
         * the test photographs it gained nothing (libjpeg-turbo's fancy
         * upsampling is SIMD) and moved the logits by 6e-2 (docs/perf.md). */
        if (d->fast)
                decode_jpeg_reduction((uint32_t)w, (uint32_t)h, &img->num, &img->denom);
        /* TurboJPEG picks the factor M/8 whose TJSCALED size matches these. */
        sw = (int)(((uint64_t)w * img->num + img->denom - 1) / img->denom);
        sh = (int)(((uint64_t)h * img->num + img->denom - 1) / img->denom);
        /* sw * sh * 4 <= w * h * 4 <= max_pixels * 4 == the pixel buffer. */
        if (tjDecompress2(d->jpeg, data, (unsigned long)len, d->pixels, sw, 0, sh, pf, DECODE_JPEG_FLAGS) < 0)
                return decode_jpeg_fail(d, code, err);
        if (info->channels == 4)
                decode_cmyk_to_rgb(d->pixels, (size_t)sw * sh);
        img->width = (uint32_t)sw;
        img->height = (uint32_t)sh;
        img->channels = info->channels == 1 ? 1 : 3;
        return 0;
}

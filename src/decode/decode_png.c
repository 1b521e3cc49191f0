/* decode_png: a PNG record into grey or RGB8 pixels, through libspng.
 *
 * The output format is chosen per colour type so that the samples are the
 * ones PIL's convert("RGB") ends with:
 *   grey 1/2/4/8-bit     G8 (libspng scales the low depths to 0..255, as PIL's L;2, L;4 and 1 do)
 *   grey 16-bit          the PNG's own samples, clamped to 255: PIL opens it as 32-bit integers
 *                        ("I") and its I->RGB conversion clamps
 *   grey+alpha 8/16-bit  the PNG's own samples, keeping the grey (the high byte at 16 bits), alpha
 *                        dropped (libspng's GA formats add alpha to grey; they do not read it)
 *   RGB, palette, RGBA   RGB8 (alpha and tRNS dropped; 16-bit samples to their high byte)
 * Transparency (tRNS) and gamma are never applied, as PIL applies neither.
 * libspng checks every chunk's CRC and the zlib stream; any failure is
 * decode-failed with its message. The plain images (8-bit grey, grey+alpha,
 * RGB or RGBA, not interlaced: what cameras' and PIL's PNGs are) have their
 * image data decoded faster by png_idat.c once libspng has read everything
 * before it; a stream that path does not find clean is decoded again by
 * libspng, whose verdict stands. Not here: the resize (resize.c). */
#include <errno.h>
#include <spng.h>
#include <stdbool.h>

#include "decode/decode-internal.h"

/* Ancillary chunk data (text, ICC profiles) that libspng may keep for one
 * image: bounded, so a record cannot make it allocate up to max_bytes. It
 * lies within the plan's fixed 16 MiB of library memory per decode thread
 * (plan.c). */
#define DECODE_PNG_CHUNK_CACHE_BYTES ((size_t)4 << 20)

/* libspng also keeps at most 1000 ancillary chunks (text, sPLT, kept
 * unknown ones) per image, its SPNG_MAX_CHUNK_COUNT: a PNG with more is
 * refused as decode-failed ("reached chunk/cache limits"), although PIL
 * reads it. libspng 0.7.3 cannot raise that: spng_set_option's
 * SPNG_CHUNK_COUNT_LIMIT refuses any value above the chunks already read
 * (0 before the first), so the limit is documented (docs/records.md, "Decoding")
 * and held by a test, not changed. */

/* A libspng context reading the record, its header read into *ihdr. */
static int png_open(spng_ctx **ret, const uint8_t *data, size_t len, struct spng_ihdr *ihdr, errbuf_t *err) {
        spng_ctx *ctx;
        int r;

        ctx = spng_ctx_new(0);
        if (!ctx)
                return errbuf_set(err, -ENOMEM, "PNG: out of memory");
        r = spng_set_png_buffer(ctx, data, len);
        if (r == 0)
                r = spng_set_chunk_limits(ctx, len, DECODE_PNG_CHUNK_CACHE_BYTES);
        if (r == 0)
                r = spng_get_ihdr(ctx, ihdr);
        if (r != 0) {
                spng_ctx_free(ctx);
                return errbuf_set(err, -EINVAL, "PNG: %s", spng_strerror(r));
        }
        *ret = ctx;
        return 0;
}

/* The images png_idat.c decodes (unless a test turned it off). */
static bool png_is_plain(const decode_t *d, const struct spng_ihdr *ihdr) {
        return d->png_own_idat && ihdr->bit_depth == 8 && ihdr->interlace_method == 0 &&
               ihdr->color_type != SPNG_COLOR_TYPE_INDEXED;
}

/* The image data of a plain image by png_idat.c, as out_ch channels: true
 * when it decoded them (libspng having read every chunk before the image
 * data first). */
static bool png_decode_plain(decode_t *d, spng_ctx *ctx, const uint8_t *data, size_t len,
                             const struct spng_ihdr *ihdr, int fmt, int out_ch) {
        static const int in_channels[] = { [SPNG_COLOR_TYPE_GRAYSCALE] = 1, [SPNG_COLOR_TYPE_TRUECOLOR] = 3,
                                           [SPNG_COLOR_TYPE_GRAYSCALE_ALPHA] = 2,
                                           [SPNG_COLOR_TYPE_TRUECOLOR_ALPHA] = 4 };

        if (ihdr->color_type >= sizeof(in_channels) / sizeof(in_channels[0]) || !in_channels[ihdr->color_type])
                return false;
        /* Progressive: libspng reads the chunks up to the image data and
         * stops there. */
        if (spng_decode_image(ctx, NULL, 0, fmt, SPNG_DECODE_PROGRESSIVE) != 0)
                return false;
        return decode_png_idat(d, data, len, ihdr->width, ihdr->height, in_channels[ihdr->color_type], out_ch);
}

int decode_png(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
               const char **code, errbuf_t *err) {
        struct spng_ihdr ihdr;
        size_t out_bytes, n;
        spng_ctx *ctx = NULL;
        int fmt, ch, r;

        *code = RECORD_ERR_DECODE_FAILED;
        r = png_open(&ctx, data, len, &ihdr, err);
        if (r < 0)
                return r;
        info->width = ihdr.width;
        info->height = ihdr.height;
        info->channels = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE || ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA
                                 ? 1
                                 : 3;
        r = decode_check_geometry(d, "PNG", ihdr.width, ihdr.height, code, err);
        if (r < 0)
                goto out;
        ch = info->channels;
        if (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE)
                fmt = ihdr.bit_depth == 16 ? SPNG_FMT_PNG : SPNG_FMT_G8;
        else if (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA)
                fmt = SPNG_FMT_PNG;
        else
                fmt = SPNG_FMT_RGB8;
        r = spng_decoded_image_size(ctx, fmt, &out_bytes);
        if (r == 0 && out_bytes > d->terms.pixel_bytes)
                r = SPNG_EOVERFLOW;     /* at most 4 bytes a pixel, and the geometry was checked */
        if (r != 0) {
                r = errbuf_set(err, -EINVAL, "PNG: %s", spng_strerror(r));
                goto out;
        }
        if (png_is_plain(d, &ihdr)) {
                if (png_decode_plain(d, ctx, data, len, &ihdr, fmt, ch))
                        goto done;
                /* libspng from the start, on a fresh context: the progressive
                 * one above may have read part of the image data. */
                spng_ctx_free(ctx);
                ctx = NULL;
                r = png_open(&ctx, data, len, &ihdr, err);
                if (r < 0)
                        return r;
        }
        r = spng_decode_image(ctx, d->pixels, out_bytes, fmt, 0);
        if (r != 0) {
                r = errbuf_set(err, -EINVAL, "PNG: %s", spng_strerror(r));
                goto out;
        }
        n = (size_t)ihdr.width * ihdr.height;
        /* In place, front to back: each output byte is at or before its input. */
        if (fmt == SPNG_FMT_PNG && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE) {     /* 16-bit, host-endian */
                const uint16_t *in = (const uint16_t *)d->pixels;

                for (size_t i = 0; i < n; i++)
                        d->pixels[i] = in[i] > 255 ? 255 : (uint8_t)in[i];
        } else if (fmt == SPNG_FMT_PNG && ihdr.bit_depth == 16) {                      /* grey+alpha 16 */
                const uint16_t *in = (const uint16_t *)d->pixels;

                for (size_t i = 0; i < n; i++)
                        d->pixels[i] = (uint8_t)(in[2 * i] >> 8);
        } else if (fmt == SPNG_FMT_PNG) {                                               /* grey+alpha 8 */
                for (size_t i = 0; i < n; i++)
                        d->pixels[i] = d->pixels[2 * i];
        }
done:
        img->width = ihdr.width;
        img->height = ihdr.height;
        img->channels = ch;
        img->full_width = ihdr.width;
        img->full_height = ihdr.height;
        r = 0;
out:
        spng_ctx_free(ctx);
        return r;
}

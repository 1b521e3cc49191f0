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
 * decode-failed with its message. Not here: the resize (resize.c). */
#include <errno.h>
#include <spng.h>

#include "decode/decode-internal.h"

/* Ancillary chunk data (text, ICC profiles) that libspng may keep for one
 * image: bounded, so a record cannot make it allocate up to max_bytes. */
#define DECODE_PNG_CHUNK_CACHE_BYTES ((size_t)4 << 20)

int decode_png(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
               const char **code, errbuf_t *err) {
        struct spng_ihdr ihdr;
        size_t out_bytes, n;
        spng_ctx *ctx;
        int fmt, ch, r;

        *code = RECORD_ERR_DECODE_FAILED;
        ctx = spng_ctx_new(0);
        if (!ctx)
                return errbuf_set(err, -ENOMEM, "PNG: out of memory");
        r = spng_set_png_buffer(ctx, data, len);
        if (r == 0)
                r = spng_set_chunk_limits(ctx, len, DECODE_PNG_CHUNK_CACHE_BYTES);
        if (r == 0)
                r = spng_get_ihdr(ctx, &ihdr);
        if (r != 0) {
                r = errbuf_set(err, -EINVAL, "PNG: %s", spng_strerror(r));
                goto out;
        }
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
        if (r == 0)
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

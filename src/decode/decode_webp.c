/* decode_webp: a WebP record into RGB8 pixels, through libwebp.
 *
 * Lossy (VP8), lossless (VP8L) and either with alpha (VP8X + ALPH) are
 * decoded by WebPDecode with its default options, the ones PIL's WebP
 * plugin uses (the same library, fancy upsampling on, no dithering), into
 * RGB: alpha is dropped, as PIL's convert("RGB") drops it, without
 * premultiplying. The header (WebPGetFeatures) is read and its geometry
 * checked before anything is decoded. Animated WebPs are refused: PIL would
 * take the first frame, which this daemon does not try to pick. libwebp
 * keeps its own per-image working memory (a lossless image's ARGB rows, an
 * alpha plane), which the plan bounds (plan_decode_terms). Not here: the
 * resize (resize.c). */
#include <errno.h>
#include <webp/decode.h>

#include "decode/decode-internal.h"

/* libwebp has no message of its own for its status codes. */
static const char *webp_status_str(VP8StatusCode s) {
        switch (s) {
        case VP8_STATUS_OK:
                return "no error";
        case VP8_STATUS_OUT_OF_MEMORY:
                return "out of memory";
        case VP8_STATUS_INVALID_PARAM:
                return "invalid parameter";
        case VP8_STATUS_BITSTREAM_ERROR:
                return "not a WebP stream, or a corrupt one";
        case VP8_STATUS_UNSUPPORTED_FEATURE:
                return "a feature libwebp does not support";
        case VP8_STATUS_SUSPENDED:
                return "decoding suspended";
        case VP8_STATUS_USER_ABORT:
                return "decoding aborted";
        case VP8_STATUS_NOT_ENOUGH_DATA:
                return "truncated (not enough data)";
        }
        return "unknown error";
}

int decode_webp(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
                const char **code, errbuf_t *err) {
        WebPDecoderConfig config;
        VP8StatusCode s;
        size_t row_bytes;
        int r;

        *code = RECORD_ERR_DECODE_FAILED;
        if (!WebPInitDecoderConfig(&config))
                return errbuf_set(err, -EINVAL, "WebP: libwebp's version does not match its header");
        s = WebPGetFeatures(data, len, &config.input);
        if (s != VP8_STATUS_OK)
                return errbuf_set(err, -EINVAL, "WebP: %s", webp_status_str(s));
        if (config.input.width <= 0 || config.input.height <= 0)
                return errbuf_set(err, -EINVAL, "WebP: the header says %dx%d pixels: an empty image",
                                  config.input.width, config.input.height);
        info->width = (uint32_t)config.input.width;
        info->height = (uint32_t)config.input.height;
        info->channels = 3;
        r = decode_check_geometry(d, "WebP", info->width, info->height, code, err);
        if (r < 0)
                return r;
        if (config.input.has_animation)
                return errbuf_set(err, -EINVAL, "WebP: an animated image (%ux%u); only still images are decoded",
                                  info->width, info->height);
        row_bytes = (size_t)info->width * 3;
        config.output.colorspace = MODE_RGB;
        config.output.is_external_memory = 1;
        config.output.u.RGBA.rgba = d->pixels;
        config.output.u.RGBA.stride = (int)row_bytes;
        /* w * h * 3 <= max_pixels * 3 < the pixel buffer (4 bytes a pixel). */
        config.output.u.RGBA.size = row_bytes * info->height;
        s = WebPDecode(data, len, &config);
        WebPFreeDecBuffer(&config.output);      /* external memory: frees nothing of ours */
        if (s != VP8_STATUS_OK)
                return errbuf_set(err, -EINVAL, "WebP: %s", webp_status_str(s));
        img->width = img->full_width = info->width;
        img->height = img->full_height = info->height;
        img->channels = 3;
        return 0;
}

/* decode: the context (its buffers, made once) and the path from an encoded
 * record to 224x224 RGB8. See decode.h. The formats are in decode_jpeg.c,
 * decode_png.c and decode_webp.c, the EXIF orientation's reader in
 * decode_exif.c, the geometry in resize.c. */
#include "decode/decode.h"

#include <assert.h>
#include <errno.h>
#include <libdeflate.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "decode/decode-internal.h"

int decode_default_threads(void) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        return n > 2 ? (int)(n - 1) : 1;
}

int decode_new(decode_t **ret, uint64_t max_pixels, size_t max_bytes, bool input_copy, errbuf_t *err) {
        decode_t *d;
        size_t rows_bytes, coef_bytes, index_bytes;
        uint8_t *p;
        int r;

        if (max_pixels == 0 || max_bytes == 0)
                return errbuf_set(err, -EINVAL, "the decode limits must be positive (max_pixels %llu, max_bytes %zu)",
                                  (unsigned long long)max_pixels, max_bytes);
        d = calloc(1, sizeof(*d));
        if (!d)
                return errbuf_set(err, -ENOMEM, "out of memory");
        d->max_pixels = max_pixels;
        d->max_scan_megapixels = DECODE_DEFAULT_MAX_SCAN_MEGAPIXELS;
        d->max_bytes = max_bytes;
        r = plan_decode_terms(max_pixels, input_copy ? max_bytes : 0, &d->terms);
        if (r < 0) {
                errbuf_set(err, r, "cannot plan decode buffers for %llu pixels", (unsigned long long)max_pixels);
                goto fail;
        }
        /* The pixel buffer is touched only as far as each image reaches, so a
         * large max_pixels costs address space more than resident memory. */
        d->pixels = malloc(d->terms.pixel_bytes);
        if (input_copy)
                d->input = malloc(max_bytes);
        rows_bytes = (size_t)PLAN_DECODE_OUT_SIDE * d->terms.resize_rows * 3;
        coef_bytes = (size_t)PLAN_DECODE_OUT_SIDE * d->terms.resize_taps * sizeof(int32_t);
        index_bytes = (size_t)PLAN_DECODE_OUT_SIDE * sizeof(int32_t);
        /* The plan's resize_bytes is exactly these pieces. */
        d->scratch_block = malloc(coef_bytes * 2 + index_bytes * 4 + rows_bytes);
        if (!d->pixels || (input_copy && !d->input) || !d->scratch_block) {
                r = errbuf_set(err, -ENOMEM, "out of memory for the decode buffers (%llu bytes)",
                               (unsigned long long)d->terms.buffer_bytes);
                goto fail;
        }
        p = d->scratch_block;
        d->scratch.coef_x = (int32_t *)p;
        p += coef_bytes;
        d->scratch.coef_y = (int32_t *)p;
        p += coef_bytes;
        d->scratch.first_x = (int32_t *)p;
        p += index_bytes;
        d->scratch.first_y = (int32_t *)p;
        p += index_bytes;
        d->scratch.count_x = (int32_t *)p;
        p += index_bytes;
        d->scratch.count_y = (int32_t *)p;
        p += index_bytes;
        d->scratch.rows = p;
        d->scratch.rows_cap = d->terms.resize_rows;
        d->scratch.taps_cap = d->terms.resize_taps;
        d->jpeg = tjInitDecompress();
        if (!d->jpeg) {
                r = errbuf_set(err, -ENOMEM, "cannot make a JPEG decompressor: %s", tjGetErrorStr2(NULL));
                goto fail;
        }
        d->inflater = libdeflate_alloc_decompressor();
        if (!d->inflater) {
                r = errbuf_set(err, -ENOMEM, "cannot make a PNG inflater: out of memory");
                goto fail;
        }
        d->png_own_idat = true;
        *ret = d;
        return 0;
fail:
        decode_free(d);
        return r;
}

void decode_free(decode_t *d) {
        if (!d)
                return;
        if (d->jpeg)
                tjDestroy(d->jpeg);
        if (d->inflater)
                libdeflate_free_decompressor(d->inflater);
        free(d->pixels);
        free(d->input);
        free(d->scratch_block);
        free(d);
}

void decode_set_fast(decode_t *d, bool fast) {
        d->fast = fast;
}

void decode_set_exif_orientation(decode_t *d, bool on) {
        d->exif_orientation = on;
}

void decode_set_max_scan_megapixels(decode_t *d, uint64_t megapixels) {
        d->max_scan_megapixels = megapixels;
}

void decode_set_png_own_idat(decode_t *d, bool on) {
        d->png_own_idat = on;
}

void *decode_input(decode_t *d) {
        return d->input;
}

size_t decode_max_bytes(const decode_t *d) {
        return d->max_bytes;
}

int decode_check_geometry(const decode_t *d, const char *what, uint32_t w, uint32_t h, const char **code,
                          errbuf_t *err) {
        if (w == 0 || h == 0) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "the %s header says %ux%u pixels: an empty image", what, w, h);
        }
        if ((uint64_t)w * h > d->max_pixels) {
                *code = RECORD_ERR_TOO_LARGE;
                return errbuf_set(err, -EINVAL, "the %s header says %ux%u, %llu pixels, more than [decode] max_pixels "
                                  "(%llu)", what, w, h, (unsigned long long)w * h,
                                  (unsigned long long)d->max_pixels);
        }
        if (w > PLAN_DECODE_MAX_SIDE || h > PLAN_DECODE_MAX_SIDE) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "the %s header says %ux%u: a side longer than %d pixels", what, w, h,
                                  PLAN_DECODE_MAX_SIDE);
        }
        return 0;
}

/* The decoded image (img, in d->pixels) turned by EXIF orientation o
 * (1..8, as PIL's ImageOps.exif_transpose turns it) and resized: the turn
 * is an origin and two steps through the stored pixels (resize_crop_steps),
 * so no pixel moves and no buffer is needed. */
static int decode_resize_oriented(decode_t *d, const decode_image_t *img, int o, uint8_t *out, errbuf_t *err) {
        const ptrdiff_t px = img->channels, row = (ptrdiff_t)img->width * img->channels;
        const ptrdiff_t last_x = ((ptrdiff_t)img->width - 1) * px, last_y = ((ptrdiff_t)img->height - 1) * row;
        /* Per orientation: where the turned image's top-left pixel is, and
         * the steps to its right and downwards neighbours. 2..4 are flips
         * (FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM); 5..8 swap the axes
         * (TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90). */
        const struct {
                ptrdiff_t origin, step_x, step_y;
        } v[9] = {
                [1] = { 0, px, row },
                [2] = { last_x, -px, row },
                [3] = { last_x + last_y, -px, -row },
                [4] = { last_y, px, -row },
                [5] = { 0, row, px },
                [6] = { last_y, -row, px },
                [7] = { last_x + last_y, -row, -px },
                [8] = { last_x, row, -px },
        };
        bool swap = o >= 5;

        assert(o >= 1 && o <= 8);
        return resize_crop_steps(d->pixels + v[o].origin, swap ? img->height : img->width,
                                 swap ? img->width : img->height, v[o].step_x, v[o].step_y, img->channels,
                                 swap ? img->full_height : img->full_width, swap ? img->full_width : img->full_height,
                                 img->num, img->denom, &d->scratch, out, err);
}

int decode_record(decode_t *d, const void *data, size_t len, record_format_t f, uint8_t *out, decode_info_t *info,
                  const char **code, errbuf_t *err) {
        decode_info_t local;
        decode_image_t img;
        int r;

        if (!info)
                info = &local;
        memset(info, 0, sizeof(*info));
        memset(&img, 0, sizeof(img));
        img.num = img.denom = 1;
        info->format = f;
        if (len > d->max_bytes) {
                *code = RECORD_ERR_TOO_LARGE;
                return errbuf_set(err, -EINVAL, "%zu bytes of %s is more than [decode] max_bytes (%zu)", len,
                                  record_format_mime(f), d->max_bytes);
        }
        if (len == 0) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "an empty %s record", record_format_mime(f));
        }
        if (f == RECORD_JPEG)
                r = decode_jpeg(d, data, len, info, &img, code, err);
        else if (f == RECORD_PNG)
                r = decode_png(d, data, len, info, &img, code, err);
        else if (f == RECORD_WEBP)
                r = decode_webp(d, data, len, info, &img, code, err);
        else {
                *code = RECORD_ERR_BAD_CONTENT_TYPE;
                return errbuf_set(err, -EINVAL, "%s is not an encoded image format", record_format_mime(f));
        }
        if (r < 0)
                return r;
        info->orientation = d->exif_orientation ? decode_orientation(f, data, len) : 1;
        r = decode_resize_oriented(d, &img, info->orientation, out, err);
        if (r < 0) {
                *code = RECORD_ERR_DECODE_FAILED;
                return r;
        }
        return 0;
}

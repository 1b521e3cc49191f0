/* resize: torchvision's eval geometry on a decoded 8-bit image:
 * Resize(256) on the shorter side, bilinear with antialiasing as PIL computes
 * it, then CenterCrop(224), giving the 224x224 RGB8 record the engines take.
 *
 * PIL resamples separably: a horizontal pass into an 8-bit image, then a
 * vertical pass, each output sample a fixed-point (22 fractional bits)
 * weighted sum of the input samples under a triangle filter whose support is
 * widened by the downscale factor. This module computes the same numbers,
 * but only for the 224 columns and 224 rows that the crop keeps: each output
 * sample depends on its own filter taps alone, so the result is identical
 * and the work does not grow with the resized image.
 *
 * It allocates nothing: the caller (decode.c) passes buffers sized by
 * plan_decode_terms(). It knows no file format. */
#ifndef INFERD_RESIZE_H
#define INFERD_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"

/* torchvision's geometry for an image of in_w x in_h: the resized size (the
 * shorter side to 256, the longer to int(256 * long / short)) and the crop's
 * top-left corner (round((size - 224) / 2) with Python's round, which rounds
 * halves to even). */
typedef struct resize_geometry {
        uint32_t in_w, in_h;
        uint32_t out_w, out_h;          /* after Resize(256) */
        uint32_t crop_x, crop_y;        /* CenterCrop(224) offsets in the resized image */
} resize_geometry_t;

void resize_geometry(uint32_t in_w, uint32_t in_h, resize_geometry_t *ret);

/* Scratch owned by the caller, sized by plan_decode_terms(): rows x 224 x 3
 * bytes for the horizontal pass, and taps int32 coefficients per output
 * pixel of each axis. */
typedef struct resize_scratch {
        uint8_t *rows;                  /* (rows_cap, 224, channels) uint8 */
        size_t rows_cap;
        int32_t *coef_x, *coef_y;       /* (224, taps_cap) fixed-point weights */
        int32_t *first_x, *first_y;     /* (224): first input index of each output's taps */
        int32_t *count_x, *count_y;     /* (224): taps used */
        size_t taps_cap;
} resize_scratch_t;

/* Resizes and crops src (in_h rows of in_w pixels of `channels` bytes, 1 for
 * grey or 3 for RGB, rows `stride` bytes apart) into dst, 224x224x3 RGB8 HWC
 * (grey is repeated into the three channels, as PIL's convert("RGB") does).
 * Returns 0, or -E2BIG when the image needs more scratch than was planned
 * (which plan_decode_terms' bounds rule out for images within max_pixels). */
int resize_crop(const uint8_t *src, uint32_t in_w, uint32_t in_h, size_t stride, int channels,
                resize_scratch_t *scratch, uint8_t *dst, errbuf_t *err);

/* As resize_crop, for an image of full_w x full_h that the decoder reduced
 * by num/denom (a DCT-domain scaling: in_w = ceil(full_w * num / denom), and
 * likewise in_h) into src: the geometry (resized size, crop) is the full
 * image's, and every output sample is centred where the full image's would
 * be, so the crop covers the same region. The filter is PIL's, over the
 * reduced samples; not bit-identical to the accurate path (that is what
 * [decode] fast trades). num == denom is resize_crop. */
int resize_crop_reduced(const uint8_t *src, uint32_t in_w, uint32_t in_h, size_t stride, int channels,
                        uint32_t full_w, uint32_t full_h, int num, int denom, resize_scratch_t *scratch, uint8_t *dst,
                        errbuf_t *err);

/* As resize_crop_reduced, for an image seen through steps: pixel (x, y)
 * of the in_w x in_h image (and of full_w x full_h) is at src + x * step_x
 * + y * step_y, either step possibly negative. This is how EXIF
 * orientation is applied without moving a pixel: a flip or a rotation of
 * the decoded image is a choice of origin and steps, and every output
 * sample is computed as if the turned image had been stored (the result is
 * that of transposing first, as PIL does, then resizing). */
int resize_crop_steps(const uint8_t *src, uint32_t in_w, uint32_t in_h, ptrdiff_t step_x, ptrdiff_t step_y, int ch,
                      uint32_t full_w, uint32_t full_h, int num, int denom, resize_scratch_t *s, uint8_t *dst,
                      errbuf_t *err);

#endif

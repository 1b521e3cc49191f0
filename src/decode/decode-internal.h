/* decode-internal: what decode.c shares with its format readers
 * (decode_jpeg.c, decode_png.c, decode_webp.c) and the EXIF reader
 * (decode_exif.c). Not a public interface. */
#ifndef INFERD_DECODE_INTERNAL_H
#define INFERD_DECODE_INTERNAL_H

#include "decode/decode.h"
#include "decode/resize.h"

struct decode {
        uint64_t max_pixels;
        size_t max_bytes;
        plan_decode_terms_t terms;      /* what was allocated, and why */
        uint8_t *pixels;                /* terms.pixel_bytes: the decoded image */
        uint8_t *input;                 /* terms.input_bytes, or NULL */
        void *jpeg;                     /* a TurboJPEG decompressor (tjhandle), made once */
        bool fast;                      /* [decode] fast: DCT-domain reduction and fast upsampling for JPEG */
        uint64_t max_scan_megapixels;   /* [decode] max_scan_megapixels; 0 = no limit */
        void *inflater;                 /* a libdeflate decompressor for png_idat.c, made once */
        bool png_own_idat;              /* png_idat.c may decode plain PNGs (on unless a test turns it off) */
        bool exif_orientation;          /* [decode] exif_orientation: turn the image as its EXIF says */
        resize_scratch_t scratch;       /* carved from one block of terms.resize_bytes */
        void *scratch_block;
};

/* A decoded image in d->pixels, ready for resize_crop. */
typedef struct decode_image {
        uint32_t width, height;         /* of the pixels in d->pixels */
        int channels;                   /* 1 or 3 */
        uint32_t full_width, full_height; /* of the image: width x height unless reduced */
        int num, denom;                 /* the reduction: width = ceil(full_width * num / denom); 1/1: none */
} decode_image_t;

/* Each reads the header into *info, checks it with decode_check_geometry,
 * decodes into d->pixels and converts to grey or RGB8 in place. Return 0 or
 * -EINVAL with *code and err set. */
int decode_jpeg(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
                const char **code, errbuf_t *err);
int decode_png(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
               const char **code, errbuf_t *err);
int decode_webp(decode_t *d, const uint8_t *data, size_t len, decode_info_t *info, decode_image_t *img,
                const char **code, errbuf_t *err);

/* The orientation of an EXIF block (a TIFF header and its first IFD,
 * optionally after "Exif\0\0"): 1..8, 1 when it has none or cannot be read.
 * See decode_exif.c. */
int decode_exif_orientation(const uint8_t *exif, size_t len);

/* The image data of a plain PNG (8-bit, not interlaced; in_ch 1 to 4
 * samples a pixel) into d->pixels as out_ch (1 or 3) channels, alpha
 * dropped, for data whose chunks before the image data libspng has read.
 * Returns false, leaving the verdict to libspng, on anything it does not
 * find clean (see png_idat.c); d->pixels is then scratch. */
bool decode_png_idat(decode_t *d, const uint8_t *data, size_t len, uint32_t w, uint32_t h, int in_ch,
                     int out_ch);

/* The checks on a header's geometry, before anything is allocated or
 * decoded: zero or a side over 65535 is decode-failed, more than
 * max_pixels is too-large. */
int decode_check_geometry(const decode_t *d, const char *what, uint32_t w, uint32_t h, const char **code,
                          errbuf_t *err);

#endif

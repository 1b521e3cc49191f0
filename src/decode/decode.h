/* decode: JPEG, PNG and WebP records to the 224x224 RGB8 record the engines
 * take.
 *
 * JPEG goes through libjpeg-turbo's TurboJPEG API, PNG through libspng (the
 * image data of plain PNGs through libdeflate and png_idat.c), WebP (lossy,
 * lossless, with alpha; not animated) through libwebp. The
 * decoded image is converted to RGB as PIL's convert("RGB") does (alpha and
 * transparency dropped; CMYK and YCCK inverted and converted with PIL's
 * formula; 16-bit samples to their high byte, except 16-bit grey, which PIL
 * opens as 32-bit integers and clamps to 255), then torchvision's eval
 * geometry is applied (resize.h). EXIF orientation is ignored, as
 * torchvision ignores it, unless decode_set_exif_orientation turns it on
 * ([decode] exif_orientation). The defaults are the accurate ones PIL uses: the
 * ISLOW IDCT and fancy upsampling.
 *
 * A decode context owns every buffer it needs, sized by plan_decode_terms()
 * for images of up to max_pixels and allocated once by decode_new; a record
 * allocates nothing of ours (libjpeg, libspng and libwebp keep their own
 * per-image working memory, which the plan bounds). One context serves one thread at
 * a time.
 *
 * Every refusal is -EINVAL with a DLQ code (RECORD_ERR_*) and a sentence:
 *   too-large      more than max_bytes of input, or a header claiming more
 *                  than max_pixels (refused before any pixel is decoded);
 *   decode-failed  an empty, truncated or corrupt stream (the library's
 *                  message; libjpeg's warnings, such as a premature end of
 *                  data, count as failures, as they do in PIL), a zero
 *                  width or height, or a side longer than 65535. */
#ifndef INFERD_DECODE_H
#define INFERD_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/plan.h"
#include "core/record.h"

/* The [decode] defaults, in one place: cfg_table.c writes the table's
 * default texts from these macros, so they stay plain numbers. */
#define DECODE_DEFAULT_MAX_PIXELS 50000000
#define DECODE_DEFAULT_MAX_BYTES_MIB 20
#define DECODE_DEFAULT_MAX_BYTES ((size_t)DECODE_DEFAULT_MAX_BYTES_MIB << 20)

typedef struct decode decode_t;

/* The default number of decode threads ([decode] threads = 0): the online
 * cores minus one (one is left to the event loop and librdkafka), at least 1. */
int decode_default_threads(void);

/* A context for images of up to max_pixels pixels and max_bytes encoded
 * bytes. With input_copy, it also owns a max_bytes buffer (decode_input)
 * for callers that read files. Returns 0, -EINVAL (a limit of 0) or
 * -ENOMEM. */
int decode_new(decode_t **ret, uint64_t max_pixels, size_t max_bytes, bool input_copy, errbuf_t *err);

/* NULL is a no-op. */
void decode_free(decode_t *d);

/* The faster, less exact JPEG mode ([decode] fast; off by default): a JPEG
 * whose shorter side is at least 2 x DECODE_FAST_MIN_SIDE is decoded
 * reduced in the DCT domain (by the smallest of libjpeg's factors 1/8..4/8
 * that keeps the shorter side at DECODE_FAST_MIN_SIDE or more); the resize
 * then samples the same region as the accurate path (resize_crop_reduced).
 * The ISLOW IDCT and fancy upsampling are kept (fast upsampling was measured
 * to gain nothing and to cost accuracy), so smaller JPEGs and PNGs are
 * decoded exactly as without it. Its measured cost against torchvision is
 * in docs/perf.md. */
#define DECODE_FAST_MIN_SIDE 512
void decode_set_fast(decode_t *d, bool fast);

/* The decode cost limit ([decode] max_scan_megapixels): a JPEG whose scans
 * (counted from its markers before decoding) times its pixels is over
 * max_scan_megapixels x 10^6 is refused as too-costly. TJFLAG_LIMITSCANS
 * caps the scans at 500, not their cost: 499 nearly empty scans of a 49 MP
 * image took 4.8 s. 0 = no limit; DECODE_DEFAULT_MAX_SCAN_MEGAPIXELS after
 * decode_new (50 scans of a 50 MP image; a usual progressive JPEG has 10). */
#define DECODE_DEFAULT_MAX_SCAN_MEGAPIXELS 2500
void decode_set_max_scan_megapixels(decode_t *d, uint64_t megapixels);

/* Whether the plain PNGs (8-bit grey, grey+alpha, RGB or RGBA, not
 * interlaced) have their image data inflated by libdeflate and unfiltered
 * by inferd's own SIMD code (png_idat.c) rather than by libspng: on by
 * default, since libspng's scalar unfilter and zlib are most of a PNG's
 * time. Off, every PNG is decoded by libspng alone; the unit tests and the
 * fuzzer compare the two, which must agree byte for byte. */
void decode_set_png_own_idat(decode_t *d, bool on);

/* [decode] exif_orientation (off by default): the image is turned as its
 * EXIF orientation tag says (decode_orientation) before the resize, as
 * PIL's ImageOps.exif_transpose turns it; the header's width and height
 * are then swapped for orientations 5..8. Off, the tag is not read, and
 * the result is torchvision's, which ignores it. */
void decode_set_exif_orientation(decode_t *d, bool on);

/* The EXIF orientation of a JPEG, PNG or WebP record (f): 1..8 as the
 * EXIF standard numbers them (1: as stored), where PIL's getexif() finds
 * it; 1 when the record has none, or an EXIF block that cannot be read (the
 * image is then decoded as stored), or f is not one of the three. Reads
 * only the record's headers and never allocates. See decode_exif.c. */
int decode_orientation(record_format_t f, const void *data, size_t len);

/* The max_bytes input buffer of a context made with input_copy, else NULL. */
void *decode_input(decode_t *d);
size_t decode_max_bytes(const decode_t *d);

/* What a record's header says, without decoding its pixels. */
typedef struct decode_info {
        record_format_t format;         /* RECORD_JPEG, RECORD_PNG or RECORD_WEBP */
        uint32_t width, height;         /* as stored, before any EXIF orientation */
        int channels;                   /* 1 grey, 3 colour, 4 CMYK (before conversion) */
        int orientation;                /* the EXIF orientation applied (1..8; 1 when off or none) */
} decode_info_t;

/* Decodes the JPEG, PNG or WebP record data (len bytes, format f) and writes its
 * 224x224x3 RGB8 (HWC) into out. Fills *info when not NULL (also on a
 * refusal, as far as the header was read). Returns 0, or -EINVAL with *code
 * and err set (see above), or -E2BIG for an internal bound that the plan
 * should have ruled out (code decode-failed). */
int decode_record(decode_t *d, const void *data, size_t len, record_format_t f, uint8_t *out,
                  decode_info_t *info, const char **code, errbuf_t *err);

#endif

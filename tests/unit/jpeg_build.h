/* A JPEG writer for the unit tests (libjpeg-turbo's TurboJPEG), so that the
 * decode suites can make their inputs without files or Python. */
#ifndef INFERD_TEST_JPEG_BUILD_H
#define INFERD_TEST_JPEG_BUILD_H

#include <stddef.h>
#include <stdint.h>

/* img (w x h RGB8, malloc'd) as a baseline JPEG of that chroma subsampling
 * (TJSAMP_*) and quality; frees img. Returns the malloc'd stream (*len
 * bytes); a CUnit fatal assertion fails when the encoder does. */
uint8_t *jpeg_build(uint8_t *img, int w, int h, int subsamp, int quality, size_t *len);
/* The same with TurboJPEG's flags (TJFLAG_PROGRESSIVE, say). */
uint8_t *jpeg_build_flags(uint8_t *img, int w, int h, int subsamp, int quality, int flags, size_t *len);

#endif

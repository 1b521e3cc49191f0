/* decode_check: what the decode suites (test_decode, test_decode_webp,
 * test_decode_exif) measure their decoders against: resize_crop with the
 * decoder's own scratch sizes, and a fresh context's peak memory. */
#ifndef INFERD_TEST_DECODE_CHECK_H
#define INFERD_TEST_DECODE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/record.h"

/* resize_crop of img (w x h, ch channels, packed rows) into out (224 x 224
 * x ch), with scratch of the sizes plan_decode_terms gives a decoder of
 * w x h pixels. */
void decode_check_resize(const uint8_t *img, int w, int h, int ch, uint8_t *out);

/* Makes the encoded input, in the child (after its malloc settings):
 * returns it (*len bytes), or NULL; free_input frees it. */
typedef uint8_t *(*decode_check_make_t)(size_t *len);
typedef void (*decode_check_free_t)(uint8_t *input);

/* The peak resident set's growth over one decode of make()'s input, as
 * format, by a fresh context of max_pixels, in a child process: large
 * blocks are mmapped and unmapped when freed (M_MMAP_THRESHOLD fixed), the
 * heap is trimmed and the peak (VmHWM) reset through clear_refs before the
 * context is made, so that no page is reused unseen. got: VmRSS before,
 * VmHWM after, and the input's length. CUnit assertions fail when the
 * child does. */
void decode_check_peak_rss(uint64_t max_pixels, record_format_t format, decode_check_make_t make,
                           decode_check_free_t free_input, uint64_t got[3]);

#endif

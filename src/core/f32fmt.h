/* f32fmt: a float32 as printf's "%.9g" writes it, without printf.
 *
 * Nine significant digits read back as the same float32, which is why the
 * JSON embeddings use them (jansson's seven would not). glibc's printf
 * converts through multi-precision arithmetic: about 160 ns a value, 0.33 ms
 * of the event loop for a 2048-value embedding; this takes about 23 ns
 * (docs/perf.md). Here the nine digits come from one 128-bit product and
 * shift, exact, rounded half to even as printf rounds, so the text is byte
 * for byte printf's
 * (tests/unit/test_f32fmt.c compares them over millions of values); values
 * outside that arithmetic's range (under about 1e-23, 2^24 and over, and
 * the non-finite ones) go to snprintf itself. */
#ifndef INFERD_CORE_F32FMT_H
#define INFERD_CORE_F32FMT_H

#include <stddef.h>

/* The longest text: "-1.23456789e-38" and its NUL. */
#define F32FMT_MAX 16

/* Writes v as "%.9g" into out (F32FMT_MAX bytes at least), NUL-terminated;
 * returns its length. */
size_t f32fmt_g9(char *out, float v);

#endif

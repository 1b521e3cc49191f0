/* f32fmt: a float32 as printf's "%.9g" writes it (f32fmt.h).
 *
 * A finite float32 is m * 2^q with m under 2^24. Its nine significant
 * digits are D = m * 10^s / 2^-q rounded, with s = 8 - k and k the decimal
 * exponent: exact in 128 bits while 10^s stays under 2^103 (s <= 31, a value
 * of about 1e-23 or more) and q is negative (a value under 2^24). k starts
 * from the binary exponent times log10(2) and is corrected by D's own size
 * (a step or two), which also gives printf's exponent after rounding
 * (9.9999999996 is "10"). */
#include "core/f32fmt.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define F32FMT_S_MAX 31

static const uint64_t f32fmt_pow10[20] = {
        1ULL,           10ULL,           100ULL,           1000ULL,           10000ULL,
        100000ULL,      1000000ULL,      10000000ULL,      100000000ULL,      1000000000ULL,
        10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
        1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL, 1000000000000000000ULL,
        10000000000000000000ULL,
};

/* m * 10^s / 2^sh, rounded half to even; s in 0..31, sh in 1..127. */
static uint64_t f32fmt_scaled(uint32_t m, int s, int sh) {
        unsigned __int128 a = (unsigned __int128)m, q, rem, half;

        if (s > 19) {
                a *= f32fmt_pow10[19];
                s -= 19;
        }
        a *= f32fmt_pow10[s];
        q = a >> sh;
        rem = a - (q << sh);
        half = (unsigned __int128)1 << (sh - 1);
        if (rem > half || (rem == half && (q & 1)))
                q++;
        return (uint64_t)q;
}

static size_t f32fmt_slow(char *out, float v) {
        int n = snprintf(out, F32FMT_MAX, "%.9g", (double)v);

        return n > 0 ? (size_t)n : 0;
}

/* Drops the trailing zeros of the digits after a point (and the point
 * when none is left); returns the new end. */
static char *f32fmt_trim(char *start, char *end) {
        char *dot = memchr(start, '.', (size_t)(end - start));

        if (!dot)
                return end;
        while (end > dot + 1 && end[-1] == '0')
                end--;
        if (end == dot + 1)
                end--;
        return end;
}

size_t f32fmt_g9(char *out, float v) {
        uint32_t bits, m, e;
        uint64_t d = 0;
        int q, k, s, tries;
        char digits[10], *p = out, *start;

        memcpy(&bits, &v, sizeof(bits));
        e = (bits >> 23) & 0xff;
        m = bits & 0x7fffff;
        if (e == 0xff)
                return f32fmt_slow(out, v);
        if (e == 0 && m == 0) {
                memcpy(out, bits >> 31 ? "-0" : "0", bits >> 31 ? 3 : 2);
                return bits >> 31 ? 2 : 1;
        }
        if (e == 0) {
                q = -149;
        } else {
                m |= 1u << 23;
                q = (int)e - 150;
        }
        if (q >= 0 || -q > 127)
                return f32fmt_slow(out, v);
        /* The value is in [2^b, 2^(b+1)), b its binary exponent: k is
         * floor(b * log10(2)) or one more; 1233 / 4096 is log10(2) to within
         * 1e-5, exact enough for b in -149..23. */
        {
                int b = q + 31 - __builtin_clz(m);

                k = b >= 0 ? (b * 1233) >> 12 : -((-b * 1233 + 4095) >> 12);
        }
        for (tries = 0; tries < 5; tries++) {
                s = 8 - k;
                if (s < 0 || s > F32FMT_S_MAX)
                        return f32fmt_slow(out, v);
                d = f32fmt_scaled(m, s, -q);
                if (d >= 1000000000ULL)
                        k++;
                else if (d < 100000000ULL)
                        k--;
                else
                        break;
        }
        if (tries == 5)
                return f32fmt_slow(out, v);

        for (int i = 8; i >= 0; i--) {
                digits[i] = (char)('0' + d % 10);
                d /= 10;
        }
        if (bits >> 31)
                *p++ = '-';
        start = p;
        if (k >= -4 && k < 9) {
                if (k >= 0) {
                        memcpy(p, digits, (size_t)k + 1);
                        p += k + 1;
                        *p++ = '.';
                        memcpy(p, digits + k + 1, (size_t)(8 - k));
                        p += 8 - k;
                } else {
                        *p++ = '0';
                        *p++ = '.';
                        for (int i = 0; i < -k - 1; i++)
                                *p++ = '0';
                        memcpy(p, digits, 9);
                        p += 9;
                }
                p = f32fmt_trim(start, p);
        } else {
                int x = k < 0 ? -k : k;

                *p++ = digits[0];
                *p++ = '.';
                memcpy(p, digits + 1, 8);
                p += 8;
                p = f32fmt_trim(start, p);
                *p++ = 'e';
                *p++ = k < 0 ? '-' : '+';
                if (x >= 100)
                        *p++ = (char)('0' + x / 100);
                *p++ = (char)('0' + x / 10 % 10);
                *p++ = (char)('0' + x % 10);
        }
        *p = '\0';
        return (size_t)(p - out);
}

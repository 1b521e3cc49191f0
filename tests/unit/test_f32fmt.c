/* Unit tests of f32fmt_g9: byte for byte printf's "%.9g" of the float32,
 * over edge values, every float32 around each power of ten, and millions
 * of random bit patterns; and the text reads back as the same float32. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f32fmt.h"
#include "unit.h"

/* 0 when f32fmt_g9(v) is snprintf's "%.9g" of it; else prints the first
 * few differences. */
static int f32fmt_differs(float v) {
        static int shown;
        char want[64], got[F32FMT_MAX + 8];
        size_t n;

        snprintf(want, sizeof(want), "%.9g", (double)v);
        memset(got, 'x', sizeof(got));
        n = f32fmt_g9(got, v);
        if (n == strlen(want) && strcmp(got, want) == 0)
                return 0;
        if (shown++ < 5) {
                uint32_t b;

                memcpy(&b, &v, sizeof(b));
                fprintf(stderr, "f32fmt: 0x%08x: printf '%s', f32fmt '%.*s' (%zu)\n", b, want, F32FMT_MAX, got, n);
        }
        return 1;
}

static float f32_from_bits(uint32_t b) {
        float v;

        memcpy(&v, &b, sizeof(v));
        return v;
}

static void test_f32fmt_edges(void) {
        const float vs[] = {
                0.0f, -0.0f, 1.0f, -1.0f, 0.1f, 0.5f, 0.25f, 1e-4f, 9.99999975e-5f, 1e-5f, 123456789.0f,
                16777215.0f, 16777216.0f, 1e8f, 1e9f, 1e10f, 99999999.0f, 999999999.0f, FLT_MAX, -FLT_MAX,
                FLT_MIN, FLT_TRUE_MIN, 1e-23f, 1e-22f, 1e-24f, 9.99999968e-24f, 3.14159265f, -2.71828183f,
                0.0001f, 0.00001f, 12345.6789f, 1.5f, 2.5f, 0.03125f, 1.0f / 3.0f, 0.0009765625f,
                INFINITY, -INFINITY, NAN,
        };
        int bad = 0;
        char buf[F32FMT_MAX];

        for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++)
                bad += f32fmt_differs(vs[i]);
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_EQUAL(f32fmt_g9(buf, -0.0f), 2);
        CU_ASSERT_STRING_EQUAL(buf, "-0");
        CU_ASSERT_EQUAL(f32fmt_g9(buf, -1.17549435e-38f), strlen("-1.17549435e-38"));
        CU_ASSERT_STRING_EQUAL(buf, "-1.17549435e-38");
}

/* Every float32 within 4,096 steps of each power of ten from 1e-38 to
 * 1e38, both signs: where the exponent's estimate and the rounding carry
 * are decided. */
static void test_f32fmt_powers_of_ten(void) {
        int bad = 0;

        for (int x = -38; x <= 38; x++) {
                float p = (float)pow(10.0, x);
                uint32_t b;

                memcpy(&b, &p, sizeof(b));
                for (uint32_t i = b - 4096; i != b + 4096; i++) {
                        bad += f32fmt_differs(f32_from_bits(i));
                        bad += f32fmt_differs(f32_from_bits(i | 0x80000000u));
                }
        }
        CU_ASSERT_EQUAL(bad, 0);
}

/* Four million random bit patterns (every exponent alike), and a million
 * values as embeddings have them (normal around 0, scale 0.05). */
static void test_f32fmt_random(void) {
        uint64_t x = 0x9e3779b97f4a7c15ULL;
        int bad = 0;

        for (int i = 0; i < 4000000; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bad += f32fmt_differs(f32_from_bits((uint32_t)x));
        }
        for (int i = 0; i < 1000000; i++) {
                double u1, u2;

                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                u1 = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
                u2 = ((double)(x & 0xfffff) + 0.5) / 1048576.0;
                bad += f32fmt_differs((float)(0.05 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
        }
        CU_ASSERT_EQUAL(bad, 0);
}

/* The text reads back as the same float32 (what the JSON embeddings need). */
static void test_f32fmt_round_trip(void) {
        uint64_t x = 0x2545f4914f6cdd1dULL;
        char buf[F32FMT_MAX];
        int bad = 0;

        for (int i = 0; i < 1000000; i++) {
                float v, back;

                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v = f32_from_bits((uint32_t)x & 0xbfffffffu);     /* finite: the exponent's top bit off */
                f32fmt_g9(buf, v);
                back = strtof(buf, NULL);
                bad += memcmp(&back, &v, sizeof(v)) != 0;
        }
        CU_ASSERT_EQUAL(bad, 0);
}

int test_f32fmt_register(void) {
        static CU_TestInfo tests[] = {
                { "edges", test_f32fmt_edges },
                { "powers_of_ten", test_f32fmt_powers_of_ten },
                { "random", test_f32fmt_random },
                { "round_trip", test_f32fmt_round_trip },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("f32fmt", tests);
}

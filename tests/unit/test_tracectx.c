/* Unit tests of tracectx_: traceparent checked as W3C Trace Context says,
 * tracestate cut to 32 members and 512 characters as the spec allows, in
 * linear time for a header of megabytes (issue 41, item 4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/tracectx.h"
#include "unit.h"

#define TP_OK "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static bool parent_ok(const char *v) {
        return tracectx_parent_valid(v, strlen(v));
}

static void test_tracectx_parent(void) {
        CU_ASSERT_TRUE(parent_ok(TP_OK));
        CU_ASSERT_TRUE(parent_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
        CU_ASSERT_FALSE(parent_ok("zz-not-a-trace$$$"));
        CU_ASSERT_FALSE(parent_ok(""));
        CU_ASSERT_FALSE(tracectx_parent_valid(NULL, 0));
        /* Uppercase hex, a forbidden version, zero ids, dashes moved. */
        CU_ASSERT_FALSE(parent_ok("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
        CU_ASSERT_FALSE(parent_ok("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        CU_ASSERT_FALSE(parent_ok("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
        CU_ASSERT_FALSE(parent_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
        CU_ASSERT_FALSE(parent_ok("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01"));
        CU_ASSERT_FALSE(parent_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"));
        /* Version 00 is exactly 55 characters; a later one may go on after a dash. */
        CU_ASSERT_FALSE(parent_ok(TP_OK "-what"));
        CU_ASSERT_FALSE(parent_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"));
        CU_ASSERT_TRUE(parent_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"));
        CU_ASSERT_TRUE(parent_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        CU_ASSERT_FALSE(parent_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

/* tracestate v through tracectx_state_cut: the result, and *cut. */
static const char *state(const char *v, bool *cut) {
        static char out[TRACECTX_STATE_MAX_CHARS + 1];
        size_t n = tracectx_state_cut(v, strlen(v), out, cut);

        CU_ASSERT_EQUAL(n, strlen(out));
        return out;
}

static void test_tracectx_state_kept(void) {
        bool cut = true;

        CU_ASSERT_STRING_EQUAL(state("congo=t61rcWkgMzE", &cut), "congo=t61rcWkgMzE");
        CU_ASSERT_FALSE(cut);
        /* Blanks around members and empty members go; nothing is cut. */
        CU_ASSERT_STRING_EQUAL(state(" rojo=00f067aa0ba902b7 ,,\tcongo=t61rcWkgMzE, ", &cut),
                               "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
        CU_ASSERT_FALSE(cut);
        CU_ASSERT_STRING_EQUAL(state("fw529a3039@dt=a b,1tenant@vendor=x", &cut), "fw529a3039@dt=a b,1tenant@vendor=x");
        CU_ASSERT_FALSE(cut);
        CU_ASSERT_STRING_EQUAL(state("", &cut), "");
        CU_ASSERT_FALSE(cut);
}

static void test_tracectx_state_invalid_members(void) {
        bool cut = false;

        /* No '=', an uppercase key, a digit-first simple key, an empty
         * value, an '=' in a value, a key seen before. */
        CU_ASSERT_STRING_EQUAL(state("a=1,noequals,B=2,9k=3,e=,f=x=y,a=again,g=7", &cut), "a=1,g=7");
        CU_ASSERT_TRUE(cut);
        CU_ASSERT_STRING_EQUAL(state("zz-not-a-state$$$", &cut), "");
        CU_ASSERT_TRUE(cut);
}

/* 64 members: the first 32 are kept. */
static void test_tracectx_state_32_members(void) {
        char v[64 * 16], want[32 * 16];
        size_t n = 0, w = 0;
        bool cut = false;

        for (int i = 0; i < 64; i++) {
                n += (size_t)snprintf(v + n, sizeof(v) - n, "%sk%d=v%d", i ? "," : "", i, i);
                if (i < 32)
                        w += (size_t)snprintf(want + w, sizeof(want) - w, "%sk%d=v%d", i ? "," : "", i, i);
        }
        CU_ASSERT_STRING_EQUAL(state(v, &cut), want);
        CU_ASSERT_TRUE(cut);
}

/* Over 512 characters: members over 128 go first, then from the right. */
static void test_tracectx_state_512_chars(void) {
        char v[2048], big[201], mid[101], want[600];
        bool cut = false;
        const char *out;

        memset(big, 'b', 200);
        big[200] = '\0';
        memset(mid, 'm', 100);
        mid[100] = '\0';
        /* 6 members of 102 characters and one of 204 in the middle: 822 in all. */
        snprintf(v, sizeof(v), "a=%s,b=%s,c=%s,big=%s,d=%s,e=%s,f=%s", mid, mid, mid, big, mid, mid, mid);
        out = state(v, &cut);
        CU_ASSERT_TRUE(cut);
        CU_ASSERT_TRUE(strlen(out) <= TRACECTX_STATE_MAX_CHARS);
        /* big goes first (617 left), then f (514), then e (411). */
        snprintf(want, sizeof(want), "a=%s,b=%s,c=%s,d=%s", mid, mid, mid, mid);
        CU_ASSERT_STRING_EQUAL(out, want);
}

/* The 1.2 MB tracestate, one member and many: cut, at once. */
static void test_tracectx_state_megabytes(void) {
        size_t len = 1200000;
        char *v = malloc(len + 1), out[TRACECTX_STATE_MAX_CHARS + 1];
        bool cut = false;

        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        memset(v, 'x', len);
        memcpy(v, "big=", 4);
        v[len] = '\0';
        CU_ASSERT_EQUAL(tracectx_state_cut(v, len, out, &cut), 0);
        CU_ASSERT_TRUE(cut);
        for (size_t i = 0; i + 4 <= len; i += 4)
                memcpy(v + i, "a=1,", 4);
        CU_ASSERT_EQUAL(tracectx_state_cut(v, len, out, &cut), 3);
        CU_ASSERT_STRING_EQUAL(out, "a=1");
        CU_ASSERT_TRUE(cut);
        free(v);
}

int test_tracectx_register(void) {
        static CU_TestInfo tests[] = {
                { "parent", test_tracectx_parent },
                { "state_kept", test_tracectx_state_kept },
                { "state_invalid_members", test_tracectx_state_invalid_members },
                { "state_32_members", test_tracectx_state_32_members },
                { "state_512_chars", test_tracectx_state_512_chars },
                { "state_megabytes", test_tracectx_state_megabytes },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("tracectx", tests);
}

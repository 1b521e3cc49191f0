/* Helpers shared by the CUnit suites: a suite registration macro and a
 * deterministic random generator, so that every suite makes its own data. */
#ifndef INFERD_TEST_UNIT_H
#define INFERD_TEST_UNIT_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Adds a suite called name with the tests in the NULL-terminated
 * CU_TestInfo array. Returns 0 or -1. */
static inline int unit_add_suite(const char *name, CU_TestInfo *tests) {
        CU_SuiteInfo suites[] = {
                { (char *)name, NULL, NULL, NULL, NULL, tests },
                CU_SUITE_INFO_NULL,
        };
        return CU_register_suites(suites) == CUE_SUCCESS ? 0 : -1;
}

/* xorshift64*: reproducible data from a seed. */
static inline uint64_t unit_rand_u64(uint64_t *s) {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 2685821657736338717ULL;
}

/* Uniform in [-1, 1). */
static inline float unit_rand_float(uint64_t *s) {
        return (float)((unit_rand_u64(s) >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* Asserts that the committed file at path (relative to the repository,
 * where the suites run) holds exactly want's want_len bytes: a generated
 * page that is out of date fails. */
static inline void unit_assert_file_is(const char *path, const char *want, size_t want_len) {
        static char have[65536];
        FILE *f = fopen(path, "r");
        size_t have_len;

        CU_ASSERT_PTR_NOT_NULL(f);
        if (!f)
                return;
        have_len = fread(have, 1, sizeof(have), f);
        fclose(f);
        CU_ASSERT_EQUAL(have_len, want_len);
        CU_ASSERT_TRUE(have_len == want_len && memcmp(have, want, want_len) == 0);
}

#endif

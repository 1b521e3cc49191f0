/* Helpers shared by the CUnit suites: a suite registration macro and a
 * deterministic random generator, so that every suite makes its own data. */
#ifndef INFERD_TEST_UNIT_H
#define INFERD_TEST_UNIT_H

#include <CUnit/CUnit.h>
#include <stdint.h>

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

#endif

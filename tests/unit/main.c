/* The one CUnit registry: runs every tests/unit/test_<module>.c suite.
 *
 * Each suite file defines `int test_<module>_register(void)`, which adds a
 * CUnit suite and its tests; the list comes from unit_registry.h, generated
 * by the Makefile from the file names. Every test prints one line for
 * tests/run: "PASS unit/<suite>/<test>" or "FAIL unit/<suite>/<test>: ...",
 * each ending with the test's wall time ("[0.42 s]"), so that a log shows
 * where the suite's time goes.
 *
 *   unit-tests                 every suite
 *   unit-tests NAME...         only the suites of exactly these names
 *                              (tests/run unit NAME...); an unknown name is
 *                              an error, exit 2
 *   unit-tests --list          the suites' names, one a line
 *
 * UNIT_TEST=NAME runs only the tests of that name in the suites chosen
 * (to repeat one test while chasing a rare failure); a name that matches
 * no test is an error, exit 2. */
#include <CUnit/Basic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNIT_SUITE(m) int test_##m##_register(void);
#include "unit_registry.h"
#undef UNIT_SUITE

static struct timespec unit_test_start;

static double unit_seconds_since(const struct timespec *t0) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void on_test_start(const CU_pTest test, const CU_pSuite suite) {
        (void)test;
        (void)suite;
        clock_gettime(CLOCK_MONOTONIC, &unit_test_start);
}

static void on_test_complete(const CU_pTest test, const CU_pSuite suite, const CU_pFailureRecord failure) {
        double s = unit_seconds_since(&unit_test_start);

        if (!failure) {
                printf("PASS unit/%s/%s [%.2f s]\n", suite->pName, test->pName, s);
                fflush(stdout);
                return;
        }
        printf("FAIL unit/%s/%s:", suite->pName, test->pName);
        for (CU_pFailureRecord f = failure; f; f = f->pNext)
                printf(" [%s:%u %s]", f->strFileName ? f->strFileName : "?", f->uiLineNumber,
                       f->strCondition ? f->strCondition : "");
        printf(" [%.2f s]\n", s);
        fflush(stdout);
}

static const char *const unit_suites[] = {
#define UNIT_SUITE(m) #m,
#include "unit_registry.h"
#undef UNIT_SUITE
};
#define UNIT_N_SUITES (sizeof(unit_suites) / sizeof(unit_suites[0]))

/* Whether suite runs: every one without names, else one named exactly. */
static bool unit_selected(const char *suite, int argc, char **argv) {
        if (argc < 2)
                return true;
        for (int i = 1; i < argc; i++)
                if (!strcmp(argv[i], suite))
                        return true;
        return false;
}

/* Every name on the command line is a suite's; else says which is not. */
static bool unit_names_known(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                size_t j = 0;

                while (j < UNIT_N_SUITES && strcmp(argv[i], unit_suites[j]))
                        j++;
                if (j == UNIT_N_SUITES) {
                        fprintf(stderr, "unit-tests: '%s' is not a unit suite (unit-tests --list names them)\n",
                                argv[i]);
                        return false;
                }
        }
        return true;
}

/* With UNIT_TEST set, every test of another name is made inactive. 0, or
 * -1 when none has that name. */
static int unit_only_test(const char *name) {
        CU_pTestRegistry reg = CU_get_registry();
        int found = 0;

        CU_set_fail_on_inactive(CU_FALSE);
        for (CU_pSuite s = reg->pSuite; s; s = s->pNext)
                for (CU_pTest t = s->pTest; t; t = t->pNext) {
                        bool keep = !strcmp(t->pName, name);

                        found += keep;
                        CU_set_test_active(t, keep ? CU_TRUE : CU_FALSE);
                }
        if (!found) {
                fprintf(stderr, "unit-tests: UNIT_TEST=%s names no test of the suites chosen\n", name);
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        const char *only = getenv("UNIT_TEST");
        unsigned failed;

        if (argc == 2 && !strcmp(argv[1], "--list")) {
                for (size_t i = 0; i < UNIT_N_SUITES; i++)
                        printf("%s\n", unit_suites[i]);
                return 0;
        }
        if (!unit_names_known(argc, argv))
                return 2;
        if (CU_initialize_registry() != CUE_SUCCESS)
                return 2;
#define UNIT_SUITE(m)                                                           \
        if (unit_selected(#m, argc, argv)) {                                    \
                if (test_##m##_register() != 0) {                               \
                        printf("FAIL unit/%s: could not register\n", #m);       \
                        CU_cleanup_registry();                                  \
                        return 1;                                               \
                }                                                               \
        }
#include "unit_registry.h"
#undef UNIT_SUITE
        if (only && *only && unit_only_test(only) < 0) {
                CU_cleanup_registry();
                return 2;
        }

        /* CU_run_all_tests, not the Basic interface, which replaces the handler. */
        CU_set_test_start_handler(on_test_start);
        CU_set_test_complete_handler(on_test_complete);
        CU_run_all_tests();
        failed = CU_get_number_of_tests_failed();
        printf("CUnit: %u tests run, %u failed\n", CU_get_number_of_tests_run(), failed);
        CU_cleanup_registry();
        return failed ? 1 : 0;
}

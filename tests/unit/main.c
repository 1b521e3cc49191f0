/* The one CUnit registry: runs every tests/unit/test_<module>.c suite.
 *
 * Each suite file defines `int test_<module>_register(void)`, which adds a
 * CUnit suite and its tests; the list comes from unit_registry.h, generated
 * by the Makefile from the file names. Every test prints one line for
 * tests/run: "PASS unit/<suite>/<test>" or "FAIL unit/<suite>/<test>: ...".
 * An optional argument runs only the suites whose name contains it. */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

#define UNIT_SUITE(m) int test_##m##_register(void);
#include "unit_registry.h"
#undef UNIT_SUITE

static void on_test_complete(const CU_pTest test, const CU_pSuite suite, const CU_pFailureRecord failure) {
        if (!failure) {
                printf("PASS unit/%s/%s\n", suite->pName, test->pName);
                return;
        }
        printf("FAIL unit/%s/%s:", suite->pName, test->pName);
        for (CU_pFailureRecord f = failure; f; f = f->pNext)
                printf(" [%s:%u %s]", f->strFileName ? f->strFileName : "?", f->uiLineNumber,
                       f->strCondition ? f->strCondition : "");
        printf("\n");
        fflush(stdout);
}

int main(int argc, char **argv) {
        const char *only = argc > 1 ? argv[1] : NULL;
        unsigned failed;

        if (CU_initialize_registry() != CUE_SUCCESS)
                return 2;
#define UNIT_SUITE(m)                                                           \
        if (!only || strstr(#m, only)) {                                        \
                if (test_##m##_register() != 0) {                               \
                        printf("FAIL unit/%s: could not register\n", #m);       \
                        CU_cleanup_registry();                                  \
                        return 1;                                               \
                }                                                               \
        }
#include "unit_registry.h"
#undef UNIT_SUITE

        /* CU_run_all_tests, not the Basic interface, which replaces the handler. */
        CU_set_test_complete_handler(on_test_complete);
        CU_run_all_tests();
        failed = CU_get_number_of_tests_failed();
        printf("CUnit: %u tests run, %u failed\n", CU_get_number_of_tests_run(), failed);
        CU_cleanup_registry();
        return failed ? 1 : 0;
}

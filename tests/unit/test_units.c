/* Unit tests of units_: sizes and budgets as written in configs and flags. */
#include <errno.h>
#include <string.h>

#include "core/units.h"
#include "unit.h"

static void test_units_parse_size(void) {
        uint64_t v = 0;

        CU_ASSERT_EQUAL(units_parse_size("0", &v), 0);
        CU_ASSERT_EQUAL(v, 0);
        CU_ASSERT_EQUAL(units_parse_size("4096", &v), 0);
        CU_ASSERT_EQUAL(v, 4096);
        CU_ASSERT_EQUAL(units_parse_size("11GiB", &v), 0);
        CU_ASSERT_EQUAL(v, (uint64_t)11 << 30);
        CU_ASSERT_EQUAL(units_parse_size(" 512 MiB ", &v), 0);
        CU_ASSERT_EQUAL(v, (uint64_t)512 << 20);
        CU_ASSERT_EQUAL(units_parse_size("2G", &v), 0);
        CU_ASSERT_EQUAL(v, (uint64_t)2 << 30);
        CU_ASSERT_EQUAL(units_parse_size("1.5GiB", &v), 0);
        CU_ASSERT_EQUAL(v, (uint64_t)3 << 29);
        CU_ASSERT_EQUAL(units_parse_size("64kib", &v), 0);
        CU_ASSERT_EQUAL(v, 65536);
}

static void test_units_parse_size_rejects(void) {
        uint64_t v;

        CU_ASSERT_EQUAL(units_parse_size("", &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_size("GiB", &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_size("-1GiB", &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_size("12 parsecs", &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_size("1.5", &v), -EINVAL);        /* a fraction of a byte */
        CU_ASSERT_EQUAL(units_parse_size("3GiB extra", &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_size("99999999999999999999", &v), -ERANGE);
        CU_ASSERT_EQUAL(units_parse_size("99999999999TiB", &v), -ERANGE);
}

static void test_units_parse_budget(void) {
        uint64_t v;

        CU_ASSERT_EQUAL(units_parse_budget("70%", 1000, &v), 0);
        CU_ASSERT_EQUAL(v, 700);
        CU_ASSERT_EQUAL(units_parse_budget("100%", 1000, &v), 0);
        CU_ASSERT_EQUAL(v, 1000);
        CU_ASSERT_EQUAL(units_parse_budget("8GiB", 1000, &v), 0);
        CU_ASSERT_EQUAL(v, (uint64_t)8 << 30);
        CU_ASSERT_EQUAL(units_parse_budget("0%", 1000, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_budget("170%", 1000, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_budget("70%", 0, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_budget("x%", 1000, &v), -EINVAL);
        CU_ASSERT(units_is_percent("5 %"));
        CU_ASSERT(!units_is_percent("5GiB"));
}

static void test_units_format_size(void) {
        char b[32];

        CU_ASSERT_STRING_EQUAL(units_format_size(512, b, sizeof(b)), "512 B");
        CU_ASSERT_STRING_EQUAL(units_format_size(3 << 20, b, sizeof(b)), "3.0 MiB");
        CU_ASSERT_STRING_EQUAL(units_format_size((uint64_t)11 << 30, b, sizeof(b)), "11.0 GiB");
}

static void test_units_parse_duration(void) {
        uint64_t ms = 1;
        char b[32];

        CU_ASSERT_EQUAL(units_parse_duration_ms("0", &ms), 0);
        CU_ASSERT_EQUAL(ms, 0);
        CU_ASSERT_EQUAL(units_parse_duration_ms("90s", &ms), 0);
        CU_ASSERT_EQUAL(ms, 90000);
        CU_ASSERT_EQUAL(units_parse_duration_ms(" 10m ", &ms), 0);
        CU_ASSERT_EQUAL(ms, 600000);
        CU_ASSERT_EQUAL(units_parse_duration_ms("1500ms", &ms), 0);
        CU_ASSERT_EQUAL(ms, 1500);
        CU_ASSERT_EQUAL(units_parse_duration_ms("2h", &ms), 0);
        CU_ASSERT_EQUAL(ms, 7200000);
        CU_ASSERT_EQUAL(units_parse_duration_ms("1d", &ms), 0);
        CU_ASSERT_EQUAL(ms, 86400000);
        CU_ASSERT_EQUAL(units_parse_duration_ms("90", &ms), -EINVAL);   /* no unit */
        CU_ASSERT_EQUAL(units_parse_duration_ms("10 min", &ms), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_duration_ms("-5s", &ms), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_duration_ms("1.5s", &ms), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_duration_ms("s", &ms), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_duration_ms("", &ms), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_duration_ms("400d", &ms), -ERANGE);
        CU_ASSERT_EQUAL(units_parse_duration_ms("99999999999999999999999h", &ms), -ERANGE);
        CU_ASSERT_STRING_EQUAL(units_format_duration_ms(0, b, sizeof(b)), "0");
        CU_ASSERT_STRING_EQUAL(units_format_duration_ms(600000, b, sizeof(b)), "10m");
        CU_ASSERT_STRING_EQUAL(units_format_duration_ms(90000, b, sizeof(b)), "90s");
        CU_ASSERT_STRING_EQUAL(units_format_duration_ms(1500, b, sizeof(b)), "1500ms");
        CU_ASSERT_STRING_EQUAL(units_format_duration_ms(7200000, b, sizeof(b)), "2h");
}

static void test_units_parse_long(void) {
        long v = 7;

        CU_ASSERT_EQUAL(units_parse_long("12", 1, 100, &v), 0);
        CU_ASSERT_EQUAL(v, 12);
        CU_ASSERT_EQUAL(units_parse_long("-5000", -6000, 0, &v), 0);
        CU_ASSERT_EQUAL(v, -5000);
        CU_ASSERT_EQUAL(units_parse_long("100", 1, 100, &v), 0);
        CU_ASSERT_EQUAL(v, 100);
        v = 7;
        CU_ASSERT_EQUAL(units_parse_long("101", 1, 100, &v), -EINVAL);  /* past max */
        CU_ASSERT_EQUAL(units_parse_long("0", 1, 100, &v), -EINVAL);    /* below min */
        CU_ASSERT_EQUAL(units_parse_long("12x", 1, 100, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_long(" 12", 1, 100, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_long("", 1, 100, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_long(NULL, 1, 100, &v), -EINVAL);
        CU_ASSERT_EQUAL(units_parse_long("99999999999999999999999", 1, 100, &v), -EINVAL);
        CU_ASSERT_EQUAL(v, 7);                                          /* untouched on error */
}

int test_units_register(void) {
        static CU_TestInfo tests[] = {
                { "parse_size", test_units_parse_size },
                { "parse_size_rejects", test_units_parse_size_rejects },
                { "parse_budget", test_units_parse_budget },
                { "format_size", test_units_format_size },
                { "parse_duration", test_units_parse_duration },
                { "parse_long", test_units_parse_long },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("units", tests);
}

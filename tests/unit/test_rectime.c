/* Unit tests of rectime_: the deadline on a record's age (strictly older
 * than the limit, never a future or missing timestamp), the stages a
 * record's clock readings make (adding up to taken -> end), and the
 * inferd-timing header's text. */
#include <errno.h>
#include <string.h>

#include "pipeline/rectime.h"
#include "unit.h"

static void test_rectime_expired_boundary(void) {
        int64_t age = -1;

        /* Off. */
        CU_ASSERT_FALSE(rectime_expired(1000, 1000000, 0, &age));
        CU_ASSERT_EQUAL(age, 999000);
        /* Exactly the limit old: not expired; one millisecond more: expired. */
        CU_ASSERT_FALSE(rectime_expired(1000, 61000, 60000, &age));
        CU_ASSERT_EQUAL(age, 60000);
        CU_ASSERT_TRUE(rectime_expired(1000, 61001, 60000, &age));
        CU_ASSERT_EQUAL(age, 60001);
        CU_ASSERT_FALSE(rectime_expired(1000, 60999, 60000, &age));
        /* From the future (clock skew): never, however far. */
        CU_ASSERT_FALSE(rectime_expired(5000000, 1000, 1, &age));
        CU_ASSERT_EQUAL(age, 0);
        /* No timestamp. */
        CU_ASSERT_FALSE(rectime_expired(-1, 1000000, 1, &age));
        CU_ASSERT_EQUAL(age, 0);
        /* The now of a real clock is past 2020. */
        CU_ASSERT_TRUE(rectime_now_ms() > 1577836800000LL);
}

static void test_rectime_queue(void) {
        CU_ASSERT_DOUBLE_EQUAL(rectime_queue_s(1000, 3.5005), 2.5005, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(rectime_queue_s(5000, 3.5), 0.0, 0);   /* future */
        CU_ASSERT_DOUBLE_EQUAL(rectime_queue_s(-1, 3.5), 0.0, 0);     /* none */
        CU_ASSERT_DOUBLE_EQUAL(rectime_now_s(), (double)rectime_now_ms() / 1e3, 0.5);
}

static void test_rectime_stages_add_up(void) {
        rectime_t t = { .queue_s = 0.25, .taken_us = 1000, .decoded_us = 1700, .submitted_us = 5000,
                        .done_us = 9000, };
        double s[RECTIME_STAGES], after = 0;

        rectime_stages(&t, 9300, s);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_QUEUE], 0.25, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_DECODE], 700e-6, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_BATCH_WAIT], 3300e-6, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_ENGINE], 4000e-6, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_PRODUCE], 300e-6, 1e-12);
        for (int i = RECTIME_DECODE; i < RECTIME_STAGES; i++)
                after += s[i];
        CU_ASSERT_DOUBLE_EQUAL(after, (9300 - 1000) * 1e-6, 1e-12);
        /* A raw record: decoded when taken, no decode stage. */
        t.decoded_us = t.taken_us;
        rectime_stages(&t, 9300, s);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_DECODE], 0, 0);
        CU_ASSERT_DOUBLE_EQUAL(s[RECTIME_BATCH_WAIT], 4000e-6, 1e-12);
}

static void test_rectime_header(void) {
        double s[RECTIME_STAGES] = { 1.5, 0.0007, 0.0033, 0.004, 0.0003 };
        char buf[128];

        CU_ASSERT_EQUAL(rectime_format_header(s, buf, sizeof(buf)), (int)strlen(buf));
        CU_ASSERT_STRING_EQUAL(buf, "queue=1500.000;decode=0.700;batch_wait=3.300;engine=4.000;produce=0.300");
        CU_ASSERT_EQUAL(rectime_format_header(s, buf, 20), -ENOSPC);
        CU_ASSERT_STRING_EQUAL(rectime_stage_names[RECTIME_BATCH_WAIT], "batch_wait");
}

int test_rectime_register(void) {
        static CU_TestInfo tests[] = {
                { "expired_boundary", test_rectime_expired_boundary },
                { "queue", test_rectime_queue },
                { "stages_add_up", test_rectime_stages_add_up },
                { "header", test_rectime_header },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("rectime", tests);
}

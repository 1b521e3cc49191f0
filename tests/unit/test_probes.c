/* Unit tests of probes_: /readyz's reason for each state, and the order in
 * which they win when several hold. */
#include <string.h>

#include "http/probes.h"
#include "unit.h"

static void test_probes_ready_reasons(void) {
        probes_state_t ready = { .started = true, .assigned_partitions = 2 }, s;

        CU_ASSERT_PTR_NULL(probes_ready_reason(&ready));
        s = ready;
        s.started = false;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "starting");
        s = ready;
        s.draining = true;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "draining");
        s = ready;
        s.reloading = true;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "reloading");
        s = ready;
        s.assigned_partitions = 0;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "no-partitions");
        s = ready;
        s.kafka_unreachable = true;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "kafka-unreachable");
        s = ready;
        s.auth_failed = true;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "auth-failed");
}

static void test_probes_ready_order(void) {
        probes_state_t s = { .started = false, .draining = true, .reloading = true, .auth_failed = true,
                             .kafka_unreachable = true, .assigned_partitions = 0 };

        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "draining");
        s.draining = false;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "starting");
        s.started = true;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "reloading");
        s.reloading = false;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "auth-failed");
        s.auth_failed = false;
        /* Brokers away: the old assignment may still be listed, or not. */
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "kafka-unreachable");
        s.kafka_unreachable = false;
        CU_ASSERT_STRING_EQUAL(probes_ready_reason(&s), "no-partitions");
}

int test_probes_register(void) {
        static CU_TestInfo tests[] = {
                { "ready_reasons", test_probes_ready_reasons },
                { "ready_order", test_probes_ready_order },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("probes", tests);
}

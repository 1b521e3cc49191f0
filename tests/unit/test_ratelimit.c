/* Unit tests of ratelimit_, the token bucket of [batching] max_images_per_s,
 * on a clock of the tests' own (the bucket has none): the bound (at most
 * rate x T + one bucket in any T), exact refill at rates that do not divide
 * a second, the bucket's ceiling after an idle spell, debt from a forced
 * batch, and live changes. */
#include <errno.h>
#include <stdint.h>

#include "pipeline/ratelimit.h"
#include "unit.h"

#define S_US 1000000ULL

static void test_ratelimit_no_cap_never_waits(void) {
        ratelimit_t rl = {};

        CU_ASSERT_FALSE(ratelimit_enabled(&rl));
        for (int i = 0; i < 1000; i++)
                CU_ASSERT_EQUAL(ratelimit_take(&rl, 4096, 5), 0);
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 4096, 5), 5);
        ratelimit_set(&rl, 0, 32, 7);
        CU_ASSERT_FALSE(ratelimit_enabled(&rl));
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, 7), 0);
}

/* A full bucket lets one batch go at once; the next waits exactly n / rate. */
static void test_ratelimit_full_bucket_then_waits(void) {
        ratelimit_t rl = {};
        uint64_t t0 = 1000 * S_US, ready;

        ratelimit_set(&rl, 100, 4, t0);
        CU_ASSERT_TRUE(ratelimit_enabled(&rl));
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 4, t0), t0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 4, t0), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, t0), -EAGAIN);
        /* 4 images at 100/s: 40 ms. */
        ready = ratelimit_ready_us(&rl, 4, t0);
        CU_ASSERT_EQUAL(ready, t0 + 40000);
        /* A smaller batch is ready sooner. */
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 1, t0), t0 + 10000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 4, ready - 1), -EAGAIN);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 4, ready), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, ready), -EAGAIN);
}

/* A greedy taker, always at ratelimit_ready_us: over T seconds it gets no
 * more than rate x T + depth, and no less than rate x T - n, less 1% (it is
 * held to the cap, not below it). The 1%: a wait is rounded up to the next
 * microsecond, and what a full bucket earns in that fraction is lost, at
 * most rate / 1e6 images a batch (0.24% at 10 million a second in batches
 * of 4096; nothing measurable at the rates of a GPU). */
static void test_ratelimit_rate_bound_over_time(void) {
        static const struct {
                int rate, depth, n;
        } cases[] = { { 1000, 32, 32 }, { 3, 1, 1 }, { 7, 5, 3 }, { 250, 64, 17 }, { 10000000, 4096, 4096 } };

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                ratelimit_t rl = {};
                uint64_t t0 = 12345, end = t0 + 10 * S_US, t = t0;
                int64_t got = 0, cap = (int64_t)cases[c].rate * 10;

                ratelimit_set(&rl, cases[c].rate, cases[c].depth, t0);
                for (;;) {
                        t = ratelimit_ready_us(&rl, cases[c].n, t);
                        if (t > end)
                                break;
                        CU_ASSERT_EQUAL_FATAL(ratelimit_take(&rl, cases[c].n, t), 0);
                        got += cases[c].n;
                }
                CU_ASSERT(got <= cap + cases[c].depth);
                CU_ASSERT(got >= cap - cases[c].n - cap / 100);
        }
}

/* However long the bucket sat, it holds one bucket, no more (and an hour
 * or ten years of refill overflows nothing). */
static void test_ratelimit_idle_fills_to_depth_only(void) {
        ratelimit_t rl = {};
        uint64_t t = S_US;

        ratelimit_set(&rl, 10000000, 64, t);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 64, t), 0);
        t += 3600 * S_US;
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 64, t), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, t), -EAGAIN);
        t += 10ULL * 365 * 24 * 3600 * S_US;
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 64, t), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, t), -EAGAIN);
}

/* A forced batch puts the bucket in debt: what comes next waits it off. */
static void test_ratelimit_charge_goes_into_debt(void) {
        ratelimit_t rl = {};
        uint64_t t0 = 0;

        ratelimit_set(&rl, 10, 2, t0);
        ratelimit_charge(&rl, 2, t0);          /* the full bucket */
        ratelimit_charge(&rl, 4, t0);          /* 4 in debt */
        /* 4 of debt and 1 to take at 10/s: 500 ms. */
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 1, t0), t0 + 500000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, t0 + 499999), -EAGAIN);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, t0 + 500000), 0);
}

/* A batch larger than the bucket (the batch limit raised above the depth)
 * waits for a full bucket, then goes, into debt. */
static void test_ratelimit_batch_above_depth(void) {
        ratelimit_t rl = {};

        ratelimit_set(&rl, 100, 4, 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 4, 0), 0);
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 8, 0), 40000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 8, 40000), 0);
        /* 4 in debt, then 4 to earn: 80 ms. */
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 4, 40000), 120000);
}

/* Live changes (SIGHUP): a new rate applies from now (what was earned
 * before stays), a smaller depth clips the tokens, 0 lifts the cap, and a
 * cap set again starts with a full bucket. */
static void test_ratelimit_live_changes(void) {
        ratelimit_t rl = {};

        ratelimit_set(&rl, 100, 10, 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 10, 0), 0);
        /* 50 ms at 100/s earned 5; then at 10/s, 5 more take 500 ms. */
        ratelimit_set(&rl, 10, 10, 50000);
        CU_ASSERT_EQUAL(ratelimit_ready_us(&rl, 10, 50000), 550000);
        /* A depth of 2 clips the 5 tokens to 2. */
        ratelimit_set(&rl, 10, 2, 50000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 2, 50000), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, 50000), -EAGAIN);
        ratelimit_set(&rl, 0, 2, 60000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1000, 60000), 0);
        ratelimit_set(&rl, 10, 3, 70000);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 3, 70000), 0);
        CU_ASSERT_EQUAL(ratelimit_take(&rl, 1, 70000), -EAGAIN);
}

int test_ratelimit_register(void) {
        static CU_TestInfo tests[] = {
                { "no_cap_never_waits", test_ratelimit_no_cap_never_waits },
                { "full_bucket_then_waits", test_ratelimit_full_bucket_then_waits },
                { "rate_bound_over_time", test_ratelimit_rate_bound_over_time },
                { "idle_fills_to_depth_only", test_ratelimit_idle_fills_to_depth_only },
                { "charge_goes_into_debt", test_ratelimit_charge_goes_into_debt },
                { "batch_above_depth", test_ratelimit_batch_above_depth },
                { "live_changes", test_ratelimit_live_changes },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("ratelimit", tests);
}

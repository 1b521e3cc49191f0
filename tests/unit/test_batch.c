/* Unit tests of batch_: slot states, flush bookkeeping, back-pressure, and
 * the partition-ordered offset store (nothing committed past a record still
 * in flight, stale acknowledgements after a revoke ignored). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "pipeline/batch.h"
#include "unit.h"

static void test_batch_fills_submits_and_flags_full(void) {
        batch_t *b = NULL;
        int slot = -1, idx = -1, r;
        uint64_t oldest = 0;
        int tags[8];

        CU_ASSERT_EQUAL_FATAL(batch_new(&b, 2, 3), 0);
        CU_ASSERT_EQUAL(batch_filling(b, NULL), -1);
        r = batch_add(b, &tags[0], 100, &slot, &idx);
        CU_ASSERT_EQUAL(r, 0);
        CU_ASSERT_EQUAL(idx, 0);
        CU_ASSERT_EQUAL(batch_filling(b, &oldest), slot);
        CU_ASSERT_EQUAL(oldest, 100);
        CU_ASSERT_EQUAL(batch_add(b, &tags[1], 200, &slot, &idx), 0);
        CU_ASSERT_EQUAL(idx, 1);
        /* The third record fills the slot. */
        CU_ASSERT_EQUAL(batch_add(b, &tags[2], 300, &slot, &idx), 1);
        CU_ASSERT_EQUAL(idx, 2);
        CU_ASSERT_EQUAL(batch_filling(b, &oldest), slot);
        CU_ASSERT_EQUAL(oldest, 100);
        CU_ASSERT_EQUAL(batch_submit(b, slot), 3);
        CU_ASSERT_EQUAL(batch_slot_state(b, slot), BATCH_SLOT_IN_FLIGHT);
        CU_ASSERT_EQUAL(batch_in_flight(b), 1);
        CU_ASSERT_PTR_EQUAL(batch_slot_entry(b, slot, 1)->msg, &tags[1]);
        CU_ASSERT_EQUAL(batch_records_held(b), 3);
        batch_free(b);
}

static void test_batch_back_pressure_when_every_slot_busy(void) {
        batch_t *b = NULL;
        int s0, s1, s2, idx, tag;

        CU_ASSERT_EQUAL_FATAL(batch_new(&b, 2, 1), 0);
        CU_ASSERT_EQUAL(batch_add(b, &tag, 1, &s0, &idx), 1);
        batch_submit(b, s0);
        CU_ASSERT_FALSE(batch_is_busy(b));
        CU_ASSERT_EQUAL(batch_add(b, &tag, 2, &s1, &idx), 1);
        CU_ASSERT_NOT_EQUAL(s0, s1);
        batch_submit(b, s1);
        CU_ASSERT_TRUE(batch_is_busy(b));
        CU_ASSERT_EQUAL(batch_add(b, &tag, 3, &s2, &idx), -ENOBUFS);
        /* A completed slot is still busy until its results are handed on. */
        CU_ASSERT_EQUAL(batch_complete(b, s0), 0);
        CU_ASSERT_TRUE(batch_is_busy(b));
        CU_ASSERT_EQUAL(batch_complete(b, s0), -EINVAL);
        batch_release(b, s0);
        CU_ASSERT_FALSE(batch_is_busy(b));
        CU_ASSERT_EQUAL(batch_add(b, &tag, 4, &s2, &idx), 1);
        CU_ASSERT_EQUAL(s2, s0);
        CU_ASSERT_EQUAL(idx, 0);
        batch_free(b);
}

static void test_batch_limit_lowers_full_threshold(void) {
        batch_t *b = NULL;
        int slot, idx, tag;

        CU_ASSERT_EQUAL_FATAL(batch_new(&b, 2, 8), 0);
        CU_ASSERT_EQUAL(batch_set_limit(b, 100), 8);
        CU_ASSERT_EQUAL(batch_set_limit(b, 0), 1);
        CU_ASSERT_EQUAL(batch_set_limit(b, 2), 2);
        CU_ASSERT_EQUAL(batch_add(b, &tag, 1, &slot, &idx), 0);
        CU_ASSERT_EQUAL(batch_add(b, &tag, 1, &slot, &idx), 1);
        batch_free(b);
}

static void test_batch_offsets_store_only_done_prefix(void) {
        batch_offsets_t *o = NULL;
        const char *topic = NULL;
        int32_t part = -1;
        int64_t next = -1;
        int id;

        CU_ASSERT_EQUAL_FATAL(batch_offsets_new(&o), 0);
        id = batch_offsets_assign(o, "images", 3);
        CU_ASSERT_TRUE_FATAL(id > 0);
        for (int64_t off = 10; off < 14; off++)
                CU_ASSERT_EQUAL(batch_offsets_track(o, "images", 3, off), id);
        CU_ASSERT_EQUAL(batch_offsets_pending(o), 4);
        /* 11 and 12 acknowledged first: 10 still pending, nothing to store. */
        CU_ASSERT_EQUAL(batch_offsets_done(o, id, 12, &topic, &part, &next), 0);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id, 11, &topic, &part, &next), 0);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id, 10, &topic, &part, &next), 1);
        CU_ASSERT_STRING_EQUAL(topic, "images");
        CU_ASSERT_EQUAL(part, 3);
        CU_ASSERT_EQUAL(next, 13);
        CU_ASSERT_EQUAL(batch_offsets_pending(o), 1);
        /* A second acknowledgement of the same record is refused. */
        CU_ASSERT_EQUAL(batch_offsets_done(o, id, 11, &topic, &part, &next), -ENOENT);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id, 13, &topic, &part, &next), 1);
        CU_ASSERT_EQUAL(next, 14);
        CU_ASSERT_EQUAL(batch_offsets_pending(o), 0);
        batch_offsets_free(o);
}

static void test_batch_offsets_gaps_rewind_and_growth(void) {
        batch_offsets_t *o = NULL;
        const char *topic;
        int32_t part;
        int64_t next = -1;
        int id, moved = 0;

        CU_ASSERT_EQUAL_FATAL(batch_offsets_new(&o), 0);
        CU_ASSERT_EQUAL(batch_offsets_track(o, "images", 0, 5), -ENOENT);
        id = batch_offsets_assign(o, "images", 0);
        /* Offsets with gaps (compaction, transaction markers), more than the
         * initial ring holds. */
        for (int64_t i = 0; i < 1000; i++)
                CU_ASSERT_EQUAL(batch_offsets_track(o, "images", 0, 3 * i), id);
        CU_ASSERT_EQUAL(batch_offsets_track(o, "images", 0, 3 * 999), -ESTALE);
        CU_ASSERT_EQUAL(batch_offsets_pending_in(o, "images", 0), 1000);
        /* Acknowledged in reverse order: only the last one moves the position. */
        for (int64_t i = 999; i >= 0; i--)
                moved += batch_offsets_done(o, id, 3 * i, &topic, &part, &next) == 1;
        CU_ASSERT_EQUAL(moved, 1);
        CU_ASSERT_EQUAL(next, 3 * 999 + 1);
        CU_ASSERT_EQUAL(batch_offsets_pending(o), 0);
        batch_offsets_free(o);
}

static void test_batch_offsets_revoke_ignores_stale_acks(void) {
        batch_offsets_t *o = NULL;
        const char *topic;
        int32_t part;
        int64_t next;
        int id1, id2, other;

        CU_ASSERT_EQUAL_FATAL(batch_offsets_new(&o), 0);
        id1 = batch_offsets_assign(o, "images", 1);
        other = batch_offsets_assign(o, "images", 2);
        CU_ASSERT_NOT_EQUAL(id1, other);
        batch_offsets_track(o, "images", 1, 7);
        batch_offsets_track(o, "images", 1, 8);
        batch_offsets_track(o, "images", 2, 7);
        CU_ASSERT_EQUAL(batch_offsets_revoke(o, "images", 1), 2);
        CU_ASSERT_EQUAL(batch_offsets_pending(o), 1);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id1, 7, &topic, &part, &next), -ESTALE);
        /* Assigned again: a fresh id, and the old acknowledgements stay ignored. */
        id2 = batch_offsets_assign(o, "images", 1);
        CU_ASSERT_NOT_EQUAL(id2, id1);
        CU_ASSERT_EQUAL(batch_offsets_track(o, "images", 1, 7), id2);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id1, 7, &topic, &part, &next), -ESTALE);
        CU_ASSERT_EQUAL(batch_offsets_done(o, other, 7, &topic, &part, &next), 1);
        CU_ASSERT_EQUAL(part, 2);
        CU_ASSERT_EQUAL(next, 8);
        CU_ASSERT_EQUAL(batch_offsets_done(o, id2, 7, &topic, &part, &next), 1);
        CU_ASSERT_EQUAL(part, 1);
        batch_offsets_free(o);
}

int test_batch_register(void) {
        static CU_TestInfo tests[] = {
                { "fills_submits_and_flags_full", test_batch_fills_submits_and_flags_full },
                { "back_pressure_when_every_slot_busy", test_batch_back_pressure_when_every_slot_busy },
                { "limit_lowers_full_threshold", test_batch_limit_lowers_full_threshold },
                { "offsets_store_only_done_prefix", test_batch_offsets_store_only_done_prefix },
                { "offsets_gaps_rewind_and_growth", test_batch_offsets_gaps_rewind_and_growth },
                { "offsets_revoke_ignores_stale_acks", test_batch_offsets_revoke_ignores_stale_acks },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("batch", tests);
}

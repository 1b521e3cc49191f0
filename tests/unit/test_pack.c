/* Unit tests of pack_: how a batch's records are packed into a slot's
 * input. The numbers are derived by hand in the comments:
 *   rgb8 row 224 * 224 * 3 = 150,528 bytes (588 * 256);
 *   float32 row 3 * 224 * 224 * 4 = 602,112 bytes (2,352 * 256, 4 rgb8 rows);
 *   capacity(b) = (b - 1) * 150,528 + 602,112: b = 1: 602,112;
 *   b = 8: 1,053,696 + 602,112 = 1,655,808; b = 256: 38,384,640 + 602,112 =
 *   38,986,752 (25.3% of the 154,140,672 of 256 fixed 602,112-byte places). */
#include <errno.h>

#include "engine/pack.h"
#include "unit.h"

static void test_pack_capacity_by_hand(void) {
        CU_ASSERT_EQUAL(pack_row_bytes(RECORD_RGB8), (size_t)150528);
        CU_ASSERT_EQUAL(pack_row_bytes(RECORD_F32_CHW), (size_t)602112);
        CU_ASSERT_EQUAL(pack_row_bytes(RECORD_UNKNOWN), (size_t)0);
        CU_ASSERT_EQUAL(pack_row_bytes(RECORD_JPEG), (size_t)0);
        CU_ASSERT_EQUAL(pack_capacity_bytes(0), (uint64_t)0);
        CU_ASSERT_EQUAL(pack_capacity_bytes(1), (uint64_t)602112);
        CU_ASSERT_EQUAL(pack_capacity_bytes(8), (uint64_t)1655808);
        CU_ASSERT_EQUAL(pack_capacity_bytes(256), (uint64_t)38986752);
        CU_ASSERT_EQUAL(pack_capacity_bytes(256) % PACK_ALIGN_BYTES, (uint64_t)0);
}

/* A batch of rgb8 records fills every row, at 150,528-byte steps. */
static void test_pack_rgb8_fills_the_batch(void) {
        pack_t p;
        uint64_t off;

        pack_init(&p, 8);
        for (int i = 0; i < 8; i++) {
                CU_ASSERT_TRUE(pack_has_room(&p));
                CU_ASSERT_EQUAL_FATAL(pack_add(&p, RECORD_RGB8, &off), 0);
                CU_ASSERT_EQUAL(off, (uint64_t)i * 150528);
        }
        /* 8 * 150,528 = 1,204,224 used: 451,584 left, but 8 rows are the batch. */
        CU_ASSERT_EQUAL(p.used_bytes, (uint64_t)1204224);
        CU_ASSERT_FALSE(pack_has_room(&p));
        CU_ASSERT_EQUAL(pack_add(&p, RECORD_RGB8, &off), -ENOSPC);
        CU_ASSERT_EQUAL(p.rows, 8);
}

/* A batch of float32 records closes at ceil(8 / 4) = 2 rows: after two,
 * 1,655,808 - 1,204,224 = 451,584 bytes are left, less than a float32 row,
 * so the slot has no room (although an rgb8 record would still fit). */
static void test_pack_f32_falls_back_to_a_smaller_batch(void) {
        pack_t p;
        uint64_t off;

        pack_init(&p, 8);
        CU_ASSERT_EQUAL_FATAL(pack_add(&p, RECORD_F32_CHW, &off), 0);
        CU_ASSERT_EQUAL(off, (uint64_t)0);
        CU_ASSERT_TRUE(pack_has_room(&p));
        CU_ASSERT_EQUAL_FATAL(pack_add(&p, RECORD_F32_CHW, &off), 0);
        CU_ASSERT_EQUAL(off, (uint64_t)602112);
        CU_ASSERT_FALSE(pack_has_room(&p));
        CU_ASSERT_EQUAL(pack_add(&p, RECORD_F32_CHW, &off), -ENOSPC);
        CU_ASSERT_EQUAL(p.rows, 2);
        CU_ASSERT_EQUAL(p.used_bytes, (uint64_t)1204224);

        /* Batch 1 holds exactly one record of either format. */
        pack_init(&p, 1);
        CU_ASSERT_EQUAL(pack_add(&p, RECORD_F32_CHW, &off), 0);
        CU_ASSERT_FALSE(pack_has_room(&p));
}

/* rgb8, f32, rgb8, ... at batch 8: offsets 0, 150,528, 752,640 (150,528 +
 * 602,112), then 903,168; used 1,053,696 leaves 602,112: room for exactly
 * one more of either format, then none (5 rows). */
static void test_pack_mixed_offsets(void) {
        record_format_t f[5] = { RECORD_RGB8, RECORD_F32_CHW, RECORD_RGB8, RECORD_RGB8, RECORD_F32_CHW };
        uint64_t want[5] = { 0, 150528, 752640, 903168, 1053696 }, off;
        pack_t p;

        pack_init(&p, 8);
        for (int i = 0; i < 5; i++) {
                CU_ASSERT_TRUE(pack_has_room(&p));
                CU_ASSERT_EQUAL_FATAL(pack_add(&p, f[i], &off), 0);
                CU_ASSERT_EQUAL(off, want[i]);
                CU_ASSERT_EQUAL(off % PACK_ALIGN_BYTES, (uint64_t)0);
        }
        CU_ASSERT_EQUAL(p.used_bytes, pack_capacity_bytes(8));
        CU_ASSERT_FALSE(pack_has_room(&p));
        CU_ASSERT_EQUAL(pack_add(&p, RECORD_RGB8, &off), -ENOSPC);
        /* A format that is not runnable is refused, not placed. */
        pack_init(&p, 8);
        CU_ASSERT_EQUAL(pack_add(&p, RECORD_PNG, &off), -EINVAL);
        CU_ASSERT_EQUAL(p.rows, 0);
}

int test_pack_register(void) {
        static CU_TestInfo tests[] = {
                { "capacity_by_hand", test_pack_capacity_by_hand },
                { "rgb8_fills_the_batch", test_pack_rgb8_fills_the_batch },
                { "f32_falls_back_to_a_smaller_batch", test_pack_f32_falls_back_to_a_smaller_batch },
                { "mixed_offsets", test_pack_mixed_offsets },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("pack", tests);
}

/* Unit tests of decode_pool_: jobs go out to the threads and come back
 * through the eventfd, good and bad alike, each with its own result; a full
 * pool says -EAGAIN; freeing a busy pool is clean; the threads' contexts
 * turn images by their EXIF orientation exactly when the pool was made to. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "decode/decode.h"
#include "decode/pool.h"
#include "jpeg_build.h"
#include "unit.h"

static uint8_t *pool_jpeg(int w, int h, size_t *len) {
        uint8_t *img = malloc((size_t)w * h * 3);

        for (int i = 0; i < w * h * 3; i++)
                img[i] = (uint8_t)(i * 7);
        return jpeg_build(img, w, h, TJSAMP_420, 85, len);
}

static void test_decode_pool_round_trip(void) {
        enum { N = 24 };
        static uint8_t outs[N][224 * 224 * 3];
        static const uint8_t garbage[64] = { 0xff, 0xd8, 0xff, 0x01, 0x02 };
        decode_job_t jobs[N];
        decode_pool_t *p = NULL;
        int seen[N] = { 0 }, reaped = 0, good = 0, bad = 0;
        size_t len;
        uint8_t *jpeg = pool_jpeg(320, 240, &len);
        errbuf_t err;

        CU_ASSERT_EQUAL_FATAL(decode_pool_new(&p, 2, 1000000, 1 << 20, false, false, N, &err), 0);
        CU_ASSERT(decode_pool_fd(p) >= 0);
        CU_ASSERT_PTR_NULL(decode_pool_reap(p));
        for (int i = 0; i < N; i++) {
                jobs[i] = (decode_job_t){ .data = i % 3 == 2 ? (const void *)garbage : jpeg,
                                          .len = i % 3 == 2 ? sizeof(garbage) : len,
                                          .format = RECORD_JPEG, .out = outs[i], .userdata = &seen[i] };
                memset(outs[i], 0, sizeof(outs[i]));
                CU_ASSERT_EQUAL(decode_pool_submit(p, &jobs[i]), 0);
        }
        CU_ASSERT_TRUE(decode_pool_full(p));
        CU_ASSERT_EQUAL(decode_pool_submit(p, &jobs[0]), -EAGAIN);
        while (reaped < N) {
                struct pollfd pfd = { .fd = decode_pool_fd(p), .events = POLLIN };
                decode_job_t *j;

                CU_ASSERT_FATAL(poll(&pfd, 1, 30000) == 1);
                while ((j = decode_pool_reap(p))) {
                        int i = (int)(j - jobs);

                        CU_ASSERT(j->userdata == &seen[i]);
                        seen[i]++;
                        reaped++;
                        if (i % 3 == 2) {
                                bad++;
                                CU_ASSERT_EQUAL(j->r, -EINVAL);
                                CU_ASSERT(j->code && strcmp(j->code, RECORD_ERR_DECODE_FAILED) == 0);
                                CU_ASSERT(strncmp(j->err.msg, "JPEG: ", 6) == 0);
                        } else {
                                good++;
                                CU_ASSERT_EQUAL(j->r, 0);
                        }
                }
        }
        /* Jobs finish in any order, so the outputs are compared only once all
         * are in: every good one equals job 0's, which is not all zeros. */
        {
                static const uint8_t zero[224 * 224 * 3];

                CU_ASSERT(memcmp(outs[0], zero, sizeof(zero)) != 0);
                for (int i = 1; i < N; i++)
                        if (i % 3 != 2)
                                CU_ASSERT(memcmp(outs[i], outs[0], sizeof(outs[0])) == 0);
        }
        for (int i = 0; i < N; i++)
                CU_ASSERT_EQUAL(seen[i], 1);
        CU_ASSERT_EQUAL(good, 16);
        CU_ASSERT_EQUAL(bad, 8);
        CU_ASSERT_EQUAL(decode_pool_pending(p), 0);
        /* The fd is quiet once everything is reaped. */
        {
                struct pollfd pfd = { .fd = decode_pool_fd(p), .events = POLLIN };

                CU_ASSERT_EQUAL(poll(&pfd, 1, 0), 0);
        }
        /* A busy pool frees cleanly: queued jobs are dropped. */
        for (int i = 0; i < N; i++)
                CU_ASSERT_EQUAL(decode_pool_submit(p, &jobs[i % 3 == 2 ? 0 : i]), 0);
        decode_pool_free(p);
        free(jpeg);
}

/* One job through a pool made with exif_orientation as given; its output. */
static void pool_decode_one(bool exif, const uint8_t *data, size_t len, uint8_t *out) {
        decode_job_t job = { .data = data, .len = len, .format = RECORD_JPEG, .out = out };
        struct pollfd pfd;
        decode_pool_t *p = NULL;
        errbuf_t err;

        CU_ASSERT_EQUAL_FATAL(decode_pool_new(&p, 1, 1000000, 1 << 20, false, exif, 1, &err), 0);
        CU_ASSERT_EQUAL(decode_pool_submit(p, &job), 0);
        pfd = (struct pollfd){ .fd = decode_pool_fd(p), .events = POLLIN };
        CU_ASSERT_FATAL(poll(&pfd, 1, 30000) == 1);
        CU_ASSERT(decode_pool_reap(p) == &job);
        CU_ASSERT_EQUAL(job.r, 0);
        decode_pool_free(p);
}

static void test_decode_pool_exif_orientation(void) {
        /* An APP1 "Exif" segment, big-endian TIFF, one entry: Orientation = 6. */
        static const uint8_t app1[] = { 0xff, 0xe1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                                        0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0 };
        static uint8_t pooled[2][224 * 224 * 3], direct[2][224 * 224 * 3];
        size_t len;
        uint8_t *jpeg = pool_jpeg(320, 240, &len), *tagged = malloc(len + sizeof(app1));
        const char *code;
        decode_t *d = NULL;
        errbuf_t err;

        memcpy(tagged, jpeg, 2);
        memcpy(tagged + 2, app1, sizeof(app1));
        memcpy(tagged + 2 + sizeof(app1), jpeg + 2, len - 2);
        len += sizeof(app1);
        CU_ASSERT_EQUAL_FATAL(decode_orientation(RECORD_JPEG, tagged, len), 6);
        CU_ASSERT_FATAL(decode_new(&d, 1000000, 1 << 20, false, &err) == 0);
        for (int exif = 0; exif <= 1; exif++) {
                decode_set_exif_orientation(d, exif);
                CU_ASSERT_EQUAL(decode_record(d, tagged, len, RECORD_JPEG, direct[exif], NULL, &code, &err), 0);
                pool_decode_one(exif, tagged, len, pooled[exif]);
                CU_ASSERT(memcmp(pooled[exif], direct[exif], sizeof(direct[exif])) == 0);
        }
        CU_ASSERT(memcmp(direct[0], direct[1], sizeof(direct[0])) != 0);
        decode_free(d);
        free(tagged);
        free(jpeg);
}

static void test_decode_pool_rejects_bad_arguments(void) {
        decode_pool_t *p = NULL;
        errbuf_t err;

        CU_ASSERT_EQUAL(decode_pool_new(&p, 0, 1000, 1000, false, false, 4, &err), -EINVAL);
        CU_ASSERT_EQUAL(decode_pool_new(&p, 1, 1000, 1000, false, false, 0, &err), -EINVAL);
        CU_ASSERT_EQUAL(decode_pool_new(&p, 1, 0, 1000, false, false, 4, &err), -EINVAL);
        decode_pool_free(NULL);
}

int test_decode_pool_register(void) {
        static CU_TestInfo tests[] = {
                { "round_trip", test_decode_pool_round_trip },
                { "rejects_bad_arguments", test_decode_pool_rejects_bad_arguments },
                { "exif_orientation", test_decode_pool_exif_orientation },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("decode_pool", tests);
}

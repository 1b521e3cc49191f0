/* Unit tests of log_: the level check comes before the arguments are
 * evaluated, plain lines carry the structured fields, and JOURNAL_STREAM is
 * matched against the fd's device and inode. Journald itself is exercised by
 * tests/systemd/run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "unit.h"

static int log_test_calls;

static int log_test_side_effect(void) {
        return ++log_test_calls;
}

static void test_log_level_check_skips_arguments(void) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        log_setup("blue", LOG_TARGET_STDERR);
        log_set_stream(f);
        log_set_level(LOG_INFO);
        log_test_calls = 0;
        log_debug("not shown %d", log_test_side_effect());
        CU_ASSERT_EQUAL(log_test_calls, 0);
        log_info("shown %d", log_test_side_effect());
        CU_ASSERT_EQUAL(log_test_calls, 1);
        fflush(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, "inferd[blue]: info: shown 1\n"));
        CU_ASSERT_PTR_NULL(strstr(buf, "not shown"));
        log_set_stream(NULL);
        fclose(f);
        free(buf);
}

static void test_log_plain_line_carries_fields(void) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        log_setup("green", LOG_TARGET_STDERR);
        log_set_stream(f);
        log_set_level(LOG_DEBUG);
        log_warning_f(((log_fields_t){ LOG_TOPIC("images"), LOG_PARTITION(2), LOG_OFFSET(41),
                                       LOG_ERROR_CODE("bad-size") }),
                      "Record refused: %s", "too short");
        fflush(f);
        CU_ASSERT_STRING_EQUAL(buf, "inferd[green]: warning: Record refused: too short topic=images partition=2 "
                                    "offset=41 error=bad-size\n");
        log_set_stream(NULL);
        log_set_level(LOG_INFO);
        fclose(f);
        free(buf);
}

static void test_log_journal_stream_matches_dev_and_inode(void) {
        char path[] = "/tmp/inferd-test-log-XXXXXX", env[64];
        struct stat st;
        int fd = mkstemp(path);
        const char *old = getenv("JOURNAL_STREAM");
        char *saved = old ? strdup(old) : NULL;

        CU_ASSERT_TRUE_FATAL(fd >= 0);
        CU_ASSERT_EQUAL_FATAL(fstat(fd, &st), 0);
        unsetenv("JOURNAL_STREAM");
        CU_ASSERT_FALSE(log_fd_is_journal_stream(fd));
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", env, 1);
        CU_ASSERT_TRUE(log_fd_is_journal_stream(fd));
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino + 1);
        setenv("JOURNAL_STREAM", env, 1);
        CU_ASSERT_FALSE(log_fd_is_journal_stream(fd));
        setenv("JOURNAL_STREAM", "garbage", 1);
        CU_ASSERT_FALSE(log_fd_is_journal_stream(fd));
        if (saved)
                setenv("JOURNAL_STREAM", saved, 1);
        else
                unsetenv("JOURNAL_STREAM");
        free(saved);
        close(fd);
        unlink(path);
}

int test_log_register(void) {
        static CU_TestInfo tests[] = {
                { "level_check_skips_arguments", test_log_level_check_skips_arguments },
                { "plain_line_carries_fields", test_log_plain_line_carries_fields },
                { "journal_stream_matches_dev_and_inode", test_log_journal_stream_matches_dev_and_inode },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("log", tests);
}

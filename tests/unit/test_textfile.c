/* Tests for textfile_read: a small file read whole, and everything that is
 * not one (a device, a FIFO, a directory, a file over the cap) refused with
 * one sentence before a byte is read. Each refusal here used to hang (FIFO,
 * /dev/zero) or read without bound in the config and labels loaders. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/labels.h"
#include "core/textfile.h"
#include "unit.h"

/* A fresh temporary directory's path (malloc'd). */
static char *textfile_tmpdir(void) {
        char *dir = strdup("/tmp/inferd-test-textfile.XXXXXX");

        CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
        return dir;
}

static void test_textfile_reads_whole(void) {
        char *dir = textfile_tmpdir(), path[256], *buf = NULL;
        errbuf_t err = { "" };
        size_t len = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/a.ini", dir);
        f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fwrite("ab\0cd\n", 1, 6, f);            /* a NUL inside is kept, counted in len */
        fclose(f);
        CU_ASSERT_EQUAL_FATAL(textfile_read(path, 6, "config file", &buf, &len, &err), 0);
        CU_ASSERT_EQUAL(len, 6);
        CU_ASSERT_EQUAL(memcmp(buf, "ab\0cd\n", 7), 0);        /* and a NUL after the last byte */
        free(buf);
        /* The cap is inclusive: 6 bytes pass a cap of 6 and fail one of 5. */
        buf = NULL;
        CU_ASSERT_EQUAL(textfile_read(path, 5, "config file", &buf, &len, &err), -EFBIG);
        CU_ASSERT_PTR_NULL(buf);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the config file is 6 bytes, more than the 5 allowed"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
        /* Only the checks, without reading. */
        CU_ASSERT_EQUAL(textfile_read(path, 6, "config file", NULL, NULL, &err), 0);
        unlink(path);
        rmdir(dir);
        free(dir);
}

static void test_textfile_refuses_non_regular(void) {
        char *dir = textfile_tmpdir(), path[256], *buf = NULL;
        errbuf_t err = { "" };
        size_t len = 0;
        int fd;

        CU_ASSERT_EQUAL(textfile_read("/dev/zero", TEXTFILE_MAX_BYTES, "config file", &buf, &len, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, "/dev/zero: the config file is a character device, not a regular file");
        CU_ASSERT_EQUAL(textfile_read(dir, TEXTFILE_MAX_BYTES, "labels file", &buf, &len, &err), -EISDIR);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the labels file is a directory, not a regular file"));
        /* A FIFO with no writer: open must not wait for one. */
        snprintf(path, sizeof(path), "%s/fifo", dir);
        CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
        CU_ASSERT_EQUAL(textfile_read(path, TEXTFILE_MAX_BYTES, "config file", &buf, &len, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the config file is a FIFO, not a regular file"));
        unlink(path);
        CU_ASSERT_EQUAL(textfile_read(path, TEXTFILE_MAX_BYTES, "config file", &buf, &len, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cannot open the config file: No such file or directory"));
        /* A sparse file one byte over 1 MiB: refused from its size alone. */
        snprintf(path, sizeof(path), "%s/big", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_EQUAL(ftruncate(fd, (off_t)TEXTFILE_MAX_BYTES + 1), 0);
        close(fd);
        CU_ASSERT_EQUAL(textfile_read(path, TEXTFILE_MAX_BYTES, "config file", &buf, &len, &err), -EFBIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "is 1048577 bytes, more than the 1048576 allowed"));
        CU_ASSERT_PTR_NULL(buf);
        unlink(path);
        rmdir(dir);
        free(dir);
}

/* The labels loader goes through it: /dev/zero is refused, not read forever. */
static void test_textfile_labels_refuse_devices(void) {
        errbuf_t err = { "" };
        labels_t *l = NULL;

        CU_ASSERT_EQUAL(labels_load(&l, "/dev/zero", 1000, &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, "/dev/zero: the labels file is a character device, not a regular file");
        CU_ASSERT_PTR_NULL(l);
        CU_ASSERT_EQUAL(labels_load(&l, "/dev/null", 1000, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(l);
}

int test_textfile_register(void) {
        static CU_TestInfo tests[] = {
                { "reads_whole", test_textfile_reads_whole },
                { "refuses_non_regular", test_textfile_refuses_non_regular },
                { "labels_refuse_devices", test_textfile_labels_refuse_devices },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("textfile", tests);
}

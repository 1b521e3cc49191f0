/* Unit tests of httpd_auth: a users file as htpasswd -nB writes it ($2y$
 * bcrypt) accepted with the right password only, the cache never accepting
 * a wrong one after a right one, and bad files refused naming the line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/httpd_auth.h"
#include "unit.h"

/* bcrypt of "correct horse" at cost 5 (libxcrypt's $2b$ written as htpasswd -nB -C 5 writes it, $2y$). */
#define HASH_2Y "$2y$05$3MCOVu7SLQ5R/7wZXFL1hO1jHhKDk3lGu2ZbaG6l03PL/2bbgyPwG"

static const char *write_file(const char *text) {
        static char path[64];
        FILE *f;
        int fd;

        snprintf(path, sizeof(path), "/tmp/inferd-test-users.XXXXXX");
        fd = mkstemp(path);
        CU_ASSERT_FATAL(fd >= 0);
        f = fdopen(fd, "w");
        fputs(text, f);
        fclose(f);
        return path;
}

static void test_httpd_auth_bcrypt(void) {
        httpd_auth_t *a = NULL;
        errbuf_t err = {};
        const char *p = write_file("# scrapers\n\nprometheus:" HASH_2Y "\nother:$2y$05$abcdefghijklmnopqrstuu\n");

        CU_ASSERT_EQUAL_FATAL(httpd_auth_load(&a, p, &err), 0);
        unlink(p);
        CU_ASSERT_EQUAL(httpd_auth_users(a), 2);
        CU_ASSERT_TRUE(httpd_auth_check(a, "prometheus", "correct horse"));
        /* After a success is cached, a wrong password is still refused. */
        CU_ASSERT_FALSE(httpd_auth_check(a, "prometheus", "correct horsf"));
        CU_ASSERT_FALSE(httpd_auth_check(a, "prometheus", "correct horse "));
        CU_ASSERT_FALSE(httpd_auth_check(a, "prometheus", ""));
        CU_ASSERT_TRUE(httpd_auth_check(a, "prometheus", "correct horse"));
        /* The right password under another user, or an unknown user. */
        CU_ASSERT_FALSE(httpd_auth_check(a, "other", "correct horse"));
        CU_ASSERT_FALSE(httpd_auth_check(a, "nobody", "correct horse"));
        httpd_auth_free(a);
}

static void test_httpd_auth_bad_files(void) {
        httpd_auth_t *a = NULL;
        errbuf_t err = {};
        const char *p;

        p = write_file("prometheus:" HASH_2Y "\nno colon here\n");
        CU_ASSERT_EQUAL(httpd_auth_load(&a, p, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, ": line 2: not user:hash"));
        unlink(p);
        p = write_file("prometheus:plaintext-password\n");
        CU_ASSERT_EQUAL(httpd_auth_load(&a, p, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "line 1: user 'prometheus': the hash is not a crypt(3) hash"));
        CU_ASSERT_PTR_NULL(strstr(err.msg, "plaintext-password"));
        unlink(p);
        p = write_file("# nobody\n");
        CU_ASSERT_EQUAL(httpd_auth_load(&a, p, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "no user:hash line"));
        unlink(p);
        CU_ASSERT_EQUAL(httpd_auth_load(&a, "/nonexistent/users", &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/users: cannot open the basic auth users file"));
        CU_ASSERT_PTR_NULL(a);
}

int test_httpd_auth_register(void) {
        static CU_TestInfo tests[] = {
                { "bcrypt", test_httpd_auth_bcrypt },
                { "bad_files", test_httpd_auth_bad_files },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("httpd_auth", tests);
}

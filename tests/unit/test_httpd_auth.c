/* Unit tests of httpd_auth: a users file as htpasswd -nB writes it ($2y$
 * bcrypt) accepted with the right password only, the cache never accepting
 * a wrong one after a right one, and bad files refused naming the line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crypt.h>
#include <systemd/sd-event.h>
#include <time.h>

#include "http/httpd_auth.h"
#include "http/httpd_authq.h"
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

static double seconds_now(void) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *x, const void *y) {
        double a = *(const double *)x, b = *(const double *)y;

        return (a > b) - (a < b);
}

/* An unknown user costs a full hash, as a known user's wrong password does:
 * the medians of 9 interleaved checks each within 30% (at bcrypt cost 8,
 * ~10 ms a hash; the old code answered an unknown user in microseconds). */
static void test_httpd_auth_unknown_user_same_cost(void) {
        httpd_auth_t *a = NULL;
        errbuf_t err = {};
        char line[256], *setting = crypt_gensalt_ra("$2b$", 8, NULL, 0);
        struct crypt_data *cd = calloc(1, sizeof(*cd));
        double known[9], unknown[9], t;
        const char *p, *h;

        CU_ASSERT_PTR_NOT_NULL_FATAL(setting);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cd);
        h = crypt_r("right", setting, cd);
        CU_ASSERT_FATAL(h && *h == '$');
        snprintf(line, sizeof(line), "prometheus:%s\n", h);
        p = write_file(line);
        CU_ASSERT_EQUAL_FATAL(httpd_auth_load(&a, p, &err), 0);
        unlink(p);
        for (int i = 0; i < 9; i++) {
                t = seconds_now();
                CU_ASSERT_FALSE(httpd_auth_verify(a, "prometheus", "wrong"));
                known[i] = seconds_now() - t;
                t = seconds_now();
                CU_ASSERT_FALSE(httpd_auth_verify(a, "nobody", "right"));
                unknown[i] = seconds_now() - t;
        }
        qsort(known, 9, sizeof(double), cmp_double);
        qsort(unknown, 9, sizeof(double), cmp_double);
        CU_ASSERT(unknown[4] > 0.7 * known[4] && unknown[4] < 1.3 * known[4]);
        if (!(unknown[4] > 0.7 * known[4] && unknown[4] < 1.3 * known[4]))
                fprintf(stderr, "median known %.2f ms, unknown %.2f ms\n", known[4] * 1e3, unknown[4] * 1e3);
        /* The right password still passes, and is remembered only when asked. */
        CU_ASSERT_TRUE(httpd_auth_verify(a, "prometheus", "right"));
        CU_ASSERT_FALSE(httpd_auth_cached(a, "prometheus", "right"));
        httpd_auth_remember(a, "prometheus", "right");
        CU_ASSERT_TRUE(httpd_auth_cached(a, "prometheus", "right"));
        CU_ASSERT_FALSE(httpd_auth_cached(a, "prometheus", "righT"));
        httpd_auth_free(a);
        free(cd);
        free(setting);
}

typedef struct answers {
        int n, ok;
        bool got[4], val[4];
} answers_t;

static void on_answer(void *userdata, void *cookie, bool ok, const char *user) {
        answers_t *an = userdata;
        int i = (int)(intptr_t)cookie;

        (void)user;
        an->n++;
        an->got[i] = true;
        an->val[i] = ok;
}

/* The worker: answers come through the loop's eventfd, each for its
 * cookie; a right password is remembered on the way; a full queue says
 * -EBUSY; freeing it with checks queued drops them. */
static void test_httpd_auth_worker(void) {
        httpd_auth_t *a = NULL;
        httpd_authq_t *q = NULL;
        sd_event *e = NULL;
        errbuf_t err = {};
        answers_t an = {};
        const char *p = write_file("prometheus:" HASH_2Y "\n");

        CU_ASSERT_EQUAL_FATAL(httpd_auth_load(&a, p, &err), 0);
        unlink(p);
        CU_ASSERT_EQUAL_FATAL(sd_event_new(&e), 0);
        CU_ASSERT_EQUAL_FATAL(httpd_authq_new(&q, a, e, 3, on_answer, &an), 0);
        CU_ASSERT_EQUAL(httpd_authq_submit(q, "prometheus", "correct horse", (void *)(intptr_t)0), 0);
        CU_ASSERT_EQUAL(httpd_authq_submit(q, "prometheus", "wrong", (void *)(intptr_t)1), 0);
        CU_ASSERT_EQUAL(httpd_authq_submit(q, "nobody", "correct horse", (void *)(intptr_t)2), 0);
        CU_ASSERT_EQUAL(httpd_authq_submit(q, "prometheus", "correct horse", (void *)(intptr_t)3), -EBUSY);
        CU_ASSERT_EQUAL(httpd_authq_pending(q), 3);
        for (int i = 0; i < 100 && an.n < 3; i++)
                sd_event_run(e, 100 * 1000);
        CU_ASSERT_EQUAL(an.n, 3);
        CU_ASSERT_TRUE(an.got[0] && an.val[0]);
        CU_ASSERT_TRUE(an.got[1] && !an.val[1]);
        CU_ASSERT_TRUE(an.got[2] && !an.val[2]);
        CU_ASSERT_FALSE(an.got[3]);
        CU_ASSERT_EQUAL(httpd_authq_pending(q), 0);
        CU_ASSERT_TRUE(httpd_auth_cached(a, "prometheus", "correct horse"));
        /* Freed with checks queued: none is answered after. */
        for (int i = 0; i < 3; i++)
                httpd_authq_submit(q, "prometheus", "wrong", (void *)(intptr_t)1);
        httpd_authq_free(q);
        CU_ASSERT_EQUAL(an.n, 3);
        sd_event_unref(e);
        httpd_auth_free(a);
}

int test_httpd_auth_register(void) {
        static CU_TestInfo tests[] = {
                { "bcrypt", test_httpd_auth_bcrypt },
                { "bad_files", test_httpd_auth_bad_files },
                { "unknown_user_same_cost", test_httpd_auth_unknown_user_same_cost },
                { "worker", test_httpd_auth_worker },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("httpd_auth", tests);
}

/* Unit tests of httpd_limit: the token bucket's rate and burst, the failed
 * logins' free count and doubling back-off with its cap, a success that
 * forgets them, failures forgotten after a quiet while, addresses keyed as
 * the header says (IPv4 whole, IPv6 by /64), and a flood of new keys that
 * cannot evict a key under back-off. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "http/httpd_limit.h"
#include "unit.h"

#define S (1000 * 1000ULL)

static void test_httpd_limit_bucket(void) {
        httpd_limit_t *l = NULL;
        uint64_t k, t = 1000 * S;
        int taken = 0;

        CU_ASSERT_EQUAL_FATAL(httpd_limit_new(&l, 64), 0);
        k = httpd_limit_key_name(l, "a");
        /* A full bucket of 4 at first, then nothing until it refills. */
        for (int i = 0; i < 10; i++)
                taken += httpd_limit_take(l, k, 2, 4, t);
        CU_ASSERT_EQUAL(taken, 4);
        CU_ASSERT_FALSE(httpd_limit_take(l, k, 2, 4, t + S / 4));
        /* 2 a second: one token after half a second. */
        CU_ASSERT_TRUE(httpd_limit_take(l, k, 2, 4, t + S / 2 + 1000));
        CU_ASSERT_FALSE(httpd_limit_take(l, k, 2, 4, t + S / 2 + 2000));
        /* Another key has its own bucket; rate 0 is no limit. */
        CU_ASSERT_TRUE(httpd_limit_take(l, httpd_limit_key_name(l, "b"), 2, 4, t));
        CU_ASSERT_TRUE(httpd_limit_take(l, k, 0, 0, t));
        /* A long quiet while refills up to the burst, not past it. */
        taken = 0;
        for (int i = 0; i < 10; i++)
                taken += httpd_limit_take(l, k, 2, 4, t + 100 * S);
        CU_ASSERT_EQUAL(taken, 4);
        httpd_limit_free(l);
}

static void test_httpd_limit_backoff(void) {
        const httpd_backoff_t b = { .free_failures = 3, .backoff_us = S, .max_backoff_us = 8 * S, .forget_us = 600 * S };
        httpd_limit_t *l = NULL;
        uint64_t k, t = 1000 * S;

        CU_ASSERT_EQUAL_FATAL(httpd_limit_new(&l, 64), 0);
        k = httpd_limit_key_name(l, "prometheus");
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, k, &b, t), 0);
        /* Three free failures. */
        for (int i = 0; i < 3; i++)
                CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t), 0);
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, k, &b, t), 0);
        /* Then 1 s, 2 s, 4 s, 8 s, and 8 s again (the cap). */
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t), S);
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, k, &b, t + S / 4), 3 * S / 4);
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, k, &b, t + S), 0);
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + S), 2 * S);
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 3 * S), 4 * S);
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 7 * S), 8 * S);
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 15 * S), 8 * S);
        /* Another user is not held back. */
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, httpd_limit_key_name(l, "other"), &b, t + 15 * S), 0);
        /* A success forgets the failures: three free again. */
        httpd_limit_succeed(l, k);
        CU_ASSERT_EQUAL(httpd_limit_blocked_us(l, k, &b, t + 15 * S), 0);
        for (int i = 0; i < 3; i++)
                CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 16 * S), 0);
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 16 * S), S);
        /* Quiet for forget_us: forgotten. */
        CU_ASSERT_EQUAL(httpd_limit_fail(l, k, &b, t + 700 * S), 0);
        httpd_limit_free(l);
}

static void test_httpd_limit_addresses(void) {
        struct sockaddr_in a4 = { .sin_family = AF_INET }, b4 = a4;
        struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 }, b6 = a6, c6 = a6, m6 = a6;
        httpd_limit_t *l = NULL;

        CU_ASSERT_EQUAL_FATAL(httpd_limit_new(&l, 64), 0);
        inet_pton(AF_INET, "127.0.0.2", &a4.sin_addr);
        inet_pton(AF_INET, "127.0.0.3", &b4.sin_addr);
        inet_pton(AF_INET6, "2001:db8:1:2::1", &a6.sin6_addr);
        inet_pton(AF_INET6, "2001:db8:1:2::ffff", &b6.sin6_addr);
        inet_pton(AF_INET6, "2001:db8:1:3::1", &c6.sin6_addr);
        inet_pton(AF_INET6, "::ffff:127.0.0.2", &m6.sin6_addr);
        a4.sin_port = htons(1);
        CU_ASSERT_NOT_EQUAL(httpd_limit_key_addr(l, (struct sockaddr *)&a4),
                            httpd_limit_key_addr(l, (struct sockaddr *)&b4));
        /* The port is not part of it. */
        b4.sin_addr = a4.sin_addr;
        CU_ASSERT_EQUAL(httpd_limit_key_addr(l, (struct sockaddr *)&a4), httpd_limit_key_addr(l, (struct sockaddr *)&b4));
        /* One /64 is one key; another /64 another; a v4-mapped address its v4 one. */
        CU_ASSERT_EQUAL(httpd_limit_key_addr(l, (struct sockaddr *)&a6), httpd_limit_key_addr(l, (struct sockaddr *)&b6));
        CU_ASSERT_NOT_EQUAL(httpd_limit_key_addr(l, (struct sockaddr *)&a6),
                            httpd_limit_key_addr(l, (struct sockaddr *)&c6));
        CU_ASSERT_EQUAL(httpd_limit_key_addr(l, (struct sockaddr *)&m6), httpd_limit_key_addr(l, (struct sockaddr *)&a4));
        /* A user name and an address never share a key. */
        CU_ASSERT_NOT_EQUAL(httpd_limit_key_name(l, "x"), httpd_limit_key_addr(l, (struct sockaddr *)&a4));
        httpd_limit_free(l);
}

static void test_httpd_limit_flood(void) {
        httpd_limit_t *l = NULL;
        uint64_t k, t = 1000 * S;
        char name[32];

        /* A small table: 16 slots. One key blocked, then 10,000 new keys. */
        CU_ASSERT_EQUAL_FATAL(httpd_limit_new(&l, 16), 0);
        k = httpd_limit_key_name(l, "victim");
        for (unsigned i = 0; i <= httpd_backoff_default.free_failures; i++)
                httpd_limit_fail(l, k, &httpd_backoff_default, t);
        CU_ASSERT_TRUE(httpd_limit_blocked_us(l, k, &httpd_backoff_default, t) > 0);
        for (int i = 0; i < 10000; i++) {
                snprintf(name, sizeof(name), "flood-%d", i);
                httpd_limit_take(l, httpd_limit_key_name(l, name), 1, 1, t + 1);
        }
        CU_ASSERT_TRUE(httpd_limit_blocked_us(l, k, &httpd_backoff_default, t + 2) > 0);
        httpd_limit_free(l);
}

int test_httpd_limit_register(void) {
        static CU_TestInfo tests[] = {
                { "bucket", test_httpd_limit_bucket },
                { "backoff", test_httpd_limit_backoff },
                { "addresses", test_httpd_limit_addresses },
                { "flood", test_httpd_limit_flood },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("httpd_limit", tests);
}

/* httpd_limit: what the metrics endpoint remembers about each client
 * address and each user name it has seen lately, to refuse the ones that
 * cost it too much: a token bucket (new connections, TLS handshakes a
 * second) and a count of failed logins with a back-off.
 *
 * A fixed table: a flood of new keys (addresses, made-up user names) evicts
 * the stalest entries and never grows memory. Keys are hashed with a seed
 * drawn at start, so a client cannot aim its keys at one bucket.
 *
 * Loop thread only (no lock). Times are CLOCK_MONOTONIC microseconds.
 *
 * Not here: what is refused and how it is answered (httpd.c). */
#ifndef INFERD_HTTPD_LIMIT_H
#define INFERD_HTTPD_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct httpd_limit httpd_limit_t;

/* How failed logins are held back: `free_failures` failures in a row are
 * let through, each further one blocks the key for backoff_us, doubled per
 * failure up to max_backoff_us. A key with no failure for forget_us starts
 * again from nothing. */
typedef struct httpd_backoff {
        unsigned free_failures;
        uint64_t backoff_us, max_backoff_us, forget_us;
} httpd_backoff_t;

/* The defaults: 5 free, then 1 s doubling up to 60 s, forgotten after 10 min. */
extern const httpd_backoff_t httpd_backoff_default;

/* A table of `capacity` keys (rounded up to a power of two). Returns 0 or
 * -ENOMEM. */
int httpd_limit_new(httpd_limit_t **ret, size_t capacity);
void httpd_limit_free(httpd_limit_t *l);

/* A key: an address (IPv4 whole, IPv6 by its /64, which one host gets) or
 * a user name. Returns the key's hash, for the calls below. */
uint64_t httpd_limit_key_addr(const httpd_limit_t *l, const struct sockaddr *sa);
uint64_t httpd_limit_key_name(const httpd_limit_t *l, const char *name);

/* Takes one token from key's bucket (rate_per_s a second, up to burst).
 * Returns true when there was one; false: over the rate. rate_per_s 0:
 * always true. */
bool httpd_limit_take(httpd_limit_t *l, uint64_t key, double rate_per_s, double burst, uint64_t now_us);

/* How long key is still held back after its failures: 0 when it is not. */
uint64_t httpd_limit_blocked_us(httpd_limit_t *l, uint64_t key, const httpd_backoff_t *b, uint64_t now_us);

/* Counts a failed login of key; returns how long it is now held back (0
 * while its failures are still free). */
uint64_t httpd_limit_fail(httpd_limit_t *l, uint64_t key, const httpd_backoff_t *b, uint64_t now_us);

/* A login of key succeeded: its failures are forgotten. */
void httpd_limit_succeed(httpd_limit_t *l, uint64_t key);

#endif

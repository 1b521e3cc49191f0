/* httpd_limit: per-address and per-user limits of the metrics endpoint.
 * See httpd_limit.h.
 *
 * Open addressing over a power-of-two table, looking at most
 * HTTPD_LIMIT_PROBE slots from a key's home: a key not found there takes
 * a free slot, or else the slot least recently used that holds no back-off
 * (so that a flood of new keys evicts the quiet ones before the blocked). */
#include "http/httpd_limit.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define HTTPD_LIMIT_PROBE 8

const httpd_backoff_t httpd_backoff_default = {
        .free_failures = 5,
        .backoff_us = 1000 * 1000ULL,
        .max_backoff_us = 60 * 1000 * 1000ULL,
        .forget_us = 600 * 1000 * 1000ULL,
};

typedef struct httpd_limit_entry {
        uint64_t key;                   /* 0: free */
        uint64_t last_us;               /* last touched, for eviction */
        double tokens;                  /* the bucket */
        uint64_t bucket_us;             /* when tokens was last filled */
        unsigned failures;              /* in a row, since the last success */
        uint64_t last_fail_us;
        uint64_t blocked_until_us;
} httpd_limit_entry_t;

struct httpd_limit {
        httpd_limit_entry_t *e;         /* owned, mask + 1 */
        size_t mask;
        uint64_t seed;
};

int httpd_limit_new(httpd_limit_t **ret, size_t capacity) {
        httpd_limit_t *l = calloc(1, sizeof(*l));
        size_t n = HTTPD_LIMIT_PROBE;

        if (!l)
                return -ENOMEM;
        while (n < capacity)
                n <<= 1;
        l->e = calloc(n, sizeof(*l->e));
        if (!l->e) {
                free(l);
                return -ENOMEM;
        }
        l->mask = n - 1;
        /* Unpredictable, so that no client can pick keys that collide; a
         * failed getrandom only makes collisions guessable. */
        if (getrandom(&l->seed, sizeof(l->seed), GRND_NONBLOCK) != sizeof(l->seed))
                l->seed = (uint64_t)(uintptr_t)l ^ 0x9e3779b97f4a7c15ULL;
        *ret = l;
        return 0;
}

void httpd_limit_free(httpd_limit_t *l) {
        if (!l)
                return;
        free(l->e);
        free(l);
}

/* FNV-1a over the seed and the bytes, then a final mix; never 0 (free). */
static uint64_t httpd_limit_hash(const httpd_limit_t *l, unsigned char kind, const void *p, size_t n) {
        const unsigned char *b = p;
        uint64_t h = 0xcbf29ce484222325ULL ^ l->seed;

        h = (h ^ kind) * 0x100000001b3ULL;
        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 0x100000001b3ULL;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        return h ? h : 1;
}

uint64_t httpd_limit_key_addr(const httpd_limit_t *l, const struct sockaddr *sa) {
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

                return httpd_limit_hash(l, 4, &in->sin_addr, sizeof(in->sin_addr));
        }
        if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

                /* A v4-mapped address is its IPv4 one; others by their /64. */
                if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
                        return httpd_limit_hash(l, 4, &in6->sin6_addr.s6_addr[12], 4);
                return httpd_limit_hash(l, 6, &in6->sin6_addr, 8);
        }
        return httpd_limit_hash(l, 0, NULL, 0);
}

uint64_t httpd_limit_key_name(const httpd_limit_t *l, const char *name) {
        return httpd_limit_hash(l, 'u', name, strlen(name));
}

/* Whether e should be evicted before v: one with no back-off running before
 * one held back, then the least recently used. */
static bool httpd_limit_before(const httpd_limit_entry_t *e, const httpd_limit_entry_t *v, uint64_t now_us) {
        bool eb = e->blocked_until_us > now_us, vb = v->blocked_until_us > now_us;

        return eb != vb ? !eb : e->last_us < v->last_us;
}

/* key's entry, made (and an old one evicted) when it has none. */
static httpd_limit_entry_t *httpd_limit_get(httpd_limit_t *l, uint64_t key, uint64_t now_us) {
        httpd_limit_entry_t *free_slot = NULL, *victim = NULL;

        for (size_t i = 0; i < HTTPD_LIMIT_PROBE; i++) {
                httpd_limit_entry_t *e = &l->e[(key + i) & l->mask];

                if (e->key == key) {
                        e->last_us = now_us;
                        return e;
                }
                if (!e->key && !free_slot)
                        free_slot = e;
                else if (e->key && (!victim || httpd_limit_before(e, victim, now_us)))
                        victim = e;
        }
        if (free_slot)
                victim = free_slot;
        *victim = (httpd_limit_entry_t){ .key = key, .last_us = now_us, .tokens = -1 };
        return victim;
}

bool httpd_limit_take(httpd_limit_t *l, uint64_t key, double rate_per_s, double burst, uint64_t now_us) {
        httpd_limit_entry_t *e;

        if (rate_per_s <= 0)
                return true;
        if (burst < 1)
                burst = 1;
        e = httpd_limit_get(l, key, now_us);
        if (e->tokens < 0) {
                e->tokens = burst;      /* new: a full bucket */
        } else if (now_us > e->bucket_us) {
                e->tokens += (double)(now_us - e->bucket_us) * rate_per_s / 1e6;
                if (e->tokens > burst)
                        e->tokens = burst;
        }
        e->bucket_us = now_us;
        if (e->tokens < 1)
                return false;
        e->tokens -= 1;
        return true;
}

/* Forgets failures older than b->forget_us. */
static void httpd_limit_age(httpd_limit_entry_t *e, const httpd_backoff_t *b, uint64_t now_us) {
        if (e->failures && now_us > e->last_fail_us + b->forget_us && now_us >= e->blocked_until_us) {
                e->failures = 0;
                e->blocked_until_us = 0;
        }
}

uint64_t httpd_limit_blocked_us(httpd_limit_t *l, uint64_t key, const httpd_backoff_t *b, uint64_t now_us) {
        for (size_t i = 0; i < HTTPD_LIMIT_PROBE; i++) {
                httpd_limit_entry_t *e = &l->e[(key + i) & l->mask];

                if (e->key != key)
                        continue;
                httpd_limit_age(e, b, now_us);
                return e->blocked_until_us > now_us ? e->blocked_until_us - now_us : 0;
        }
        return 0;       /* never seen: nothing to hold against it */
}

uint64_t httpd_limit_fail(httpd_limit_t *l, uint64_t key, const httpd_backoff_t *b, uint64_t now_us) {
        httpd_limit_entry_t *e = httpd_limit_get(l, key, now_us);
        uint64_t hold;
        unsigned over;

        httpd_limit_age(e, b, now_us);
        e->failures++;
        e->last_fail_us = now_us;
        if (e->failures <= b->free_failures)
                return 0;
        over = e->failures - b->free_failures - 1;
        hold = b->backoff_us;
        while (over-- && hold < b->max_backoff_us)
                hold <<= 1;
        if (hold > b->max_backoff_us)
                hold = b->max_backoff_us;
        e->blocked_until_us = now_us + hold;
        return hold;
}

void httpd_limit_succeed(httpd_limit_t *l, uint64_t key) {
        for (size_t i = 0; i < HTTPD_LIMIT_PROBE; i++) {
                httpd_limit_entry_t *e = &l->e[(key + i) & l->mask];

                if (e->key == key) {
                        e->failures = 0;
                        e->blocked_until_us = 0;
                        return;
                }
        }
}

/* ratelimit: the token bucket of [batching] max_images_per_s.
 *
 * Tokens are images. The bucket fills at rate_per_s up to depth (about one
 * batch), and a batch of n may go when n tokens are there (or depth, for a
 * batch larger than the bucket). So over any interval of T seconds at most
 * rate_per_s * T + depth images go: the achieved rate stays under the cap
 * plus one batch, and a full bucket after an idle spell lets one batch go at
 * once, no more.
 *
 * A plain value with no clock, timer or thread of its own: the caller passes
 * the time (the pipeline's loop clock, pipeline_now_us) and arms its own
 * timer at ratelimit_ready_us. Tokens are kept in millionths, so refilling
 * at any rate loses nothing to rounding. Rate 0 is no cap: every take
 * succeeds at once. */
#ifndef INFERD_RATELIMIT_H
#define INFERD_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ratelimit {
        int64_t rate_per_s;     /* images a second; 0 = no cap */
        int64_t depth_u;        /* the bucket's size, in millionths of an image */
        int64_t tokens_u;       /* millionths of an image; below 0 after a forced charge */
        uint64_t last_us;       /* when tokens_u was last brought up to date */
} ratelimit_t;

/* (Re)sets the cap: rate_per_s images a second (0 = none), a bucket of
 * depth images (>= 1). The tokens already there are kept, down to the new
 * depth; a cap set where there was none starts with a full bucket. */
void ratelimit_set(ratelimit_t *rl, int rate_per_s, int depth, uint64_t now_us);

bool ratelimit_enabled(const ratelimit_t *rl);

/* Takes n tokens if they are there (n above the depth needs a full bucket,
 * and leaves it in debt). Returns 0, or -EAGAIN with nothing taken: try
 * again at ratelimit_ready_us. Always 0 without a cap. */
int ratelimit_take(ratelimit_t *rl, int n, uint64_t now_us);

/* Takes n tokens whether or not they are there: the bucket may go into
 * debt, which later takes wait off. For a batch that must go now (a drain,
 * a revoke, the exactly-once commit point), still counted against the cap. */
void ratelimit_charge(ratelimit_t *rl, int n, uint64_t now_us);

/* When ratelimit_take(n) will succeed: now_us or later. */
uint64_t ratelimit_ready_us(ratelimit_t *rl, int n, uint64_t now_us);

#endif

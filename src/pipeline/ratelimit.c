/* ratelimit: the token bucket of [batching] max_images_per_s. See
 * ratelimit.h. Integer arithmetic in millionths of an image: dt_us * rate
 * is exactly the millionths earned in dt_us. */
#include "pipeline/ratelimit.h"

#include <assert.h>
#include <errno.h>

#define RATELIMIT_UNIT 1000000LL       /* millionths in one image */

/* Brings the tokens up to now_us. The product dt * rate is formed only
 * below what fills the bucket, so it cannot overflow however long the
 * bucket sat. */
static void ratelimit_refill(ratelimit_t *rl, uint64_t now_us) {
        int64_t missing;
        uint64_t dt;

        if (now_us <= rl->last_us)
                return;
        dt = now_us - rl->last_us;
        rl->last_us = now_us;
        missing = rl->depth_u - rl->tokens_u;
        if (missing <= 0)
                return;
        if (dt >= (uint64_t)(missing / rl->rate_per_s) + 1)
                rl->tokens_u = rl->depth_u;
        else
                rl->tokens_u += (int64_t)dt * rl->rate_per_s;
        if (rl->tokens_u > rl->depth_u)
                rl->tokens_u = rl->depth_u;
}

/* What a batch of n waits for: n images, or a full bucket when n is more
 * than it holds (a batch limit raised above the depth). */
static int64_t ratelimit_need_u(const ratelimit_t *rl, int n) {
        int64_t need = (int64_t)n * RATELIMIT_UNIT;

        return need < rl->depth_u ? need : rl->depth_u;
}

void ratelimit_set(ratelimit_t *rl, int rate_per_s, int depth, uint64_t now_us) {
        assert(rate_per_s >= 0 && depth >= 1);
        if (rate_per_s == 0) {
                *rl = (ratelimit_t){};
                return;
        }
        if (rl->rate_per_s == 0) {
                rl->tokens_u = (int64_t)depth * RATELIMIT_UNIT;
                rl->last_us = now_us;
        } else
                ratelimit_refill(rl, now_us);  /* what was earned at the old rate */
        rl->rate_per_s = rate_per_s;
        rl->depth_u = (int64_t)depth * RATELIMIT_UNIT;
        if (rl->tokens_u > rl->depth_u)
                rl->tokens_u = rl->depth_u;
}

bool ratelimit_enabled(const ratelimit_t *rl) {
        return rl->rate_per_s > 0;
}

int ratelimit_take(ratelimit_t *rl, int n, uint64_t now_us) {
        assert(n >= 0);
        if (!ratelimit_enabled(rl))
                return 0;
        ratelimit_refill(rl, now_us);
        if (rl->tokens_u < ratelimit_need_u(rl, n))
                return -EAGAIN;
        rl->tokens_u -= (int64_t)n * RATELIMIT_UNIT;
        return 0;
}

void ratelimit_charge(ratelimit_t *rl, int n, uint64_t now_us) {
        assert(n >= 0);
        if (!ratelimit_enabled(rl))
                return;
        ratelimit_refill(rl, now_us);
        rl->tokens_u -= (int64_t)n * RATELIMIT_UNIT;
}

uint64_t ratelimit_ready_us(ratelimit_t *rl, int n, uint64_t now_us) {
        int64_t short_u;

        if (!ratelimit_enabled(rl))
                return now_us;
        ratelimit_refill(rl, now_us);
        short_u = ratelimit_need_u(rl, n) - rl->tokens_u;
        if (short_u <= 0)
                return now_us;
        /* Rounded up: at that time the tokens are there. */
        return now_us + (uint64_t)((short_u + rl->rate_per_s - 1) / rl->rate_per_s);
}

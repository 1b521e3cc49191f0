/* daemon_plan: the pure functions of a config: the engine options it gives
 * (at start, for a swap's plan, for inferd --plan), the host budget's check
 * that needs no engine (--check-config), and the plan without weights or
 * Kafka (inferd --plan). They read the config and nothing else of the
 * daemon: no daemon_t.
 *
 * Not here: the plan's rules (core/plan.c, the engine's terms). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "daemon/daemon_model.h"
#include "daemon/daemon_priv.h"
#include "core/plan.h"
#include "decode/decode.h"

#define DAEMON_PIPELINE_DEPTH 2

/* The engine options a config gives (shared with inferd --plan). */
void daemon_engine_options(const cfg_t *c, engine_options_t *o, char *host_budget, size_t len) {
        engine_options_init(o);
        o->backend = c->engine.backend;
        /* The config's precision is CUDA's, but for bf16: the CPU engine
         * computes in fp32 (AUTO) for anything else, fp16 the default. */
        o->precision = c->engine.backend == BACKEND_CPU && c->model.precision != PRECISION_BF16 ? PRECISION_AUTO
                                                                                              : c->model.precision;
        o->device = c->engine.device;
        o->cpu_threads = c->engine.threads;
        o->device_budget = c->memory.gpu_budget;
        snprintf(host_budget, len, "%" PRIu64, c->memory.host_budget_bytes);
        o->host_budget = host_budget;
        o->max_batch = c->memory.max_batch;
        o->pipeline_depth = DAEMON_PIPELINE_DEPTH;
        o->top_k = c->service.top_k;
        /* [output] kind: the slots hold each record's embedding too. */
        o->embedding = c->output.kind != PREDICTION_KIND_CLASSES;
        /* [cache] entries: the pipeline's result cache, host memory. */
        o->cache_entries = c->cache.entries;
        /* The decode contexts are planned as the daemon makes them, from the
         * host budget (plan_decode_fit); librdkafka keeps at least its
         * floor of it. */
        o->decode_threads = c->decode.threads;
        o->decode_threads_auto = decode_default_threads();
        o->decode_max_pixels = (uint64_t)c->decode.max_pixels;
        o->decode_staged = true;
        o->host_reserve_bytes = kafka_limits_min_bytes(c);
        /* ... and more when the back-pressure hold needs it: its queue
         * holds the records left in it while the pipeline is full. */
        o->kafka_hold_us = PIPELINE_HOLD_MAX_US;
        o->kafka_hold_rate_per_s = c->batching.max_images_per_s;
        o->kafka_fetch_responses = kafka_fetch_responses(c);
        o->kafka_compression_ratio = c->kafka.max_compression_ratio;
}

void daemon_swap_engine_options(const cfg_t *next, int decode_threads, uint64_t decode_max_pixels,
                                engine_options_t *o, char *host_budget, size_t len) {
        daemon_engine_options(next, o, host_budget, len);
        /* Not next's [decode] threads and max_pixels (they need a restart),
         * nor the automatic rule on its budget: the contexts that exist. */
        o->decode_threads = decode_threads;
        o->decode_threads_auto = 0;
        o->decode_max_pixels = decode_threads > 0 ? decode_max_pixels : 0;
        o->decode_running = decode_threads > 0;
}

int daemon_check_host_budget(const cfg_t *c, errbuf_t *err) {
        plan_decode_terms_t t;
        plan_decode_limit_t limit;
        uint64_t per_thread;
        int n, r;

        r = plan_decode_terms((uint64_t)c->decode.max_pixels, 0, &t);
        if (r < 0)
                return errbuf_set(err, r, "[decode] max_pixels = %d cannot be planned", c->decode.max_pixels);
        per_thread = t.buffer_bytes + t.library_bytes;
        r = plan_decode_fit(c->memory.host_budget_bytes, kafka_limits_min_bytes(c), c->decode.threads,
                            decode_default_threads(), per_thread, &n, &limit);
        if (r < 0)
                return plan_decode_refuse(err, c->memory.host_budget_bytes, 0, 0, kafka_limits_min_bytes(c),
                                          c->decode.threads, (uint64_t)c->decode.max_pixels, per_thread);
        return 0;
}

int daemon_plan(const cfg_t *c, plan_t *ret, char *warning, size_t warning_len, errbuf_t *err) {
        engine_options_t o;
        model_t *m = NULL;
        char host[32];
        int r;

        char note[PATH_MAX + 96];

        daemon_engine_options(c, &o, host, sizeof(host));
        r = daemon_model_describe(c, &m, note, sizeof(note), err);
        if (r < 0)
                return r;
        r = daemon_model_check(c, m, NULL, err);
        if (r == 0)
                r = engine_plan(m, &o, ret, warning, warning_len, err);
        model_free(m);
        if (r == 0 && note[0] && warning && warning_len && !warning[0])
                snprintf(warning, warning_len, "%s", note);
        return r;
}

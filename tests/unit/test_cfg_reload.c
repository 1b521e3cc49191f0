/* Unit tests of the reload side of the cfg table: every row's reload class
 * (against a list written here, independently of the table), that every
 * LIVE row has an apply hook and every RESTART row none, and that applying
 * each LIVE key through cfg_apply calls the daemon's setter with the new
 * value and changes the running value; a setter's refusal keeps it; a SWAP
 * key is left to a swap and copied by cfg_copy_class.
 *
 * The setters here record what they are given instead of touching a
 * daemon. No file is left behind, no daemon or broker is started. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "config/cfg.h"
#include "config/cfg_table.h"
#include "decode/decode.h"
#include "unit.h"

/* Every key's class, as the design says: the ones that change live, the
 * ones a model swap takes, and the rest need a restart. */
static const struct {
        const char *section, *name;
        cfg_reload_t reload;
} want_class[] = {
        { "service", "instance", CFG_RELOAD_RESTART },
        { "service", "trace_headers", CFG_RELOAD_LIVE },
        { "service", "timing_header", CFG_RELOAD_LIVE },
        { "service", "log_level", CFG_RELOAD_LIVE },
        { "service", "top_k", CFG_RELOAD_LIVE },
        { "kafka", "brokers", CFG_RELOAD_RESTART },
        { "kafka", "group_id", CFG_RELOAD_RESTART },
        { "kafka", "input_topic", CFG_RELOAD_RESTART },
        { "kafka", "output_topic", CFG_RELOAD_RESTART },
        { "kafka", "dlq_topic", CFG_RELOAD_RESTART },
        { "kafka", "static_membership", CFG_RELOAD_RESTART },
        { "kafka", "delivery", CFG_RELOAD_RESTART },
        { "kafka", "transaction_max_ms", CFG_RELOAD_RESTART },
        { "kafka", "max_compression_ratio", CFG_RELOAD_RESTART },
        { "model", "weights", CFG_RELOAD_SWAP },
        { "model", "labels", CFG_RELOAD_SWAP },
        { "model", "precision", CFG_RELOAD_SWAP },
        { "engine", "backend", CFG_RELOAD_RESTART },
        { "engine", "device", CFG_RELOAD_RESTART },
        { "engine", "threads", CFG_RELOAD_RESTART },
        { "memory", "gpu_budget", CFG_RELOAD_SWAP },
        { "memory", "host_budget", CFG_RELOAD_SWAP },
        { "memory", "max_batch", CFG_RELOAD_LIVE },
        { "batching", "max_delay_ms", CFG_RELOAD_LIVE },
        { "batching", "max_images_per_s", CFG_RELOAD_LIVE },
        { "batching", "max_record_age", CFG_RELOAD_LIVE },
        { "batching", "max_record_age_action", CFG_RELOAD_LIVE },
        { "drain", "timeout_s", CFG_RELOAD_RESTART },
        { "metrics", "listen", CFG_RELOAD_RESTART },
        { "metrics", "tls_cert", CFG_RELOAD_RESTART },
        { "metrics", "tls_key", CFG_RELOAD_RESTART },
        { "metrics", "basic_auth_users", CFG_RELOAD_RESTART },
        { "metrics", "auth_healthz", CFG_RELOAD_RESTART },
        { "metrics", "max_connections", CFG_RELOAD_RESTART },
        { "metrics", "max_connections_per_ip", CFG_RELOAD_RESTART },
        { "metrics", "timeout_s", CFG_RELOAD_RESTART },
        { "metrics", "probes_listen", CFG_RELOAD_RESTART },
        { "metrics", "header_timeout_s", CFG_RELOAD_RESTART },
        { "metrics", "connections_per_ip_per_s", CFG_RELOAD_RESTART },
        { "metrics", "tls_handshakes_per_ip_per_s", CFG_RELOAD_RESTART },
        { "metrics", "tls_handshakes_per_s", CFG_RELOAD_RESTART },
        { "decode", "threads", CFG_RELOAD_RESTART },
        { "decode", "max_pixels", CFG_RELOAD_RESTART },
        { "decode", "max_bytes", CFG_RELOAD_RESTART },
        { "decode", "fast", CFG_RELOAD_RESTART },
        { "decode", "exif_orientation", CFG_RELOAD_RESTART },
        { "decode", "max_scan_megapixels", CFG_RELOAD_RESTART },
        /* The slots' embedding buffers are planned at start. */
        { "output", "kind", CFG_RELOAD_RESTART },
        { "output", "embedding_format", CFG_RELOAD_RESTART },
        { "output", "embedding_normalize", CFG_RELOAD_RESTART },
        { "cache", "entries", CFG_RELOAD_LIVE },
};
#define N_WANT (sizeof(want_class) / sizeof(want_class[0]))

/* What the recording setters were given. */
typedef struct recorder {
        int calls;
        const char *last;               /* the setter's name */
        int64_t value, value2;          /* its arguments */
        int refuse;                     /* a setter returns this when not 0 */
} recorder_t;

static int rec(recorder_t *r, const char *name, int64_t v, int64_t v2, errbuf_t *why) {
        r->calls++;
        r->last = name;
        r->value = v;
        r->value2 = v2;
        if (r->refuse)
                return errbuf_set(why, r->refuse, "refused by the test");
        return 0;
}

static int set_log_level(void *u, int p, errbuf_t *why) {
        return rec(u, "log_level", p, 0, why);
}

static int set_top_k(void *u, int k, errbuf_t *why) {
        return rec(u, "top_k", k, 0, why);
}

static int set_headers(void *u, bool trace, bool timing, errbuf_t *why) {
        return rec(u, "headers", trace, timing, why);
}

static int set_max_batch(void *u, int b, errbuf_t *why) {
        return rec(u, "max_batch", b, 0, why);
}

static int set_max_delay_ms(void *u, int ms, errbuf_t *why) {
        return rec(u, "max_delay_ms", ms, 0, why);
}

static int set_max_images_per_s(void *u, int n, errbuf_t *why) {
        return rec(u, "max_images_per_s", n, 0, why);
}

static int set_max_record_age(void *u, uint64_t ms, cfg_age_action_t a, errbuf_t *why) {
        return rec(u, "max_record_age", (int64_t)ms, a, why);
}

static int set_precision(void *u, precision_t p, errbuf_t *why) {
        return rec(u, "precision", p, 0, why);
}

static int set_cache_entries(void *u, int n, errbuf_t *why) {
        return rec(u, "cache_entries", n, 0, why);
}

static cfg_live_ops_t recording_ops(recorder_t *r) {
        return (cfg_live_ops_t){
                .userdata = r,
                .set_log_level = set_log_level,
                .set_top_k = set_top_k,
                .set_headers = set_headers,
                .set_max_batch = set_max_batch,
                .set_max_delay_ms = set_max_delay_ms,
                .set_max_images_per_s = set_max_images_per_s,
                .set_max_record_age = set_max_record_age,
                .set_precision = set_precision,
                .set_cache_entries = set_cache_entries,
        };
}

/* Loads "[model] weights" plus text from a temporary file. */
static cfg_t *load(const char *text) {
        char dir[] = "/tmp/inferd-test-cfg-reload.XXXXXX", path[128];
        errbuf_t err = {};
        cfg_t *c = NULL;
        FILE *f;

        if (!mkdtemp(dir))
                return NULL;
        snprintf(path, sizeof(path), "%s/inferd.ini", dir);
        f = fopen(path, "w");
        if (f) {
                fprintf(f, "[model]\nweights = /w.safetensors\n%s", text);
                fclose(f);
                if (cfg_load(&c, path, &err) < 0)
                        fprintf(stderr, "test_cfg_reload: %s\n", err.msg);
        }
        unlink(path);
        rmdir(dir);
        return c;
}

/* Every row has a class, the one written above; every key above is a row. */
static void test_cfg_reload_every_key_has_its_class(void) {
        CU_ASSERT_EQUAL(cfg_nkeys, N_WANT);
        for (size_t i = 0; i < cfg_nkeys; i++) {
                const cfg_key_t *k = &cfg_keys[i];
                bool found = false;

                for (size_t j = 0; j < N_WANT; j++)
                        if (!strcmp(want_class[j].section, k->section) && !strcmp(want_class[j].name, k->name)) {
                                found = true;
                                if (k->reload != want_class[j].reload)
                                        fprintf(stderr, "[%s] %s: reload %s, want %s\n", k->section, k->name,
                                                cfg_reload_name(k->reload), cfg_reload_name(want_class[j].reload));
                                CU_ASSERT_EQUAL(k->reload, want_class[j].reload);
                        }
                if (!found)
                        fprintf(stderr, "[%s] %s: a row this test does not know\n", k->section, k->name);
                CU_ASSERT_TRUE(found);
                /* LIVE rows have a hook, RESTART rows none (a SWAP row may). */
                if (k->reload == CFG_RELOAD_LIVE)
                        CU_ASSERT_PTR_NOT_NULL(k->apply);
                if (k->reload == CFG_RELOAD_RESTART)
                        CU_ASSERT_PTR_NULL(k->apply);
                CU_ASSERT_TRUE(k->size > 0);
        }
        for (size_t j = 0; j < N_WANT; j++)
                CU_ASSERT_PTR_NOT_NULL(cfg_find_key(want_class[j].section, want_class[j].name));
        CU_ASSERT_STRING_EQUAL(cfg_reload_name(CFG_RELOAD_LIVE), "live");
        CU_ASSERT_STRING_EQUAL(cfg_reload_name(CFG_RELOAD_SWAP), "swap");
        CU_ASSERT_STRING_EQUAL(cfg_reload_name(CFG_RELOAD_RESTART), "restart");
}

/* Each LIVE key, changed alone: its setter gets the new value, and the
 * running config takes it (cfg_diff finds nothing left). */
static void test_cfg_reload_each_live_key_applied(void) {
        static const struct {
                const char *section, *name, *text;      /* a value other than the default */
                const char *setter;
                int64_t value, value2;
        } live[] = {
                { "service", "log_level", "debug", "log_level", LOG_DEBUG, 0 },
                { "service", "top_k", "9", "top_k", 9, 0 },
                { "service", "trace_headers", "no", "headers", false, false },
                { "service", "timing_header", "yes", "headers", true, true },
                { "memory", "max_batch", "17", "max_batch", 17, 0 },
                { "batching", "max_delay_ms", "42", "max_delay_ms", 42, 0 },
                { "batching", "max_images_per_s", "300", "max_images_per_s", 300, 0 },
                { "batching", "max_record_age", "90s", "max_record_age", 90000, CFG_AGE_DLQ },
                { "batching", "max_record_age_action", "skip", "max_record_age", 0, CFG_AGE_SKIP },
                { "cache", "entries", "1000", "cache_entries", 1000, 0 },
        };
        size_t nlive = 0;

        for (size_t i = 0; i < cfg_nkeys; i++)
                nlive += cfg_keys[i].reload == CFG_RELOAD_LIVE;
        CU_ASSERT_EQUAL(nlive, sizeof(live) / sizeof(live[0]));      /* every LIVE key is tried below */

        for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
                char text[256];
                cfg_t *running = load(""), *next;
                recorder_t r = {};
                cfg_live_ops_t ops = recording_ops(&r);
                cfg_change_t ch[4];
                errbuf_t why = {};
                size_t n = 0;

                snprintf(text, sizeof(text), "[%s]\n%s = %s\n", live[i].section, live[i].name, live[i].text);
                next = load(text);
                CU_ASSERT_PTR_NOT_NULL_FATAL(running);
                CU_ASSERT_PTR_NOT_NULL_FATAL(next);
                cfg_diff(running, next, ch, 4, &n);
                CU_ASSERT_EQUAL_FATAL(n, 1);
                CU_ASSERT_STRING_EQUAL(ch[0].key, live[i].name);
                CU_ASSERT_EQUAL(ch[0].reload, CFG_RELOAD_LIVE);

                /* Refused: the running value stays. */
                r.refuse = -EINVAL;
                CU_ASSERT_EQUAL(cfg_apply(&ch[0], running, next, &ops, &why), -EINVAL);
                CU_ASSERT_STRING_EQUAL(why.msg, "refused by the test");
                cfg_diff(running, next, NULL, 0, &n);
                CU_ASSERT_EQUAL(n, 1);

                /* Taken: the setter had the new value, and running has it. */
                r = (recorder_t){};
                CU_ASSERT_EQUAL(cfg_apply(&ch[0], running, next, &ops, &why), 0);
                CU_ASSERT_EQUAL(r.calls, 1);
                CU_ASSERT_TRUE(r.last && !strcmp(r.last, live[i].setter));
                CU_ASSERT_EQUAL(r.value, live[i].value);
                CU_ASSERT_EQUAL(r.value2, live[i].value2);
                cfg_diff(running, next, NULL, 0, &n);
                if (n)
                        fprintf(stderr, "[%s] %s: not copied into the running config\n", live[i].section,
                                live[i].name);
                CU_ASSERT_EQUAL(n, 0);
                cfg_free(running);
                cfg_free(next);
        }
}

/* SWAP keys: no hook, -EAGAIN and the running config unchanged; [model]
 * precision's hook applies it when its setter can; cfg_copy_class takes
 * every SWAP key and nothing else. RESTART and passthrough keys: -EPERM. */
static void test_cfg_reload_swap_and_restart_keys(void) {
        cfg_t *running = load(""), *next = load("[model]\nlabels = /l.txt\nprecision = fp32\n"
                                                "[memory]\ngpu_budget = 2GiB\nhost_budget = 3GiB\n"
                                                "[batching]\nmax_delay_ms = 9\n[drain]\ntimeout_s = 7\n"
                                                "[kafka.consumer]\nclient.id = x\n");
        recorder_t r = {};
        cfg_live_ops_t ops = recording_ops(&r);
        cfg_change_t ch[16];
        errbuf_t why = {};
        size_t n = 0, swaps = 0;

        CU_ASSERT_PTR_NOT_NULL_FATAL(running);
        CU_ASSERT_PTR_NOT_NULL_FATAL(next);
        snprintf(next->model.weights, sizeof(next->model.weights), "/other.safetensors");
        cfg_diff(running, next, ch, 16, &n);
        CU_ASSERT_EQUAL_FATAL(n, 8);
        for (size_t i = 0; i < n; i++) {
                if (ch[i].reload == CFG_RELOAD_SWAP) {
                        swaps++;
                        r = (recorder_t){ .refuse = -EAGAIN };
                        CU_ASSERT_EQUAL(cfg_apply(&ch[i], running, next, &ops, &why), -EAGAIN);
                        /* Only precision asks the daemon whether it needs the swap. */
                        CU_ASSERT_EQUAL(r.calls, !strcmp(ch[i].key, "precision"));
                } else if (ch[i].reload == CFG_RELOAD_RESTART) {
                        CU_ASSERT_EQUAL(cfg_apply(&ch[i], running, next, &ops, &why), -EPERM);
                }
        }
        CU_ASSERT_EQUAL(swaps, 5);
        cfg_diff(running, next, NULL, 0, &n);
        CU_ASSERT_EQUAL(n, 8);          /* nothing applied */

        /* The CPU engine: precision applied without a swap. */
        r = (recorder_t){};
        for (size_t i = 0; i < 8; i++)
                if (!strcmp(ch[i].key, "precision"))
                        CU_ASSERT_EQUAL(cfg_apply(&ch[i], running, next, &ops, &why), 0);
        CU_ASSERT_EQUAL(r.value, PRECISION_FP32);
        CU_ASSERT_EQUAL(running->model.precision, PRECISION_FP32);

        /* A swap done: its keys, and only those, are taken. */
        cfg_copy_class(running, next, CFG_RELOAD_SWAP);
        CU_ASSERT_STRING_EQUAL(running->model.weights, "/other.safetensors");
        CU_ASSERT_STRING_EQUAL(running->model.labels, "/l.txt");
        CU_ASSERT_STRING_EQUAL(running->memory.gpu_budget, "2GiB");
        CU_ASSERT_EQUAL(running->memory.host_budget_bytes, 3ULL << 30);
        cfg_diff(running, next, ch, 16, &n);
        CU_ASSERT_EQUAL(n, 3);          /* max_delay_ms, timeout_s, client.id */
        for (size_t i = 0; i < n && i < 16; i++)
                CU_ASSERT_NOT_EQUAL(ch[i].reload, CFG_RELOAD_SWAP);

        /* Unknown keys need a restart. */
        snprintf(ch[0].section, sizeof(ch[0].section), "nope");
        CU_ASSERT_EQUAL(cfg_apply(&ch[0], running, next, &ops, &why), -EPERM);
        cfg_free(running);
        cfg_free(next);
}

/* The [decode] defaults are decode.h's, through the table's texts. */
static void test_cfg_reload_decode_defaults_from_decode_h(void) {
        cfg_t *c = NULL;

        CU_ASSERT_EQUAL_FATAL(cfg_new_defaults(&c), 0);
        CU_ASSERT_EQUAL(c->decode.max_pixels, DECODE_DEFAULT_MAX_PIXELS);
        CU_ASSERT_EQUAL(c->decode.max_bytes, DECODE_DEFAULT_MAX_BYTES);
        CU_ASSERT_EQUAL(c->decode.max_scan_megapixels, DECODE_DEFAULT_MAX_SCAN_MEGAPIXELS);
        cfg_free(c);
}

int test_cfg_reload_register(void) {
        static CU_TestInfo tests[] = {
                { "every_key_has_its_class", test_cfg_reload_every_key_has_its_class },
                { "each_live_key_applied", test_cfg_reload_each_live_key_applied },
                { "swap_and_restart_keys", test_cfg_reload_swap_and_restart_keys },
                { "decode_defaults_from_decode_h", test_cfg_reload_decode_defaults_from_decode_h },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("cfg_reload", tests);
}

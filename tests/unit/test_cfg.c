/* Unit tests of cfg: every key's bounds and bad values, unknown sections and
 * keys, the missing file, defaults, the passthrough sections, librdkafka's
 * errors through cfg_kafka_apply, the reload diff and the reference.
 *
 * Every file is written into its own mkdtemp directory and removed at once.
 * These tests do not start a daemon or connect to any broker. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "core/units.h"
#include "config/cfg.h"
#include "unit.h"

/* The path of the last file written, for checking error sentences. */
static char test_cfg_path[256];

/* Writes len bytes of text as <tmpdir>/inferd.ini, loads it, removes it.
 * Returns cfg_load's result; err gets its sentence. */
static int load_bytes(const char *text, size_t len, cfg_t **ret, errbuf_t *err) {
        char dir[] = "/tmp/inferd-test-cfg.XXXXXX";
        FILE *f;
        int r;

        *ret = NULL;
        if (!mkdtemp(dir))
                return -errno;
        snprintf(test_cfg_path, sizeof(test_cfg_path), "%s/inferd.ini", dir);
        f = fopen(test_cfg_path, "w");
        if (!f) {
                rmdir(dir);
                return -errno;
        }
        fwrite(text, 1, len, f);
        fclose(f);
        memset(err, 0, sizeof(*err));
        r = cfg_load(ret, test_cfg_path, err);
        unlink(test_cfg_path);
        rmdir(dir);
        return r;
}

static int load_text(const char *text, cfg_t **ret, errbuf_t *err) {
        return load_bytes(text, strlen(text), ret, err);
}

#define WEIGHTS "[model]\nweights = /var/lib/inferd/w.safetensors\n"

/* Loads WEIGHTS plus "[section]\nkey = value\n". */
static int load_one(const char *section, const char *key, const char *value, cfg_t **ret, errbuf_t *err) {
        char text[1024];

        if (strcmp(section, "model") == 0 && strcmp(key, "weights") == 0)
                snprintf(text, sizeof(text), "[model]\nweights = %s\n", value);
        else if (strcmp(section, "model") == 0)
                snprintf(text, sizeof(text), WEIGHTS "%s = %s\n", key, value);
        else
                snprintf(text, sizeof(text), WEIGHTS "[%s]\n%s = %s\n", section, key, value);
        return load_text(text, ret, err);
}

/* True when err names the file, the section and the key. */
static int names_key(const errbuf_t *err, const char *section, const char *key) {
        char where[512];

        snprintf(where, sizeof(where), "%s: [%s] %s: ", test_cfg_path, section, key);
        return strstr(err->msg, where) == err->msg;
}

static void test_cfg_defaults(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS, &c, &err), 0);
        CU_ASSERT_STRING_EQUAL(c->path, test_cfg_path);
        CU_ASSERT_STRING_EQUAL(c->service.instance, "default");
        CU_ASSERT_EQUAL(c->service.log_level, LOG_INFO);
        CU_ASSERT_EQUAL(c->service.top_k, 5);
        CU_ASSERT_STRING_EQUAL(c->kafka.brokers, "localhost:9092");
        CU_ASSERT_STRING_EQUAL(c->kafka.group_id, "inferd");
        CU_ASSERT_STRING_EQUAL(c->kafka.input_topic, "images");
        CU_ASSERT_STRING_EQUAL(c->kafka.output_topic, "predictions");
        CU_ASSERT_STRING_EQUAL(c->kafka.dlq_topic, "images.dlq");
        CU_ASSERT_FALSE(c->kafka.static_membership);
        CU_ASSERT_FALSE(c->decode.fast);
        CU_ASSERT_FALSE(c->decode.exif_orientation);
        CU_ASSERT_EQUAL(c->kafka.delivery, CFG_DELIVERY_AT_LEAST_ONCE);
        CU_ASSERT_EQUAL(c->kafka.transaction_max_ms, 500);
        CU_ASSERT_EQUAL(c->kafka.max_compression_ratio, 8);
        CU_ASSERT_EQUAL(c->kafka_consumer.n, 0);
        CU_ASSERT_EQUAL(c->kafka_producer.n, 0);
        CU_ASSERT_STRING_EQUAL(c->model.weights, "/var/lib/inferd/w.safetensors");
        CU_ASSERT_STRING_EQUAL(c->model.labels, "");
        CU_ASSERT_EQUAL(c->model.precision, PRECISION_FP16);
        CU_ASSERT_EQUAL(c->engine.backend, BACKEND_AUTO);
        CU_ASSERT_EQUAL(c->engine.device, 0);
        CU_ASSERT_STRING_EQUAL(c->memory.gpu_budget, "70%");
        CU_ASSERT_TRUE(units_is_percent(c->memory.gpu_budget));
        CU_ASSERT_EQUAL(c->memory.host_budget_bytes, 2ULL << 30);
        CU_ASSERT_EQUAL(c->memory.max_batch, 256);
        CU_ASSERT_EQUAL(c->batching.max_delay_ms, 5);
        CU_ASSERT_EQUAL(c->batching.max_images_per_s, 0);
        CU_ASSERT_EQUAL(c->batching.max_record_age_ms, 0);
        CU_ASSERT_EQUAL(c->batching.max_record_age_action, CFG_AGE_DLQ);
        CU_ASSERT_TRUE(c->service.trace_headers);
        CU_ASSERT_FALSE(c->service.timing_header);
        CU_ASSERT_EQUAL(c->drain.timeout_s, 30);
        CU_ASSERT_STRING_EQUAL(c->metrics.listen, "127.0.0.1:9464");
        cfg_free(c);
        cfg_free(NULL);
}

static void test_cfg_values_set(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL_FATAL(load_text("[SERVICE]\ninstance = blue\nLog_Level = debug\n"
                                        "[kafka]\nbrokers = a:1,b:2\ngroup_id = g\ninput_topic = in.x\n"
                                        "output_topic = out_y\ndlq_topic = d-z\nstatic_membership = yes\n"
                                        "delivery = exactly-once\ntransaction_max_ms = 0\n"
                                        "[model]\nweights = \"/w w.safetensors\"\nlabels = /l.txt\nprecision = bf16\n"
                                        "[engine]\nbackend = cpu\ndevice = 3\n"
                                        "[memory]\ngpu_budget = 1.5GiB\nhost_budget = 512MiB\nmax_batch = 64\n"
                                        "[batching]\nmax_delay_ms = 0\nmax_images_per_s = 250\n"
                                        "max_record_age = 10m\nmax_record_age_action = skip\n"
                                        "[service]\ntrace_headers = no\ntiming_header = yes\n"
                                        "[drain]\ntimeout_s = 7\n[metrics]\nlisten = [::1]:9465\n",
                                        &c, &err), 0);
        CU_ASSERT_STRING_EQUAL(c->service.instance, "blue");
        CU_ASSERT_EQUAL(c->service.log_level, LOG_DEBUG);
        CU_ASSERT_STRING_EQUAL(c->kafka.brokers, "a:1,b:2");
        CU_ASSERT_STRING_EQUAL(c->kafka.group_id, "g");
        CU_ASSERT_STRING_EQUAL(c->kafka.input_topic, "in.x");
        CU_ASSERT_STRING_EQUAL(c->kafka.output_topic, "out_y");
        CU_ASSERT_STRING_EQUAL(c->kafka.dlq_topic, "d-z");
        CU_ASSERT_TRUE(c->kafka.static_membership);
        CU_ASSERT_EQUAL(c->kafka.delivery, CFG_DELIVERY_EXACTLY_ONCE);
        CU_ASSERT_EQUAL(c->kafka.transaction_max_ms, 0);
        CU_ASSERT_STRING_EQUAL(c->model.weights, "/w w.safetensors");
        CU_ASSERT_STRING_EQUAL(c->model.labels, "/l.txt");
        CU_ASSERT_EQUAL(c->model.precision, PRECISION_BF16);
        CU_ASSERT_EQUAL(c->engine.backend, BACKEND_CPU);
        CU_ASSERT_EQUAL(c->engine.device, 3);
        CU_ASSERT_STRING_EQUAL(c->memory.gpu_budget, "1.5GiB");
        CU_ASSERT_FALSE(units_is_percent(c->memory.gpu_budget));
        CU_ASSERT_EQUAL(c->memory.host_budget_bytes, 512ULL << 20);
        CU_ASSERT_EQUAL(c->memory.max_batch, 64);
        CU_ASSERT_EQUAL(c->batching.max_delay_ms, 0);
        CU_ASSERT_EQUAL(c->batching.max_images_per_s, 250);
        CU_ASSERT_EQUAL(c->batching.max_record_age_ms, 600000);
        CU_ASSERT_EQUAL(c->batching.max_record_age_action, CFG_AGE_SKIP);
        CU_ASSERT_FALSE(c->service.trace_headers);
        CU_ASSERT_TRUE(c->service.timing_header);
        CU_ASSERT_EQUAL(c->drain.timeout_s, 7);
        CU_ASSERT_STRING_EQUAL(c->metrics.listen, "[::1]:9465");
        cfg_free(c);

        /* An empty listen turns the endpoint off. */
        CU_ASSERT_EQUAL_FATAL(load_one("metrics", "listen", "", &c, &err), 0);
        CU_ASSERT_STRING_EQUAL(c->metrics.listen, "");
        cfg_free(c);
}

/* Every integer key: min and max load and are stored, min-1 and max+1 are
 * refused with the key named. */
static void test_cfg_int_bounds(void) {
        static const struct {
                const char *section, *key;
                long min, max;
                size_t offset;
        } keys[] = {
                { "service", "top_k", 1, 1000, offsetof(cfg_t, service.top_k) },
                { "engine", "device", 0, 63, offsetof(cfg_t, engine.device) },
                { "memory", "max_batch", 1, 4096, offsetof(cfg_t, memory.max_batch) },
                { "batching", "max_delay_ms", 0, 10000, offsetof(cfg_t, batching.max_delay_ms) },
                { "drain", "timeout_s", 1, 3600, offsetof(cfg_t, drain.timeout_s) },
                { "metrics", "header_timeout_s", 0, 3600, offsetof(cfg_t, metrics.header_timeout_s) },
                { "metrics", "connections_per_ip_per_s", 0, 100000, offsetof(cfg_t, metrics.connections_per_ip_per_s) },
                { "metrics", "tls_handshakes_per_s", 0, 100000, offsetof(cfg_t, metrics.tls_handshakes_per_s) },
                { "decode", "threads", 0, 256, offsetof(cfg_t, decode.threads) },
                { "decode", "max_pixels", 1, 2147483647, offsetof(cfg_t, decode.max_pixels) },
        };

        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                const long values[] = { keys[i].min, keys[i].max, keys[i].min - 1, keys[i].max + 1 };

                for (int j = 0; j < 4; j++) {
                        char v[32];
                        errbuf_t err;
                        cfg_t *c;
                        int r;

                        snprintf(v, sizeof(v), "%ld", values[j]);
                        r = load_one(keys[i].section, keys[i].key, v, &c, &err);
                        if (j < 2) {
                                CU_ASSERT_EQUAL(r, 0);
                                if (r == 0)
                                        CU_ASSERT_EQUAL(*(int *)((char *)c + keys[i].offset), values[j]);
                        } else {
                                CU_ASSERT_EQUAL(r, -EINVAL);
                                CU_ASSERT_TRUE(names_key(&err, keys[i].section, keys[i].key));
                                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "is not in"));
                        }
                        cfg_free(c);
                }
        }
}

static void test_cfg_size_bounds(void) {
        static const struct {
                const char *key, *value;
                int ok;
                uint64_t bytes;
        } cases[] = {
                { "host_budget", "1MiB", 1, 1ULL << 20 },
                { "host_budget", "1TiB", 1, 1ULL << 40 },
                { "host_budget", "1048575", 0, 0 },
                { "host_budget", "1099511627777", 0, 0 },
                { "host_budget", "1048576", 1, 1ULL << 20 },
                { "gpu_budget", "1MiB", 1, 0 },
                { "gpu_budget", "1TiB", 1, 0 },
                { "gpu_budget", "1048575", 0, 0 },
                { "gpu_budget", "1099511627777", 0, 0 },
                { "gpu_budget", "100%", 1, 0 },
                { "gpu_budget", "0.5%", 1, 0 },
                { "gpu_budget", "0%", 0, 0 },
                { "gpu_budget", "100.1%", 0, 0 },
                { "gpu_budget", "-5%", 0, 0 },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                errbuf_t err;
                cfg_t *c;
                int r = load_one("memory", cases[i].key, cases[i].value, &c, &err);

                if (cases[i].ok) {
                        CU_ASSERT_EQUAL(r, 0);
                        if (r == 0 && cases[i].bytes)
                                CU_ASSERT_EQUAL(c->memory.host_budget_bytes, cases[i].bytes);
                        if (r == 0 && strcmp(cases[i].key, "gpu_budget") == 0)
                                CU_ASSERT_STRING_EQUAL(c->memory.gpu_budget, cases[i].value);
                } else {
                        CU_ASSERT_EQUAL(r, -EINVAL);
                        CU_ASSERT_TRUE(names_key(&err, "memory", cases[i].key));
                }
                cfg_free(c);
        }
        /* [decode] max_bytes: 1KiB..1GiB. */
        {
                static const struct {
                        const char *value;
                        uint64_t bytes;         /* 0: refused */
                } mb[] = { { "1KiB", 1024 }, { "1GiB", 1ULL << 30 }, { "1023", 0 }, { "1073741825", 0 },
                           { "20MiB", 20ULL << 20 } };

                for (size_t i = 0; i < sizeof(mb) / sizeof(mb[0]); i++) {
                        errbuf_t err;
                        cfg_t *c;
                        int r = load_one("decode", "max_bytes", mb[i].value, &c, &err);

                        CU_ASSERT_EQUAL(r, mb[i].bytes ? 0 : -EINVAL);
                        if (r == 0) {
                                CU_ASSERT_EQUAL(c->decode.max_bytes, mb[i].bytes);
                        } else {
                                CU_ASSERT_TRUE(names_key(&err, "decode", "max_bytes"));
                        }
                        cfg_free(c);
                }
        }
}

/* The sentence of the design's example, word for word. */
static void test_cfg_budget_message(void) {
        char want[512];
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_one("memory", "gpu_budget", "170%", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof(want), "%s: [memory] gpu_budget: '170%%' is not a size or a percentage in (0, 100]",
                 test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
}

/* Each type's bad values. */
static void test_cfg_bad_values(void) {
        static const struct {
                const char *section, *key, *value, *says;
        } cases[] = {
                { "service", "top_k", "abc", "is not an integer" },
                { "service", "top_k", "5x", "is not an integer" },
                { "service", "top_k", "1.5", "is not an integer" },
                { "service", "top_k", "", "is not an integer" },
                { "service", "top_k", "99999999999999999999", "is not in" },
                { "service", "log_level", "verbose", "is not one of debug, info" },
                { "service", "log_level", "INFO", "is not one of" },
                { "service", "instance", "", "must not be empty" },
                { "kafka", "brokers", "", "must not be empty" },
                { "kafka", "brokers", ",", "',' is not host:port[,host:port...]: entry 1 is empty" },
                { "kafka", "brokers", "a:1,", "entry 2 is empty" },
                { "kafka", "brokers", "a:b:c", "'a:b:c' is not host:port[,host:port...]: 'a:b:c' is not host:port" },
                { "kafka", "brokers", "a:1,b", "'b' is not host:port" },
                { "kafka", "brokers", "a:0", "'a:0' is not host:port" },
                { "kafka", "input_topic", "bad topic", "is not a Kafka topic name" },
                { "kafka", "output_topic", "a/b", "is not a Kafka topic name" },
                { "kafka", "dlq_topic", "..", "is not a Kafka topic name" },
                { "kafka", "static_membership", "maybe", "is not yes or no" },
                { "decode", "fast", "sometimes", "is not yes or no" },
                { "decode", "exif_orientation", "rotate", "is not yes or no" },
                { "kafka", "delivery", "at-most-once", "is not one of at-least-once, exactly-once" },
                { "kafka", "transaction_max_ms", "-1", "is not in" },
                { "kafka", "max_compression_ratio", "0", "is not in" },
                { "kafka", "max_compression_ratio", "1001", "is not in" },
                { "model", "weights", "", "must not be empty" },
                { "model", "precision", "fp8", "is not one of auto, fp32, fp16, bf16" },
                { "engine", "backend", "gpu", "is not one of auto, cpu, cuda" },
                { "memory", "host_budget", "lots", "is not a size" },
                { "memory", "host_budget", "-1", "is not a size" },
                { "memory", "host_budget", "2 parsecs", "is not a size" },
                { "memory", "host_budget", "50%", "is not a size" },
                { "memory", "gpu_budget", "seventy", "is not a size or a percentage" },
                { "memory", "gpu_budget", "", "is not a size or a percentage" },
                { "batching", "max_images_per_s", "-5", "is not in" },
                { "batching", "max_record_age", "90", "is not a duration" },
                { "batching", "max_record_age", "10 minutes", "is not a duration" },
                { "batching", "max_record_age", "-1s", "is not a duration" },
                { "batching", "max_record_age", "400d", "is not in 0..366d" },
                { "batching", "max_record_age_action", "drop", "is not one of dlq, skip" },
                { "output", "kind", "vector", "'vector' is not one of classes, embedding, both" },
                { "output", "embedding_format", "f16le", "'f16le' is not one of json, f32le, base64" },
                { "output", "embedding_normalize", "L2", "'L2' is not one of none, l2" },
                { "cache", "entries", "-1", "is not in" },
                { "cache", "entries", "16777217", "is not in" },
                { "service", "trace_headers", "maybe", "is not yes or no" },
                { "service", "timing_header", "sometimes", "is not yes or no" },
                { "metrics", "listen", "9464", "is not host:port" },
                { "metrics", "listen", "localhost:", "is not host:port" },
                { "metrics", "listen", ":9464", "is not host:port" },
                { "metrics", "listen", "localhost:0", "is not host:port" },
                { "metrics", "listen", "localhost:65536", "is not host:port" },
                { "metrics", "listen", "localhost:http", "is not host:port" },
                { "metrics", "listen", "::1:9464", "is not host:port" },
                { "metrics", "listen", "[::1:9464", "is not host:port" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                errbuf_t err;
                cfg_t *c;

                CU_ASSERT_EQUAL(load_one(cases[i].section, cases[i].key, cases[i].value, &c, &err), -EINVAL);
                CU_ASSERT_PTR_NULL(c);
                CU_ASSERT_TRUE(names_key(&err, cases[i].section, cases[i].key));
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[i].says));
                if (!names_key(&err, cases[i].section, cases[i].key) || !strstr(err.msg, cases[i].says))
                        fprintf(stderr, "test_cfg_bad_values: [%s] %s = '%s': got \"%s\"\n", cases[i].section,
                                cases[i].key, cases[i].value, err.msg);
        }
}

static void test_cfg_unknown_key(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_text(WEIGHTS "[memory]\ngpu_budgt = 50%\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_TRUE(names_key(&err, "memory", "gpu_budgt"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "unknown key"));
        /* A key of another section is unknown here too. */
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\nmax_batch = 5\n", &c, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "service", "max_batch"));
        /* A key before any section. */
        CU_ASSERT_EQUAL(load_text("top_k = 5\n" WEIGHTS, &c, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "top_k: key outside any section"));
}

static void test_cfg_unknown_section(void) {
        char want[512];
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_text(WEIGHTS "[batch]\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof(want), "%s: [batch]: unknown section", test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[batch]\nmax_delay_ms = 5\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[batch]"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "unknown section"));
}

static void test_cfg_syntax_error(void) {
        char want[512];
        errbuf_t err;
        cfg_t *c;

        /* A line without '=' names the file, the section and the line. */
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[memory]\nmax_batch 5\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof(want), "%s: [memory]: line 4: 'max_batch 5' is not key = value, a [section] or a comment",
                 test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        CU_ASSERT_EQUAL(load_text("max_batch 5\n" WEIGHTS, &c, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s: line 1: 'max_batch 5' is not key = value, a [section] or a comment",
                 test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
}

/* A NUL byte, a line too long for iniparser: the key and the line named. */
static void test_cfg_line_errors(void) {
        static const char nul[] = WEIGHTS "[service]\ninstance = bl\0ue\n";
        char want[512], *text;
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_bytes(nul, sizeof(nul) - 1, &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof(want), "%s: [service] instance: line 4: holds a NUL byte", test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        /* A NUL before any '=' names the line only. */
        CU_ASSERT_EQUAL(load_bytes(WEIGHTS "[service]\n\0\n", sizeof(WEIGHTS "[service]\n\0\n") - 1, &c, &err),
                        -EINVAL);
        snprintf(want, sizeof(want), "%s: [service]: line 4: holds a NUL byte", test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);

        text = malloc(10100);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        snprintf(text, 10100, WEIGHTS "[kafka]\nbrokers = %010000d\n", 0);
        CU_ASSERT_EQUAL(load_text(text, &c, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s: [kafka] brokers: line 4: 10010 characters, more than the 1000 a line may hold",
                 test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        /* 1000 is still fine as a line (the value is then checked as such). */
        snprintf(text, 10100, WEIGHTS "[service]\ninstance = %0989d\n", 0);
        CU_ASSERT_EQUAL(load_text(text, &c, &err), 0);
        CU_ASSERT_EQUAL(c ? strlen(c->service.instance) : 0, 989);
        cfg_free(c);
        free(text);
}

/* CRLF line endings read as LF: no '\r' left in any value. */
static void test_cfg_crlf(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL_FATAL(load_text("[model]\r\nweights = /w.safetensors\r\nlabels=\"/l.txt\"\r\n"
                                        "\r\n; a comment\r\n[service]\r\ninstance = blue ; the colour\r\n"
                                        "top_k = 3\r\n[kafka]\r\nbrokers = a:1,b:2\r\n"
                                        "[kafka.consumer]\r\nclient.id = 'x;y'\r\n[metrics]\r\nlisten =\r\n",
                                        &c, &err), 0);
        CU_ASSERT_STRING_EQUAL(c->model.weights, "/w.safetensors");
        CU_ASSERT_STRING_EQUAL(c->model.labels, "/l.txt");
        CU_ASSERT_STRING_EQUAL(c->service.instance, "blue");
        CU_ASSERT_EQUAL(c->service.top_k, 3);
        CU_ASSERT_STRING_EQUAL(c->kafka.brokers, "a:1,b:2");
        CU_ASSERT_EQUAL_FATAL(c->kafka_consumer.n, 1);
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[0].value, "x;y");
        CU_ASSERT_STRING_EQUAL(c->metrics.listen, "");
        cfg_free(c);
        /* Nor in an error sentence. */
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\r\nbogus\r\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\r'));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[service]: line 4: 'bogus' is not key = value"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\r\ntop_k = 3\r\ntop_k = 4\r\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\r'));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "line 5: set again to '4' (line 4 set '3'); say it once"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\r\ntop_k = x\r\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\r'));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[service] top_k: 'x' is not an integer"));
}

/* A key set twice with different values is an error naming both lines; the
 * same value twice is not. Sections and keys are case-insensitive. */
static void test_cfg_duplicate_key(void) {
        char want[512];
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\ninstance = a\n[memory]\n[Service]\nInstance = b\n", &c, &err),
                        -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof(want),
                 "%s: [service] instance: line 7: set again to 'b' (line 4 set 'a'); say it once", test_cfg_path);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[kafka.consumer]\nclient.id = a\nclient.id = b\n", &c, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.consumer", "client.id"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[service]\ntop_k = 3\n[service]\ntop_k = 3\n", &c, &err), 0);
        CU_ASSERT_EQUAL(c ? c->service.top_k : 0, 3);
        cfg_free(c);
}

/* Not a regular file, or over 1 MiB: refused before reading (a FIFO or
 * /dev/zero used to hang iniparser_load for good). */
static void test_cfg_not_a_file(void) {
        char dir[] = "/tmp/inferd-test-cfg.XXXXXX", path[256];
        errbuf_t err = { { 0 } };
        cfg_t *c = NULL;
        FILE *f;

        CU_ASSERT_EQUAL(cfg_load(&c, "/dev/zero", &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_STRING_EQUAL(err.msg, "/dev/zero: the config file is a character device, not a regular file");
        CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/fifo.ini", dir);
        CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
        CU_ASSERT_EQUAL(cfg_load(&c, path, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the config file is a FIFO, not a regular file"));
        unlink(path);
        CU_ASSERT_EQUAL(cfg_load(&c, dir, &err), -EISDIR);
        snprintf(path, sizeof(path), "%s/big.ini", dir);
        f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(WEIGHTS, f);
        for (int i = 0; i < 40000; i++)
                fputs("; a comment line that makes the file bigger\n", f);
        fclose(f);
        CU_ASSERT_EQUAL(cfg_load(&c, path, &err), -EFBIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "more than the 1048576 allowed"));
        unlink(path);
        rmdir(dir);
}

static void test_cfg_missing_file(void) {
        errbuf_t err = { { 0 } };
        cfg_t *c = NULL;

        CU_ASSERT_EQUAL(cfg_load(&c, "/nonexistent/inferd-test/blue.ini", &err), -ENOENT);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/inferd-test/blue.ini"));
}

static void test_cfg_missing_required(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_text("[service]\ntop_k = 5\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_TRUE(names_key(&err, "model", "weights"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "required"));
}

static void test_cfg_passthrough_in_order(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL_FATAL(load_text("[kafka.producer]\nlinger.ms = 7\n"
                                        "[kafka.consumer]\nsession.timeout.ms = 6000\nfetch.wait.max.ms = 10\n"
                                        "client.id = \"x;y\"\nauto.offset.reset = earliest\n" WEIGHTS
                                        "[kafka.producer]\ncompression.type = lz4\n",
                                        &c, &err), 0);
        CU_ASSERT_EQUAL_FATAL(c->kafka_consumer.n, 4);
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[0].name, "session.timeout.ms");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[0].value, "6000");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[1].name, "fetch.wait.max.ms");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[2].name, "client.id");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[2].value, "x;y");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[3].name, "auto.offset.reset");
        CU_ASSERT_STRING_EQUAL(c->kafka_consumer.items[3].value, "earliest");
        CU_ASSERT_EQUAL_FATAL(c->kafka_producer.n, 2);
        CU_ASSERT_STRING_EQUAL(c->kafka_producer.items[0].name, "linger.ms");
        CU_ASSERT_STRING_EQUAL(c->kafka_producer.items[1].name, "compression.type");
        CU_ASSERT_STRING_EQUAL(c->kafka_producer.items[1].value, "lz4");
        cfg_free(c);
}

/* Keys inferd sets itself are refused, with the key named. */
static void test_cfg_passthrough_reserved(void) {
        errbuf_t err;
        cfg_t *c;

        CU_ASSERT_EQUAL(load_text(WEIGHTS "[kafka.consumer]\ngroup.id = other\n", &c, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.consumer", "group.id"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[kafka.consumer]\nenable.auto.offset.store = true\n", &c, &err),
                        -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.consumer", "enable.auto.offset.store"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[kafka.producer]\nenable.idempotence = false\n", &c, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.producer", "enable.idempotence"));
        CU_ASSERT_EQUAL(load_text(WEIGHTS "[kafka.producer]\nbootstrap.servers = x:1\n", &c, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.producer", "bootstrap.servers"));
}

static void test_cfg_kafka_apply(void) {
        rd_kafka_conf_t *conf;
        char value[64];
        size_t len = sizeof(value);
        errbuf_t err;
        cfg_t *c;

        /* Good keys reach librdkafka. */
        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS "[kafka.consumer]\nsession.timeout.ms = 6543\n"
                                        "[kafka.producer]\nlinger.ms = 9\n", &c, &err), 0);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), 0);
        CU_ASSERT_EQUAL(rd_kafka_conf_get(conf, "session.timeout.ms", value, &len), RD_KAFKA_CONF_OK);
        CU_ASSERT_STRING_EQUAL(value, "6543");
        rd_kafka_conf_destroy(conf);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 1, conf, &err), 0);
        len = sizeof(value);
        CU_ASSERT_EQUAL(rd_kafka_conf_get(conf, "linger.ms", value, &len), RD_KAFKA_CONF_OK);
        CU_ASSERT_STRING_EQUAL(value, "9");
        rd_kafka_conf_destroy(conf);
        cfg_free(c);

        /* An unknown property: librdkafka's text, with file, section and key. */
        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS "[kafka.consumer]\nsession.timeout.ms = 6000\n"
                                        "no.such.property = 1\n", &c, &err), 0);
        conf = rd_kafka_conf_new();
        memset(&err, 0, sizeof(err));
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.consumer", "no.such.property"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "No such configuration property"));
        rd_kafka_conf_destroy(conf);
        cfg_free(c);

        /* A bad value. */
        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS "[kafka.producer]\nlinger.ms = soon\n", &c, &err), 0);
        conf = rd_kafka_conf_new();
        memset(&err, 0, sizeof(err));
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 1, conf, &err), -EINVAL);
        CU_ASSERT_TRUE(names_key(&err, "kafka.producer", "linger.ms"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Invalid value"));
        rd_kafka_conf_destroy(conf);
        cfg_free(c);
}

static const cfg_change_t *find_change(const cfg_change_t *ch, size_t n, const char *section, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(ch[i].section, section) == 0 && strcmp(ch[i].key, key) == 0)
                        return &ch[i];
        return NULL;
}

static void test_cfg_reload_diff(void) {
        cfg_change_t ch[16];
        const cfg_change_t *x;
        cfg_t *a, *b;
        errbuf_t err;
        size_t n = 99;

        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS "[kafka.consumer]\nsession.timeout.ms = 6000\n"
                                        "fetch.wait.max.ms = 10\n", &a, &err), 0);
        CU_ASSERT_EQUAL_FATAL(load_text(WEIGHTS "[kafka.consumer]\nsession.timeout.ms = 6000\n"
                                        "fetch.wait.max.ms = 10\n", &b, &err), 0);
        CU_ASSERT_EQUAL(cfg_diff(a, b, ch, 16, &n), 0);
        CU_ASSERT_EQUAL(n, 0);
        cfg_free(b);

        CU_ASSERT_EQUAL_FATAL(load_text("[service]\ntop_k = 3\nlog_level = debug\n"
                                        "[batching]\nmax_delay_ms = 20\n[memory]\nmax_batch = 32\n"
                                        "gpu_budget = 50%\n[drain]\ntimeout_s = 60\n"
                                        "[kafka]\nbrokers = other:9092\n"
                                        "[model]\nweights = /other.safetensors\n"
                                        "[kafka.consumer]\nsession.timeout.ms = 7000\nclient.id = c\n",
                                        &b, &err), 0);
        CU_ASSERT_EQUAL(cfg_diff(a, b, ch, 16, &n), 0);
        CU_ASSERT_EQUAL_FATAL(n, 11);
        /* Live: log level, top_k, max_batch, max_delay_ms. */
        CU_ASSERT_TRUE((x = find_change(ch, n, "service", "top_k")) && x->reload == CFG_RELOAD_LIVE);
        CU_ASSERT_TRUE((x = find_change(ch, n, "service", "log_level")) && x->reload == CFG_RELOAD_LIVE);
        CU_ASSERT_TRUE((x = find_change(ch, n, "memory", "max_batch")) && x->reload == CFG_RELOAD_LIVE);
        CU_ASSERT_TRUE((x = find_change(ch, n, "batching", "max_delay_ms")) && x->reload == CFG_RELOAD_LIVE);
        /* Taken by a model swap in place (the daemon's reload). */
        CU_ASSERT_TRUE((x = find_change(ch, n, "memory", "gpu_budget")) && x->reload == CFG_RELOAD_SWAP);
        CU_ASSERT_TRUE((x = find_change(ch, n, "model", "weights")) && x->reload == CFG_RELOAD_SWAP);
        /* Restart needed. */
        CU_ASSERT_TRUE((x = find_change(ch, n, "drain", "timeout_s")) && x->reload == CFG_RELOAD_RESTART);
        CU_ASSERT_TRUE((x = find_change(ch, n, "kafka", "brokers")) && x->reload == CFG_RELOAD_RESTART);
        CU_ASSERT_TRUE((x = find_change(ch, n, "kafka.consumer", "session.timeout.ms")) &&
                       x->reload == CFG_RELOAD_RESTART);
        CU_ASSERT_TRUE((x = find_change(ch, n, "kafka.consumer", "client.id")) && x->reload == CFG_RELOAD_RESTART);
        CU_ASSERT_TRUE((x = find_change(ch, n, "kafka.consumer", "fetch.wait.max.ms")) &&
                       x->reload == CFG_RELOAD_RESTART);
        CU_ASSERT_PTR_NULL(find_change(ch, n, "engine", "backend"));

        /* Fewer slots than changes: n still counts them all. */
        CU_ASSERT_EQUAL(cfg_diff(a, b, ch, 2, &n), 0);
        CU_ASSERT_EQUAL(n, 11);
        CU_ASSERT_EQUAL(cfg_diff(a, b, NULL, 0, &n), 0);
        CU_ASSERT_EQUAL(n, 11);

        cfg_free(a);
        cfg_free(b);
}

/* The design's keys, independently of the table. */
static const char *const design_keys[][2] = {
        { "service", "instance" }, { "service", "log_level" }, { "service", "top_k" },
        { "kafka", "brokers" }, { "kafka", "group_id" }, { "kafka", "input_topic" },
        { "kafka", "output_topic" }, { "kafka", "dlq_topic" }, { "kafka", "static_membership" },
        { "kafka", "delivery" }, { "kafka", "transaction_max_ms" }, { "kafka", "max_compression_ratio" },
        { "model", "weights" }, { "model", "labels" }, { "model", "precision" },
        { "engine", "backend" }, { "engine", "device" }, { "engine", "threads" },
        { "memory", "gpu_budget" }, { "memory", "host_budget" }, { "memory", "max_batch" },
        { "batching", "max_delay_ms" }, { "batching", "max_images_per_s" }, { "batching", "max_record_age" },
        { "batching", "max_record_age_action" }, { "service", "trace_headers" }, { "service", "timing_header" },
        { "drain", "timeout_s" },
        { "metrics", "listen" }, { "metrics", "tls_cert" }, { "metrics", "tls_key" },
        { "metrics", "basic_auth_users" }, { "metrics", "auth_healthz" },
        { "metrics", "max_connections" }, { "metrics", "max_connections_per_ip" }, { "metrics", "timeout_s" },
        { "metrics", "probes_listen" }, { "metrics", "header_timeout_s" }, { "metrics", "connections_per_ip_per_s" },
        { "metrics", "tls_handshakes_per_ip_per_s" }, { "metrics", "tls_handshakes_per_s" },
        { "decode", "threads" }, { "decode", "max_pixels" }, { "decode", "max_bytes" }, { "decode", "fast" },
        { "decode", "exif_orientation" },
        { "decode", "max_scan_megapixels" },
        { "output", "kind" },
        { "output", "embedding_format" },
        { "output", "embedding_normalize" },
        { "cache", "entries" },
};
#define N_DESIGN_KEYS (sizeof(design_keys) / sizeof(design_keys[0]))

static void test_cfg_reference_lists_every_key(void) {
        char *text = NULL, *p;
        size_t len = 0, rows = 0;
        FILE *f = open_memstream(&text, &len);

        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(cfg_write_reference(f), 0);
        fclose(f);
        for (size_t i = 0; i < N_DESIGN_KEYS; i++) {
                char row[128];

                snprintf(row, sizeof(row), "\n| `[%s]` | `%s` |", design_keys[i][0], design_keys[i][1]);
                CU_ASSERT_PTR_NOT_NULL(strstr(text, row));
        }
        for (p = text; (p = strstr(p, "\n| `[")); p++)
                rows++;
        CU_ASSERT_EQUAL(rows, N_DESIGN_KEYS);   /* and nothing else */
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "| `70%` |"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "(required)"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "[kafka.consumer]"));
        free(text);
}

/* cfg_write_ini writes every key, and what it writes loads back equal. */
static void test_cfg_write_ini_round_trip(void) {
        char *text = NULL;
        size_t len = 0, n = 99;
        cfg_t *a, *b;
        errbuf_t err;
        FILE *f;

        CU_ASSERT_EQUAL_FATAL(load_text("[service]\ninstance = green\ntop_k = 9\n[memory]\nhost_budget = 3GiB\n"
                                        "gpu_budget = 12.5%\n" WEIGHTS "precision = auto\n"
                                        "[kafka.producer]\nlinger.ms = 3\n", &a, &err), 0);
        f = open_memstream(&text, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(cfg_write_ini(a, f), 0);
        fclose(f);
        for (size_t i = 0; i < N_DESIGN_KEYS; i++) {
                char line[128];

                snprintf(line, sizeof(line), "\n%s = ", design_keys[i][1]);
                CU_ASSERT_PTR_NOT_NULL(strstr(text, line));
        }
        CU_ASSERT_EQUAL_FATAL(load_text(text, &b, &err), 0);
        CU_ASSERT_EQUAL(cfg_diff(a, b, NULL, 0, &n), 0);
        CU_ASSERT_EQUAL(n, 0);
        CU_ASSERT_EQUAL(b->model.precision, PRECISION_AUTO);
        CU_ASSERT_EQUAL(b->memory.host_budget_bytes, 3ULL << 30);
        free(text);
        cfg_free(a);
        cfg_free(b);
}

static void test_cfg_log_levels(void) {
        static const char *const names[] = { "debug", "info", "notice", "warning", "err" };
        static const int prio[] = { LOG_DEBUG, LOG_INFO, LOG_NOTICE, LOG_WARNING, LOG_ERR };

        for (int i = 0; i < 5; i++) {
                int p = -1;

                CU_ASSERT_EQUAL(cfg_log_level_from_string(names[i], &p), 0);
                CU_ASSERT_EQUAL(p, prio[i]);
                CU_ASSERT_STRING_EQUAL(cfg_log_level_name(prio[i]), names[i]);
        }
        CU_ASSERT_EQUAL(cfg_log_level_from_string("trace", &(int){ 0 }), -EINVAL);
}

/* The shipped files load, and their librdkafka keys are accepted. Paths are
 * relative to the repository root, where tests/run runs the suites. */
static void test_cfg_shipped_files(void) {
        static const char *const files[] = { "etc/inferd/inferd.ini", "etc/inferd/example.ini",
                                             "etc/inferd/example-green.ini" };
        char listen[2][256] = { "", "" };

        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                errbuf_t err = { { 0 } };
                rd_kafka_conf_t *conf;
                cfg_t *c = NULL;
                int r = cfg_load(&c, files[i], &err);

                if (r < 0)
                        fprintf(stderr, "test_cfg_shipped_files: %s\n", err.msg);
                CU_ASSERT_EQUAL_FATAL(r, 0);
                if (i >= 1)
                        snprintf(listen[i - 1], sizeof(listen[i - 1]), "%s", c->metrics.listen);
                conf = rd_kafka_conf_new();
                CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), 0);
                rd_kafka_conf_destroy(conf);
                conf = rd_kafka_conf_new();
                CU_ASSERT_EQUAL(cfg_kafka_apply(c, 1, conf, &err), 0);
                rd_kafka_conf_destroy(conf);
                cfg_free(c);
        }
        /* The blue-green pair can run on one host: two metrics ports. */
        CU_ASSERT_STRING_EQUAL(listen[0], "127.0.0.1:9464");
        CU_ASSERT_STRING_EQUAL(listen[1], "127.0.0.1:9465");
}

/* docs/config.md is exactly what cfg_write_reference prints: regenerate it
 * with `build/inferd --print-config-reference > docs/config.md`. */
static void test_cfg_reference_doc_current(void) {
        char *want = NULL;
        size_t want_len = 0;
        FILE *f = open_memstream(&want, &want_len);

        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(cfg_write_reference(f), 0);
        fclose(f);
        unit_assert_file_is("docs/config.md", want, want_len);
        free(want);
}

int test_cfg_register(void) {
        static CU_TestInfo tests[] = {
                { "defaults", test_cfg_defaults },
                { "values_set", test_cfg_values_set },
                { "int_bounds", test_cfg_int_bounds },
                { "size_bounds", test_cfg_size_bounds },
                { "budget_message", test_cfg_budget_message },
                { "bad_values", test_cfg_bad_values },
                { "unknown_key", test_cfg_unknown_key },
                { "unknown_section", test_cfg_unknown_section },
                { "syntax_error", test_cfg_syntax_error },
                { "line_errors", test_cfg_line_errors },
                { "crlf", test_cfg_crlf },
                { "duplicate_key", test_cfg_duplicate_key },
                { "not_a_file", test_cfg_not_a_file },
                { "missing_file", test_cfg_missing_file },
                { "missing_required", test_cfg_missing_required },
                { "passthrough_in_order", test_cfg_passthrough_in_order },
                { "passthrough_reserved", test_cfg_passthrough_reserved },
                { "kafka_apply", test_cfg_kafka_apply },
                { "reload_diff", test_cfg_reload_diff },
                { "reference_lists_every_key", test_cfg_reference_lists_every_key },
                { "write_ini_round_trip", test_cfg_write_ini_round_trip },
                { "log_levels", test_cfg_log_levels },
                { "shipped_files", test_cfg_shipped_files },
                { "reference_doc_current", test_cfg_reference_doc_current },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("cfg", tests);
}

/* cfg: the daemon's INI configuration (/etc/inferd/<instance>.ini).
 *
 * One static table of keys (cfg_table.c: section, name, type, default,
 * bounds, reload class, description) drives parsing, validation, defaults,
 * the reload (the diff, and each live key's apply hook) and the generated
 * reference (docs/config.md). Unknown sections, unknown keys and
 * bad values are errors, and every error sentence names the file, the section
 * and the key: "/etc/inferd/blue.ini: [memory] gpu_budget: '170%' is not a
 * size or a percentage in (0, 100]".
 *
 * [kafka.client], [kafka.consumer] and [kafka.producer] are not in the
 * table: their keys are kept verbatim, in file order, and validated only when
 * cfg_kafka_apply() hands them to librdkafka, whose own error text is
 * surfaced. [kafka.client] goes to every client, then the client's own
 * section overrides it. Any of their values may be `file:PATH` or
 * `credential:NAME` (cfg_secret.c), resolved by cfg_load; a secret key's
 * value is never written out (cfg_write_ini prints "(secret)").
 *
 * This module reads and checks a file; it does not log, resolve "auto"
 * (backend, precision) or measure devices. On a reload, cfg_diff() says
 * which keys changed and each one's reload class; cfg_apply() applies a
 * live key to the running daemon through the setters the daemon hands it
 * (cfg_live_ops_t), so this module never sees the daemon's insides. */
#ifndef INFERD_CFG_H
#define INFERD_CFG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <librdkafka/rdkafka.h>

#include "core/errbuf.h"
#include "core/plan.h"
#include "engine/prediction.h"

#define CFG_DEFAULT_PATH "/etc/inferd/inferd.ini"

/* Longest accepted string value (brokers lists are the long ones); longer is
 * an error, never a silent truncation. */
#define CFG_STRING_MAX 1024

/* One [kafka.consumer] / [kafka.producer] entry, as written (iniparser lowers
 * the case of key names; librdkafka's are lower case anyway). */
/* [kafka] delivery */
typedef enum cfg_delivery {
        CFG_DELIVERY_AT_LEAST_ONCE,
        CFG_DELIVERY_EXACTLY_ONCE,      /* outputs and offsets in one transaction (KIP-447) */
} cfg_delivery_t;

/* [batching] max_record_age_action */
typedef enum cfg_age_action {
        CFG_AGE_DLQ,                    /* to the DLQ, inferd-error: expired */
        CFG_AGE_SKIP,                   /* committed without a copy */
} cfg_age_action_t;

typedef struct cfg_kv {
        char *name;                     /* owned */
        char *value;                    /* owned; file:/credential: already resolved */
        char *written;                  /* owned; the file:/credential: text as written, NULL for a plain value */
} cfg_kv_t;

typedef struct cfg_kv_list {
        cfg_kv_t *items;                /* owned, n entries, in file order */
        size_t n;
} cfg_kv_list_t;

typedef struct cfg {
        char path[PATH_MAX];            /* the file it came from ("" for cfg_new_defaults) */

        struct {
                char instance[CFG_STRING_MAX];
                int log_level;          /* syslog priority: LOG_ERR .. LOG_DEBUG */
                int top_k;              /* 1..1000 */
                bool trace_headers;     /* copy traceparent and tracestate to the outputs */
                bool timing_header;     /* add inferd-timing to predictions */
        } service;

        struct {
                char brokers[CFG_STRING_MAX];   /* bootstrap.servers */
                char group_id[CFG_STRING_MAX];
                char input_topic[CFG_STRING_MAX];
                char output_topic[CFG_STRING_MAX];
                char dlq_topic[CFG_STRING_MAX];
                bool static_membership; /* group.instance.id = <group_id>-<instance> */
                cfg_delivery_t delivery;
                int transaction_max_ms; /* exactly-once: how long one transaction may gather batches */
                int max_compression_ratio; /* the plan's bound on the input's decompressed / wire bytes */
        } kafka;
        cfg_kv_list_t kafka_client;     /* [kafka.client], verbatim: every client */
        cfg_kv_list_t kafka_consumer;   /* [kafka.consumer], verbatim */
        cfg_kv_list_t kafka_producer;   /* [kafka.producer], verbatim */

        struct {
                char weights[PATH_MAX]; /* required: cfg_load fails without it */
                char labels[PATH_MAX];  /* "" = no labels */
                precision_t precision;  /* may be PRECISION_AUTO: the daemon resolves it */
        } model;

        struct {
                backend_t backend;      /* may be BACKEND_AUTO: the daemon resolves it */
                int device;             /* CUDA device ordinal, 0..63 */
                int threads;            /* the CPU engine's threads; 0: OpenMP's default */
        } engine;

        struct {
                /* A SIZE or a percentage of the device's memory, as written
                 * (validated); resolve it with
                 * units_parse_budget(gpu_budget, device_bytes, &budget). */
                char gpu_budget[64];
                uint64_t host_budget_bytes;
                int max_batch;          /* 1..4096; an upper bound, the plan may be lower */
        } memory;

        struct {
                int max_delay_ms;       /* 0..10000 */
                int max_images_per_s;   /* 0 = no cap */
                uint64_t max_record_age_ms;     /* 0 = off */
                cfg_age_action_t max_record_age_action;
        } batching;

        struct {
                int timeout_s;          /* 1..3600 */
        } drain;

        struct {
                char listen[256];       /* host:port; "" = no metrics endpoint */
                char tls_cert[PATH_MAX];        /* PEM; "" = plain HTTP (with tls_key) */
                char tls_key[PATH_MAX];         /* PEM, unencrypted */
                char basic_auth_users[PATH_MAX];        /* user:bcrypt lines; "" = no auth */
                bool auth_healthz;      /* basic auth on /healthz too */
                int max_connections;    /* 1..10000 held at once */
                int max_connections_per_ip;     /* 0..10000; 0 = no limit of its own */
                int timeout_s;          /* 1..3600: an idle connection is closed */
                char probes_listen[256];        /* host:port of the probes only; "" = none of their own */
                int header_timeout_s;   /* 0..3600: a whole request header by then; 0 = no deadline */
                int connections_per_ip_per_s;   /* 0..100000 new connections a second; 0 = no limit */
                int tls_handshakes_per_ip_per_s;        /* 0..100000 new TLS connections a second from one address */
                int tls_handshakes_per_s;       /* 0..100000 new TLS connections a second, all addresses */
        } metrics;

        struct {
                int threads;            /* 0..256; 0 = the cores minus one, at least 1 (decode_default_threads) */
                int max_pixels;         /* 1..2^31-1 */
                uint64_t max_bytes;     /* 1KiB..1GiB */
                bool fast;              /* DCT-domain reduction and fast upsampling for JPEG (decode_set_fast) */
                bool exif_orientation;  /* turn images as their EXIF says (decode_set_exif_orientation) */
                int max_scan_megapixels;        /* 0..2^31-1; 0 = no limit (decode_set_max_scan_megapixels) */
        } decode;

        struct {
                prediction_kind_t kind;                         /* classes, embedding or both */
                prediction_embedding_format_t embedding_format; /* json, f32le or base64 */
                prediction_normalize_t embedding_normalize;     /* none or l2 */
        } output;

        struct {
                int entries;            /* 0..16777216 records' results; 0 = no cache */
        } cache;
} cfg_t;

/* Opens the weights and the labels c names and checks them without loading
 * them: the weights with model_check (the safetensors header, every
 * tensor's name, dtype and shape), the labels' count. For --check-config.
 * Returns 0, or -errno with "<file>: [model] key: <path>: ..." in err. */
int cfg_check_model_files(const cfg_t *c, errbuf_t *err);

/* Reads and validates path. On success *ret is a new cfg_t (free it with
 * cfg_free). Errors, each with a sentence in err naming the path (and the
 * section and key when there is one):
 *   -ENOENT / -EACCES / ...  the file cannot be opened;
 *   -EINVAL  a syntax error, an unknown section or key, a key before any
 *            section, a bad value, a missing required key ([model] weights),
 *            or a passthrough key that inferd sets itself (bootstrap.servers,
 *            group.id, enable.auto.offset.store, enable.idempotence, ...);
 *   -ENOMEM. */
int cfg_load(cfg_t **ret, const char *path, errbuf_t *err);

/* A cfg_t holding every table default (and no weights, no passthrough keys):
 * what a key absent from a file gets. */
int cfg_new_defaults(cfg_t **ret);

/* cfg_free(NULL) is a no-op. */
void cfg_free(cfg_t *c);

/* How a change to a key is taken on SIGHUP; each table row has one. */
typedef enum cfg_reload {
        CFG_RELOAD_RESTART,             /* needs a restart: the change is logged and not applied */
        CFG_RELOAD_LIVE,                /* applied at once by the row's apply hook (cfg_apply) */
        CFG_RELOAD_SWAP,                /* taken by a model swap in place: drain, re-plan, new weights */
} cfg_reload_t;

/* "restart", "live" or "swap". */
const char *cfg_reload_name(cfg_reload_t reload);

/* The running daemon as the apply hooks see it: one setter for each setting
 * that a live key changes, called with the new value and userdata. A setter
 * returns 0 when the new value is in force (the daemon's setter may log a
 * note, such as a value clamped to the plan), or -errno with why saying why
 * the running value stays. The daemon fills it; a unit test fills it with
 * recorders. */
typedef struct cfg_live_ops {
        void *userdata;
        int (*set_log_level)(void *userdata, int priority, errbuf_t *why);
        int (*set_top_k)(void *userdata, int top_k, errbuf_t *why);
        int (*set_headers)(void *userdata, bool trace_headers, bool timing_header, errbuf_t *why);
        int (*set_max_batch)(void *userdata, int max_batch, errbuf_t *why);
        int (*set_max_delay_ms)(void *userdata, int max_delay_ms, errbuf_t *why);
        int (*set_max_images_per_s)(void *userdata, int max_images_per_s, errbuf_t *why);
        int (*set_max_record_age)(void *userdata, uint64_t max_record_age_ms, cfg_age_action_t action,
                                  errbuf_t *why);
        /* [model] precision, a swap key: 0 when the running engine takes the
         * new precision without a swap (the CPU engine computes in fp32
         * whatever it says but bf16), -EAGAIN when it needs one. */
        int (*set_precision)(void *userdata, precision_t precision, errbuf_t *why);
        /* [cache] entries: the running cache shrinks, grows back within what
         * start made, or empties; more is refused (a restart plans it). */
        int (*set_cache_entries)(void *userdata, int entries, errbuf_t *why);
} cfg_live_ops_t;

/* One key whose value differs between two configs. */
typedef struct cfg_change {
        char section[32];               /* "memory", "kafka.consumer", ... */
        char key[128];
        cfg_reload_t reload;            /* the row's class; RESTART for the passthrough sections */
} cfg_change_t;

/* Compares old and new key by key, in table order and then the passthrough
 * sections (a key added, removed or changed there counts; passthrough keys
 * always need a restart, since librdkafka's handles must be rebuilt). Fills
 * up to max entries of changes (which may be NULL when max is 0) and sets *n
 * to the total number of changed keys, which may exceed max. Returns 0. */
int cfg_diff(const cfg_t *old, const cfg_t *new, cfg_change_t *changes, size_t max, size_t *n);

/* Applies ch, one change of cfg_diff(running, next), to the running daemon:
 * the row's apply hook hands next's value to ops' setter, and when the
 * setter takes it, the key's value is copied from next into running.
 * Returns:
 *   0        applied;
 *   -EAGAIN  a SWAP key that its hook could not apply live (or that has no
 *            hook): take it by a model swap; running is unchanged;
 *   -EPERM   a RESTART key, a passthrough key or an unknown one;
 *   the setter's -errno, with why: refused, running keeps its value. */
int cfg_apply(const cfg_change_t *ch, cfg_t *running, const cfg_t *next, const cfg_live_ops_t *ops,
              errbuf_t *why);

/* Copies the value of every key of class reload from src into dst (a swap
 * that succeeded takes its keys this way). */
void cfg_copy_class(cfg_t *dst, const cfg_t *src, cfg_reload_t reload);

/* Applies [kafka.client] and then [kafka.consumer] (producer == 0) or [kafka.producer] (producer != 0)
 * to conf with rd_kafka_conf_set, in file order. A key librdkafka refuses
 * gives -EINVAL and "<path>: [kafka.consumer] <key>: <librdkafka's text>". */
int cfg_kafka_apply(const cfg_t *c, int producer, rd_kafka_conf_t *conf, errbuf_t *err);

/* --- cfg_secret.c ------------------------------------------------------------ */

/* Whether a librdkafka key holds a secret (sasl.password, ssl.key.password,
 * ...): its value is never printed. */
bool cfg_key_is_secret(const char *name);

/* Whether a librdkafka key names a file (ssl.ca.location, ...): file: and
 * credential: give it the path, not the content. */
bool cfg_key_is_location(const char *name);

/* Whether value is written `file:PATH` or `credential:NAME`. */
bool cfg_value_is_reference(const char *value);

/* The file that value names: PATH for file:PATH, $CREDENTIALS_DIRECTORY/NAME
 * for credential:NAME, value itself otherwise. -EINVAL, -ENOENT (no
 * $CREDENTIALS_DIRECTORY) or -ENAMETOOLONG with a sentence in err. */
int cfg_reference_path(const char *value, char *path, size_t len, errbuf_t *err);

/* Reads a secret's or a key's file (textfile_read: a regular file of at
 * most 1MiB) without its trailing newline into *ret (malloc'd,
 * NUL-terminated; free it). A NUL byte in it is an error. what names the
 * file in the sentence ("<path>: the <what> is a FIFO, ..."). */
int cfg_read_file_text(const char *path, const char *what, char **ret, errbuf_t *err);

/* 0 when path is a regular file this process can open for reading, else
 * -errno and "cannot read '<path>': <reason>". */
int cfg_check_readable(const char *path, errbuf_t *err);

/* The value librdkafka gets for passthrough key name written as written:
 * the content of a file:/credential: file, or its path for a *.location
 * key, or written itself (a *.location file is checked to be readable).
 * *value is malloc'd. Errors leave a sentence that never holds the value. */
int cfg_resolve_passthrough(const char *name, const char *written, char **value, errbuf_t *err);

/* The files the table's keys name that must be readable at load ([metrics]
 * tls_cert, tls_key, basic_auth_users), and the TLS pair given together.
 * -errno with "<path>: [metrics] <key>: cannot read '<file>': <reason>". */
int cfg_check_files(const cfg_t *c, errbuf_t *err);

/* Secrets that others than the owner and the group can read: a plain-text
 * secret key in a world-readable config file, or a world-readable file:,
 * credential: or [metrics] tls_key file. Fills up to max warning sentences
 * (naming the file, section and key) and returns how many there are. */
size_t cfg_find_exposed_secrets(const cfg_t *c, errbuf_t *warnings, size_t max);

/* The syslog priority's name ("info") and back; -EINVAL for an unknown name. */
const char *cfg_log_level_name(int priority);
int cfg_log_level_from_string(const char *s, int *ret);

/* Writes the reference of every table key as a markdown document (section,
 * key, type, default, range, reload class, description), the text of docs/config.md.
 * Returns 0 or -EIO. */
int cfg_write_reference(FILE *out);

/* Writes the same reference as the man page inferd.ini(5), in roff (man(7)
 * macros), the text of man/inferd.ini.5; one walk of the table writes both
 * (cfg_doc.c). Returns 0 or -EIO. */
int cfg_write_man(FILE *out);

/* Writes c back as INI text, every table key and passthrough entry (what
 * `inferd --check-config` may print). Returns 0 or -EIO. */
int cfg_write_ini(const cfg_t *c, FILE *out);

#endif

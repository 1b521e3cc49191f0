/* cfg: the INI configuration, driven by one table of keys. See cfg.h.
 *
 * The table (cfg_table.c) is the single source of truth: cfg_load parses and
 * checks every value with it, defaults are its default texts run through
 * the same parser, cfg_diff walks it, cfg_apply runs a live row's hook and
 * copies its field (cfg_doc.c writes it as the reference in docs/config.md
 * and man/inferd.ini.5). It is not a general INI library (iniparser is) and it
 * never logs. */
#include "config/cfg.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <iniparser.h>

#include "core/textfile.h"
#include "core/units.h"
#include "config/cfg_lines.h"
#include "config/cfg_table.h"

static const struct {
        const char *name;
        int priority;
} cfg_log_levels[] = {
        { "debug", LOG_DEBUG }, { "info", LOG_INFO }, { "notice", LOG_NOTICE },
        { "warning", LOG_WARNING }, { "err", LOG_ERR },
};

const char *cfg_log_level_name(int priority) {
        for (size_t i = 0; i < sizeof(cfg_log_levels) / sizeof(cfg_log_levels[0]); i++)
                if (cfg_log_levels[i].priority == priority)
                        return cfg_log_levels[i].name;
        return "?";
}

int cfg_log_level_from_string(const char *s, int *ret) {
        for (size_t i = 0; i < sizeof(cfg_log_levels) / sizeof(cfg_log_levels[0]); i++)
                if (strcmp(s, cfg_log_levels[i].name) == 0) {
                        *ret = cfg_log_levels[i].priority;
                        return 0;
                }
        return -EINVAL;
}

/* See cfg_table.h. */
const char *cfg_format_bytes(uint64_t bytes, char *buf, size_t len) {
        static const char *const names[] = { "TiB", "GiB", "MiB", "KiB" };
        static const int shifts[] = { 40, 30, 20, 10 };

        for (int i = 0; i < 4; i++)
                if (bytes && bytes % ((uint64_t)1 << shifts[i]) == 0) {
                        snprintf(buf, len, "%" PRIu64 "%s", bytes >> shifts[i], names[i]);
                        return buf;
                }
        snprintf(buf, len, "%" PRIu64, bytes);
        return buf;
}

static const char *cfg_where(const char *path) {
        return path && *path ? path : "(defaults)";
}

/* Kafka's own rule: 1..249 characters of [a-zA-Z0-9._-], not "." or "..". */
static bool cfg_topic_valid(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > 249 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
                        return false;
        return true;
}

/* A bootstrap list: host:port entries, each as units_parse_listen reads
 * them, separated by commas (spaces around them allowed). */
static int cfg_brokers_check(const char *v, errbuf_t *err) {
        const char *p = v;

        for (int i = 1;; i++) {
                const char *comma = strchr(p, ','), *e = comma ? comma : p + strlen(p), *s = p;
                char entry[CFG_STRING_MAX];

                while (s < e && isspace((unsigned char)*s))
                        s++;
                while (e > s && isspace((unsigned char)e[-1]))
                        e--;
                if (s == e)
                        return errbuf_set(err, -EINVAL, "'%s' is not host:port[,host:port...]: entry %d is empty", v,
                                          i);
                snprintf(entry, sizeof(entry), "%.*s", (int)(e - s), s);
                if (units_parse_listen(entry, NULL, 0, NULL) < 0)
                        return errbuf_set(err, -EINVAL,
                                          "'%s' is not host:port[,host:port...]: '%s' is not host:port (port 1..65535, "
                                          "an IPv6 host in brackets)", v, entry);
                if (!comma)
                        return 0;
                p = comma + 1;
        }
}

/* A text value of k (a string, topic, path, broker list or listen
 * address) into field; as cfg_parse_value. */
static int cfg_parse_text(const cfg_key_t *k, const char *v, void *field, errbuf_t *err) {
        int r;

        switch (k->type) {
        case CFG_T_STRING:
        case CFG_T_TOPIC:
        case CFG_T_PATH:
        case CFG_T_BROKERS:
                if (*v == '\0' && !(k->type == CFG_T_PATH && k->optional))
                        return errbuf_set(err, -EINVAL, "must not be empty");
                if (strlen(v) >= k->size)
                        return errbuf_set(err, -EINVAL, "'%.40s...' is longer than %zu characters", v,
                                          k->size - 1);
                if (k->type == CFG_T_BROKERS && (r = cfg_brokers_check(v, err)) < 0)
                        return r;
                if (k->type == CFG_T_TOPIC && !cfg_topic_valid(v))
                        return errbuf_set(err, -EINVAL,
                                          "'%s' is not a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)", v);
                /* A path may name a systemd credential (or say file:PATH). */
                if (k->type == CFG_T_PATH && cfg_value_is_reference(v))
                        return cfg_reference_path(v, field, k->size, err);
                strcpy(field, v);
                return 0;

        case CFG_T_LISTEN:
                if (strlen(v) >= k->size)
                        return errbuf_set(err, -EINVAL, "'%.40s...' is longer than %zu characters", v,
                                          k->size - 1);
                if (*v && units_parse_listen(v, NULL, 0, NULL) < 0)
                        return errbuf_set(err, -EINVAL,
                                          "'%s' is not host:port (port 1..65535, an IPv6 host in brackets), "
                                          "or empty for off", v);
                strcpy(field, v);
                return 0;

        default:
                break;
        }
        assert(!"not a text type");
        return -EINVAL;
}

/* A quantity of k (an integer, size, budget or duration) in its range
 * into field; as cfg_parse_value. */
static int cfg_parse_quantity(const cfg_key_t *k, const char *v, void *field, errbuf_t *err) {
        char lo[32], hi[32];
        int r;

        switch (k->type) {
        case CFG_T_INT: {
                char *end;
                long long n;

                errno = 0;
                n = strtoll(v, &end, 10);
                if (errno == ERANGE || (end != v && *end == '\0' && (n < k->min || n > k->max)))
                        return errbuf_set(err, -EINVAL, "'%s' is not in %" PRId64 "..%" PRId64, v, k->min,
                                          k->max);
                if (errno || end == v || *end)
                        return errbuf_set(err, -EINVAL, "'%s' is not an integer", v);
                *(int *)field = (int)n;
                return 0;
        }

        case CFG_T_SIZE: {
                uint64_t bytes;

                r = units_parse_size(v, &bytes);
                if (r == -ERANGE || (r == 0 && (bytes < (uint64_t)k->min || bytes > (uint64_t)k->max)))
                        return errbuf_set(err, -EINVAL, "'%s' is not in %s..%s", v,
                                          cfg_format_bytes((uint64_t)k->min, lo, sizeof(lo)),
                                          cfg_format_bytes((uint64_t)k->max, hi, sizeof(hi)));
                if (r < 0)
                        return errbuf_set(err, -EINVAL,
                                          "'%s' is not a size (bytes, with an optional KiB, MiB, GiB or TiB suffix)",
                                          v);
                *(uint64_t *)field = bytes;
                return 0;
        }

        case CFG_T_BUDGET: {
                uint64_t bytes;

                if (units_is_percent(v)) {
                        /* Any non-zero capacity checks the range (0, 100]. */
                        r = units_parse_budget(v, (uint64_t)1 << 40, &bytes);
                        if (r < 0)
                                return errbuf_set(err, -EINVAL,
                                                  "'%s' is not a size or a percentage in (0, 100]", v);
                } else {
                        r = units_parse_size(v, &bytes);
                        if (r < 0)
                                return errbuf_set(err, -EINVAL,
                                                  "'%s' is not a size or a percentage in (0, 100]", v);
                        if (bytes < (uint64_t)k->min || bytes > (uint64_t)k->max)
                                return errbuf_set(err, -EINVAL, "'%s' is not in %s..%s", v,
                                                  cfg_format_bytes((uint64_t)k->min, lo, sizeof(lo)),
                                                  cfg_format_bytes((uint64_t)k->max, hi, sizeof(hi)));
                }
                if (strlen(v) >= k->size)
                        return errbuf_set(err, -EINVAL, "'%s' is too long", v);
                strcpy(field, v);
                return 0;
        }

        case CFG_T_DURATION: {
                uint64_t ms;

                r = units_parse_duration_ms(v, &ms);
                if (r == -ERANGE || (r == 0 && (ms < (uint64_t)k->min || ms > (uint64_t)k->max)))
                        return errbuf_set(err, -EINVAL, "'%s' is not in %s..%s", v,
                                          units_format_duration_ms((uint64_t)k->min, lo, sizeof(lo)),
                                          units_format_duration_ms((uint64_t)k->max, hi, sizeof(hi)));
                if (r < 0)
                        return errbuf_set(err, -EINVAL,
                                          "'%s' is not a duration (a whole number with a unit: ms, s, m, h or d; "
                                          "or 0)", v);
                *(uint64_t *)field = ms;
                return 0;
        }

        default:
                break;
        }
        assert(!"not a quantity type");
        return -EINVAL;
}

/* A CFG_T_CHOICE value: its index among k's choices into the enum field. */
static int cfg_parse_choice(const cfg_key_t *k, const char *v, void *field, errbuf_t *err) {
        char names[128] = "";

        assert(k->choices && k->size == sizeof(int));
        for (int i = 0; k->choices[i]; i++) {
                if (strcmp(v, k->choices[i]) == 0) {
                        *(int *)field = i;
                        return 0;
                }
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "", k->choices[i]);
        }
        return errbuf_set(err, -EINVAL, "'%s' is not one of %s", v, names);
}

/* Parses v as key k into c. On error, writes the sentence after
 * "<file>: [section] key: " into err and returns -EINVAL. */
static int cfg_parse_value(const cfg_key_t *k, const char *v, cfg_t *c, errbuf_t *err) {
        void *field = (char *)c + k->offset;

        switch (k->type) {
        case CFG_T_STRING:
        case CFG_T_TOPIC:
        case CFG_T_PATH:
        case CFG_T_BROKERS:
        case CFG_T_LISTEN:
                return cfg_parse_text(k, v, field, err);

        case CFG_T_INT:
        case CFG_T_SIZE:
        case CFG_T_BUDGET:
        case CFG_T_DURATION:
                return cfg_parse_quantity(k, v, field, err);

        case CFG_T_LOG_LEVEL:
                if (cfg_log_level_from_string(v, field) < 0)
                        return errbuf_set(err, -EINVAL, "'%s' is not one of debug, info, notice, warning, err", v);
                return 0;

        case CFG_T_BACKEND:
                if (backend_from_string(v, field) < 0)
                        return errbuf_set(err, -EINVAL, "'%s' is not one of auto, cpu, cuda", v);
                return 0;

        case CFG_T_PRECISION:
                if (precision_from_string(v, field) < 0)
                        return errbuf_set(err, -EINVAL, "'%s' is not one of auto, fp32, fp16, bf16", v);
                return 0;

        case CFG_T_BOOL:
                if (strcmp(v, "yes") == 0 || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
                        *(bool *)field = true;
                else if (strcmp(v, "no") == 0 || strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
                        *(bool *)field = false;
                else
                        return errbuf_set(err, -EINVAL, "'%s' is not yes or no", v);
                return 0;

        case CFG_T_AGE_ACTION:
                if (strcmp(v, "dlq") == 0)
                        *(cfg_age_action_t *)field = CFG_AGE_DLQ;
                else if (strcmp(v, "skip") == 0)
                        *(cfg_age_action_t *)field = CFG_AGE_SKIP;
                else
                        return errbuf_set(err, -EINVAL, "'%s' is not one of dlq, skip", v);
                return 0;

        case CFG_T_CHOICE:
                return cfg_parse_choice(k, v, field, err);

        case CFG_T_DELIVERY:
                if (strcmp(v, "at-least-once") == 0)
                        *(cfg_delivery_t *)field = CFG_DELIVERY_AT_LEAST_ONCE;
                else if (strcmp(v, "exactly-once") == 0)
                        *(cfg_delivery_t *)field = CFG_DELIVERY_EXACTLY_ONCE;
                else
                        return errbuf_set(err, -EINVAL, "'%s' is not one of at-least-once, exactly-once", v);
                return 0;
        }
        assert(!"unknown cfg type");
        return -EINVAL;
}

/* The value of k in c, as a file would say it. */
static const char *cfg_format_value(const cfg_key_t *k, const cfg_t *c, char *buf, size_t len) {
        const void *field = (const char *)c + k->offset;

        switch (k->type) {
        case CFG_T_STRING:
        case CFG_T_TOPIC:
        case CFG_T_PATH:
        case CFG_T_BUDGET:
        case CFG_T_LISTEN:
        case CFG_T_BROKERS:
                return field;
        case CFG_T_INT:
                snprintf(buf, len, "%d", *(const int *)field);
                return buf;
        case CFG_T_SIZE:
                return cfg_format_bytes(*(const uint64_t *)field, buf, len);
        case CFG_T_LOG_LEVEL:
                return cfg_log_level_name(*(const int *)field);
        case CFG_T_BACKEND:
                return backend_name(*(const backend_t *)field);
        case CFG_T_PRECISION:
                return precision_name(*(const precision_t *)field);
        case CFG_T_BOOL:
                return *(const bool *)field ? "yes" : "no";
        case CFG_T_DELIVERY:
                return *(const cfg_delivery_t *)field == CFG_DELIVERY_EXACTLY_ONCE ? "exactly-once" : "at-least-once";
        case CFG_T_DURATION:
                return units_format_duration_ms(*(const uint64_t *)field, buf, len);
        case CFG_T_AGE_ACTION:
                return *(const cfg_age_action_t *)field == CFG_AGE_SKIP ? "skip" : "dlq";
        case CFG_T_CHOICE:
                return k->choices[*(const int *)field];
        }
        return "?";
}

static void cfg_kv_list_clear(cfg_kv_list_t *l) {
        for (size_t i = 0; i < l->n; i++) {
                free(l->items[i].name);
                if (l->items[i].value)
                        explicit_bzero(l->items[i].value, strlen(l->items[i].value));
                free(l->items[i].value);
                free(l->items[i].written);
        }
        free(l->items);
        l->items = NULL;
        l->n = 0;
}

/* Adds name = written, resolving file:/credential: (cfg_resolve_passthrough).
 * A key written twice keeps its last value, where it first stood. */
static int cfg_kv_list_add(cfg_kv_list_t *l, const char *name, const char *written, errbuf_t *err) {
        cfg_kv_t *items = realloc(l->items, (l->n + 1) * sizeof(*items));
        cfg_kv_t kv = {};
        int r;

        if (!items)
                return -ENOMEM;
        l->items = items;
        r = cfg_resolve_passthrough(name, written, &kv.value, err);
        if (r < 0)
                return r;
        kv.name = strdup(name);
        if (cfg_value_is_reference(written))
                kv.written = strdup(written);
        if (!kv.name || (cfg_value_is_reference(written) && !kv.written)) {
                free(kv.name);
                free(kv.value);
                free(kv.written);
                return -ENOMEM;
        }
        items[l->n++] = kv;
        return 0;
}

void cfg_free(cfg_t *c) {
        if (!c)
                return;
        cfg_kv_list_clear(&c->kafka_client);
        cfg_kv_list_clear(&c->kafka_consumer);
        cfg_kv_list_clear(&c->kafka_producer);
        free(c);
}

int cfg_new_defaults(cfg_t **ret) {
        cfg_t *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < cfg_nkeys; i++) {
                int r;

                if (!cfg_keys[i].def)
                        continue;
                r = cfg_parse_value(&cfg_keys[i], cfg_keys[i].def, c, NULL);
                assert(r == 0);         /* the table's defaults are valid */
                (void)r;
        }
        *ret = c;
        return 0;
}

static int cfg_check_passthrough(const char *path, const char *section, const char *name, errbuf_t *err) {
        /* [kafka.client] reaches both clients: the keys of either are reserved. */
        bool client = strcmp(section, CFG_SECTION_CLIENT) == 0;

        for (size_t i = 0; i < cfg_nreserved; i++)
                if ((client || strcmp(cfg_reserved[i].section, section) == 0) &&
                    strcmp(cfg_reserved[i].name, name) == 0)
                        return errbuf_set(err, -EINVAL, "%s: [%s] %s: may not be set here: %s", path, section,
                                          name, cfg_reserved[i].why);
        return 0;
}

/* The passthrough list of section, or NULL when it is not one. */
static cfg_kv_list_t *cfg_passthrough_list(cfg_t *c, const char *section) {
        if (strcmp(section, CFG_SECTION_CLIENT) == 0)
                return &c->kafka_client;
        if (strcmp(section, CFG_SECTION_CONSUMER) == 0)
                return &c->kafka_consumer;
        if (strcmp(section, CFG_SECTION_PRODUCER) == 0)
                return &c->kafka_producer;
        return NULL;
}

int cfg_load(cfg_t **ret, const char *path, errbuf_t *err) {
        bool seen[CFG_KEYS_MAX] = { false };
        dictionary *d = NULL;
        cfg_t *c = NULL;
        char *text = NULL;
        size_t len;
        int r;

        assert(ret && path);

        /* A regular file of at most 1 MiB, read once: a FIFO or /dev/zero
         * would hang iniparser_load for good. */
        r = textfile_read(path, TEXTFILE_MAX_BYTES, "config file", &text, &len, err);
        if (r < 0)
                return r;
        r = cfg_lines_check(path, text, len, err);
        if (r >= 0)
                r = cfg_lines_parse(&d, path, text, len, err);
        free(text);
        if (r < 0)
                return r;

        r = cfg_new_defaults(&c);
        if (r < 0) {
                errbuf_set(err, r, "%s: out of memory", path);
                goto fail;
        }
        if (strlen(path) >= sizeof(c->path)) {
                r = errbuf_set(err, -ENAMETOOLONG, "%s: path too long", path);
                goto fail;
        }
        strcpy(c->path, path);

        /* The dictionary holds sections ("memory", value NULL) and keys
         * ("memory:max_batch") in file order. */
        for (ssize_t i = 0; i < (ssize_t)d->size; i++) {
                const char *entry = d->key[i], *colon, *value = d->val[i];
                char section[64], name[256];
                const cfg_key_t *k;

                if (!entry)
                        continue;
                colon = strchr(entry, ':');
                if (!colon) {
                        if (!cfg_is_section(entry) && !cfg_passthrough_list(c, entry)) {
                                r = errbuf_set(err, -EINVAL, "%s: [%s]: unknown section", path, entry);
                                goto fail;
                        }
                        continue;
                }
                if (colon == entry) {
                        r = errbuf_set(err, -EINVAL, "%s: %s: key outside any section", path, colon + 1);
                        goto fail;
                }
                if ((size_t)(colon - entry) >= sizeof(section) || strlen(colon + 1) >= sizeof(name)) {
                        r = errbuf_set(err, -EINVAL, "%s: %.60s: key name too long", path, entry);
                        goto fail;
                }
                memcpy(section, entry, (size_t)(colon - entry));
                section[colon - entry] = '\0';
                strcpy(name, colon + 1);
                if (!value)
                        value = "";

                if (cfg_passthrough_list(c, section)) {
                        r = cfg_check_passthrough(path, section, name, err);
                        if (r < 0)
                                goto fail;
                        r = cfg_kv_list_add(cfg_passthrough_list(c, section), name, value, err);
                        if (r == -ENOMEM)
                                errbuf_set(err, r, "%s: out of memory", path);
                        if (r < 0) {
                                errbuf_prefix(err, r, "%s: [%s] %s", path, section, name);
                                goto fail;
                        }
                        continue;
                }
                k = cfg_find_key(section, name);
                if (!k) {
                        r = errbuf_set(err, -EINVAL, "%s: [%s] %s: unknown %s", path, section, name,
                                       cfg_is_section(section) ? "key" : "section");
                        goto fail;
                }
                r = cfg_parse_value(k, value, c, err);
                if (r < 0) {
                        errbuf_prefix(err, r, "%s: [%s] %s", path, section, name);
                        goto fail;
                }
                seen[k - cfg_keys] = true;
        }
        for (size_t i = 0; i < cfg_nkeys; i++)
                if (!cfg_keys[i].def && !seen[i]) {
                        r = errbuf_set(err, -EINVAL, "%s: [%s] %s: required key is missing", path,
                                       cfg_keys[i].section, cfg_keys[i].name);
                        goto fail;
                }
        r = cfg_check_files(c, err);
        if (r < 0)
                goto fail;

        iniparser_freedict(d);
        *ret = c;
        return 0;
fail:
        cfg_free(c);
        iniparser_freedict(d);
        return r;
}

static void cfg_add_change(cfg_change_t *changes, size_t max, size_t *n, const char *section, const char *key,
                           cfg_reload_t reload) {
        if (*n < max) {
                snprintf(changes[*n].section, sizeof(changes[*n].section), "%s", section);
                snprintf(changes[*n].key, sizeof(changes[*n].key), "%s", key);
                changes[*n].reload = reload;
        }
        (*n)++;
}

static const char *cfg_kv_find(const cfg_kv_list_t *l, const char *name) {
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i].name, name) == 0)
                        return l->items[i].value;
        return NULL;
}

/* Keys of a added, removed or changed in b (removed ones found by walking b). */
static void cfg_diff_kv(const char *section, const cfg_kv_list_t *a, const cfg_kv_list_t *b,
                        cfg_change_t *changes, size_t max, size_t *n) {
        for (size_t i = 0; i < b->n; i++) {
                const char *old = cfg_kv_find(a, b->items[i].name);

                if (!old || strcmp(old, b->items[i].value) != 0)
                        cfg_add_change(changes, max, n, section, b->items[i].name, CFG_RELOAD_RESTART);
        }
        for (size_t i = 0; i < a->n; i++)
                if (!cfg_kv_find(b, a->items[i].name))
                        cfg_add_change(changes, max, n, section, a->items[i].name, CFG_RELOAD_RESTART);
}

int cfg_diff(const cfg_t *old, const cfg_t *new, cfg_change_t *changes, size_t max, size_t *n) {
        assert(old && new && n && (changes || max == 0));

        *n = 0;
        for (size_t i = 0; i < cfg_nkeys; i++) {
                char a[64], b[64];

                if (strcmp(cfg_format_value(&cfg_keys[i], old, a, sizeof(a)),
                           cfg_format_value(&cfg_keys[i], new, b, sizeof(b))) != 0)
                        cfg_add_change(changes, max, n, cfg_keys[i].section, cfg_keys[i].name, cfg_keys[i].reload);
        }
        cfg_diff_kv(CFG_SECTION_CLIENT, &old->kafka_client, &new->kafka_client, changes, max, n);
        cfg_diff_kv(CFG_SECTION_CONSUMER, &old->kafka_consumer, &new->kafka_consumer, changes, max, n);
        cfg_diff_kv(CFG_SECTION_PRODUCER, &old->kafka_producer, &new->kafka_producer, changes, max, n);
        return 0;
}

/* The field of k in c. */
static void cfg_copy_key(const cfg_key_t *k, cfg_t *dst, const cfg_t *src) {
        memcpy((char *)dst + k->offset, (const char *)src + k->offset, k->size);
}

int cfg_apply(const cfg_change_t *ch, cfg_t *running, const cfg_t *next, const cfg_live_ops_t *ops,
              errbuf_t *why) {
        const cfg_key_t *k = cfg_find_key(ch->section, ch->key);
        int r;

        assert(running && next && ops);
        if (!k || k->reload == CFG_RELOAD_RESTART)
                return -EPERM;
        if (!k->apply)
                return -EAGAIN;         /* a SWAP key only a swap takes */
        r = k->apply(ops, next, why);
        if (r < 0)
                return r;
        cfg_copy_key(k, running, next);
        return 0;
}

void cfg_copy_class(cfg_t *dst, const cfg_t *src, cfg_reload_t reload) {
        for (size_t i = 0; i < cfg_nkeys; i++)
                if (cfg_keys[i].reload == reload)
                        cfg_copy_key(&cfg_keys[i], dst, src);
}

static int cfg_kafka_apply_list(const cfg_t *c, const char *section, const cfg_kv_list_t *l, rd_kafka_conf_t *conf,
                                errbuf_t *err) {
        char errstr[512];

        for (size_t i = 0; i < l->n; i++) {
                const cfg_kv_t *kv = &l->items[i];

                errstr[0] = '\0';
                if (rd_kafka_conf_set(conf, kv->name, kv->value, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK)
                        continue;
                /* librdkafka's sentence may quote the value: never a secret's. */
                if (cfg_key_is_secret(kv->name) && *kv->value && strstr(errstr, kv->value))
                        snprintf(errstr, sizeof(errstr), "the value is refused by librdkafka");
                return errbuf_set(err, -EINVAL, "%s: [%s] %s: %s", cfg_where(c->path), section, kv->name,
                                  errstr[0] ? errstr : "refused by librdkafka");
        }
        return 0;
}

int cfg_kafka_apply(const cfg_t *c, int producer, rd_kafka_conf_t *conf, errbuf_t *err) {
        int r;

        r = cfg_kafka_apply_list(c, CFG_SECTION_CLIENT, &c->kafka_client, conf, err);
        if (r < 0)
                return r;
        return cfg_kafka_apply_list(c, producer ? CFG_SECTION_PRODUCER : CFG_SECTION_CONSUMER,
                                    producer ? &c->kafka_producer : &c->kafka_consumer, conf, err);
}

/* One passthrough section as INI: a secret as "(secret)", a file: or
 * credential: value as written. */
static void cfg_write_kv(FILE *out, const char *section, const cfg_kv_list_t *l) {
        if (l->n)
                fprintf(out, "\n[%s]\n", section);
        for (size_t i = 0; i < l->n; i++) {
                const cfg_kv_t *kv = &l->items[i];

                fprintf(out, "%s = \"%s\"\n", kv->name,
                        cfg_key_is_secret(kv->name) ? "(secret)" : kv->written ? kv->written : kv->value);
        }
}

int cfg_write_ini(const cfg_t *c, FILE *out) {
        const char *section = NULL;

        for (size_t i = 0; i < cfg_nkeys; i++) {
                const cfg_key_t *k = &cfg_keys[i];
                char buf[64];

                if (!section || strcmp(section, k->section) != 0) {
                        fprintf(out, "%s[%s]\n", section ? "\n" : "", k->section);
                        section = k->section;
                }
                fprintf(out, "%s = %s\n", k->name, cfg_format_value(k, c, buf, sizeof(buf)));
        }
        cfg_write_kv(out, CFG_SECTION_CLIENT, &c->kafka_client);
        cfg_write_kv(out, CFG_SECTION_CONSUMER, &c->kafka_consumer);
        cfg_write_kv(out, CFG_SECTION_PRODUCER, &c->kafka_producer);
        return ferror(out) ? -EIO : 0;
}

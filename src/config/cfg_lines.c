/* cfg_lines: the config file's lines checked before iniparser reads them,
 * then handed to iniparser. See cfg_lines.h. */
#include "config/cfg_lines.h"

#include <ctype.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <unistd.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One key seen: where, and its value as written (trimmed). */
typedef struct cfg_seen {
        char *section;          /* lower case, as iniparser keeps it */
        char *key;
        char *value;
        int line;
} cfg_seen_t;

typedef struct cfg_lines {
        const char *path;
        char section[256];      /* the current one, "" before the first */
        cfg_seen_t *seen;
        size_t n_seen;
} cfg_lines_t;

/* [start, end) without the spaces around it. */
static void cfg_lines_trim(const char **start, const char **end) {
        while (*start < *end && isspace((unsigned char)**start))
                (*start)++;
        while (*end > *start && isspace((unsigned char)(*end)[-1]))
                (*end)--;
}

/* "[section] key: " or "[section]: " (or "" outside any section) into buf. */
static const char *cfg_lines_where(const cfg_lines_t *s, const char *key, size_t key_len, char *buf, size_t len) {
        if (!s->section[0] && !key)
                buf[0] = '\0';
        else if (!key)
                snprintf(buf, len, "[%s]: ", s->section);
        else if (!s->section[0])
                snprintf(buf, len, "%.*s: ", (int)key_len, key);
        else
                snprintf(buf, len, "[%s] %.*s: ", s->section, (int)key_len, key);
        return buf;
}

/* Records section/key = value; refuses it when set before with another
 * value. */
static int cfg_lines_see(cfg_lines_t *s, const char *key, size_t key_len, const char *value, size_t value_len,
                         int line, errbuf_t *err) {
        cfg_seen_t *seen;
        char *k;

        k = strndup(key, key_len);
        if (!k)
                return errbuf_set(err, -ENOMEM, "%s: out of memory", s->path);
        for (char *p = k; *p; p++)
                *p = (char)tolower((unsigned char)*p);
        for (size_t i = 0; i < s->n_seen; i++) {
                cfg_seen_t *o = &s->seen[i];

                if (strcmp(o->section, s->section) != 0 || strcmp(o->key, k) != 0)
                        continue;
                free(k);
                if (strlen(o->value) == value_len && memcmp(o->value, value, value_len) == 0)
                        return 0;       /* the same again: harmless */
                return errbuf_set(err, -EINVAL, "%s: [%s] %s: line %d: set again to '%.*s' (line %d set '%s'); say it once",
                                  s->path, o->section, o->key, line, (int)value_len, value, o->line, o->value);
        }
        seen = realloc(s->seen, (s->n_seen + 1) * sizeof(*seen));
        if (!seen) {
                free(k);
                return errbuf_set(err, -ENOMEM, "%s: out of memory", s->path);
        }
        s->seen = seen;
        seen[s->n_seen] = (cfg_seen_t){ .section = strdup(s->section), .key = k, .value = strndup(value, value_len),
                                        .line = line };
        if (!seen[s->n_seen].section || !seen[s->n_seen].value) {
                free(seen[s->n_seen].section);
                free(seen[s->n_seen].value);
                free(k);
                return errbuf_set(err, -ENOMEM, "%s: out of memory", s->path);
        }
        s->n_seen++;
        return 0;
}

/* One logical line [start, end) (continuations joined by the caller only
 * in its length), first physical line number line. */
static int cfg_lines_one(cfg_lines_t *s, const char *start, const char *end, size_t logical_len, int line,
                         errbuf_t *err) {
        const char *eq = memchr(start, '=', (size_t)(end - start)), *k = start, *ke, *v, *ve = end;
        char where[600];

        cfg_lines_trim(&k, &ve);
        ke = eq ? eq : ve;
        cfg_lines_trim(&k, &ke);
        if (memchr(start, '\0', (size_t)(end - start)))
                return errbuf_set(err, -EINVAL, "%s: %sline %d: holds a NUL byte", s->path,
                                  cfg_lines_where(s, eq && (!memchr(start, '\0', (size_t)(eq - start))) ? k : NULL,
                                                  (size_t)(ke - k), where, sizeof(where)),
                                  line);
        if (logical_len > CFG_LINE_MAX)
                return errbuf_set(err, -EINVAL, "%s: %sline %d: %zu characters, more than the %d a line may hold",
                                  s->path, cfg_lines_where(s, eq ? k : NULL, (size_t)(ke - k), where, sizeof(where)),
                                  line, logical_len, CFG_LINE_MAX);
        if (k == ve || *k == ';' || *k == '#')
                return 0;
        if (*k == '[' && ve[-1] == ']') {
                const char *n = k + 1, *ne = ve - 1;

                cfg_lines_trim(&n, &ne);
                if ((size_t)(ne - n) >= sizeof(s->section))
                        return errbuf_set(err, -EINVAL, "%s: line %d: the section name is too long", s->path, line);
                for (size_t i = 0; i < (size_t)(ne - n); i++)
                        s->section[i] = (char)tolower((unsigned char)n[i]);
                s->section[ne - n] = '\0';
                return 0;
        }
        if (!eq)
                return errbuf_set(err, -EINVAL, "%s: %sline %d: '%.*s' is not key = value, a [section] or a comment",
                                  s->path, cfg_lines_where(s, NULL, 0, where, sizeof(where)), line, (int)(ve - k), k);
        v = eq + 1;
        cfg_lines_trim(&v, &ve);
        return cfg_lines_see(s, k, (size_t)(ke - k), v, (size_t)(ve - v), line, err);
}

int cfg_lines_check(const char *path, const char *text, size_t len, errbuf_t *err) {
        cfg_lines_t s = { .path = path };
        const char *p = text, *end = text + len;
        int line = 0, r = 0;

        while (p < end && r == 0) {
                const char *start = p, *stop;
                size_t logical = 0;
                int first = line + 1;

                /* A physical line ending in '\' goes on to the next, as in
                 * iniparser; the whole is one logical line. */
                for (;;) {
                        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
                        const char *next = nl ? nl + 1 : end;

                        line++;
                        stop = e;
                        while (e > p && isspace((unsigned char)e[-1]))
                                e--;
                        if (e > p && e[-1] == '\\' && next < end) {
                                logical += (size_t)(e - p) - 1;
                                p = next;
                                continue;
                        }
                        logical += (size_t)(e - p);
                        p = next;
                        break;
                }
                r = cfg_lines_one(&s, start, stop, logical, first, err);
        }
        for (size_t i = 0; i < s.n_seen; i++) {
                free(s.seen[i].section);
                free(s.seen[i].key);
                free(s.seen[i].value);
        }
        free(s.seen);
        return r;
}

/* iniparser reports syntax errors only through a process-wide printf-like
 * callback; this keeps its first message of the current cfg_load, per thread,
 * so that it can go into the errbuf instead of onto stderr. */
static __thread char cfg_ini_error[256];

static int cfg_on_ini_error(const char *fmt, ...) {
        va_list ap;

        if (cfg_ini_error[0])
                return 0;
        va_start(ap, fmt);
        vsnprintf(cfg_ini_error, sizeof(cfg_ini_error), fmt, ap);
        va_end(ap);
        return 0;
}

/* iniparser's "iniparser: syntax error in <path> (3):\n-> text\n" becomes
 * "line 3: syntax error: 'text'"; anything else loses its prefix and
 * newlines. */
static const char *cfg_ini_error_text(const char *path) {
        static __thread char out[sizeof(cfg_ini_error) + 64];
        char *p = cfg_ini_error, *q;
        size_t plen = strlen(path);
        int line;

        if (strncmp(p, "iniparser: ", 11) == 0)
                p += 11;
        for (q = p; *q; q++)
                if (*q == '\n')
                        *q = ' ';
        while (q > p && q[-1] == ' ')
                *--q = '\0';
        if (strncmp(p, "syntax error in ", 16) == 0 && strncmp(p + 16, path, plen) == 0 &&
            sscanf(p + 16 + plen, " (%d):", &line) == 1 && (q = strstr(p, "-> "))) {
                snprintf(out, sizeof(out), "line %d: syntax error: '%s'", line, q + 3);
                return out;
        }
        return *p ? p : "cannot parse the file";
}

/* iniparser 4.1 reads only a path: it gets the bytes already read and
 * checked, through a memfd, so that what it parses is what was checked
 * (and never a FIFO or a device swapped in meanwhile). */
int cfg_lines_parse(dictionary **ret, const char *path, const char *text, size_t len, errbuf_t *err) {
        char fd_path[64];
        size_t done = 0;
        int fd, r;

        fd = memfd_create("inferd-config", MFD_CLOEXEC);
        if (fd < 0)
                return errbuf_set(err, -errno, "%s: cannot make a copy to parse: %s", path, strerror(errno));
        while (done < len) {
                ssize_t k = write(fd, text + done, len - done);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = errbuf_set(err, -errno, "%s: cannot make a copy to parse: %s", path, strerror(errno));
                        close(fd);
                        return r;
                }
                done += (size_t)k;
        }
        snprintf(fd_path, sizeof(fd_path), "/proc/self/fd/%d", fd);
        cfg_ini_error[0] = '\0';
        iniparser_set_error_callback(cfg_on_ini_error);
        *ret = iniparser_load(fd_path);
        iniparser_set_error_callback(NULL);
        close(fd);
        if (!*ret)
                return errbuf_set(err, -EINVAL, "%s: %s", path, cfg_ini_error_text(fd_path));
        if (cfg_ini_error[0]) {
                /* iniparser 4.1 returns what it parsed along with the error. */
                iniparser_freedict(*ret);
                *ret = NULL;
                return errbuf_set(err, -EINVAL, "%s: %s", path, cfg_ini_error_text(fd_path));
        }
        return 0;
}

/* cfg_secret: the `file:PATH` and `credential:NAME` value forms, which keys
 * hold secrets, and the checks on the files they name. See cfg.h.
 *
 * A secret should never have to sit in the INI file: any [kafka.client],
 * [kafka.consumer] or [kafka.producer] value may instead name a file whose
 * content is the value (file:PATH) or a systemd credential
 * (credential:NAME, the file NAME in $CREDENTIALS_DIRECTORY, which
 * LoadCredential= fills). A key that names a file for librdkafka itself
 * (*.location) gets the path, not the content. The path keys of the table
 * ([metrics] tls_key...) take credential:NAME the same way.
 *
 * This file resolves and checks; it never logs and never copies a secret
 * into an error sentence. */
#include "config/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/textfile.h"

/* The largest file:/credential: value read: a PEM key chain is a few KiB. */
#define CFG_SECRET_FILE_MAX_BYTES TEXTFILE_MAX_BYTES

#define CFG_PREFIX_FILE "file:"
#define CFG_PREFIX_CREDENTIAL "credential:"

bool cfg_key_is_secret(const char *name) {
        /* librdkafka's sensitive properties: sasl.password, ssl.key.password,
         * ssl.keystore.password, sasl.oauthbearer.client.secret,
         * ssl.key.pem, sasl.oauthbearer.config (may hold a secret). */
        return strstr(name, "password") || strstr(name, "secret") || strcmp(name, "ssl.key.pem") == 0 ||
               strcmp(name, "sasl.oauthbearer.config") == 0;
}

bool cfg_key_is_location(const char *name) {
        size_t n = strlen(name);

        return n > 9 && strcmp(name + n - 9, ".location") == 0;
}

bool cfg_value_is_reference(const char *value) {
        return strncmp(value, CFG_PREFIX_FILE, strlen(CFG_PREFIX_FILE)) == 0 ||
               strncmp(value, CFG_PREFIX_CREDENTIAL, strlen(CFG_PREFIX_CREDENTIAL)) == 0;
}

int cfg_reference_path(const char *value, char *path, size_t len, errbuf_t *err) {
        const char *dir, *name;

        if (strncmp(value, CFG_PREFIX_FILE, strlen(CFG_PREFIX_FILE)) == 0) {
                name = value + strlen(CFG_PREFIX_FILE);
                if (!*name)
                        return errbuf_set(err, -EINVAL, "'file:' names no file");
                if ((size_t)snprintf(path, len, "%s", name) >= len)
                        return errbuf_set(err, -ENAMETOOLONG, "'%.40s...': path too long", value);
                return 0;
        }
        if (strncmp(value, CFG_PREFIX_CREDENTIAL, strlen(CFG_PREFIX_CREDENTIAL)) != 0) {
                if ((size_t)snprintf(path, len, "%s", value) >= len)
                        return errbuf_set(err, -ENAMETOOLONG, "'%.40s...': path too long", value);
                return 0;
        }
        name = value + strlen(CFG_PREFIX_CREDENTIAL);
        /* systemd's credential names are file names: no '/', not . or .. */
        if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return errbuf_set(err, -EINVAL, "'%s' is not a credential name (a file name, no '/')", value);
        dir = getenv("CREDENTIALS_DIRECTORY");
        if (!dir || !*dir)
                return errbuf_set(err, -ENOENT,
                                  "%s needs $CREDENTIALS_DIRECTORY, which is not set "
                                  "(systemd sets it for a unit with LoadCredential=%s:...)",
                                  value, name);
        if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len)
                return errbuf_set(err, -ENAMETOOLONG, "%s: path too long", value);
        return 0;
}

int cfg_read_file_text(const char *path, const char *what, char **ret, errbuf_t *err) {
        char *buf = NULL;
        size_t len = 0;
        int r;

        r = textfile_read(path, CFG_SECRET_FILE_MAX_BYTES, what, &buf, &len, err);
        if (r < 0)
                return r;
        if (strlen(buf) != len) {
                r = errbuf_set(err, -EINVAL, "%s: the %s holds a NUL byte", path, what);
                explicit_bzero(buf, len);
                free(buf);
                return r;
        }
        /* The trailing newline that editors and `echo` add is not part of it. */
        if (len && buf[len - 1] == '\n')
                buf[--len] = '\0';
        if (len && buf[len - 1] == '\r')
                buf[--len] = '\0';
        *ret = buf;
        return 0;
}

int cfg_check_readable(const char *path, errbuf_t *err) {
        struct stat st;
        int fd;

        /* O_NONBLOCK: a FIFO's open would wait for a writer for good. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return errbuf_set(err, -errno, "cannot read '%s': %s", path, strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return errbuf_set(err, -EINVAL, "cannot read '%s': not a regular file", path);
        }
        close(fd);
        return 0;
}

int cfg_resolve_passthrough(const char *name, const char *written, char **value, errbuf_t *err) {
        char path[PATH_MAX];
        int r;

        *value = NULL;
        if (!cfg_value_is_reference(written)) {
                /* librdkafka's "probe" finds the system's CA store. */
                if (cfg_key_is_location(name) && *written && strcmp(written, "probe") != 0 &&
                    (r = cfg_check_readable(written, err)) < 0)
                        return r;
                *value = strdup(written);
                return *value ? 0 : -ENOMEM;
        }
        r = cfg_reference_path(written, path, sizeof(path), err);
        if (r < 0)
                return r;
        if (cfg_key_is_location(name)) {
                r = cfg_check_readable(path, err);
                if (r < 0)
                        return r;
                *value = strdup(path);
                return *value ? 0 : -ENOMEM;
        }
        return cfg_read_file_text(path, cfg_key_is_secret(name) ? "secret's file" : "value's file", value, err);
}

/* [metrics]: the TLS pair comes together, and the files it names can be
 * read now (at start, --check-config and reload alike), so that a missing
 * key file is named before anything starts. */
int cfg_check_files(const cfg_t *c, errbuf_t *err) {
        static const struct {
                const char *key;
                size_t offset;
        } files[] = {
                { "tls_cert", offsetof(cfg_t, metrics.tls_cert) },
                { "tls_key", offsetof(cfg_t, metrics.tls_key) },
                { "basic_auth_users", offsetof(cfg_t, metrics.basic_auth_users) },
        };
        int r;

        if (!c->metrics.tls_cert[0] != !c->metrics.tls_key[0])
                return errbuf_set(err, -EINVAL, "%s: [metrics] %s: required with %s (HTTPS needs both)", c->path,
                                  c->metrics.tls_cert[0] ? "tls_key" : "tls_cert",
                                  c->metrics.tls_cert[0] ? "tls_cert" : "tls_key");
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                const char *p = (const char *)c + files[i].offset;

                if (*p && (r = cfg_check_readable(p, err)) < 0)
                        return errbuf_prefix(err, r, "%s: [metrics] %s", c->path, files[i].key);
        }
        return 0;
}

/* "others than the owner and the service's group": the world bits. */
static bool cfg_world_readable(const char *path) {
        struct stat st;

        return stat(path, &st) == 0 && (st.st_mode & S_IROTH);
}

static void cfg_warn(errbuf_t *warnings, size_t max, size_t *n, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void cfg_warn(errbuf_t *warnings, size_t max, size_t *n, const char *fmt, ...) {
        va_list ap;

        if (*n < max) {
                va_start(ap, fmt);
                vsnprintf(warnings[*n].msg, sizeof(warnings[*n].msg), fmt, ap);
                va_end(ap);
        }
        (*n)++;
}

static void cfg_exposed_list(const cfg_t *c, const char *section, const cfg_kv_list_t *l, errbuf_t *warnings,
                             size_t max, size_t *n) {
        char path[PATH_MAX];

        for (size_t i = 0; i < l->n; i++) {
                const char *written = l->items[i].written ? l->items[i].written : l->items[i].value;

                if (!cfg_key_is_secret(l->items[i].name))
                        continue;
                if (!cfg_value_is_reference(written)) {
                        if (c->path[0] && cfg_world_readable(c->path))
                                cfg_warn(warnings, max, n,
                                         "%s: [%s] %s: a plain-text secret in a file that every user can read: "
                                         "chmod o-r the file, or write file:PATH or credential:NAME",
                                         c->path, section, l->items[i].name);
                        continue;
                }
                if (cfg_reference_path(written, path, sizeof(path), NULL) == 0 && cfg_world_readable(path))
                        cfg_warn(warnings, max, n, "%s: [%s] %s: the secret's file is readable by every user: "
                                 "chmod o-r it", c->path, section, l->items[i].name);
        }
}

size_t cfg_find_exposed_secrets(const cfg_t *c, errbuf_t *warnings, size_t max) {
        size_t n = 0;

        cfg_exposed_list(c, "kafka.client", &c->kafka_client, warnings, max, &n);
        cfg_exposed_list(c, "kafka.consumer", &c->kafka_consumer, warnings, max, &n);
        cfg_exposed_list(c, "kafka.producer", &c->kafka_producer, warnings, max, &n);
        if (c->metrics.tls_key[0] && cfg_world_readable(c->metrics.tls_key))
                cfg_warn(warnings, max, &n, "%s: [%s] %s: the private key's file is readable by every user: "
                         "chmod o-r it", c->path, "metrics", "tls_key");
        return n;
}

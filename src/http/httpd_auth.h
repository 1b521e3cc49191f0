/* httpd_auth: the metrics endpoint's basic-auth users, a file of
 * `user:bcrypt-hash` lines as Prometheus's web config (exporter-toolkit)
 * takes them, so that `htpasswd -nB user` output works.
 *
 * Hashes are checked with libxcrypt's crypt_r ($2y$, $2b$, $2a$; any other
 * scheme libxcrypt knows works too, but the file is meant for bcrypt). A
 * bcrypt check costs tens of milliseconds on purpose, and it runs on the
 * daemon's loop thread, so the last accepted user and password are kept
 * (in memory only) and a scrape repeating them skips the hash.
 *
 * Not here: the HTTP side (httpd.c), TLS (libmicrohttpd's GnuTLS). */
#ifndef INFERD_HTTPD_AUTH_H
#define INFERD_HTTPD_AUTH_H

#include <stdbool.h>

#include "core/errbuf.h"

typedef struct httpd_auth httpd_auth_t;

/* Reads path: one `user:hash` per line; empty lines and lines starting
 * with '#' are skipped. Errors name the file and the line:
 * "<path>: line 3: no ':' between the user and the hash". -ENOENT etc. when
 * it cannot be read; -EINVAL for a bad line or a file with no user. */
int httpd_auth_load(httpd_auth_t **ret, const char *path, errbuf_t *err);

/* Whether user and password match a line. */
bool httpd_auth_check(httpd_auth_t *a, const char *user, const char *password);

/* The number of users read. */
unsigned httpd_auth_users(const httpd_auth_t *a);

/* Wipes the cached password. NULL is a no-op. */
void httpd_auth_free(httpd_auth_t *a);

#endif

/* httpd_auth: the metrics endpoint's basic-auth users, a file of
 * `user:bcrypt-hash` lines as Prometheus's web config (exporter-toolkit)
 * takes them, so that `htpasswd -nB user` output works.
 *
 * Hashes are checked with libxcrypt's crypt_r ($2y$, $2b$, $2a$; any other
 * scheme libxcrypt knows works too, but the file is meant for bcrypt). A
 * bcrypt check costs tens of milliseconds on purpose, so it never runs on
 * the daemon's loop thread: httpd_authq.c runs httpd_auth_verify on a
 * worker of its own. The last accepted user and password are kept (in
 * memory only): a scrape repeating them costs a compare on the loop
 * (httpd_auth_cached), no hash.
 *
 * An unknown user costs what a known one does: the password is hashed
 * against a known user's hash all the same, and refused. The answer is the
 * same false, so neither the time nor the answer says which names exist.
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

/* Whether user and password match a line: httpd_auth_cached, else
 * httpd_auth_verify and, on a match, httpd_auth_remember. One thread (the
 * tests', inferd-run's); the daemon splits it across its two. */
bool httpd_auth_check(httpd_auth_t *a, const char *user, const char *password);

/* Whether user and password are the last pair accepted: a compare, no
 * hash. The loop thread (the only one that calls httpd_auth_remember). */
bool httpd_auth_cached(const httpd_auth_t *a, const char *user, const char *password);

/* The full check (a bcrypt, tens of ms), an unknown user as costly as a
 * known one. Thread-safe against httpd_auth_cached and _remember, but one
 * caller at a time (it uses a's crypt state). */
bool httpd_auth_verify(httpd_auth_t *a, const char *user, const char *password);

/* Keeps user and password as the last pair accepted, after a
 * httpd_auth_verify that matched. The loop thread. */
void httpd_auth_remember(httpd_auth_t *a, const char *user, const char *password);

/* The number of users read. */
unsigned httpd_auth_users(const httpd_auth_t *a);

/* Wipes the cached password. NULL is a no-op. */
void httpd_auth_free(httpd_auth_t *a);

#endif

/* httpd_auth: basic-auth users checked with libxcrypt. See httpd_auth.h. */
#include "http/httpd_auth.h"

#include <crypt.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"

typedef struct httpd_user {
        char *name;                     /* owned */
        char *hash;                     /* owned: crypt(3) text, e.g. $2y$10$... */
} httpd_user_t;

struct httpd_auth {
        httpd_user_t *users;            /* owned, n */
        unsigned n;
        struct crypt_data *cd;          /* crypt_r's ~32KiB of state, owned */
        /* The last pair accepted, so that repeated scrapes cost no hash. */
        char *ok_user, *ok_password;    /* owned; wiped on change and free */
};

unsigned httpd_auth_users(const httpd_auth_t *a) {
        return a->n;
}

static void httpd_auth_forget(httpd_auth_t *a) {
        if (a->ok_password)
                explicit_bzero(a->ok_password, strlen(a->ok_password));
        free(a->ok_password);
        free(a->ok_user);
        a->ok_user = a->ok_password = NULL;
}

void httpd_auth_free(httpd_auth_t *a) {
        if (!a)
                return;
        httpd_auth_forget(a);
        for (unsigned i = 0; i < a->n; i++) {
                free(a->users[i].name);
                free(a->users[i].hash);
        }
        free(a->users);
        free(a->cd);
        free(a);
}

/* Compares without stopping at the first difference. */
static bool httpd_auth_equal(const char *x, const char *y) {
        size_t nx = strlen(x), ny = strlen(y);
        unsigned char d = nx != ny;

        for (size_t i = 0; i < nx && i < ny; i++)
                d |= (unsigned char)(x[i] ^ y[i]);
        return d == 0;
}

int httpd_auth_load(httpd_auth_t **ret, const char *path, errbuf_t *err) {
        httpd_auth_t *a = NULL;
        char *text = NULL, *line, *next, *colon;
        unsigned lineno = 0;
        int r;

        r = cfg_read_file_text(path, "basic auth users file", &text, err);
        if (r < 0)
                return r;
        a = calloc(1, sizeof(*a));
        if (!a || !(a->cd = calloc(1, sizeof(*a->cd)))) {
                r = -ENOMEM;
                goto fail;
        }
        for (line = text; line; line = next) {
                httpd_user_t *u;
                size_t len;

                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                lineno++;
                len = strlen(line);
                if (len && line[len - 1] == '\r')
                        line[--len] = '\0';
                if (!*line || *line == '#')
                        continue;
                colon = strchr(line, ':');
                if (!colon || colon == line) {
                        r = errbuf_set(err, -EINVAL, "%s: line %u: not user:hash (htpasswd -nB output)", path,
                                       lineno);
                        goto fail;
                }
                *colon = '\0';
                if (colon[1] != '$') {
                        r = errbuf_set(err, -EINVAL, "%s: line %u: user '%s': the hash is not a crypt(3) hash "
                                       "($2y$... from htpasswd -nB)", path, lineno, line);
                        goto fail;
                }
                u = realloc(a->users, (a->n + 1) * sizeof(*u));
                if (!u) {
                        r = -ENOMEM;
                        goto fail;
                }
                a->users = u;
                u[a->n].name = strdup(line);
                u[a->n].hash = strdup(colon + 1);
                if (!u[a->n].name || !u[a->n].hash) {
                        free(u[a->n].name);
                        free(u[a->n].hash);
                        r = -ENOMEM;
                        goto fail;
                }
                a->n++;
        }
        if (a->n == 0) {
                r = errbuf_set(err, -EINVAL, "%s: no user:hash line", path);
                goto fail;
        }
        free(text);
        *ret = a;
        return 0;
fail:
        free(text);
        httpd_auth_free(a);
        return r;
}

bool httpd_auth_cached(const httpd_auth_t *a, const char *user, const char *password) {
        return a->ok_user && strcmp(a->ok_user, user) == 0 && httpd_auth_equal(a->ok_password, password);
}

bool httpd_auth_verify(httpd_auth_t *a, const char *user, const char *password) {
        const httpd_user_t *u = NULL;
        const char *h;

        for (unsigned i = 0; i < a->n; i++)
                if (strcmp(a->users[i].name, user) == 0)
                        u = &a->users[i];
        /* An unknown user: the same hash as the first user's (same scheme,
         * same cost), whose answer is then thrown away. */
        h = crypt_r(password, u ? u->hash : a->users[0].hash, a->cd);
        if (!u)
                return false;
        /* A failure gives NULL or a token starting with '*', never a match. */
        return h && *h != '*' && httpd_auth_equal(h, u->hash);
}

void httpd_auth_remember(httpd_auth_t *a, const char *user, const char *password) {
        httpd_auth_forget(a);
        a->ok_user = strdup(user);
        a->ok_password = strdup(password);
        if (!a->ok_user || !a->ok_password)
                httpd_auth_forget(a);
}

bool httpd_auth_check(httpd_auth_t *a, const char *user, const char *password) {
        if (httpd_auth_cached(a, user, password))
                return true;
        if (!httpd_auth_verify(a, user, password))
                return false;
        httpd_auth_remember(a, user, password);
        return true;
}

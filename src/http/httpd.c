/* httpd: libmicrohttpd in external-epoll mode on the daemon's sd-event
 * loop. See httpd.h.
 *
 * libmicrohttpd keeps its connections in an epoll set of its own; that
 * set's fd becomes readable whenever a connection needs work, so one
 * sd-event io source on it covers every connection. Idle connections time
 * out through MHD_get_timeout, which arms a one-shot timer after every
 * MHD_run. The listening socket is ours, with an io source of its own: every
 * connection is accepted at once and handed over (MHD_add_connection), and
 * one over the limits is closed by libmicrohttpd there and then.
 *
 * Why not libmicrohttpd's own accept: at its connection limit it takes the
 * listening socket out of its epoll set, and in this mode it puts it back
 * only in a later MHD_run, which nothing called once the last connections
 * had closed (the port was dead until a restart). And what waited in the
 * backlog meanwhile was often a client that had already left: libmicrohttpd
 * reads such a connection's last bytes, misses the end of the stream that
 * came with them (edge-triggered, and no new edge comes), and holds the slot
 * until the idle timeout. Accepting at once leaves nothing to go stale.
 *
 * Knowing each fd from its accept on, it keeps a record per connection
 * (libmicrohttpd's socket context): when it was accepted, whether a whole
 * request header has come. A connection past its header deadline is shut
 * down (shutdown(2): libmicrohttpd then reads the end and closes it), so a
 * client trickling a byte every few seconds cannot hold a slot for good,
 * which libmicrohttpd's idle timeout (reset by any byte) allows.
 *
 * Basic auth never hashes on the loop: a request whose credentials are not
 * the last pair accepted is suspended (MHD_suspend_connection) while the
 * worker (httpd_authq.c) hashes, and resumed by its answer.
 *
 * Not a general web server: GET and HEAD only, no request bodies. */
#include "http/httpd.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <microhttpd.h>

#include "core/units.h"
#include "config/cfg.h"
#include "http/httpd_auth.h"
#include "http/httpd_authq.h"
#include "http/httpd_limit.h"

#define HTTPD_BACKLOG 64

/* After accept fails for want of a resource (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM), the listening socket stays readable: it is left alone this long
 * instead of being retried on every loop turn. */
#define HTTPD_ACCEPT_RETRY_US (100 * 1000ULL)

/* Checks of passwords waiting at most, before a new one gets 503. */
#define HTTPD_AUTH_MAX_PENDING 16

/* Limiter table sizes: addresses (connections a second, failed logins) and
 * user names (failed logins). */
#define HTTPD_LIMIT_ADDRS 4096
#define HTTPD_LIMIT_USERS 1024

/* The TLS handshake bucket's key in the address table (hashes are never 1
 * but by a 2^-64 chance). */
#define HTTPD_TLS_KEY 1

const char *const httpd_reject_names[HTTPD_REJECT_MAX] = {
        [HTTPD_REJECT_AUTH_LIMITED] = "auth-limited",
        [HTTPD_REJECT_AUTH_BUSY] = "auth-busy",
        [HTTPD_REJECT_CONNECTION_RATE] = "connection-rate",
        [HTTPD_REJECT_TLS_RATE] = "tls-rate",
        [HTTPD_REJECT_HEADER_TIMEOUT] = "header-timeout",
};

/* One connection, from libmicrohttpd's start notice to its close notice
 * (its socket context). */
typedef struct httpd_conn {
        struct httpd_conn *prev, *next;
        struct MHD_Connection *c;
        int fd;                         /* libmicrohttpd's */
        uint64_t deadline_us;           /* a whole header by then, or shut down */
        bool header_done;               /* the current request's header has come */
        bool shut;                      /* shut down past its deadline */
        bool suspended;                 /* waiting for the password worker */
} httpd_conn_t;

/* One request's state (libmicrohttpd's con_cls): its basic auth. */
typedef enum httpd_authn { HTTPD_AUTHN_NONE, HTTPD_AUTHN_PENDING, HTTPD_AUTHN_OK, HTTPD_AUTHN_FAILED } httpd_authn_t;

typedef struct httpd_req {
        httpd_t *h;
        struct MHD_Connection *c;
        httpd_conn_t *conn;             /* borrowed: lives as long as the connection */
        httpd_authn_t authn;
        bool had_credentials;
        uint64_t addr_key, user_key;    /* httpd_limit keys */
} httpd_req_t;

struct httpd {
        struct MHD_Daemon *mhd;
        int listen_fd;                  /* owned */
        sd_event_source *io, *accept_io, *accept_retry, *timer, *deadline;
        httpd_handler_fn handler;
        void *userdata;
        httpd_limits_t limits;
        httpd_auth_t *auth;             /* owned; NULL = no basic auth */
        httpd_authq_t *authq;           /* owned; with auth */
        httpd_limit_t *addrs, *users;   /* owned */
        httpd_limit_t *tls_addrs;       /* owned: TLS handshakes per address */
        httpd_conn_t *conns;            /* every open connection */
        httpd_stats_t stats;
        char *open_paths;               /* owned; space-separated paths served without auth, or NULL */
        char *tls_cert, *tls_key;       /* owned PEM text, for libmicrohttpd's life */
};

static uint64_t httpd_now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

void httpd_add_stats(const httpd_t *h, httpd_stats_t *ret) {
        if (!h)
                return;
        ret->auth_failures += h->stats.auth_failures;
        for (int i = 0; i < HTTPD_REJECT_MAX; i++)
                ret->rejected[i] += h->stats.rejected[i];
}

#define HTTPD_REALM "inferd"

/* Whether url is one of h->open_paths, served without basic auth. */
static bool httpd_is_open(const httpd_t *h, const char *url) {
        size_t n = strlen(url);

        for (const char *p = h->open_paths; p && *p;) {
                size_t len = strcspn(p, " ");

                if (len == n && !strncmp(p, url, n))
                        return true;
                p += len;
                p += strspn(p, " ");
        }
        return false;
}

/* MHD_run passes httpd_serve_pending makes. */
#define HTTPD_PENDING_PASSES 4

/* Arms the deadline timer for the earliest connection still owing its
 * header; off when none does. */
static void httpd_rearm_deadline(httpd_t *h) {
        uint64_t first = UINT64_MAX;

        if (!h->limits.header_timeout_s)
                return;
        for (httpd_conn_t *k = h->conns; k; k = k->next)
                if (!k->header_done && !k->shut && !k->suspended && k->deadline_us < first)
                        first = k->deadline_us;
        if (first == UINT64_MAX) {
                sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF);
                return;
        }
        sd_event_source_set_time(h->deadline, first);
        sd_event_source_set_enabled(h->deadline, SD_EVENT_ONESHOT);
}

static void httpd_rearm(httpd_t *h) {
        MHD_UNSIGNED_LONG_LONG ms;
        uint64_t now;

        httpd_rearm_deadline(h);
        if (MHD_get_timeout(h->mhd, &ms) != MHD_YES) {
                sd_event_source_set_enabled(h->timer, SD_EVENT_OFF);
                return;
        }
        sd_event_now(sd_event_source_get_event(h->timer), CLOCK_MONOTONIC, &now);
        sd_event_source_set_time(h->timer, now + (uint64_t)ms * 1000ULL);
        sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
}

static int httpd_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        httpd_t *h = userdata;

        (void)s;
        (void)fd;
        (void)revents;
        MHD_run(h->mhd);
        httpd_rearm(h);
        return 0;
}

/* Whether a new connection from addr is within the rates: its address's
 * connections a second, and with TLS its address's handshakes a second and
 * then every address's (each new TLS connection is a private-key operation
 * on the loop; the address's own bucket first, so that a few busy
 * addresses do not drain the common one for all). The bursts allow two
 * seconds' worth. */
static bool httpd_admit(httpd_t *h, const struct sockaddr *addr, uint64_t now_us) {
        const httpd_limits_t *l = &h->limits;
        uint64_t key = httpd_limit_key_addr(h->addrs, addr);

        if (l->connections_per_ip_per_s &&
            !httpd_limit_take(h->addrs, key, l->connections_per_ip_per_s, 2.0 * l->connections_per_ip_per_s, now_us)) {
                h->stats.rejected[HTTPD_REJECT_CONNECTION_RATE]++;
                return false;
        }
        if (h->tls_cert && l->tls_handshakes_per_ip_per_s &&
            !httpd_limit_take(h->tls_addrs, key, l->tls_handshakes_per_ip_per_s, 2.0 * l->tls_handshakes_per_ip_per_s,
                              now_us)) {
                h->stats.rejected[HTTPD_REJECT_TLS_RATE]++;
                return false;
        }
        if (h->tls_cert && l->tls_handshakes_per_s &&
            !httpd_limit_take(h->addrs, HTTPD_TLS_KEY, l->tls_handshakes_per_s, 2.0 * l->tls_handshakes_per_s,
                              now_us)) {
                h->stats.rejected[HTTPD_REJECT_TLS_RATE]++;
                return false;
        }
        return true;
}

/* Accepts every connection waiting on the listening socket and hands each
 * within the rates to libmicrohttpd, which closes it at once when it is
 * over a limit of connections held. */
static void httpd_accept(httpd_t *h) {
        for (;;) {
                struct sockaddr_storage addr;
                socklen_t len = sizeof(addr);
                int fd = accept4(h->listen_fd, (struct sockaddr *)&addr, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);

                if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
                        continue;
                if (fd < 0 && errno != EAGAIN) {
                        /* EMFILE and the like: the connection stays queued;
                         * try again shortly, not on every loop turn. */
                        uint64_t now;

                        sd_event_now(sd_event_source_get_event(h->accept_io), CLOCK_MONOTONIC, &now);
                        sd_event_source_set_enabled(h->accept_io, SD_EVENT_OFF);
                        sd_event_source_set_time(h->accept_retry, now + HTTPD_ACCEPT_RETRY_US);
                        sd_event_source_set_enabled(h->accept_retry, SD_EVENT_ONESHOT);
                }
                if (fd < 0)
                        return;
                if (!httpd_admit(h, (struct sockaddr *)&addr, httpd_now_us())) {
                        close(fd);
                        continue;
                }
                /* fd belongs to libmicrohttpd from here, also on MHD_NO. */
                (void)MHD_add_connection(h->mhd, fd, (struct sockaddr *)&addr, len);
        }
}

static int httpd_on_accept(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        httpd_t *h = userdata;

        (void)s;
        (void)fd;
        (void)revents;
        httpd_accept(h);
        MHD_run(h->mhd);
        httpd_rearm(h);
        return 0;
}

static int httpd_on_accept_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        httpd_t *h = userdata;

        (void)s;
        (void)usec;
        sd_event_source_set_enabled(h->accept_io, SD_EVENT_ON);
        return 0;
}

void httpd_serve_pending(httpd_t *h) {
        if (!h)
                return;
        /* Reading the request and writing the answer may each take one
         * pass; requests that waited in the backlog are complete. */
        httpd_accept(h);
        for (int i = 0; i < HTTPD_PENDING_PASSES; i++) {
                httpd_authq_dispatch(h->authq);
                MHD_run(h->mhd);
        }
        httpd_rearm(h);
}

static int httpd_on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        httpd_t *h = userdata;

        (void)s;
        (void)usec;
        MHD_run(h->mhd);
        httpd_rearm(h);
        return 0;
}

/* The header deadline: every connection past it, still without a whole
 * request header, is shut down; libmicrohttpd reads the end and closes it
 * in the MHD_run below. */
static int httpd_on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        httpd_t *h = userdata;
        uint64_t now = httpd_now_us();

        (void)s;
        (void)usec;
        for (httpd_conn_t *k = h->conns; k; k = k->next)
                if (!k->header_done && !k->shut && !k->suspended && k->deadline_us <= now) {
                        shutdown(k->fd, SHUT_RDWR);
                        k->shut = true;
                        h->stats.rejected[HTTPD_REJECT_HEADER_TIMEOUT]++;
                }
        MHD_run(h->mhd);
        httpd_rearm(h);
        return 0;
}

/* libmicrohttpd's notice of a connection's start and close: its record. */
static void httpd_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe) {
        httpd_t *h = cls;
        httpd_conn_t *k = *socket_context;
        const union MHD_ConnectionInfo *info;

        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
                k = calloc(1, sizeof(*k));
                if (!k || !info) {
                        /* No record: no deadline for this one (out of memory). */
                        free(k);
                        return;
                }
                k->c = c;
                k->fd = info->connect_fd;
                k->deadline_us = httpd_now_us() + (uint64_t)h->limits.header_timeout_s * 1000000ULL;
                k->next = h->conns;
                if (h->conns)
                        h->conns->prev = k;
                h->conns = k;
                *socket_context = k;
                return;
        }
        if (!k)
                return;
        if (k->prev)
                k->prev->next = k->next;
        else
                h->conns = k->next;
        if (k->next)
                k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
}

/* A request answered (or dropped): its state goes, and the connection owes
 * the next request's header within the idle timeout and the deadline. */
static void httpd_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                               enum MHD_RequestTerminationCode toe) {
        httpd_t *h = cls;
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        httpd_conn_t *k = info ? info->socket_context : NULL;

        (void)toe;
        if (k) {
                k->header_done = false;
                k->suspended = false;
                k->deadline_us = httpd_now_us() +
                                 (uint64_t)(h->limits.timeout_s + h->limits.header_timeout_s) * 1000000ULL;
        }
        free(*con_cls);
        *con_cls = NULL;
}

static enum MHD_Result httpd_queue(struct MHD_Connection *c, unsigned status, const char *content_type, char *body,
                                   size_t len) {
        struct MHD_Response *resp;
        enum MHD_Result ok;

        /* body (malloc'd) belongs to the response from here, or is freed. */
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        ok = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ok;
}

/* A refusal with a fixed text, and the connection closed after it (a client
 * that fails cannot pipeline its next try behind it). retry_after_s > 0
 * adds Retry-After; realm: a 401 asking for basic auth. */
static enum MHD_Result httpd_refuse(struct MHD_Connection *c, unsigned status, const char *text,
                                    unsigned retry_after_s, bool basic_auth) {
        struct MHD_Response *resp;
        enum MHD_Result q;
        char retry[16];

        resp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        if (retry_after_s) {
                snprintf(retry, sizeof(retry), "%u", retry_after_s);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
        }
        q = basic_auth ? MHD_queue_basic_auth_fail_response(c, HTTPD_REALM, resp) : MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return q;
}

/* The worker's answer (httpd_authq), on the loop thread: counted against
 * the address and the user, or their failures forgotten, and the request
 * resumed (libmicrohttpd calls httpd_on_request again). */
static void httpd_on_auth_done(void *userdata, void *cookie, bool ok, const char *user) {
        httpd_t *h = userdata;
        httpd_req_t *rq = cookie;
        uint64_t now = httpd_now_us();

        (void)user;
        rq->authn = ok ? HTTPD_AUTHN_OK : HTTPD_AUTHN_FAILED;
        if (ok) {
                httpd_limit_succeed(h->addrs, rq->addr_key);
                httpd_limit_succeed(h->users, rq->user_key);
        } else {
                httpd_limit_fail(h->addrs, rq->addr_key, &httpd_backoff_default, now);
                httpd_limit_fail(h->users, rq->user_key, &httpd_backoff_default, now);
        }
        if (rq->conn)
                rq->conn->suspended = false;
        MHD_resume_connection(rq->c);
        /* In this mode libmicrohttpd does not wake its epoll fd for a
         * resumed connection: MHD_run at once, through the timer. */
        sd_event_source_set_time(h->timer, 1);
        sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
}

/* Results of httpd_authenticate besides an MHD result to return. */
#define HTTPD_AUTH_SERVE (-1)

/* Basic auth for one request, without a hash on the loop: the last pair
 * accepted passes at once; a client held back by its failures (address or
 * user) gets 429; else the worker checks while the request waits suspended.
 * An open path is served whatever the answer (rq->authn says how much it
 * may be told) and never refused. Returns HTTPD_AUTH_SERVE, or what
 * httpd_on_request returns. */
static int httpd_authenticate(httpd_t *h, struct MHD_Connection *c, httpd_req_t *rq, bool open) {
        const union MHD_ConnectionInfo *ci;
        char *password = NULL, *user;
        uint64_t now, held, user_held;
        int r;

        if (rq->authn == HTTPD_AUTHN_OK)
                return HTTPD_AUTH_SERVE;
        if (rq->authn == HTTPD_AUTHN_FAILED) {
                h->stats.auth_failures++;
                return open ? HTTPD_AUTH_SERVE
                            : (int)httpd_refuse(c, MHD_HTTP_UNAUTHORIZED,
                                           "401 unauthorized: basic auth with a [metrics] basic_auth_users user\n", 0,
                                           true);
        }
        user = MHD_basic_auth_get_username_password(c, &password);
        if (!user || !password) {
                MHD_free(user);
                MHD_free(password);
                if (open)
                        return HTTPD_AUTH_SERVE;
                h->stats.auth_failures++;
                return (int)httpd_refuse(c, MHD_HTTP_UNAUTHORIZED,
                                    "401 unauthorized: basic auth with a [metrics] basic_auth_users user\n", 0, true);
        }
        rq->had_credentials = true;
        if (httpd_auth_cached(h->auth, user, password)) {
                /* The user's own scrape: the failures others made in its
                 * name are forgotten (its address's are not). */
                httpd_limit_succeed(h->users, httpd_limit_key_name(h->users, user));
                rq->authn = HTTPD_AUTHN_OK;
                r = HTTPD_AUTH_SERVE;
                goto out;
        }
        now = httpd_now_us();
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        rq->addr_key = ci && ci->client_addr ? httpd_limit_key_addr(h->addrs, ci->client_addr) : 0;
        rq->user_key = httpd_limit_key_name(h->users, user);
        held = httpd_limit_blocked_us(h->addrs, rq->addr_key, &httpd_backoff_default, now);
        user_held = httpd_limit_blocked_us(h->users, rq->user_key, &httpd_backoff_default, now);
        if (user_held > held)
                held = user_held;
        if (held) {
                h->stats.rejected[HTTPD_REJECT_AUTH_LIMITED]++;
                r = open ? HTTPD_AUTH_SERVE
                         : (int)httpd_refuse(c, MHD_HTTP_TOO_MANY_REQUESTS,
                                        "429 too many failed logins: wait as Retry-After says\n",
                                        (unsigned)((held + 999999) / 1000000), false);
                goto out;
        }
        rq->c = c;
        r = httpd_authq_submit(h->authq, user, password, rq);
        if (r < 0) {
                h->stats.rejected[HTTPD_REJECT_AUTH_BUSY]++;
                r = open ? HTTPD_AUTH_SERVE
                         : (int)httpd_refuse(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                                        "503 busy checking other logins: retry shortly\n", 1, false);
                goto out;
        }
        rq->authn = HTTPD_AUTHN_PENDING;
        if (rq->conn)
                rq->conn->suspended = true;
        MHD_suspend_connection(c);
        r = MHD_YES;
out:
        explicit_bzero(password, strlen(password));
        MHD_free(user);
        MHD_free(password);
        return r;
}

/* The request's state, made on its first call (its header is whole). */
static httpd_req_t *httpd_req_of(httpd_t *h, struct MHD_Connection *c, void **con_cls) {
        const union MHD_ConnectionInfo *info;
        httpd_req_t *rq = *con_cls;

        if (rq)
                return rq;
        rq = calloc(1, sizeof(*rq));
        if (!rq)
                return NULL;
        rq->h = h;
        rq->c = c;
        info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        rq->conn = info ? info->socket_context : NULL;
        if (rq->conn)
                rq->conn->header_done = true;
        *con_cls = rq;
        return rq;
}

static enum MHD_Result httpd_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                        const char *version, const char *upload_data, size_t *upload_data_size,
                                        void **con_cls) {
        httpd_t *h = cls;
        httpd_response_t resp = { .status = 500, .content_type = "text/plain; charset=utf-8" };
        httpd_req_t *rq;
        bool open;
        char *body;
        int r;

        (void)version;
        (void)upload_data;
        rq = httpd_req_of(h, c, con_cls);
        if (!rq)
                return MHD_NO;
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
                body = strdup("only GET and HEAD\n");
                return body ? httpd_queue(c, MHD_HTTP_METHOD_NOT_ALLOWED, resp.content_type, body, strlen(body))
                            : MHD_NO;
        }
        if (*upload_data_size)
                return MHD_NO;          /* a GET with a body: drop the connection */
        open = httpd_is_open(h, url);
        if (h->auth && (r = httpd_authenticate(h, c, rq, open)) != HTTPD_AUTH_SERVE)
                return (enum MHD_Result)r;
        r = h->handler(h->userdata, &(httpd_request_t){ .path = url, .anonymous = h->auth && rq->authn != HTTPD_AUTHN_OK },
                       &resp);
        if (r < 0 || !resp.body) {
                free(resp.body);
                body = strdup("internal error\n");
                return body ? httpd_queue(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", body,
                                          strlen(body))
                            : MHD_NO;
        }
        return httpd_queue(c, resp.status, resp.content_type, resp.body, resp.len);
}

/* Resolves and binds listen; returns the listening fd or -errno. */
static int httpd_bind(const char *listen_addr, errbuf_t *err) {
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct addrinfo *res = NULL;
        char host[256], port[16];
        int fd = -1, one = 1, r;

        unsigned port_number;

        if (units_parse_listen(listen_addr, host, sizeof(host), &port_number) < 0)
                return errbuf_set(err, -EINVAL, "Failed to listen on '%s': not host:port", listen_addr);
        snprintf(port, sizeof(port), "%u", port_number);
        r = getaddrinfo(host, port, &hints, &res);
        if (r != 0)
                return errbuf_set(err, -EADDRNOTAVAIL, "Failed to listen on '%s': %s", listen_addr,
                                  r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
        /* The first address only: "localhost" may give ::1 and 127.0.0.1,
         * and a scraper is configured with one of them. */
        fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, res->ai_protocol);
        if (fd < 0) {
                r = -errno;
                goto fail;
        }
        /* SO_REUSEADDR lets a restarted daemon bind while the old one's
         * connections sit in TIME_WAIT; on Linux it never lets two
         * listeners share the port. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (res->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, HTTPD_BACKLOG) < 0) {
                r = -errno;
                goto fail;
        }
        freeaddrinfo(res);
        return fd;
fail:
        errbuf_set(err, r, "Failed to listen on '%s': %s", listen_addr, strerror(-r));
        if (fd >= 0)
                close(fd);
        freeaddrinfo(res);
        return r;
}

int httpd_new(httpd_t **ret, sd_event *event, const char *listen_addr, const httpd_limits_t *limits,
              httpd_handler_fn handler, void *userdata, errbuf_t *err) {
        return httpd_new_secure(ret, event, listen_addr, limits, NULL, handler, userdata, err);
}

/* Reads what sec names into h. */
static int httpd_load_security(httpd_t *h, const httpd_security_t *sec, errbuf_t *err) {
        int r;

        if (sec->tls_cert_path && sec->tls_key_path) {
                if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
                        return errbuf_set(err, -EOPNOTSUPP, "this libmicrohttpd has no TLS (GnuTLS) support");
                if ((r = cfg_read_file_text(sec->tls_cert_path, "TLS certificate file", &h->tls_cert, err)) < 0 ||
                    (r = cfg_read_file_text(sec->tls_key_path, "TLS key file", &h->tls_key, err)) < 0)
                        return r;
        }
        if (sec->users_path) {
                r = httpd_auth_load(&h->auth, sec->users_path, err);
                if (r < 0)
                        return r;
        }
        if (sec->open_paths && !(h->open_paths = strdup(sec->open_paths)))
                return -ENOMEM;
        return 0;
}

int httpd_new_secure(httpd_t **ret, sd_event *event, const char *listen_addr, const httpd_limits_t *limits,
                     const httpd_security_t *sec, httpd_handler_fn handler, void *userdata, errbuf_t *err) {
        const union MHD_DaemonInfo *info;
        httpd_t *h;
        int r;

        assert(ret && event && listen_addr && limits && handler);
        assert(limits->max_connections > 0 && limits->timeout_s > 0);
        h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->listen_fd = -1;
        h->handler = handler;
        h->userdata = userdata;
        h->limits = *limits;
        if ((r = httpd_limit_new(&h->addrs, HTTPD_LIMIT_ADDRS)) < 0 ||
            (r = httpd_limit_new(&h->users, HTTPD_LIMIT_USERS)) < 0 ||
            (r = httpd_limit_new(&h->tls_addrs, HTTPD_LIMIT_ADDRS)) < 0)
                goto fail;
        if (sec && (r = httpd_load_security(h, sec, err)) < 0)
                goto fail;
        if (h->auth && (r = httpd_authq_new(&h->authq, h->auth, event, HTTPD_AUTH_MAX_PENDING, httpd_on_auth_done,
                                            h)) < 0) {
                errbuf_set(err, r, "Failed to start the password worker: %s", strerror(-r));
                goto fail;
        }
        r = httpd_bind(listen_addr, err);
        if (r < 0)
                goto fail;
        h->listen_fd = r;
        /* MHD_USE_EPOLL without MHD_USE_INTERNAL_POLLING_THREAD: no thread;
         * MHD_run does the work when we call it. No listening socket of its
         * own: httpd_accept hands it every connection (with TLS, each one
         * starts its handshake there). With TLS the key and certificate go
         * last: MHD_OPTION_END ends the list early when they are not given. */
        h->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | (h->tls_cert ? MHD_USE_TLS : 0) |
                                          (h->auth ? MHD_ALLOW_SUSPEND_RESUME : 0),
                                  0, NULL, NULL, httpd_on_request, h, MHD_OPTION_CONNECTION_LIMIT,
                                  limits->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                  limits->max_connections_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, limits->timeout_s,
                                  MHD_OPTION_NOTIFY_CONNECTION, httpd_on_connection, h, MHD_OPTION_NOTIFY_COMPLETED,
                                  httpd_on_completed, h, h->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
                                  h->tls_cert, MHD_OPTION_HTTPS_MEM_KEY, h->tls_key, MHD_OPTION_END);
        if (!h->mhd) {
                r = errbuf_set(err, -EIO, "Failed to start the HTTP server on '%s' (libmicrohttpd refused%s)",
                               listen_addr,
                               h->tls_cert ? ": is tls_cert a PEM certificate and tls_key its unencrypted PEM key?"
                                           : "");
                goto fail;
        }
        info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        if (!info || info->epoll_fd < 0) {
                r = errbuf_set(err, -EIO, "Failed to start the HTTP server on '%s': libmicrohttpd has no epoll fd",
                               listen_addr);
                goto fail;
        }
        if ((r = sd_event_add_io(event, &h->io, info->epoll_fd, EPOLLIN, httpd_on_io, h)) < 0 ||
            (r = sd_event_add_io(event, &h->accept_io, h->listen_fd, EPOLLIN, httpd_on_accept, h)) < 0 ||
            (r = sd_event_add_time(event, &h->accept_retry, CLOCK_MONOTONIC, 0, 0, httpd_on_accept_retry, h)) < 0 ||
            (r = sd_event_source_set_enabled(h->accept_retry, SD_EVENT_OFF)) < 0 ||
            (r = sd_event_add_time(event, &h->timer, CLOCK_MONOTONIC, 0, 0, httpd_on_timer, h)) < 0 ||
            (r = sd_event_add_time(event, &h->deadline, CLOCK_MONOTONIC, 0, 0, httpd_on_deadline, h)) < 0 ||
            (r = sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF)) < 0) {
                errbuf_set(err, r, "Failed to add the HTTP server's event sources: %s", strerror(-r));
                goto fail;
        }
        httpd_rearm(h);
        *ret = h;
        return 0;
fail:
        httpd_free(h);
        return r;
}

void httpd_free(httpd_t *h) {
        if (!h)
                return;
        /* The sources go before the daemon whose epoll fd they watch. */
        sd_event_source_disable_unref(h->io);
        sd_event_source_disable_unref(h->accept_io);
        sd_event_source_disable_unref(h->accept_retry);
        sd_event_source_disable_unref(h->timer);
        sd_event_source_disable_unref(h->deadline);
        /* The worker first (no answer comes after this), then every request
         * still waiting for one is resumed: libmicrohttpd refuses to stop
         * with a connection suspended. */
        httpd_authq_free(h->authq);
        for (httpd_conn_t *k = h->conns; k; k = k->next)
                if (k->suspended) {
                        k->suspended = false;
                        MHD_resume_connection(k->c);
                }
        if (h->mhd)
                MHD_stop_daemon(h->mhd);
        if (h->listen_fd >= 0)
                close(h->listen_fd);
        httpd_auth_free(h->auth);
        httpd_limit_free(h->addrs);
        httpd_limit_free(h->users);
        httpd_limit_free(h->tls_addrs);
        free(h->open_paths);
        free(h->tls_cert);
        if (h->tls_key)
                explicit_bzero(h->tls_key, strlen(h->tls_key));
        free(h->tls_key);
        free(h);
}

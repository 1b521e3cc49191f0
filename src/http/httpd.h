/* httpd: a small HTTP server (libmicrohttpd) driven by the daemon's
 * sd-event loop, with no thread of its own.
 *
 * libmicrohttpd runs in its external-epoll mode: its epoll fd is one more
 * sd-event io source, MHD_get_timeout becomes a timer, and MHD_run is called
 * on either. Requests are therefore answered on the loop thread, between the
 * pipeline's events, so the handler must only format numbers it already has
 * (never block, never do I/O).
 *
 * The listening socket is bound here, not by libmicrohttpd, so that a port
 * that cannot be bound fails with a sentence that names the address.
 *
 * Optionally (httpd_new_secure) it speaks only HTTPS, through
 * libmicrohttpd's GnuTLS, and asks for HTTP basic auth (httpd_auth.h) on
 * every path but the ones that may stay open (the probes).
 *
 * It defends the loop it shares with the pipeline against clients that
 * hold no credentials: passwords are hashed on a worker thread
 * (httpd_authq.h) while the request waits suspended; failed logins are
 * counted per address and per user, and past a few the client gets 429
 * with Retry-After, no hash; a connection that has not sent a whole request
 * header within header_timeout_s is closed, whatever it trickles; new
 * connections a second are limited per address, TLS handshakes a second
 * per address and over all. What it refuses is counted (httpd_get_stats).
 *
 * Not here: what is served (the handler's, i.e. the daemon's), the
 * exposition format (metrics.c). */
#ifndef INFERD_HTTPD_H
#define INFERD_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "core/errbuf.h"

typedef struct httpd httpd_t;

/* What the handler is asked. */
typedef struct httpd_request {
        const char *path;
        /* Basic auth is on and this client did not pass it (an open path
         * asked without, or with wrong, credentials): tell it no more than
         * it needs. */
        bool anonymous;
} httpd_request_t;

/* What the handler answers. body is malloc'd; the server owns it from the
 * handler's return on (also when the handler fails). content_type is a
 * static string. */
typedef struct httpd_response {
        unsigned status;
        const char *content_type;
        char *body;
        size_t len;
} httpd_response_t;

/* Answers a GET (or HEAD) of req->path. Returns 0, or -errno (the client
 * then gets a 500). Called on the loop thread. */
typedef int (*httpd_handler_fn)(void *userdata, const httpd_request_t *req, httpd_response_t *ret);

/* What one server lets its clients hold. A connection over either limit is
 * accepted and closed at once; the listening socket is served again as soon
 * as connections close. */
typedef struct httpd_limits {
        unsigned max_connections;       /* > 0: connections held at once */
        unsigned max_connections_per_ip;        /* from one address; 0 = no limit of its own */
        unsigned timeout_s;             /* > 0: a connection idle this long is closed */
        /* A connection that has not sent a whole request header this long
         * after it was accepted (or after its last answer, plus timeout_s)
         * is closed; 0 = no deadline. */
        unsigned header_timeout_s;
        unsigned connections_per_ip_per_s;      /* new connections from one address; 0 = no limit */
        unsigned tls_handshakes_per_ip_per_s;   /* new TLS connections from one address; 0 = no limit */
        unsigned tls_handshakes_per_s;          /* new TLS connections, all addresses; 0 = no limit */
} httpd_limits_t;

/* Why a client was refused, for inferd_http_rejected_total{reason}. */
typedef enum httpd_reject {
        HTTPD_REJECT_AUTH_LIMITED,      /* 429: too many failed logins from its address or for its user */
        HTTPD_REJECT_AUTH_BUSY,         /* 503: the password worker's queue full */
        HTTPD_REJECT_CONNECTION_RATE,   /* closed at accept: its address's new connections a second */
        HTTPD_REJECT_TLS_RATE,          /* closed at accept: TLS handshakes a second (its address's or all) */
        HTTPD_REJECT_HEADER_TIMEOUT,    /* closed: no whole request header within header_timeout_s */
        HTTPD_REJECT_MAX,
} httpd_reject_t;

/* Their label values: "auth-limited", "auth-busy", "connection-rate",
 * "tls-rate", "header-timeout". */
extern const char *const httpd_reject_names[HTTPD_REJECT_MAX];

typedef struct httpd_stats {
        uint64_t auth_failures;         /* 401s: no, or wrong, credentials */
        uint64_t rejected[HTTPD_REJECT_MAX];
} httpd_stats_t;

/* Adds h's counts since its start to *ret. NULL is a no-op. */
void httpd_add_stats(const httpd_t *h, httpd_stats_t *ret);

/* Binds listen ("host:port", "[v6]:port"; the host is resolved once, here)
 * and starts serving on event within limits. Returns 0, or -errno with a
 * sentence naming the address in err. */
int httpd_new(httpd_t **ret, sd_event *event, const char *listen, const httpd_limits_t *limits,
              httpd_handler_fn handler, void *userdata, errbuf_t *err);

/* TLS and basic auth; any member may be NULL (off). */
typedef struct httpd_security {
        const char *tls_cert_path;      /* PEM certificate (chain); with tls_key_path */
        const char *tls_key_path;       /* PEM private key, unencrypted */
        const char *users_path;         /* user:bcrypt lines (httpd_auth_load) */
        const char *open_paths;         /* space-separated paths served without auth, e.g. "/healthz /livez" */
} httpd_security_t;

/* httpd_new, over TLS and/or with basic auth as sec says. The files are read
 * here, once (a new certificate takes a restart); errors name the file. A
 * request without the right user and password gets 401 (and the connection
 * is closed after it); past a few failures from its address or for its
 * user, 429 with Retry-After; a plain-HTTP request to a TLS endpoint fails
 * its handshake and is closed. An open path with credentials has them
 * checked all the same (the handler's req->anonymous), never refused. */
int httpd_new_secure(httpd_t **ret, sd_event *event, const char *listen, const httpd_limits_t *limits,
                     const httpd_security_t *sec, httpd_handler_fn handler, void *userdata, errbuf_t *err);

/* Answers, without waiting, the requests already waiting on the socket: for
 * a caller that holds the loop thread for a long step (the daemon's start-up
 * calls it between steps, so that /healthz says "starting" and a scrape is
 * not left hanging until READY). NULL is a no-op. */
void httpd_serve_pending(httpd_t *h);

/* Closes the socket and every connection. NULL is a no-op. */
void httpd_free(httpd_t *h);

#endif

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
#include <unistd.h>

#include <microhttpd.h>

#include "core/units.h"
#include "config/cfg.h"
#include "http/httpd_auth.h"

#define HTTPD_BACKLOG 64

/* After accept fails for want of a resource (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM), the listening socket stays readable: it is left alone this long
 * instead of being retried on every loop turn. */
#define HTTPD_ACCEPT_RETRY_US (100 * 1000ULL)

struct httpd {
        struct MHD_Daemon *mhd;
        int listen_fd;                  /* owned */
        sd_event_source *io, *accept_io, *accept_retry, *timer;
        httpd_handler_fn handler;
        void *userdata;
        httpd_auth_t *auth;             /* owned; NULL = no basic auth */
        char *open_paths;               /* owned; space-separated paths served without auth, or NULL */
        char *tls_cert, *tls_key;       /* owned PEM text, for libmicrohttpd's life */
};

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

static void httpd_rearm(httpd_t *h) {
        MHD_UNSIGNED_LONG_LONG ms;
        uint64_t now;

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

/* Accepts every connection waiting on the listening socket and hands each
 * to libmicrohttpd, which closes it at once when it is over a limit. */
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
        for (int i = 0; i < HTTPD_PENDING_PASSES; i++)
                MHD_run(h->mhd);
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

static enum MHD_Result httpd_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                        const char *version, const char *upload_data, size_t *upload_data_size,
                                        void **con_cls) {
        httpd_t *h = cls;
        httpd_response_t resp = { .status = 500, .content_type = "text/plain; charset=utf-8" };
        char *body;
        int r;

        (void)version;
        (void)upload_data;
        (void)con_cls;
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
                body = strdup("only GET and HEAD\n");
                return body ? httpd_queue(c, MHD_HTTP_METHOD_NOT_ALLOWED, resp.content_type, body, strlen(body))
                            : MHD_NO;
        }
        if (*upload_data_size)
                return MHD_NO;          /* a GET with a body: drop the connection */
        if (h->auth && !httpd_is_open(h, url)) {
                char *password = NULL, *user = MHD_basic_auth_get_username_password(c, &password);
                bool ok = user && password && httpd_auth_check(h->auth, user, password);
                struct MHD_Response *deny;
                enum MHD_Result q;

                if (password)
                        explicit_bzero(password, strlen(password));
                MHD_free(user);
                MHD_free(password);
                if (!ok) {
                        static const char text[] = "401 unauthorized: basic auth with a [metrics] basic_auth_users user\n";

                        deny = MHD_create_response_from_buffer(sizeof(text) - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
                        if (!deny)
                                return MHD_NO;
                        MHD_add_response_header(deny, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
                        q = MHD_queue_basic_auth_fail_response(c, HTTPD_REALM, deny);
                        MHD_destroy_response(deny);
                        return q;
                }
        }
        r = h->handler(h->userdata, url, &resp);
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
        if (sec && (r = httpd_load_security(h, sec, err)) < 0)
                goto fail;
        r = httpd_bind(listen_addr, err);
        if (r < 0)
                goto fail;
        h->listen_fd = r;
        /* MHD_USE_EPOLL without MHD_USE_INTERNAL_POLLING_THREAD: no thread;
         * MHD_run does the work when we call it. No listening socket of its
         * own: httpd_accept hands it every connection (with TLS, each one
         * starts its handshake there). With TLS the key and certificate go
         * last: MHD_OPTION_END ends the list early when they are not given. */
        h->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | (h->tls_cert ? MHD_USE_TLS : 0), 0, NULL,
                                  NULL, httpd_on_request, h, MHD_OPTION_CONNECTION_LIMIT, limits->max_connections,
                                  MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits->max_connections_per_ip,
                                  MHD_OPTION_CONNECTION_TIMEOUT, limits->timeout_s,
                                  h->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, h->tls_cert,
                                  MHD_OPTION_HTTPS_MEM_KEY, h->tls_key, MHD_OPTION_END);
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
            (r = sd_event_add_time(event, &h->timer, CLOCK_MONOTONIC, 0, 0, httpd_on_timer, h)) < 0) {
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
        if (h->mhd)
                MHD_stop_daemon(h->mhd);
        if (h->listen_fd >= 0)
                close(h->listen_fd);
        httpd_auth_free(h->auth);
        free(h->open_paths);
        free(h->tls_cert);
        if (h->tls_key)
                explicit_bzero(h->tls_key, strlen(h->tls_key));
        free(h->tls_key);
        free(h);
}

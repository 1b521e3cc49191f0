/* httpd_authq: basic-auth passwords checked on a worker thread, off the
 * daemon's loop.
 *
 * A bcrypt costs tens of milliseconds on purpose; on the loop thread every
 * wrong password a client sends would hold the pipeline (and the probes)
 * that long. Here the loop hands the user and password over
 * (httpd_authq_submit) and goes on; one worker thread hashes, at a lower
 * CPU priority than the loop, and its answers come back through an eventfd
 * that the sd-event loop watches, where `done` is called on the loop
 * thread. The queue is bounded: a full one refuses at once (-EBUSY)
 * instead of growing.
 *
 * Not here: which requests need a check, the limits on failures
 * (httpd.c, httpd_limit.h); the users and hashes (httpd_auth.h). */
#ifndef INFERD_HTTPD_AUTHQ_H
#define INFERD_HTTPD_AUTHQ_H

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "http/httpd_auth.h"

typedef struct httpd_authq httpd_authq_t;

/* A check's answer, on the loop thread: cookie as submitted, ok whether
 * the pair matched (then it is also remembered: httpd_auth_remember), user
 * the name submitted (borrowed for the call). */
typedef void (*httpd_authq_done_fn)(void *userdata, void *cookie, bool ok, const char *user);

/* Starts the worker for auth (borrowed; it must outlive q). Returns 0 or
 * -errno. */
int httpd_authq_new(httpd_authq_t **ret, httpd_auth_t *auth, sd_event *event, unsigned max_pending,
                    httpd_authq_done_fn done, void *userdata);

/* Queues a check of user and password (copied; the copy is wiped once
 * hashed). Returns 0, -EBUSY when max_pending checks are waiting, or
 * -ENOMEM. */
int httpd_authq_submit(httpd_authq_t *q, const char *user, const char *password, void *cookie);

/* Calls done for every answer that has come, now (the eventfd's handler
 * does this on its own; a caller that holds the loop thread may too).
 * NULL is a no-op. */
void httpd_authq_dispatch(httpd_authq_t *q);

/* Checks submitted and not yet answered. */
unsigned httpd_authq_pending(const httpd_authq_t *q);

/* Stops and joins the worker (after the check it is on, if any); checks
 * not answered yet are dropped without a call. NULL is a no-op. */
void httpd_authq_free(httpd_authq_t *q);

#endif

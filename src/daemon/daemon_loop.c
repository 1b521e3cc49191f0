/* daemon_loop: how late the event loop is, and what held it.
 *
 * A timer is due every DAEMON_LOOP_PROBE_US with an accuracy of 1 us; when
 * it fires, how long after its due time it ran is the loop's lag: the time
 * some handler kept the loop from turning. Each lag goes into the histogram
 * inferd_loop_lag_seconds. The daemon's own handlers say when they begin and
 * end (daemon_loop_enter, daemon_loop_leave), so that a lag of
 * DAEMON_LOOP_STALL_US or more is logged with the handler that ran longest
 * since the probe before it, when that one took at least half of it; one
 * that ran outside them (the HTTP endpoint's,
 * librdkafka's callbacks run from a handler count as that handler's) is
 * named as such.
 *
 * It does not shorten a stall: it makes one visible, in the metric, the
 * alert InferdLoopStalled and the log. */
#include <errno.h>
#include <string.h>

#include "daemon/daemon_priv.h"
#include "config/log.h"

static int daemon_loop_on_probe(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;
        uint64_t now = daemon_now_us(), lag = now > usec ? now - usec : 0;

        metrics_hist_observe(&d->loop_lag, (double)lag / 1e6);
        if (lag >= DAEMON_LOOP_STALL_US) {
                /* A handler that ran after the stall (first once the loop
                 * turned again) did not cause it. */
                if (d->loop_longest_what && d->loop_longest_us * 2 >= lag)
                        log_warning("The event loop stalled for %.2f s: the %s handler ran for %.2f s", (double)lag / 1e6,
                                    d->loop_longest_what, (double)d->loop_longest_us / 1e6);
                else
                        log_warning("The event loop stalled for %.2f s, outside the daemon's handlers (the HTTP "
                                    "endpoint, a signal)", (double)lag / 1e6);
        } else if (lag >= DAEMON_LOOP_SLOW_US) {
                /* Under the stall's warning and over the goal's bound for
                 * the lag's p99.9 (issue 36): for whoever reads a debug log. */
                log_debug("The event loop was %.0f ms late: the longest handler since the last probe was %s (%.0f ms)",
                          (double)lag / 1e3, d->loop_longest_what ? d->loop_longest_what : "none of the daemon's",
                          (double)d->loop_longest_us / 1e3);
        }
        d->loop_longest_what = NULL;
        d->loop_longest_us = 0;
        sd_event_source_set_time(s, now + DAEMON_LOOP_PROBE_US);
        return 0;
}

int daemon_loop_start(daemon_t *d, errbuf_t *err) {
        int r;

        metrics_hist_init(&d->loop_lag, METRICS_HIST_LOOP_LAG_SECONDS);
        r = sd_event_add_time(d->event, &d->loop_probe, CLOCK_MONOTONIC, daemon_now_us() + DAEMON_LOOP_PROBE_US, 1,
                              daemon_loop_on_probe, d);
        if (r < 0)
                return errbuf_set(err, r, "Failed to add the event loop's probe timer: %s", strerror(-r));
        sd_event_source_set_enabled(d->loop_probe, SD_EVENT_ON);
        return 0;
}

void daemon_loop_enter(daemon_t *d, const char *what) {
        d->loop_what = what;
        d->loop_entered_us = daemon_now_us();
}

void daemon_loop_leave(daemon_t *d) {
        uint64_t ran = daemon_now_us() - d->loop_entered_us;

        if (d->loop_what && ran > d->loop_longest_us) {
                d->loop_longest_us = ran;
                d->loop_longest_what = d->loop_what;
        }
        d->loop_what = NULL;
}

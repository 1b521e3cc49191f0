/* probes: the answers of /livez and /readyz. See probes.h.
 *
 * Not here: HTTP (httpd.c), reading the daemon's state (daemon_metrics.c). */
#include "http/probes.h"

#include <stddef.h>

/* The order matters where several hold: a daemon that is starting or
 * stopping says so first (whatever Kafka does meanwhile), then a reload,
 * then why Kafka gives it nothing (credentials before reachability: a
 * refused login also leaves every broker down), and last the assignment
 * (while the brokers are away the old assignment may still be listed). */
const char *probes_ready_reason(const probes_state_t *s) {
        if (s->draining)
                return "draining";
        if (!s->started)
                return "starting";
        if (s->reloading)
                return "reloading";
        if (s->auth_failed)
                return "auth-failed";
        if (s->kafka_unreachable)
                return "kafka-unreachable";
        if (s->assigned_partitions <= 0)
                return "no-partitions";
        return NULL;
}

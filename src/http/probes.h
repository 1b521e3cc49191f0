/* probes: what GET /livez and GET /readyz answer, from the daemon's state.
 *
 * /livez says the event loop turns: it is answered by the loop itself (the
 * metrics server runs on it), so any answer is 200, whatever the daemon is
 * doing (starting, reloading, draining). A loop stuck in a long call does
 * not answer at all, and the probe times out: that is the signal.
 *
 * /readyz says this instance should be sent work now: 200 only when it is
 * READY (the weights resident, the engine warm: CUDA graphs captured), with
 * partitions assigned and Kafka answering; otherwise 503 with the first
 * reason that holds, in the order of probes_ready_t's checks.
 *
 * /healthz (daemon_metrics.c) is older and stays as it was: its body is the state.
 *
 * Pure: the daemon fills probes_state_t, this says what to answer. */
#ifndef INFERD_PROBES_H
#define INFERD_PROBES_H

#include <stdbool.h>

typedef struct probes_state {
        bool started;           /* READY=1 was sent: weights resident, engine warm, subscribed */
        bool draining;          /* SIGTERM, or stopping on a failure */
        bool reloading;         /* a reload (a model swap) in progress */
        bool auth_failed;       /* Kafka refused our credentials or ACLs (kafka_get_health) */
        bool kafka_unreachable; /* every broker down (kafka_get_health) */
        int assigned_partitions;
} probes_state_t;

/* The reason /readyz is 503 ("starting", "draining", "reloading",
 * "auth-failed", "kafka-unreachable", "no-partitions"), or NULL when
 * ready. */
const char *probes_ready_reason(const probes_state_t *s);

#endif

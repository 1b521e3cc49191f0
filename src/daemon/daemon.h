/* daemon: the manager object of inferd, and its one sd-event loop.
 *
 * It owns everything the running service has: the config, the model and the
 * engine, the Kafka handles, the batcher and the offset store, and every
 * event source (the consumer's and producer's queue fds, the engine's
 * completion fd, SIGTERM/SIGINT/SIGHUP, the poll, batch-delay, drain,
 * status, watchdog and metrics-sampling timers, and the metrics server). It wires them into the pipeline: validate,
 * pack, submit, produce, store offsets after delivery, commit. It also
 * speaks sd_notify (READY, STATUS, RELOADING, STOPPING, WATCHDOG,
 * EXTEND_TIMEOUT_USEC).
 *
 * It does not parse arguments (inferd.c does) nor run the model (engine_). */
#ifndef INFERD_DAEMON_H
#define INFERD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "config/cfg.h"
#include "core/errbuf.h"
#include "core/plan.h"
#include "engine/engine.h"

typedef struct daemon daemon_t;

/* Takes ownership of cfg (also on failure). config_path is where SIGHUP
 * re-reads it. The caller has blocked SIGTERM, SIGINT and SIGHUP already:
 * the signal sources are added here. */
int daemon_new(daemon_t **ret, cfg_t *cfg, const char *config_path, errbuf_t *err);

/* The host budget's part of the plan that needs no engine: an explicit
 * [decode] threads whose contexts, with librdkafka's minimum, exceed
 * [memory] host_budget even before any pinned buffer. --check-config runs
 * it; the full rule runs in the plan at start-up. Returns 0 or -ENOSPC with
 * a sentence naming the keys. */
int daemon_check_host_budget(const cfg_t *c, errbuf_t *err);

/* The engine options of a model swap's plan (engine_swap_plan): next's,
 * except the decode contexts, which are the running pool's: decode_threads
 * of decode_max_pixels (0: none run, none planned). The pool is made once at
 * start and never resized, so a swap's plan charges the buffers that exist
 * against next's host budget, whatever next's [decode] threads and
 * max_pixels (keys that need a restart) or the automatic rule on a new
 * budget would make. host_budget (len bytes) receives the budget's text. */
void daemon_swap_engine_options(const cfg_t *next, int decode_threads, uint64_t decode_max_pixels,
                                engine_options_t *o, char *host_budget, size_t len);

/* The plan a config gives, without weights or Kafka (inferd --plan).
 * *warning receives a sentence when AUTO fell back to the CPU. */
int daemon_plan(const cfg_t *c, plan_t *ret, char *warning, size_t warning_len, errbuf_t *err);

/* NULL is a no-op. */
void daemon_free(daemon_t *d);

/* The pipeline benchmark: daemon_start opens the no-compute executor of
 * pipebench.h instead of the engine (and loads no weights). For
 * `inferd --bench-pipeline` only; never a config choice. */
void daemon_set_bench_pipeline(daemon_t *d, bool on);

/* The version build_info reports (the daemon layer does not carry it). The
 * string is borrowed and must outlive d. */
void daemon_set_version(daemon_t *d, const char *version);

/* Starts the metrics endpoint ([metrics] listen; a port that cannot be
 * bound is an error naming the address), loads the weights, opens the engine, creates the Kafka handles and
 * subscribes, then sends READY=1. */
int daemon_start(daemon_t *d, errbuf_t *err);

/* Runs the loop until a drain finishes (returns 0) or the daemon stops on
 * an error, a drain timeout or a second SIGTERM (returns > 0, the exit
 * status). */
int daemon_run(daemon_t *d);

#endif

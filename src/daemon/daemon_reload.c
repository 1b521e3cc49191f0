/* daemon_reload: SIGHUP, the reload of the config file (each changed key
 * taken as its row of the config table says: a live key through the setters
 * below, a swap key by a model swap, the others logged), and the model swap
 * in place: the staging thread that loads the new weights beside the
 * running model, the plan check, the pause until the slots are empty, and
 * engine_swap.
 *
 * Not here: the config's parsing, diff and reload classes (cfg.c,
 * cfg_table.c), the engine's swap itself (engine_swap), the options a plan
 * is made from (daemon_plan.c). */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/daemon_model.h"
#include "daemon/daemon_priv.h"
#include "config/log.h"
#include "core/units.h"

/* --- model swap in place ------------------------------------------------------------- */

/* Ends a reload that took a swap path: READY=1 again, and the counters. */
void daemon_swap_end(daemon_t *d, const char *result) {
        if (!strcmp(result, "applied")) {
                d->reload_stats.swaps_applied++;
                d->reload_stats.reloads_applied++;
        } else if (!strcmp(result, "failed")) {
                d->reload_stats.swaps_failed++;
                d->reload_stats.reloads_rejected++;
        } else {
                d->reload_stats.swaps_rejected++;
                d->reload_stats.reloads_rejected++;
        }
        cfg_free(d->swap_cfg);
        d->swap_cfg = NULL;
        model_free(d->swap_model);
        d->swap_model = NULL;
        labels_free(d->swap_labels);
        d->swap_labels = NULL;
        if (d->swap_paused_us && !d->txn_closing && !d->in_revoke && !d->exit_status && !d->draining && d->pipeline) {
                pipeline_set_intake(d->pipeline, true);
                daemon_pump(d);
        }
        d->swap_paused_us = 0;
        d->reloading = false;
        if (!d->draining && !d->exit_status)
                sd_notify(0, "READY=1\nSTATUS=Reloaded");
}

static void daemon_swap_reject(daemon_t *d, const char *why) {
        log_error("Reload rejected: %s; the running model (%s) keeps serving and nothing changed", why,
                  d->model->id);
        daemon_swap_end(d, "rejected");
}

/* Step 4, once the slots are empty and every result is acknowledged (its
 * offset stored): the engine frees the old weights and puts the new ones in
 * the same arena (engine_swap); the old host model is freed; predictions
 * carry the new model id from the next batch on. */
static void daemon_swap_apply(daemon_t *d) {
        uint64_t t0 = daemon_now_us(), t1;
        model_t *old = d->model;
        const plan_t *plan;
        errbuf_t err = {};
        char size[32], arena[32], host[32], budget[32], pinned[32];
        int r;

        r = engine_swap(d->engine, d->swap_model, &d->swap_plan, &err);
        if (r == -EBUSY) {
                /* Not idle after all: nothing changed, so it is only refused. */
                daemon_swap_reject(d, err.msg);
                return;
        }
        if (r < 0) {
                log_error("Failed to swap the model after the old weights were freed: %s; exiting with status 1, "
                          "so that systemd restarts inferd on '%s' as configured",
                          err.msg, d->swap_cfg->model.weights);
                daemon_swap_end(d, "failed");
                daemon_fail(d, 1);
                return;
        }
        /* The engine reads the new model's weights; the old set goes. The
         * labels go with the model (the pipeline borrows them). */
        d->model = d->swap_model;
        d->swap_model = NULL;
        model_free(old);
        pipeline_set_labels(d->pipeline, d->swap_labels);
        labels_free(d->labels);
        d->labels = d->swap_labels;
        d->swap_labels = NULL;
        /* The running config takes the swap's keys (the table's SWAP rows). */
        cfg_copy_class(d->cfg, d->swap_cfg, CFG_RELOAD_SWAP);
        d->weights_stat = d->stage_stat;
        d->have_weights_stat = d->stage_have_stat;
        r = pipeline_engine_swapped(d->pipeline, d->model->id, precision_name(engine_precision(d->engine)),
                                    d->cfg->memory.max_batch);
        assert(r == 0);
        t1 = daemon_now_us();
        d->reload_stats.last_swap_s = (double)(t1 - t0) / 1e6;
        d->reload_stats.last_swap_pause_s = (double)(t1 - d->swap_paused_us) / 1e6;
        plan = engine_plan_of(d->engine);
        /* The plan charges what the engine holds since start: its whole
         * arena and staging, whatever this batch carves of them. */
        log_info("Swapped the model in place to %s (%s, %d class%s, '%s'): engine %s %s, batch %d, device plan %s with the %s "
                 "arena allocated at start, host plan %s of %s with the %d decode thread%s running since start "
                 "and the %s of pinned buffers allocated at start; the swap took %.1f ms, fetching was paused for "
                 "%.1f ms",
                 d->model->id, d->model->arch.name, d->model->classes, d->model->classes == 1 ? "" : "es",
                 d->cfg->model.weights, engine_backend(d->engine),
                 precision_name(engine_precision(d->engine)), engine_max_batch(d->engine),
                 units_format_size(plan->total_bytes, size, sizeof(size)),
                 units_format_size(plan->held_arena_bytes, arena, sizeof(arena)),
                 units_format_size(plan->pinned_host_bytes + plan->decode_host_bytes, host, sizeof(host)),
                 units_format_size(plan->host_budget_bytes, budget, sizeof(budget)), plan->decode_threads,
                 plan->decode_threads == 1 ? "" : "s",
                 units_format_size(plan->pinned_host_bytes, pinned, sizeof(pinned)),
                 d->reload_stats.last_swap_s * 1e3, d->reload_stats.last_swap_pause_s * 1e3);
        daemon_swap_end(d, "applied");
}

/* Step 3's end: whether the slots are empty and every result acknowledged
 * (its offset stored); then the swap. Called wherever those change. */
void daemon_swap_check(daemon_t *d) {
        if (!d->swap_model || !d->swap_paused_us || d->exit_status || d->draining || d->in_revoke)
                return;
        if (!daemon_nothing_in_flight(d))
                return;
        daemon_swap_apply(d);
}

/* The staging thread: step 1, off the loop. */
static void *daemon_stage_main(void *userdata) {
        daemon_t *d = userdata;
        uint64_t one = 1;

        d->stage_have_stat = stat(d->swap_cfg->model.weights, &d->stage_stat) == 0;
        d->stage_r = model_load(&d->stage_model, d->swap_cfg->model.weights, &d->stage_err);
        if (d->stage_r == 0)
                d->stage_r = daemon_model_check(d->swap_cfg, d->stage_model, &d->stage_labels, &d->stage_err);
        if (write(d->stage_efd, &one, sizeof(one)) != sizeof(one))
                abort();        /* an eventfd write of 1 cannot fail */
        return NULL;
}

void daemon_stage_join(daemon_t *d) {
        if (!d->stage_running)
                return;
        pthread_join(d->stage_thread, NULL);
        d->stage_running = false;
}

/* The new file is loaded and validated (or refused): step 2, the plan.
 * Step 3 follows in daemon_progress (daemon_swap_check). */
static void daemon_stage_done(daemon_t *d) {
        engine_options_t o;
        errbuf_t err = {};
        char host[32], pinned[32], why[sizeof(err.msg) + PATH_MAX + 64];
        int r;

        daemon_stage_join(d);
        if (d->stage_r < 0) {
                model_free(d->stage_model);
                d->stage_model = NULL;
                snprintf(why, sizeof(why), "%s", d->stage_err.msg);
                daemon_swap_reject(d, why);
                return;
        }
        d->swap_model = d->stage_model;
        d->stage_model = NULL;
        d->swap_labels = d->stage_labels;
        d->stage_labels = NULL;
        if (d->draining || d->exit_status) {
                log_info("Reload: not swapping the model: the daemon is stopping");
                daemon_swap_end(d, "rejected");
                return;
        }
        /* The decode pool stays as made at start: the plan charges it. */
        daemon_swap_engine_options(d->swap_cfg, d->decode ? decode_pool_threads(d->decode) : 0,
                                   d->decode ? decode_pool_max_pixels(d->decode) : 0, &o, host, sizeof(host));
        r = engine_swap_plan(d->engine, d->swap_model, &o, &d->swap_plan, &err);
        if (r < 0) {
                snprintf(why, sizeof(why), "the new plan for '%s': %s", d->swap_cfg->model.weights, err.msg);
                daemon_swap_reject(d, why);
                return;
        }
        if (d->swap_cfg->memory.host_budget_bytes != d->cfg->memory.host_budget_bytes)
                log_warning("Reload: [memory] host_budget changed: the new plan charges it with the pinned "
                            "buffers allocated at start (%s) and the %d decode thread%s running since start; "
                            "librdkafka's queue limits stay as set at start",
                            units_format_size(d->swap_plan.pinned_host_bytes, pinned, sizeof(pinned)),
                            d->swap_plan.decode_threads, d->swap_plan.decode_threads == 1 ? "" : "s");
        /* Step 3: nothing new is taken; what is in the slots finishes. */
        log_info("Reload: %s (%s, %d class%s) from '%s' validated (%s, batch %d); pausing fetching and finishing %d record(s) in "
                 "flight",
                 d->swap_model->id, d->swap_model->arch.name, d->swap_model->classes,
                 d->swap_model->classes == 1 ? "" : "es", d->swap_cfg->model.weights,
                 precision_name(d->swap_plan.precision),
                 d->swap_plan.max_batch, daemon_records_in_pipeline(d));
        d->swap_paused_us = daemon_now_us();
        pipeline_set_intake(d->pipeline, false);
}

static int daemon_on_stage_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        daemon_t *d = userdata;
        uint64_t v;

        (void)s;
        (void)revents;
        if (read(fd, &v, sizeof(v)) != sizeof(v))
                return 0;
        daemon_stage_done(d);
        daemon_progress(d);
        return 0;
}

/* Step 1: the new file (next's weights) is read, validated and folded on a
 * thread, in host memory beside the running model, which keeps serving.
 * Takes next. */
static void daemon_swap_begin(daemon_t *d, cfg_t *next) {
        int r;

        d->swap_cfg = next;
        d->stage_r = 0;
        d->stage_err = (errbuf_t){};
        if (!d->stage_io) {
                r = sd_event_add_io(d->event, &d->stage_io, d->stage_efd, EPOLLIN, daemon_on_stage_io, d);
                if (r < 0) {
                        log_error("Reload rejected: Failed to watch the staging thread: %s", strerror(-r));
                        daemon_swap_end(d, "rejected");
                        return;
                }
        }
        log_info("Reload: loading '%s' beside the running model %s", next->model.weights, d->model->id);
        r = -pthread_create(&d->stage_thread, NULL, daemon_stage_main, d);
        if (r < 0) {
                log_error("Reload rejected: Failed to start the staging thread: %s", strerror(-r));
                daemon_swap_end(d, "rejected");
                return;
        }
        d->stage_running = true;
}

/* Whether the file at path (the running model's path) is no longer the one
 * the running model was loaded from: a new file written or renamed over it.
 * A file that is gone is not a new model (it is logged: a restart would
 * fail). */
static bool daemon_weights_replaced(daemon_t *d, const char *path) {
        struct stat sb;

        if (!d->have_weights_stat)
                return false;
        if (stat(path, &sb) < 0) {
                log_warning("Reload: the running model's file '%s' cannot be read (%s); it keeps serving, but a "
                            "restart would fail",
                            path, strerror(errno));
                return false;
        }
        return sb.st_dev != d->weights_stat.st_dev || sb.st_ino != d->weights_stat.st_ino ||
               sb.st_size != d->weights_stat.st_size || sb.st_mtim.tv_sec != d->weights_stat.st_mtim.tv_sec ||
               sb.st_mtim.tv_nsec != d->weights_stat.st_mtim.tv_nsec;
}

/* --- the live keys' setters ---------------------------------------------------------
 * The config table's apply hooks reach the running daemon through these
 * (cfg_live_ops_t); cfg_apply then copies the key into d->cfg. */

static int daemon_set_log_level(void *userdata, int priority, errbuf_t *why) {
        (void)userdata;
        (void)why;
        log_set_level(priority);
        return 0;
}

/* At most the running model's classes, and the k the engine was opened with. */
static int daemon_set_top_k(void *userdata, int top_k, errbuf_t *why) {
        daemon_t *d = userdata;
        pipeline_stats_t st;

        daemon_stats(d, &st);
        if (top_k > d->model->classes)
                return errbuf_set(why, -EINVAL, "%d is above the %d class%s of the running model (%s); keeping %d",
                                  top_k, d->model->classes, d->model->classes == 1 ? "" : "es", d->model->arch.name,
                                  st.top_k);
        if (pipeline_set_top_k(d->pipeline, top_k) < 0)
                return errbuf_set(why, -EINVAL,
                                  "%d is above the %d the engine was opened with; this needs a restart, keeping %d",
                                  top_k, st.engine_top_k, st.top_k);
        return 0;
}

static int daemon_set_headers(void *userdata, bool trace_headers, bool timing_header, errbuf_t *why) {
        daemon_t *d = userdata;

        (void)why;
        pipeline_set_headers(d->pipeline, trace_headers, timing_header);
        return 0;
}

/* Within the plan: more is clamped to the plan's batch (and said). */
static int daemon_set_max_batch(void *userdata, int max_batch, errbuf_t *why) {
        daemon_t *d = userdata;
        pipeline_stats_t st;
        int got;

        (void)why;
        daemon_stats(d, &st);
        got = pipeline_set_max_batch(d->pipeline, max_batch);
        if (got != max_batch)
                log_warning("Reload: [memory] max_batch = %d is above the plan's %d; using %d", max_batch,
                            st.batch_capacity, got);
        return 0;
}

static int daemon_set_max_delay_ms(void *userdata, int max_delay_ms, errbuf_t *why) {
        daemon_t *d = userdata;

        (void)why;
        pipeline_set_max_delay_ms(d->pipeline, max_delay_ms);
        return 0;
}

/* 0 lifts the cap; a batch waiting for it goes now. */
static int daemon_set_max_images_per_s(void *userdata, int max_images_per_s, errbuf_t *why) {
        daemon_t *d = userdata;

        (void)why;
        pipeline_set_max_images_per_s(d->pipeline, max_images_per_s);
        return 0;
}

static int daemon_set_max_record_age(void *userdata, uint64_t max_record_age_ms, cfg_age_action_t action,
                                     errbuf_t *why) {
        daemon_t *d = userdata;

        (void)why;
        pipeline_set_max_record_age(d->pipeline, max_record_age_ms, action == CFG_AGE_SKIP);
        return 0;
}

/* [cache] entries: within what the cache made at start holds, emptied and
 * resized; more needs the plan of a restart. */
static int daemon_set_cache_entries(void *userdata, int entries, errbuf_t *why) {
        daemon_t *d = userdata;
        pipeline_stats_t st;

        if (pipeline_set_cache_entries(d->pipeline, entries) == 0) {
                log_info("Reload: [cache] entries = %d: the result cache was emptied%s", entries,
                         entries ? " and resized" : " and is off");
                return 0;
        }
        daemon_stats(d, &st);
        if (st.cache_room == 0)
                return errbuf_set(why, -ENOSPC,
                                  "the result cache was off at start, and the plan has no memory for it: turning it "
                                  "on needs a restart, keeping 0");
        return errbuf_set(why, -ENOSPC,
                          "%d is more than the result cache made at start holds (%d results, the memory the plan "
                          "counted); this needs a restart, keeping %d", entries, st.cache_room, st.cache_limit);
}

/* [model] precision, a swap key. On the CPU engine only bf16 is its own
 * precision (anything else computes in fp32): a change that keeps what the
 * engine computes in needs no swap. */
static int daemon_set_precision(void *userdata, precision_t precision, errbuf_t *why) {
        daemon_t *d = userdata;
        precision_t cpu = precision == PRECISION_BF16 ? PRECISION_BF16 : PRECISION_FP32;

        (void)why;
        if (!d->engine || strcmp(engine_backend(d->engine), "cpu") != 0 || engine_precision(d->engine) != cpu)
                return -EAGAIN;
        log_info("Reload: [model] precision: no swap, the CPU engine computes in %s as before", precision_name(cpu));
        return 0;
}

/* --- reload ------------------------------------------------------------------------ */

/* Applies each change by its reload class (the config table's): a live key
 * through its hook, a swap key by a model swap after the loop, the others
 * logged as needing a restart. Returns whether a swap is needed. */
static bool daemon_reload_apply(daemon_t *d, cfg_t *next, const cfg_change_t *changes, size_t n) {
        const cfg_live_ops_t ops = {
                .userdata = d,
                .set_log_level = daemon_set_log_level,
                .set_top_k = daemon_set_top_k,
                .set_headers = daemon_set_headers,
                .set_max_batch = daemon_set_max_batch,
                .set_max_delay_ms = daemon_set_max_delay_ms,
                .set_max_images_per_s = daemon_set_max_images_per_s,
                .set_max_record_age = daemon_set_max_record_age,
                .set_precision = daemon_set_precision,
                .set_cache_entries = daemon_set_cache_entries,
        };
        bool swap = false;

        for (size_t i = 0; i < n; i++) {
                const cfg_change_t *c = &changes[i];
                errbuf_t why = {};
                int r = cfg_apply(c, d->cfg, next, &ops, &why);

                if (r == 0)
                        log_info("Reload: [%s] %s applied", c->section, c->key);
                else if (r == -EAGAIN) {
                        /* Taken together, after the live keys: a model swap. */
                        log_info("Reload: [%s] %s changed: swapping the model in place", c->section, c->key);
                        swap = true;
                } else if (r == -EPERM)
                        log_warning("Reload: [%s] %s changed; this needs a restart and is not applied", c->section,
                                    c->key);
                else
                        log_warning("Reload: [%s] %s not applied: %s", c->section, c->key, why.msg);
        }
        return swap;
}

static void daemon_reload(daemon_t *d) {
        cfg_change_t changes[64];
        const size_t max = sizeof(changes) / sizeof(changes[0]);
        cfg_t *next = NULL;
        errbuf_t err = {};
        size_t n = 0;
        bool swap;
        int r;

        sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=Reloading %s", daemon_now_us(), d->config_path);
        d->reloading = true;
        r = cfg_load(&next, d->config_path, &err);
        if (r < 0) {
                log_error("Failed to reload '%s', keeping the running configuration: %s", d->config_path, err.msg);
                d->reload_stats.reloads_rejected++;
                goto done;
        }
        cfg_diff(d->cfg, next, changes, max, &n);
        if (n == 0)
                log_info("Reloaded '%s': no key changed", d->config_path);
        swap = daemon_reload_apply(d, next, changes, n < max ? n : max);
        if (n > max)
                log_warning("Reload: %zu more changes not listed; they need a restart", n - max);
        if (!swap && !strcmp(next->model.weights, d->cfg->model.weights) &&
            daemon_weights_replaced(d, next->model.weights)) {
                log_info("Reload: '%s' is a new file at the same path: swapping the model in place",
                         next->model.weights);
                swap = true;
        }
        if (swap) {
                /* READY=1 comes when the swap ends (daemon_swap_end). */
                daemon_swap_begin(d, next);
                return;
        }
        d->reload_stats.reloads_applied++;
done:
        cfg_free(next);
        d->reloading = false;
        sd_notify(0, "READY=1\nSTATUS=Reloaded");
}

int daemon_on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        daemon_t *d = userdata;

        (void)s;
        (void)si;
        if (d->draining) {
                log_info("Ignoring SIGHUP while draining");
                return 0;
        }
        if (d->swap_cfg) {
                log_warning("Ignoring SIGHUP: the model swap of the previous reload is still in progress");
                return 0;
        }
        daemon_loop_enter(d, "SIGHUP (reload)");
        daemon_reload(d);
        daemon_progress(d);
        daemon_loop_leave(d);
        return 0;
}

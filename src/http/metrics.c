/* metrics: the exposition format and the process numbers. See metrics.h.
 *
 * Every family is written with its HELP and TYPE lines even when it has no
 * series yet (no error of a kind, no partition assigned), so a scraper sees
 * the same set of names from the first scrape on. Counters that have a
 * fixed set of labels (outcomes, states, reload results) always have every
 * series, at 0 when nothing happened, so that rate() over them starts at
 * the first scrape and not at the first event. */
#include "http/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* --- formatting -------------------------------------------------------------- */

/* A label value with \, " and newline escaped, as the format wants. */
static void metrics_label(FILE *f, const char *v) {
        for (const char *c = v ? v : ""; *c; c++) {
                if (*c == '\\' || *c == '"')
                        fputc('\\', f);
                if (*c == '\n') {
                        fputs("\\n", f);
                        continue;
                }
                fputc(*c, f);
        }
}

static void metrics_head(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metrics_gauge(FILE *f, const char *name, const char *help, double v) {
        metrics_head(f, name, "gauge", help);
        fprintf(f, "%s %.17g\n", name, v);
}

static void metrics_counter(FILE *f, const char *name, const char *help, uint64_t v) {
        metrics_head(f, name, "counter", help);
        fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void metrics_counts(FILE *f, const char *name, const char *label, const char *help, const metrics_count_t *c,
                           size_t n) {
        metrics_head(f, name, "counter", help);
        for (size_t i = 0; i < n; i++) {
                fprintf(f, "%s{%s=\"", name, label);
                metrics_label(f, c[i].label);
                fprintf(f, "\"} %" PRIu64 "\n", c[i].n);
        }
}

/* One histogram's series; label is "" or `name="value",` put before le. */
static void metrics_histogram_series(FILE *f, const char *name, const char *label, const metrics_hist_t *h) {
        uint64_t cum = 0;
        size_t n = strlen(label);

        for (int i = 0; i < h->n_bounds; i++) {
                cum += h->counts[i];
                fprintf(f, "%s_bucket{%sle=\"%g\"} %" PRIu64 "\n", name, label, h->bounds[i], cum);
        }
        fprintf(f, "%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, label, h->count);
        /* The label without its trailing comma, in braces, or nothing. */
        fprintf(f, "%s_sum%s%.*s%s %.17g\n", name, n ? "{" : "", n ? (int)n - 1 : 0, label, n ? "}" : "", h->sum);
        fprintf(f, "%s_count%s%.*s%s %" PRIu64 "\n", name, n ? "{" : "", n ? (int)n - 1 : 0, label, n ? "}" : "",
                h->count);
}

static void metrics_histogram(FILE *f, const char *name, const char *help, const metrics_hist_t *h) {
        metrics_head(f, name, "histogram", help);
        if (h)
                metrics_histogram_series(f, name, "", h);
}

/* A histogram family with one series per value of label (names[i] for
 * h[i]); label values are plain words here, not escaped. */
static void metrics_histograms(FILE *f, const char *name, const char *label, const char *help,
                               const metrics_hist_t *h, const char *const *names, int n) {
        char l[96];

        metrics_head(f, name, "histogram", help);
        for (int i = 0; h && i < n; i++) {
                snprintf(l, sizeof(l), "%s=\"%s\",", label, names[i]);
                metrics_histogram_series(f, name, l, &h[i]);
        }
}

static void metrics_plan(FILE *f, const plan_t *p) {
        /* The device terms first, in the order of plan.c's total; their sum
         * is total_bytes. arena_kept: after a model swap, the part of the
         * arena allocated at start that its batch does not carve (0
         * otherwise). pinned_host is host memory, outside it: after a swap,
         * every pinned buffer allocated at start; so is kafka_queue,
         * librdkafka's consumer queue within the host budget. */
        const struct {
                const char *term;
                uint64_t bytes;
        } t[] = {
                { "weights", p ? p->weights_bytes : 0 },        { "activations", p ? p->activation_bytes : 0 },
                { "workspace", p ? p->engine.workspace_bytes : 0 }, { "staging", p ? p->engine.staging_bytes : 0 },
                { "context", p ? p->engine.context_bytes : 0 }, { "graphs", p ? p->engine.graph_bytes : 0 },
                { "arena_kept", p ? p->arena_kept_bytes : 0 }, { "pinned_host", p ? p->pinned_host_bytes : 0 },
                { "kafka_queue", p ? p->kafka_queue_bytes : 0 }, { "cache", p ? p->cache_bytes : 0 },
        };

        metrics_head(f, "inferd_plan_bytes", "gauge",
                     "The memory plan's terms in bytes; every term but pinned_host, kafka_queue and cache is on the device "
                     "(host memory for the CPU engine) and they sum to the plan's total; kafka_queue is librdkafka's "
                     "consumer queue (queued.max.messages.kbytes), sized to hold the back-pressure hold's records; "
                     "cache is the result cache ([cache] entries), host memory. After a model swap in place the plan "
                     "charges what is held since start: arena_kept is the part of the arena allocated at start "
                     "that the new batch does not carve, and pinned_host every pinned buffer allocated at start.");
        if (p)
                for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
                        fprintf(f, "inferd_plan_bytes{term=\"%s\"} %" PRIu64 "\n", t[i].term, t[i].bytes);
        metrics_head(f, "inferd_plan_budget_bytes", "gauge", "What the plan may use of the device.");
        if (p)
                fprintf(f, "inferd_plan_budget_bytes %" PRIu64 "\n", p->budget_bytes);
        metrics_head(f, "inferd_plan_max_batch", "gauge", "The largest batch the plan fits.");
        if (p)
                fprintf(f, "inferd_plan_max_batch %d\n", p->max_batch);
}

static void metrics_kafka(FILE *f, const metrics_snapshot_t *s) {
        metrics_head(f, "inferd_consumer_lag_records", "gauge",
                     "Records waiting in an assigned partition: its high watermark minus the consumer's position.");
        for (size_t i = 0; i < s->n_lag; i++) {
                fputs("inferd_consumer_lag_records{topic=\"", f);
                metrics_label(f, s->lag[i].topic);
                fprintf(f, "\",partition=\"%" PRId32 "\"} %" PRId64 "\n", s->lag[i].partition, s->lag[i].records);
        }
        metrics_head(f, "inferd_consumer_lag_seconds", "gauge",
                     "Now minus the Kafka timestamp of the last record taken from the partition, while records "
                     "wait in it; 0 when it is caught up.");
        for (size_t i = 0; i < s->n_lag; i++) {
                fputs("inferd_consumer_lag_seconds{topic=\"", f);
                metrics_label(f, s->lag[i].topic);
                fprintf(f, "\",partition=\"%" PRId32 "\"} %.3f\n", s->lag[i].partition, s->lag[i].seconds);
        }
        metrics_gauge(f, "inferd_assigned_partitions", "Partitions assigned to this consumer.",
                      s->assigned_partitions);
        metrics_gauge(f, "inferd_paused", "1 while no records are taken: back-pressure (records left in librdkafka's queue, or "
                      "fetching paused after a second), the throughput cap, a drain.",
                      s->paused ? 1 : 0);
        metrics_counts(f, "inferd_kafka_errors_total", "kind",
                       "Errors librdkafka reported (brokers down, transport, timeouts...), by kind.", s->kafka_errors,
                       s->n_kafka_errors);
}

static void metrics_state(FILE *f, const metrics_snapshot_t *s) {
        static const char *const states[] = { "starting", "ready", "reloading", "draining" };

        metrics_head(f, "inferd_state", "gauge", "1 for the daemon's current state, 0 for the others.");
        for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
                fprintf(f, "inferd_state{state=\"%s\"} %d\n", states[i],
                        s->state && !strcmp(s->state, states[i]) ? 1 : 0);
        metrics_head(f, "inferd_build_info", "gauge", "Always 1; the labels say what runs.");
        fputs("inferd_build_info{version=\"", f);
        metrics_label(f, s->version);
        fputs("\",backend=\"", f);
        metrics_label(f, s->backend);
        fputs("\",precision=\"", f);
        metrics_label(f, s->precision);
        fputs("\",model=\"", f);
        metrics_label(f, s->model);
        fputs("\"} 1\n", f);
        metrics_head(f, "inferd_reloads_total", "counter",
                     "Reloads (SIGHUP): applied, or rejected for an invalid file (the running config is kept).");
        fprintf(f, "inferd_reloads_total{result=\"applied\"} %" PRIu64 "\n", s->reloads_applied);
        fprintf(f, "inferd_reloads_total{result=\"rejected\"} %" PRIu64 "\n", s->reloads_rejected);
        metrics_head(f, "inferd_model_swaps_total", "counter",
                     "Model swaps in place: applied, rejected (the old model kept serving), or failed after the "
                     "old weights were freed (the daemon exits).");
        fprintf(f, "inferd_model_swaps_total{result=\"applied\"} %" PRIu64 "\n", s->swaps_applied);
        fprintf(f, "inferd_model_swaps_total{result=\"rejected\"} %" PRIu64 "\n", s->swaps_rejected);
        fprintf(f, "inferd_model_swaps_total{result=\"failed\"} %" PRIu64 "\n", s->swaps_failed);
        metrics_head(f, "inferd_http_auth_failures_total", "counter",
                     "Requests to the metrics endpoint answered 401: no, or wrong, basic-auth credentials.");
        fprintf(f, "inferd_http_auth_failures_total %" PRIu64 "\n", s->http_auth_failures);
        if (s->http_rejected) {
                metrics_head(f, "inferd_http_rejected_total", "counter",
                             "Clients the metrics endpoint refused to protect the loop: 429 after failed logins, 503 "
                             "with the password worker busy, connections closed over the rates or past the header "
                             "deadline.");
                for (int i = 0; i < s->n_http_rejected; i++)
                        fprintf(f, "inferd_http_rejected_total{reason=\"%s\"} %" PRIu64 "\n",
                                s->http_rejected_names[i], s->http_rejected[i]);
        }
        metrics_gauge(f, "inferd_model_swap_seconds", "The last applied swap's own time (free, upload, re-plan, capture).",
                      s->last_swap_s);
        metrics_gauge(f, "inferd_model_swap_pause_seconds",
                      "How long fetching was paused for the last applied swap (finishing the batches in flight, "
                      "then the swap).",
                      s->last_swap_pause_s);
}

static void metrics_process(FILE *f, const metrics_snapshot_t *s) {
        const metrics_process_t *p = &s->process;

        if (!s->have_process)
                return;
        metrics_gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.",
                      (double)p->resident_bytes);
        metrics_head(f, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        fprintf(f, "process_cpu_seconds_total %.2f\n", p->cpu_seconds);
        metrics_gauge(f, "process_open_fds", "Number of open file descriptors.", (double)p->open_fds);
        metrics_gauge(f, "process_max_fds", "Maximum number of open file descriptors.", (double)p->max_fds);
        metrics_head(f, "process_start_time_seconds", "gauge",
                     "Start time of the process since unix epoch in seconds.");
        fprintf(f, "process_start_time_seconds %.2f\n", p->start_time_s);
}

int metrics_format(const metrics_snapshot_t *s, char **ret, size_t *len) {
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);

        if (!f)
                return -ENOMEM;
        metrics_head(f, "inferd_records_total", "counter",
                     "Records finished: a prediction or a DLQ copy handed to the producer, or (expired) one past "
                     "[batching] max_record_age committed without a copy (max_record_age_action = skip).");
        fprintf(f, "inferd_records_total{outcome=\"predicted\"} %" PRIu64 "\n", s->predicted);
        fprintf(f, "inferd_records_total{outcome=\"dead_lettered\"} %" PRIu64 "\n", s->dead_lettered);
        fprintf(f, "inferd_records_total{outcome=\"expired\"} %" PRIu64 "\n", s->expired);
        metrics_counts(f, "inferd_dead_letters_total", "code", "Records sent to the DLQ, by their inferd-error code.",
                       s->dead_letters, s->n_dead_letters);
        metrics_counter(f, "inferd_dlq_values_omitted_total",
                        "DLQ copies sent without the record's value, which was too large for the DLQ topic.",
                        s->dlq_values_omitted);
        metrics_counts(f, "inferd_copied_headers_cut_total", "header",
                       "Headers copied into predictions that were cut to their bound or left out (a traceparent "
                       "that is not W3C Trace Context, a tracestate over 32 members or 512 characters, a "
                       "correlation-id over 1,024 bytes), by header.",
                       s->headers_cut, s->n_headers_cut);
        metrics_counter(f, "inferd_records_redelivered_total",
                        "Records librdkafka handed out a second time without a rewind of the daemon's (a pause "
                        "racing an assignment's first fetch); dropped, their first copy is answered.",
                        s->redelivered);
        metrics_counter(f, "inferd_batches_total", "Batches submitted to the engine.", s->batches);
        metrics_histogram(f, "inferd_batch_size", "Records per batch submitted to the engine.", s->batch_size);
        metrics_histogram(f, "inferd_batch_duration_seconds", "A batch's time from engine submit to its results.",
                          s->batch_seconds);
        metrics_histogram(f, "inferd_record_latency_seconds",
                          "From a record's Kafka timestamp to its prediction's delivery report.", s->latency_seconds);
        metrics_histograms(f, "inferd_stage_duration_seconds", "stage",
                           "A prediction's time in each stage, one observation per record and stage (engine: its "
                           "batch's time); the stages of a record add up to its inferd_record_latency_seconds.",
                           s->stage_seconds, s->stage_names, s->n_stages);
        metrics_histogram(f, "inferd_loop_lag_seconds",
                          "How late the event loop ran a timer due every 100 ms: the time a handler held the loop.",
                          s->loop_lag_seconds);
        metrics_kafka(f, s);
        metrics_gauge(f, "inferd_slots", "Pipeline slots (batches that can be in flight at once).", s->slots);
        metrics_gauge(f, "inferd_slots_busy", "Pipeline slots submitted and not yet complete.", s->slots_busy);
        metrics_counter(f, "inferd_cache_hits_total",
                        "Records whose prediction came from the result cache ([cache] entries): no decode, no engine.",
                        s->cache_hits);
        metrics_counter(f, "inferd_cache_misses_total",
                        "Records looked up in the result cache and not found, then computed.", s->cache_misses);
        metrics_gauge(f, "inferd_cache_entries", "Results held in the result cache now.", s->cache_entries);
        metrics_plan(f, s->plan);
        metrics_head(f, "inferd_gpu_memory_used_bytes", "gauge",
                     "Device memory in use on the GPU, by every process (cudaMemGetInfo); CUDA engine only.");
        if (s->have_gpu)
                fprintf(f, "inferd_gpu_memory_used_bytes %" PRIu64 "\n", s->gpu_used_bytes);
        metrics_head(f, "inferd_gpu_memory_total_bytes", "gauge", "The GPU's memory (cudaMemGetInfo); CUDA engine only.");
        if (s->have_gpu)
                fprintf(f, "inferd_gpu_memory_total_bytes %" PRIu64 "\n", s->gpu_total_bytes);
        metrics_head(f, "inferd_gpu_arena_bytes", "gauge",
                     "Device memory this process holds in its arena (the plan's total); CUDA engine only.");
        if (s->have_gpu)
                fprintf(f, "inferd_gpu_arena_bytes %" PRIu64 "\n", s->gpu_arena_bytes);
        metrics_state(f, s);
        metrics_process(f, s);
        if (fclose(f) != 0) {
                free(buf);
                return -ENOMEM;
        }
        *ret = buf;
        *len = n;
        return 0;
}

/* --- /proc/self ----------------------------------------------------------------- */

/* The boot time (seconds since the epoch), from /proc/stat's btime. */
static int metrics_boot_time(uint64_t *ret) {
        char line[256];
        FILE *f = fopen("/proc/stat", "re");
        int r = -ENOENT;

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "btime %" SCNu64, ret) == 1) {
                        r = 0;
                        break;
                }
        fclose(f);
        return r;
}

int metrics_process_sample(metrics_process_t *ret) {
        unsigned long long utime, stime, start_ticks, rss_pages;
        long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
        char buf[1024], *p;
        struct rlimit rl;
        struct dirent *de;
        uint64_t boot;
        size_t n;
        FILE *f;
        DIR *dir;
        int r;

        f = fopen("/proc/self/stat", "re");
        if (!f)
                return -errno;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* The command name may hold spaces and parentheses: fields are
         * counted from the last ')'. After it: state (3), ..., utime (14),
         * stime (15), ..., starttime (22), vsize (23), rss (24). */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu "
                                "%*u %llu",
                         &utime, &stime, &start_ticks, &rss_pages) != 4)
                return -EIO;
        r = metrics_boot_time(&boot);
        if (r < 0)
                return r;
        ret->cpu_seconds = (double)(utime + stime) / (double)ticks;
        ret->resident_bytes = (uint64_t)rss_pages * (uint64_t)page;
        ret->start_time_s = (double)boot + (double)start_ticks / (double)ticks;

        dir = opendir("/proc/self/fd");
        if (!dir)
                return -errno;
        ret->open_fds = 0;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        ret->open_fds++;
        closedir(dir);
        ret->open_fds--;        /* the directory's own fd */
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return -errno;
        ret->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
        return 0;
}

/* daemon_metrics: the daemon's side of the metrics endpoint: the sampling
 * timer (/proc and the device's memory, once a second), the snapshot a
 * scrape formats (metrics.h), and the probes /healthz, /livez, /readyz.
 *
 * Not here: the exposition format (metrics.c), HTTP (httpd.c), the probes'
 * rules (probes.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon_model.h"
#include "daemon/daemon_priv.h"
#include "config/log.h"
#include "http/probes.h"
#include "pipeline/rectime.h"

/* The costly numbers (/proc, the device's memory) are sampled this often,
 * never by a scrape. */
#define DAEMON_SAMPLE_INTERVAL_US (1000 * 1000ULL)

/* Start-up runs before the loop: its long steps (loading the weights,
 * opening the engine, Kafka's transactions) hold the thread, and the
 * requests that arrive meanwhile are answered between them
 * (daemon_serve_starting), so they see "starting". A reload's model swap
 * stages and drains while the loop runs, so it is seen as "reloading" until
 * the swap ends; a reload without a swap ends within its callback. */
static const char *daemon_state(const daemon_t *d) {
        if (d->draining)
                return "draining";
        if (!d->started)
                return "starting";
        if (d->reloading)
                return "reloading";
        return "ready";
}

/* The costly numbers, once a second: /proc/self and the device's memory. */
void daemon_sample(daemon_t *d) {
        errbuf_t err = {};
        int r;

        d->have_process = metrics_process_sample(&d->process) == 0;
        if (!d->engine)
                return;
        r = engine_device_memory(d->engine, &d->gpu, &err);
        d->have_gpu = r == 0;
        if (r < 0 && r != -EOPNOTSUPP && !d->gpu_failed)
                log_warning("%s; the GPU memory metrics are left out until it answers", err.msg);
        d->gpu_failed = r < 0 && r != -EOPNOTSUPP;
}

static int daemon_on_sample(sd_event_source *s, uint64_t usec, void *userdata) {
        daemon_t *d = userdata;

        (void)usec;
        daemon_sample(d);
        sd_event_source_set_time(s, daemon_now_us() + DAEMON_SAMPLE_INTERVAL_US);
        return 0;
}

/* GET /metrics: formats what the counters and the last sample hold; reads
 * nothing that can block. */
static int daemon_metrics(daemon_t *d, char **ret, size_t *len) {
        metrics_snapshot_t s = {};
        httpd_stats_t http = {};
        pipeline_stats_t st;
        struct timespec now;

        if (d->pipeline)
                pipeline_get_stats(d->pipeline, &st);
        else
                st = (pipeline_stats_t){};      /* starting: no pipeline yet */
        s.predicted = st.predictions_out;
        s.dead_lettered = st.dlq_out;
        s.expired = st.expired_skipped;
        s.stage_seconds = st.stage_seconds;
        s.stage_names = rectime_stage_names;
        s.n_stages = RECTIME_STAGES;
        s.dlq_values_omitted = st.dlq_values_omitted;
        s.redelivered = st.redelivered;
        s.batches = st.batches;
        s.dead_letters = st.dlq_codes;
        s.n_dead_letters = st.n_dlq_codes;
        s.headers_cut = st.headers_cut;
        s.n_headers_cut = st.n_headers_cut;
        s.batch_size = st.batch_size;
        s.batch_seconds = st.batch_seconds;
        s.latency_seconds = &d->latency;
        s.loop_lag_seconds = d->loop_probe ? &d->loop_lag : NULL;
        if (d->kafka) {
                clock_gettime(CLOCK_REALTIME, &now);
                s.lag = d->lag;
                s.n_lag = kafka_get_lag(d->kafka, d->lag, DAEMON_METRICS_LAG_MAX,
                                        (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
                s.assigned_partitions = kafka_get_assigned(d->kafka);
                /* Back-pressure, or the throughput cap holding records. */
                s.paused = kafka_is_paused(d->kafka) || st.paused_by_cap || st.holding;
                s.n_kafka_errors = kafka_get_errors(d->kafka, &s.kafka_errors);
        }
        s.slots = st.slots;
        s.slots_busy = st.slots_in_flight;
        s.cache_hits = st.cache_hits;
        s.cache_misses = st.cache_misses;
        s.cache_entries = st.cache_entries;
        if (d->engine) {
                s.plan = engine_plan_of(d->engine);
                s.backend = engine_backend(d->engine);
                s.precision = precision_name(engine_precision(d->engine));
        }
        s.have_gpu = d->have_gpu;
        s.gpu_used_bytes = d->gpu.used_bytes;
        s.gpu_total_bytes = d->gpu.total_bytes;
        s.gpu_arena_bytes = d->gpu.arena_bytes;
        s.state = daemon_state(d);
        s.version = d->version;
        s.model = d->model ? daemon_model_name(d->model, d->model_name, sizeof(d->model_name)) : NULL;
        s.reloads_applied = d->reload_stats.reloads_applied;
        s.reloads_rejected = d->reload_stats.reloads_rejected;
        s.swaps_applied = d->reload_stats.swaps_applied;
        s.swaps_rejected = d->reload_stats.swaps_rejected;
        s.swaps_failed = d->reload_stats.swaps_failed;
        s.last_swap_s = d->reload_stats.last_swap_s;
        s.last_swap_pause_s = d->reload_stats.last_swap_pause_s;
        s.have_process = d->have_process;
        s.process = d->process;
        httpd_add_stats(d->httpd, &http);
        httpd_add_stats(d->probes_httpd, &http);
        s.http_auth_failures = http.auth_failures;
        s.http_rejected = http.rejected;
        s.http_rejected_names = httpd_reject_names;
        s.n_http_rejected = HTTPD_REJECT_MAX;
        return metrics_format(&s, ret, len);
}

static int daemon_text(httpd_response_t *ret, unsigned status, const char *text) {
        ret->status = status;
        ret->content_type = "text/plain; charset=utf-8";
        if (asprintf(&ret->body, "%s\n", text) < 0) {
                ret->body = NULL;
                return -ENOMEM;
        }
        ret->len = strlen(ret->body);
        return 0;
}

/* GET /readyz's state (probes.h). */
static void daemon_probes_state(const daemon_t *d, probes_state_t *ret) {
        kafka_health_t h = d->kafka ? kafka_get_health(d->kafka) : KAFKA_HEALTH_OK;

        *ret = (probes_state_t){
                .started = d->started,
                .draining = d->draining || d->exit_status,
                .reloading = d->reloading,
                .auth_failed = h == KAFKA_HEALTH_AUTH_FAILED,
                .kafka_unreachable = h == KAFKA_HEALTH_UNREACHABLE,
                .assigned_partitions = d->kafka ? kafka_get_assigned(d->kafka) : 0,
        };
}

/* Kafka's reason for refusing our login, when it has one: told only to a
 * client that passed basic auth (or to anyone when there is none), since it
 * names the brokers, the security protocol and the mechanism. */
static const char *daemon_kafka_detail(const daemon_t *d, const httpd_request_t *req) {
        const char *why = d->kafka ? kafka_get_auth_error(d->kafka) : "";

        return *why && !req->anonymous ? why : NULL;
}

static int daemon_on_http(void *userdata, const httpd_request_t *req, httpd_response_t *ret) {
        daemon_t *d = userdata;
        const char *path = req->path, *detail = daemon_kafka_detail(d, req);
        probes_state_t ps;
        const char *state;

        if (!strcmp(path, "/metrics")) {
                ret->status = 200;
                ret->content_type = METRICS_CONTENT_TYPE;
                return daemon_metrics(d, &ret->body, &ret->len);
        }
        if (!strcmp(path, "/healthz")) {
                /* Ready: started, consuming, neither reloading nor draining
                 * nor stopping on a failure. */
                state = d->exit_status ? "stopping" : daemon_state(d);
                /* Ready but refused by the brokers: say why (in full only
                 * to a client that passed basic auth). */
                if (!strcmp(state, "ready") && d->kafka && *kafka_get_auth_error(d->kafka)) {
                        char why[640];

                        if (!detail)
                                return daemon_text(ret, 503, "auth-failed");
                        snprintf(why, sizeof(why), "not ready: Kafka %s", detail);
                        return daemon_text(ret, 503, why);
                }
                return daemon_text(ret, strcmp(state, "ready") ? 503 : 200, state);
        }
        if (!strcmp(path, "/livez"))
                /* Answered on the loop thread: the loop turns. */
                return daemon_text(ret, 200, "alive");
        if (!strcmp(path, "/readyz")) {
                daemon_probes_state(d, &ps);
                state = probes_ready_reason(&ps);
                if (state && !strcmp(state, "auth-failed") && detail) {
                        char why[640];

                        /* The short reason first (what probes match), Kafka's on the next line. */
                        snprintf(why, sizeof(why), "auth-failed\nKafka %s", detail);
                        return daemon_text(ret, 503, why);
                }
                return daemon_text(ret, state ? 503 : 200, state ? state : "ready");
        }
        return daemon_text(ret, 404, "not found: GET /metrics, /healthz, /livez or /readyz");
}

/* [metrics] probes_listen: the probes only, and the short reasons (no auth
 * there to pass). */
static int daemon_on_probe_http(void *userdata, const httpd_request_t *req, httpd_response_t *ret) {
        httpd_request_t anon = { .path = req->path, .anonymous = true };

        if (strcmp(req->path, "/livez") && strcmp(req->path, "/readyz") && strcmp(req->path, "/healthz"))
                return daemon_text(ret, 404, "not found: GET /livez, /readyz or /healthz (the probes' address)");
        return daemon_on_http(userdata, &anon, ret);
}

/* The endpoint first, before anything slow: a port that cannot be bound
 * stops the start at once, naming the address. */
int daemon_metrics_start(daemon_t *d, errbuf_t *err) {
        const httpd_security_t sec = {
                .tls_cert_path = d->cfg->metrics.tls_cert[0] ? d->cfg->metrics.tls_cert : NULL,
                .tls_key_path = d->cfg->metrics.tls_key[0] ? d->cfg->metrics.tls_key : NULL,
                .users_path = d->cfg->metrics.basic_auth_users[0] ? d->cfg->metrics.basic_auth_users : NULL,
                .open_paths = d->cfg->metrics.auth_healthz ? NULL : "/healthz /livez /readyz",
        };
        const httpd_limits_t limits = {
                .max_connections = (unsigned)d->cfg->metrics.max_connections,
                .max_connections_per_ip = (unsigned)d->cfg->metrics.max_connections_per_ip,
                .timeout_s = (unsigned)d->cfg->metrics.timeout_s,
                .header_timeout_s = (unsigned)d->cfg->metrics.header_timeout_s,
                .connections_per_ip_per_s = (unsigned)d->cfg->metrics.connections_per_ip_per_s,
                .tls_handshakes_per_ip_per_s = (unsigned)d->cfg->metrics.tls_handshakes_per_ip_per_s,
                .tls_handshakes_per_s = (unsigned)d->cfg->metrics.tls_handshakes_per_s,
        };
        int r;

        if (!d->cfg->metrics.listen[0])
                return 0;
        r = httpd_new_secure(&d->httpd, d->event, d->cfg->metrics.listen, &limits, &sec, daemon_on_http, d, err);
        if (r < 0)
                return errbuf_prefix(err, r, "[metrics]");
        if (d->cfg->metrics.probes_listen[0]) {
                /* Plain HTTP and no auth: what a kubelet's httpGet probe
                 * speaks; its own slots, the same deadlines and rates. */
                r = httpd_new(&d->probes_httpd, d->event, d->cfg->metrics.probes_listen, &limits, daemon_on_probe_http,
                              d, err);
                if (r < 0)
                        return errbuf_prefix(err, r, "[metrics] probes_listen");
        }
        r = sd_event_add_time(d->event, &d->sample_timer, CLOCK_MONOTONIC, daemon_now_us() + DAEMON_SAMPLE_INTERVAL_US,
                              0, daemon_on_sample, d);
        if (r < 0)
                return errbuf_set(err, r, "Failed to add the metrics timer: %s", strerror(-r));
        sd_event_source_set_enabled(d->sample_timer, SD_EVENT_ON);
        log_info("Metrics on %s://%s/metrics, probes on /livez and /readyz (and /healthz)%s%s%s%s",
                 sec.tls_cert_path ? "https" : "http", d->cfg->metrics.listen,
                 sec.users_path ? "; basic auth on " : "",
                 sec.users_path ? (sec.open_paths ? "/metrics (the probes open)" : "all") : "",
                 d->probes_httpd ? "; the probes also on http://" : "",
                 d->probes_httpd ? d->cfg->metrics.probes_listen : "");
        return 0;
}

void daemon_set_version(daemon_t *d, const char *version) {
        d->version = version;
}

/* Unit tests of metrics_: histogram buckets (upper bounds inclusive, as
 * Prometheus' le means), the exposition of a snapshot (every family named,
 * cumulative buckets, escaped labels, the GPU series only with a device,
 * the plan's device terms summing to its total), /proc/self, and the
 * labelled counters (metrics_count_add). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/metrics.h"
#include "unit.h"

static void test_metrics_hist_buckets_inclusive(void) {
        metrics_hist_t h;

        metrics_hist_init(&h, METRICS_HIST_BATCH_SIZE);
        metrics_hist_observe(&h, 1);    /* le="1" */
        metrics_hist_observe(&h, 3);    /* le="4" */
        metrics_hist_observe(&h, 4);    /* le="4" */
        metrics_hist_observe(&h, 5000); /* +Inf */
        CU_ASSERT_EQUAL(h.counts[0], 1);
        CU_ASSERT_EQUAL(h.counts[2], 2);
        CU_ASSERT_EQUAL(h.counts[h.n_bounds], 1);
        CU_ASSERT_EQUAL(h.count, 4);
        CU_ASSERT_DOUBLE_EQUAL(h.sum, 5008, 1e-9);
}

/* The value of the first line that starts with prefix, or NAN. */
static double test_metrics_value(const char *text, const char *prefix) {
        const char *p = text;
        size_t n = strlen(prefix);

        while (p && *p) {
                if (!strncmp(p, prefix, n))
                        return strtod(p + n, NULL);
                p = strchr(p, '\n');
                if (p)
                        p++;
        }
        return NAN;
}

static void test_metrics_format_snapshot(void) {
        metrics_count_t codes[] = { { "bad-size", 2 }, { "odd\"code\\", 1 } };
        metrics_lag_t lag[] = { { "images", 3, 42, 1.5 } };
        metrics_hist_t hs, stages[2];
        static const char *const stage_names[] = { "queue", "engine" };
        plan_t plan = {};
        metrics_snapshot_t s = {};
        char *text = NULL;
        size_t len = 0;

        metrics_hist_init(&hs, METRICS_HIST_BATCH_SIZE);
        metrics_hist_observe(&hs, 3);
        metrics_hist_observe(&hs, 8);
        metrics_hist_init(&stages[0], METRICS_HIST_STAGE_SECONDS);
        metrics_hist_init(&stages[1], METRICS_HIST_STAGE_SECONDS);
        metrics_hist_observe(&stages[0], 0.0001);       /* le="0.0001": a GPU batch's resolution */
        metrics_hist_observe(&stages[0], 700);          /* past 10 min: +Inf */
        metrics_hist_observe(&stages[1], 2);            /* le="2.5": a CPU batch */
        plan.weights_bytes = 100;
        plan.activation_bytes = 20;
        plan.engine.workspace_bytes = 3;
        plan.engine.staging_bytes = 4;
        plan.engine.context_bytes = 5;
        plan.engine.graph_bytes = 6;
        plan.arena_kept_bytes = 8;
        plan.pinned_host_bytes = 7;
        plan.kafka_queue_bytes = 11;
        plan.total_bytes = 100 + 20 + 3 + 4 + 5 + 6 + 8;
        plan.budget_bytes = 1000;
        plan.max_batch = 8;
        s.predicted = 11;
        s.dead_lettered = 3;
        s.expired = 4;
        s.stage_seconds = stages;
        s.stage_names = stage_names;
        s.n_stages = 2;
        s.dead_letters = codes;
        s.n_dead_letters = 2;
        s.batch_size = &hs;
        s.lag = lag;
        s.n_lag = 1;
        s.plan = &plan;
        s.state = "draining";
        s.version = "1.2.3";
        CU_ASSERT_EQUAL_FATAL(metrics_format(&s, &text, &len), 0);
        CU_ASSERT_EQUAL(strlen(text), len);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_records_total{outcome=\"predicted\"} "), 11);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_records_total{outcome=\"dead_lettered\"} "), 3);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "inferd_dead_letters_total{code=\"odd\\\"code\\\\\"} 1\n"));
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_records_total{outcome=\"expired\"} "), 4);
        /* Stage histograms: one series per stage label, le after it. */
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE inferd_stage_duration_seconds histogram\n"));
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"queue\",le=\"5e-05\"} "), 0);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"queue\",le=\"0.0001\"} "), 1);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"queue\",le=\"600\"} "), 1);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"queue\",le=\"+Inf\"} "), 2);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_count{stage=\"queue\"} "), 2);
        CU_ASSERT_DOUBLE_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_sum{stage=\"queue\"} "), 700.0001, 1e-9);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"engine\",le=\"1\"} "), 0);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_bucket{stage=\"engine\",le=\"2.5\"} "), 1);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_stage_duration_seconds_count{stage=\"engine\"} "), 1);
        /* Cumulative buckets. */
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_batch_size_bucket{le=\"2\"} "), 0);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_batch_size_bucket{le=\"4\"} "), 1);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_batch_size_bucket{le=\"8\"} "), 2);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_batch_size_bucket{le=\"+Inf\"} "), 2);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_batch_size_sum "), 11);
        /* A histogram without observations yet is declared, with no samples. */
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE inferd_batch_duration_seconds histogram\n"));
        CU_ASSERT_PTR_NULL(strstr(text, "inferd_batch_duration_seconds_count"));
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_consumer_lag_records{topic=\"images\",partition=\"3\"} "), 42);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_consumer_lag_seconds{topic=\"images\",partition=\"3\"} "), 1.5);
        {
                static const char *const dev[] = { "weights", "activations", "workspace", "staging", "context", "graphs",
                                                   "arena_kept" };
                double sum = 0;
                char key[64];

                for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
                        snprintf(key, sizeof(key), "inferd_plan_bytes{term=\"%s\"} ", dev[i]);
                        sum += test_metrics_value(text, key);
                }
                CU_ASSERT_EQUAL(sum, plan.total_bytes);
                CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_plan_bytes{term=\"pinned_host\"} "), 7);
                CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_plan_bytes{term=\"kafka_queue\"} "), 11);
        }
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_state{state=\"draining\"} "), 1);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_state{state=\"ready\"} "), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "inferd_build_info{version=\"1.2.3\",backend=\"\",precision=\"\",model=\"\"} 1\n"));
        /* No device: the GPU families are declared without samples. */
        CU_ASSERT_PTR_NULL(strstr(text, "\ninferd_gpu_memory_used_bytes "));
        free(text);

        s.have_gpu = true;
        s.gpu_used_bytes = 5;
        s.gpu_total_bytes = 10;
        s.gpu_arena_bytes = 2;
        CU_ASSERT_EQUAL_FATAL(metrics_format(&s, &text, &len), 0);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_gpu_memory_used_bytes "), 5);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_gpu_memory_total_bytes "), 10);
        CU_ASSERT_EQUAL(test_metrics_value(text, "inferd_gpu_arena_bytes "), 2);
        free(text);
}

static void test_metrics_process_sample(void) {
        metrics_process_t p = {};
        double now = (double)time(NULL);
        int fd = dup(0), fds;

        CU_ASSERT_EQUAL_FATAL(metrics_process_sample(&p), 0);
        CU_ASSERT(p.resident_bytes > 1 << 20);
        CU_ASSERT(p.start_time_s > now - 3600 && p.start_time_s <= now + 1);
        CU_ASSERT(p.max_fds >= p.open_fds);
        fds = (int)p.open_fds;
        if (fd >= 0)
                close(fd);
        CU_ASSERT_EQUAL_FATAL(metrics_process_sample(&p), 0);
        /* One fewer after closing one (the directory's own fd is not counted). */
        if (fd >= 0)
                CU_ASSERT_EQUAL((int)p.open_fds, fds - 1);
}

/* The labelled counters of the pipeline (DLQ codes) and of kafka (error
 * kinds): one series a label, however often it comes and whoever added the
 * first; labels beyond the table's room are refused, not written past it. */
static void test_metrics_count_add(void) {
        metrics_count_t c[3] = { { .label = "static", .n = 0 } };
        size_t n = 1;

        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "static"), 0);
        CU_ASSERT_EQUAL(c[0].n, 1);
        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "auth"), 1);
        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "auth"), 1);
        CU_ASSERT_EQUAL(n, 2);
        CU_ASSERT_STRING_EQUAL(c[1].label, "auth");
        CU_ASSERT_EQUAL(c[1].n, 2);
        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "tls"), 2);
        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "transport"), -ENOSPC);
        CU_ASSERT_EQUAL(n, 3);
        CU_ASSERT_EQUAL(metrics_count_add(c, &n, 3, "tls"), 2);
        CU_ASSERT_EQUAL(c[2].n, 2);
        CU_ASSERT_EQUAL(c[0].n, 1);
        for (size_t i = 1; i < n; i++)
                free((char *)c[i].label);
}

int test_metrics_register(void) {
        static CU_TestInfo tests[] = {
                { "hist_buckets_inclusive", test_metrics_hist_buckets_inclusive },
                { "format_snapshot", test_metrics_format_snapshot },
                { "process_sample", test_metrics_process_sample },
                { "count_add", test_metrics_count_add },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("metrics", tests);
}

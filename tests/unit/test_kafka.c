/* Unit tests of kafka_: the librdkafka limits derived from the host budget,
 * and that the producer's queue really stops at its planned size. The
 * end-to-end behaviour is in tests/kafka against the mock broker. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "core/plan.h"
#include "kafka/kafka.h"
#include "kafka/kafka_priv.h"
#include "unit.h"
#include <time.h>
#include "config/log.h"

/* Every byte librdkafka may hold comes out of what the budget left: the
 * prefetch queue, the fetch responses decompressed (fetch.max.bytes times
 * their scale: responses x (1 + ratio)) and the producer's queue together
 * stay within it once it is above the floors. */
static void test_kafka_limits_within_budget(void) {
        static const uint64_t budgets[] = { 64ull << 20, 256ull << 20, 2ull << 30, 40ull << 30 };
        static const struct {
                int responses, ratio;
        } shapes[] = { { 1, 1 }, { 1, 8 }, { 3, 8 }, { 3, 256 } };

        for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
                kafka_limits_t l;

                kafka_limits_from_budget(budgets[i], &l);
                CU_ASSERT(l.queued_max_kbytes * 1024 + 2 * l.fetch_max_bytes + l.producer_queue_kbytes * 1024 <=
                          budgets[i]);
                CU_ASSERT(l.producer_queue_kbytes > 0);
                CU_ASSERT(l.producer_queue_kbytes <= 1ull << 20);      /* 1 GiB at most */
                for (size_t j = 0; j < sizeof(shapes) / sizeof(shapes[0]); j++) {
                        uint64_t scale = plan_kafka_fetch_scale(shapes[j].responses, shapes[j].ratio);
                        uint64_t q, f, w, p, hold = 128 * 602112ull;

                        plan_kafka_split(budgets[i], hold, scale, &q, &f, &w, &p);
                        CU_ASSERT_EQUAL(f, w * scale);
                        CU_ASSERT(w >= PLAN_KAFKA_FETCH_WIRE_MIN_BYTES);
                        CU_ASSERT(w <= PLAN_KAFKA_FETCH_WIRE_MAX_BYTES);
                        CU_ASSERT(q >= hold);
                        CU_ASSERT(p >= PLAN_KAFKA_PRODUCER_MIN_BYTES);
                        if (budgets[i] >= hold + plan_kafka_min_bytes(shapes[j].responses, shapes[j].ratio) -
                                                  PLAN_KAFKA_QUEUE_MIN_BYTES)
                                CU_ASSERT(q + f + p <= budgets[i]);
                }
        }
}

/* The fetch responses' floor: every response at least one record batch as
 * a broker stores it (KIP-74), decompressed at the ratio. */
static void test_kafka_limits_fetch_shape(void) {
        uint64_t q, f, w, p;
        cfg_t *c = NULL;

        CU_ASSERT_EQUAL(plan_kafka_fetch_scale(3, 8), 27);
        CU_ASSERT_EQUAL(plan_kafka_fetch_scale(0, 0), 2);
        plan_kafka_split(0, 0, 27, &q, &f, &w, &p);
        CU_ASSERT_EQUAL(w, PLAN_KAFKA_FETCH_WIRE_MIN_BYTES);
        CU_ASSERT_EQUAL(f, 27 * PLAN_KAFKA_FETCH_WIRE_MIN_BYTES);
        /* 1 GiB left, 3 brokers at 8:1: half of the rest to the queue, a
         * quarter to the responses, 9.5 MiB on the wire each. */
        plan_kafka_split(1ull << 30, 0, 27, &q, &f, &w, &p);
        CU_ASSERT_EQUAL(q, 512ull << 20);
        CU_ASSERT_EQUAL(w, (256ull << 20) / 27);
        CU_ASSERT(f <= 256ull << 20 && f > 255ull << 20);

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        CU_ASSERT_EQUAL(c->kafka.max_compression_ratio, 8);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "%s", "a:9092");
        CU_ASSERT_EQUAL(kafka_fetch_responses(c), 1);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "%s", "a:9092,b:9092, c:9092");
        CU_ASSERT_EQUAL(kafka_fetch_responses(c), 3);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "%s", "a:9092,, ,b:9092,");
        CU_ASSERT_EQUAL(kafka_fetch_responses(c), 2);
        CU_ASSERT_EQUAL(kafka_limits_min_bytes(c), PLAN_KAFKA_QUEUE_MIN_BYTES + 18 * PLAN_KAFKA_FETCH_WIRE_MIN_BYTES +
                                                           PLAN_KAFKA_PRODUCER_MIN_BYTES);
        cfg_free(c);
}

/* kafka_fetch_check on librdkafka's statistics: the records' bytes over the
 * bytes on the wire, judged over at least 1 MiB of the wire, against
 * [kafka] max_compression_ratio; and the brokers leading the partitions
 * assigned here against the addresses in [kafka] brokers. Each is said
 * once. */
static void test_kafka_fetch_check(void) {
        static const char *doc =
                "{\"brokers\":{"
                "\"a:9092/1\":{\"nodeid\":1,\"rxbytes\":%lld,\"toppars\":{\"in-0\":{\"topic\":\"in\",\"partition\":0}}},"
                "\"b:9092/2\":{\"nodeid\":2,\"rxbytes\":1000,\"toppars\":{\"in-1\":{\"topic\":\"in\",\"partition\":%d}}},"
                "\"a:9092/bootstrap\":{\"nodeid\":-1,\"rxbytes\":500,\"toppars\":{}}},"
                "\"topics\":{\"in\":{\"partitions\":{"
                "\"0\":{\"partition\":0,\"rxbytes\":%lld},\"-1\":{\"partition\":-1,\"rxbytes\":999999999}}}}}";
        kafka_part_t parts[2] = { { .partition = 0, .assigned = true }, { .partition = 1, .assigned = true } };
        kafka_t k = { .parts = parts, .n_parts = 2 };
        cfg_t *c = NULL;
        char buf[1024], *text = NULL;
        size_t len = 0;
        json_t *j;
        FILE *f;

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "%s", "a:9092,b:9092");
        snprintf(c->kafka.input_topic, sizeof(c->kafka.input_topic), "%s", "in");
        k.cfg = c;
        k.limits.fetch_max_bytes = 4 << 20;

#define FETCH_CHECK(wire, other_part, records)                                                   \
        do {                                                                                     \
                snprintf(buf, sizeof(buf), doc, (long long)(wire), (other_part), (long long)(records)); \
                j = json_loads(buf, 0, NULL);                                                    \
                CU_ASSERT_FATAL(j != NULL);                                                      \
                kafka_fetch_check(&k, j);                                                        \
                json_decref(j);                                                                  \
        } while (0)
        /* From the start: 20:1 over 512 KiB is not judged yet; 8:1 over the
         * first 4 MiB is within the plan. */
        FETCH_CHECK(512 << 10, 1, 10 << 20);
        CU_ASSERT_FALSE(k.fetch_seen.ratio_said);
        FETCH_CHECK(4 << 20, 1, 32 << 20);
        CU_ASSERT_FALSE(k.fetch_seen.ratio_said);
        /* 20:1 over the next 4 MiB: said, with what two responses of
         * 4 MiB may then take (168 MiB) against the plan's 2 x 9 x 4. */
        f = open_memstream(&text, &len);
        CU_ASSERT_FATAL(f != NULL);
        log_set_stream(f);
        FETCH_CHECK(8 << 20, 1, 112 << 20);
        log_set_stream(NULL);
        fclose(f);
        CU_ASSERT_TRUE(k.fetch_seen.ratio_said);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "arrive compressed 20:1, past [kafka] max_compression_ratio = 8"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "may take 168.0 MiB where the plan counts 72.0 MiB"));
        free(text);
        /* Two leaders for two addresses: within the plan; three leaders
         * (partition 1 on a third broker is another toppar here, so the
         * test makes brokers list one address): said. */
        CU_ASSERT_FALSE(k.fetch_seen.leaders_said);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "%s", "a:9092");
        FETCH_CHECK(9 << 20, 5, 120 << 20);     /* b leads partition 5, not assigned here */
        CU_ASSERT_FALSE(k.fetch_seen.leaders_said);
        FETCH_CHECK(9 << 20, 1, 120 << 20);
        CU_ASSERT_TRUE(k.fetch_seen.leaders_said);
#undef FETCH_CHECK
        cfg_free(c);
}

/* A [kafka.consumer] or [kafka.client] line that replaces one of the plan's
 * limits is said at start, with the plan's value; other lines are not. */
static void test_kafka_overrides_said(void) {
        cfg_kv_t consumer[] = { { .name = "fetch.max.bytes", .value = "50000000" },
                                { .name = "statistics.interval.ms", .value = "100" } };
        cfg_kv_t client[] = { { .name = "queue.buffering.max.kbytes", .value = "2097151" } };
        kafka_limits_t l = { .queued_max_kbytes = 1000, .fetch_max_bytes = 1048588,
                             .partition_fetch_max_bytes = 1048588, .producer_queue_kbytes = 4096 };
        cfg_t *c = NULL;
        char *text = NULL;
        size_t len = 0;
        FILE *f;

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        c->kafka_consumer.items = consumer;
        c->kafka_consumer.n = 2;
        c->kafka_client.items = client;
        c->kafka_client.n = 1;
        f = open_memstream(&text, &len);
        CU_ASSERT_FATAL(f != NULL);
        log_set_stream(f);
        kafka_fetch_say_overrides(c, &l);
        log_set_stream(NULL);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "[kafka.consumer] fetch.max.bytes = 50000000 replaces the memory plan's "
                                            "1048588"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "[kafka.client] queue.buffering.max.kbytes = 2097151 replaces the memory "
                                            "plan's 4096"));
        CU_ASSERT_PTR_NULL(strstr(text, "statistics.interval.ms"));
        CU_ASSERT_PTR_NULL(strstr(text, "max.partition.fetch.bytes"));
        free(text);
        c->kafka_consumer.items = NULL;
        c->kafka_consumer.n = 0;
        c->kafka_client.items = NULL;
        c->kafka_client.n = 0;
        cfg_free(c);
}

/* A budget with nothing left still gets queues that hold the largest
 * record: a float32 record for the consumer, and the producer's default
 * message.max.bytes (1,000,000) for a DLQ copy. */
static void test_kafka_limits_floors(void) {
        kafka_limits_t l;

        kafka_limits_from_budget(0, &l);
        CU_ASSERT(l.queued_max_kbytes * 1024 >= 602112);
        CU_ASSERT(l.fetch_max_bytes >= 602112);
        CU_ASSERT(l.producer_queue_kbytes * 1024 >= 1000000);
}

/* With a broker that never answers, produce fills the queue: librdkafka
 * must refuse (-ENOBUFS) at the planned 4 MiB, not at its default 1 GiB. */
static void test_kafka_producer_queue_capped(void) {
        static const kafka_callbacks_t cb = {};
        kafka_limits_t l;
        cfg_t *c = NULL;
        kafka_t *k = NULL;
        errbuf_t err = {};
        size_t value_bytes = 600000, accepted = 0;
        char *value = calloc(1, value_bytes);
        int r = 0;

        CU_ASSERT_FATAL(value != NULL);
        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        /* Port 1 on loopback: refused at once, so nothing is ever delivered. */
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        kafka_limits_from_budget(0, &l);
        CU_ASSERT_EQUAL(l.producer_queue_kbytes, 4096);
        r = kafka_new(&k, c, &l, &cb, NULL, &err);
        CU_ASSERT_EQUAL_FATAL(r, 0);
        while (accepted < 100) {
                r = kafka_produce(k, "t", "k", 1, value, value_bytes, NULL, NULL, &err);
                if (r < 0)
                        break;
                accepted++;
        }
        CU_ASSERT_EQUAL(r, -ENOBUFS);
        /* 6 records of 600,000 bytes fit in 4 MiB, a 7th does not. */
        CU_ASSERT_EQUAL(accepted, 6);
        kafka_free(k);
        cfg_free(c);
        free(value);
}

/* The producer's linger.ms as the daemon makes it: inferd's 20 ms by
 * default, and [kafka.producer]'s value where it sets one. */
static void producer_linger(const char *set, const char *want) {
        static const kafka_callbacks_t cb = {};
        kafka_limits_t l;
        cfg_t *c = NULL;
        kafka_t *k = NULL;
        errbuf_t err = {};
        cfg_kv_t producer[] = { { .name = "linger.ms", .value = (char *)set } };
        char value[64] = "";
        size_t len = sizeof(value);

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        if (set) {
                c->kafka_producer.items = producer;
                c->kafka_producer.n = 1;
        }
        kafka_limits_from_budget(0, &l);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&k, c, &l, &cb, NULL, &err), 0);
        CU_ASSERT_EQUAL(rd_kafka_conf_get(rd_kafka_conf(k->producer), "linger.ms", value, &len), RD_KAFKA_CONF_OK);
        CU_ASSERT_STRING_EQUAL(value, want);
        kafka_free(k);
        c->kafka_producer.items = NULL;
        c->kafka_producer.n = 0;
        cfg_free(c);
}

static void test_kafka_producer_linger(void) {
        producer_linger(NULL, "20");
        producer_linger("7", "7");
}

/* Exactly-once against a broker that never answers: init_transactions
 * gives up after its bound, with a sentence saying how long and why,
 * instead of retrying for ever. */
static void test_kafka_txn_init_bounded(void) {
        static const kafka_callbacks_t cb = {};
        kafka_limits_t l;
        cfg_t *c = NULL;
        kafka_t *k = NULL;
        errbuf_t err = {};
        int r;

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        c->kafka.delivery = CFG_DELIVERY_EXACTLY_ONCE;
        kafka_limits_from_budget(0, &l);
        r = kafka_new(&k, c, &l, &cb, NULL, &err);
        CU_ASSERT_EQUAL_FATAL(r, 0);
        CU_ASSERT_FATAL(kafka_transactional(k));
        /* Attempts of 300 ms within 1 s: a few, then the refusal. */
        r = kafka_txn_init(k, 300, 1000, &err);
        CU_ASSERT_EQUAL(r, -ETIMEDOUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Failed to initialise transactions: no transaction coordinator "
                                              "accepted this producer within 1.0 s ("));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "attempts, the last failing with \""));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[kafka] brokers"));
        kafka_free(k);
        cfg_free(c);
}

static void tk_count_waits(void *userdata) {
        (*(int *)userdata)++;
}

/* The same on the transaction thread (the daemon's start-up): the caller's
 * thread is free while the coordinator is awaited, and the waiting
 * callback (the daemon answers its endpoint there) runs every 100 ms or
 * so; the job ends with the same sentence. */
static void test_kafka_txn_init_on_the_thread(void) {
        static const kafka_callbacks_t cb = { .txn_waiting = tk_count_waits };
        kafka_txn_result_t res;
        kafka_limits_t l;
        cfg_t *c = NULL;
        kafka_t *k = NULL;
        errbuf_t err = {};
        int waits = 0, r;

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        c->kafka.delivery = CFG_DELIVERY_EXACTLY_ONCE;
        kafka_limits_from_budget(0, &l);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&k, c, &l, &cb, &waits, &err), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_txn_submit(k, KAFKA_TXN_JOB_INIT, NULL, 1000, false, &err), 0);
        CU_ASSERT_TRUE(kafka_txn_busy(k));
        CU_ASSERT_EQUAL(kafka_txn_collect(k, &res, &err), -EINPROGRESS);
        r = kafka_txn_wait(k, &res, &err);
        CU_ASSERT_EQUAL(r, -ETIMEDOUT);
        CU_ASSERT_EQUAL(res.kind, KAFKA_TXN_JOB_INIT);
        CU_ASSERT_FALSE(kafka_txn_busy(k));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Failed to initialise transactions: no transaction coordinator "
                                              "accepted this producer within 1.0 s ("));
        /* About ten in the second; at least five on a loaded machine. */
        CU_ASSERT(waits >= 5);
        kafka_free(k);
        cfg_free(c);
}

/* A broker that stays down (nothing listens on port 1): each transport
 * failure is one line, not librdkafka's FAIL log line and the error event
 * both, and repeats within a minute are not logged (issue 26, item 7: 27
 * pairs of lines in 90 s with one broker down). librdkafka retries the
 * connection every 100 ms at first, so 3 s of polling sees many failures. */
static void test_kafka_broker_down_logged_once(void) {
        static const kafka_callbacks_t cb = {};
        kafka_limits_t l;
        cfg_t *c = NULL;
        kafka_t *k = NULL;
        errbuf_t err = {};
        FILE *f = tmpfile();
        char line[1024];
        int transport = 0, fail_lines = 0;
        const metrics_count_t *counts;
        size_t n;
        uint64_t failures = 0;
        rd_kafka_message_t *m;

        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        kafka_limits_from_budget(0, &l);
        log_set_stream(f);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&k, c, &l, &cb, NULL, &err), 0);
        for (int i = 0; i < 60; i++) {
                struct timespec ts = { 0, 50 * 1000 * 1000 };

                kafka_poll_producer(k);
                while (kafka_consume(k, &m) > 0)
                        rd_kafka_message_destroy(m);
                nanosleep(&ts, NULL);
        }
        n = kafka_get_errors(k, &counts);
        for (size_t i = 0; i < n; i++)
                if (!strcmp(counts[i].label, "transport"))
                        failures = counts[i].n;
        kafka_free(k);
        log_set_stream(NULL);
        rewind(f);
        while (fgets(line, sizeof(line), f)) {
                if (strstr(line, "_TRANSPORT"))
                        transport++;
                if (strstr(line, "librdkafka FAIL"))
                        fail_lines++;
        }
        fclose(f);
        /* Several failures happened and were counted, one line said so. */
        CU_ASSERT(failures >= 2);
        CU_ASSERT_EQUAL(transport, 1);
        CU_ASSERT_EQUAL(fail_lines, 0);
        cfg_free(c);
}

/* A failed rebalance (an event other than assign or revoke, which
 * librdkafka 2.x never sends but rdkafka.h asks to handle): the partitions
 * go through the revoke's path as lost, so that the daemon answers or hands
 * back what it took from them, and they are no longer counted assigned.
 * It used to unassign them without telling the daemon. */
static struct {
        int revoking, revoked, lost;
        bool defer;                     /* the callback defers the revoke (the daemon's way) */
} rb;
static bool rb_revoking(void *u, const rd_kafka_topic_partition_list_t *parts, bool lost, bool may_defer) {
        (void)u;
        (void)parts;
        rb.revoking++;
        rb.lost += lost;
        return rb.defer && may_defer;
}
static void rb_revoked(void *u, const rd_kafka_topic_partition_list_t *parts) {
        (void)u;
        (void)parts;
        rb.revoked++;
}
/* A kafka_t with rb's callbacks (no broker), and partitions 0 and 1 of the
 * input topic assigned to it: the list returned (the caller's). */
static rd_kafka_topic_partition_list_t *rb_assigned(cfg_t **cp, kafka_t **kp) {
        static const kafka_callbacks_t cb = { .revoking = rb_revoking, .revoked = rb_revoked };
        rd_kafka_topic_partition_list_t *parts;
        kafka_limits_t l;
        errbuf_t err = {};
        cfg_t *c = NULL;
        kafka_t *k = NULL;

        CU_ASSERT_FATAL(cfg_new_defaults(&c) == 0);
        snprintf(c->kafka.brokers, sizeof(c->kafka.brokers), "127.0.0.1:1");
        kafka_limits_from_budget(0, &l);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&k, c, &l, &cb, NULL, &err), 0);
        parts = rd_kafka_topic_partition_list_new(2);
        rd_kafka_topic_partition_list_add(parts, c->kafka.input_topic, 0);
        rd_kafka_topic_partition_list_add(parts, c->kafka.input_topic, 1);
        kafka_rebalance_cb(k->consumer, RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts, k);
        *cp = c;
        *kp = k;
        return parts;
}

static void test_kafka_rebalance_error_revokes(void) {
        cfg_t *c;
        kafka_t *k;
        rd_kafka_topic_partition_list_t *parts = rb_assigned(&c, &k);

        CU_ASSERT_EQUAL(kafka_get_assigned(k), 2);
        memset(&rb, 0, sizeof(rb));
        kafka_rebalance_cb(k->consumer, RD_KAFKA_RESP_ERR__FAIL, parts, k);
        CU_ASSERT_EQUAL(rb.revoking, 1);
        CU_ASSERT_EQUAL(rb.lost, 1);
        CU_ASSERT_EQUAL(rb.revoked, 1);
        CU_ASSERT_EQUAL(kafka_get_assigned(k), 0);
        CU_ASSERT_PTR_NULL(kafka_revoke_pending(k));
        rd_kafka_topic_partition_list_destroy(parts);
        kafka_free(k);
        cfg_free(c);
}

/* A revoke the callback defers (issue 36): the partitions stay assigned and
 * nothing is consumed until kafka_revoke_done, which unassigns them and
 * calls the revoked callback then; a second call does nothing. */
static void test_kafka_revoke_deferred(void) {
        const rd_kafka_topic_partition_list_t *pending;
        rd_kafka_message_t *m = NULL;
        cfg_t *c;
        kafka_t *k;
        rd_kafka_topic_partition_list_t *parts = rb_assigned(&c, &k);

        memset(&rb, 0, sizeof(rb));
        rb.defer = true;
        kafka_rebalance_cb(k->consumer, RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS, parts, k);
        CU_ASSERT_EQUAL(rb.revoking, 1);
        CU_ASSERT_EQUAL(rb.revoked, 0);
        CU_ASSERT_EQUAL(kafka_get_assigned(k), 2);
        pending = kafka_revoke_pending(k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(pending);
        CU_ASSERT_EQUAL(pending->cnt, 2);
        CU_ASSERT_EQUAL(kafka_consume(k, &m), 0);
        kafka_revoke_done(k);
        CU_ASSERT_EQUAL(rb.revoked, 1);
        CU_ASSERT_EQUAL(kafka_get_assigned(k), 0);
        CU_ASSERT_PTR_NULL(kafka_revoke_pending(k));
        kafka_revoke_done(k);
        CU_ASSERT_EQUAL(rb.revoked, 1);
        rd_kafka_topic_partition_list_destroy(parts);
        kafka_free(k);
        cfg_free(c);
}

/* An exactly-once kafka_t on librdkafka's own mock cluster (one broker,
 * topic "t"), its transactions initialised (txn_mock_new), and with
 * txn_mock_open one open with a record in it. */
typedef struct {
        rd_kafka_t *mrk;
        rd_kafka_mock_cluster_t *mc;
        cfg_t *c;
        kafka_t *k;
} txn_mock_t;

static void txn_mock_new(txn_mock_t *t, const kafka_callbacks_t *cb, void *userdata) {
        rd_kafka_conf_t *mconf = rd_kafka_conf_new();
        kafka_limits_t l;
        errbuf_t err = {};
        char why[256];

        *t = (txn_mock_t){};
        t->mrk = rd_kafka_new(RD_KAFKA_PRODUCER, mconf, why, sizeof(why));
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->mrk);
        t->mc = rd_kafka_mock_cluster_new(t->mrk, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->mc);
        CU_ASSERT_EQUAL_FATAL(rd_kafka_mock_topic_create(t->mc, "t", 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
        CU_ASSERT_FATAL(cfg_new_defaults(&t->c) == 0);
        snprintf(t->c->kafka.brokers, sizeof(t->c->kafka.brokers), "%s", rd_kafka_mock_cluster_bootstraps(t->mc));
        t->c->kafka.delivery = CFG_DELIVERY_EXACTLY_ONCE;
        kafka_limits_from_budget(0, &l);
        CU_ASSERT_EQUAL_FATAL(kafka_new(&t->k, t->c, &l, cb, userdata, &err), 0);
        CU_ASSERT_EQUAL_FATAL(kafka_txn_init(t->k, 5000, 10000, &err), 0);
}

static void txn_mock_open(txn_mock_t *t, const kafka_callbacks_t *cb, void *userdata) {
        errbuf_t err = {};

        txn_mock_new(t, cb, userdata);
        CU_ASSERT_EQUAL_FATAL(kafka_produce(t->k, "t", "k", 1, "v", 1, NULL, NULL, &err), 0);
        CU_ASSERT_FATAL(kafka_txn_is_open(t->k));
}

/* The daemon's blocking end of a transaction (daemon_txn_end): the commit
 * handed to the transaction thread and waited for. */
static int txn_commit_wait(kafka_t *k, int timeout_ms, errbuf_t *err) {
        kafka_txn_result_t res;
        int r = kafka_txn_submit(k, KAFKA_TXN_JOB_COMMIT, NULL, timeout_ms, false, err);

        return r < 0 ? r : kafka_txn_wait(k, &res, err);
}

static void txn_mock_close(txn_mock_t *t) {
        kafka_free(t->k);
        cfg_free(t->c);
        rd_kafka_mock_cluster_destroy(t->mc);
        rd_kafka_destroy(t->mrk);
}

/* Exactly-once, a commit that keeps timing out (librdkafka's retriable
 * error: a broker answering after 5 s, each attempt waiting 200 ms): after
 * its few retries the commit says -EAGAIN, and the transaction stays
 * open (a call once the broker answers resumes it). It used to take the
 * last retriable failure for a success, so the caller went on as if the
 * transaction were committed. */
static void test_kafka_txn_commit_retries_fail(void) {
        static const kafka_callbacks_t cb = {};
        txn_mock_t t;
        errbuf_t err = {};
        int r;

        txn_mock_open(&t, &cb, NULL);
        rd_kafka_mock_broker_set_rtt(t.mc, 1, 5000);
        r = txn_commit_wait(t.k, 200, &err);
        CU_ASSERT_EQUAL(r, -EAGAIN);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Failed to commit the transaction: "));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "(retriable)"));
        CU_ASSERT(kafka_txn_is_open(t.k));
        /* Called again once the broker answers, the commit resumes. */
        rd_kafka_mock_broker_set_rtt(t.mc, 1, 0);
        CU_ASSERT_EQUAL(txn_commit_wait(t.k, 10000, &err), 0);
        CU_ASSERT(!kafka_txn_is_open(t.k));
        txn_mock_close(&t);
}

/* A blocking commit that waits (a broker answering after 1.5 s) calls the
 * owner's txn_waiting while it waits for the transaction thread, about every
 * 100 ms (the daemon pings its watchdog there), and still commits. */
static int txn_waits;
static void txn_waiting(void *userdata) {
        (void)userdata;
        txn_waits++;
}
static void test_kafka_txn_commit_calls_waiting(void) {
        static const kafka_callbacks_t cb = { .txn_waiting = txn_waiting };
        txn_mock_t t;
        errbuf_t err = {};

        txn_mock_open(&t, &cb, NULL);
        txn_waits = 0;
        rd_kafka_mock_broker_set_rtt(t.mc, 1, 1500);
        CU_ASSERT_EQUAL(txn_commit_wait(t.k, 10000, &err), 0);
        CU_ASSERT(!kafka_txn_is_open(t.k));
        /* 1.5 s at least (one round trip), in slices of 100 ms. */
        CU_ASSERT(txn_waits >= 10);
        CU_ASSERT(txn_waits <= 100);
        txn_mock_close(&t);
}

/* The commit point's form (issue 36): a commit handed to the transaction
 * thread returns at once while the broker takes 1.5 s to answer; the result
 * is not there until kafka_txn_fd is readable, then says committed, and the
 * transaction is closed. Before, the loop waited in the call. */
static void test_kafka_txn_submit_does_not_wait(void) {
        static const kafka_callbacks_t cb = {};
        kafka_txn_result_t res;
        struct timespec a, b;
        txn_mock_t t;
        errbuf_t err = {};
        struct pollfd p;
        double ms;

        txn_mock_open(&t, &cb, NULL);
        rd_kafka_mock_broker_set_rtt(t.mc, 1, 1500);
        clock_gettime(CLOCK_MONOTONIC, &a);
        CU_ASSERT_EQUAL_FATAL(kafka_txn_submit(t.k, KAFKA_TXN_JOB_COMMIT, NULL, -1, false, &err), 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        CU_ASSERT(ms < 100);
        CU_ASSERT(kafka_txn_busy(t.k));
        CU_ASSERT_EQUAL(kafka_txn_collect(t.k, &res, &err), -EINPROGRESS);
        p = (struct pollfd){ .fd = kafka_txn_fd(t.k), .events = POLLIN };
        CU_ASSERT_EQUAL(poll(&p, 1, 20000), 1);
        CU_ASSERT_EQUAL(kafka_txn_collect(t.k, &res, &err), 0);
        CU_ASSERT(res.committed && !res.aborted);
        CU_ASSERT(!kafka_txn_busy(t.k));
        CU_ASSERT(!kafka_txn_is_open(t.k));
        txn_mock_close(&t);
}

/* A transaction librdkafka fails (an abortable error: the coordinator
 * refuses to add the output's partition, TOPIC_AUTHORIZATION_FAILED) is
 * learned with the producer's librdkafka logging off (log_level 0, as a
 * user may set in [kafka.producer]): from the delivery report of the output
 * librdkafka purged. It used to be learned only from librdkafka's TXNERR
 * log line. The abort then ends it, and its own purged outputs (a second
 * one, produced meanwhile) fail nothing more. */
static int txn_purged;
static void txn_reported(void *userdata, const rd_kafka_message_t *m) {
        (void)userdata;
        txn_purged += m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}
static void test_kafka_txn_failure_without_log(void) {
        static const kafka_callbacks_t cb = { .delivered = txn_reported };
        kafka_txn_result_t res;
        txn_mock_t t;
        errbuf_t err = {};

        txn_mock_new(&t, &cb, NULL);
        rd_kafka_set_log_level(t.k->producer, 0);
        /* 24: AddPartitionsToTxn's ApiKey. */
        rd_kafka_mock_push_request_errors(t.mc, 24, 1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        txn_purged = 0;
        CU_ASSERT_EQUAL_FATAL(kafka_produce(t.k, "t", "k", 1, "v", 1, NULL, NULL, &err), 0);
        CU_ASSERT(!kafka_txn_failed(t.k));
        for (int i = 0; i < 1000 && !kafka_txn_failed(t.k); i++) {
                kafka_poll_producer(t.k);
                usleep(10000);
        }
        CU_ASSERT(kafka_txn_failed(t.k));
        CU_ASSERT_EQUAL(txn_purged, 1);
        CU_ASSERT_EQUAL_FATAL(kafka_txn_submit(t.k, KAFKA_TXN_JOB_ABORT, NULL, -1, false, &err), 0);
        CU_ASSERT_EQUAL(kafka_txn_wait(t.k, &res, &err), 0);
        CU_ASSERT(res.aborted);
        CU_ASSERT(!kafka_txn_failed(t.k));
        CU_ASSERT(!kafka_txn_is_open(t.k));
        /* The next transaction: committed. */
        CU_ASSERT_EQUAL_FATAL(kafka_produce(t.k, "t", "k", 1, "v", 1, NULL, NULL, &err), 0);
        CU_ASSERT_EQUAL(txn_commit_wait(t.k, 10000, &err), 0);
        CU_ASSERT(!kafka_txn_failed(t.k));
        txn_mock_close(&t);
}

/* A tool's -X NAME=VALUE: set when librdkafka takes it, its refusal in why
 * when not, why empty when the text is not NAME=VALUE; kv left as it was. */
static void test_kafka_conf_set_pair(void) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char kv[] = "linger.ms=7", why[256], value[32];
        size_t value_len = sizeof(value);

        CU_ASSERT_EQUAL(kafka_conf_set_pair(conf, kv, why, sizeof(why)), 0);
        CU_ASSERT_STRING_EQUAL(kv, "linger.ms=7");
        CU_ASSERT_EQUAL(rd_kafka_conf_get(conf, "linger.ms", value, &value_len), RD_KAFKA_CONF_OK);
        CU_ASSERT_STRING_EQUAL(value, "7");
        CU_ASSERT_EQUAL(kafka_conf_set_pair(conf, "no.such.property=1", why, sizeof(why)), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "no.such.property"));
        CU_ASSERT_EQUAL(kafka_conf_set_pair(conf, "linger.ms", why, sizeof(why)), -EINVAL);
        CU_ASSERT_STRING_EQUAL(why, "");
        CU_ASSERT_EQUAL(kafka_conf_set_pair(conf, "=7", why, sizeof(why)), -EINVAL);
        CU_ASSERT_STRING_EQUAL(why, "");
        rd_kafka_conf_destroy(conf);
}

int test_kafka_register(void) {
        static CU_TestInfo tests[] = {
                { "limits_within_budget", test_kafka_limits_within_budget },
                { "limits_fetch_shape", test_kafka_limits_fetch_shape },
                { "fetch_check", test_kafka_fetch_check },
                { "overrides_said", test_kafka_overrides_said },
                { "limits_floors", test_kafka_limits_floors },
                { "producer_queue_capped", test_kafka_producer_queue_capped },
                { "producer_linger", test_kafka_producer_linger },
                { "txn_init_bounded", test_kafka_txn_init_bounded },
                { "txn_init_on_the_thread", test_kafka_txn_init_on_the_thread },
                { "broker_down_logged_once", test_kafka_broker_down_logged_once },
                { "txn_commit_retries_fail", test_kafka_txn_commit_retries_fail },
                { "rebalance_error_revokes", test_kafka_rebalance_error_revokes },
                { "revoke_deferred", test_kafka_revoke_deferred },
                { "txn_commit_calls_waiting", test_kafka_txn_commit_calls_waiting },
                { "txn_submit_does_not_wait", test_kafka_txn_submit_does_not_wait },
                { "txn_failure_without_log", test_kafka_txn_failure_without_log },
                { "conf_set_pair", test_kafka_conf_set_pair },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("kafka", tests);
}

/* inferd-kafka-admin: the two admin actions the real-cluster tests need,
 * through librdkafka's Admin API, so that they cost no JVM start each.
 *
 *   inferd-kafka-admin -b BROKERS create NAME:PARTITIONS:RF[:KEY=VALUE...]...
 *       creates the topics in one request and waits for the result; a topic
 *       that exists already is an error
 *   inferd-kafka-admin -b BROKERS offsets GROUP TOPIC
 *       one line per partition: PARTITION COMMITTED END, the group's committed
 *       offset (-1 for none) and the partition's high watermark
 *
 * Before -b, `-c FILE` takes the security settings ([kafka.client] and
 * [kafka.consumer]) of an instance's config, and `-X KEY=VALUE` (as kcat's)
 * sets any librdkafka property, after the config's; a secured cluster is
 * then reachable too. Without -b, the config's [kafka] brokers.
 *
 * tools/kafka-cluster calls it when it is built (and falls back on Kafka's
 * own TopicCommand when it is not). It is a test tool: it never deletes or
 * alters anything. Exit status: 0 on success, 1 on a Kafka error, 2 for bad
 * arguments. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "config/cfg.h"
#include "kafka/kafka.h"

#define ADMIN_TIMEOUT_MS 30000

static int usage(void) {
        fprintf(stderr, "usage: inferd-kafka-admin [-c FILE] [-X KEY=VALUE]... [-b BROKERS] create NAME:PARTITIONS:RF[:KEY=VALUE...]...\n"
                        "       inferd-kafka-admin [-c FILE] [-X KEY=VALUE]... [-b BROKERS] offsets GROUP TOPIC\n");
        return 2;
}

/* -c FILE and -X KEY=VALUE, for every client made. */
static const cfg_t *admin_cfg;
static char **admin_props;
static int admin_n_props;

static rd_kafka_t *admin_new(rd_kafka_type_t type, const char *brokers, const char *group) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        errbuf_t err = {};
        char why[512] = "";
        rd_kafka_t *rk;

        if (admin_cfg && cfg_kafka_apply(admin_cfg, 0, conf, &err) < 0) {
                fprintf(stderr, "inferd-kafka-admin: %s\n", err.msg);
                rd_kafka_conf_destroy(conf);
                return NULL;
        }
        for (int i = 0; i < admin_n_props; i++)
                if (kafka_conf_set_pair(conf, admin_props[i], why, sizeof(why)) < 0) {
                        fprintf(stderr, "inferd-kafka-admin: -X %.*s: %s\n", (int)strcspn(admin_props[i], "="),
                                admin_props[i], why);
                        rd_kafka_conf_destroy(conf);
                        return NULL;
                }
        if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            (group && rd_kafka_conf_set(conf, "group.id", group, why, sizeof(why)) != RD_KAFKA_CONF_OK)) {
                fprintf(stderr, "inferd-kafka-admin: %s\n", why);
                rd_kafka_conf_destroy(conf);
                return NULL;
        }
        rk = rd_kafka_new(type, conf, why, sizeof(why));
        if (!rk) {
                fprintf(stderr, "inferd-kafka-admin: %s\n", why);
                rd_kafka_conf_destroy(conf);
                return NULL;
        }
        /* conf belongs to rk now. */
        return rk;
}

/* NAME:PARTITIONS:RF[:KEY=VALUE...] -> a NewTopic, or NULL with a message. */
static rd_kafka_NewTopic_t *topic_from_spec(char *spec) {
        char *name = strtok(spec, ":"), *parts = strtok(NULL, ":"), *rf = strtok(NULL, ":"), *kv;
        char why[512];
        rd_kafka_NewTopic_t *t;

        if (!name || !parts || !rf || atoi(parts) < 1 || atoi(rf) < 1) {
                fprintf(stderr, "inferd-kafka-admin: '%s' is not NAME:PARTITIONS:RF[:KEY=VALUE...]\n", spec);
                return NULL;
        }
        t = rd_kafka_NewTopic_new(name, atoi(parts), atoi(rf), why, sizeof(why));
        if (!t) {
                fprintf(stderr, "inferd-kafka-admin: %s: %s\n", name, why);
                return NULL;
        }
        while ((kv = strtok(NULL, ":"))) {
                char *eq = strchr(kv, '=');

                if (!eq) {
                        fprintf(stderr, "inferd-kafka-admin: %s: '%s' is not KEY=VALUE\n", name, kv);
                        rd_kafka_NewTopic_destroy(t);
                        return NULL;
                }
                *eq = '\0';
                rd_kafka_NewTopic_set_config(t, kv, eq + 1);
        }
        return t;
}

static int cmd_create(const char *brokers, int n, char **specs) {
        rd_kafka_NewTopic_t *topics[n];
        rd_kafka_t *rk = NULL;
        rd_kafka_queue_t *q = NULL;
        rd_kafka_event_t *ev = NULL;
        const rd_kafka_topic_result_t **res;
        size_t nres = 0;
        int r = 1, made = 0;

        for (int i = 0; i < n; i++) {
                topics[i] = topic_from_spec(specs[i]);
                if (!topics[i])
                        goto out;
                made++;
        }
        rk = admin_new(RD_KAFKA_PRODUCER, brokers, NULL);
        if (!rk)
                goto out;
        q = rd_kafka_queue_new(rk);
        rd_kafka_CreateTopics(rk, topics, n, NULL, q);
        ev = rd_kafka_queue_poll(q, ADMIN_TIMEOUT_MS + 5000);
        if (!ev) {
                fprintf(stderr, "inferd-kafka-admin: no answer to CreateTopics\n");
                goto out;
        }
        if (rd_kafka_event_error(ev)) {
                fprintf(stderr, "inferd-kafka-admin: CreateTopics: %s\n", rd_kafka_event_error_string(ev));
                goto out;
        }
        res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);
        r = 0;
        for (size_t i = 0; i < nres; i++) {
                if (rd_kafka_topic_result_error(res[i])) {
                        fprintf(stderr, "inferd-kafka-admin: %s: %s\n", rd_kafka_topic_result_name(res[i]),
                                rd_kafka_topic_result_error_string(res[i]));
                        r = 1;
                }
        }
out:
        if (ev)
                rd_kafka_event_destroy(ev);
        if (q)
                rd_kafka_queue_destroy(q);
        if (rk)
                rd_kafka_destroy(rk);
        for (int i = 0; i < made; i++)
                rd_kafka_NewTopic_destroy(topics[i]);
        return r;
}

static int cmd_offsets(const char *brokers, const char *group, const char *topic) {
        rd_kafka_t *rk = admin_new(RD_KAFKA_CONSUMER, brokers, group);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_partition_list_t *parts = NULL;
        rd_kafka_topic_t *rkt = NULL;
        rd_kafka_resp_err_t e;
        int r = 1;

        if (!rk)
                return 1;
        rkt = rd_kafka_topic_new(rk, topic, NULL);
        e = rd_kafka_metadata(rk, 0, rkt, &md, ADMIN_TIMEOUT_MS);
        if (e || md->topic_cnt != 1 || md->topics[0].err) {
                fprintf(stderr, "inferd-kafka-admin: metadata of %s: %s\n", topic,
                        rd_kafka_err2str(e ? e : md->topic_cnt ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
                goto out;
        }
        parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
        for (int i = 0; i < md->topics[0].partition_cnt; i++)
                rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id);
        /* The group's committed offsets, read without joining the group. */
        e = rd_kafka_committed(rk, parts, ADMIN_TIMEOUT_MS);
        if (e) {
                fprintf(stderr, "inferd-kafka-admin: committed offsets of %s: %s\n", group, rd_kafka_err2str(e));
                goto out;
        }
        for (int i = 0; i < parts->cnt; i++) {
                int64_t lo, hi;

                e = rd_kafka_query_watermark_offsets(rk, topic, parts->elems[i].partition, &lo, &hi,
                                                     ADMIN_TIMEOUT_MS);
                if (e) {
                        fprintf(stderr, "inferd-kafka-admin: watermarks of %s [%d]: %s\n", topic,
                                parts->elems[i].partition, rd_kafka_err2str(e));
                        goto out;
                }
                printf("%d %" PRId64 " %" PRId64 "\n", parts->elems[i].partition,
                       parts->elems[i].offset < 0 ? -1 : parts->elems[i].offset, hi);
        }
        r = 0;
out:
        if (parts)
                rd_kafka_topic_partition_list_destroy(parts);
        if (md)
                rd_kafka_metadata_destroy(md);
        if (rkt)
                rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        return r;
}

int main(int argc, char **argv) {
        const char *brokers = NULL;
        cfg_t *c = NULL;
        errbuf_t err = {};
        int i = 1, r;

        admin_props = calloc((size_t)argc, sizeof(*admin_props));
        if (!admin_props)
                return 1;
        for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
                if (strcmp(argv[i], "-b") == 0)
                        brokers = argv[i + 1];
                else if (strcmp(argv[i], "-X") == 0 && strchr(argv[i + 1], '=') && argv[i + 1][0] != '=')
                        admin_props[admin_n_props++] = argv[i + 1];
                else if (strcmp(argv[i], "-c") == 0 && !c) {
                        if (cfg_load(&c, argv[i + 1], &err) < 0) {
                                fprintf(stderr, "inferd-kafka-admin: %s\n", err.msg);
                                return 2;
                        }
                        admin_cfg = c;
                } else
                        return usage();
        }
        if (!brokers && c)
                brokers = c->kafka.brokers;
        if (!brokers || i >= argc)
                r = usage();
        else if (strcmp(argv[i], "create") == 0 && argc > i + 1)
                r = cmd_create(brokers, argc - i - 1, argv + i + 1);
        else if (strcmp(argv[i], "offsets") == 0 && argc == i + 3)
                r = cmd_offsets(brokers, argv[i + 1], argv[i + 2]);
        else
                r = usage();
        cfg_free(c);
        free(admin_props);
        return r;
}

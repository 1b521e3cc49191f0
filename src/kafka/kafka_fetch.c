/* kafka_fetch: librdkafka's fetch responses against the memory plan.
 *
 * librdkafka decompresses a fetch response whole as it arrives, from every
 * broker that leads an assigned partition at once, beyond the consumer
 * queue's limit. The plan (plan_kafka_fetch_scale) counts the responses as
 * [kafka] brokers' addresses, each decompressing up to [kafka]
 * max_compression_ratio times its fetch.max.bytes. Neither is known before
 * the records come, so the statistics check both as they do and say in the
 * log when the input passes the plan's shape: the operator then raises the
 * ratio (and the host budget it needs), or lists every broker.
 *
 * Not here: the split of the budget (core/plan.c), the handles
 * (kafka.c). */
#include "kafka/kafka_priv.h"

#include <inttypes.h>
#include <string.h>

#include "core/units.h"
#include "config/log.h"

/* Judged only over this many bytes on the wire since the last statistics:
 * a few metadata requests say nothing about the records. */
#define KAFKA_FETCH_JUDGE_MIN_BYTES ((int64_t)1 << 20)

int kafka_fetch_responses(const cfg_t *c) {
        const char *s = c->kafka.brokers;
        int n = 0;

        /* host:port[,host:port...]: the non-empty addresses. */
        while (*s) {
                size_t len = strcspn(s, ",");

                if (len > strspn(s, " \t"))
                        n++;
                s += len;
                if (*s == ',')
                        s++;
        }
        return n > 0 ? n : 1;
}

uint64_t kafka_limits_min_bytes(const cfg_t *c) {
        return plan_kafka_min_bytes(kafka_fetch_responses(c), c->kafka.max_compression_ratio);
}

/* Does broker b (a statistics "brokers" entry) lead an input partition
 * assigned here? */
static bool kafka_fetch_leads(kafka_t *k, json_t *b) {
        const char *key;
        json_t *tp;

        json_object_foreach(json_object_get(b, "toppars"), key, tp) {
                json_t *topic = json_object_get(tp, "topic");
                int64_t id = kafka_json_int(tp, "partition");
                kafka_part_t *p;

                if (!json_is_string(topic) || strcmp(json_string_value(topic), k->cfg->kafka.input_topic) || id < 0)
                        continue;
                if ((p = kafka_part(k, (int32_t)id, false)) && p->assigned)
                        return true;
        }
        return false;
}

static void kafka_fetch_say_ratio(kafka_t *k, double ratio) {
        int planned = k->cfg->kafka.max_compression_ratio;
        int responses = kafka_fetch_responses(k->cfg);
        char wire[32], would[32], term[32];

        k->fetch_seen.ratio_said = true;
        log_warning("The input topic's records arrive compressed %.0f:1, past [kafka] max_compression_ratio = %d "
                    "that the memory plan assumes: librdkafka decompresses each fetch response whole, so %d "
                    "response%s of fetch.max.bytes = %s may take %s where the plan counts %s. Raise "
                    "max_compression_ratio to %d (inferd --plan shows the host_budget that needs), or compress "
                    "the input less",
                    ratio, planned, responses, responses == 1 ? "" : "s",
                    units_format_size(k->limits.fetch_max_bytes, wire, sizeof(wire)),
                    units_format_size((uint64_t)((double)responses * (1.0 + ratio) *
                                                 (double)k->limits.fetch_max_bytes),
                                      would, sizeof(would)),
                    units_format_size(plan_kafka_fetch_scale(responses, planned) * k->limits.fetch_max_bytes, term,
                                      sizeof(term)),
                    (int)(ratio + 0.999));
}

void kafka_fetch_check(kafka_t *k, json_t *stats) {
        json_t *parts, *v;
        const char *key;
        int64_t wire = 0, records = 0;
        int leaders = 0;

        json_object_foreach(json_object_get(stats, "brokers"), key, v) {
                if (kafka_json_int(v, "rxbytes") > 0)
                        wire += kafka_json_int(v, "rxbytes");
                if (kafka_json_int(v, "nodeid") >= 0 && kafka_fetch_leads(k, v))
                        leaders++;
        }
        parts = json_object_get(json_object_get(json_object_get(stats, "topics"), k->cfg->kafka.input_topic),
                                "partitions");
        json_object_foreach(parts, key, v)
                if (kafka_json_int(v, "partition") >= 0 && kafka_json_int(v, "rxbytes") > 0)
                        records += kafka_json_int(v, "rxbytes");

        /* From the handle's start (both counters start at 0): the first
         * document may come after a whole backlog was fetched. */
        if (wire - k->fetch_seen.wire_bytes >= KAFKA_FETCH_JUDGE_MIN_BYTES && !k->fetch_seen.ratio_said) {
                double ratio = (double)(records - k->fetch_seen.record_bytes) /
                               (double)(wire - k->fetch_seen.wire_bytes);

                if (ratio > (double)k->cfg->kafka.max_compression_ratio)
                        kafka_fetch_say_ratio(k, ratio);
        }
        if (wire - k->fetch_seen.wire_bytes >= KAFKA_FETCH_JUDGE_MIN_BYTES) {
                k->fetch_seen.wire_bytes = wire;
                k->fetch_seen.record_bytes = records;
        }
        if (leaders > kafka_fetch_responses(k->cfg) && !k->fetch_seen.leaders_said) {
                k->fetch_seen.leaders_said = true;
                log_warning("%d brokers lead the input partitions assigned here, and librdkafka fetches from each "
                            "at once, but the memory plan counts %d fetch response%s (the addresses in [kafka] "
                            "brokers): list every broker in brokers so that the plan counts them",
                            leaders, kafka_fetch_responses(k->cfg), kafka_fetch_responses(k->cfg) == 1 ? "" : "s");
        }
}

/* One [kafka.client] / [kafka.consumer] / [kafka.producer] line that sets
 * a limit the plan sets: said, since librdkafka then holds what the plan
 * does not count (or less than it could). */
static void kafka_fetch_say_override(const cfg_kv_list_t *l, const char *section, const char *name,
                                     uint64_t planned) {
        for (size_t i = 0; i < l->n; i++)
                if (!strcmp(l->items[i].name, name))
                        log_warning("[%s] %s = %s replaces the memory plan's %" PRIu64 ": librdkafka may then "
                                    "hold memory that [memory] host_budget does not count",
                                    section, name, l->items[i].value, planned);
}

void kafka_fetch_say_overrides(const cfg_t *c, const kafka_limits_t *lim) {
        static const char *client = "kafka.client", *consumer = "kafka.consumer", *producer = "kafka.producer";
        const struct {
                const cfg_kv_list_t *list;
                const char *section;
        } consumer_lists[] = { { &c->kafka_client, client }, { &c->kafka_consumer, consumer } },
          producer_lists[] = { { &c->kafka_client, client }, { &c->kafka_producer, producer } };

        for (size_t i = 0; i < 2; i++) {
                kafka_fetch_say_override(consumer_lists[i].list, consumer_lists[i].section,
                                         "queued.max.messages.kbytes", lim->queued_max_kbytes);
                kafka_fetch_say_override(consumer_lists[i].list, consumer_lists[i].section, "fetch.max.bytes",
                                         lim->fetch_max_bytes);
                kafka_fetch_say_override(consumer_lists[i].list, consumer_lists[i].section,
                                         "max.partition.fetch.bytes", lim->partition_fetch_max_bytes);
                kafka_fetch_say_override(producer_lists[i].list, producer_lists[i].section,
                                         "queue.buffering.max.kbytes", lim->producer_queue_kbytes);
        }
}

/* kafka_priv: the kafka module's own header, shared by kafka.c (the handles,
 * their callbacks, consuming and producing, the metrics' view),
 * kafka_txn.c (exactly-once: the transactions and the rewind) and
 * kafka_fetch.c (the fetch responses against the plan). Nothing else
 * includes it; the interface is kafka.h. */
#ifndef INFERD_KAFKA_PRIV_H
#define INFERD_KAFKA_PRIV_H

#include <jansson.h>
#include <pthread.h>

#include "kafka/kafka.h"
#include "kafka/kafka_auth.h"

/* The metrics' view of the input topic's partitions: one entry per
 * partition seen assigned, kept (unassigned) after a revoke so that the
 * array never shrinks while the loop runs. */
typedef struct kafka_part {
        int32_t partition;
        bool assigned;
        int64_t lag_records;            /* from the last statistics; -1 = not known yet */
        int64_t last_taken_ts_ms;       /* the Kafka timestamp of the last record consumed; -1 = none */
} kafka_part_t;

#define KAFKA_ERROR_KINDS_MAX 32

/* What the statistics showed of the fetch responses against the plan's
 * shape (kafka_fetch_check). */
typedef struct kafka_fetch_seen {
        int64_t wire_bytes;             /* the brokers' rxbytes, summed, at the last judgement (0 at start) */
        int64_t record_bytes;           /* the input partitions' rxbytes (records, decompressed), summed */
        bool ratio_said, leaders_said;  /* each logged once */
} kafka_fetch_seen_t;

/* The transaction thread's one job (kafka_txn_thread.c). lock guards
 * pending and quit; the rest is the owner's while !pending, the thread's
 * while pending. */
typedef struct kafka_txn_job {
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        int fd;                         /* eventfd: a job is done */
        bool inited, started, quit;
        bool pending;                   /* handed to the thread, not yet done */
        bool busy;                      /* handed over and not yet collected (the owner's) */
        kafka_txn_job_kind_t kind;
        rd_kafka_topic_partition_list_t *offsets;       /* owned; NULL: none */
        int timeout_ms;
        bool rewind;
        /* The result. */
        int status;
        bool committed, aborted;
        char cause[512];
        rd_kafka_topic_partition_list_t *rewind_to;     /* owned until collected */
        errbuf_t err;
} kafka_txn_job_t;

struct kafka {
        rd_kafka_t *consumer;
        rd_kafka_t *producer;
        rd_kafka_queue_t *consumer_q;   /* the consumer queue; the main queue is forwarded to it */
        rd_kafka_queue_t *producer_q;   /* the producer's main queue */
        int consumer_fd;                /* eventfd: the consumer queue became non-empty */
        int producer_fd;                /* eventfd: the producer queue became non-empty */
        const cfg_t *cfg;               /* borrowed, for the topic names */
        kafka_callbacks_t cb;
        void *userdata;
        bool paused;
        bool closed;                    /* kafka_close_start was called: leaving the group */
        bool close_done;                /* the close ended (or could not begin) */
        rd_kafka_queue_t *close_q;      /* the close's ops (kafka_close_serve); NULL before it */
        uint64_t close_started_us;
        bool transactional;             /* [kafka] delivery = exactly-once */
        bool txn_open;                  /* a transaction was begun and not yet ended */
        bool txn_failed;                /* librdkafka failed the open transaction: it purged an output
                                         * (kafka_dr_cb); it can only be aborted */
        kafka_txn_job_t txn_job;        /* the transaction thread */
        rd_kafka_topic_partition_list_t *revoke;        /* owned: a deferred revoke's partitions; NULL: none */
        bool revoke_coop;               /* it is incremental (cooperative protocol) */

        /* For the metrics (kafka_get_lag, kafka_get_errors). */
        kafka_part_t *parts;
        size_t n_parts, cap_parts;
        metrics_count_t errors[KAFKA_ERROR_KINDS_MAX];  /* labels owned */
        uint64_t error_logged_us[KAFKA_ERROR_KINDS_MAX];        /* last line logged; 0 = never */
        uint64_t error_unlogged[KAFKA_ERROR_KINDS_MAX];         /* since that line */
        size_t n_errors;
        kafka_auth_t auth;              /* TLS and SASL failures, for the log and /healthz */

        /* For /readyz (kafka_get_health): set by the errors that say so,
         * cleared by the events that prove otherwise. */
        bool brokers_down;              /* ALL_BROKERS_DOWN, until a broker is UP again (statistics) */
        bool auth_failed;               /* authentication or authorization refused, until a record flows */
        int64_t rx_msgs;                /* the consumer's rxmsgs (records fetched from the brokers) at its
                                         * last statistics; -1 before them. Logged when leaving the group */
        kafka_limits_t limits;          /* the plan's, as set on the handles */
        kafka_fetch_seen_t fetch_seen;  /* the fetch responses' shape measured (kafka_fetch.c) */
};

/* The entry of the input topic's partition in k->parts; NULL when there is
 * none (add: made, unassigned, when there is room). */
kafka_part_t *kafka_part(kafka_t *k, int32_t partition, bool add);

/* The integer at key in a statistics object; -1 when it is not one. */
int64_t kafka_json_int(json_t *o, const char *key);

/* Compares one statistics document's fetch figures with the plan's shape
 * (kafka_fetch.c): the ratio of the records' bytes to the bytes on the wire
 * since the last document, and the brokers that lead the assigned input
 * partitions; logs a warning once for each that passes the plan's. */
void kafka_fetch_check(kafka_t *k, json_t *stats);

/* Logs a warning for each line of c's [kafka.client], [kafka.consumer] and
 * [kafka.producer] that replaces one of the plan's limits (lim). */
void kafka_fetch_say_overrides(const cfg_t *c, const kafka_limits_t *lim);

/* The transaction thread (kafka_txn_thread.c), started by kafka_new (in
 * both delivery modes: at least once it commits a revoke's offsets) and
 * stopped by kafka_free. */
int kafka_txn_thread_start(kafka_t *k, errbuf_t *err);
void kafka_txn_thread_stop(kafka_t *k);

/* The calls the thread makes (kafka_txn.c), which touch none of k's state:
 * sends offsets (if any) with the consumer's group metadata to the open
 * transaction and commits it; aborts it; reads the assignment with the
 * group's committed offsets (the beginning where none). timeout_ms: each
 * call's, -1 for librdkafka's recommended (the transaction's remaining
 * timeout; KAFKA_TXN_TIMEOUT_MS for the offsets). */
int kafka_txn_commit_calls(kafka_t *k, const rd_kafka_topic_partition_list_t *offsets, int timeout_ms,
                           errbuf_t *err);
int kafka_txn_abort_call(kafka_t *k, int timeout_ms, errbuf_t *err);
int kafka_committed_read(kafka_t *k, rd_kafka_topic_partition_list_t **ret, errbuf_t *err);

/* Something worked end to end (a record consumed, an output acknowledged,
 * partitions assigned): the cluster is reachable and accepts us. */
void kafka_health_ok(kafka_t *k);

/* Marks the input topic's partitions of parts (un)assigned, their lag
 * unknown. */
void kafka_parts_assigned(kafka_t *k, const rd_kafka_topic_partition_list_t *parts, bool assigned);

/* m came while fetching is paused: librdkafka dropped the pause of its
 * partition, which is paused again (kafka_rebalance.c). */
void kafka_pause_again(kafka_t *k, const rd_kafka_message_t *m);

/* librdkafka's rebalance_cb (kafka_rebalance.c); here so that the unit tests can
 * hand it an event that librdkafka itself never sends (a failed rebalance). */
void kafka_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                        void *opaque);

#endif

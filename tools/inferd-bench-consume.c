/* inferd-bench-consume: a bare librdkafka consumer that copies each record
 * into staging as the daemon's pipeline does, for tools/bench-pipeline.
 *
 *   inferd-bench-consume -b BROKERS -t TOPIC -g GROUP --count N [--copy slot|none]
 *                        [--batch B] [--slots S] [--threads-out FILE] [--timeout-s S]
 *                        [-X PROPERTY=VALUE]...
 *
 * It joins GROUP, reads TOPIC from the beginning, and for each record copies
 * its value into a ring of S slots of B record places with engine_slot_copy,
 * the very copy by which the pipeline places a record in its slot's pinned
 * staging, then lets the message go. Nothing else: no validation, no
 * produce, no offset commit (enable.auto.commit is off). It prints one line,
 * the records/s from its first record to its N-th (the monotonic clock at
 * each consume, start-up and the group's join left out, as bench-pipeline
 * times kcat). --threads-out FILE gets its threads' CPU seconds by name when
 * the N-th record is in (librdkafka's broker thread decompresses). --copy
 * none copies nothing: then it is the bare consumer alone.
 *
 * Why it exists: on a broker where one librdkafka thread fetches and
 * decompresses everything (the mock), kcat printing offsets never reads the
 * records it decompressed, and the pipeline must. This measures, in the same
 * run, how much of the pipeline's distance to kcat that copy alone makes.
 * Defaults: --copy slot, --batch 64, --slots 2 (bench-pipeline's daemon
 * config and its plan), --timeout-s 60; librdkafka's consumer defaults
 * otherwise, as kcat's. Exit status: 0 after N records, 1 on a consumer
 * error or when no record came for --timeout-s, 2 for bad arguments.
 *
 * It is not a Kafka client for anything else, and it judges no figure. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "core/units.h"
#include "kafka/kafka.h"
#include "engine/engine.h"

typedef struct bench_opts {
        const char *brokers, *topic, *group, *threads_out;
        long count, batch, slots, timeout_s;
        int copy;
} bench_opts_t;

/* The staging ring: slots x batch record places of place_bytes each (a
 * record's length rounded up to a cache line), its pages touched once, as
 * the daemon's pinned staging is at start. */
typedef struct staging_ring {
        unsigned char *base;
        size_t place_bytes;
        long places, next;
} staging_ring_t;

static void usage(FILE *f) {
        fprintf(f,
                "usage: inferd-bench-consume -b BROKERS -t TOPIC -g GROUP --count N [--copy slot|none]\n"
                "                            [--batch B] [--slots S] [--threads-out FILE] [--timeout-s S]\n"
                "                            [-X PROPERTY=VALUE]...\n"
                "Reads N records of TOPIC from the beginning in GROUP and copies each value into a\n"
                "ring of S x B staging places (the pipeline's slot copy); prints records/s from the\n"
                "first record to the N-th. Defaults: --copy slot, --batch 64, --slots 2, --timeout-s 60.\n");
}

static double now_s(void) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Returns where a record of len bytes goes next, growing the ring (and
 * touching its pages) when len does not fit a place; NULL when out of
 * memory. */
static void *staging_ring_next(staging_ring_t *ring, size_t len) {
        void *at;

        if (len > ring->place_bytes) {
                size_t place = (len + 63) & ~(size_t)63;

                free(ring->base);
                ring->base = aligned_alloc(4096, ((size_t)ring->places * place + 4095) & ~(size_t)4095);
                if (!ring->base)
                        return NULL;
                memset(ring->base, 0, (size_t)ring->places * place);
                ring->place_bytes = place;
                ring->next = 0;
        }
        at = ring->base + (size_t)ring->next * ring->place_bytes;
        ring->next = (ring->next + 1) % ring->places;
        return at;
}

/* Writes "NAME SECONDS" for each of this process's threads to path (CPU
 * seconds, user + system, as bench-pipeline's threads-GROUP files). */
static int threads_write(const char *path) {
        long hz = sysconf(_SC_CLK_TCK);
        struct dirent *de;
        DIR *d;
        FILE *out;

        out = fopen(path, "w");
        if (!out)
                return -errno;
        d = opendir("/proc/self/task");
        if (!d) {
                fclose(out);
                return -errno;
        }
        while ((de = readdir(d))) {
                char p[300], line[1024], name[64] = "";
                unsigned long utime = 0, stime = 0;
                char *open_paren, *close_paren;
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(p, sizeof p, "/proc/self/task/%s/stat", de->d_name);
                f = fopen(p, "r");
                if (!f)
                        continue;
                if (!fgets(line, sizeof line, f)) {
                        fclose(f);
                        continue;
                }
                fclose(f);
                /* pid (comm) state ... utime stime: the 14th and 15th fields. */
                open_paren = strchr(line, '(');
                close_paren = strrchr(line, ')');
                if (!open_paren || !close_paren || close_paren < open_paren)
                        continue;
                snprintf(name, sizeof name, "%.*s", (int)(close_paren - open_paren - 1), open_paren + 1);
                if (sscanf(close_paren + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
                        continue;
                fprintf(out, "%s %.2f\n", name, (double)(utime + stime) / (double)hz);
        }
        closedir(d);
        return fclose(out) ? -errno : 0;
}

/* Returns 0, 1 after --help, or -EINVAL (said on stderr). */
static int parse_args(int argc, char **argv, bench_opts_t *o, rd_kafka_conf_t *conf) {
        static const struct option longs[] = {
                { "count", required_argument, NULL, 'n' },  { "copy", required_argument, NULL, 'C' },
                { "batch", required_argument, NULL, 'B' },  { "slots", required_argument, NULL, 'S' },
                { "threads-out", required_argument, NULL, 'T' }, { "timeout-s", required_argument, NULL, 'W' },
                { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
        };
        char err[512];
        int c;

        while ((c = getopt_long(argc, argv, "b:t:g:X:h", longs, NULL)) != -1) {
                switch (c) {
                case 'b': o->brokers = optarg; break;
                case 't': o->topic = optarg; break;
                case 'g': o->group = optarg; break;
                case 'n':
                        if (units_parse_long(optarg, 1, 1000000000L, &o->count) < 0)
                                goto bad;
                        break;
                case 'C':
                        if (strcmp(optarg, "slot") && strcmp(optarg, "none"))
                                goto bad;
                        o->copy = !strcmp(optarg, "slot");
                        break;
                case 'B':
                        if (units_parse_long(optarg, 1, 4096, &o->batch) < 0)
                                goto bad;
                        break;
                case 'S':
                        if (units_parse_long(optarg, 1, 64, &o->slots) < 0)
                                goto bad;
                        break;
                case 'T': o->threads_out = optarg; break;
                case 'W':
                        if (units_parse_long(optarg, 1, 86400, &o->timeout_s) < 0)
                                goto bad;
                        break;
                case 'X':
                        if (kafka_conf_set_pair(conf, optarg, err, sizeof err) < 0) {
                                if (!err[0])
                                        fprintf(stderr, "inferd-bench-consume: -X takes PROPERTY=VALUE, not '%s'\n",
                                                optarg);
                                else
                                        fprintf(stderr, "inferd-bench-consume: -X %.*s: %s\n",
                                                (int)strcspn(optarg, "="), optarg, err);
                                return -EINVAL;
                        }
                        break;
                case 'h': usage(stdout); return 1;
                default: usage(stderr); return -EINVAL;
                }
        }
        if (optind != argc || !o->brokers || !o->topic || !o->group || !o->count) {
                usage(stderr);
                return -EINVAL;
        }
        return 0;
bad:
        for (int i = 0; longs[i].name; i++)
                if (longs[i].val == c)
                        fprintf(stderr, "inferd-bench-consume: bad value '%s' for --%s\n", optarg, longs[i].name);
        return -EINVAL;
}

/* Reads o->count records, copying each; returns 0 and the rate in *rate,
 * or -EIO on a consumer error or timeout (said on stderr). */
static int consume(rd_kafka_t *rk, const bench_opts_t *o, double *rate) {
        staging_ring_t ring = { .places = o->slots * o->batch };
        double first = 0, last = 0, quiet_since = now_s();
        long got = 0;
        int r = 0;

        while (got < o->count) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);

                if (!m) {
                        if (now_s() - quiet_since > (double)o->timeout_s) {
                                fprintf(stderr, "inferd-bench-consume: %ld of %ld records, then none for %ld s\n", got,
                                        o->count, o->timeout_s);
                                r = -EIO;
                                break;
                        }
                        continue;
                }
                quiet_since = now_s();
                if (m->err) {
                        bool fatal = m->err == RD_KAFKA_RESP_ERR__FATAL || m->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;

                        fprintf(stderr, "inferd-bench-consume: %s\n", rd_kafka_message_errstr(m));
                        rd_kafka_message_destroy(m);
                        if (fatal) {
                                r = -EIO;
                                break;
                        }
                        continue;
                }
                if (o->copy && m->len) {
                        void *dst = staging_ring_next(&ring, m->len);

                        if (!dst) {
                                fprintf(stderr, "inferd-bench-consume: no memory for the staging ring\n");
                                rd_kafka_message_destroy(m);
                                r = -ENOMEM;
                                break;
                        }
                        engine_slot_copy(dst, m->payload, m->len);
                }
                rd_kafka_message_destroy(m);
                last = now_s();
                if (got++ == 0)
                        first = last;
        }
        if (r == 0 && o->threads_out) {
                int w = threads_write(o->threads_out);

                if (w < 0)
                        fprintf(stderr, "inferd-bench-consume: cannot write %s: %s\n", o->threads_out, strerror(-w));
        }
        free(ring.base);
        *rate = got > 1 && last > first ? (double)(got - 1) / (last - first) : 0;
        return r;
}

int main(int argc, char **argv) {
        bench_opts_t o = { .batch = 64, .slots = 2, .timeout_s = 60, .copy = 1 };
        rd_kafka_topic_partition_list_t *topics;
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_resp_err_t e;
        rd_kafka_t *rk;
        char err[512];
        double rate = 0;
        int r;

        r = parse_args(argc, argv, &o, conf);
        if (r != 0) {
                rd_kafka_conf_destroy(conf);
                return r > 0 ? 0 : 2;
        }
        if (rd_kafka_conf_set(conf, "bootstrap.servers", o.brokers, err, sizeof err) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "group.id", o.group, err, sizeof err) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "inferd-bench-consume: %s\n", err);
                rd_kafka_conf_destroy(conf);
                return 2;
        }
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
        if (!rk) {
                fprintf(stderr, "inferd-bench-consume: cannot create the consumer: %s\n", err);
                rd_kafka_conf_destroy(conf);
                return 1;
        }
        conf = NULL; /* the consumer owns it now */
        rd_kafka_poll_set_consumer(rk);
        topics = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(topics, o.topic, RD_KAFKA_PARTITION_UA);
        e = rd_kafka_subscribe(rk, topics);
        rd_kafka_topic_partition_list_destroy(topics);
        if (e) {
                fprintf(stderr, "inferd-bench-consume: cannot subscribe to %s: %s\n", o.topic, rd_kafka_err2str(e));
                rd_kafka_destroy(rk);
                return 1;
        }
        r = consume(rk, &o, &rate);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        if (r < 0)
                return 1;
        printf("%.0f\n", rate);
        return 0;
}

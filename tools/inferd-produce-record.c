/* inferd-produce-record: produces one record whose value and header values
 * may come from files, for tests that need a header larger than a command
 * line can carry (kcat's -H takes its value from the command line, where
 * Linux caps one argument at 128 KiB):
 *
 *   inferd-produce-record -b BROKERS -t TOPIC [-p PARTITION] [-k KEY]
 *                         [-H NAME=VALUE | -H NAME=@FILE]... [-X PROPERTY=VALUE]...
 *                         VALUE_FILE
 *
 * The headers go in the order given. -X sets librdkafka properties (say
 * message.max.bytes=10000000, compression.type=zstd). Exits 0 once the
 * record is acknowledged, 1 with the reason otherwise.
 *
 * Not a load producer (inferd-produce is). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "core/textfile.h"
#include "kafka/kafka.h"

/* A value or header file may be this large. */
#define PRODUCE_RECORD_FILE_MAX ((size_t)64 << 20)

static void usage(FILE *f) {
        fprintf(f, "usage: inferd-produce-record -b BROKERS -t TOPIC [-p PARTITION] [-k KEY]\n"
                   "                             [-H NAME=VALUE|NAME=@FILE]... [-X PROPERTY=VALUE]... VALUE_FILE\n");
}

/* Adds header NAME=VALUE or NAME=@FILE (arg, changed in place) to h.
 * Returns 0, or -1 having said why. */
static int produce_record_header(rd_kafka_headers_t *h, char *arg) {
        char *eq = strchr(arg, '='), *v = NULL;
        errbuf_t err = {};
        size_t len;

        if (!eq || eq == arg) {
                fprintf(stderr, "inferd-produce-record: -H %s: not NAME=VALUE\n", arg);
                return -1;
        }
        *eq = '\0';
        if (eq[1] != '@') {
                rd_kafka_header_add(h, arg, -1, eq + 1, -1);
                return 0;
        }
        if (textfile_read(eq + 2, PRODUCE_RECORD_FILE_MAX, "header file", &v, &len, &err) < 0) {
                fprintf(stderr, "inferd-produce-record: %s\n", err.msg);
                return -1;
        }
        rd_kafka_header_add(h, arg, -1, v, (ssize_t)len);
        free(v);
        return 0;
}

static void produce_record_delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        *(rd_kafka_resp_err_t *)opaque = m->err;
}

int main(int argc, char **argv) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_headers_t *h = rd_kafka_headers_new(8);
        rd_kafka_resp_err_t re, delivered = RD_KAFKA_RESP_ERR__IN_PROGRESS;
        const char *brokers = NULL, *topic = NULL, *key = NULL;
        char why[512], *value = NULL;
        int32_t partition = RD_KAFKA_PARTITION_UA;
        errbuf_t err = {};
        rd_kafka_t *rk = NULL;
        size_t len = 0;
        int c, rc = 1;

        while ((c = getopt(argc, argv, "b:t:p:k:H:X:h")) != -1) {
                switch (c) {
                case 'b':
                        brokers = optarg;
                        break;
                case 't':
                        topic = optarg;
                        break;
                case 'p':
                        partition = atoi(optarg);
                        break;
                case 'k':
                        key = optarg;
                        break;
                case 'H':
                        if (produce_record_header(h, optarg) < 0)
                                goto out;
                        break;
                case 'X':
                        if (kafka_conf_set_pair(conf, optarg, why, sizeof(why)) < 0) {
                                fprintf(stderr, "inferd-produce-record: -X %s: %s\n", optarg, why);
                                goto out;
                        }
                        break;
                case 'h':
                        usage(stdout);
                        rc = 0;
                        goto out;
                default:
                        usage(stderr);
                        goto out;
                }
        }
        if (!brokers || !topic || optind != argc - 1) {
                usage(stderr);
                goto out;
        }
        if (textfile_read(argv[optind], PRODUCE_RECORD_FILE_MAX, "value file", &value, &len, &err) < 0) {
                fprintf(stderr, "inferd-produce-record: %s\n", err.msg);
                goto out;
        }
        rd_kafka_conf_set_dr_msg_cb(conf, produce_record_delivered);
        rd_kafka_conf_set_opaque(conf, &delivered);
        if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, why, sizeof(why)) != RD_KAFKA_CONF_OK ||
            !(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why)))) {
                fprintf(stderr, "inferd-produce-record: %s\n", why);
                goto out;
        }
        conf = NULL;    /* rk's now */
        re = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                               RD_KAFKA_V_KEY(key, key ? strlen(key) : 0), RD_KAFKA_V_VALUE(value, len),
                               RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (re) {
                fprintf(stderr, "inferd-produce-record: %s\n", rd_kafka_err2str(re));
                goto out;
        }
        h = NULL;       /* rk's now */
        rd_kafka_flush(rk, 30000);
        if (delivered != RD_KAFKA_RESP_ERR_NO_ERROR)
                fprintf(stderr, "inferd-produce-record: not delivered: %s\n", rd_kafka_err2str(delivered));
        else
                rc = 0;
out:
        if (h)
                rd_kafka_headers_destroy(h);
        if (rk)
                rd_kafka_destroy(rk);
        if (conf)
                rd_kafka_conf_destroy(conf);
        free(value);
        return rc;
}

/* inferd-mock-broker: an embedded Kafka cluster for the demo and the tests.
 *
 *   inferd-mock-broker [--brokers N] [--topic NAME:PARTITIONS]...
 *
 * It is librdkafka's own mock cluster, which speaks the real Kafka protocol on
 * loopback, so any client (kcat, librdkafka, the daemon) can use it. The
 * bootstrap address is the first line on stdout; then it runs until SIGTERM or
 * SIGINT. A test can take brokers down and bring them back:
 *   SIGUSR1 / SIGUSR2        every broker down / up;
 *   stdin "down" / "up"      every broker down / up;
 *   stdin "down N" / "up N"  broker N (ids are 1..brokers) down / up;
 *   stdin "rtt MS"           every broker answers each request MS ms late (0: at once);
 * each acknowledged by one line on stdout ("brokers down", "broker 2 up",
 * "brokers rtt 2500 ms"), or
 * "error: ..." for a line it does not understand. End of stdin is not a stop.
 *
 * It is not a Kafka server for real data: everything lives in memory and is
 * lost at exit, each partition keeps only about its last 5 MiB (older records
 * are dropped without an error; librdkafka 2.0.2's mock has no setting for
 * it), and the Admin API (CreateTopics) is not supported by the mock; topics
 * come from --topic or from a producer's auto-creation. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "core/units.h"
#include <librdkafka/rdkafka_mock.h>

#define MOCK_MAX_BROKERS 16
#define MOCK_MAX_TOPICS 128
#define MOCK_MAX_PARTITIONS 1024

typedef struct mock_topic {
        char name[250];                 /* Kafka's limit is 249 characters */
        int partitions;
} mock_topic_t;

typedef struct mock {
        rd_kafka_t *rk;                 /* owns the cluster's bookkeeping */
        rd_kafka_mock_cluster_t *cluster;
        int brokers;
} mock_t;

static void usage(FILE *f) {
        fprintf(f,
                "usage: inferd-mock-broker [--brokers N] [--topic NAME:PARTITIONS]...\n"
                "Runs librdkafka's mock Kafka cluster on loopback and prints its bootstrap\n"
                "address as the first line. SIGUSR1/SIGUSR2 or \"down [N]\"/\"up [N]\" on stdin\n"
                "take brokers down and up; \"rtt MS\" on stdin delays every answer by MS ms.\n"
                "SIGTERM or SIGINT stops it. Each partition keeps only its last 5 MiB or so\n"
                "(librdkafka's mock has no setting for it): older records vanish without an\n"
                "error, so produce compressible records, or fewer.\n");
}

/* Parses "NAME:PARTITIONS". Returns 0 or -EINVAL. */
static int parse_topic(const char *s, mock_topic_t *t) {
        const char *colon = strrchr(s, ':');
        char *end;
        long n;

        if (!colon || colon == s || (size_t)(colon - s) >= sizeof(t->name))
                return -EINVAL;
        errno = 0;
        n = strtol(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end || n < 1 || n > MOCK_MAX_PARTITIONS)
                return -EINVAL;
        memcpy(t->name, s, (size_t)(colon - s));
        t->name[colon - s] = '\0';
        t->partitions = (int)n;
        return 0;
}

/* Sets broker id (-1 = all) up or down and acknowledges on stdout. */
static void mock_set(mock_t *m, int id, int up) {
        rd_kafka_resp_err_t e;

        e = up ? rd_kafka_mock_broker_set_up(m->cluster, id)
               : rd_kafka_mock_broker_set_down(m->cluster, id);
        if (e)
                printf("error: %s\n", rd_kafka_err2str(e));
        else if (id < 0)
                printf("brokers %s\n", up ? "up" : "down");
        else
                printf("broker %d %s\n", id, up ? "up" : "down");
        fflush(stdout);
}

/* One command line from stdin (without its newline). */
static void mock_command(mock_t *m, char *line) {
        char word[16], extra;
        int id = -1, n, up;

        n = sscanf(line, "%15s %d %c", word, &id, &extra);
        if (n < 1)
                return;         /* blank line */
        if (strcmp(word, "rtt") == 0) {
                rd_kafka_resp_err_t e;

                if (n != 2 || id < 0 || id > 60000)
                        goto bad;
                e = rd_kafka_mock_broker_set_rtt(m->cluster, -1, id);
                if (e)
                        printf("error: %s\n", rd_kafka_err2str(e));
                else
                        printf("brokers rtt %d ms\n", id);
                fflush(stdout);
                return;
        }
        if (strcmp(word, "down") == 0)
                up = 0;
        else if (strcmp(word, "up") == 0)
                up = 1;
        else
                goto bad;
        if (n == 1)
                id = -1;
        else if (n != 2 || id < 1 || id > m->brokers)
                goto bad;
        mock_set(m, id, up);
        return;
bad:
        printf("error: '%s' is not \"down\", \"up\", \"down N\" or \"up N\" with N in 1..%d, or \"rtt MS\" "
               "with MS in 0..60000\n", line, m->brokers);
        fflush(stdout);
}

/* Reads what stdin has; runs every complete line. Returns 0, or 1 at EOF. */
static int mock_read_stdin(mock_t *m, char *buf, size_t cap, size_t *len) {
        ssize_t k = read(STDIN_FILENO, buf + *len, cap - 1 - *len);
        char *nl;

        if (k < 0)
                return errno == EINTR || errno == EAGAIN ? 0 : 1;
        if (k == 0)
                return 1;
        *len += (size_t)k;
        buf[*len] = '\0';
        while ((nl = strchr(buf, '\n'))) {
                *nl = '\0';
                mock_command(m, buf);
                *len -= (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, *len + 1);
        }
        if (*len == cap - 1) {  /* a line longer than any command: drop it */
                printf("error: line too long\n");
                fflush(stdout);
                *len = 0;
        }
        return 0;
}

/* Reads the command line into *m and topics[]. Returns -1 to go on, or
 * the exit status (0 after --help, 2 for a usage error). */
static int mock_parse_args(int argc, char **argv, mock_t *m, mock_topic_t *topics, int *ntopics) {
        static const struct option opts[] = {
                { "brokers", required_argument, NULL, 'b' },
                { "topic", required_argument, NULL, 't' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "b:t:h", opts, NULL)) != -1) {
                switch (c) {
                case 'b': {
                        long n;

                        if (units_parse_long(optarg, 1, MOCK_MAX_BROKERS, &n) < 0) {
                                fprintf(stderr, "inferd-mock-broker: --brokers '%s' is not in 1..%d\n",
                                        optarg, MOCK_MAX_BROKERS);
                                return 2;
                        }
                        m->brokers = (int)n;
                        break;
                }
                case 't':
                        if (*ntopics == MOCK_MAX_TOPICS) {
                                fprintf(stderr, "inferd-mock-broker: more than %d topics\n", MOCK_MAX_TOPICS);
                                return 2;
                        }
                        if (parse_topic(optarg, &topics[*ntopics]) < 0) {
                                fprintf(stderr,
                                        "inferd-mock-broker: --topic '%s' is not NAME:PARTITIONS "
                                        "with PARTITIONS in 1..%d\n", optarg, MOCK_MAX_PARTITIONS);
                                return 2;
                        }
                        (*ntopics)++;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "inferd-mock-broker: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        return -1;
}

/* The signalfd of SIGTERM, SIGINT, SIGUSR1 and SIGUSR2, or -1 (said).
 * Blocked before librdkafka starts its threads, so that they inherit the
 * mask and the signals reach only the signalfd. */
static int mock_signals(void) {
        sigset_t mask;
        int sfd;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGUSR1);
        sigaddset(&mask, SIGUSR2);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
                perror("inferd-mock-broker: sigprocmask");
                return -1;
        }
        /* A reader of stdout that went away must not take the cluster
         * down with it: an acknowledgement then fails quietly. */
        signal(SIGPIPE, SIG_IGN);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC);
        if (sfd < 0)
                perror("inferd-mock-broker: signalfd");
        return sfd;
}

/* Starts m's cluster with its topics and prints its bootstrap servers.
 * Returns 0, or -1 (said). */
static int mock_start(mock_t *m, const mock_topic_t *topics, int ntopics) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char errstr[512];

        /* The handle only hosts the cluster and never connects: without this,
         * librdkafka warns that no bootstrap.servers is configured. */
        rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr));
        m->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!m->rk) {
                rd_kafka_conf_destroy(conf);
                fprintf(stderr, "inferd-mock-broker: Failed to create the librdkafka handle: %s\n", errstr);
                return -1;
        }
        m->cluster = rd_kafka_mock_cluster_new(m->rk, m->brokers);
        if (!m->cluster) {
                fprintf(stderr, "inferd-mock-broker: Failed to create the mock cluster\n");
                return -1;
        }
        for (int i = 0; i < ntopics; i++) {
                int replicas = m->brokers < 3 ? m->brokers : 3;
                rd_kafka_resp_err_t e;

                e = rd_kafka_mock_topic_create(m->cluster, topics[i].name, topics[i].partitions, replicas);
                if (e) {
                        fprintf(stderr, "inferd-mock-broker: Failed to create topic '%s': %s\n",
                                topics[i].name, rd_kafka_err2str(e));
                        return -1;
                }
        }
        printf("%s\n", rd_kafka_mock_cluster_bootstraps(m->cluster));
        fflush(stdout);
        return 0;
}

/* Serves stdin's commands and the signals until SIGTERM or SIGINT.
 * Returns 0, or -1 (said). */
static int mock_serve(mock_t *m, int sfd) {
        char line[256];
        size_t line_len = 0;
        int stdin_open = 1;

        for (;;) {
                struct pollfd p[2] = {
                        { .fd = sfd, .events = POLLIN },
                        { .fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN },
                };
                struct signalfd_siginfo si;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        perror("inferd-mock-broker: poll");
                        return -1;
                }
                if (p[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))
                        if (mock_read_stdin(m, line, sizeof(line), &line_len))
                                stdin_open = 0;
                if (!(p[0].revents & POLLIN))
                        continue;
                if (read(sfd, &si, sizeof(si)) != sizeof(si))
                        continue;
                if (si.ssi_signo == SIGUSR1)
                        mock_set(m, -1, 0);
                else if (si.ssi_signo == SIGUSR2)
                        mock_set(m, -1, 1);
                else
                        return 0;       /* SIGTERM, SIGINT */
        }
}

int main(int argc, char **argv) {
        mock_topic_t topics[MOCK_MAX_TOPICS];
        int ntopics = 0, sfd, r;
        mock_t m = { .brokers = 1 };

        /* A closed stdin/stdout/stderr would hand its number to the
         * signalfd below, which would then be read as commands: keep them
         * taken. */
        for (int fd = 0; fd <= 2; fd++)
                if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) {
                        perror("inferd-mock-broker: /dev/null");
                        return 1;
                }
        r = mock_parse_args(argc, argv, &m, topics, &ntopics);
        if (r >= 0)
                return r;
        sfd = mock_signals();
        if (sfd < 0)
                return 1;
        r = mock_start(&m, topics, ntopics) == 0 && mock_serve(&m, sfd) == 0 ? 0 : 1;
        if (m.cluster)
                rd_kafka_mock_cluster_destroy(m.cluster);
        if (m.rk)
                rd_kafka_destroy(m.rk);
        close(sfd);
        return r;
}

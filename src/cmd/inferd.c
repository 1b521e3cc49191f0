/* inferd: the daemon's main(). Kafka in, ResNet-50, predictions out.
 *
 *   inferd [-c FILE]                  run (default /etc/inferd/inferd.ini)
 *   inferd --check-config [-c FILE]   validate the file; exit 0 or 1 with the reason
 *   inferd --plan [--json] [-c FILE]  print the memory plan the config gives
 *   inferd --device-info [--json] [-c FILE]
 *                                     the engine's device: name, total, free
 *                                     memory, read without allocating
 *   inferd --print-config [-c FILE]   the config as loaded, every default
 *                                     filled in (for inferd-cutover's checks)
 *   inferd --topic-partitions [-c FILE]
 *                                     the input topic's partition count, asked
 *                                     of the brokers with the consumer's settings
 *   inferd --bench-pipeline [-c FILE] the pipeline benchmark: the daemon with the
 *                                     model's compute left out (tools/bench-pipeline)
 *   inferd --print-config-reference   every config key, as markdown (docs/config.md)
 *   inferd --print-config-man         the same, as the man page inferd.ini(5) (man/inferd.ini.5)
 *   inferd --version                  the version (the VERSION file, through the Makefile)
 *
 * main() keeps the fixed order of systemd's daemons: parse arguments and
 * config, block the signals (before librdkafka or the engine start threads),
 * create the manager, start up (READY=1 is sent there), run the loop, tear
 * down. Everything else is in daemon.c. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <limits.h>
#include <malloc.h>
#include <unistd.h>

#include "config/cfg.h"
#include "engine/devinfo.h"
#include "daemon/daemon.h"
#include "core/errbuf.h"
#include "config/log.h"

#ifndef INFERD_VERSION
#error "INFERD_VERSION is set by the Makefile from the VERSION file"
#endif

static void usage(FILE *f) {
        fprintf(f, "Usage: inferd [-c FILE]\n"
                   "       inferd --check-config [-c FILE]\n"
                   "       inferd --plan [--json] [-c FILE]\n"
                   "       inferd --device-info [--json] [-c FILE]\n"
                   "       inferd --print-config [-c FILE]\n"
                   "       inferd --topic-partitions [-c FILE]\n"
                   "       inferd --bench-pipeline [-c FILE]   (a benchmark: the model is not run)\n"
                   "       inferd --print-config-reference     (every config key, as markdown)\n"
                   "       inferd --print-config-man           (the same, as the man page inferd.ini(5))\n"
                   "       inferd --version\n"
                   "\n"
                   "Consumes images from Kafka, classifies them with ResNet-50 and produces\n"
                   "predictions. FILE (-c FILE or --config FILE) defaults to " CFG_DEFAULT_PATH ".\n");
}

/* Loads and checks the config, including the librdkafka passthrough keys. */
static int check_config(const char *path, cfg_t **ret, errbuf_t *err) {
        rd_kafka_conf_t *conf;
        cfg_t *c = NULL;
        int r;

        r = cfg_load(&c, path, err);
        if (r < 0)
                return r;
        for (int producer = 0; producer <= 1; producer++) {
                conf = rd_kafka_conf_new();
                if (!conf) {
                        cfg_free(c);
                        return -ENOMEM;
                }
                r = cfg_kafka_apply(c, producer, conf, err);
                rd_kafka_conf_destroy(conf);
                if (r < 0) {
                        cfg_free(c);
                        return r;
                }
        }
        r = daemon_check_host_budget(c, err);
        if (r < 0) {
                errbuf_prefix(err, r, "%s: [decode]", path);
                cfg_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

/* --device-info: the device the config's engine would run on (without -c:
 * backend auto, device 0, and no config is read, so that an operator can
 * ask about the card before writing one). No allocation: see devinfo.h. */
static int device_info(const char *path, bool json) {
        backend_t backend = BACKEND_AUTO;
        errbuf_t err = {};
        devinfo_t info;
        int device = 0, r;

        if (path) {
                cfg_t *c = NULL;

                r = cfg_load(&c, path, &err);
                if (r < 0) {
                        fprintf(stderr, "inferd: %s\n", err.msg);
                        return 1;
                }
                backend = c->engine.backend;
                device = c->engine.device;
                cfg_free(c);
        }
        r = devinfo_query(backend, device, &info, &err);
        if (r < 0) {
                fprintf(stderr, "inferd: %s\n", err.msg);
                return 1;
        }
        r = json ? devinfo_write_json(&info, stdout) : devinfo_write_text(&info, stdout);
        return r < 0 ? 1 : 0;
}

/* --topic-partitions: asks the brokers for the input topic's metadata, with
 * the consumer's passthrough settings (security included), so that
 * inferd-cutover can tell whether one instance holds every partition. The
 * handle never subscribes, so it joins no group. */
static int topic_partitions(const cfg_t *c) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_t *t = NULL;
        rd_kafka_conf_t *conf;
        rd_kafka_resp_err_t e;
        errbuf_t err = {};
        char why[512];
        rd_kafka_t *rk;
        int n = -1;

        conf = rd_kafka_conf_new();
        if (!conf)
                return 1;
        if (cfg_kafka_apply(c, 0, conf, &err) < 0 ||
            rd_kafka_conf_set(conf, "bootstrap.servers", c->kafka.brokers, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "inferd: %s\n", err.msg[0] ? err.msg : why);
                rd_kafka_conf_destroy(conf);
                return 1;
        }
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why));
        if (!rk) {
                fprintf(stderr, "inferd: Failed to create a Kafka client: %s\n", why);
                rd_kafka_conf_destroy(conf);
                return 1;
        }
        /* conf belongs to rk now. */
        t = rd_kafka_topic_new(rk, c->kafka.input_topic, NULL);
        e = t ? rd_kafka_metadata(rk, 0, t, &md, 10000) : rd_kafka_last_error();
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
                fprintf(stderr, "inferd: Failed to read the metadata of '%s' from %s: %s\n", c->kafka.input_topic,
                        c->kafka.brokers, rd_kafka_err2str(e));
        else if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
                fprintf(stderr, "inferd: Failed to read the metadata of '%s' from %s: %s\n", c->kafka.input_topic,
                        c->kafka.brokers,
                        md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "the topic is not in the answer");
        else
                n = md->topics[0].partition_cnt;
        if (md)
                rd_kafka_metadata_destroy(md);
        if (t)
                rd_kafka_topic_destroy(t);
        rd_kafka_destroy(rk);
        if (n < 0)
                return 1;
        printf("%d\n", n);
        return 0;
}

/* Every thread must block SIGTERM, SIGINT and SIGHUP, or the kernel may hand
 * one to a thread that does not, whose default action ends the process
 * before the signalfd sees it. OpenBLAS starts its worker threads from a
 * library constructor, before main(); the mask survives execve, so the
 * first run blocks the signals and executes itself again, and every thread
 * of the second run starts with them blocked. */
static void block_signals_everywhere(char **argv) {
        char self[PATH_MAX];
        sigset_t mask, old;
        ssize_t n;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, &old);
        if (sigismember(&old, SIGTERM) && sigismember(&old, SIGINT) && sigismember(&old, SIGHUP))
                return;
        /* The resolved path, not /proc/self/exe, so the process keeps its
         * name (comm, hence _COMM in the journal). */
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                self[n] = '\0';
                execv(self, argv);
        }
        /* No /proc: carry on; a signal may then end the process abruptly. */
        log_warning("Failed to re-execute with the signals blocked: %s", strerror(errno));
}

/* glibc's heap, fixed for a consumer that decompresses without pause:
 * librdkafka's broker threads decompress each fetched message set into a
 * new buffer of up to a few MiB, which the event loop frees once the
 * records are packed. With glibc's defaults (a trim threshold that follows
 * the largest freed mmapped chunk, twice it), the heap is handed back to
 * the kernel after a burst and faulted in again, zeroed, page by page, by
 * the next decompression: a fifth of the consumer thread's time went to
 * the kernel on the mock broker, twice kcat's share (docs/perf.md,
 * "The consumer's heap"). So buffers up to 32 MiB (glibc's own upper
 * bound for its moving threshold) come from the heap, and up to 64 MiB of
 * free heap on top stays mapped. That is memory the plan's fetch term
 * already charges at its peak (each arena keeps at most what it held), and
 * the RSS it leaves stays flat. */
#define INFERD_MMAP_THRESHOLD (32 << 20)
#define INFERD_TRIM_THRESHOLD (64 << 20)

static void keep_heap_mapped(void) {
        if (!mallopt(M_MMAP_THRESHOLD, INFERD_MMAP_THRESHOLD) || !mallopt(M_TRIM_THRESHOLD, INFERD_TRIM_THRESHOLD))
                log_warning("Failed to set glibc's heap thresholds: the consumer may fault its buffers in again");
}

/* What the command line asked for. The mode flags are ints that
 * getopt_long sets itself (its flag pointers); when several are given, the
 * first of --device-info, --check-config, --print-config and
 * --topic-partitions, --plan wins, and none runs the daemon. */
typedef struct inferd_args {
        const char *path;               /* -c FILE, or CFG_DEFAULT_PATH */
        bool path_given;
        int check, plan, json, device, print, partitions, bench_pipeline;
} inferd_args_t;

/* Parses argv into *a. Returns -1 to go on, or the exit status of what is
 * done already: --help, --version, --print-config-reference or -man, or a bad
 * argument (2, with the usage on stderr). */
static int inferd_parse_args(int argc, char **argv, inferd_args_t *a) {
        enum { ARG_REFERENCE = 0x100, ARG_MAN, ARG_VERSION };
        const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, &a->check, 1 },
                { "plan", no_argument, &a->plan, 1 },
                { "json", no_argument, &a->json, 1 },
                { "device-info", no_argument, &a->device, 1 },
                { "print-config", no_argument, &a->print, 1 },
                { "topic-partitions", no_argument, &a->partitions, 1 },
                { "bench-pipeline", no_argument, &a->bench_pipeline, 1 },
                { "print-config-reference", no_argument, NULL, ARG_REFERENCE },
                { "print-config-man", no_argument, NULL, ARG_MAN },
                { "version", no_argument, NULL, ARG_VERSION },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int opt;

        *a = (inferd_args_t){ .path = CFG_DEFAULT_PATH };
        while ((opt = getopt_long(argc, argv, "c:h", options, NULL)) >= 0) {
                switch (opt) {
                case 0:         /* a mode flag: getopt_long set it */
                        break;
                case 'c':
                        a->path = optarg;
                        a->path_given = true;
                        break;
                case ARG_REFERENCE:
                        /* docs/config.md is this output: the key table, documented. */
                        return cfg_write_reference(stdout) < 0 ? 1 : 0;
                case ARG_MAN:
                        /* man/inferd.ini.5: the same table, as roff. */
                        return cfg_write_man(stdout) < 0 ? 1 : 0;
                case ARG_VERSION:
                        printf("inferd %s\n", INFERD_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "inferd: unexpected argument '%s'\n", argv[optind]);
                usage(stderr);
                return 2;
        }
        return -1;
}

/* Loads and checks a->path into *ret (--check-config also opens the
 * weights), and says which secrets others can read. Returns 0, or the exit
 * status 1 after saying why (on stderr for the one-shot modes, else to the
 * log). */
static int inferd_load(const inferd_args_t *a, cfg_t **ret) {
        bool one_shot = a->check || a->print || a->partitions;
        errbuf_t err = {};
        cfg_t *c = NULL;
        int r;

        r = check_config(a->path, &c, &err);
        if (r >= 0 && a->check) {
                /* Only here: --plan and --print-config need no weights. */
                r = cfg_check_model_files(c, &err);
                if (r < 0)
                        cfg_free(c);
        }
        if (r < 0) {
                if (one_shot)
                        fprintf(stderr, "inferd: %s\n", err.msg);
                else
                        log_error("Failed to load the configuration: %s", err.msg);
                return 1;
        }
        if (a->check || !(one_shot || a->plan)) {
                /* A warning, not an error: the file works, but others can
                 * read a secret in it (or in a file it names). */
                errbuf_t warnings[8];
                size_t n = cfg_find_exposed_secrets(c, warnings, 8);

                for (size_t i = 0; i < n && i < 8; i++) {
                        if (a->check)
                                fprintf(stderr, "inferd: warning: %s\n", warnings[i].msg);
                        else
                                log_warning("%s", warnings[i].msg);
                }
        }
        *ret = c;
        return 0;
}

/* --plan: the memory plan the config gives, as text or JSON. Returns the
 * exit status. */
static int inferd_print_plan(const cfg_t *c, bool json) {
        char warning[512] = "";
        errbuf_t err = {};
        plan_t p;
        int r;

        r = daemon_plan(c, &p, warning, sizeof(warning), &err);
        if (r < 0) {
                fprintf(stderr, "inferd: %s\n", err.msg);
                return 1;
        }
        if (warning[0])
                fprintf(stderr, "inferd: %s\n", warning);
        r = json ? plan_write_json(&p, stdout) : plan_write_text(&p, stdout);
        return r < 0 ? 1 : 0;
}

/* The daemon itself, in systemd's order (see the top of this file). Takes
 * c. Returns the exit status. */
static int inferd_serve(const inferd_args_t *a, cfg_t *c, char **argv) {
        daemon_t *d = NULL;
        errbuf_t err = {};
        int r;

        /* Before librdkafka or the engine start threads, so that every
         * thread inherits the mask and the signals reach only the event
         * loop's signalfd. */
        block_signals_everywhere(argv);
        signal(SIGPIPE, SIG_IGN);
        keep_heap_mapped();

        r = daemon_new(&d, c, a->path, &err);
        if (r < 0) {
                log_error("Failed to create the daemon: %s", err.msg[0] ? err.msg : strerror(-r));
                return 1;
        }
        daemon_set_bench_pipeline(d, a->bench_pipeline);
        daemon_set_version(d, INFERD_VERSION);
        r = daemon_start(d, &err);
        if (r < 0) {
                log_error("Failed to start: %s", err.msg[0] ? err.msg : strerror(-r));
                sd_notifyf(0, "STATUS=Failed to start: %s", err.msg[0] ? err.msg : strerror(-r));
                daemon_free(d);
                return 1;
        }
        r = daemon_run(d);
        sd_notify(0, "STOPPING=1");
        daemon_free(d);
        return r;
}

int main(int argc, char **argv) {
        inferd_args_t a;
        cfg_t *c = NULL;
        int r;

        r = inferd_parse_args(argc, argv, &a);
        if (r >= 0)
                return r;
        if (a.device)
                return device_info(a.path_given ? a.path : NULL, a.json);

        log_setup(NULL, LOG_TARGET_AUTO);
        r = inferd_load(&a, &c);
        if (r != 0)
                return r;
        if (a.check) {
                printf("%s: OK\n", a.path);
                r = 0;
        } else if (a.print)
                r = cfg_write_ini(c, stdout) < 0 ? 1 : 0;
        else if (a.partitions)
                r = topic_partitions(c);
        else if (a.plan)
                r = inferd_print_plan(c, a.json);
        else
                return inferd_serve(&a, c, argv);
        cfg_free(c);
        return r;
}

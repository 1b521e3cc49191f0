/* inferd-run: offline inference over files, with the engines and record
 * handling that the daemon uses. Also prints the memory plan (--plan) and
 * measures throughput (--bench). This file is argument parsing and I/O only:
 * everything it computes comes from the engine, plan and model modules. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "decode/decode.h"
#include "core/labels.h"
#include "core/model.h"
#include "engine/prediction.h"
#include "core/record.h"
#include "core/units.h"

#ifndef INFERD_VERSION
#error "INFERD_VERSION is set by the Makefile from the VERSION file"
#endif

/* The CPU engine's threads are OpenMP's (oneDNN's runtime); inferd-run
 * leaves them at OpenMP's default. */
#include <omp.h>

typedef enum run_mode {
        RUN_INFER,
        RUN_PLAN,
        RUN_BENCH,
} run_mode_t;

typedef struct run_args {
        run_mode_t mode;
        const char *weights;
        const char *labels;
        const char *logits;
        const char *rgb8;       /* --rgb8 OUT: the 224x224x3 records as fed */
        const char *embeddings; /* --embeddings OUT: N x dim float32, as printed (normalised) */
        prediction_output_t output;     /* --embedding, --embedding-only, --embedding-format, -normalize */
        bool embedding_options;         /* --embedding-format or --embedding-normalize was given */
        uint64_t max_pixels;    /* --max-pixels, as [decode] max_pixels */
        uint64_t max_bytes;     /* --max-bytes, as [decode] max_bytes */
        bool decode_fast;       /* --decode-fast, as [decode] fast = yes */
        bool exif_orientation;  /* --exif-orientation, as [decode] exif_orientation = yes */
        int json;
        double bench_seconds;
        int batch;              /* 0: the default for the mode */
        engine_options_t engine;
        char **inputs;
        int n_inputs;
} run_args_t;

static void run_usage(FILE *out) {
        fputs("usage:\n"
              "  inferd-run --weights FILE [--labels FILE] [--backend auto|cpu|cuda] [--precision fp32|fp16|bf16]\n"
              "             [--batch N] [--top K] [--logits OUT] [--rgb8 OUT] [--max-pixels N] [--max-bytes SIZE]\n"
              "             [--decode-fast] [--exif-orientation[=yes|no]]\n"
              "             [--embedding | --embedding-only] [--embedding-format json|f32le|base64]\n"
              "             [--embedding-normalize none|l2] [--embeddings OUT] INPUT...\n"
              "  inferd-run --plan [--json] [--device-memory SIZE] [--budget SIZE|PCT] [--host-budget SIZE]\n"
              "             [--precision P] [--backend B] [--batch N] [--weights FILE]\n"
              "  inferd-run --bench SECONDS [--batch N] [--backend B] [--precision P] [--weights FILE]\n"
              "\n"
              "INPUT is a JPEG, PNG or WebP file (decoded, resized to 256 on the shorter side and\n"
              "centre-cropped to 224, as torchvision's eval transform), or a raw record: 150528\n"
              "bytes of RGB8 224x224x3 (HWC), or 602112 bytes of float32 3x224x224 (CHW,\n"
              "little-endian, normalised). One JSON prediction line is printed per input, in\n"
              "argument order. --logits writes N x K float32 pre-softmax logits (K: the model's\n"
              "classes; little-endian) in the same order; --top K is capped by the classes;\n"
              "--rgb8 writes the N x 224x224x3 uint8 records as fed to the engine (not for\n"
              "float32 inputs). --max-pixels (default 50000000) and --max-bytes\n"
              "(default 20MiB) limit encoded images, as [decode] does in the daemon; --decode-fast\n"
              "decodes large JPEGs reduced in the DCT domain, as [decode] fast = yes;\n"
              "--exif-orientation turns each image as its EXIF orientation tag says before the\n"
              "resize (as PIL's ImageOps.exif_transpose), as [decode] exif_orientation = yes\n"
              "(off by default, as torchvision ignores the tag).\n"
              "--embedding adds each input's embedding (the pooled features that feed the fc) to\n"
              "its line, as [output] kind = both; --embedding-only prints it instead of the\n"
              "classes, as kind = embedding; --embedding-format and --embedding-normalize as\n"
              "[output] embedding_format and embedding_normalize (f32le leaves the vector out of\n"
              "the line: give --embeddings OUT); --embeddings writes the N x dim float32 vectors\n"
              "(little-endian, normalised as printed) in argument order, and implies --embedding.\n"
              "SIZE is a byte count with an optional KiB/MiB/GiB suffix; PCT a percentage of the\n"
              "device's memory. Other options: --device N (CUDA ordinal), --depth N (pipeline slots),\n"
              "--version.\n",
              out);
}

static int run_parse_int(const char *opt, const char *s, int lo, int hi, int *ret) {
        long v;

        if (units_parse_long(s, lo, hi, &v) < 0) {
                fprintf(stderr, "inferd-run: %s: '%s' is not a whole number between %d and %d\n", opt, s, lo, hi);
                return -EINVAL;
        }
        *ret = (int)v;
        return 0;
}

/* A size option (--device-memory, --max-bytes): a byte count with an
 * optional KiB/MiB/GiB suffix, not 0. example goes in the message. */
static int run_parse_size(const char *opt, const char *s, const char *example, uint64_t *ret) {
        if (units_parse_size(s, ret) < 0 || *ret == 0) {
                fprintf(stderr, "inferd-run: %s: '%s' is not a size (such as %s)\n", opt, s, example);
                return -EINVAL;
        }
        return 0;
}

/* --max-pixels: a positive whole number. */
static int run_parse_count(const char *opt, const char *s, uint64_t *ret) {
        char *end;

        errno = 0;
        *ret = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || *ret == 0) {
                fprintf(stderr, "inferd-run: %s: '%s' is not a positive whole number\n", opt, s);
                return -EINVAL;
        }
        return 0;
}

/* --bench: seconds in (0, 3600]. */
static int run_parse_seconds(const char *opt, const char *s, double *ret) {
        char *end;

        *ret = strtod(s, &end);
        if (end == s || *end || !(*ret > 0) || *ret > 3600) {
                fprintf(stderr, "inferd-run: %s: '%s' is not a number of seconds in (0, 3600]\n", opt, s);
                return -EINVAL;
        }
        return 0;
}

/* An option whose value may be left out (--exif-orientation[=yes|no]):
 * none is yes. */
static int run_parse_yes_no(const char *opt, const char *s, bool *ret) {
        if (!s || strcmp(s, "yes") == 0)
                *ret = true;
        else if (strcmp(s, "no") == 0)
                *ret = false;
        else {
                fprintf(stderr, "inferd-run: %s: '%s' is neither yes nor no\n", opt, s);
                return -EINVAL;
        }
        return 0;
}

enum {
        OPT_PLAN = 256, OPT_JSON, OPT_DEVICE_MEMORY, OPT_BUDGET, OPT_HOST_BUDGET, OPT_BENCH, OPT_DEVICE,
        OPT_DEPTH, OPT_RGB8, OPT_MAX_PIXELS, OPT_MAX_BYTES, OPT_DECODE_FAST, OPT_EXIF_ORIENTATION, OPT_VERSION,
        OPT_EMBEDDING, OPT_EMBEDDING_ONLY, OPT_EMBEDDING_FORMAT, OPT_EMBEDDING_NORMALIZE, OPT_EMBEDDINGS,
};

/* A value among names (prediction.h's tables) into *ret, an enum's index. */
static int run_parse_choice(const char *opt, const char *s, const char *const *names, int *ret) {
        for (int i = 0; names[i]; i++)
                if (strcmp(s, names[i]) == 0) {
                        *ret = i;
                        return 0;
                }
        fprintf(stderr, "inferd-run: %s: '%s' is not one of %s, %s%s%s\n", opt, s, names[0], names[1],
                names[2] ? ", " : "", names[2] ? names[2] : "");
        return -EINVAL;
}

/* One option c of getopt_long (its value in optarg) into *a. Returns 0, 1
 * for --help, 2 for --version, or -EINVAL after printing the reason. */
static int run_parse_option(run_args_t *a, int c, char **argv) {
        switch (c) {
        case 'w':
                a->weights = optarg;
                return 0;
        case 'l':
                a->labels = optarg;
                return 0;
        case 'o':
                a->logits = optarg;
                return 0;
        case OPT_RGB8:
                a->rgb8 = optarg;
                return 0;
        case OPT_BUDGET:
                a->engine.device_budget = optarg;
                return 0;
        case OPT_HOST_BUDGET:
                a->engine.host_budget = optarg;
                return 0;
        case 'B':
                if (backend_from_string(optarg, &a->engine.backend) < 0) {
                        fprintf(stderr, "inferd-run: --backend: '%s' is not auto, cpu or cuda\n", optarg);
                        return -EINVAL;
                }
                return 0;
        case 'p':
                if (precision_from_string(optarg, &a->engine.precision) < 0) {
                        fprintf(stderr, "inferd-run: --precision: '%s' is not fp32, fp16 or bf16\n", optarg);
                        return -EINVAL;
                }
                return 0;
        case 'b':
                return run_parse_int("--batch", optarg, 1, 65536, &a->batch);
        case 'k':
                return run_parse_int("--top", optarg, 1, ENGINE_TOPK_MAX, &a->engine.top_k);
        case OPT_DEVICE:
                return run_parse_int("--device", optarg, 0, 63, &a->engine.device);
        case OPT_DEPTH:
                return run_parse_int("--depth", optarg, 2, 16, &a->engine.pipeline_depth);
        case OPT_PLAN:
                a->mode = RUN_PLAN;
                return 0;
        case OPT_BENCH:
                a->mode = RUN_BENCH;
                return run_parse_seconds("--bench", optarg, &a->bench_seconds);
        case OPT_JSON:
                a->json = 1;
                return 0;
        case OPT_DEVICE_MEMORY:
                return run_parse_size("--device-memory", optarg, "11GiB", &a->engine.device_memory_bytes);
        case OPT_MAX_BYTES:
                return run_parse_size("--max-bytes", optarg, "20MiB", &a->max_bytes);
        case OPT_MAX_PIXELS:
                return run_parse_count("--max-pixels", optarg, &a->max_pixels);
        case OPT_DECODE_FAST:
                a->decode_fast = true;
                return 0;
        case OPT_EXIF_ORIENTATION:
                return run_parse_yes_no("--exif-orientation", optarg, &a->exif_orientation);
        case OPT_EMBEDDING:
                a->output.kind = PREDICTION_KIND_BOTH;
                return 0;
        case OPT_EMBEDDING_ONLY:
                a->output.kind = PREDICTION_KIND_EMBEDDING;
                return 0;
        case OPT_EMBEDDING_FORMAT:
                a->embedding_options = true;
                return run_parse_choice("--embedding-format", optarg, prediction_format_names,
                                        (int *)&a->output.format);
        case OPT_EMBEDDING_NORMALIZE:
                a->embedding_options = true;
                return run_parse_choice("--embedding-normalize", optarg, prediction_normalize_names,
                                        (int *)&a->output.normalize);
        case OPT_EMBEDDINGS:
                a->embeddings = optarg;
                return 0;
        case 'h':
                return 1;
        case OPT_VERSION:
                return 2;
        case ':':
                fprintf(stderr, "inferd-run: option '%s' needs a value\n", argv[optind - 1]);
                return -EINVAL;
        default:
                fprintf(stderr, "inferd-run: unknown option '%s' (see --help)\n", argv[optind - 1]);
                return -EINVAL;
        }
}

/* After the options: the INPUT files the mode wants, and the engine's
 * batch and decode settings that follow from them. Returns 0 or -EINVAL
 * after printing the reason. */
static int run_check_args(run_args_t *a) {
        if (a->mode != RUN_INFER && a->n_inputs > 0) {
                fprintf(stderr, "inferd-run: --plan and --bench take no INPUT files ('%s')\n", a->inputs[0]);
                return -EINVAL;
        }
        if (a->mode == RUN_INFER) {
                if (!a->weights) {
                        fprintf(stderr, "inferd-run: --weights FILE is required to classify inputs (see --help)\n");
                        return -EINVAL;
                }
                if (a->n_inputs == 0) {
                        fprintf(stderr, "inferd-run: no INPUT files given (see --help)\n");
                        return -EINVAL;
                }
        } else if (a->logits || a->labels || a->rgb8 || a->embeddings) {
                fprintf(stderr, "inferd-run: --logits, --rgb8, --embeddings and --labels go with INPUT files only\n");
                return -EINVAL;
        }
        if (a->embeddings && !prediction_has_embedding(&a->output))
                a->output.kind = PREDICTION_KIND_BOTH;  /* --embeddings alone: the lines say it too */
        if (a->embedding_options && !prediction_has_embedding(&a->output)) {
                fprintf(stderr, "inferd-run: --embedding-format and --embedding-normalize go with --embedding, "
                        "--embedding-only or --embeddings\n");
                return -EINVAL;
        }
        if (prediction_has_embedding(&a->output) && a->output.format == PREDICTION_EMBEDDING_F32LE && !a->embeddings) {
                fprintf(stderr, "inferd-run: --embedding-format f32le leaves the vectors out of the lines: give "
                        "--embeddings OUT for them (or use json or base64)\n");
                return -EINVAL;
        }
        /* --plan and --bench plan the embeddings' buffers too. */
        a->engine.embedding = prediction_has_embedding(&a->output);
        /* The plan is made for the batch asked for; --plan alone plans the largest that fits. */
        if (a->batch > 0)
                a->engine.max_batch = a->batch;
        else if (a->mode == RUN_INFER)
                a->engine.max_batch = a->n_inputs < 8 ? a->n_inputs : 8;
        else if (a->mode == RUN_BENCH)
                a->engine.max_batch = 8;
        /* Images are decoded on this thread: one context, with a copy of the file. */
        a->engine.decode_threads = 1;
        a->engine.decode_max_pixels = a->max_pixels;
        a->engine.decode_input_bytes = a->max_bytes;
        return 0;
}

/* Returns 0, 1 for --help, 2 for --version, or -EINVAL after printing the reason. */
static int run_parse_args(int argc, char **argv, run_args_t *a) {
        static const struct option options[] = {
                { "weights", required_argument, NULL, 'w' },
                { "labels", required_argument, NULL, 'l' },
                { "backend", required_argument, NULL, 'B' },
                { "precision", required_argument, NULL, 'p' },
                { "batch", required_argument, NULL, 'b' },
                { "top", required_argument, NULL, 'k' },
                { "logits", required_argument, NULL, 'o' },
                { "plan", no_argument, NULL, OPT_PLAN },
                { "json", no_argument, NULL, OPT_JSON },
                { "device-memory", required_argument, NULL, OPT_DEVICE_MEMORY },
                { "budget", required_argument, NULL, OPT_BUDGET },
                { "host-budget", required_argument, NULL, OPT_HOST_BUDGET },
                { "bench", required_argument, NULL, OPT_BENCH },
                { "device", required_argument, NULL, OPT_DEVICE },
                { "depth", required_argument, NULL, OPT_DEPTH },
                { "rgb8", required_argument, NULL, OPT_RGB8 },
                { "max-pixels", required_argument, NULL, OPT_MAX_PIXELS },
                { "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
                { "decode-fast", no_argument, NULL, OPT_DECODE_FAST },
                { "exif-orientation", optional_argument, NULL, OPT_EXIF_ORIENTATION },
                { "embedding", no_argument, NULL, OPT_EMBEDDING },
                { "embedding-only", no_argument, NULL, OPT_EMBEDDING_ONLY },
                { "embedding-format", required_argument, NULL, OPT_EMBEDDING_FORMAT },
                { "embedding-normalize", required_argument, NULL, OPT_EMBEDDING_NORMALIZE },
                { "embeddings", required_argument, NULL, OPT_EMBEDDINGS },
                { "version", no_argument, NULL, OPT_VERSION },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        int c, r;

        memset(a, 0, sizeof(*a));
        engine_options_init(&a->engine);
        a->max_pixels = DECODE_DEFAULT_MAX_PIXELS;
        a->max_bytes = DECODE_DEFAULT_MAX_BYTES;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:h", options, NULL)) >= 0) {
                r = run_parse_option(a, c, argv);
                if (r != 0)
                        return r;
        }
        a->inputs = argv + optind;
        a->n_inputs = argc - optind;
        return run_check_args(a);
}

static double run_now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Reads a whole input file; refuses anything larger than a record could be. */
static int run_read_input(const char *path, unsigned char *buf, size_t cap, size_t *len) {
        struct stat st;
        size_t got = 0;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "inferd-run: %s: cannot open: %s\n", path, strerror(errno));
                return -errno;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                fprintf(stderr, "inferd-run: %s: not a regular file\n", path);
                close(fd);
                return -EINVAL;
        }
        if ((uint64_t)st.st_size > cap) {
                fprintf(stderr, "inferd-run: %s: %lld bytes is more than this input may have (%zu bytes at most) "
                        "[too-large]\n", path, (long long)st.st_size, cap);
                close(fd);
                return -EFBIG;
        }
        while (got < (size_t)st.st_size) {
                ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

                if (n <= 0) {
                        r = n < 0 ? -errno : -EIO;
                        fprintf(stderr, "inferd-run: %s: read failed: %s\n", path, strerror(-r));
                        break;
                }
                got += (size_t)n;
        }
        close(fd);
        *len = got;
        return r;
}

/* Loads the input at path as record pos of slot: its format from its size
 * and first bytes; a raw record's bytes go into the place the slot packs it
 * at, a JPEG, PNG or WebP is read into the decoder's input buffer and decoded into
 * an RGB8 place. With --rgb8, the record as fed is appended to rgb8_out. */
static int run_pack(engine_t *e, decode_t *dec, int slot, int pos, const char *path, FILE *rgb8_out,
                    const char *rgb8_path) {
        unsigned char head[16] = { 0 }, *dst;
        record_format_t f;
        const char *code = NULL;
        struct stat st;
        errbuf_t err;
        size_t len = 0;
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0 || read(fd, head, sizeof(head)) < 0) {
                r = -errno;
                fprintf(stderr, "inferd-run: %s: %s\n", path, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return r;
        }
        close(fd);
        r = record_identify(head, (size_t)st.st_size, NULL, 0, &f, &code, &err);
        if (r < 0) {
                fprintf(stderr, "inferd-run: %s: %s [%s]\n", path, err.msg, code);
                return r;
        }
        dst = engine_slot_place(e, slot, pos, record_is_encoded(f) ? RECORD_RGB8 : f);
        if (!dst) {
                /* The caller checks engine_slot_has_room first. */
                fprintf(stderr, "inferd-run: %s: no room in the batch\n", path);
                return -ENOSPC;
        }
        if (record_is_encoded(f)) {
                r = run_read_input(path, decode_input(dec), decode_max_bytes(dec), &len);
                if (r < 0)
                        return r;
                r = decode_record(dec, decode_input(dec), len, f, dst, NULL, &code, &err);
                if (r < 0) {
                        fprintf(stderr, "inferd-run: %s: %s [%s]\n", path, err.msg, code);
                        return r;
                }
        } else {
                r = run_read_input(path, dst, pack_row_bytes(f), &len);
                if (r < 0)
                        return r;
                if (len != pack_row_bytes(f)) {
                        fprintf(stderr, "inferd-run: %s: changed while being read (%zu bytes, %zu expected)\n",
                                path, len, pack_row_bytes(f));
                        return -EIO;
                }
        }
        if (rgb8_out && fwrite(dst, RECORD_RGB8_BYTES, 1, rgb8_out) != 1) {
                fprintf(stderr, "inferd-run: %s: write failed: %s\n", rgb8_path, strerror(errno));
                return -EIO;
        }
        return 0;
}

/* Fails before the model loads: every input must exist and be a record of
 * a runnable format and size. Only the first bytes are read here (the
 * signatures record_classify looks for); run_pack reads the whole file. */
static int run_check_inputs(const run_args_t *a) {
        int bad = 0;

        for (int i = 0; i < a->n_inputs; i++) {
                unsigned char head[16] = { 0 };
                const char *code = NULL;
                record_format_t f;
                struct stat st;
                errbuf_t err;
                int fd;

                fd = open(a->inputs[i], O_RDONLY | O_CLOEXEC);
                if (fd < 0 || fstat(fd, &st) < 0) {
                        fprintf(stderr, "inferd-run: %s: %s\n", a->inputs[i], strerror(errno));
                        bad = 1;
                } else if (!S_ISREG(st.st_mode)) {
                        fprintf(stderr, "inferd-run: %s: not a regular file\n", a->inputs[i]);
                        bad = 1;
                } else if (read(fd, head, sizeof(head)) < 0 ||
                           record_identify(head, (size_t)st.st_size, NULL, 0, &f, &code, &err) < 0) {
                        fprintf(stderr, "inferd-run: %s: %s [%s]\n", a->inputs[i], code ? err.msg : strerror(errno),
                                code ? code : "read-failed");
                        bad = 1;
                } else if (record_is_encoded(f) && (uint64_t)st.st_size > a->max_bytes) {
                        fprintf(stderr, "inferd-run: %s: %lld bytes of %s is more than --max-bytes (%llu) [too-large]\n",
                                a->inputs[i], (long long)st.st_size, record_format_mime(f),
                                (unsigned long long)a->max_bytes);
                        bad = 1;
                } else if (f == RECORD_F32_CHW && a->rgb8) {
                        fprintf(stderr, "inferd-run: %s: a float32 tensor has no RGB8 record for --rgb8\n",
                                a->inputs[i]);
                        bad = 1;
                }
                if (fd >= 0)
                        close(fd);
        }
        return bad ? -EINVAL : 0;
}

/* Prints the predictions of a completed slot, one line per input; an input
 * whose logits (or embedding) are not finite gets an error line on stderr
 * instead (the daemon's non-finite-output) and counts in *refused. With
 * embeddings, each is prepared as the daemon's (normalised) and written to
 * emb_out too when given (a refused input's as zeros, so that rows keep
 * their inputs' order). */
static int run_emit(engine_t *e, const run_args_t *a, const model_t *m, const labels_t *labels, int slot, int first,
                    int n, double latency_ms, FILE *logits_out, FILE *emb_out, int *refused) {
        const engine_topk_t *top = engine_slot_topk(e, slot);
        const float *logits = engine_slot_logits(e, slot);
        const float *emb = engine_slot_embedding(e, slot);     /* (n, dim) or NULL */
        int k = engine_plan_of(e)->top_k, dim = engine_embedding_dim(e);
        float vec[PREDICTION_EMBEDDING_DIM_MAX];

        for (int i = 0; i < n; i++) {
                prediction_meta_t meta = {
                        .model_id = m->id,
                        .backend = engine_backend(e),
                        .precision = precision_name(engine_precision(e)),
                        .input = a->inputs[first + i],
                        .labels = labels,
                        .output = a->output,
                };
                prediction_row_t row = { .top = top + (size_t)i * k, .k = k, .embedding = vec, .dim = dim,
                                         .latency_ms = latency_ms };
                char *line;

                assert(!emb || dim <= PREDICTION_EMBEDDING_DIM_MAX);
                memset(vec, 0, sizeof(vec));
                if (!engine_topk_is_finite(top + (size_t)i * k) ||
                    (emb && prediction_embedding_prepare(&a->output, emb + (size_t)i * dim, dim, vec) < 0)) {
                        fflush(stdout);
                        fprintf(stderr, "inferd-run: %s: the model's output is not finite (a NaN or infinite logit "
                                "or embedding value), so there is no prediction [%s]\n", a->inputs[first + i],
                                RECORD_ERR_NON_FINITE_OUTPUT);
                        memset(vec, 0, sizeof(vec));
                        (*refused)++;
                } else {
                        if (prediction_format_row(&line, &row, &meta) < 0) {
                                fprintf(stderr, "inferd-run: out of memory\n");
                                return -ENOMEM;
                        }
                        puts(line);
                        free(line);
                }
                if (emb_out) {
                        unsigned char raw[sizeof(vec)];

                        prediction_embedding_f32le(vec, dim, raw);
                        if (fwrite(raw, sizeof(float), (size_t)dim, emb_out) != (size_t)dim) {
                                fprintf(stderr, "inferd-run: %s: write failed: %s\n", a->embeddings, strerror(errno));
                                return -EIO;
                        }
                }
        }
        if (logits_out && fwrite(logits, sizeof(float) * (size_t)m->classes, (size_t)n, logits_out) != (size_t)n) {
                fprintf(stderr, "inferd-run: %s: write failed: %s\n", a->logits, strerror(errno));
                return -EIO;
        }
        fflush(stdout);
        return 0;
}

/* Classifies every input, keeping the pipeline's slots busy: while one
 * batch computes, the next is read and packed. Slots are used in a ring, so
 * results come out in argument order. */
static int run_infer(engine_t *e, const run_args_t *a, const model_t *m, const labels_t *labels) {
        int depth = engine_slots(e), batch = engine_max_batch(e), next = 0, oldest = 0, in_flight = 0, r = 0;
        int refused = 0;        /* inputs without a prediction (non-finite logits) */
        int first[16], count[16];
        double started[16];
        FILE *logits_out = NULL, *rgb8_out = NULL, *emb_out = NULL;
        decode_t *dec = NULL;
        errbuf_t err;

        /* The one decode context the plan counted (engine_plan_of(e)->decode). */
        r = decode_new(&dec, a->max_pixels, a->max_bytes, true, &err);
        if (r < 0) {
                fprintf(stderr, "inferd-run: cannot make the decoder: %s\n", err.msg);
                return r;
        }
        decode_set_fast(dec, a->decode_fast);
        decode_set_exif_orientation(dec, a->exif_orientation);
        if (a->logits) {
                logits_out = fopen(a->logits, "we");
                if (!logits_out) {
                        r = -errno;
                        fprintf(stderr, "inferd-run: %s: cannot create: %s\n", a->logits, strerror(errno));
                        goto out;
                }
        }
        if (a->rgb8 && !(rgb8_out = fopen(a->rgb8, "we"))) {
                r = -errno;
                fprintf(stderr, "inferd-run: %s: cannot create: %s\n", a->rgb8, strerror(errno));
                goto out;
        }
        if (a->embeddings && !(emb_out = fopen(a->embeddings, "we"))) {
                r = -errno;
                fprintf(stderr, "inferd-run: %s: cannot create: %s\n", a->embeddings, strerror(errno));
                goto out;
        }
        while (next < a->n_inputs || in_flight > 0) {
                while (next < a->n_inputs && in_flight < depth) {
                        int slot = (oldest + in_flight) % depth, n = 0;

                        /* Up to the batch, or fewer once float32 inputs
                         * fill the slot's packed staging. */
                        while (n < batch && next + n < a->n_inputs && (n == 0 || engine_slot_has_room(e, slot))) {
                                r = run_pack(e, dec, slot, n, a->inputs[next + n], rgb8_out, a->rgb8);
                                if (r < 0)
                                        goto out;
                                n++;
                        }
                        first[slot] = next;
                        count[slot] = n;
                        started[slot] = run_now_ms();
                        r = engine_submit(e, slot, n, &err);
                        if (r < 0) {
                                fprintf(stderr, "inferd-run: cannot submit a batch: %s\n", err.msg);
                                goto out;
                        }
                        next += n;
                        in_flight++;
                }
                r = engine_wait(e, oldest, &err);
                if (r < 0) {
                        fprintf(stderr, "inferd-run: the %s engine failed: %s\n", engine_backend(e), err.msg);
                        goto out;
                }
                r = run_emit(e, a, m, labels, oldest, first[oldest], count[oldest], run_now_ms() - started[oldest],
                             logits_out, emb_out, &refused);
                if (r < 0)
                        goto out;
                oldest = (oldest + 1) % depth;
                in_flight--;
        }
        /* Like a bad input, an input without a prediction fails the run
         * (exit status 1), after every other input was printed. */
        if (refused > 0) {
                fprintf(stderr, "inferd-run: %d of %d input(s) had no prediction\n", refused, a->n_inputs);
                r = -EINVAL;
        }
out:
        /* An engine still computing a slot is waited for by engine_free. */
        if (logits_out && fclose(logits_out) != 0 && r == 0) {
                fprintf(stderr, "inferd-run: %s: write failed: %s\n", a->logits, strerror(errno));
                r = -EIO;
        }
        if (rgb8_out && fclose(rgb8_out) != 0 && r == 0) {
                fprintf(stderr, "inferd-run: %s: write failed: %s\n", a->rgb8, strerror(errno));
                r = -EIO;
        }
        if (emb_out && fclose(emb_out) != 0 && r == 0) {
                fprintf(stderr, "inferd-run: %s: write failed: %s\n", a->embeddings, strerror(errno));
                r = -EIO;
        }
        decode_free(dec);
        return r;
}

/* Fills every slot with random RGB8 records, then keeps all slots busy for
 * the given time and counts images. */
static int run_bench(engine_t *e, const run_args_t *a) {
        int depth = engine_slots(e), batch = engine_max_batch(e), r;
        long batches = 0;
        uint64_t s = 88172645463325252ULL;
        double t0, t1;
        errbuf_t err;

        for (int slot = 0; slot < depth; slot++)
                for (int i = 0; i < batch; i++) {
                        unsigned char *p = engine_slot_place(e, slot, i, RECORD_RGB8);

                        for (size_t k = 0; k < RECORD_RGB8_BYTES; k++) {
                                s ^= s << 13;
                                s ^= s >> 7;
                                s ^= s << 17;
                                p[k] = (unsigned char)s;
                        }
                }
        /* One warm-up batch: first-touch of the arena, OpenBLAS's threads, CUDA's lazy loading. */
        r = engine_submit(e, 0, batch, &err);
        if (r >= 0)
                r = engine_wait(e, 0, &err);
        if (r < 0)
                goto fail;
        t0 = run_now_ms();
        for (int slot = 0; slot < depth; slot++)
                if ((r = engine_submit(e, slot, batch, &err)) < 0)
                        goto fail;
        for (long i = 0;; i++) {
                int slot = (int)(i % depth);

                r = engine_wait(e, slot, &err);
                if (r < 0)
                        goto fail;
                batches++;
                if (run_now_ms() - t0 >= a->bench_seconds * 1e3)
                        break;
                if ((r = engine_submit(e, slot, batch, &err)) < 0)
                        goto fail;
        }
        t1 = run_now_ms();
        /* Drain what is still in flight so that the engine closes idle. */
        for (int slot = 0; slot < depth; slot++)
                if ((r = engine_wait(e, slot, &err)) < 0)
                        goto fail;
        printf("{\"images_per_second\":%.2f,\"batch\":%d,\"batches\":%ld,\"seconds\":%.3f,\"backend\":\"%s\","
               "\"precision\":\"%s\",\"threads\":%d,\"pipeline_depth\":%d}\n",
               batches * (double)batch / ((t1 - t0) / 1e3), batch, batches, (t1 - t0) / 1e3, engine_backend(e),
               precision_name(engine_precision(e)),
               strcmp(engine_backend(e), "cpu") == 0 ? omp_get_max_threads() : 0, depth);
        return 0;
fail:
        fprintf(stderr, "inferd-run: the %s engine failed: %s\n", engine_backend(e), err.msg);
        return r;
}

static int run_plan(const run_args_t *a) {
        engine_options_t o;
        char warning[512];
        model_t *m = NULL;
        errbuf_t err;
        plan_t p;
        int r;

        if (a->weights) {
                r = model_describe_file(&m, a->weights, &err);
                if (r < 0) {
                        fprintf(stderr, "inferd-run: cannot read the weights: %s\n", err.msg);
                        return r;
                }
        } else {
                r = model_describe(&m);
                if (r < 0) {
                        fprintf(stderr, "inferd-run: out of memory\n");
                        return r;
                }
        }
        /* --top K is capped by the class count, as when classifying. */
        o = a->engine;
        if (o.top_k > m->classes)
                o.top_k = m->classes;
        r = engine_plan(m, &o, &p, warning, sizeof(warning), &err);
        model_free(m);
        if (warning[0])
                fprintf(stderr, "inferd-run: warning: %s\n", warning);
        if (r < 0) {
                fprintf(stderr, "inferd-run: cannot plan: %s\n", err.msg);
                return r;
        }
        return a->json ? plan_write_json(&p, stdout) : plan_write_text(&p, stdout);
}

int main(int argc, char **argv) {
        labels_t *labels = NULL;
        engine_t *e = NULL;
        model_t *m = NULL;
        char warning[512];
        errbuf_t err;
        run_args_t a;
        int r;

        r = run_parse_args(argc, argv, &a);
        if (r == 2) {
                printf("inferd-run %s\n", INFERD_VERSION);
                return 0;
        }
        if (r != 0) {
                run_usage(r > 0 ? stdout : stderr);
                return r > 0 ? 0 : 2;
        }
        if (a.mode == RUN_PLAN)
                return run_plan(&a) < 0 ? 1 : 0;
        if (a.mode == RUN_INFER && run_check_inputs(&a) < 0)
                return 1;
        if (a.weights)
                r = model_load(&m, a.weights, &err);
        else
                r = model_random(&m, 1) < 0 ? errbuf_set(&err, -ENOMEM, "out of memory") : 0;
        if (r < 0) {
                fprintf(stderr, "inferd-run: cannot load the weights: %s\n", err.msg);
                goto out;
        }
        if (a.labels && (r = labels_load(&labels, a.labels, m->classes, &err)) < 0) {
                fprintf(stderr, "inferd-run: %s\n", err.msg);
                goto out;
        }
        /* --top K is capped by the class count. */
        if (a.engine.top_k > m->classes)
                a.engine.top_k = m->classes;
        engine_cuda_options_from_env(&a.engine.cuda);
        r = engine_open(&e, m, &a.engine, warning, sizeof(warning), &err);
        if (warning[0])
                fprintf(stderr, "inferd-run: warning: %s\n", warning);
        if (r < 0) {
                fprintf(stderr, "inferd-run: cannot start the engine: %s\n", err.msg);
                goto out;
        }
        r = a.mode == RUN_BENCH ? run_bench(e, &a) : run_infer(e, &a, m, labels);
out:
        engine_free(e);
        model_free(m);
        labels_free(labels);
        return r < 0 ? 1 : 0;
}

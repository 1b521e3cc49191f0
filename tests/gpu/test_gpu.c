/* test_gpu: main() of build/tests/gpu-tests, the CUDA engine's tests.
 *
 *   gpu-tests [--weights FILE] [--quick] [--json OUT] [--precision LIST]
 *             [--seed N] [--mem-batches N] [--tol P=X]... [--net-tol P=X]...
 *             [--prefix ID]     ids start ID/ instead of gpu/ (tests/gpu/run
 *                               names its resnet18/10 and resnet101 runs so)
 *   gpu-tests --probe        exit 0 when a CUDA device is usable, 77 otherwise
 *   gpu-tests --selftest[=broken|=lost] --weights FILE ...
 *                            the same checks with a CPU engine and CPU stand-ins
 *                            for the CUDA debug interface (gpu_selftest.c), ids
 *                            "gpu-selftest/...": tests the harness, not CUDA
 *
 * With no CUDA in this build, or no device, every check it would have run is
 * printed as "SKIP gpu/<id>: <reason>" and it exits 0: a machine without a GPU
 * reports these tests as skipped, never as passed. Otherwise, for each
 * precision (fp32, fp16, bf16), it opens the CUDA engine on the weights and
 * runs the layer, whole-network and memory checks of gpu_layers.c and
 * gpu_net.c, then the model swap in place (gpu_net.c), one line each. The exit status is 1 when any check failed.
 * A sticky CUDA error (the engine reports its context lost) stops the run:
 * "# device context lost after <id>: <why>" is printed, and every check not
 * yet run is reported "SKIP <id>: device context lost after <id>: ...",
 * so one fault fails one check under its own name, not all that follow.
 * Tolerances are the design's (fp32 1e-4, fp16/bf16 2e-2); --tol P=X
 * overrides one for every check, --net-tol P=X for the whole-network checks
 * only, and the JSON records the tolerances used.
 *
 * It does not export weights (tests/gpu/run and tools/gpu-check do that with
 * tools/export-resnet50.py) and it does not benchmark. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_tests.h"

int gpu_classes = 1000;

static const precision_t gpu_precisions[] = { PRECISION_FP32, PRECISION_FP16, PRECISION_BF16 };

void gpu_result(gpu_ctx_t *c, gpu_status_t st, const char *id, json_t *figures, const char *fmt, ...) {
        static const char *const word[] = { "PASS", "FAIL", "SKIP" };
        static const char *const name[] = { "pass", "fail", "skip" };
        char detail[768] = "", full[160];
        va_list ap;

        if (fmt) {
                va_start(ap, fmt);
                vsnprintf(detail, sizeof(detail), fmt, ap);
                va_end(ap);
        }
        /* --selftest results must never read as GPU results. */
        if (c->prefix && strcmp(c->prefix, "gpu") != 0 && strncmp(id, "gpu/", 4) == 0) {
                snprintf(full, sizeof(full), "%s/%s", c->prefix, id + 4);
                id = full;
        }
        /* tests/run reads "PASS <id> ..." and "FAIL|SKIP <id>: <why>". */
        if (st == GPU_PASS)
                printf("PASS %s%s%s\n", id, *detail ? " " : "", detail);
        else
                printf("%s %s: %s\n", word[st], id, *detail ? detail : "(no reason given)");
        fflush(stdout);

        if (st == GPU_PASS)
                c->passed++;
        else if (st == GPU_FAIL)
                c->failed++;
        else
                c->skipped++;

        if (c->results) {
                json_t *r = json_pack("{s:s, s:s, s:s}", "id", id, "status", name[st], "detail", detail);

                if (r && figures)
                        json_object_set(r, "figures", figures);
                if (r)
                        json_array_append_new(c->results, r);
        }
        json_decref(figures);
}

/* The design's tolerances; --tol P=X overrides one for every check,
 * --net-tol P=X for the whole-network checks only (the JSON records both). */
static double gpu_tol[4] = { [PRECISION_FP32] = 1e-4, [PRECISION_FP16] = 2e-2, [PRECISION_BF16] = 2e-2 };
static double gpu_net_tol[4];

double gpu_tolerance(precision_t p) {
        return gpu_tol[p == PRECISION_AUTO ? PRECISION_FP32 : p];
}

double gpu_net_tolerance(precision_t p) {
        p = p == PRECISION_AUTO ? PRECISION_FP32 : p;
        return gpu_net_tol[p] > 0 ? gpu_net_tol[p] : gpu_tol[p];
}

static int parse_tolerance(const char *s, double *table) {
        char name[16], *end;
        const char *eq = strchr(s, '=');
        precision_t p;
        double v;

        if (!eq || (size_t)(eq - s) >= sizeof(name))
                return -EINVAL;
        memcpy(name, s, eq - s);
        name[eq - s] = 0;
        v = strtod(eq + 1, &end);
        if (precision_from_string(name, &p) < 0 || p == PRECISION_AUTO || *end || !(v > 0 && v < 1))
                return -EINVAL;
        table[p] = v;
        return 0;
}

uint64_t gpu_rand_u64(uint64_t *s) {
        /* xorshift64*, as tests/unit/unit.h */
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 2685821657736338717ULL;
}

float gpu_rand_uniform(uint64_t *s) {
        return (float)((gpu_rand_u64(s) >> 40) * (1.0 / 16777216.0));
}

float gpu_rand_normal(uint64_t *s) {
        /* Box-Muller; u1 in (0, 1] so that the log is finite. */
        double u1 = 1.0 - (double)(gpu_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
        double u2 = (double)(gpu_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);

        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

double gpu_rel_l2(const float *out, const float *ref, size_t n, size_t *bad) {
        double num = 0, den = 0;
        size_t nonfinite = 0;

        for (size_t i = 0; i < n; i++) {
                if (!isfinite(out[i])) {
                        nonfinite++;
                        continue;
                }
                double d = (double)out[i] - (double)ref[i];
                num += d * d;
                den += (double)ref[i] * (double)ref[i];
        }
        if (bad)
                *bad = nonfinite;
        if (nonfinite)
                return INFINITY;
        if (den == 0)
                return num == 0 ? 0 : INFINITY;
        return sqrt(num / den);
}

void gpu_fill_record(uint64_t *s, record_format_t f, void *rec) {
        if (f == RECORD_RGB8) {
                uint8_t *p = rec;       /* (224, 224, 3) uint8 HWC */

                for (size_t i = 0; i < RECORD_RGB8_BYTES; i++)
                        p[i] = (uint8_t)(gpu_rand_u64(s) >> 56);
        } else {
                float *p = rec;         /* (3, 224, 224) fp32 CHW, normalised: N(0, 1) */

                for (size_t i = 0; i < RECORD_F32_CHW_BYTES / sizeof(float); i++)
                        p[i] = gpu_rand_normal(s);
        }
}

int gpu_lost(gpu_ctx_t *c, engine_t *e, const char *after_id) {
        engine_cuda_debug_info_t info;

        if (c->lost[0])
                return 1;
        if (!e || !c->debug_info || c->debug_info(e, &info) < 0 || !info.lost)
                return 0;
        snprintf(c->lost, sizeof(c->lost), "device context lost after %s: %s", after_id, info.why);
        printf("# %s\n", c->lost);
        fflush(stdout);
        return 1;
}

/* --- the skip path -------------------------------------------------------- */

struct skip_ctx {
        gpu_ctx_t *c;
        const char *why;
};

static void skip_one(void *u, const char *id) {
        struct skip_ctx *k = u;

        gpu_result(k->c, GPU_SKIP, id, NULL, "%s", k->why);
}

/* Whether id (as given to gpu_result) has a result already. */
static int gpu_reported(gpu_ctx_t *c, const char *id) {
        char full[160];
        size_t i;
        json_t *r;

        if (c->prefix && strcmp(c->prefix, "gpu") != 0 && strncmp(id, "gpu/", 4) == 0) {
                snprintf(full, sizeof(full), "%s/%s", c->prefix, id + 4);
                id = full;
        }
        json_array_foreach(c->results, i, r) {
                const char *got = json_string_value(json_object_get(r, "id"));

                if (got && strcmp(got, id) == 0)
                        return 1;
        }
        return 0;
}

static void skip_unreported(void *u, const char *id) {
        struct skip_ctx *k = u;

        if (!gpu_reported(k->c, id))
                gpu_result(k->c, GPU_SKIP, id, NULL, "%s", k->why);
}

static void open_id(precision_t p, void (*fn)(void *u, const char *id), void *u) {
        char id[96];

        snprintf(id, sizeof(id), "gpu/%s/open", precision_name(p));
        fn(u, id);
}

/* After a lost context: every check of every precision that has no result
 * yet is skipped with the reason, so the report lists them all. */
static void gpu_skip_rest(gpu_ctx_t *c, const precision_t *precs, int n_precs) {
        struct skip_ctx k = { c, c->lost };
        model_t *m = NULL;

        if (model_describe(&m) < 0)
                return;
        for (int i = 0; i < n_precs; i++) {
                open_id(precs[i], skip_unreported, &k);
                gpu_layer_ids(m, precs[i], c->quick, skip_unreported, &k);
                gpu_extra_ids(m, precs[i], c->quick, skip_unreported, &k);
                gpu_net_ids(precs[i], c->quick, skip_unreported, &k);
        }
        model_free(m);
}

static void gpu_skip_all(gpu_ctx_t *c, const precision_t *precs, int n_precs, const char *why) {
        struct skip_ctx k = { c, why };
        model_t *m = NULL;

        if (model_describe(&m) < 0) {
                gpu_result(c, GPU_SKIP, "gpu/all", NULL, "%s", why);
                return;
        }
        for (int i = 0; i < n_precs; i++) {
                gpu_layer_ids(m, precs[i], c->quick, skip_one, &k);
                gpu_extra_ids(m, precs[i], c->quick, skip_one, &k);
                gpu_net_ids(precs[i], c->quick, skip_one, &k);
        }
        model_free(m);
}

/* --- one precision -------------------------------------------------------- */

/* Every check of this precision needs the open engine: one failure says why. */
static void gpu_fail_open(gpu_ctx_t *c, precision_t p, const char *why) {
        char id[96];

        snprintf(id, sizeof(id), "gpu/%s/open", precision_name(p));
        gpu_result(c, GPU_FAIL, id, NULL, "%s", why);
}

static void gpu_run_precision(gpu_ctx_t *c, const model_t *ref, engine_t *cpu, precision_t p) {
        engine_options_t o;
        engine_t *e = NULL;
        model_t *m = NULL, *swapped = NULL;
        engine_cuda_debug_info_t info;
        errbuf_t err = { "" };
        char warning[256] = "", id[96];
        int r;

        if (c->lost[0])
                return;
        /* The CUDA engine drops its model's host weights after the upload, so
         * it gets a model of its own; ref keeps the fp32 reference weights. */
        r = model_load(&m, c->weights_path, &err);
        if (r < 0) {
                gpu_fail_open(c, p, err.msg);
                return;
        }
        engine_options_init(&o);
        o.backend = BACKEND_CUDA;
        o.precision = p;
        o.top_k = GPU_TOP_K;
        /* gpu-check's fallback stage sets INFERD_CUDA_RESIDUAL/_BIAS. */
        engine_cuda_options_from_env(&o.cuda);
        if (c->selftest) {
                /* A CPU engine stands in; small batches keep it quick. */
                o.backend = BACKEND_CPU;
                o.precision = PRECISION_FP32;
                o.max_batch = 3;
                /* Its single steps read m's folded blocks (gpu_ref_op). */
                o.cpu_keep_conv_weights = true;
                if (c->selftest == 2)
                        gpu_selftest_break_model(m, c->seed);
        }
        r = engine_open(&e, m, &o, warning, sizeof(warning), &err);
        if (r < 0) {
                gpu_fail_open(c, p, err.msg);
                /* A fault inside open (the warm-up, the graphs' first runs)
                 * leaves no engine to ask, so its sentence says it. */
                if (strstr(err.msg, "the CUDA context is lost")) {
                        snprintf(c->lost, sizeof(c->lost), "device context lost after gpu/%s/open: %s",
                                 precision_name(p), err.msg);
                        printf("# %s\n", c->lost);
                }
                model_free(m);
                return;
        }
        if (!c->selftest && strcmp(engine_backend(e), "cuda") != 0) {
                snprintf(id, sizeof(id), "engine_open(BACKEND_CUDA) gave the '%s' engine", engine_backend(e));
                gpu_fail_open(c, p, id);
                goto done;
        }
        snprintf(id, sizeof(id), "gpu/%s/open", precision_name(p));
        /* The modes open chose are the ones the options asked for: the
         * graphs' residual mode, and no fp32 conv bias tried at fp16/bf16
         * with bias_precision. */
        if (!c->selftest && c->debug_info && c->debug_info(e, &info) == 0 &&
            ((info.residual_kernel_graphs != 0) != o.cuda.residual_kernel ||
             (o.cuda.bias_precision && p != PRECISION_FP32 && info.convs_bias_fp32 > 0))) {
                gpu_result(c, GPU_FAIL, id, NULL, "open chose residual=%s and %d/%d fp32 conv biases; its options asked "
                           "for residual=%s, bias_precision=%s", info.residual_kernel_graphs ? "kernel" : "fused",
                           info.convs_bias_fp32, info.convs, o.cuda.residual_kernel ? "kernel" : "fused",
                           o.cuda.bias_precision ? "yes" : "no");
                goto done;
        }
        /* What open chose, for the report: the conv biases' type (fp32 where
         * cuBLASLt took it), the graphs' residual mode, the GEMM plans the
         * warm-up made outside capture and how many fell back from the
         * heuristic's first algorithm. */
        if (c->debug_info && c->debug_info(e, &info) == 0)
                gpu_result(c, GPU_PASS, id,
                           json_pack("{s:i, s:I, s:i, s:i, s:s, s:i, s:i, s:i}", "max_batch", engine_max_batch(e),
                                     "total_bytes", (json_int_t)engine_plan_of(e)->total_bytes, "convs", info.convs,
                                     "convs_bias_fp32", info.convs_bias_fp32, "residual_graphs",
                                     info.residual_kernel_graphs ? "kernel" : "fused", "gemm_plans", info.gemm_plans,
                                     "gemm_heuristic_calls", info.gemm_heuristic_calls, "gemm_algo_fallbacks",
                                     info.gemm_algo_fallbacks),
                           "max_batch=%d total_bytes=%llu bias_fp32=%d/%d residual=%s gemm_plans=%d "
                           "algo_fallbacks=%d",
                           engine_max_batch(e), (unsigned long long)engine_plan_of(e)->total_bytes,
                           info.convs_bias_fp32, info.convs, info.residual_kernel_graphs ? "kernel" : "fused",
                           info.gemm_plans, info.gemm_algo_fallbacks);
        else
                gpu_result(c, GPU_PASS, id,
                           json_pack("{s:i, s:I}", "max_batch", engine_max_batch(e), "total_bytes",
                                     (json_int_t)engine_plan_of(e)->total_bytes),
                           "max_batch=%d total_bytes=%llu", engine_max_batch(e),
                           (unsigned long long)engine_plan_of(e)->total_bytes);

        /* Memory first: right after open is what the plan describes. Each
         * group stops at a lost context (gpu_lost), and so does this. */
        gpu_mem_plan_run(c, e, p);
        if (c->lost[0])
                goto done;
        gpu_layers_run(c, e, ref, p);
        if (c->lost[0])
                goto done;
        gpu_net_run(c, e, cpu, p);
        if (c->lost[0])
                goto done;
        gpu_mem_steady_run(c, e, p);
        if (c->lost[0])
                goto done;
        gpu_swap_run(c, e, p, &swapped);
done:
        engine_free(e);
        model_free(swapped);
        model_free(m);
}

static int parse_precisions(const char *s, precision_t *out, int *n) {
        char buf[64], *save = NULL;

        snprintf(buf, sizeof(buf), "%s", s);
        *n = 0;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                precision_t p;

                if (precision_from_string(t, &p) < 0 || p == PRECISION_AUTO || *n >= 3)
                        return -EINVAL;
                out[(*n)++] = p;
        }
        return *n > 0 ? 0 : -EINVAL;
}

static void usage(FILE *f) {
        fprintf(f, "usage: gpu-tests [--weights FILE] [--quick] [--json OUT] [--precision fp32,fp16,bf16] [--prefix ID]\n"
                   "                 [--seed N] [--mem-batches N] [--tol P=X]... [--net-tol P=X]...\n"
                   "       gpu-tests --probe\n"
                   "       gpu-tests --selftest[=broken|=lost] --weights FILE [...]   (the harness on a CPU stand-in)\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "weights", required_argument, NULL, 'w' },
                { "quick", no_argument, NULL, 'q' },
                { "json", required_argument, NULL, 'j' },
                { "precision", required_argument, NULL, 'p' },
                { "seed", required_argument, NULL, 's' },
                { "mem-batches", required_argument, NULL, 'm' },
                { "probe", no_argument, NULL, 'P' },
                { "selftest", optional_argument, NULL, 'S' },
                { "tol", required_argument, NULL, 't' },
                { "net-tol", required_argument, NULL, 'n' },
                { "help", no_argument, NULL, 'h' },
                { "prefix", required_argument, NULL, 'X' },
                {},
        };
        gpu_ctx_t c = { .seed = 20261129, .mem_batches = -1, .prefix = "gpu" };
        precision_t precs[3];
        int n_precs = 3, probe_only = 0, ch, devices = 0, r;
        const char *json_path = NULL;
        char why[256] = "";
        uint64_t device_total_bytes = 0;
        model_t *ref = NULL;
        engine_t *cpu = NULL;

        memcpy(precs, gpu_precisions, sizeof(precs));
        while ((ch = getopt_long(argc, argv, "w:qj:p:s:m:Ph", opts, NULL)) != -1) {
                switch (ch) {
                case 'w':
                        c.weights_path = optarg;
                        break;
                case 'X':
                        c.prefix = optarg;
                        break;
                case 'q':
                        c.quick = 1;
                        break;
                case 'j':
                        json_path = optarg;
                        break;
                case 'p':
                        if (parse_precisions(optarg, precs, &n_precs) < 0) {
                                fprintf(stderr, "gpu-tests: bad --precision '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 's':
                        c.seed = strtoull(optarg, NULL, 0) | 1;
                        break;
                case 'm':
                        c.mem_batches = atoi(optarg);
                        break;
                case 'P':
                        probe_only = 1;
                        break;
                case 't':
                case 'n':
                        if (parse_tolerance(optarg, ch == 't' ? gpu_tol : gpu_net_tol) < 0) {
                                fprintf(stderr, "gpu-tests: bad --tol '%s' (want fp32|fp16|bf16=X, 0 < X < 1)\n", optarg);
                                return 2;
                        }
                        break;
                case 'S':
                        if (optarg && strcmp(optarg, "broken") != 0 && strcmp(optarg, "lost") != 0) {
                                fprintf(stderr, "gpu-tests: --selftest takes no value, =broken or =lost\n");
                                return 2;
                        }
                        c.selftest = !optarg ? 1 : strcmp(optarg, "broken") == 0 ? 2 : 3;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind != argc) {
                usage(stderr);
                return 2;
        }
        if (c.mem_batches < 0)
                c.mem_batches = c.selftest ? 4 : c.quick ? 100 : 1000;
        c.results = json_array();
        c.debug_op = engine_cuda_debug_op;
        c.mem_info = engine_cuda_mem_info;
        c.debug_info = engine_cuda_debug_info;
        c.debug_set = engine_cuda_debug_set;

        if (c.selftest) {
                if (!c.weights_path) {
                        fprintf(stderr, "gpu-tests: --selftest needs --weights FILE\n");
                        return 2;
                }
                gpu_selftest_setup(c.selftest == 2 ? 1 : c.selftest == 3 ? 2 : 0);
                c.debug_op = gpu_selftest_debug_op;
                c.mem_info = gpu_selftest_mem_info;
                c.debug_info = gpu_selftest_debug_info;
                c.debug_set = gpu_selftest_debug_set;
                c.prefix = "gpu-selftest";
                goto run;
        }

        if (!engine_cuda_built)
                snprintf(why, sizeof(why), "this build has no CUDA engine (nvcc was not found at build time)");
        else if ((devices = engine_cuda_probe(0, &device_total_bytes, why, sizeof(why))) <= 0 && !*why)
                snprintf(why, sizeof(why), "no CUDA device");

        if (probe_only) {
                if (devices > 0) {
                        printf("cuda: %d device(s), device 0 has %llu bytes\n", devices,
                               (unsigned long long)device_total_bytes);
                        return 0;
                }
                printf("cuda: none: %s\n", why);
                return 77;
        }

        if (devices <= 0) {
                gpu_skip_all(&c, precs, n_precs, why);
                goto out;
        }
        if (!engine_cuda_debug_op || !engine_cuda_mem_info || !engine_cuda_debug_info || !engine_cuda_debug_set) {
                /* A CUDA build must bring the single-step interface: an
                 * unresolved weak reference is a link problem, not a skip. */
                gpu_result(&c, GPU_FAIL, "gpu/link", NULL,
                           "engine_cuda_debug_op/_info/_set or engine_cuda_mem_info are not linked into gpu-tests "
                           "(their object was not pulled from libinferd-core.a: link $(CUDA_OBJS) explicitly, "
                           "or add -Wl,-u,engine_cuda_debug_op -Wl,-u,engine_cuda_mem_info)");
                goto out;
        }
        if (!c.weights_path) {
                gpu_result(&c, GPU_FAIL, "gpu/setup", NULL, "a CUDA device is present but no --weights FILE was given");
                goto out;
        }

run:
        {
                errbuf_t err = { "" };
                engine_options_t o;
                char warning[256] = "";

                r = model_load(&ref, c.weights_path, &err);
                if (r < 0) {
                        gpu_result(&c, GPU_FAIL, "gpu/setup", NULL, "%s", err.msg);
                        goto out;
                }
                gpu_classes = ref->classes;
                engine_options_init(&o);
                o.backend = BACKEND_CPU;
                o.precision = PRECISION_FP32;
                o.top_k = GPU_TOP_K;
                /* The layer checks read ref's folded blocks. */
                o.cpu_keep_conv_weights = true;
                if (c.selftest)
                        o.max_batch = 3;
                r = engine_open(&cpu, ref, &o, warning, sizeof(warning), &err);
                if (r < 0) {
                        /* The layer checks need only ref; the network checks report this. */
                        fprintf(stderr, "gpu-tests: the CPU reference engine did not open: %s\n", err.msg);
                        cpu = NULL;
                }
        }
        printf("# gpu-tests: %s, weights %s, %s\n",
               c.selftest ? (c.selftest == 2   ? "SELFTEST with a deliberately broken CPU stand-in"
                              : c.selftest == 3 ? "SELFTEST with a CPU stand-in that loses its context"
                                                : "SELFTEST with a CPU stand-in")
                          : "CUDA device 0",
               c.weights_path, c.quick ? "quick" : "full");
        for (int i = 0; i < n_precs; i++)
                gpu_run_precision(&c, ref, cpu, precs[i]);
        if (c.lost[0])
                gpu_skip_rest(&c, precs, n_precs);

out:
        printf("# gpu-tests: %d passed, %d failed, %d skipped%s%s\n", c.passed, c.failed, c.skipped,
               c.lost[0] ? "; " : "", c.lost);
        if (json_path) {
                json_t *doc = json_pack("{s:O, s:i, s:i, s:i, s:I, s:s?, s:b, s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f}}",
                                        "results", c.results, "passed", c.passed, "failed", c.failed, "skipped",
                                        c.skipped, "device_total_bytes", (json_int_t)device_total_bytes, "weights",
                                        c.weights_path, "quick", c.quick, "tolerance", "fp32",
                                        gpu_tolerance(PRECISION_FP32), "fp16", gpu_tolerance(PRECISION_FP16), "bf16",
                                        gpu_tolerance(PRECISION_BF16), "net_tolerance", "fp32",
                                        gpu_net_tolerance(PRECISION_FP32), "fp16", gpu_net_tolerance(PRECISION_FP16),
                                        "bf16", gpu_net_tolerance(PRECISION_BF16));

                if (doc)
                        json_object_set_new(doc, "context_lost", c.lost[0] ? json_string(c.lost) : json_null());
                if (!doc || json_dump_file(doc, json_path, JSON_INDENT(1)) < 0) {
                        fprintf(stderr, "gpu-tests: could not write '%s'\n", json_path);
                        c.failed++;
                }
                json_decref(doc);
        }
        for (int i = 0; i < c.n_cpu_cache; i++)
                free(c.cpu_cache[i].logits);
        engine_free(cpu);
        model_free(ref);
        json_decref(c.results);
        return c.failed ? 1 : 0;
}

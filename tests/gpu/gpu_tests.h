/* gpu_tests: what the files of build/tests/gpu-tests share.
 *
 * The GPU test binary holds the CUDA engine against the CPU reference: every
 * layer (gpu_layers.c), the whole network through the real submit path, and
 * the device memory the plan promised (gpu_net.c). test_gpu.c owns main(),
 * the options and the report: one "PASS|FAIL|SKIP <id>[: why]" line per
 * check on stdout, and all of them as JSON with --json.
 *
 * This is a test program, not a CUnit suite (it needs a device and minutes,
 * not milliseconds), and not a benchmark: timings it prints are figures for
 * the reader, never pass/fail criteria. */
#ifndef INFERD_GPU_TESTS_H
#define INFERD_GPU_TESTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/record.h"

/* The CUDA engine's single-step interface. Weak, so that this binary also
 * links in a build without nvcc (engine_cuda_none.c), where it only reports
 * its tests as skipped; test_gpu.c checks the addresses before any use. */
#if __has_include("../../cuda/engine_cuda_debug.h")
#include "../../cuda/engine_cuda_debug.h"
#else
#define ENGINE_CUDA_OP_PREPROCESS (-1)
#define ENGINE_CUDA_OP_HEAD (-2)
int engine_cuda_debug_op(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                         const float *host_residual, void *host_out, errbuf_t *err);
int engine_cuda_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err);
typedef struct engine_cuda_debug_info {
        int failed, lost;
        char why[512];
        int residual_kernel, residual_kernel_graphs, convs, convs_bias_fp32;
        unsigned char bias_fp32[MODEL_MAX_OPS];
        int gemm_plans, gemm_uncached, gemm_heuristic_calls, gemm_algo_fallbacks;
        unsigned max_blocks;
} engine_cuda_debug_info_t;
int engine_cuda_debug_info(engine_t *e, engine_cuda_debug_info_t *info);
#define ENGINE_CUDA_SET_RESIDUAL_KERNEL 1
#define ENGINE_CUDA_SET_MAX_BLOCKS 2
int engine_cuda_debug_set(engine_t *e, int what, long value, errbuf_t *err);
#endif
#pragma weak engine_cuda_debug_op
#pragma weak engine_cuda_mem_info
#pragma weak engine_cuda_debug_info
#pragma weak engine_cuda_debug_set

#define GPU_LAYER_N 3           /* samples per layer test */
#define GPU_TOP_K 5
/* The class count of the model under test (--weights FILE: 1000 for the
 * ResNet-50 tests/gpu/run exports, 10 for its resnet18): main sets it. */
extern int gpu_classes;
#define GPU_MEM_RATIO_MIN 0.85  /* measured device use must be within 15% under the plan */
#define GPU_CAP_BLOCKS 64       /* the grid cap of the gpu/P/cap64/ checks: grid-stride loops past their first pass */

typedef enum gpu_status {
        GPU_PASS,
        GPU_FAIL,
        GPU_SKIP,
} gpu_status_t;

typedef int (*gpu_debug_op_fn)(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                               const float *host_residual, void *host_out, errbuf_t *err);
typedef int (*gpu_mem_info_fn)(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err);
typedef int (*gpu_debug_info_fn)(engine_t *e, engine_cuda_debug_info_t *info);
typedef int (*gpu_debug_set_fn)(engine_t *e, int what, long value, errbuf_t *err);

typedef struct gpu_ctx {
        const char *weights_path;
        /* engine_cuda_debug_op and engine_cuda_mem_info, or their CPU
         * stand-ins for --selftest (gpu_selftest.c). */
        gpu_debug_op_fn debug_op;
        gpu_mem_info_fn mem_info;
        gpu_debug_info_fn debug_info;
        gpu_debug_set_fn debug_set;
        int selftest;           /* 0; 1: CPU stand-in; 2: a deliberately broken one; 3: one that loses its context */
        /* "device context lost after <id>: <why>" once a step found the CUDA
         * context lost (a sticky error): every check not yet run is then
         * reported SKIP with this reason, and nothing else runs. */
        char lost[768];
        const char *prefix;     /* of every id: "gpu", or "gpu-selftest" */
        int quick;
        uint64_t seed;
        int mem_batches;        /* batches of the steady-state memory check */
        json_t *results;        /* array of {id, status, detail, figures} */
        int passed, failed, skipped;
        /* CPU engine logits of the whole-network batches, computed once and
         * shared by the three precisions (the records depend on n only). */
        struct {
                int n;
                float *logits;  /* (n, gpu_classes) fp32 */
        } cpu_cache[8];
        int n_cpu_cache;
} gpu_ctx_t;

/* One result line on stdout and one JSON entry. figures (may be NULL) is a
 * JSON object of the measured numbers; the reference is stolen. */
void gpu_result(gpu_ctx_t *c, gpu_status_t st, const char *id, json_t *figures, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

/* Whether the device context is lost: already known, or engine e (may be
 * NULL) reports it now, after the check `after_id` (then the reason is
 * recorded in c->lost and printed). The checks call it after every failure
 * and stop when it says 1. */
int gpu_lost(gpu_ctx_t *c, engine_t *e, const char *after_id);

/* Tolerance of ‖out − ref‖ / ‖ref‖ for a precision (the design's, unless
 * --tol), and for the whole-network checks (--net-tol, else the same). */
double gpu_tolerance(precision_t p);
double gpu_net_tolerance(precision_t p);

/* Deterministic data. */
uint64_t gpu_rand_u64(uint64_t *s);
float gpu_rand_uniform(uint64_t *s);    /* [0, 1) */
float gpu_rand_normal(uint64_t *s);     /* N(0, 1) */

/* ‖out − ref‖ / ‖ref‖ over n elements, in double; *bad receives the number of
 * non-finite elements of out (any makes the comparison fail). */
double gpu_rel_l2(const float *out, const float *ref, size_t n, size_t *bad);

/* Random records: record i at recs + i * RECORD_MAX_BYTES, format fmt[i]. */
void gpu_fill_record(uint64_t *s, record_format_t f, void *rec);

/* Test names of every check, for the skip path: calls fn for each id. */
void gpu_layer_ids(const model_t *m, precision_t p, int quick, void (*fn)(void *u, const char *id), void *u);
/* The checks of item 6 (residual convs as one fused GEMM, and as the BIAS
 * epilogue + the add-ReLU kernel) and item 9 (kernels under a grid cap of
 * GPU_CAP_BLOCKS blocks) of issue 13, which gpu_layers_run runs too. */
void gpu_extra_ids(const model_t *m, precision_t p, int quick, void (*fn)(void *u, const char *id), void *u);
void gpu_net_ids(precision_t p, int quick, void (*fn)(void *u, const char *id), void *u);

/* The checks of one precision on an opened CUDA engine. ref holds the
 * folded fp32 weights; cpu is an opened CPU engine on ref (NULL when it
 * could not be opened: the whole-network checks then fail). */
void gpu_layers_run(gpu_ctx_t *c, engine_t *cuda, const model_t *ref, precision_t p);
void gpu_net_run(gpu_ctx_t *c, engine_t *cuda, engine_t *cpu, precision_t p);
void gpu_mem_plan_run(gpu_ctx_t *c, engine_t *cuda, precision_t p);
void gpu_mem_steady_run(gpu_ctx_t *c, engine_t *cuda, precision_t p);
/* Last on an engine: swaps it to another model and precision (engine_swap);
 * the model it then reads goes to *keep, freed by the caller after it. */
void gpu_swap_run(gpu_ctx_t *c, engine_t *cuda, precision_t p, model_t **keep);

/* The reference op i of m on act[] (each (n, tensor elems) fp32 NHWC; only
 * the op's input, residual and output need to be there). ws holds ws_elems
 * floats of im2col scratch. */
void gpu_ref_op(const model_t *m, int i, int n, float *const *act, float *ws, size_t ws_elems);

/* --selftest: the checks run on a machine without a GPU, with a CPU engine in
 * place of the CUDA one and these stand-ins for the single-step interface
 * (computed with cpu_ops.h on the engine's own model), so that the harness
 * itself is tested. broken = 1 makes them wrong on purpose: weights off by a
 * relative 1e-3 (fails fp32's tolerance, passes fp16's), an unwritten
 * preprocessing element and a padding row that is not zero, swapped top-k
 * ranks, a wrong residual add in the kernel mode, memory over the plan and
 * growing. broken = 2 (--selftest=lost) instead loses its "context" at the
 * single step of layer1.0.conv2: that step fails with a sticky error, and
 * every later one as a lost context would. gpu_selftest_break_model
 * perturbs a loaded model's weights. */
void gpu_selftest_setup(int broken);
void gpu_selftest_break_model(model_t *m, uint64_t seed);
int gpu_selftest_debug_op(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                          const float *host_residual, void *host_out, errbuf_t *err);
int gpu_selftest_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err);
int gpu_selftest_debug_info(engine_t *e, engine_cuda_debug_info_t *info);
int gpu_selftest_debug_set(engine_t *e, int what, long value, errbuf_t *err);

#endif

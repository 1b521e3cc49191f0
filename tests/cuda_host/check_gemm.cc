/* check_gemm: cuda/gemm.cu's plan cache, on a machine without cuBLASLt or a GPU.
 *
 * gemm.cu is compiled here as host C++ against tests/cuda_host/mock/cublasLt.h,
 * and the cuBLASLt and CUDA runtime calls it makes are recorders below. The
 * checks are about the order of calls, which is what item 1 of issue 13 is
 * about: the heuristic is asked once per (key, shape), for CUDA_GEMM_ALGOS
 * algorithms, never while the stream is capturing (a capture that meets an
 * unplanned shape fails with -EBUSY and makes no cuBLASLt call at all);
 * inside a capture only cublasLtMatmul runs, with the plan's descriptors and
 * the algorithm the planning run kept; a refused first algorithm falls back
 * to the next; the fp32 bias type is set only when asked for with an
 * fp16/bf16 D; every descriptor is destroyed with the cache. Nothing here
 * says whether cuBLASLt itself computes the right thing: tests/gpu does. */
#include "../../cuda/gemm.cu"

#include <stdio.h>
#include <string.h>

/* --- recorders ------------------------------------------------------------ */

struct cublasLtMatmulDescOpaque_t {
        int epilogue;
        int bias_type_set;
        int32_t bias_type;
        const void *bias;
};
struct cublasLtMatrixLayoutOpaque_t {
        int type;
};
struct cublasLtMatmulPreferenceOpaque_t {
        uint64_t ws;
};

static struct {
        int capturing;          /* what cudaStreamIsCapturing answers */
        int heuristic_calls, heuristic_requested, matmul_calls, live_objects;
        int heuristic_unsupported_fp32_bias;    /* the heuristic has nothing for an fp32 bias */
        int heuristic_found;    /* algorithms it returns */
        uint64_t refuse_algo_mask;      /* cublasLtMatmul refuses algorithm ids in this mask */
        /* the last cublasLtMatmul */
        cublasLtMatmulDesc_t last_op;
        uint64_t last_algo;
        float last_beta;
        const void *last_c;
} mk;

extern "C" {
const char *cublasLtGetStatusName(cublasStatus_t s) {
        return s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_OTHER";
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
        return s == CUBLAS_STATUS_SUCCESS ? "success" : "mock failure";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
        *h = (cublasLtHandle_t)&mk;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t st) {
        if (ct != CUBLAS_COMPUTE_32F || st != CUDA_R_32F)
                return CUBLAS_STATUS_INVALID_VALUE;
        *d = new cublasLtMatmulDescOpaque_t();
        mk.live_objects++;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
        delete d;
        mk.live_objects--;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
        switch (a) {
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
                if (n != sizeof(cublasLtEpilogue_t))
                        return CUBLAS_STATUS_INVALID_VALUE;
                d->epilogue = *(const cublasLtEpilogue_t *)buf;
                break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
                /* int32_t based on cudaDataType */
                if (n != sizeof(int32_t))
                        return CUBLAS_STATUS_INVALID_VALUE;
                d->bias_type_set = 1;
                d->bias_type = *(const int32_t *)buf;
                break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
                if (n != sizeof(void *))
                        return CUBLAS_STATUS_INVALID_VALUE;
                memcpy(&d->bias, buf, sizeof(void *));
                break;
        default:
                break;
        }
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t, uint64_t, int64_t) {
        *l = new cublasLtMatrixLayoutOpaque_t{ (int)t };
        mk.live_objects++;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
        delete l;
        mk.live_objects--;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
        *p = new cublasLtMatmulPreferenceOpaque_t();
        mk.live_objects++;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
        delete p;
        mk.live_objects--;
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n) {
        if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
                if (n != sizeof(uint64_t))
                        return CUBLAS_STATUS_INVALID_VALUE;
                p->ws = *(const uint64_t *)buf;
        } else if (n != sizeof(uint32_t)) {
                return CUBLAS_STATUS_INVALID_VALUE;
        }
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t res[], int *found) {
        mk.heuristic_calls++;
        mk.heuristic_requested = requested;
        *found = 0;
        if (mk.heuristic_unsupported_fp32_bias && op->bias_type_set && op->bias_type == CUDA_R_32F)
                return CUBLAS_STATUS_NOT_SUPPORTED;
        for (int i = 0; i < requested && i < mk.heuristic_found; i++) {
                memset(&res[i], 0, sizeof(res[i]));
                res[i].algo.data[0] = (uint64_t)i;
                res[i].workspaceSize = pref->ws / 2;
                res[i].state = CUBLAS_STATUS_SUCCESS;
                (*found)++;
        }
        return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void *, const void *,
                              cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *beta,
                              const void *c, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
        mk.matmul_calls++;
        if (mk.refuse_algo_mask & (1ull << algo->data[0]))
                return CUBLAS_STATUS_NOT_SUPPORTED;
        mk.last_op = op;
        mk.last_algo = algo->data[0];
        mk.last_beta = *(const float *)beta;
        mk.last_c = c;
        return CUBLAS_STATUS_SUCCESS;
}

/* The CUDA runtime calls of gemm.cu: nothing here links cudart. */
cudaError_t cudaStreamIsCapturing(cudaStream_t, enum cudaStreamCaptureStatus *st) {
        *st = mk.capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
        return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
        return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t) {
        return "mock CUDA error";
}
const char *cudaGetErrorName(cudaError_t) {
        return "cudaErrorMock";
}
}

/* --- checks --------------------------------------------------------------- */

static int fails = 0;
static char first[1024];
#define CHECK(c, ...)                                                                   \
        do {                                                                            \
                if (!(c) && fails++ == 0)                                               \
                        snprintf(first, sizeof(first), __VA_ARGS__);                    \
        } while (0)

static int report(const char *id) {
        if (fails)
                printf("FAIL cuda_host/%s: %d failed checks; first: %s\n", id, fails, first);
        else
                printf("PASS cuda_host/%s\n", id);
        fflush(stdout);
        int r = fails > 0;
        fails = 0;
        return r;
}

/* 256-byte aligned fake device pointers (never dereferenced). */
alignas(256) static unsigned char arena[1 << 16];
#define PTR(off) ((void *)(arena + (off)))

static cuda_gemm_t conv_gemm(int64_t m, precision_t p, int residual) {
        cuda_gemm_t g;

        memset(&g, 0, sizeof(g));
        g.m = m;
        g.n = 256;
        g.k = 64;
        g.ab = p;
        g.d_fp32 = 0;
        g.bias_fp32 = 0;
        g.a = PTR(0);
        g.lda = 64;
        g.w = PTR(4096);
        g.bias = PTR(8192);
        g.c = residual ? PTR(12288) : NULL;
        g.d = PTR(16384);
        g.relu = 1;
        return g;
}

static void reset_mock(void) {
        int live = mk.live_objects;

        memset(&mk, 0, sizeof(mk));
        mk.live_objects = live;
        mk.heuristic_found = CUDA_GEMM_ALGOS;
}

int main() {
        cublasLtHandle_t lt;
        cuda_gemm_cache_t *cache = NULL;
        cuda_gemm_stats_t st;
        errbuf_t err = { "" };
        cudaStream_t s = (cudaStream_t)0x10;
        void *ws = PTR(32768);
        const size_t ws_bytes = 32 << 20;
        cuda_gemm_t g;
        cublasLtMatmulDesc_t planned_op;
        int r, failed = 0;

        cublasLtCreate(&lt);

        /* 1. Plan outside capture, then replay inside it. */
        reset_mock();
        r = cuda_gemm_cache_new(&cache, 5);
        CHECK(r == 0, "cache_new: %d", r);
        g = conv_gemm(3 * 56 * 56, PRECISION_FP16, 1);
        r = cuda_gemm_run(cache, lt, s, 7, &g, ws, ws_bytes, &err);
        CHECK(r == 0, "planning run: %d %s", r, err.msg);
        CHECK(mk.heuristic_calls == 1 && mk.heuristic_requested == CUDA_GEMM_ALGOS,
              "planning asked the heuristic %d times for %d algorithms (want once for %d)", mk.heuristic_calls,
              mk.heuristic_requested, CUDA_GEMM_ALGOS);
        CHECK(mk.matmul_calls == 1 && mk.last_algo == 0, "planning ran %d matmuls, kept algorithm %llu",
              mk.matmul_calls, (unsigned long long)mk.last_algo);
        CHECK(mk.last_beta == 1.0f && mk.last_c == g.c, "a residual must come in through C with beta 1");
        CHECK(mk.last_op && mk.last_op->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS && mk.last_op->bias == g.bias &&
                      !mk.last_op->bias_type_set,
              "the descriptor of a ReLU conv with a D-typed bias is wrong");
        planned_op = mk.last_op;
        mk.capturing = 1;
        r = cuda_gemm_run(cache, lt, s, 7, &g, ws, ws_bytes, &err);
        CHECK(r == 0, "captured run: %d %s", r, err.msg);
        CHECK(mk.heuristic_calls == 1, "the heuristic was asked inside a capture");
        CHECK(mk.matmul_calls == 2 && mk.last_op == planned_op && mk.last_algo == 0,
              "the captured run did not reuse the plan's descriptor and algorithm");
        failed += report("gemm_plan_replay");

        /* 2. An unplanned shape, another key, a less aligned pointer, or a
         *    different bias type inside a capture: -EBUSY, no cuBLASLt call. */
        {
                int calls = mk.matmul_calls;
                cuda_gemm_t g2 = g, g3 = g, g4 = g;

                g2.m = 2 * 56 * 56;
                r = cuda_gemm_run(cache, lt, s, 7, &g2, ws, ws_bytes, &err);
                CHECK(r == -EBUSY && strstr(err.msg, "no plan from the warm-up"),
                      "an unplanned shape in a capture gave %d (%s), want -EBUSY", r, err.msg);
                r = cuda_gemm_run(cache, lt, s, 8, &g, ws, ws_bytes, &err);
                CHECK(r == -EBUSY, "another key in a capture gave %d, want -EBUSY", r);
                g3.a = PTR(2);  /* 2-byte aligned: the plan assumed 256 */
                r = cuda_gemm_run(cache, lt, s, 7, &g3, ws, ws_bytes, &err);
                CHECK(r == -EBUSY, "a less aligned A in a capture gave %d, want -EBUSY", r);
                g4.bias_fp32 = 1;
                r = cuda_gemm_run(cache, lt, s, 7, &g4, ws, ws_bytes, &err);
                CHECK(r == -EBUSY, "an fp32 bias on a D-typed-bias plan in a capture gave %d, want -EBUSY", r);
                CHECK(mk.heuristic_calls == 1 && mk.matmul_calls == calls,
                      "a refused capture still called cuBLASLt (%d heuristic, %d matmul)", mk.heuristic_calls,
                      mk.matmul_calls - calls);
                /* A more aligned pointer is served by the plan. */
                g3.a = PTR(512);
                r = cuda_gemm_run(cache, lt, s, 7, &g3, ws, ws_bytes, &err);
                CHECK(r == 0 && mk.heuristic_calls == 1, "a more aligned A did not reuse the plan: %d", r);
        }
        failed += report("gemm_no_heuristic_in_capture");

        /* 3. The first algorithm refused: the second is kept and replayed. */
        mk.capturing = 0;
        mk.refuse_algo_mask = 1;
        g = conv_gemm(4 * 28 * 28, PRECISION_BF16, 0);
        r = cuda_gemm_run(cache, lt, s, 9, &g, ws, ws_bytes, &err);
        CHECK(r == 0 && mk.last_algo == 1, "with algorithm 0 refused: %d, kept %llu", r,
              (unsigned long long)mk.last_algo);
        CHECK(mk.last_beta == 0.0f && mk.last_c == g.d, "without a residual beta must be 0 and C = D");
        mk.capturing = 1;
        mk.refuse_algo_mask = 0;
        r = cuda_gemm_run(cache, lt, s, 9, &g, ws, ws_bytes, &err);
        CHECK(r == 0 && mk.last_algo == 1, "the replay ran algorithm %llu, not the kept 1",
              (unsigned long long)mk.last_algo);
        cuda_gemm_cache_stats(cache, &st);
        CHECK(st.algo_fallbacks == 1 && st.plans == 2 && st.heuristic_calls == 2,
              "stats: %d fallbacks, %d plans, %d heuristic calls", st.algo_fallbacks, st.plans, st.heuristic_calls);
        /* Every algorithm refused: -ENOTSUP naming the shape, nothing cached. */
        mk.capturing = 0;
        mk.refuse_algo_mask = ~0ull;
        g.m = 5;
        r = cuda_gemm_run(cache, lt, s, 9, &g, ws, ws_bytes, &err);
        CHECK(r == -ENOTSUP && strstr(err.msg, "refused all 4") && strstr(err.msg, "m=5"),
              "all refused: %d (%s)", r, err.msg);
        mk.refuse_algo_mask = 0;
        mk.heuristic_found = 0;
        g.m = 6;
        r = cuda_gemm_run(cache, lt, s, 9, &g, ws, ws_bytes, &err);
        CHECK(r == -ENOTSUP && strstr(err.msg, "offers no algorithm"), "none offered: %d (%s)", r, err.msg);
        mk.heuristic_found = CUDA_GEMM_ALGOS;
        cuda_gemm_cache_stats(cache, &st);
        CHECK(st.plans == 2, "a failed plan was cached (%d plans)", st.plans);
        failed += report("gemm_algo_fallback");

        /* 4. The fp32 bias: set only with an fp16/bf16 D, -ENOTSUP when the
         *    heuristic has nothing for it (the engine then takes D's type). */
        g = conv_gemm(3 * 7 * 7, PRECISION_FP16, 0);
        g.bias_fp32 = 1;
        r = cuda_gemm_run(cache, lt, s, 11, &g, ws, ws_bytes, &err);
        CHECK(r == 0 && mk.last_op->bias_type_set && mk.last_op->bias_type == CUDA_R_32F,
              "an fp32 bias was not declared: %d", r);
        g.m = 2 * 7 * 7;
        mk.heuristic_unsupported_fp32_bias = 1;
        r = cuda_gemm_run(cache, lt, s, 11, &g, ws, ws_bytes, &err);
        CHECK(r == -ENOTSUP && strstr(err.msg, "fp32 bias"), "fp32 bias unsupported: %d (%s)", r, err.msg);
        g.bias_fp32 = 0;
        r = cuda_gemm_run(cache, lt, s, 11, &g, ws, ws_bytes, &err);
        CHECK(r == 0 && !mk.last_op->bias_type_set, "the D-typed fallback: %d", r);
        mk.heuristic_unsupported_fp32_bias = 0;
        /* The FC: fp32 D, whose bias is fp32 by default: no attribute. */
        g = conv_gemm(3, PRECISION_FP16, 0);
        g.d_fp32 = 1;
        g.bias_fp32 = 1;
        g.relu = 0;
        r = cuda_gemm_run(cache, lt, s, 12, &g, ws, ws_bytes, &err);
        CHECK(r == 0 && !mk.last_op->bias_type_set && mk.last_op->epilogue == CUBLASLT_EPILOGUE_BIAS,
              "the fp32-D GEMM: %d", r);
        failed += report("gemm_bias_type");

        /* 5. A full cache: outside capture the run still happens (planned and
         *    dropped), inside it is refused. */
        {
                int plans_before;

                cuda_gemm_cache_stats(cache, &st);
                plans_before = st.plans;
                CHECK(plans_before == 5, "the cache should be full (%d of 5)", plans_before);
                g = conv_gemm(99, PRECISION_FP32, 0);
                r = cuda_gemm_run(cache, lt, s, 13, &g, ws, ws_bytes, &err);
                cuda_gemm_cache_stats(cache, &st);
                CHECK(r == 0 && st.uncached == 1 && st.plans == plans_before, "full cache, outside capture: %d", r);
                mk.capturing = 1;
                r = cuda_gemm_run(cache, lt, s, 13, &g, ws, ws_bytes, &err);
                CHECK(r == -EBUSY, "full cache, inside capture: %d", r);
                mk.capturing = 0;
        }
        cuda_gemm_cache_free(cache);
        CHECK(mk.live_objects == 0, "%d cuBLASLt descriptors/preferences leaked", mk.live_objects);
        failed += report("gemm_cache_full");
        return failed ? 1 : 0;
}

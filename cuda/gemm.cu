/* gemm: cuda_gemm_run, the cuBLASLt call behind every conv and the FC, and
 * the cache of its plans.
 *
 * cuBLASLt is column-major; our matrices are row-major. A row-major (r, c)
 * matrix is a column-major (c, r) one with the same leading dimension, so
 *
 *   D^T (n, m) = W (n, k) . A^T (k, m)          [column-major view]
 *
 * which is cuBLASLt's  D = op(A') . op(B')  with A' = W stored as a
 * column-major (k, n) matrix, ld k, transposed (op = T), B' = A stored as a
 * column-major (k, m) matrix, ld lda, not transposed, and C/D column-major
 * (n, m), ld n. The bias vector then runs along D's rows (n = cout), as
 * cuBLASLt's BIAS epilogue requires, broadcast over the m pixels.
 *
 * A plan holds the descriptors and the algorithm; it is made once per (key,
 * shape), outside any capture (a public report shows the heuristic failing
 * inside stream capture on a recent cuBLASLt), and every later run, the
 * captured ones included, only calls cublasLtMatmul with it. Nothing is
 * allocated on the device. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_gemm.h"

/* What makes two runs the same plan: everything the descriptors and the
 * heuristic saw. The bias pointer is in the operation descriptor itself;
 * the other pointers are not, but the heuristic assumed their alignment, so
 * a run may reuse a plan only with pointers at least as aligned. */
typedef struct gemm_key {
        int key;
        int64_t m, n, k, lda;
        precision_t ab;
        int d_fp32, bias_fp32, relu, has_c;
        const void *bias;
        uint32_t al_a, al_w, al_c, al_d;
} gemm_key_t;

typedef struct gemm_plan {
        gemm_key_t key;
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t lw, la, ld;
        cublasLtMatmulAlgo_t algo;
        size_t workspace_bytes;
} gemm_plan_t;

struct cuda_gemm_cache {
        gemm_plan_t *plans;     /* (capacity), the first n made */
        int n, capacity;
        cuda_gemm_stats_t st;
};

static cudaDataType_t gemm_type(precision_t p) {
        switch (p) {
        case PRECISION_FP32:
                return CUDA_R_32F;
        case PRECISION_FP16:
                return CUDA_R_16F;
        case PRECISION_BF16:
                return CUDA_R_16BF;
        default:
                assert(!"bad precision");
                return CUDA_R_32F;
        }
}

/* The largest power of two (up to 256) that divides the pointer: cuBLASLt's
 * heuristic must not pick a kernel that assumes more alignment than we have. */
static uint32_t gemm_alignment(const void *p) {
        uintptr_t a = (uintptr_t)p;
        uint32_t al = 256;

        while (al > 1 && a % al)
                al >>= 1;
        return al;
}

static void gemm_key_of(int key, const cuda_gemm_t *g, gemm_key_t *k) {
        memset(k, 0, sizeof(*k));
        k->key = key;
        k->m = g->m;
        k->n = g->n;
        k->k = g->k;
        k->lda = g->lda;
        k->ab = g->ab;
        k->d_fp32 = !!g->d_fp32;
        k->bias_fp32 = g->bias && !g->d_fp32 && g->bias_fp32;
        k->relu = !!g->relu;
        k->has_c = g->c != NULL;
        k->bias = g->bias;
        k->al_a = gemm_alignment(g->a);
        k->al_w = gemm_alignment(g->w);
        k->al_d = gemm_alignment(g->d);
        k->al_c = g->c ? gemm_alignment(g->c) : k->al_d;
}

/* plan p serves a run with key k: the same shape and types, and the run's
 * pointers at least as aligned as the ones the heuristic was told of. */
static int gemm_key_serves(const gemm_key_t *p, const gemm_key_t *k) {
        return p->key == k->key && p->m == k->m && p->n == k->n && p->k == k->k && p->lda == k->lda &&
               p->ab == k->ab && p->d_fp32 == k->d_fp32 && p->bias_fp32 == k->bias_fp32 && p->relu == k->relu &&
               p->has_c == k->has_c && p->bias == k->bias && k->al_a >= p->al_a && k->al_w >= p->al_w &&
               k->al_c >= p->al_c && k->al_d >= p->al_d;
}

static void gemm_plan_destroy(gemm_plan_t *p) {
        if (p->ld)
                cublasLtMatrixLayoutDestroy(p->ld);
        if (p->la)
                cublasLtMatrixLayoutDestroy(p->la);
        if (p->lw)
                cublasLtMatrixLayoutDestroy(p->lw);
        if (p->op)
                cublasLtMatmulDescDestroy(p->op);
        memset(p, 0, sizeof(*p));
}

int cuda_gemm_cache_new(cuda_gemm_cache_t **ret, int capacity) {
        cuda_gemm_cache_t *c;

        assert(ret && capacity >= 1);
        c = (cuda_gemm_cache_t *)calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->plans = (gemm_plan_t *)calloc((size_t)capacity, sizeof(gemm_plan_t));
        if (!c->plans) {
                free(c);
                return -ENOMEM;
        }
        c->capacity = capacity;
        *ret = c;
        return 0;
}

void cuda_gemm_cache_free(cuda_gemm_cache_t *c) {
        if (!c)
                return;
        for (int i = 0; i < c->n; i++)
                gemm_plan_destroy(&c->plans[i]);
        free(c->plans);
        free(c);
}

void cuda_gemm_cache_stats(const cuda_gemm_cache_t *c, cuda_gemm_stats_t *st) {
        *st = c->st;
        st->plans = c->n;
}

/* The descriptors of g (everything of a plan but the algorithm). */
static int gemm_plan_describe(const cuda_gemm_t *g, gemm_plan_t *p, errbuf_t *err) {
        cublasOperation_t trans_w = CUBLAS_OP_T, trans_a = CUBLAS_OP_N;
        cublasLtEpilogue_t epi;
        cudaDataType_t t_ab, t_d;
        int32_t bias_type = CUDA_R_32F;
        int r = 0;

        t_ab = gemm_type(g->ab);
        t_d = g->d_fp32 ? CUDA_R_32F : t_ab;
        if (g->bias)
                epi = g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        else
                epi = g->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;

        LT_GOTO(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "GEMM descriptor");
        LT_GOTO(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w)),
                "GEMM transpose A");
        LT_GOTO(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_a, sizeof(trans_a)),
                "GEMM transpose B");
        LT_GOTO(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                "GEMM epilogue");
        if (g->bias) {
                /* The bias is of D's type (cuBLASLt's default) unless the
                 * caller asks for fp32 with an fp16/bf16 D, which keeps the
                 * folded BN shift unrounded; the heuristic then says whether
                 * any kernel takes it. */
                if (p->key.bias_fp32)
                        LT_GOTO(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                               sizeof(bias_type)),
                                "GEMM bias type");
                LT_GOTO(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                       sizeof(g->bias)),
                        "GEMM bias pointer");
        }
        LT_GOTO(cublasLtMatrixLayoutCreate(&p->lw, t_ab, (uint64_t)g->k, (uint64_t)g->n, g->k), "GEMM layout of W");
        LT_GOTO(cublasLtMatrixLayoutCreate(&p->la, t_ab, (uint64_t)g->k, (uint64_t)g->m, g->lda),
                "GEMM layout of A");
        LT_GOTO(cublasLtMatrixLayoutCreate(&p->ld, t_d, (uint64_t)g->n, (uint64_t)g->m, g->n), "GEMM layout of D");
fail:
        return r;
}

static int gemm_no_algorithm(const cuda_gemm_t *g, const gemm_key_t *k, const char *why, errbuf_t *err) {
        return errbuf_set(err, -ENOTSUP,
                          "cuBLASLt %s for a %s GEMM of m=%lld n=%lld k=%lld (lda %lld, %s bias%s%s)", why,
                          precision_name(g->ab), (long long)g->m, (long long)g->n, (long long)g->k,
                          (long long)g->lda, !g->bias ? "no" : k->bias_fp32 || g->d_fp32 ? "fp32" : "D-typed",
                          g->relu ? ", ReLU" : "", g->c ? ", residual through C" : "");
}

/* Makes the plan of g and runs g with it on s: the heuristic's candidates
 * in order until cublasLtMatmul accepts one. Outside capture only. */
static int gemm_plan_make_and_run(cuda_gemm_cache_t *c, cublasLtHandle_t lt, cudaStream_t s, const cuda_gemm_t *g,
                                  const gemm_key_t *k, void *workspace, size_t workspace_bytes, gemm_plan_t *p,
                                  errbuf_t *err) {
        cublasLtMatmulPreference_t pref = NULL;
        cublasLtMatmulHeuristicResult_t heur[CUDA_GEMM_ALGOS];
        cublasStatus_t hs, ms = CUBLAS_STATUS_NOT_SUPPORTED;
        uint64_t ws = workspace_bytes;
        float alpha = 1.0f, beta = g->c ? 1.0f : 0.0f;
        /* The pointers' alignments; cuBLASLt's A is our W, its B our A. */
        const struct {
                cublasLtMatmulPreferenceAttributes_t attr;
                const uint32_t *bytes;
                const char *what;
        } align[] = {
                { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al_w, "GEMM alignment of W" },
                { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al_a, "GEMM alignment of A" },
                { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->al_c, "GEMM alignment of C" },
                { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al_d, "GEMM alignment of D" },
        };
        char why[128];
        int found = 0, tried = 0, r;

        memset(p, 0, sizeof(*p));
        p->key = *k;
        r = gemm_plan_describe(g, p, err);
        if (r < 0)
                goto fail;

        LT_GOTO(cublasLtMatmulPreferenceCreate(&pref), "GEMM preference");
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                "GEMM workspace preference");
        for (size_t i = 0; i < sizeof(align) / sizeof(align[0]); i++)
                LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, align[i].attr, align[i].bytes,
                                                             sizeof(*align[i].bytes)),
                        align[i].what);

        /* NOT_SUPPORTED from the heuristic means "no algorithm" (-ENOTSUP,
         * which the engine takes as "try the D-typed bias"). */
        c->st.heuristic_calls++;
        hs = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->lw, p->la, p->ld, p->ld, pref, CUDA_GEMM_ALGOS, heur, &found);
        if (hs == CUBLAS_STATUS_NOT_SUPPORTED)
                found = 0;
        else
                LT_GOTO(hs, "GEMM heuristic");

        /* The first candidate cublasLtMatmul accepts is the plan. A refusal
         * is a status (an argument or configuration cuBLASLt rejects for this
         * algorithm), never a device fault, so the next one may be tried; a
         * fault would be sticky and show at the stream's next sync. */
        for (int i = 0; i < found && i < CUDA_GEMM_ALGOS; i++) {
                if (heur[i].state != CUBLAS_STATUS_SUCCESS || heur[i].workspaceSize > workspace_bytes)
                        continue;
                tried++;
                ms = cublasLtMatmul(lt, p->op, &alpha, g->w, p->lw, g->a, p->la, &beta, g->c ? g->c : g->d, p->ld,
                                    g->d, p->ld, &heur[i].algo, workspace, workspace_bytes, s);
                if (ms == CUBLAS_STATUS_SUCCESS) {
                        p->algo = heur[i].algo;
                        p->workspace_bytes = heur[i].workspaceSize;
                        if (tried > 1)
                                c->st.algo_fallbacks++;
                        goto fail;      /* r == 0: done */
                }
                /* A refused launch may leave its configuration error as the
                 * thread's last error; it is not the next candidate's. */
                (void)cudaGetLastError();
        }
        if (tried == 0) {
                r = gemm_no_algorithm(g, k, "offers no algorithm", err);
        } else {
                snprintf(why, sizeof(why), "refused all %d algorithms it offered (the last with %s)", tried,
                         cublasLtGetStatusName(ms));
                r = gemm_no_algorithm(g, k, why, err);
        }
fail:
        if (pref)
                cublasLtMatmulPreferenceDestroy(pref);
        if (r < 0)
                gemm_plan_destroy(p);
        return r;
}

int cuda_gemm_run(cuda_gemm_cache_t *c, cublasLtHandle_t lt, cudaStream_t s, int key, const cuda_gemm_t *g,
                  void *workspace, size_t workspace_bytes, errbuf_t *err) {
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        gemm_plan_t tmp, *p = NULL;
        gemm_key_t k;
        float alpha = 1.0f, beta;
        cublasStatus_t ms;
        int r;

        assert(c && lt && g && g->a && g->w && g->d);
        assert(g->m >= 1 && g->n >= 1 && g->k >= 1 && g->lda >= g->k);
        assert(g->d != g->a && g->d != g->w && (!g->c || g->c != g->d));

        gemm_key_of(key, g, &k);
        for (int i = 0; i < c->n; i++)
                if (gemm_key_serves(&c->plans[i].key, &k)) {
                        p = &c->plans[i];
                        break;
                }
        if (p) {
                /* The captured path: the plan's descriptors and algorithm,
                 * nothing else. */
                beta = g->c ? 1.0f : 0.0f;
                ms = cublasLtMatmul(lt, p->op, &alpha, g->w, p->lw, g->a, p->la, &beta, g->c ? g->c : g->d, p->ld,
                                    g->d, p->ld, &p->algo, workspace, workspace_bytes, s);
                if (ms != CUBLAS_STATUS_SUCCESS)
                        return errbuf_set(err, -EIO, "GEMM: cuBLASLt: %s (%s)", cublasLtGetStatusString(ms),
                                          cublasLtGetStatusName(ms));
                return 0;
        }

        CUDA_RETURN(cudaStreamIsCapturing(s, &cap), "asking whether the GEMM's stream is capturing");
        if (cap != cudaStreamCaptureStatusNone)
                return errbuf_set(err, -EBUSY,
                                  "a %s GEMM of m=%lld n=%lld k=%lld has no plan from the warm-up, and the heuristic "
                                  "is not asked inside a graph capture",
                                  precision_name(g->ab), (long long)g->m, (long long)g->n, (long long)g->k);

        /* Full (single steps of many sizes): plan, run and drop. */
        p = c->n < c->capacity ? &c->plans[c->n] : &tmp;
        r = gemm_plan_make_and_run(c, lt, s, g, &k, workspace, workspace_bytes, p, err);
        if (r < 0)
                return r;
        if (p == &tmp) {
                c->st.uncached++;
                gemm_plan_destroy(&tmp);
        } else {
                c->n++;
        }
        return 0;
}

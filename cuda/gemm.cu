/* gemm: cuda_gemm_run, the cuBLASLt call behind every conv and the FC.
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
 * No state is kept: descriptors are made and destroyed per call (host work
 * only, done at graph capture), and nothing is allocated on the device. */
#include <assert.h>

#include "cuda_check.h"
#include "cuda_gemm.h"

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

int cuda_gemm_run(cublasLtHandle_t lt, cudaStream_t s, const cuda_gemm_t *g, void *workspace,
                  size_t workspace_bytes, errbuf_t *err) {
        cublasLtMatmulDesc_t op = NULL;
        cublasLtMatrixLayout_t lw = NULL, la = NULL, ld = NULL;
        cublasLtMatmulPreference_t pref = NULL;
        cublasLtMatmulHeuristicResult_t heur;
        cublasOperation_t trans_w = CUBLAS_OP_T, trans_a = CUBLAS_OP_N;
        cublasLtEpilogue_t epi;
        cudaDataType_t t_ab, t_d;
        uint64_t ws = workspace_bytes;
        uint32_t al_a, al_w, al_c, al_d;
        float alpha = 1.0f, beta;
        cublasStatus_t hs;
        int found = 0, r = 0;

        assert(lt && g && g->a && g->w && g->d);
        assert(g->m >= 1 && g->n >= 1 && g->k >= 1 && g->lda >= g->k);
        assert(g->d != g->a && g->d != g->w && (!g->c || g->c != g->d));

        t_ab = gemm_type(g->ab);
        t_d = g->d_fp32 ? CUDA_R_32F : t_ab;
        beta = g->c ? 1.0f : 0.0f;
        if (g->bias)
                epi = g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        else
                epi = g->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;

        LT_GOTO(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "GEMM descriptor");
        LT_GOTO(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w)),
                "GEMM transpose A");
        LT_GOTO(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_a, sizeof(trans_a)),
                "GEMM transpose B");
        LT_GOTO(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                "GEMM epilogue");
        if (g->bias) {
                /* The bias is of D's type (cuBLASLt's default for these types). */
                LT_GOTO(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                       sizeof(g->bias)),
                        "GEMM bias pointer");
        }

        LT_GOTO(cublasLtMatrixLayoutCreate(&lw, t_ab, (uint64_t)g->k, (uint64_t)g->n, g->k), "GEMM layout of W");
        LT_GOTO(cublasLtMatrixLayoutCreate(&la, t_ab, (uint64_t)g->k, (uint64_t)g->m, g->lda),
                "GEMM layout of A");
        LT_GOTO(cublasLtMatrixLayoutCreate(&ld, t_d, (uint64_t)g->n, (uint64_t)g->m, g->n), "GEMM layout of D");

        al_a = gemm_alignment(g->a);
        al_w = gemm_alignment(g->w);
        al_d = gemm_alignment(g->d);
        al_c = g->c ? gemm_alignment(g->c) : al_d;
        LT_GOTO(cublasLtMatmulPreferenceCreate(&pref), "GEMM preference");
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                "GEMM workspace preference");
        /* cuBLASLt's A is our W, its B our A. */
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w,
                                                     sizeof(al_w)),
                "GEMM alignment of W");
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_a,
                                                     sizeof(al_a)),
                "GEMM alignment of A");
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                                     sizeof(al_c)),
                "GEMM alignment of C");
        LT_GOTO(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                     sizeof(al_d)),
                "GEMM alignment of D");

        /* NOT_SUPPORTED from the heuristic and a result whose state is not
         * SUCCESS both mean "no algorithm": report the shape (-ENOTSUP). */
        hs = cublasLtMatmulAlgoGetHeuristic(lt, op, lw, la, ld, ld, pref, 1, &heur, &found);
        if (hs == CUBLAS_STATUS_NOT_SUPPORTED ||
            (hs == CUBLAS_STATUS_SUCCESS && found >= 1 && heur.state != CUBLAS_STATUS_SUCCESS))
                found = 0;
        else
                LT_GOTO(hs, "GEMM heuristic");
        if (found < 1) {
                r = errbuf_set(err, -ENOTSUP,
                               "cuBLASLt offers no algorithm for a %s GEMM of m=%lld n=%lld k=%lld (lda %lld)",
                               precision_name(g->ab), (long long)g->m, (long long)g->n, (long long)g->k,
                               (long long)g->lda);
                goto fail;
        }
        assert(heur.workspaceSize <= workspace_bytes);

        LT_GOTO(cublasLtMatmul(lt, op, &alpha, g->w, lw, g->a, la, &beta, g->c ? g->c : g->d, ld, g->d, ld,
                               &heur.algo, workspace, workspace_bytes, s),
                "GEMM");
fail:
        if (pref)
                cublasLtMatmulPreferenceDestroy(pref);
        if (ld)
                cublasLtMatrixLayoutDestroy(ld);
        if (la)
                cublasLtMatrixLayoutDestroy(la);
        if (lw)
                cublasLtMatrixLayoutDestroy(lw);
        if (op)
                cublasLtMatmulDescDestroy(op);
        return r;
}

/* A stand-in for cuBLASLt's header, for tests/cuda_host/check_gemm.cc only.
 *
 * It declares the part of the cuBLASLt API that cuda/gemm.cu uses, with the
 * signatures of NVIDIA's cuBLASLt reference (cublasLtMatmulAlgoGetHeuristic,
 * cublasLtMatmul, the descriptor and preference calls, the attribute and
 * epilogue names), so that gemm.cu compiles against it on a machine without
 * cuBLASLt, and check_gemm.cc implements the functions as recorders. The
 * enumerators' values are this file's own: only their names matter here. It
 * is never used to build the engine: the Makefile builds cuda/ only against
 * the real cublasLt.h. */
#ifndef INFERD_MOCK_CUBLASLT_H
#define INFERD_MOCK_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <library_types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
        CUBLAS_STATUS_SUCCESS = 0,
        CUBLAS_STATUS_NOT_INITIALIZED = 1,
        CUBLAS_STATUS_ALLOC_FAILED = 3,
        CUBLAS_STATUS_INVALID_VALUE = 7,
        CUBLAS_STATUS_ARCH_MISMATCH = 8,
        CUBLAS_STATUS_EXECUTION_FAILED = 13,
        CUBLAS_STATUS_INTERNAL_ERROR = 14,
        CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;

typedef enum {
        CUBLASLT_EPILOGUE_DEFAULT = 1,
        CUBLASLT_EPILOGUE_RELU = 2,
        CUBLASLT_EPILOGUE_BIAS = 4,
        CUBLASLT_EPILOGUE_RELU_BIAS = 6,
} cublasLtEpilogue_t;

typedef enum {
        CUBLASLT_MATMUL_DESC_TRANSA = 3,
        CUBLASLT_MATMUL_DESC_TRANSB = 4,
        CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
        CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
        CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;

typedef enum {
        CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;

typedef struct {
        uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
        cublasLtMatmulAlgo_t algo;
        size_t workspaceSize;
        cublasStatus_t state;
        float wavesCount;
        int reserved[4];
} cublasLtMatmulHeuristicResult_t;

const char *cublasLtGetStatusName(cublasStatus_t status);
const char *cublasLtGetStatusString(cublasStatus_t status);
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

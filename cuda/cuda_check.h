/* cuda_check: turning CUDA and cuBLASLt failures into -EIO with a sentence.
 *
 * Every CUDA runtime and cuBLASLt call in cuda/ goes through one of these,
 * so a failure carries the API's own message up to the daemon, which logs
 * it once. They assume an `errbuf_t *err` in scope; the _GOTO forms also an
 * `int r` and a `fail:` label (declare every variable before the first
 * jump: this is C++, which refuses to jump over an initialisation).
 * Not a logging facility, and never used for programming errors (assert). */
#ifndef INFERD_CUDA_CHECK_H
#define INFERD_CUDA_CHECK_H

#include <errno.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/errbuf.h"
}

#define CUDA_RETURN(call, what)                                                                         \
        do {                                                                                            \
                cudaError_t c_ = (call);                                                                \
                if (c_ != cudaSuccess)                                                                  \
                        return errbuf_set(err, -EIO, "%s: %s (%s)", (what), cudaGetErrorString(c_),     \
                                          cudaGetErrorName(c_));                                        \
        } while (0)

#define CUDA_GOTO(call, what)                                                                           \
        do {                                                                                            \
                cudaError_t c_ = (call);                                                                \
                if (c_ != cudaSuccess) {                                                                \
                        r = errbuf_set(err, -EIO, "%s: %s (%s)", (what), cudaGetErrorString(c_),        \
                                       cudaGetErrorName(c_));                                           \
                        goto fail;                                                                      \
                }                                                                                       \
        } while (0)

#define LT_GOTO(call, what)                                                                             \
        do {                                                                                            \
                cublasStatus_t s_ = (call);                                                             \
                if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
                        r = errbuf_set(err, -EIO, "%s: cuBLASLt: %s (%s)", (what),                      \
                                       cublasLtGetStatusString(s_), cublasLtGetStatusName(s_));         \
                        goto fail;                                                                      \
                }                                                                                       \
        } while (0)

/* After a kernel launch: the launch configuration error, if any. */
#define CUDA_LAUNCH_RETURN(what) CUDA_RETURN(cudaGetLastError(), (what))

#endif

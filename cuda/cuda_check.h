/* cuda_check: turning CUDA failures into -EIO with a sentence.
 *
 * Every CUDA runtime call in cuda/ goes through one of these (cuBLASLt's
 * LT_GOTO is in cuda_gemm.h, so that the kernel-only files, which
 * tests/cuda_host compiles on machines without cuBLASLt, do not need it),
 * so a failure carries the API's own message up to the daemon, which logs
 * it once. They assume an `errbuf_t *err` in scope; the _GOTO forms also an
 * `int r` and a `fail:` label (declare every variable before the first
 * jump: this is C++, which refuses to jump over an initialisation).
 * Not a logging facility, and never used for programming errors (assert). */
#ifndef INFERD_CUDA_CHECK_H
#define INFERD_CUDA_CHECK_H

#include <errno.h>

#include <cuda_runtime.h>

extern "C" {
#include "core/errbuf.h"
}

/* The sentence of every failure here: "what: [library: ]message (name)". */
#define CUDA_EIO_(what, lib, msg, name) errbuf_set(err, -EIO, "%s: %s%s (%s)", (what), (lib), (msg), (name))

#define CUDA_RETURN(call, what)                                                                         \
        do {                                                                                            \
                cudaError_t c_ = (call);                                                                \
                if (c_ != cudaSuccess)                                                                  \
                        return CUDA_EIO_((what), "", cudaGetErrorString(c_), cudaGetErrorName(c_));     \
        } while (0)

#define CUDA_GOTO(call, what)                                                                           \
        do {                                                                                            \
                cudaError_t c_ = (call);                                                                \
                if (c_ != cudaSuccess) {                                                                \
                        r = CUDA_EIO_((what), "", cudaGetErrorString(c_), cudaGetErrorName(c_));        \
                        goto fail;                                                                      \
                }                                                                                       \
        } while (0)

/* After a kernel launch: the launch configuration error, if any. */
#define CUDA_LAUNCH_RETURN(what) CUDA_RETURN(cudaGetLastError(), (what))

/* The errors after which the context is unusable: every later CUDA call in
 * the process returns the same error ("sticky"), so nothing after it can be
 * trusted or even run. The rest (a bad launch configuration, an
 * out-of-memory, a not-ready query) leave the context usable. */
static inline int cuda_error_is_sticky(cudaError_t c) {
        switch (c) {
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
        case cudaErrorLaunchTimeout:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorAssert:
        case cudaErrorECCUncorrectable:
        case cudaErrorContextIsDestroyed:
                return 1;
        default:
                return 0;
        }
}

#endif

/* cuda_types: the three storage types of activations and weights, their
 * conversion to and from fp32, for kernels templated on the storage type,
 * and the one switch from a precision to its storage type (for the
 * launchers and the host conversion). Host and device: the kernels'
 * per-element bodies are __host__ __device__ so that their index arithmetic
 * can be checked on a machine without a GPU.
 *
 * Every kernel computes in fp32 and only stores in T (fp32, fp16 or bf16,
 * the plan's precision). Nothing else lives here. */
#ifndef INFERD_CUDA_TYPES_CUH
#define INFERD_CUDA_TYPES_CUH

#include <assert.h>
#include <errno.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/errbuf.h"
#include "core/plan.h"
}

__host__ __device__ __forceinline__ float cuda_to_f32(float x) {
        return x;
}
__host__ __device__ __forceinline__ float cuda_to_f32(__half x) {
        return __half2float(x);
}
__host__ __device__ __forceinline__ float cuda_to_f32(__nv_bfloat16 x) {
        return __bfloat162float(x);
}

template <typename T> __host__ __device__ __forceinline__ T cuda_from_f32(float x);
template <> __host__ __device__ __forceinline__ float cuda_from_f32<float>(float x) {
        return x;
}
template <> __host__ __device__ __forceinline__ __half cuda_from_f32<__half>(float x) {
        return __float2half_rn(x);
}
template <> __host__ __device__ __forceinline__ __nv_bfloat16 cuda_from_f32<__nv_bfloat16>(float x) {
        return __float2bfloat16_rn(x);
}

/* Grid-stride launches: enough blocks to fill any current GPU several times
 * over, never more than the work needs.
 *
 * cuda_debug_max_blocks (0 = off) lowers the cap for the GPU tests, so that
 * a layer test at a small batch also runs each kernel's grid-stride loop
 * past its first pass (engine_cuda_debug_set). It is process-wide and read
 * at launch time: a graph keeps the grid it was captured with. The engine
 * never sets it on its own. */
#define CUDA_THREADS 256
#define CUDA_MAX_BLOCKS (65536LL * 8)
inline unsigned cuda_debug_max_blocks = 0;
static inline unsigned cuda_blocks_for(long long total) {
        long long b = (total + CUDA_THREADS - 1) / CUDA_THREADS;
        long long cap = cuda_debug_max_blocks ? (long long)cuda_debug_max_blocks : CUDA_MAX_BLOCKS;

        if (b > cap)
                b = cap;
        return b < 1 ? 1u : (unsigned)b;
}

/* The storage type of a precision as a value: cuda_storage<T>::type is T. */
template <typename T> struct cuda_storage {
        typedef T type;
};

/* The one precision switch: calls f(cuda_storage<T>()) once, with T the
 * storage type of p (float, __half or __nv_bfloat16), so that the caller
 * writes its templated code once, in a generic lambda:
 *
 *   cuda_storage_dispatch(p, [&](auto st) {
 *           typedef typename decltype(st)::type T;
 *           ...
 *   });
 *
 * Returns 0, or -EINVAL without calling f when p has no storage type
 * (PRECISION_AUTO, or not a precision_t at all). Host code. */
template <typename F> static inline int cuda_storage_dispatch(precision_t p, F &&f) {
        switch (p) {
        case PRECISION_FP32:
                f(cuda_storage<float>());
                return 0;
        case PRECISION_FP16:
                f(cuda_storage<__half>());
                return 0;
        case PRECISION_BF16:
                f(cuda_storage<__nv_bfloat16>());
                return 0;
        default:
                return -EINVAL;
        }
}

/* A launcher's templated launch in the precision p: launch(cuda_storage<T>())
 * enqueues the kernel for T, then the launch is checked. Returns 0; -EINVAL
 * ("<what>: unsupported precision", a programming error: asserted too) for
 * a p without a storage type; -EIO ("<what> kernel launch: CUDA's message")
 * when the launch failed. */
template <typename F> static inline int cuda_launch_typed(precision_t p, const char *what, errbuf_t *err, F &&launch) {
        cudaError_t c;

        if (cuda_storage_dispatch(p, launch) < 0) {
                assert(!"bad precision");
                return errbuf_set(err, -EINVAL, "%s: unsupported precision", what);
        }
        c = cudaGetLastError();
        if (c != cudaSuccess)
                return errbuf_set(err, -EIO, "%s kernel launch: %s (%s)", what, cudaGetErrorString(c),
                                  cudaGetErrorName(c));
        return 0;
}

#endif

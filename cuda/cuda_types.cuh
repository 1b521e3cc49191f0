/* cuda_types: the three storage types of activations and weights, and their
 * conversion to and from fp32, for kernels templated on the storage type.
 * Host and device: the kernels' per-element bodies are __host__ __device__
 * so that their index arithmetic can be checked on a machine without a GPU.
 *
 * Every kernel computes in fp32 and only stores in T (fp32, fp16 or bf16,
 * the plan's precision). Nothing else lives here. */
#ifndef INFERD_CUDA_TYPES_CUH
#define INFERD_CUDA_TYPES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

#endif

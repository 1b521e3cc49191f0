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
 * over, never more than the work needs. */
#define CUDA_THREADS 256
static inline unsigned cuda_blocks_for(long long total) {
        long long b = (total + CUDA_THREADS - 1) / CUDA_THREADS;
        if (b > 65536LL * 8)
                b = 65536LL * 8;
        return b < 1 ? 1u : (unsigned)b;
}

#endif

/* residual: the add-and-ReLU that ends a bottleneck block, as a kernel.
 *
 *   d    (m, n) in the precision: the conv's output with its bias (the GEMM's
 *        BIAS epilogue, no ReLU, no C)
 *   res  (m, n) in the precision: the block's shortcut
 *   d <- relu(d + res), computed in fp32 and stored once
 *
 * This is the fallback of the fused path, where cuBLASLt adds the residual
 * through C with beta = 1 inside a RELU_BIAS epilogue: cuBLASLt's header
 * does not say whether C is added before or after the ReLU. The engine uses
 * this kernel when INFERD_CUDA_RESIDUAL=kernel, and the GPU tests run every
 * residual conv both ways (engine_cuda_debug_set). Not used otherwise. */
#include <assert.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

/* Element i: relu(d + res), rounded once to T. */
template <typename T> __host__ __device__ __forceinline__ T add_relu_elem(const T *d, const T *res, long long i) {
        float v = cuda_to_f32(d[i]) + cuda_to_f32(res[i]);

        return cuda_from_f32<T>(v > 0.0f ? v : 0.0f);
}

template <typename T> __global__ void add_relu_kernel(T *d, const T *res, long long total) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
             i += (long long)gridDim.x * blockDim.x)
                d[i] = add_relu_elem(d, res, i);
}

int cuda_add_relu(cudaStream_t s, precision_t p, void *d, const void *res, long long elems, errbuf_t *err) {
        unsigned blocks;

        assert(d && res && d != res && elems >= 1);
        blocks = cuda_blocks_for(elems);
        return cuda_launch_typed(p, "add-ReLU", err, [&](auto st) {
                typedef typename decltype(st)::type T;

                add_relu_kernel<T><<<blocks, CUDA_THREADS, 0, s>>>((T *)d, (const T *)res, elems);
        });
}

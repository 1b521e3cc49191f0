/* pool: the two pooling layers of ResNet-50, NHWC, in the precision.
 *
 *   maxpool  in (n, h, w, c) -> out (n, ho, wo, c), k x k windows at stride,
 *            padded by pad; padding never wins (it is skipped, not -inf or
 *            0, exactly like the CPU reference and torch). ResNet-50 uses
 *            it once: (n, 112, 112, 64) -> (n, 56, 56, 64), k 3, s 2, p 1.
 *   avgpool  in (n, h, w, c) -> out (n, c), the mean over h * w in fp32.
 *            ResNet-50: (n, 7, 7, 2048) -> (n, 2048); resnet18/34: 512.
 *            With features (not NULL), each fp32 mean also goes there,
 *            (n, c) fp32 before its rounding to the precision: the
 *            record's embedding (the slot's embedding region), at no
 *            second pass over the activations.
 *
 * Both are memory-bound one-thread-per-output kernels with channel-fastest
 * indexing, so neighbouring threads touch neighbouring channels (coalesced).
 * Not fused into the neighbouring convolutions. */
#include <assert.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

/* Output element i of max pooling, i = ((b * ho + oy) * wo + ox) * c + ch. */
template <typename T>
__host__ __device__ __forceinline__ T maxpool_elem(const T *in, long long i, int h, int w, int c, int k, int stride,
                                                   int pad, int ho, int wo) {
        int ch = (int)(i % c);
        long long t = i / c;
        int ox = (int)(t % wo);
        t /= wo;
        int oy = (int)(t % ho);
        long long b = t / ho;
        float m = -INFINITY;

        for (int ky = 0; ky < k; ky++) {
                int iy = oy * stride - pad + ky;
                if (iy < 0 || iy >= h)
                        continue;
                for (int kx = 0; kx < k; kx++) {
                        int ix = ox * stride - pad + kx;
                        if (ix < 0 || ix >= w)
                                continue;
                        m = fmaxf(m, cuda_to_f32(in[((b * h + iy) * w + ix) * c + ch]));
                }
        }
        return cuda_from_f32<T>(m);
}

/* Output element i = b * c + ch of the global average pool, in fp32. */
template <typename T> __host__ __device__ __forceinline__ float avgpool_mean(const T *in, long long i, int hw, int c) {
        int ch = (int)(i % c);
        long long b = i / c;
        const T *p = in + b * hw * c + ch;
        float sum = 0.0f;

        for (int j = 0; j < hw; j++)
                sum += cuda_to_f32(p[(long long)j * c]);
        return sum / (float)hw;
}

/* The same in the storage type. */
template <typename T>
__host__ __device__ __forceinline__ T avgpool_elem(const T *in, long long i, int hw, int c) {
        return cuda_from_f32<T>(avgpool_mean(in, i, hw, c));
}

template <typename T>
__global__ void maxpool_kernel(const T *in, int n, int h, int w, int c, int k, int stride, int pad, int ho, int wo,
                               T *out) {
        long long total = (long long)n * ho * wo * c;

        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
             i += (long long)gridDim.x * blockDim.x)
                out[i] = maxpool_elem(in, i, h, w, c, k, stride, pad, ho, wo);
}

template <typename T> __global__ void avgpool_kernel(const T *in, int n, int hw, int c, T *out, float *features) {
        long long total = (long long)n * c;

        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
             i += (long long)gridDim.x * blockDim.x) {
                float v = avgpool_mean(in, i, hw, c);

                out[i] = cuda_from_f32<T>(v);
                if (features)
                        features[i] = v;
        }
}

int cuda_maxpool(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int c, int k, int stride,
                 int pad, int ho, int wo, void *out, errbuf_t *err) {
        unsigned blocks;

        assert(in && out && n >= 1 && c >= 1 && k >= 1 && stride >= 1 && pad >= 0);
        assert(ho == (h + 2 * pad - k) / stride + 1 && wo == (w + 2 * pad - k) / stride + 1);
        /* Every window holds at least one real pixel, or -inf would leak out. */
        assert(pad < k);
        blocks = cuda_blocks_for((long long)n * ho * wo * c);
        return cuda_launch_typed(p, "maxpool", err, [&](auto st) {
                typedef typename decltype(st)::type T;

                maxpool_kernel<T><<<blocks, CUDA_THREADS, 0, s>>>((const T *)in, n, h, w, c, k, stride, pad, ho, wo,
                                                                   (T *)out);
        });
}

int cuda_avgpool(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int c, void *out,
                 float *features, errbuf_t *err) {
        unsigned blocks;

        assert(in && out && n >= 1 && h >= 1 && w >= 1 && c >= 1);
        blocks = cuda_blocks_for((long long)n * c);
        return cuda_launch_typed(p, "avgpool", err, [&](auto st) {
                typedef typename decltype(st)::type T;

                avgpool_kernel<T><<<blocks, CUDA_THREADS, 0, s>>>((const T *)in, n, h * w, c, (T *)out, features);
        });
}

#ifndef INFERD_CUDA_ARCH_LIST
#define INFERD_CUDA_ARCH_LIST "(not recorded)"
#endif

/* Asked at open, before anything runs: a build without code for this GPU
 * (an sm_80/sm_90 build on an older GPU, or a driver too old for the PTX)
 * otherwise passes the probe and fails at its first kernel. Any kernel of
 * this build answers for all of them: they are compiled for the same
 * architectures (the Makefile's CUDA_ARCH, SASS each, PTX for the newest). */
int cuda_kernels_loadable(int cc_major, int cc_minor, errbuf_t *err) {
        cudaFuncAttributes fa;
        cudaError_t c = cudaFuncGetAttributes(&fa, maxpool_kernel<float>);

        if (c == cudaSuccess)
                return 0;
        (void)cudaGetLastError();
        if (c == cudaErrorNoKernelImageForDevice || c == cudaErrorInvalidDeviceFunction ||
            c == cudaErrorUnsupportedPtxVersion || c == cudaErrorInvalidPtx)
                return errbuf_set(err, -ENOTSUP,
                                  "this build has no GPU code that runs on compute capability %d.%d (built with "
                                  "CUDA_ARCH=\"%s\", PTX for the newest): %s (%s); rebuild with CUDA_ARCH=%d%d",
                                  cc_major, cc_minor, INFERD_CUDA_ARCH_LIST, cudaGetErrorString(c),
                                  cudaGetErrorName(c), cc_major, cc_minor);
        return errbuf_set(err, -EIO, "loading the engine's kernels: %s (%s)", cudaGetErrorString(c),
                          cudaGetErrorName(c));
}

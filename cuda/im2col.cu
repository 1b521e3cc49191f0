/* im2col: the gather that turns a convolution into one GEMM.
 *
 *   in   (n, h, w, cin) NHWC, in the precision
 *   col  (n * ho * wo, k_pad) row-major, in the precision; row
 *        (b * ho + oy) * wo + ox, column (ky * kw + kx) * cin + ci, which is
 *        the order of the folded weights (cout, kh, kw, cin), so that
 *        out (n * ho * wo, cout) = col . W^T (cuda_gemm); columns
 *        kh * kw * cin .. k_pad - 1 are zero (k_pad rounds K up to a multiple
 *        of 8 elements so that every row starts 16-byte aligned; only conv1,
 *        K = 147 -> 152, has such columns)
 *
 * Zero where the window leaves the image and in the pad columns (all-zero
 * bits are +0.0 in fp32, fp16 and bf16 alike). The kernel only moves bits, so it is templated on a
 * machine word rather than on the element type: a run of cin channels is
 * copied 16, 8, 4 or 2 bytes at a time, the widest word that divides
 * cin * element bytes and the row (16 for every ResNet-50 conv but conv1,
 * whose cin = 3).
 * It is used for the 7x7, the 3x3 and the strided 1x1 (downsample)
 * convolutions; a 1x1 stride-1 conv needs no gather. Not an implicit GEMM:
 * the columns are materialised in the workspace the plan counts. */
#include <assert.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

/* Word i of col, i = row * rw + k: cw words per input pixel, rw words per
 * col row (>= kh * kw * cw, the rest being the zero pad columns). */
template <typename W>
__host__ __device__ __forceinline__ W im2col_word(const W *in, long long i, int h, int w, int cw, int kh, int kw,
                                                  int stride, int pad, int ho, int wo, int rw) {
        long long row = i / rw;
        int k = (int)(i - row * rw);
        if (k >= kh * kw * cw)
                return W();
        int ci = k % cw;
        int kk = k / cw;                                /* ky * kw + kx */
        int kx = kk % kw;
        int ky = kk / kw;
        int ox = (int)(row % wo);
        long long t = row / wo;
        int oy = (int)(t % ho);
        long long b = t / ho;
        int iy = oy * stride - pad + ky;
        int ix = ox * stride - pad + kx;

        if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                return W();
        return in[((b * h + iy) * w + ix) * cw + ci];
}

/* One thread per output word; consecutive threads write consecutive words
 * of a row and read consecutive words of one input pixel. */
template <typename W>
__global__ void im2col_kernel(const W *in, W *col, int n, int h, int w, int cw, int kh, int kw, int stride, int pad,
                              int ho, int wo, int rw) {
        long long total = (long long)n * ho * wo * rw;

        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
             i += (long long)gridDim.x * blockDim.x)
                col[i] = im2col_word(in, i, h, w, cw, kh, kw, stride, pad, ho, wo, rw);
}

template <typename W>
static void im2col_launch(cudaStream_t s, const void *in, int n, int h, int w, int cin_bytes, int kh, int kw,
                          int stride, int pad, int ho, int wo, int row_bytes, void *col) {
        int cw = cin_bytes / (int)sizeof(W), rw = row_bytes / (int)sizeof(W);
        unsigned blocks;

        assert(cin_bytes % (int)sizeof(W) == 0 && row_bytes % (int)sizeof(W) == 0);
        assert((uintptr_t)in % sizeof(W) == 0 && (uintptr_t)col % sizeof(W) == 0);
        assert(rw >= kh * kw * cw);
        blocks = cuda_blocks_for((long long)n * ho * wo * rw);
        im2col_kernel<W><<<blocks, CUDA_THREADS, 0, s>>>((const W *)in, (W *)col, n, h, w, cw, kh, kw, stride, pad,
                                                          ho, wo, rw);
}

int cuda_im2col(cudaStream_t s, precision_t p, const void *in, int n, int h, int w, int cin, int kh, int kw,
                int stride, int pad, int ho, int wo, int k_pad, void *col, errbuf_t *err) {
        int pb = (int)precision_bytes(p);
        int cin_bytes = cin * pb, row_bytes = k_pad * pb;
        /* The word must divide a pixel's channels, a col row and both pointers. */
        uintptr_t sizes = (uintptr_t)in | (uintptr_t)col | (uintptr_t)cin_bytes | (uintptr_t)row_bytes;

        assert(in && col && n >= 1 && h >= 1 && w >= 1 && cin >= 1 && kh >= 1 && kw >= 1 && stride >= 1);
        assert(pad >= 0 && ho == (h + 2 * pad - kh) / stride + 1 && wo == (w + 2 * pad - kw) / stride + 1);
        assert(k_pad >= kh * kw * cin);
        if (sizes % 16 == 0)
                im2col_launch<uint4>(s, in, n, h, w, cin_bytes, kh, kw, stride, pad, ho, wo, row_bytes, col);
        else if (sizes % 8 == 0)
                im2col_launch<uint2>(s, in, n, h, w, cin_bytes, kh, kw, stride, pad, ho, wo, row_bytes, col);
        else if (sizes % 4 == 0)
                im2col_launch<uint32_t>(s, in, n, h, w, cin_bytes, kh, kw, stride, pad, ho, wo, row_bytes, col);
        else
                im2col_launch<uint16_t>(s, in, n, h, w, cin_bytes, kh, kw, stride, pad, ho, wo, row_bytes, col);
        CUDA_LAUNCH_RETURN("im2col kernel launch");
        return 0;
}

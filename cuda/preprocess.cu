/* preprocess: raw input records to the network's NHWC input, on the GPU.
 *
 *   records  the slot's device staging: n records packed by format
 *            (engine/pack.h), record b at offsets[b]: 150,528 bytes for
 *            rgb8, 602,112 for float32
 *   formats  (n) int32 record_format_t
 *   offsets  (n) int64 byte offsets into records (any, e.g. 0, for a
 *            padding row: it is not read)
 *   out      (n, 224, 224, 3) in the precision, NHWC
 *
 * rgb8 records are (224, 224, 3) uint8 HWC and become (x / 255 - mean) / std
 * with torchvision's constants (cpu_imagenet_mean/std, the same numbers the
 * CPU reference uses, computed in the same order so fp32 agrees bit for
 * bit). float32 CHW records (3, 224, 224), already normalised, are
 * transposed. Any other format, which is how submit marks the padding rows
 * of a bucket, gives zeros, so stale bytes can never become NaN. It does not
 * decode JPEG/PNG, resize or crop. */
#include <assert.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

extern "C" {
#include "engine/cpu_ops.h"
#include "core/record.h"
}

#define PIXELS (MODEL_IN_H * MODEL_IN_W)                /* 50,176 */
#define SAMPLE_ELEMS (PIXELS * MODEL_IN_C)              /* 150,528 */

struct norm {
        float mean[3];
        float std[3];
};

/* Output element i = b * 150,528 + (y * 224 + x) * 3 + c. */
template <typename T>
__host__ __device__ __forceinline__ T preprocess_elem(const uint8_t *records, const int32_t *formats,
                                                      const int64_t *offsets, const struct norm &nm, long long i) {
        int b = (int)(i / SAMPLE_ELEMS);
        int r = (int)(i - (long long)b * SAMPLE_ELEMS);         /* (y * 224 + x) * 3 + c */
        int c = r % 3;
        int px = r / 3;                                         /* y * 224 + x */
        const uint8_t *rec;
        float v = 0.0f;

        switch (formats[b]) {
        case RECORD_RGB8:
                rec = records + offsets[b];
                v = ((float)rec[r] / 255.0f - nm.mean[c]) / nm.std[c];
                break;
        case RECORD_F32_CHW:
                rec = records + offsets[b];
                v = ((const float *)rec)[(size_t)c * PIXELS + px];
                break;
        default:
                break;
        }
        return cuda_from_f32<T>(v);
}

/* One thread per output element (sample, y, x, c), in output order, so the
 * stores and the rgb8 loads (the same HWC order) are coalesced; the CHW
 * loads are coalesced per channel plane. */
template <typename T>
__global__ void preprocess_kernel(const uint8_t *records, const int32_t *formats, const int64_t *offsets, int n,
                                  struct norm nm, T *out) {
        long long total = (long long)n * SAMPLE_ELEMS;

        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
             i += (long long)gridDim.x * blockDim.x)
                out[i] = preprocess_elem<T>(records, formats, offsets, nm, i);
}

int cuda_preprocess(cudaStream_t s, precision_t p, const uint8_t *records, const int32_t *formats,
                    const int64_t *offsets, int n, void *out, errbuf_t *err) {
        struct norm nm;
        unsigned blocks;

        assert(records && formats && offsets && out && n >= 1);
        /* The float32 view of a record needs 4-byte aligned records: the
         * packing places every record at a multiple of 256 bytes. */
        static_assert(RECORD_RGB8_BYTES % 4 == 0 && RECORD_F32_CHW_BYTES % 4 == 0,
                      "packed records must stay 4-byte aligned");
        assert(((uintptr_t)records & 3) == 0);
        for (int c = 0; c < 3; c++) {
                nm.mean[c] = cpu_imagenet_mean[c];
                nm.std[c] = cpu_imagenet_std[c];
        }
        blocks = cuda_blocks_for((long long)n * SAMPLE_ELEMS);
        return cuda_launch_typed(p, "preprocess", err, [&](auto st) {
                typedef typename decltype(st)::type T;

                preprocess_kernel<T><<<blocks, CUDA_THREADS, 0, s>>>(records, formats, offsets, n, nm, (T *)out);
        });
}

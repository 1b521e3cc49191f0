/* head: softmax and top-k of the logits, one block per sample.
 *
 *   logits  (n, 1000) fp32 (the FC writes fp32 in every precision)
 *   out     (n, top_k) engine_topk_t {cls, score}: the top_k classes by
 *           descending softmax probability, ties to the lower class index
 *
 * A block of 1024 threads holds one row in shared memory: a max and a sum
 * reduction give the probabilities expf(x - max) / sum (precise expf, fp32),
 * then a bitonic sort of the 1024 (probability, class) pairs, the 24 pad
 * entries ranking last, orders them; the first top_k are written. The sort
 * key is the probability rather than the logit so that probabilities that
 * round to the same value (the tail, where they underflow to 0) tie-break by
 * class as the contract and the CPU reference say. A row whose max or sum
 * is not finite (a NaN or infinite logit: fp16/bf16 overflow upstream) is
 * not ranked: its top_k entries become { ENGINE_TOPK_NONFINITE, NaN }, the
 * mark engine.h defines and cpu_head_row() computes on the CPU; the
 * decision is block-uniform (every thread holds the same max and sum), so
 * the whole block leaves before the sort's barriers. Everything lives in
 * shared memory (8.3 KiB), so the plan's head scratch is 0 bytes. Not CUB:
 * a 1024-element block sort is short enough to own. */
#include <assert.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

#define HEAD_THREADS 1024
#define HEAD_WARPS (HEAD_THREADS / 32)

static_assert(MODEL_CLASSES <= HEAD_THREADS, "one thread per class");

/* a ranks before b */
__host__ __device__ __forceinline__ bool head_before(float pa, int ia, float pb, int ib) {
        return pa > pb || (pa == pb && ia < ib);
}

/* A block-wide reduction (max or sum) through warp shuffles and one shared
 * word per warp; every thread gets the result. */
template <bool MAX> __device__ float head_reduce(float v, float *warp_buf) {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

        for (int o = 16; o > 0; o >>= 1) {
                float u = __shfl_xor_sync(0xffffffffu, v, o);
                v = MAX ? fmaxf(v, u) : v + u;
        }
        if (lane == 0)
                warp_buf[warp] = v;
        __syncthreads();
        v = lane < HEAD_WARPS ? warp_buf[lane] : (MAX ? -INFINITY : 0.0f);
        for (int o = 16; o > 0; o >>= 1) {
                float u = __shfl_xor_sync(0xffffffffu, v, o);
                v = MAX ? fmaxf(v, u) : v + u;
        }
        __syncthreads();        /* warp_buf is reused by the next reduction */
        return v;
}

/* Whether a row with this max and softmax sum gets a prediction: the
 * max reduction (fmaxf) passes over NaN, but a NaN logit makes the sum NaN,
 * and an infinite one the max. */
__host__ __device__ __forceinline__ bool head_row_finite(float mx, float sum) {
        return isfinite(mx) && isfinite(sum);
}

/* One compare-exchange of the bitonic sort into "before" order, stage
 * (k, j): thread t owns the pair (t, t ^ j) when t is its lower index, so
 * the pairs of one stage are disjoint and need no lock. */
__host__ __device__ __forceinline__ void head_sort_step(float *prob, int *cls, int t, int j, int k) {
        int l = t ^ j;

        if (l > t) {
                float pt = prob[t], pl = prob[l];
                int ct = cls[t], cl = cls[l];
                bool up = (t & k) == 0;
                bool swap = up ? head_before(pl, cl, pt, ct) : head_before(pt, ct, pl, cl);

                if (swap) {
                        prob[t] = pl;
                        prob[l] = pt;
                        cls[t] = cl;
                        cls[l] = ct;
                }
        }
}

__global__ void __launch_bounds__(HEAD_THREADS) head_kernel(const float *logits, int top_k, engine_topk_t *out) {
        __shared__ float prob[HEAD_THREADS];
        __shared__ int cls[HEAD_THREADS];
        __shared__ float warp_buf[HEAD_WARPS];
        const float *row = logits + (size_t)blockIdx.x * MODEL_CLASSES;
        int t = threadIdx.x;
        float x, mx, e, sum;

        x = t < MODEL_CLASSES ? row[t] : -INFINITY;
        mx = head_reduce<true>(x, warp_buf);
        e = t < MODEL_CLASSES ? expf(x - mx) : 0.0f;
        sum = head_reduce<false>(e, warp_buf);
        if (!head_row_finite(mx, sum)) {
                if (t < top_k) {
                        engine_topk_t r;
                        r.cls = ENGINE_TOPK_NONFINITE;
                        r.score = __int_as_float(0x7fc00000);   /* a quiet NaN */
                        out[(size_t)blockIdx.x * top_k + t] = r;
                }
                return;
        }
        /* Pads rank after every probability (>= 0) and after each other by class. */
        prob[t] = t < MODEL_CLASSES ? e / sum : -1.0f;
        cls[t] = t;
        __syncthreads();

        for (int k = 2; k <= HEAD_THREADS; k <<= 1) {
                for (int j = k >> 1; j > 0; j >>= 1) {
                        head_sort_step(prob, cls, t, j, k);
                        __syncthreads();
                }
        }

        if (t < top_k) {
                engine_topk_t r;
                r.cls = cls[t];
                r.score = prob[t];
                out[(size_t)blockIdx.x * top_k + t] = r;
        }
}

int cuda_head(cudaStream_t s, const float *logits, int n, int top_k, engine_topk_t *out, errbuf_t *err) {
        assert(logits && out && n >= 1);
        assert(top_k >= 1 && top_k <= MODEL_CLASSES);
        head_kernel<<<n, HEAD_THREADS, 0, s>>>(logits, top_k, out);
        CUDA_LAUNCH_RETURN("softmax/top-k kernel launch");
        return 0;
}

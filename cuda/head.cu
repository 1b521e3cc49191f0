/* head: softmax and top-k of the logits, one block per sample.
 *
 *   logits  (n, classes) fp32 (the FC writes fp32 in every precision),
 *           1 <= classes <= MODEL_CLASSES_MAX
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
 * a 1024-element block sort is short enough to own.
 *
 * A row of more than 1024 classes is not sorted: each thread walks its
 * strided share of the row for the max and the sum, then top_k rounds each
 * pick the best (probability, class) pair that ranks after the previous
 * pick (head_after), by a block-wide reduction in the same order: k passes
 * over the row, the same ranks and ties as the sort. */
#include <assert.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_types.cuh"

#define HEAD_THREADS 1024
#define HEAD_WARPS (HEAD_THREADS / 32)


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

/* Whether (p, c) may be the next pick after (prev_p, prev_c), and ranks
 * before the best candidate so far (best_p, best_c): the wide path's step.
 * prev_c < 0 means nothing was picked yet. */
__host__ __device__ __forceinline__ bool head_after_better(float p, int c, float prev_p, int prev_c, float best_p,
                                                          int best_c) {
        if (prev_c >= 0 && !head_before(prev_p, prev_c, p, c))
                return false;
        return best_c < 0 || head_before(p, c, best_p, best_c);
}

/* The wide path (classes > HEAD_THREADS): see the file comment. */
__device__ void head_wide(const float *row, int classes, int top_k, engine_topk_t *out, float *prob, int *cls,
                          float *warp_buf) {
        int t = threadIdx.x;
        float mx = -INFINITY, e = 0.0f, sum, prev_p = 0.0f;
        int prev_c = -1;

        for (int i = t; i < classes; i += HEAD_THREADS)
                mx = fmaxf(mx, row[i]);
        mx = head_reduce<true>(mx, warp_buf);
        for (int i = t; i < classes; i += HEAD_THREADS)
                e += expf(row[i] - mx);
        sum = head_reduce<false>(e, warp_buf);
        if (!head_row_finite(mx, sum)) {
                for (int j = t; j < top_k; j += HEAD_THREADS) {
                        engine_topk_t r;
                        r.cls = ENGINE_TOPK_NONFINITE;
                        r.score = __int_as_float(0x7fc00000);   /* a quiet NaN */
                        out[j] = r;
                }
                return;
        }
        for (int j = 0; j < top_k; j++) {
                float best_p = -1.0f;
                int best_c = -1;

                for (int i = t; i < classes; i += HEAD_THREADS) {
                        float p = expf(row[i] - mx) / sum;

                        if (head_after_better(p, i, prev_p, prev_c, best_p, best_c)) {
                                best_p = p;
                                best_c = i;
                        }
                }
                prob[t] = best_p;
                cls[t] = best_c;
                __syncthreads();
                for (int half = HEAD_THREADS / 2; half > 0; half >>= 1) {
                        if (t < half && cls[t + half] >= 0 &&
                            (cls[t] < 0 || head_before(prob[t + half], cls[t + half], prob[t], cls[t]))) {
                                prob[t] = prob[t + half];
                                cls[t] = cls[t + half];
                        }
                        __syncthreads();
                }
                prev_p = prob[0];
                prev_c = cls[0];
                if (t == 0) {
                        engine_topk_t r;
                        r.cls = prev_c;
                        r.score = prev_p;
                        out[j] = r;
                }
                __syncthreads();        /* prob[0] and cls[0] are read before the next round writes */
        }
}

__global__ void __launch_bounds__(HEAD_THREADS) head_kernel(const float *logits, int classes, int top_k,
                                                            engine_topk_t *out) {
        __shared__ float prob[HEAD_THREADS];
        __shared__ int cls[HEAD_THREADS];
        __shared__ float warp_buf[HEAD_WARPS];
        const float *row = logits + (size_t)blockIdx.x * classes;
        int t = threadIdx.x;
        float x, mx, e, sum;

        if (classes > HEAD_THREADS) {   /* block-uniform */
                head_wide(row, classes, top_k, out + (size_t)blockIdx.x * top_k, prob, cls, warp_buf);
                return;
        }
        x = t < classes ? row[t] : -INFINITY;
        mx = head_reduce<true>(x, warp_buf);
        e = t < classes ? expf(x - mx) : 0.0f;
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
        prob[t] = t < classes ? e / sum : -1.0f;
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

int cuda_head(cudaStream_t s, const float *logits, int n, int classes, int top_k, engine_topk_t *out,
              errbuf_t *err) {
        assert(logits && out && n >= 1);
        assert(classes >= 1 && classes <= MODEL_CLASSES_MAX);
        assert(top_k >= 1 && top_k <= classes && top_k <= ENGINE_TOPK_MAX);
        head_kernel<<<n, HEAD_THREADS, 0, s>>>(logits, classes, top_k, out);
        CUDA_LAUNCH_RETURN("softmax/top-k kernel launch");
        return 0;
}

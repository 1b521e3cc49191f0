/* check_kernels: the CUDA kernels' index arithmetic, checked on the host.
 *
 * Every hand-written kernel in cuda/ keeps its per-element body in a
 * __host__ __device__ function (im2col_word, maxpool_elem, avgpool_elem,
 * preprocess_elem, head_sort_step, add_relu_elem). This program includes those very .cu
 * files, runs the bodies on the CPU over every output element, and compares
 * them with the CPU reference (cpu_ops.c), so a wrong index fails here, in
 * CI, without a GPU. It does not launch anything on a device and says
 * nothing about the launch configuration, the warp reductions of the head
 * or cuBLASLt: tools/gpu-check covers those on a GPU. */
#include "im2col.cu"
#include "pool.cu"
#include "preprocess.cu"
#include "head.cu"
#include "residual.cu"

#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <type_traits>
#include <vector>

/* Failures of the current test; the first message is kept for its FAIL line. */
static int fails = 0;
static char first[512];
#define R50_CLASSES 1000        /* ImageNet rows, as the ResNet-50 head sees them */
#define CHECK(c, ...)                                                                   \
        do {                                                                            \
                if (!(c) && fails++ == 0)                                               \
                        snprintf(first, sizeof(first), __VA_ARGS__);                    \
        } while (0)

static void report(const char *id) {
        if (fails)
                printf("FAIL cuda_host/%s: %d mismatches; first: %s\n", id, fails, first);
        else
                printf("PASS cuda_host/%s\n", id);
        fflush(stdout);
}
/* xorshift64*, uniform in [-1, 1): reproducible inputs. */
static uint64_t seed = 12345;

static float frand(void) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        return (float)((seed * 2685821657736338717ULL >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* im2col_word over every word of col against cpu_im2col per sample, with
 * float words, then uint4 and uint2 words moving the same bytes; rows are
 * padded to kp >= k * k * cin columns, which must come out zero. */
static void check_im2col(int n, int h, int w, int cin, int k, int stride, int pad, int kp) {
        cpu_conv_shape_t s = {};
        size_t per_sample, rows, kk = (size_t)k * k * cin;

        s.n = n;
        s.h = h;
        s.w = w;
        s.cin = cin;
        s.cout = 4;
        s.kh = s.kw = k;
        s.stride = stride;
        s.pad = pad;
        cpu_conv_shape_finish(&s);
        rows = (size_t)s.ho * s.wo;
        per_sample = rows * kk;

        std::vector<float> in((size_t)n * h * w * cin), ref(per_sample), got((size_t)n * rows * kp);
        for (float &x : in)
                x = frand();
        for (long long i = 0; i < (long long)got.size(); i++)
                got[i] = im2col_word<float>(in.data(), i, h, w, cin, k, k, stride, pad, s.ho, s.wo, kp);
        for (int b = 0; b < n; b++) {
                cpu_im2col(&s, in.data() + (size_t)b * h * w * cin, ref.data());
                for (size_t row = 0; row < rows; row++)
                        for (size_t j = 0; j < (size_t)kp; j++) {
                                float g = got[(b * rows + row) * kp + j], want = j < kk ? ref[row * kk + j] : 0.0f;

                                CHECK(g == want,
                                      "im2col n%d h%d w%d cin%d k%d s%d p%d: sample %d row %zu column %zu: %g, "
                                      "reference %g",
                                      n, h, w, cin, k, stride, pad, b, row, j, g, want);
                        }
        }
        if (cin % 4 == 0 && kp % 4 == 0) {
                std::vector<float> wide(got.size());
                for (long long i = 0; i < (long long)got.size() / 4; i++)
                        ((uint4 *)wide.data())[i] = im2col_word<uint4>((const uint4 *)in.data(), i, h, w, cin / 4, k,
                                                                       k, stride, pad, s.ho, s.wo, kp / 4);
                CHECK(memcmp(wide.data(), got.data(), got.size() * 4) == 0, "im2col with uint4 words differs (cin %d)",
                      cin);
        }
        if (cin % 2 == 0 && kp % 2 == 0) {
                std::vector<float> wide(got.size());
                for (long long i = 0; i < (long long)got.size() / 2; i++)
                        ((uint2 *)wide.data())[i] = im2col_word<uint2>((const uint2 *)in.data(), i, h, w, cin / 2, k,
                                                                       k, stride, pad, s.ho, s.wo, kp / 2);
                CHECK(memcmp(wide.data(), got.data(), got.size() * 4) == 0, "im2col with uint2 words differs (cin %d)",
                      cin);
        }
}

/* maxpool 3x3 s2 p1 (fp32 exact, and fp16 storage: the max of rounded
 * inputs is the rounded max) and the global average pool. */
static void check_pool(int n, int h, int w, int c) {
        cpu_conv_shape_t s = {};

        s.n = n;
        s.h = h;
        s.w = w;
        s.cin = s.cout = c;
        s.kh = s.kw = 3;
        s.stride = 2;
        s.pad = 1;
        cpu_conv_shape_finish(&s);

        std::vector<float> in((size_t)n * h * w * c), ref((size_t)n * s.ho * s.wo * c);
        std::vector<__half> in_h(in.size());
        for (size_t i = 0; i < in.size(); i++) {
                in[i] = frand();
                in_h[i] = __float2half_rn(in[i]);
        }
        cpu_maxpool(&s, in.data(), ref.data());
        for (long long i = 0; i < (long long)ref.size(); i++) {
                float g = maxpool_elem<float>(in.data(), i, h, w, c, 3, 2, 1, s.ho, s.wo);
                float g_h = __half2float(maxpool_elem<__half>(in_h.data(), i, h, w, c, 3, 2, 1, s.ho, s.wo));

                CHECK(g == ref[i], "maxpool element %lld: %g, reference %g", i, g, ref[i]);
                CHECK(g_h == __half2float(__float2half_rn(ref[i])), "fp16 maxpool element %lld: %g, reference %g", i,
                      g_h, ref[i]);
        }

        std::vector<float> avg_ref((size_t)n * c);
        cpu_global_avgpool(n, h, w, c, in.data(), avg_ref.data());
        for (long long i = 0; i < (long long)avg_ref.size(); i++) {
                float g = avgpool_elem<float>(in.data(), i, h * w, c);

                CHECK(fabsf(g - avg_ref[i]) <= 1e-6f * (1 + fabsf(avg_ref[i])), "avgpool element %lld: %g, reference %g",
                      i, g, avg_ref[i]);
        }
}

/* The embedding (issue 40): the global average pool's fp32 means, which
 * avgpool_kernel writes to the slot's embedding region beside its output
 * in the precision. Per element: avgpool_mean against the reference's pool
 * (fp32 in, and fp16/bf16 storage, whose means are of the rounded inputs,
 * in fp32); the output in the precision is that mean rounded
 * (avgpool_elem), so the embedding is never the rounded value. */
static void check_avgpool_features(int n, int hw, int c) {
        std::vector<float> in((size_t)n * hw * c), rounded(in.size()), ref((size_t)n * c), ref_r(ref.size());
        std::vector<__half> in_h(in.size());
        std::vector<__nv_bfloat16> in_b(in.size());

        for (size_t i = 0; i < in.size(); i++) {
                in[i] = frand() * 4.0f;
                in_h[i] = __float2half_rn(in[i]);
                in_b[i] = __float2bfloat16_rn(in[i]);
                rounded[i] = __half2float(in_h[i]);
        }
        cpu_global_avgpool(n, hw, 1, c, in.data(), ref.data());
        cpu_global_avgpool(n, hw, 1, c, rounded.data(), ref_r.data());
        for (long long i = 0; i < (long long)ref.size(); i++) {
                float f = avgpool_mean<float>(in.data(), i, hw, c);
                float fh = avgpool_mean<__half>(in_h.data(), i, hw, c);
                float fb = avgpool_mean<__nv_bfloat16>(in_b.data(), i, hw, c);
                double sum_b = 0;

                for (int j = 0; j < hw; j++)
                        sum_b += __bfloat162float(in_b[(i / c) * hw * c + (long long)j * c + i % c]);
                CHECK(fabsf(f - ref[i]) <= 1e-6f * (1 + fabsf(ref[i])), "fp32 feature %lld: %g, reference %g", i, f,
                      ref[i]);
                CHECK(fabsf(fh - ref_r[i]) <= 1e-6f * (1 + fabsf(ref_r[i])), "fp16 feature %lld: %g, reference %g", i,
                      fh, ref_r[i]);
                CHECK(fabs(fb - sum_b / hw) <= 1e-6 * (1 + fabs(sum_b / hw)), "bf16 feature %lld: %g, reference %g",
                      i, fb, sum_b / hw);
                CHECK(__half2float(avgpool_elem<__half>(in_h.data(), i, hw, c)) == __half2float(__float2half_rn(fh)),
                      "fp16 pooled output %lld is not its feature rounded", i);
        }
}

/* rgb8, float32 CHW, a padding row (RECORD_UNKNOWN: zeros) and rgb8 again,
 * packed by format as engine_slot_place packs them (pack_add): offsets 0,
 * 150,528, -, 752,640 in 903,168 bytes. The padding row's offset points at
 * the first record's non-zero bytes, so a kernel that read it would not
 * give zeros. fp32 results must equal the reference bit for bit. */
static void check_preprocess(void) {
        const int32_t fmt[4] = { RECORD_RGB8, RECORD_F32_CHW, RECORD_UNKNOWN, RECORD_RGB8 };
        const int n = 4;
        int64_t off[4];
        std::vector<uint8_t> rec;
        std::vector<float> ref(SAMPLE_ELEMS);
        struct norm nm;
        pack_t pk;

        pack_init(&pk, n);
        for (int b = 0; b < n; b++) {
                uint64_t o = 0;

                if (fmt[b] == RECORD_UNKNOWN)
                        off[b] = 0;
                else if (pack_add(&pk, (record_format_t)fmt[b], &o) == 0)
                        off[b] = (int64_t)o;
                else
                        CHECK(false, "preprocess: record %d does not pack", b);
        }
        CHECK(off[1] == 150528 && off[3] == 752640 && pk.used_bytes == 903168,
              "preprocess: packed at %lld, %lld in %llu bytes", (long long)off[1], (long long)off[3],
              (unsigned long long)pk.used_bytes);
        rec.resize(pk.used_bytes);
        for (int c = 0; c < 3; c++) {
                nm.mean[c] = cpu_imagenet_mean[c];
                nm.std[c] = cpu_imagenet_std[c];
        }
        for (uint8_t &x : rec)
                x = (uint8_t)(frand() * 127 + 128);
        for (size_t i = 0; i < RECORD_F32_CHW_BYTES / 4; i++)
                ((float *)(rec.data() + off[1]))[i] = frand() * 3;
        for (int b = 0; b < n; b++) {
                const uint8_t *r = rec.data() + off[b];

                if (fmt[b] == RECORD_RGB8)
                        cpu_preprocess_rgb8(r, ref.data());
                else if (fmt[b] == RECORD_F32_CHW)
                        cpu_preprocess_f32_chw(r, ref.data());
                else
                        std::fill(ref.begin(), ref.end(), 0.0f);
                for (long long j = 0; j < SAMPLE_ELEMS; j++) {
                        float g = preprocess_elem<float>(rec.data(), fmt, off, nm, (long long)b * SAMPLE_ELEMS + j);

                        CHECK(g == ref[j], "preprocess sample %d (format %d) element %lld: %.9g, reference %.9g", b,
                              fmt[b], j, g, ref[j]);
                }
        }
}

/* The head's bitonic network, stage by stage as the block runs it (the
 * pairs of a stage are disjoint, so running its threads one after the other
 * is exact), against cpu_topk over all 1000 ranks: random rows, rows with
 * ties, and wide rows whose tail underflows to probability 0. */
static void check_topk_sort(void) {
        for (int trial = 0; trial < 6; trial++) {
                float logits[R50_CLASSES], prob[HEAD_THREADS], mx = -INFINITY, sum = 0.0f;
                int cls[HEAD_THREADS];
                engine_topk_t ref[R50_CLASSES];

                for (int i = 0; i < R50_CLASSES; i++)
                        logits[i] = frand() * (trial < 3 ? 5.0f : 200.0f);
                if (trial == 1)
                        for (int i = 0; i < R50_CLASSES; i += 7)
                                logits[i] = 1.5f;
                if (trial == 2)
                        for (int i = 0; i < R50_CLASSES; i++)
                                logits[i] = (float)(i % 10);
                for (int i = 0; i < R50_CLASSES; i++)
                        mx = fmaxf(mx, logits[i]);
                for (int i = 0; i < R50_CLASSES; i++)
                        sum += expf(logits[i] - mx);
                for (int t = 0; t < HEAD_THREADS; t++) {
                        prob[t] = t < R50_CLASSES ? expf(logits[t] - mx) / sum : -1.0f;
                        cls[t] = t;
                }
                std::vector<float> p(prob, prob + R50_CLASSES);
                cpu_topk(R50_CLASSES, R50_CLASSES, p.data(), ref);

                for (int k = 2; k <= HEAD_THREADS; k <<= 1)
                        for (int j = k >> 1; j > 0; j >>= 1)
                                for (int t = 0; t < HEAD_THREADS; t++)
                                        head_sort_step(prob, cls, t, j, k);
                for (int t = 0; t < R50_CLASSES; t++)
                        CHECK(ref[t].cls == cls[t] && ref[t].score == prob[t],
                              "row %d rank %d: class %d (%g), reference class %d (%g)", trial, t, cls[t], prob[t],
                              ref[t].cls, ref[t].score);
                for (int t = R50_CLASSES; t < HEAD_THREADS; t++)
                        CHECK(cls[t] >= R50_CLASSES, "row %d: a pad entry ranks %d", trial, t);
        }
}

/* The head's wide path (classes > HEAD_THREADS), round by round as the
 * block runs it: each round's block reduction picks, among the candidates
 * head_after_better leaves after the previous pick, the one that ranks
 * first (head_before), so a serial scan with the same two functions is the
 * same selection. Against cpu_topk over the probabilities: 1001, 5000 and
 * 100,000 classes, rows with ties and a tail that underflows to 0, k up to
 * 1000. And the sort path at small class counts (1, 3, 10): the pads rank
 * after every class. */
static void check_head_wide(void) {
        static const int counts[] = { 1001, 5000, 100000 }, ks[] = { 5, 1000, 37 };

        for (int c = 0; c < 3; c++) {
                int classes = counts[c], k = ks[c];
                std::vector<float> logits(classes), prob(classes);
                std::vector<engine_topk_t> ref(k), got(k);
                float mx = -INFINITY, sum = 0.0f, prev_p = 0.0f;
                int prev_c = -1;

                for (int i = 0; i < classes; i++)
                        logits[i] = c == 1 ? (float)(i % 13) : frand() * (c == 2 ? 200.0f : 5.0f);
                for (int i = 0; i < classes; i++)
                        mx = fmaxf(mx, logits[i]);
                for (int i = 0; i < classes; i++)
                        sum += expf(logits[i] - mx);
                for (int i = 0; i < classes; i++)
                        prob[i] = expf(logits[i] - mx) / sum;
                cpu_topk(classes, k, prob.data(), ref.data());
                for (int j = 0; j < k; j++) {
                        float best_p = -1.0f;
                        int best_c = -1;

                        for (int i = 0; i < classes; i++)
                                if (head_after_better(prob[i], i, prev_p, prev_c, best_p, best_c)) {
                                        best_p = prob[i];
                                        best_c = i;
                                }
                        got[j].cls = prev_c = best_c;
                        got[j].score = prev_p = best_p;
                }
                for (int j = 0; j < k; j++)
                        CHECK(got[j].cls == ref[j].cls && got[j].score == ref[j].score,
                              "%d classes rank %d: class %d (%g), reference class %d (%g)", classes, j, got[j].cls,
                              got[j].score, ref[j].cls, ref[j].score);
        }
        for (int classes : { 1, 3, 10 }) {
                float prob[HEAD_THREADS];
                int cls[HEAD_THREADS];
                std::vector<float> p(classes);
                std::vector<engine_topk_t> ref(classes);

                for (int t = 0; t < HEAD_THREADS; t++) {
                        prob[t] = t < classes ? (p[t] = (frand() + 1.0f) / 2.0f) : -1.0f;
                        cls[t] = t;
                }
                cpu_topk(classes, classes, p.data(), ref.data());
                for (int k = 2; k <= HEAD_THREADS; k <<= 1)
                        for (int j = k >> 1; j > 0; j >>= 1)
                                for (int t = 0; t < HEAD_THREADS; t++)
                                        head_sort_step(prob, cls, t, j, k);
                for (int t = 0; t < classes; t++)
                        CHECK(ref[t].cls == cls[t] && ref[t].score == prob[t], "%d classes rank %d: class %d, reference %d",
                              classes, t, cls[t], ref[t].cls);
        }
}

/* The head's non-finite decision (head_row_finite on the max and sum its
 * reductions compute: fmaxf from -inf, a sum of expf(x - max)) against the
 * CPU's cpu_head_row on rows with a NaN, a +inf, a single -inf (finite: a
 * class of probability 0), all -inf, and 3e38s (large but finite). */
static void check_head_nonfinite(void) {
        const int cases = 6;

        for (int c = 0; c < cases; c++) {
                float x[R50_CLASSES], mx = -INFINITY, sum = 0.0f;
                engine_topk_t top[5];
                bool finite;

                for (int i = 0; i < R50_CLASSES; i++)
                        x[i] = c == 4 ? -INFINITY : c == 5 ? 3e38f : frand() * 20.0f;
                if (c == 1)
                        x[123] = NAN;
                if (c == 2)
                        x[0] = INFINITY;
                if (c == 3)
                        x[999] = -INFINITY;
                for (int i = 0; i < R50_CLASSES; i++)
                        mx = fmaxf(mx, x[i]);
                for (int i = 0; i < R50_CLASSES; i++)
                        sum += expf(x[i] - mx);
                finite = head_row_finite(mx, sum);
                CHECK(finite == (cpu_head_row(x, R50_CLASSES, 5, top) == 1), "row case %d: the head says %s, the CPU %s", c,
                      finite ? "finite" : "non-finite", engine_topk_is_finite(top) ? "finite" : "non-finite");
                CHECK(finite == (c == 0 || c == 3 || c == 5), "row case %d: %s", c, finite ? "finite" : "non-finite");
        }
}

/* The residual fallback's add-and-ReLU against the CPU reference's
 * order (conv output with bias, plus the shortcut, then ReLU: cpu_conv2d),
 * in fp32 exactly, and in fp16/bf16 as one rounding of the fp32 result;
 * negative sums must come out +0, never -0 or the sum. */
static void check_add_relu(void) {
        const int n = 4096;
        std::vector<float> d(n), res(n);
        std::vector<__half> dh(n), rh(n);
        std::vector<__nv_bfloat16> db(n), rb(n);

        for (int i = 0; i < n; i++) {
                d[i] = frand() * 4;
                res[i] = frand() * 4;
                dh[i] = __float2half_rn(d[i]);
                rh[i] = __float2half_rn(res[i]);
                db[i] = __float2bfloat16_rn(d[i]);
                rb[i] = __float2bfloat16_rn(res[i]);
        }
        for (long long i = 0; i < n; i++) {
                float want = d[i] + res[i] > 0.0f ? d[i] + res[i] : 0.0f;
                float g = add_relu_elem<float>(d.data(), res.data(), i);
                float wh = __half2float(dh[i]) + __half2float(rh[i]);
                float wb = __bfloat162float(db[i]) + __bfloat162float(rb[i]);
                float gh = __half2float(add_relu_elem<__half>(dh.data(), rh.data(), i));
                float gb = __bfloat162float(add_relu_elem<__nv_bfloat16>(db.data(), rb.data(), i));

                CHECK(g == want && !signbit(g), "add_relu element %lld: %g, want %g", i, g, want);
                CHECK(gh == __half2float(__float2half_rn(wh > 0 ? wh : 0.0f)) && !signbit(gh),
                      "fp16 add_relu element %lld: %g", i, gh);
                CHECK(gb == __bfloat162float(__float2bfloat16_rn(wb > 0 ? wb : 0.0f)) && !signbit(gb),
                      "bf16 add_relu element %lld: %g", i, gb);
        }
}

/* cuda_storage_dispatch, the launchers' one precision switch: each
 * precision calls its callback once with its storage type, and a value
 * without one (PRECISION_AUTO) is refused without a call. */
static void check_storage_dispatch(void) {
        const precision_t ps[] = { PRECISION_FP32, PRECISION_FP16, PRECISION_BF16 };

        for (precision_t p : ps) {
                int calls = 0, right = 0;
                size_t bytes = 0;
                int r = cuda_storage_dispatch(p, [&](auto st) {
                        typedef typename decltype(st)::type T;

                        calls++;
                        bytes = sizeof(T);
                        right = p == PRECISION_FP32   ? std::is_same<T, float>::value
                                : p == PRECISION_FP16 ? std::is_same<T, __half>::value
                                                      : std::is_same<T, __nv_bfloat16>::value;
                });

                CHECK(r == 0, "%s: returned %d", precision_name(p), r);
                CHECK(calls == 1, "%s: the callback ran %d times", precision_name(p), calls);
                CHECK(right, "%s: the callback got another storage type", precision_name(p));
                CHECK(bytes == precision_bytes(p), "%s: a %zu-byte storage type, not %zu", precision_name(p), bytes,
                      precision_bytes(p));
        }
        {
                int calls = 0;
                int r = cuda_storage_dispatch(PRECISION_AUTO, [&](auto) { calls++; });

                CHECK(r == -EINVAL && calls == 0, "PRECISION_AUTO: returned %d after %d calls", r, calls);
        }
}

int main() {
        int failed = 0;

        /* conv1 (K 147 padded to 152), a 3x3 s1, a 3x3 s2, a strided 1x1
         * downsample, odd sizes, a padded row of even words */
        check_im2col(2, 224, 224, 3, 7, 2, 3, 152);
        check_im2col(2, 9, 7, 8, 3, 1, 1, 72);
        check_im2col(3, 10, 10, 4, 3, 2, 1, 36);
        check_im2col(2, 8, 8, 16, 1, 2, 0, 16);
        check_im2col(1, 7, 7, 12, 3, 1, 1, 108);
        check_im2col(2, 6, 5, 2, 3, 2, 1, 24);
        report("im2col");
        failed += fails > 0;
        fails = 0;
        check_pool(2, 112, 112, 8);
        check_pool(3, 7, 9, 5);
        report("pool");
        check_avgpool_features(3, 49, 512);
        check_avgpool_features(2, 49, 2048);
        report("avgpool_features");
        failed += fails > 0;
        fails = 0;
        check_preprocess();
        report("preprocess");
        failed += fails > 0;
        fails = 0;
        check_topk_sort();
        report("topk_sort");
        failed += fails > 0;
        fails = 0;
        check_head_nonfinite();
        report("head_nonfinite");
        failed += fails > 0;
        fails = 0;
        check_head_wide();
        report("head_wide");
        failed += fails > 0;
        fails = 0;
        check_add_relu();
        report("add_relu");
        failed += fails > 0;
        fails = 0;
        check_storage_dispatch();
        report("storage_dispatch");
        failed += fails > 0;
        return failed ? 1 : 0;
}

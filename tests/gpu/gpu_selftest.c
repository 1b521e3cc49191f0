/* gpu_selftest: CPU stand-ins for the CUDA engine's single-step interface.
 *
 * `gpu-tests --selftest` runs every check of this binary on a machine
 * without a GPU: the engine under test is a CPU engine on its own copy of
 * the weights, and these functions answer for engine_cuda_debug_op and
 * engine_cuda_mem_info using cpu_ops.h on that copy. The correct stand-in
 * must pass every check; `--selftest=broken` makes it wrong in the ways the
 * checks exist to catch, and must fail them. That is how the harness is
 * tested before the one device call that runs it for real.
 *
 * It tests the tests, never the CUDA engine, and its ids say so
 * ("gpu-selftest/..."), so it cannot be mistaken for a GPU result. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "gpu_tests.h"

static int selftest_broken;
static uint64_t selftest_mem_calls;

void gpu_selftest_setup(int broken) {
        selftest_broken = broken;
        selftest_mem_calls = 0;
}

void gpu_selftest_break_model(model_t *m, uint64_t seed) {
        uint64_t rng = seed | 1;

        /* A relative error of about 1e-3 on every weight: the kind of
         * error that fp32 kernels computing in TF32 or fp16 would make. */
        for (size_t i = 0; i < m->weight_elems; i++)
                m->weights[i] *= 1.0f + 1e-3f * gpu_rand_normal(&rng);
}

static int selftest_op(engine_t *e, int i, int n, const float *in, const float *residual, float *out,
                       errbuf_t *err) {
        const model_t *m = e->model;
        const model_op_t *op = &m->ops[i];
        float *act[MODEL_MAX_TENSORS] = { NULL };
        size_t ws_elems = 0;
        float *ws;

        if (op->kind == MODEL_OP_CONV) {
                cpu_conv_shape_t s = {
                        .n = n, .h = op->h_in, .w = op->w_in, .cin = op->cin, .cout = op->cout,
                        .kh = op->kh, .kw = op->kw, .stride = op->stride, .pad = op->pad,
                };

                cpu_conv_shape_finish(&s);
                ws_elems = cpu_conv2d_workspace_elems(&s, n);
        }
        ws = malloc((ws_elems ? ws_elems : 1) * sizeof(float));
        if (!ws)
                return errbuf_set(err, -ENOMEM, "selftest: out of memory");
        /* The reference only reads in and residual. */
        act[op->in] = (float *)in;
        if (op->residual >= 0)
                act[op->residual] = (float *)residual;
        act[op->out] = out;
        gpu_ref_op(m, i, n, act, ws, ws_elems);
        free(ws);
        return 0;
}

int gpu_selftest_debug_op(engine_t *e, int op, int n, const void *host_in, const record_format_t *formats,
                          const float *host_residual, void *host_out, errbuf_t *err) {
        const size_t per = (size_t)MODEL_IN_H * MODEL_IN_W * MODEL_IN_C;
        const model_t *m = e->model;

        if (n < 1 || n > engine_max_batch(e))
                return errbuf_set(err, -EINVAL, "selftest: n=%d is outside 1..%d", n, engine_max_batch(e));
        if (op == ENGINE_CUDA_OP_PREPROCESS) {
                const uint8_t *recs = host_in;
                float *out = host_out;

                for (int i = 0; i < n; i++) {
                        if (formats[i] == RECORD_RGB8)
                                cpu_preprocess_rgb8(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
                        else
                                cpu_preprocess_f32_chw(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
                }
                if (selftest_broken)
                        out[n * per - 1] = NAN;         /* as if the last element was never written */
                return 0;
        }
        if (op == ENGINE_CUDA_OP_HEAD) {
                int k = engine_plan_of(e)->top_k;
                float *prob = malloc((size_t)n * MODEL_CLASSES * sizeof(float));
                engine_topk_t *out = host_out;

                if (!prob)
                        return errbuf_set(err, -ENOMEM, "selftest: out of memory");
                /* The correct stand-in marks non-finite rows as the CUDA
                 * head does; the broken one ranks them (NaN scores). */
                cpu_softmax(n, MODEL_CLASSES, host_in, prob);
                for (int i = 0; i < n; i++) {
                        if (selftest_broken)
                                cpu_topk(MODEL_CLASSES, k, prob + (size_t)i * MODEL_CLASSES, out + (size_t)i * k);
                        else
                                cpu_head_row((const float *)host_in + (size_t)i * MODEL_CLASSES, k,
                                             out + (size_t)i * k);
                        if (selftest_broken && k >= 2) {
                                engine_topk_t t = out[(size_t)i * k];

                                out[(size_t)i * k] = out[(size_t)i * k + 1];
                                out[(size_t)i * k + 1] = t;
                        }
                }
                free(prob);
                return 0;
        }
        if (op < 0 || op >= m->n_ops)
                return errbuf_set(err, -EINVAL, "selftest: no op %d", op);
        return selftest_op(e, op, n, host_in, host_residual, host_out, err);
}

int gpu_selftest_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err) {
        uint64_t planned = engine_plan_of(e)->total_bytes;

        (void)err;
        selftest_mem_calls++;
        *total_bytes = engine_plan_of(e)->device_memory_bytes;
        if (selftest_broken)    /* over the plan, and growing 2 MiB a call */
                *used_bytes = planned + (selftest_mem_calls << 21);
        else                    /* 95% of the plan, steady */
                *used_bytes = planned / 20 * 19;
        return 0;
}

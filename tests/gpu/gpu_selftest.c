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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "gpu_tests.h"

static int selftest_broken;     /* 1: wrong on purpose; 2: loses its "context" */
static uint64_t selftest_mem_calls;
static int selftest_residual_kernel;
static long selftest_max_blocks;
static char selftest_lost[512];   /* the "sticky error", once lost */

#define SELFTEST_LOSE_AT "layer1.0.conv2"

void gpu_selftest_setup(int broken) {
        selftest_broken = broken;
        selftest_mem_calls = 0;
        selftest_residual_kernel = 0;
        selftest_max_blocks = 0;
        selftest_lost[0] = 0;
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

        if (selftest_lost[0])
                return errbuf_set(err, -EIO, "the CUDA engine failed earlier and its context is lost: %s",
                                  selftest_lost);
        if (n < 1 || n > engine_max_batch(e))
                return errbuf_set(err, -EINVAL, "selftest: n=%d is outside 1..%d", n, engine_max_batch(e));
        if (op == ENGINE_CUDA_OP_PREPROCESS) {
                const uint8_t *recs = host_in;
                float *out = host_out;

                for (int i = 0; i < n; i++) {
                        if (formats[i] == RECORD_RGB8)
                                cpu_preprocess_rgb8(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
                        else if (formats[i] == RECORD_F32_CHW)
                                cpu_preprocess_f32_chw(recs + (size_t)i * RECORD_MAX_BYTES, out + i * per);
                        else    /* a padding row: zeros, or (broken) a tiny leftover */
                                for (size_t j = 0; j < per; j++)
                                        out[i * per + j] = selftest_broken == 1 && j == per / 2 ? 1e-30f : 0.0f;
                }
                if (selftest_broken == 1)
                        out[n * per - 1] = NAN;         /* as if the last element was never written */
                return 0;
        }
        if (op == ENGINE_CUDA_OP_HEAD) {
                int k = engine_plan_of(e)->top_k;
                float *prob = malloc((size_t)n * gpu_classes * sizeof(float));
                engine_topk_t *out = host_out;

                if (!prob)
                        return errbuf_set(err, -ENOMEM, "selftest: out of memory");
                /* The correct stand-in marks non-finite rows as the CUDA
                 * head does; the broken one ranks them (NaN scores). */
                cpu_softmax(n, gpu_classes, host_in, prob);
                for (int i = 0; i < n; i++) {
                        if (selftest_broken == 1)
                                cpu_topk(gpu_classes, k, prob + (size_t)i * gpu_classes, out + (size_t)i * k);
                        else
                                cpu_head_row((const float *)host_in + (size_t)i * gpu_classes, gpu_classes, k,
                                             out + (size_t)i * k);
                        if (selftest_broken == 1 && k >= 2) {
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
        if (selftest_broken == 2 && strcmp(m->ops[op].name, SELFTEST_LOSE_AT) == 0) {
                snprintf(selftest_lost, sizeof(selftest_lost),
                         "%s: an illegal memory access was encountered (cudaErrorIllegalAddress)", SELFTEST_LOSE_AT);
                return errbuf_set(err, -EIO, "the CUDA context is lost: %s", selftest_lost);
        }
        {
                int r = selftest_op(e, op, n, host_in, host_residual, host_out, err);
                size_t elems = (size_t)n * m->tensors[m->ops[op].out].elems;

                /* Broken: the add-ReLU fallback off by a relative 1e-2. */
                if (r == 0 && selftest_broken == 1 && selftest_residual_kernel && m->ops[op].residual >= 0)
                        for (size_t j = 0; j < elems; j++)
                                ((float *)host_out)[j] *= 1.01f;
                return r;
        }
}

int gpu_selftest_debug_info(engine_t *e, engine_cuda_debug_info_t *info) {
        const model_t *m = e->model;

        memset(info, 0, sizeof(*info));
        info->lost = info->failed = selftest_lost[0] != 0;
        snprintf(info->why, sizeof(info->why), "%s", selftest_lost);
        info->residual_kernel = selftest_residual_kernel;
        for (int i = 0; i < m->n_ops; i++)
                if (m->ops[i].kind == MODEL_OP_CONV) {
                        info->convs++;
                        info->bias_fp32[i] = 1;         /* a CPU engine computes in fp32 */
                        info->convs_bias_fp32++;
                }
        info->max_blocks = (unsigned)selftest_max_blocks;
        return 0;
}

int gpu_selftest_debug_set(engine_t *e, int what, long value, errbuf_t *err) {
        (void)e;
        switch (what) {
        case ENGINE_CUDA_SET_RESIDUAL_KERNEL:
                selftest_residual_kernel = value != 0;
                return 0;
        case ENGINE_CUDA_SET_MAX_BLOCKS:
                selftest_max_blocks = value;
                return 0;
        }
        return errbuf_set(err, -EINVAL, "selftest: unknown setting %d", what);
}

int gpu_selftest_mem_info(engine_t *e, uint64_t *used_bytes, uint64_t *total_bytes, errbuf_t *err) {
        uint64_t planned = engine_plan_of(e)->total_bytes;

        if (selftest_lost[0])
                return errbuf_set(err, -EIO, "the CUDA context is lost: %s", selftest_lost);
        selftest_mem_calls++;
        *total_bytes = engine_plan_of(e)->device_memory_bytes;
        if (selftest_broken == 1)       /* over the plan, and growing 2 MiB a call */
                *used_bytes = planned + (selftest_mem_calls << 21);
        else                    /* 95% of the plan, steady */
                *used_bytes = planned / 20 * 19;
        return 0;
}

/* weights: the model's folded weights on the device, once, in the
 * precision (cuda_engine_upload_weights, for open and a model swap), and a
 * conv bias that goes back from fp32 to the precision when cuBLASLt refuses
 * the fp32 one (cuda_engine_bias_to_precision, at open's warm-up).
 *
 * The blocks go where plan_weight_layout() and the CUDA layout put them in
 * the arena; this file allocates nothing on the device. Not the GEMM
 * (gemm.cu) and not the host-side conversion (debug.cu). */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "engine_cuda_impl.h"

/* Uploads every conv/fc weight block (cout, kh, kw, cin) in the precision
 * and its bias in fp32 (the FC, whose logits are fp32, and the convs of
 * ce->bias_fp32) or the precision, at plan_weight_layout()'s offsets. The
 * bias blocks are sized for fp32, so either fits. A conv whose
 * GEMM K is padded (conv1) gets its block as (cout, gemm_k) with zero pad
 * columns in the workspace's padded-weights region instead, and its block
 * in the weights region stays zero. */
int cuda_engine_upload_weights(cuda_engine_t *ce, const model_t *m, errbuf_t *err) {
        size_t w_off[MODEL_MAX_OPS], b_off[MODEL_MAX_OPS];
        uint64_t pw_off[MODEL_MAX_OPS];
        size_t biggest = 0;
        uint8_t *base = ce->arena + ce->L.weights_off;
        float *padded = NULL;           /* (cout, gemm_k) fp32 */
        void *host = NULL;              /* (biggest) in the precision */
        uint64_t total;
        int r = 0;

        total = plan_weight_layout(m, ce->precision, w_off, b_off);
        if (total != ce->L.weights_bytes)
                return errbuf_set(err, -EINVAL, "the weight layout (%llu bytes) disagrees with the plan (%llu bytes)",
                                  (unsigned long long)total, (unsigned long long)ce->L.weights_bytes);
        if (engine_cuda_padded_weights(m, ce->precision, pw_off) != ce->L.padded_w_bytes)
                return errbuf_set(err, -EINVAL, "the padded weights disagree with the CUDA layout");
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t elems;

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                elems = (size_t)op->cout * engine_cuda_gemm_k(op);
                if (elems > biggest)
                        biggest = elems;
        }
        host = malloc(biggest * sizeof(float));
        padded = (float *)malloc(biggest * sizeof(float));
        if (!host || !padded) {
                r = errbuf_set(err, -ENOMEM, "out of host memory converting the weights");
                goto fail;
        }

        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t k = (size_t)op->kh * op->kw * op->cin, gk;
                const float *src;
                /* The FC's bias is of its fp32 logits; a conv's is fp32 when
                 * ce->bias_fp32 asks for it (open's warm-up may still turn it
                 * to the precision: cuda_engine_bias_to_precision). */
                precision_t bias_p = op->kind == MODEL_OP_FC || ce->bias_fp32[i] ? PRECISION_FP32 : ce->precision;
                char what[96];

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                gk = engine_cuda_gemm_k(op);
                assert(w_off[i] % ENGINE_CUDA_ALIGN_BYTES == 0 && b_off[i] % ENGINE_CUDA_ALIGN_BYTES == 0);
                assert(w_off[i] + op->cout * k * ce->pb <= total && b_off[i] + (size_t)op->cout * sizeof(float) <= total);
                src = m->weights + op->w_off;
                if (gk == k) {
                        ce->w[i] = base + w_off[i];
                } else {
                        assert(pw_off[i] + op->cout * gk * ce->pb <= ce->L.padded_w_bytes);
                        ce->w[i] = ce->arena + ce->L.padded_w_off + pw_off[i];
                        for (int o = 0; o < op->cout; o++) {
                                memcpy(padded + o * gk, src + o * k, k * sizeof(float));
                                memset(padded + o * gk + k, 0, (gk - k) * sizeof(float));
                        }
                        src = padded;
                }
                ce->bias[i] = base + b_off[i];

                cuda_host_from_f32(ce->precision, src, op->cout * gk, host);
                snprintf(what, sizeof(what), "uploading the weights of %s", op->name);
                CUDA_GOTO(cudaMemcpy(ce->w[i], host, op->cout * gk * ce->pb, cudaMemcpyHostToDevice), what);
                cuda_host_from_f32(bias_p, m->biases + op->b_off, (size_t)op->cout, host);
                snprintf(what, sizeof(what), "uploading the bias of %s", op->name);
                CUDA_GOTO(cudaMemcpy(ce->bias[i], host, (size_t)op->cout * precision_bytes(bias_p),
                                     cudaMemcpyHostToDevice),
                          what);
        }
        /* cudaMemcpy from pageable memory may return before its last DMA
         * lands, and it runs on the legacy stream, which the non-blocking
         * compute stream does not wait for: finish it before any kernel
         * reads the weights. */
        CUDA_GOTO(cudaDeviceSynchronize(), "uploading the weights");
fail:
        free(padded);
        free(host);
        return r;
}

int cuda_engine_bias_to_precision(cuda_engine_t *ce, int i, errbuf_t *err) {
        const model_op_t *op = &ce->model->ops[i];
        void *host;
        int r = 0;

        assert(op->kind == MODEL_OP_CONV && ce->bias_fp32[i] && ce->model->biases);
        host = malloc((size_t)op->cout * sizeof(float));
        if (!host)
                return errbuf_set(err, -ENOMEM, "out of host memory converting a bias");
        cuda_host_from_f32(ce->precision, ce->model->biases + op->b_off, (size_t)op->cout, host);
        /* On the compute stream: after every GEMM already queued that reads
         * the fp32 bias, before every one that will read this. */
        CUDA_GOTO(cudaMemcpyAsync(ce->bias[i], host, (size_t)op->cout * ce->pb, cudaMemcpyHostToDevice, ce->compute),
                  "uploading a bias in the precision");
        CUDA_GOTO(cudaStreamSynchronize(ce->compute), "uploading a bias in the precision");
        ce->bias_fp32[i] = 0;
        ce->bias_changed = 1;
fail:
        free(host);
        return r;
}

/* forward: the model's ResNet (model.h's table) as a sequence of launches on one stream.
 *
 * It walks the model's layer table and enqueues, for n samples of a slot:
 *
 *   preprocess   slot records (packed by format) -> input (n, 224, 224, 3)
 *   conv         im2col into the workspace when needed (K padded to a
 *                multiple of 8, against a zero-padded weight copy), then one cuBLASLt
 *                GEMM with bias (+ residual through C) (+ ReLU) fused:
 *                in (n, h, w, cin) -> out (n, ho, wo, cout); with
 *                ce->residual_kernel, a conv with a residual is the GEMM
 *                with the BIAS epilogue alone, then cuda_add_relu
 *   maxpool      (n, 112, 112, 64) -> (n, 56, 56, 64)
 *   avgpool      (n, 7, 7, F) -> (n, F); F = 512 (basic) or 2048; with
 *                embeddings planned, its fp32 means also go to the slot's
 *                embedding region (n, F) fp32, copied back with the logits
 *   fc           (n, F) -> the slot's logits (n, classes) fp32: the FC
 *                writes fp32 straight into the slot's device staging
 *                instead of the model's logits tensor, whatever the precision
 *   head         slot logits -> slot top-k (n, top_k)
 *
 * It enqueues only, so it serves both the graph capture at open and the
 * single steps of the GPU tests. Every pointer comes from the arena layout
 * (engine_cuda_plan.h); nothing is allocated. Every error is prefixed with
 * the layer's name. The GEMMs go through the engine's plan cache
 * (cuda_gemm.h), keyed by op index: the warm-up at open plans them outside
 * any capture. */
#include <assert.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "engine_cuda_impl.h"

int cuda_forward_preprocess(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err) {
        uint8_t *dev = cuda_engine_slot_dev(ce, slot);

        return cuda_preprocess(s, ce->precision, dev + ce->L.slot.input_off,
                               (const int32_t *)(dev + ce->L.slot.formats_off),
                               (const int64_t *)(dev + ce->L.slot.offsets_off), n,
                               cuda_engine_tensor(ce, ce->model->input), err);
}

/* The slot's embedding region (fp32), or NULL when none is planned. */
static float *cuda_forward_features(cuda_engine_t *ce, int slot) {
        if (ce->L.slot.embedding_bytes == 0)
                return NULL;
        return (float *)(cuda_engine_slot_dev(ce, slot) + ce->L.slot.embedding_off);
}

int cuda_forward_head(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err) {
        uint8_t *dev = cuda_engine_slot_dev(ce, slot);

        return cuda_head(s, (const float *)(dev + ce->L.slot.logits_off), n, ce->model->classes, ce->top_k,
                         (engine_topk_t *)(dev + ce->L.slot.topk_off), err);
}

/* The GEMM of conv or FC op i, for n samples of slot (the FC writes into
 * the slot's logits). In the residual-kernel mode a conv with a residual
 * gets the BIAS epilogue alone (no C, no ReLU): forward_conv adds the
 * residual and the ReLU afterwards. */
static void forward_gemm_of(cuda_engine_t *ce, int i, int slot, int n, cuda_gemm_t *g) {
        const model_op_t *op = &ce->model->ops[i];
        int residual_kernel = op->residual >= 0 && ce->residual_kernel;

        memset(g, 0, sizeof(*g));
        g->ab = ce->precision;
        g->w = ce->w[i];
        g->bias = ce->bias[i];
        g->n = op->cout;
        if (op->kind == MODEL_OP_FC) {
                g->m = n;
                g->k = op->cin;
                g->d_fp32 = 1;
                g->a = cuda_engine_tensor(ce, op->in);
                g->lda = op->cin;
                g->d = cuda_engine_slot_dev(ce, slot) + ce->L.slot.logits_off;
                g->relu = op->relu;
                return;
        }
        g->m = (int64_t)n * op->h_out * op->w_out;
        g->k = (int64_t)engine_cuda_gemm_k(op);         /* kh * kw * cin, padded for im2col (conv1: 147 -> 152) */
        g->bias_fp32 = ce->bias_fp32[i];
        g->c = op->residual >= 0 && !residual_kernel ? cuda_engine_tensor(ce, op->residual) : NULL;
        g->d = cuda_engine_tensor(ce, op->out);
        g->relu = op->relu && !residual_kernel;
        if (engine_cuda_op_needs_im2col(op)) {
                g->a = ce->arena + ce->L.im2col_off;    /* (m, k) */
                g->lda = g->k;
        } else {
                g->a = cuda_engine_tensor(ce, op->in);  /* (n * h * w, cin) is already the GEMM's A */
                g->lda = op->cin;
        }
}

static int forward_gemm(cuda_engine_t *ce, cudaStream_t s, int i, const cuda_gemm_t *g, errbuf_t *err) {
        return cuda_gemm_run(ce->gemm, ce->lt, s, i, g, ce->arena + ce->L.lt_workspace_off, ce->L.lt_workspace_bytes,
                             err);
}

static int forward_conv(cuda_engine_t *ce, cudaStream_t s, int i, int n, errbuf_t *err) {
        const model_op_t *op = &ce->model->ops[i];
        const model_tensor_t *tin = &ce->model->tensors[op->in];
        const model_tensor_t *tout = &ce->model->tensors[op->out];
        cuda_gemm_t g;
        int r;

        assert(tin->h == op->h_in && tin->w == op->w_in && tin->c == op->cin);
        assert(tout->h == op->h_out && tout->w == op->w_out && tout->c == op->cout);
        forward_gemm_of(ce, i, 0, n, &g);
        if (engine_cuda_op_needs_im2col(op)) {
                assert((uint64_t)g.m * g.k * ce->pb <= ce->L.im2col_bytes);
                r = cuda_im2col(s, ce->precision, cuda_engine_tensor(ce, op->in), n, op->h_in, op->w_in, op->cin,
                                op->kh, op->kw, op->stride, op->pad, op->h_out, op->w_out, (int)g.k, (void *)g.a, err);
                if (r < 0)
                        return errbuf_prefix(err, r, "%s", op->name);
        } else {
                assert(g.k == op->cin);
        }
        r = forward_gemm(ce, s, i, &g, err);
        if (r == -ENOTSUP && g.bias_fp32 && ce->bias_fallback) {
                /* No kernel takes an fp32 bias here: the bias goes to D's
                 * type for good (the warm-up at open re-runs every shape of
                 * this op with it). */
                r = cuda_engine_bias_to_precision(ce, i, err);
                if (r < 0)
                        return errbuf_prefix(err, r, "%s", op->name);
                g.bias_fp32 = 0;
                r = forward_gemm(ce, s, i, &g, err);
        }
        if (r < 0)
                return errbuf_prefix(err, r, "%s", op->name);
        if (op->residual >= 0 && ce->residual_kernel) {
                r = cuda_add_relu(s, ce->precision, g.d, cuda_engine_tensor(ce, op->residual), g.m * g.n, err);
                if (r < 0)
                        return errbuf_prefix(err, r, "%s", op->name);
        }
        return 0;
}

static int forward_fc(cuda_engine_t *ce, cudaStream_t s, int i, int slot, int n, errbuf_t *err) {
        const model_op_t *op = &ce->model->ops[i];
        cuda_gemm_t g;
        int r;

        assert(ce->model->tensors[op->in].elems == (size_t)op->cin);
        assert(op->cout == ce->model->classes);
        forward_gemm_of(ce, i, slot, n, &g);
        r = forward_gemm(ce, s, i, &g, err);
        if (r < 0)
                return errbuf_prefix(err, r, "%s", op->name);
        return 0;
}

int cuda_forward_op(cuda_engine_t *ce, cudaStream_t s, int i, int slot, int n, errbuf_t *err) {
        const model_op_t *op;
        int r;

        assert(i >= 0 && i < ce->model->n_ops && n >= 1 && n <= ce->max_batch);
        op = &ce->model->ops[i];
        switch (op->kind) {
        case MODEL_OP_CONV:
                return forward_conv(ce, s, i, n, err);
        case MODEL_OP_MAXPOOL:
                assert(op->kh == op->kw);
                r = cuda_maxpool(s, ce->precision, cuda_engine_tensor(ce, op->in), n, op->h_in, op->w_in, op->cin,
                                 op->kh, op->stride, op->pad, op->h_out, op->w_out, cuda_engine_tensor(ce, op->out),
                                 err);
                return r < 0 ? errbuf_prefix(err, r, "%s", op->name) : 0;
        case MODEL_OP_AVGPOOL:
                r = cuda_avgpool(s, ce->precision, cuda_engine_tensor(ce, op->in), n, op->h_in, op->w_in, op->cin,
                                 cuda_engine_tensor(ce, op->out), cuda_forward_features(ce, slot), err);
                return r < 0 ? errbuf_prefix(err, r, "%s", op->name) : 0;
        case MODEL_OP_FC:
                return forward_fc(ce, s, i, slot, n, err);
        }
        assert(!"unknown op kind");
        return errbuf_set(err, -EINVAL, "%s: unknown op kind %d", op->name, (int)op->kind);
}

int cuda_forward(cuda_engine_t *ce, cudaStream_t s, int slot, int n, errbuf_t *err) {
        int r;

        r = cuda_forward_preprocess(ce, s, slot, n, err);
        if (r < 0)
                return r;
        for (int i = 0; i < ce->model->n_ops; i++) {
                r = cuda_forward_op(ce, s, i, slot, n, err);
                if (r < 0)
                        return r;
        }
        return cuda_forward_head(ce, s, slot, n, err);
}

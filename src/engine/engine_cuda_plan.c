/* engine_cuda_plan: the CUDA engine's planner terms and arena layout.
 *
 * Plain C, compiled in every build (with or without nvcc), so that
 * `inferd-run --plan --backend cuda --device-memory 11GiB` works anywhere and
 * CI tests the numbers. See engine_cuda_plan.h for the layout itself. It runs
 * nothing on a device and allocates nothing. */
#include "engine/engine_cuda_plan.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "engine/engine.h"
#include "core/record.h"

static uint64_t align_up(uint64_t x, uint64_t a) {
        return (x + a - 1) / a * a;
}

int engine_cuda_op_needs_im2col(const model_op_t *op) {
        assert(op);
        if (op->kind != MODEL_OP_CONV)
                return 0;
        return op->kh != 1 || op->kw != 1 || op->stride != 1 || op->pad != 0;
}

size_t engine_cuda_gemm_k(const model_op_t *op) {
        size_t k = (size_t)op->kh * op->kw * op->cin;

        assert(op->kind == MODEL_OP_CONV || op->kind == MODEL_OP_FC);
        if (!engine_cuda_op_needs_im2col(op))
                return k;
        return (k + ENGINE_CUDA_K_ALIGN_ELEMS - 1) / ENGINE_CUDA_K_ALIGN_ELEMS * ENGINE_CUDA_K_ALIGN_ELEMS;
}

size_t engine_cuda_im2col_elems_per_sample(const model_t *m) {
        size_t best = 0;

        assert(m);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t elems;

                if (!engine_cuda_op_needs_im2col(op))
                        continue;
                elems = (size_t)op->h_out * op->w_out * engine_cuda_gemm_k(op);
                if (elems > best)
                        best = elems;
        }
        return best;
}

size_t engine_cuda_gemm_operand_elems_per_sample(const model_t *m) {
        size_t best = 0;

        assert(m);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t a, d;

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                if (engine_cuda_op_needs_im2col(op))
                        a = (size_t)op->h_out * op->w_out * engine_cuda_gemm_k(op);
                else
                        a = (size_t)op->h_in * op->w_in * op->cin;
                d = (size_t)op->h_out * op->w_out * op->cout;
                if (a > best)
                        best = a;
                if (d > best)
                        best = d;
        }
        return best;
}

uint64_t engine_cuda_padded_weights(const model_t *m, precision_t p, uint64_t offsets[MODEL_MAX_OPS]) {
        uint64_t off = 0;

        assert(m);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                int padded = (op->kind == MODEL_OP_CONV || op->kind == MODEL_OP_FC) &&
                             engine_cuda_gemm_k(op) != (size_t)op->kh * op->kw * op->cin;

                if (offsets)
                        offsets[i] = padded ? off : 0;
                if (padded)
                        off = align_up(off + (uint64_t)op->cout * engine_cuda_gemm_k(op) * precision_bytes(p),
                                       ENGINE_CUDA_ALIGN_BYTES);
        }
        return off;
}

int engine_cuda_layout_regions(const model_t *m, precision_t p, int depth, int top_k, int batch, bool embedding,
                               engine_cuda_layout_t *ret) {
        engine_cuda_layout_t L;
        uint64_t b, pb, off;

        if (!m || !ret || depth < 1 || batch < 1 || top_k < 1 || top_k > ENGINE_TOPK_MAX || top_k > m->classes)
                return -EINVAL;
        if (p != PRECISION_FP32 && p != PRECISION_FP16 && p != PRECISION_BF16)
                return -EINVAL;

        memset(&L, 0, sizeof(L));
        L.precision = p;
        L.batch = batch;
        L.depth = depth;
        L.top_k = top_k;
        b = (uint64_t)batch;
        pb = precision_bytes(p);

        /* One slot block; the packed input (a multiple of 256 bytes, as both
         * record sizes are) keeps the following regions aligned, the
         * align_up()s keep it so whatever the batch. */
        off = 0;
        L.slot.input_off = off;
        off = align_up(off + pack_capacity_bytes(batch), ENGINE_CUDA_ALIGN_BYTES);
        L.slot.formats_off = off;
        off = align_up(off + b * sizeof(int32_t), ENGINE_CUDA_ALIGN_BYTES);
        L.slot.offsets_off = off;
        off = align_up(off + b * sizeof(int64_t), ENGINE_CUDA_ALIGN_BYTES);
        L.slot.logits_off = off;
        off = align_up(off + b * (uint64_t)m->classes * sizeof(float), ENGINE_CUDA_ALIGN_BYTES);
        L.slot.topk_off = off;
        off = align_up(off + b * (uint64_t)top_k * sizeof(engine_topk_t), ENGINE_CUDA_ALIGN_BYTES);
        L.slot.embedding_off = off;
        L.slot.embedding_bytes =
                embedding ? align_up(b * (uint64_t)model_embedding_dim(m) * sizeof(float), ENGINE_CUDA_ALIGN_BYTES) : 0;
        off += L.slot.embedding_bytes;
        L.slot.bytes = off;

        L.pinned_host_bytes = (uint64_t)depth * L.slot.bytes;

        /* The pad after the slots absorbs the one unaligned boundary of the
         * arena: the weights' total (plan_weight_layout) need not be a
         * multiple of the alignment, and the activations after it must start
         * on one. Everything before the weights is already aligned. */
        L.staging_off = 0;
        L.staging_bytes = (uint64_t)depth * L.slot.bytes + ENGINE_CUDA_ALIGN_BYTES;

        L.workspace_off = L.staging_off + L.staging_bytes;
        L.lt_workspace_off = L.workspace_off;
        L.lt_workspace_bytes = ENGINE_CUDA_LT_WORKSPACE_BYTES;
        L.im2col_off = L.lt_workspace_off + L.lt_workspace_bytes;
        L.im2col_bytes = align_up(engine_cuda_im2col_elems_per_sample(m) * b * pb, ENGINE_CUDA_ALIGN_BYTES);
        L.head_scratch_bytes = 0;
        L.padded_w_off = L.im2col_off + L.im2col_bytes + L.head_scratch_bytes;
        L.padded_w_bytes = engine_cuda_padded_weights(m, p, NULL);
        L.workspace_bytes = L.lt_workspace_bytes + L.im2col_bytes + L.head_scratch_bytes + L.padded_w_bytes;

        *ret = L;
        return 0;
}

int engine_cuda_layout_of_plan(const model_t *m, const plan_t *plan, engine_cuda_layout_t *ret) {
        engine_cuda_layout_t L;
        int r;

        if (!m || !plan || !ret)
                return -EINVAL;
        r = engine_cuda_layout_regions(m, plan->precision, plan->pipeline_depth, plan->top_k, plan->max_batch,
                                       plan->embedding_dim > 0, &L);
        if (r < 0)
                return r;

        L.weights_off = L.workspace_off + L.workspace_bytes;
        L.weights_bytes = plan->weights_bytes;
        L.activations_off = align_up(L.weights_off + L.weights_bytes, ENGINE_CUDA_ALIGN_BYTES);
        L.activation_bytes = plan->activation_bytes;
        L.arena_bytes = L.staging_bytes + L.workspace_bytes + L.weights_bytes + L.activation_bytes;
        /* The pad counted in staging_bytes covers the alignment above. */
        assert(L.weights_off % ENGINE_CUDA_ALIGN_BYTES == 0);
        assert(L.activations_off + L.activation_bytes <= L.arena_bytes);
        *ret = L;
        return 0;
}

int engine_cuda_buckets(int max_batch, int buckets[ENGINE_CUDA_MAX_BUCKETS]) {
        int n = 0;

        if (max_batch < 1 || !buckets)
                return -EINVAL;
        for (int64_t b = 1; b < max_batch; b *= 2) {
                assert(n < ENGINE_CUDA_MAX_BUCKETS - 1);
                buckets[n++] = (int)b;
        }
        buckets[n++] = max_batch;
        return n;
}

int engine_cuda_bucket_index(const int *buckets, int n_buckets, int n) {
        for (int i = 0; i < n_buckets; i++)
                if (buckets[i] >= n)
                        return i;
        return -1;
}

/* The planner's terms at `batch`: everything engine_cuda_layout_regions()
 * places, plus the context (measured at open, else the estimate) and the
 * graphs (depth x buckets executable graphs, an estimate each, and the
 * lazily loaded kernel modules). */
int engine_cuda_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret) {
        engine_cuda_layout_t L;
        int buckets[ENGINE_CUDA_MAX_BUCKETS];
        int n_buckets, r;

        if (!m || !req || !ret)
                return -EINVAL;
        r = engine_cuda_layout_regions(m, req->precision, req->pipeline_depth, req->top_k, batch, req->embedding, &L);
        if (r < 0)
                return r;
        n_buckets = engine_cuda_buckets(batch, buckets);
        if (n_buckets < 0)
                return n_buckets;

        memset(ret, 0, sizeof(*ret));
        ret->context_bytes = req->measured_context_bytes ? req->measured_context_bytes
                                                         : ENGINE_CUDA_CONTEXT_ESTIMATE_BYTES;
        ret->graph_bytes = (uint64_t)req->pipeline_depth * (uint64_t)n_buckets * ENGINE_CUDA_GRAPH_BYTES_EACH +
                           ENGINE_CUDA_MODULE_BYTES;
        ret->workspace_bytes = L.workspace_bytes;
        ret->staging_bytes = L.staging_bytes;
        ret->pinned_host_bytes = L.pinned_host_bytes;
        ret->embedding_bytes = (uint64_t)req->pipeline_depth * L.slot.embedding_bytes;
        ret->weights_in_arena = true;
        ret->gemm_operand_elems_per_sample = engine_cuda_gemm_operand_elems_per_sample(m);
        return 0;
}

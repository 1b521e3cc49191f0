/* engine_cpu: the CPU executor of the plan: oneDNN's convolutions and max
 * pool (cpu_dnnl), cpu_ops for the rest.
 *
 * One worker thread runs submitted slots in order, so the caller's thread
 * (the daemon's event loop) never waits behind a batch. Completion is an
 * eventfd in semaphore mode: one readable count per finished slot, so the
 * loop can reap exactly as many slots as were finished without a race.
 * oneDNN's OpenMP threads (plan_request_t cpu_threads) run under it.
 *
 * Precision: fp32, or bf16 where the CPU has a bf16 kernel (engine.c
 * refuses it elsewhere): then the activations between the layers are bf16
 * (NHWC), the convs and the max pool oneDNN's bf16 primitives (fp32
 * accumulation), and the input is preprocessed in fp32 and rounded to bf16;
 * the global average pool widens to fp32, and the fc (OpenBLAS, a few MFLOP)
 * and the head stay fp32, the fc writing the slot's logits directly.
 *
 * Memory: one weight set. oneDNN's reordered copy of the convs' weights (the
 * plan's weights_copy_bytes: bf16 in bf16) replaces the model's folded fp32
 * blocks of them, which open frees once the reorder is done
 * (model_drop_conv_weights; the reference, which reads them, and tests that
 * open a second engine on the model keep them); the fc's fp32 weights and
 * every bias stay in the model's blocks. With them, the code oneDNN generates for its
 * primitives (the plan's context term: cpu_dnnl_kernel_bytes_each a
 * primitive, a measured bound); one arena holds the activations at
 * max_batch in the precision (placed by the plan, which this engine's terms
 * ask to put a residual conv's output over its dead residual input: oneDNN
 * adds it as a sum post-op, in place) and the workspace (oneDNN's scratchpad, in user
 * mode, which in bf16 also holds one sample in fp32 and the fc's fp32 input;
 * the reference's im2col scratch instead when the engine runs cpu_ops'
 * convolutions, a test-only option); one host block holds every slot's records (packed by format,
 * engine/pack.h) and results. All are sized by engine_cpu_layout, the same
 * function that gives the plan its terms, and nothing is allocated per
 * batch. A model swap (engine_swap) builds the new model's primitives and
 * reordered weights (its plan counts them), then points the engine at them
 * and carves its plan from the same two allocations, which it keeps (its
 * plan charges them whole: e->held_*); while the new file is staged, host
 * memory holds the old set and the new one, and one once the caller frees
 * the old.
 *
 * It is not fast by cleverness: the speed is oneDNN's (and OpenBLAS's for
 * the fc and the reference). */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "engine/cpu_dnnl.h"

/* OpenBLAS's own (declared here, as cblas.h variants differ). */
void openblas_set_num_threads(int n);
#include "engine/cpu_ops.h"
#include "engine/engine.h"

/* The im2col scratch is capped (in floats); a convolution whose batch needs
 * more is run in chunks of samples. 16 Mi floats = 64 MiB. */
#define ENGINE_CPU_IM2COL_CAP_ELEMS ((size_t)16 << 20)
#define ENGINE_CPU_ALIGN 64

typedef struct engine_cpu_layout {
        size_t activation_bytes;        /* arena: activations of max_batch */
        size_t workspace_bytes;         /* arena: oneDNN's scratchpad (the reference: im2col scratch); in
                                         * bf16 at least one sample and the fc's input in fp32 */
        size_t sample_elems;            /* bf16: the workspace's fp32 sample, at its start */
        size_t fc_in_elems;             /* bf16: the fc's fp32 input (max_batch, cin), after the sample */
        size_t elem_bytes;              /* of an activation: precision_bytes */
        size_t weights_copy_bytes;      /* oneDNN's reordered weights (0 for the reference) */
        size_t kernel_bytes;            /* oneDNN's primitives' code (0 for the reference) */
        size_t input_bytes_per_slot;    /* host: pack_capacity_bytes(batch), records packed by format */
        size_t logits_bytes_per_slot;   /* host: (batch, classes) fp32 */
        size_t topk_bytes_per_slot;     /* host: (batch, top_k) */
        size_t embedding_bytes_per_slot; /* host: (batch, embedding dim) fp32, or 0 without embeddings */
        size_t host_bytes;              /* all slots */
} engine_cpu_layout_t;

static size_t engine_cpu_align(size_t v) {
        return (v + ENGINE_CPU_ALIGN - 1) / ENGINE_CPU_ALIGN * ENGINE_CPU_ALIGN;
}

static void engine_cpu_shape(const model_op_t *op, int n, cpu_conv_shape_t *s) {
        *s = (cpu_conv_shape_t){
                .n = n, .h = op->h_in, .w = op->w_in, .cin = op->cin, .cout = op->cout,
                .kh = op->kh, .kw = op->kw, .stride = op->stride, .pad = op->pad,
        };
        cpu_conv_shape_finish(s);
}

/* The reference's im2col scratch at batch: the largest conv's, in chunks
 * of samples under ENGINE_CPU_IM2COL_CAP_ELEMS. */
static size_t engine_cpu_im2col_bytes(const model_t *m, int batch) {
        size_t ws = 0;

        for (int i = 0; i < m->n_ops; i++) {
                cpu_conv_shape_t s;
                size_t need;

                if (m->ops[i].kind != MODEL_OP_CONV)
                        continue;
                engine_cpu_shape(&m->ops[i], batch, &s);
                need = cpu_conv2d_workspace_elems(&s, cpu_conv2d_chunk_samples(&s, ENGINE_CPU_IM2COL_CAP_ELEMS));
                if (need > ws)
                        ws = need;
        }
        return ws * sizeof(float);
}

/* bf16's fp32 staging in the workspace: one sample (the input, or the
 * global average pool's input) and the fc's input at batch. */
static void engine_cpu_bf16_staging(const model_t *m, int batch, size_t *sample_elems, size_t *fc_in_elems) {
        *sample_elems = m->tensors[m->input].elems;
        *fc_in_elems = 0;
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t pool = (size_t)op->h_in * op->w_in * op->cin;

                if (op->kind == MODEL_OP_AVGPOOL && pool > *sample_elems)
                        *sample_elems = pool;
                if (op->kind == MODEL_OP_FC && (size_t)batch * op->cin > *fc_in_elems)
                        *fc_in_elems = (size_t)batch * op->cin;
        }
}

/* The layout of m at batch for activations placed as tensor_offset says,
 * in an arena of arena_elems_per_sample a sample (a plan's placement). */
static int engine_cpu_layout(const model_t *m, const size_t tensor_offset[MODEL_MAX_TENSORS],
                             size_t arena_elems_per_sample, int batch, int depth, int top_k, precision_t p,
                             bool reference, bool embedding, engine_cpu_layout_t *l, errbuf_t *err) {
        size_t ws = 0, copy = 0, kernels = 0;

        memset(l, 0, sizeof(*l));
        if (reference) {
                if (p != PRECISION_FP32)
                        return errbuf_set(err, -EINVAL, "the reference CPU engine computes in fp32 only, not %s",
                                          precision_name(p));
                ws = engine_cpu_im2col_bytes(m, batch);
        } else {
                int r = cpu_dnnl_sizes(m, batch, p, tensor_offset, &ws, &copy, &kernels, err);

                if (r < 0)
                        return r;
        }
        if (p == PRECISION_BF16) {
                /* Not live while a primitive runs: it shares the scratchpad's bytes. */
                engine_cpu_bf16_staging(m, batch, &l->sample_elems, &l->fc_in_elems);
                if ((l->sample_elems + l->fc_in_elems) * sizeof(float) > ws)
                        ws = (l->sample_elems + l->fc_in_elems) * sizeof(float);
        }
        l->elem_bytes = precision_bytes(p);
        l->activation_bytes = engine_cpu_align(arena_elems_per_sample * (size_t)batch * l->elem_bytes);
        l->workspace_bytes = engine_cpu_align(ws);
        l->weights_copy_bytes = copy;
        l->kernel_bytes = kernels;
        l->input_bytes_per_slot = engine_cpu_align(pack_capacity_bytes(batch));
        l->logits_bytes_per_slot = engine_cpu_align((size_t)batch * m->classes * sizeof(float));
        l->topk_bytes_per_slot = engine_cpu_align((size_t)batch * top_k * sizeof(engine_topk_t));
        l->embedding_bytes_per_slot =
                embedding ? engine_cpu_align((size_t)batch * model_embedding_dim(m) * sizeof(float)) : 0;
        l->host_bytes = (size_t)depth * (l->input_bytes_per_slot + l->logits_bytes_per_slot + l->topk_bytes_per_slot +
                                         l->embedding_bytes_per_slot);
        return 0;
}

int engine_cpu_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret) {
        size_t offsets[MODEL_MAX_TENSORS], arena;
        engine_cpu_layout_t l;
        errbuf_t err;
        /* oneDNN's convs write a residual conv's output over its residual
         * (a sum post-op); the reference's cpu_conv2d reads the residual
         * after writing its output, so not there. */
        bool in_place = !req->cpu_reference;
        int r;

        if (req->precision != PRECISION_FP32 && req->precision != PRECISION_BF16)
                return -EINVAL;
        arena = plan_place_tensors(m, in_place, offsets);
        r = engine_cpu_layout(m, offsets, arena, batch, req->pipeline_depth, req->top_k, req->precision,
                              req->cpu_reference, req->embedding, &l, &err);
        if (r < 0)
                return r;
        /* The activations are the planner's own term (placed as asked
         * here); the arena adds the workspace, the weights term oneDNN's
         * copy, the context term (the CUDA context's on the other engine)
         * its primitives' code. */
        *ret = (plan_engine_terms_t){
                .context_bytes = l.kernel_bytes,
                .workspace_bytes = l.workspace_bytes,
                .pinned_host_bytes = l.host_bytes,
                .weights_copy_bytes = l.weights_copy_bytes,
                .residual_in_place = in_place,
                .embedding_bytes = (uint64_t)req->pipeline_depth * l.embedding_bytes_per_slot,
        };
        return 0;
}

int engine_cpu_precision_check(precision_t p, const engine_options_t *o, errbuf_t *err) {
        if (p == PRECISION_FP32)
                return 0;
        if (p != PRECISION_BF16)
                return errbuf_set(err, -EINVAL, "the CPU engine computes in fp32 or bf16, not %s", precision_name(p));
        if (o->cpu_no_bf16 || !cpu_dnnl_has_bf16())
                return errbuf_set(err, -EOPNOTSUPP,
                                  "the CPU engine's bf16 needs AVX512_BF16 or AMX, which this CPU lacks (oneDNN's "
                                  "instruction set here: %s%s); use [model] precision = fp32",
                                  cpu_dnnl_isa(), o->cpu_no_bf16 ? ", its bf16 hidden by a test" : "");
        if (o->cpu_reference)
                return errbuf_set(err, -EINVAL, "the reference CPU engine computes in fp32 only, not bf16");
        return 0;
}

typedef struct engine_cpu {
        engine_cpu_layout_t layout;
        cpu_dnnl_t *dnnl;       /* the model's primitives and reordered weights; NULL: the reference */
        precision_t precision;  /* fp32 or bf16: the activations' */
        int threads;            /* oneDNN's OpenMP threads, set on the worker; 0: OpenMP's default */
        void *arena;            /* activations, then workspace */
        void *host;             /* per slot: inputs, logits, top-k */
        size_t arena_alloc_bytes, host_alloc_bytes;     /* as allocated at open: a swap carves within them */
        void *activations;      /* tensor t at activations + max_batch * tensor_offset[t] elements */
        float *workspace;
        int efd;                /* eventfd, EFD_SEMAPHORE */
        pthread_t worker;
        int worker_started;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        int stopping;
        int *queue;             /* (depth) ring of submitted slots */
        int queue_head, queue_len;
        int *done;              /* (depth) ring of finished slots */
        int done_head, done_len;
} engine_cpu_t;

static unsigned char *engine_cpu_slot_base(engine_t *e, int slot) {
        engine_cpu_t *c = e->impl;

        return (unsigned char *)c->host + (size_t)slot * (c->layout.input_bytes_per_slot +
                                                          c->layout.logits_bytes_per_slot +
                                                          c->layout.topk_bytes_per_slot +
                                                          c->layout.embedding_bytes_per_slot);
}

static void *engine_cpu_slot_input(engine_t *e, int slot) {
        return engine_cpu_slot_base(e, slot);
}

static const float *engine_cpu_slot_logits(engine_t *e, int slot) {
        engine_cpu_t *c = e->impl;

        return (const float *)(engine_cpu_slot_base(e, slot) + c->layout.input_bytes_per_slot);
}

static const engine_topk_t *engine_cpu_slot_topk(engine_t *e, int slot) {
        engine_cpu_t *c = e->impl;

        return (const engine_topk_t *)(engine_cpu_slot_base(e, slot) + c->layout.input_bytes_per_slot +
                                       c->layout.logits_bytes_per_slot);
}

static const float *engine_cpu_slot_embedding(engine_t *e, int slot) {
        engine_cpu_t *c = e->impl;

        if (c->layout.embedding_bytes_per_slot == 0)
                return NULL;
        return (const float *)(engine_cpu_slot_base(e, slot) + c->layout.input_bytes_per_slot +
                               c->layout.logits_bytes_per_slot + c->layout.topk_bytes_per_slot);
}

/* Tensor t of the arena: fp32, or bf16 (uint16_t) in bf16. */
static void *engine_cpu_tensor(engine_t *e, int t) {
        engine_cpu_t *c = e->impl;

        return (char *)c->activations + (size_t)e->plan.max_batch * e->plan.tensor_offset[t] * c->layout.elem_bytes;
}

/* The n records of slot into the input tensor: fp32 as preprocessed, or
 * each sample preprocessed into the workspace and rounded to bf16. */
static void engine_cpu_preprocess(engine_t *e, int slot, int n) {
        engine_cpu_t *c = e->impl;
        const model_t *m = e->model;
        const unsigned char *records = engine_cpu_slot_base(e, slot);   /* packed: record i at offsets[i] */
        const uint64_t *offsets = e->offsets + (size_t)slot * e->plan.max_batch;
        size_t in_elems = m->tensors[m->input].elems;
        void *input = engine_cpu_tensor(e, m->input);

        for (int i = 0; i < n; i++) {
                const unsigned char *rec = records + offsets[i];
                float *x = c->precision == PRECISION_BF16 ? c->workspace : (float *)input + i * in_elems;

                if (e->formats[(size_t)slot * e->plan.max_batch + i] == RECORD_RGB8)
                        cpu_preprocess_rgb8(rec, x);
                else
                        cpu_preprocess_f32_chw(rec, x);
                if (c->precision == PRECISION_BF16)
                        cpu_dnnl_to_bf16(x, (uint16_t *)input + i * in_elems, in_elems);
        }
}

/* bf16's global average pool: each sample widened to fp32 in the
 * workspace, averaged into the fc's fp32 input (after the sample). */
static void engine_cpu_avgpool_bf16(engine_t *e, const model_op_t *op, int n, const uint16_t *in) {
        engine_cpu_t *c = e->impl;
        size_t elems = (size_t)op->h_in * op->w_in * op->cin;
        float *sample = c->workspace, *fc_in = c->workspace + c->layout.sample_elems;

        for (int i = 0; i < n; i++) {
                cpu_dnnl_from_bf16(in + i * elems, sample, elems);
                cpu_global_avgpool(1, op->h_in, op->w_in, op->cin, sample, fc_in + (size_t)i * op->cin);
        }
}

/* The slot's embeddings: the fc's input, the pooled features (n, dim)
 * fp32, which nothing has overwritten since the fc read them (in fp32 the
 * pool's output tensor, live until the fc; in bf16 the fc's fp32 input in
 * the workspace). After a primitive failed they are NaN, as the logits. */
static void engine_cpu_embedding(engine_t *e, int slot, int n, int failed) {
        engine_cpu_t *c = e->impl;
        const model_t *m = e->model;
        const model_op_t *fc = &m->ops[m->n_ops - 1];
        float *out = (float *)engine_cpu_slot_embedding(e, slot);
        size_t elems = (size_t)n * fc->cin;

        assert(fc->kind == MODEL_OP_FC && fc->cin == e->plan.embedding_dim);
        if (failed) {
                for (size_t i = 0; i < elems; i++)
                        out[i] = NAN;
                return;
        }
        memcpy(out, c->precision == PRECISION_BF16 ? c->workspace + c->layout.sample_elems
                                                     : (const float *)engine_cpu_tensor(e, fc->in),
               elems * sizeof(float));
}

/* The whole network for the n records of slot: preprocess, every op of the
 * table, then softmax and top-k into the slot's results. */
static void engine_cpu_forward(engine_t *e, int slot, int n) {
        engine_cpu_t *c = e->impl;
        const model_t *m = e->model;
        float *logits = (float *)engine_cpu_slot_logits(e, slot);
        engine_topk_t *top = (engine_topk_t *)engine_cpu_slot_topk(e, slot);
        int bf16 = c->precision == PRECISION_BF16, failed = 0;

        engine_cpu_preprocess(e, slot, n);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                void *in = engine_cpu_tensor(e, op->in), *out = engine_cpu_tensor(e, op->out);
                void *res = op->residual >= 0 ? engine_cpu_tensor(e, op->residual) : NULL;
                cpu_conv_shape_t s;

                engine_cpu_shape(op, n, &s);
                if (c->dnnl && cpu_dnnl_runs(c->precision, op->kind)) {
                        if (cpu_dnnl_op(c->dnnl, i, n, in, res, out, c->workspace) < 0)
                                failed = 1;
                        continue;
                }
                switch (op->kind) {
                case MODEL_OP_CONV:
                        /* The reference's plan keeps the output off its residual,
                         * and its model keeps the convs' weights. */
                        assert(!res || res != out);
                        assert(!m->conv_weights_dropped);
                        cpu_conv2d(&s, in, m->weights + op->w_off, m->biases + op->b_off, res, op->relu, out,
                                   c->workspace, c->layout.workspace_bytes / sizeof(float));
                        break;
                case MODEL_OP_MAXPOOL:
                        cpu_maxpool(&s, in, out);
                        break;
                case MODEL_OP_AVGPOOL:
                        if (bf16)
                                engine_cpu_avgpool_bf16(e, op, n, in);
                        else
                                cpu_global_avgpool(n, op->h_in, op->w_in, op->cin, in, out);
                        break;
                case MODEL_OP_FC:
                        /* In bf16 the fc reads the pool's fp32 output from the
                         * workspace and writes the logits in place. */
                        assert(!bf16 || op->out == m->logits);
                        cpu_fc(n, op->cin, op->cout, bf16 ? c->workspace + c->layout.sample_elems : in,
                               m->weights + op->w_off, m->biases + op->b_off, bf16 ? logits : out);
                        break;
                }
        }
        if (!bf16)
                memcpy(logits, engine_cpu_tensor(e, m->logits), (size_t)n * m->classes * sizeof(float));
        if (c->layout.embedding_bytes_per_slot)
                engine_cpu_embedding(e, slot, n, failed);
        /* A primitive that failed to execute (made at open, it has no
         * reason to) leaves its rows marked non-finite, not wrong. */
        for (size_t i = 0; failed && i < (size_t)n * m->classes; i++)
                logits[i] = NAN;
        /* A row with non-finite logits is marked, not ranked (engine.h). */
        for (int i = 0; i < n; i++)
                cpu_head_row(logits + (size_t)i * m->classes, m->classes, e->plan.top_k,
                             top + (size_t)i * e->plan.top_k);
}

static void *engine_cpu_worker(void *userdata) {
        engine_t *e = userdata;
        engine_cpu_t *c = e->impl;
        int depth = e->plan.pipeline_depth;

        /* OpenMP's thread count is this thread's: oneDNN's parallel regions
         * start from here. 0 leaves OpenMP's default (OMP_NUM_THREADS, else
         * the CPUs this process may run on). */
        if (c->threads > 0)
                omp_set_num_threads(c->threads);
        pthread_mutex_lock(&c->lock);
        for (;;) {
                int slot;
                uint64_t one = 1;

                while (!c->stopping && c->queue_len == 0)
                        pthread_cond_wait(&c->wake, &c->lock);
                if (c->queue_len == 0)
                        break;          /* stopping, and nothing left to run */
                slot = c->queue[c->queue_head];
                pthread_mutex_unlock(&c->lock);

                engine_cpu_forward(e, slot, e->slot_n[slot]);

                pthread_mutex_lock(&c->lock);
                c->queue_head = (c->queue_head + 1) % depth;
                c->queue_len--;
                c->done[(c->done_head + c->done_len) % depth] = slot;
                c->done_len++;
                /* An eventfd write of 1 cannot fail short of a counter
                 * overflow, which depth slots cannot reach. */
                if (write(c->efd, &one, sizeof(one)) != sizeof(one))
                        abort();
        }
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

static void engine_cpu_close(engine_t *e) {
        engine_cpu_t *c = e->impl;

        if (!c)
                return;
        if (c->worker_started) {
                pthread_mutex_lock(&c->lock);
                c->stopping = 1;
                pthread_cond_signal(&c->wake);
                pthread_mutex_unlock(&c->lock);
                pthread_join(c->worker, NULL);
        }
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->wake);
        if (c->efd >= 0)
                close(c->efd);
        cpu_dnnl_free(c->dnnl);
        free(c->arena);
        free(c->host);
        free(c->queue);
        free(c->done);
        free(c);
        e->impl = NULL;
}

static int engine_cpu_open(engine_t *e, errbuf_t *err) {
        engine_cpu_t *c;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c)
                return errbuf_set(err, -ENOMEM, "out of memory");
        e->impl = c;
        c->efd = -1;
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->wake, NULL);
        c->threads = e->request.cpu_threads;
        c->precision = e->plan.precision;
        r = engine_cpu_layout(e->model, e->plan.tensor_offset, e->plan.arena_elems_per_sample, e->plan.max_batch,
                              e->plan.pipeline_depth, e->plan.top_k, c->precision, e->request.cpu_reference,
                              e->request.embedding, &c->layout, err);
        if (r < 0)
                goto fail;
        /* The plan and the carve come from the same layout function. */
        if (c->layout.workspace_bytes != e->plan.workspace_bytes ||
            c->layout.weights_copy_bytes != e->plan.engine.weights_copy_bytes ||
            c->layout.host_bytes != e->plan.engine.pinned_host_bytes) {
                r = errbuf_set(err, -EINVAL, "the CPU engine's layout disagrees with its plan");
                goto fail;
        }
        if (posix_memalign(&c->arena, ENGINE_CPU_ALIGN, c->layout.activation_bytes + c->layout.workspace_bytes) ||
            posix_memalign(&c->host, ENGINE_CPU_ALIGN, c->layout.host_bytes)) {
                r = errbuf_set(err, -ENOMEM, "cannot allocate the planned %zu + %zu bytes",
                               c->layout.activation_bytes + c->layout.workspace_bytes, c->layout.host_bytes);
                goto fail;
        }
        if (!e->request.cpu_reference) {
                /* oneDNN holds the convs' weights from now on: one weight set. */
                r = cpu_dnnl_new(&c->dnnl, e->model, e->plan.max_batch, c->precision, e->plan.tensor_offset,
                                 !e->request.cpu_keep_conv_weights, err);
                if (r < 0)
                        goto fail;
                /* Beside oneDNN, OpenBLAS runs only the fc (a few MFLOP):
                 * on one thread, as its idle threads spin (sched_yield)
                 * through the convolutions that follow, taking the cores
                 * from oneDNN's (a fifth of the CPU time at batch 1 on 2
                 * cores). The setting is the process's: the reference,
                 * which needs OpenBLAS's threads, is for tests only. */
                openblas_set_num_threads(1);
        }
        c->arena_alloc_bytes = c->layout.activation_bytes + c->layout.workspace_bytes;
        c->host_alloc_bytes = c->layout.host_bytes;
        e->held_arena_bytes = c->arena_alloc_bytes;
        e->held_pinned_host_bytes = c->host_alloc_bytes;
        c->activations = c->arena;
        c->workspace = (float *)((char *)c->arena + c->layout.activation_bytes);
        c->queue = calloc((size_t)e->plan.pipeline_depth, sizeof(int));
        c->done = calloc((size_t)e->plan.pipeline_depth, sizeof(int));
        if (!c->queue || !c->done) {
                r = errbuf_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
        if (c->efd < 0) {
                r = errbuf_set(err, -errno, "cannot create the completion eventfd: %s", strerror(errno));
                goto fail;
        }
        r = -pthread_create(&c->worker, NULL, engine_cpu_worker, e);
        if (r < 0) {
                errbuf_set(err, r, "cannot start the CPU engine's thread: %s", strerror(-r));
                goto fail;
        }
        c->worker_started = 1;
        return 0;
fail:
        engine_cpu_close(e);
        return r;
}

static int engine_cpu_submit(engine_t *e, int slot, int n, errbuf_t *err) {
        engine_cpu_t *c = e->impl;
        int depth = e->plan.pipeline_depth;

        (void)n;        /* engine.c stored it in e->slot_n[slot] */
        pthread_mutex_lock(&c->lock);
        if (c->queue_len >= depth) {
                pthread_mutex_unlock(&c->lock);
                return errbuf_set(err, -EBUSY, "every slot is in flight");
        }
        c->queue[(c->queue_head + c->queue_len) % depth] = slot;
        c->queue_len++;
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->lock);
        return 0;
}

static int engine_cpu_reap(engine_t *e, int *slot, errbuf_t *err) {
        engine_cpu_t *c = e->impl;
        uint64_t v;

        if (read(c->efd, &v, sizeof(v)) != sizeof(v)) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                return errbuf_set(err, -errno, "reading the completion eventfd: %s", strerror(errno));
        }
        pthread_mutex_lock(&c->lock);
        *slot = c->done[c->done_head];
        c->done_head = (c->done_head + 1) % e->plan.pipeline_depth;
        c->done_len--;
        pthread_mutex_unlock(&c->lock);
        return 1;
}

static int engine_cpu_completion_fd(engine_t *e) {
        return ((engine_cpu_t *)e->impl)->efd;
}

/* The layout plan gives for next, and whether it fits the blocks allocated
 * at open (a swap allocates nothing; a smaller budget may lower the batch). */
static int engine_cpu_swap_layout(const engine_t *e, const model_t *next, const plan_t *plan,
                                  engine_cpu_layout_t *l, errbuf_t *err) {
        const engine_cpu_t *c = e->impl;
        int r;

        r = engine_cpu_layout(next, plan->tensor_offset, plan->arena_elems_per_sample, plan->max_batch,
                              plan->pipeline_depth, plan->top_k, plan->precision, !c->dnnl, e->request.embedding, l,
                              err);
        if (r < 0)
                return r;
        if (l->workspace_bytes != plan->workspace_bytes || l->weights_copy_bytes != plan->engine.weights_copy_bytes ||
            l->host_bytes != plan->engine.pinned_host_bytes)
                return errbuf_set(err, -EINVAL, "the CPU engine's layout disagrees with the new plan");
        if (l->activation_bytes + l->workspace_bytes > c->arena_alloc_bytes || l->host_bytes > c->host_alloc_bytes)
                return errbuf_set(err, -ENOSPC,
                                  "the new plan (batch %d: %zu arena bytes, %zu host bytes) does not fit the "
                                  "%zu + %zu bytes allocated at start",
                                  plan->max_batch, l->activation_bytes + l->workspace_bytes, l->host_bytes,
                                  c->arena_alloc_bytes, c->host_alloc_bytes);
        return 0;
}

static int engine_cpu_swap_fits(const engine_t *e, const model_t *next, const plan_t *plan, errbuf_t *err) {
        engine_cpu_layout_t l;

        return engine_cpu_swap_layout(e, next, plan, &l, err);
}

/* The reference reads next's own host blocks (engine_cpu_forward reads
 * e->model, which engine_swap sets); oneDNN's primitives and reordered
 * weights are made for next here (its plan's weights_copy_bytes), and the
 * old ones freed once they are replaced. The carve follows the plan. The
 * worker is idle (no slot queued), and the next submit's lock hands it the
 * new layout. */
static int engine_cpu_swap(engine_t *e, model_t *next, const plan_t *plan, errbuf_t *err) {
        engine_cpu_t *c = e->impl;
        engine_cpu_layout_t l;
        cpu_dnnl_t *dnnl = NULL, *old;
        int r;

        r = engine_cpu_swap_layout(e, next, plan, &l, err);
        if (r < 0)
                return r;
        if (c->dnnl) {
                r = cpu_dnnl_new(&dnnl, next, plan->max_batch, plan->precision, plan->tensor_offset,
                                 !e->request.cpu_keep_conv_weights, err);
                if (r < 0)
                        return r;
        }
        pthread_mutex_lock(&c->lock);
        assert(c->queue_len == 0);
        old = c->dnnl;
        c->dnnl = dnnl;
        c->precision = plan->precision;
        c->layout = l;
        c->activations = c->arena;
        c->workspace = (float *)((char *)c->arena + l.activation_bytes);
        pthread_mutex_unlock(&c->lock);
        cpu_dnnl_free(old);
        return 0;
}

const engine_ops_t engine_cpu_ops = {
        .name = "cpu",
        .open = engine_cpu_open,
        .close = engine_cpu_close,
        .slot_input = engine_cpu_slot_input,
        .submit = engine_cpu_submit,
        .reap = engine_cpu_reap,
        .slot_logits = engine_cpu_slot_logits,
        .slot_topk = engine_cpu_slot_topk,
        .slot_embedding = engine_cpu_slot_embedding,
        .completion_fd = engine_cpu_completion_fd,
        .swap_fits = engine_cpu_swap_fits,
        .swap = engine_cpu_swap,
};

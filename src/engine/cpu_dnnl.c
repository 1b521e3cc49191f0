/* cpu_dnnl: the CPU engine's convolutions on oneDNN (Debian's libdnnl 2.6).
 * See cpu_dnnl.h. Every primitive, memory object and reordered weight block
 * is made in cpu_dnnl_new; cpu_dnnl_conv only points the memory objects at
 * the caller's buffers and executes. */
#include "engine/cpu_dnnl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "engine/engine_cuda_plan.h"

#define CPU_DNNL_ALIGN 64
#define CPU_DNNL_RELU_ALPHA 1e-30f

/* Memory objects of one primitive, pointed at the caller's buffers per call. */
enum { CPU_DNNL_SRC, CPU_DNNL_DST, CPU_DNNL_RES, CPU_DNNL_SCRATCH, CPU_DNNL_MEMS };

typedef struct cpu_dnnl_prim {
        dnnl_primitive_t prim;
        dnnl_memory_t mem[CPU_DNNL_MEMS];       /* RES: NULL without a residual */
} cpu_dnnl_prim_t;

typedef struct cpu_dnnl_conv {
        int op;                 /* index in the model's table */
        dnnl_memory_desc_t w_md;        /* the layout the largest bucket chose; every bucket uses it */
        void *weights;          /* reordered into w_md: within cpu_dnnl's one weights block */
        dnnl_memory_t w_mem, b_mem;     /* b_mem: the model's folded bias, not copied */
        size_t in_elems, out_elems;     /* per sample */
        int has_residual;
        cpu_dnnl_prim_t *by_bucket;     /* (n_buckets) */
} cpu_dnnl_conv_t;

struct cpu_dnnl {
        dnnl_stream_t stream;
        void *weights;          /* every conv's reordered weights, one block (one large block is
                                 * mmapped and unmapped whole: freeing it leaves no heap behind) */
        int buckets[ENGINE_CUDA_MAX_BUCKETS];
        int n_buckets;
        int n_convs;
        cpu_dnnl_conv_t *convs;
        int *conv_of_op;        /* (MODEL_MAX_OPS): index into convs, -1 for other ops */
};

static dnnl_engine_t cpu_dnnl_engine;
static dnnl_status_t cpu_dnnl_engine_status = dnnl_runtime_error;
static pthread_once_t cpu_dnnl_once = PTHREAD_ONCE_INIT;

static void cpu_dnnl_engine_init(void) {
        /* The engine holds its primitives itself; oneDNN's cache of them
         * would keep a second reference (and the kernels of a model swapped
         * out) past cpu_dnnl_free, outside the plan. */
        cpu_dnnl_engine_status = dnnl_set_primitive_cache_capacity(0);
        if (cpu_dnnl_engine_status == dnnl_success)
                cpu_dnnl_engine_status = dnnl_engine_create(&cpu_dnnl_engine, dnnl_cpu, 0);
}

/* oneDNN's one CPU engine, made once for the process (it holds no memory of
 * note; every primitive is made on it). */
static int cpu_dnnl_engine_get(dnnl_engine_t *ret, errbuf_t *err) {
        pthread_once(&cpu_dnnl_once, cpu_dnnl_engine_init);
        if (cpu_dnnl_engine_status != dnnl_success)
                return errbuf_set(err, -EIO, "oneDNN cannot create its CPU engine: %s",
                                  dnnl_status2str(cpu_dnnl_engine_status));
        *ret = cpu_dnnl_engine;
        return 0;
}

static int cpu_dnnl_fail(errbuf_t *err, const model_op_t *op, const char *what, dnnl_status_t s) {
        return errbuf_set(err, s == dnnl_out_of_memory ? -ENOMEM : -EIO, "oneDNN: %s for %s failed: %s", what,
                          op->name, dnnl_status2str(s));
}

static void cpu_dnnl_md(dnnl_memory_desc_t *md, int n, int c, int h, int w) {
        dnnl_dims_t dims = { n, c, h, w };

        dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, dnnl_nhwc);
}

/* The memory descriptors of conv op's weights, (cout, cin, kh, kw) in the
 * layout wtag, and of its bias. */
static void cpu_dnnl_conv_mds(const model_op_t *op, dnnl_format_tag_t wtag, dnnl_memory_desc_t *wt,
                              dnnl_memory_desc_t *bias) {
        dnnl_dims_t wdims = { op->cout, op->cin, op->kh, op->kw }, bdims = { op->cout };

        dnnl_memory_desc_init_by_tag(wt, 4, wdims, dnnl_f32, wtag);
        dnnl_memory_desc_init_by_tag(bias, 1, bdims, dnnl_f32, dnnl_x);
}

/* The primitive descriptor of conv op at batch n: NHWC fp32 activations,
 * bias, then the residual (binary add) and the ReLU as post-ops, scratchpad
 * in user mode. w_md NULL lets oneDNN choose the weights' layout. */
static int cpu_dnnl_conv_pd(const model_op_t *op, int n, const dnnl_memory_desc_t *w_md,
                            dnnl_primitive_desc_t *ret, errbuf_t *err) {
        dnnl_memory_desc_t src, dst, wt, bias;
        dnnl_dims_t strides = { op->stride, op->stride }, pad = { op->pad, op->pad };
        dnnl_convolution_desc_t cd;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        int r;

        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        cpu_dnnl_md(&src, n, op->cin, op->h_in, op->w_in);
        cpu_dnnl_md(&dst, n, op->cout, op->h_out, op->w_out);
        cpu_dnnl_conv_mds(op, dnnl_format_tag_any, &wt, &bias);
        if (w_md)
                wt = *w_md;
        s = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wt,
                                               &bias, &dst, strides, pad, pad);
        if (s == dnnl_success)
                s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success)
                s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        if (s == dnnl_success)
                s = dnnl_post_ops_create(&po);
        if (s == dnnl_success && op->residual >= 0)
                s = dnnl_post_ops_append_binary(po, dnnl_binary_add, &dst);
        /* A ReLU that keeps a NaN, as torch.relu and cpu_ops do (an
         * overflow must reach the logits to be marked): oneDNN's relu with
         * alpha 0 is max(x, 0), which takes a NaN to 0; with a non-zero
         * alpha it is x > 0 ? x : alpha * x, which keeps it. alpha is
         * CPU_DNNL_RELU_ALPHA, so small that a negative x leaves at most
         * |x| * 1e-30 where the exact ReLU leaves 0. */
        if (s == dnnl_success && op->relu)
                s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, CPU_DNNL_RELU_ALPHA, 0.0f);
        if (s == dnnl_success)
                s = dnnl_primitive_attr_set_post_ops(attr, po);
        if (s == dnnl_success)
                s = dnnl_primitive_desc_create(ret, &cd, attr, eng, NULL);
        dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
        if (s != dnnl_success)
                return cpu_dnnl_fail(err, op, "the convolution's descriptor", s);
        return 0;
}

static size_t cpu_dnnl_align(size_t v) {
        return (v + CPU_DNNL_ALIGN - 1) / CPU_DNNL_ALIGN * CPU_DNNL_ALIGN;
}

int cpu_dnnl_sizes(const model_t *m, int max_batch, size_t *ret_scratch_bytes, size_t *ret_weights_bytes,
                   errbuf_t *err) {
        int buckets[ENGINE_CUDA_MAX_BUCKETS], n_buckets = engine_cuda_buckets(max_batch, buckets);
        size_t scratch = 0, weights = 0;

        if (n_buckets < 0)
                return errbuf_set(err, -EINVAL, "batch %d has no buckets", max_batch);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                dnnl_memory_desc_t w_md;

                if (op->kind != MODEL_OP_CONV)
                        continue;
                /* The largest bucket chooses the weights' layout; the others use it. */
                for (int b = n_buckets - 1; b >= 0; b--) {
                        dnnl_primitive_desc_t pd;
                        size_t sp;
                        int r = cpu_dnnl_conv_pd(op, buckets[b], b == n_buckets - 1 ? NULL : &w_md, &pd, err);

                        if (r < 0)
                                return r;
                        if (b == n_buckets - 1) {
                                w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
                                weights += cpu_dnnl_align(dnnl_memory_desc_get_size(&w_md));
                        }
                        sp = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
                        if (sp > scratch)
                                scratch = sp;
                        dnnl_primitive_desc_destroy(pd);
                }
        }
        *ret_scratch_bytes = cpu_dnnl_align(scratch);
        *ret_weights_bytes = weights;
        return 0;
}

/* Reorders op's folded weights, (cout, kh, kw, cin) fp32, into c->weights
 * in the layout w_md, and makes the memory objects of the weights and the
 * bias. */
static int cpu_dnnl_weights(cpu_dnnl_conv_t *c, const model_t *m, const model_op_t *op,
                            const dnnl_memory_desc_t *w_md, dnnl_stream_t stream, errbuf_t *err) {
        dnnl_memory_desc_t user_md, b_md;
        dnnl_memory_t user = NULL;
        dnnl_primitive_desc_t rpd = NULL;
        dnnl_primitive_t reorder = NULL;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        int r;

        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        cpu_dnnl_conv_mds(op, dnnl_ohwi, &user_md, &b_md);
        s = dnnl_memory_create(&user, &user_md, eng, m->weights + op->w_off);
        if (s == dnnl_success)
                s = dnnl_memory_create(&c->w_mem, w_md, eng, c->weights);
        if (s == dnnl_success)
                s = dnnl_memory_create(&c->b_mem, &b_md, eng, m->biases + op->b_off);
        if (s == dnnl_success)
                s = dnnl_reorder_primitive_desc_create(&rpd, &user_md, eng, w_md, eng, NULL);
        if (s == dnnl_success)
                s = dnnl_primitive_create(&reorder, rpd);
        if (s == dnnl_success) {
                dnnl_exec_arg_t args[] = { { DNNL_ARG_FROM, user }, { DNNL_ARG_TO, c->w_mem } };

                s = dnnl_primitive_execute(reorder, stream, 2, args);
        }
        if (s == dnnl_success)
                s = dnnl_stream_wait(stream);
        dnnl_primitive_destroy(reorder);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(user);
        if (s != dnnl_success)
                return cpu_dnnl_fail(err, op, "reordering the weights", s);
        return 0;
}

/* The primitive of conv op at batch n and its memory objects (no data yet). */
static int cpu_dnnl_prim_make(cpu_dnnl_prim_t *p, const model_op_t *op, int n, const dnnl_memory_desc_t *w_md,
                              errbuf_t *err) {
        dnnl_primitive_desc_t pd;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        const dnnl_query_t q[CPU_DNNL_MEMS] = { dnnl_query_src_md, dnnl_query_dst_md, dnnl_query_dst_md,
                                                dnnl_query_scratchpad_md };
        int r;

        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        r = cpu_dnnl_conv_pd(op, n, w_md, &pd, err);
        if (r < 0)
                return r;
        if (!dnnl_memory_desc_equal(w_md, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0))) {
                dnnl_primitive_desc_destroy(pd);
                return errbuf_set(err, -EIO, "oneDNN: %s at batch %d wants its weights in another layout", op->name,
                                  n);
        }
        s = dnnl_primitive_create(&p->prim, pd);
        for (int i = 0; i < CPU_DNNL_MEMS && s == dnnl_success; i++)
                if (i != CPU_DNNL_RES || op->residual >= 0)
                        s = dnnl_memory_create(&p->mem[i], dnnl_primitive_desc_query_md(pd, q[i], 0), eng,
                                               DNNL_MEMORY_NONE);
        dnnl_primitive_desc_destroy(pd);
        if (s != dnnl_success)
                return cpu_dnnl_fail(err, op, "creating the convolution", s);
        return 0;
}

/* conv op's weights' layout (the largest bucket's choice) and its size. */
static int cpu_dnnl_conv_layout(cpu_dnnl_t *d, cpu_dnnl_conv_t *c, const model_t *m, int op_index, errbuf_t *err) {
        const model_op_t *op = &m->ops[op_index];
        dnnl_primitive_desc_t pd;
        int r;

        c->op = op_index;
        c->in_elems = m->tensors[op->in].elems;
        c->out_elems = m->tensors[op->out].elems;
        c->has_residual = op->residual >= 0;
        r = cpu_dnnl_conv_pd(op, d->buckets[d->n_buckets - 1], NULL, &pd, err);
        if (r < 0)
                return r;
        c->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_destroy(pd);
        return 0;
}

/* conv op's weights, reordered into c->weights, and its primitive for every bucket. */
static int cpu_dnnl_conv_make(cpu_dnnl_t *d, cpu_dnnl_conv_t *c, const model_t *m, errbuf_t *err) {
        const model_op_t *op = &m->ops[c->op];
        int r;

        c->by_bucket = calloc((size_t)d->n_buckets, sizeof(*c->by_bucket));
        if (!c->by_bucket)
                return errbuf_set(err, -ENOMEM, "out of memory");
        r = cpu_dnnl_weights(c, m, op, &c->w_md, d->stream, err);
        if (r < 0)
                return r;
        for (int b = 0; b < d->n_buckets; b++) {
                r = cpu_dnnl_prim_make(&c->by_bucket[b], op, d->buckets[b], &c->w_md, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

void cpu_dnnl_free(cpu_dnnl_t *d) {
        if (!d)
                return;
        for (int i = 0; i < d->n_convs; i++) {
                cpu_dnnl_conv_t *c = &d->convs[i];

                for (int b = 0; c->by_bucket && b < d->n_buckets; b++) {
                        for (int k = 0; k < CPU_DNNL_MEMS; k++)
                                dnnl_memory_destroy(c->by_bucket[b].mem[k]);
                        dnnl_primitive_destroy(c->by_bucket[b].prim);
                }
                free(c->by_bucket);
                dnnl_memory_destroy(c->w_mem);
                dnnl_memory_destroy(c->b_mem);
        }
        free(d->weights);
        free(d->convs);
        free(d->conv_of_op);
        if (d->stream)
                dnnl_stream_destroy(d->stream);
        free(d);
}

int cpu_dnnl_new(cpu_dnnl_t **ret, const model_t *m, int max_batch, errbuf_t *err) {
        cpu_dnnl_t *d;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        size_t weights_bytes = 0, offset = 0;
        int r;

        if (!m->weights)
                return errbuf_set(err, -EINVAL, "the model has no weights loaded");
        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        d = calloc(1, sizeof(*d));
        if (!d)
                return errbuf_set(err, -ENOMEM, "out of memory");
        d->n_buckets = engine_cuda_buckets(max_batch, d->buckets);
        if (d->n_buckets < 0) {
                r = errbuf_set(err, -EINVAL, "batch %d has no buckets", max_batch);
                goto fail;
        }
        s = dnnl_stream_create(&d->stream, eng, dnnl_stream_default_flags);
        if (s != dnnl_success) {
                r = errbuf_set(err, -EIO, "oneDNN cannot create a stream: %s", dnnl_status2str(s));
                goto fail;
        }
        d->convs = calloc((size_t)m->n_ops, sizeof(*d->convs));
        d->conv_of_op = calloc(MODEL_MAX_OPS, sizeof(int));
        if (!d->convs || !d->conv_of_op) {
                r = errbuf_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        for (int i = 0; i < m->n_ops; i++) {
                d->conv_of_op[i] = -1;
                if (m->ops[i].kind != MODEL_OP_CONV)
                        continue;
                d->conv_of_op[i] = d->n_convs;
                r = cpu_dnnl_conv_layout(d, &d->convs[d->n_convs++], m, i, err);
                if (r < 0)
                        goto fail;
                weights_bytes += cpu_dnnl_align(dnnl_memory_desc_get_size(&d->convs[d->n_convs - 1].w_md));
        }
        if (posix_memalign(&d->weights, CPU_DNNL_ALIGN, weights_bytes)) {
                d->weights = NULL;
                r = errbuf_set(err, -ENOMEM, "cannot allocate %zu bytes for the reordered weights", weights_bytes);
                goto fail;
        }
        for (int i = 0; i < d->n_convs; i++) {
                d->convs[i].weights = (char *)d->weights + offset;
                offset += cpu_dnnl_align(dnnl_memory_desc_get_size(&d->convs[i].w_md));
                r = cpu_dnnl_conv_make(d, &d->convs[i], m, err);
                if (r < 0)
                        goto fail;
        }
        *ret = d;
        return 0;
fail:
        cpu_dnnl_free(d);
        return r;
}

/* One bucket's primitive over the b samples at in, residual and out. */
static dnnl_status_t cpu_dnnl_run(cpu_dnnl_t *d, cpu_dnnl_conv_t *c, cpu_dnnl_prim_t *p, const float *in,
                                  const float *residual, float *out, void *scratch) {
        dnnl_exec_arg_t args[6] = {
                { DNNL_ARG_SRC, p->mem[CPU_DNNL_SRC] },
                { DNNL_ARG_WEIGHTS, c->w_mem },
                { DNNL_ARG_BIAS, c->b_mem },
                { DNNL_ARG_DST, p->mem[CPU_DNNL_DST] },
                { DNNL_ARG_SCRATCHPAD, p->mem[CPU_DNNL_SCRATCH] },
                { DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, p->mem[CPU_DNNL_RES] },
        };
        dnnl_status_t s;

        /* The handles are the caller's buffers; oneDNN keeps no copy. */
        s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_SRC], (void *)in);
        if (s == dnnl_success)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_DST], out);
        if (s == dnnl_success)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_SCRATCH], scratch);
        if (s == dnnl_success && c->has_residual)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_RES], (void *)residual);
        if (s == dnnl_success)
                s = dnnl_primitive_execute(p->prim, d->stream, c->has_residual ? 6 : 5, args);
        return s;
}

int cpu_dnnl_conv(cpu_dnnl_t *d, int op_index, int n, const float *in, const float *residual, float *out,
                  void *scratch) {
        cpu_dnnl_conv_t *c = &d->convs[d->conv_of_op[op_index]];
        int done = 0;

        /* n as the largest buckets that fit: 7 of max 8 is 4 + 2 + 1. */
        while (done < n) {
                int b = d->n_buckets - 1;
                dnnl_status_t s;

                while (d->buckets[b] > n - done)
                        b--;
                s = cpu_dnnl_run(d, c, &c->by_bucket[b], in + (size_t)done * c->in_elems,
                                 residual ? residual + (size_t)done * c->out_elems : NULL,
                                 out + (size_t)done * c->out_elems, scratch);
                if (s != dnnl_success)
                        return -EIO;
                done += d->buckets[b];
        }
        return dnnl_stream_wait(d->stream) == dnnl_success ? 0 : -EIO;
}

const char *cpu_dnnl_isa(void) {
        switch (dnnl_get_effective_cpu_isa()) {
        case dnnl_cpu_isa_sse41:
                return "sse41";
        case dnnl_cpu_isa_avx:
                return "avx";
        case dnnl_cpu_isa_avx2:
                return "avx2";
        case dnnl_cpu_isa_avx2_vnni:
                return "avx2_vnni";
        case dnnl_cpu_isa_avx512_mic:
        case dnnl_cpu_isa_avx512_mic_4ops:
                return "avx512_mic";
        case dnnl_cpu_isa_avx512_core:
                return "avx512_core";
        case dnnl_cpu_isa_avx512_core_vnni:
                return "avx512_core_vnni";
        case dnnl_cpu_isa_avx512_core_bf16:
                return "avx512_core_bf16";
        case dnnl_cpu_isa_avx512_core_amx:
                return "avx512_core_amx";
        default:
                return "unknown";
        }
}

int cpu_dnnl_has_bf16(void) {
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();

        return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

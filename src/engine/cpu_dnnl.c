/* cpu_dnnl: the CPU engine's convolutions on oneDNN (Debian's libdnnl 2.6).
 * See cpu_dnnl.h. Every primitive, memory object and reordered weight block
 * is made in cpu_dnnl_new; cpu_dnnl_op only points the memory objects at
 * the caller's buffers and executes. */
#include "engine/cpu_dnnl.h"

#include <assert.h>
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
        dnnl_memory_t mem[CPU_DNNL_MEMS];       /* RES: NULL but for CPU_DNNL_RES_BINARY */
} cpu_dnnl_prim_t;

/* How a conv adds its residual. */
typedef enum cpu_dnnl_res {
        CPU_DNNL_RES_NONE,
        /* A binary add post-op reading the residual tensor: oneDNN 2.6 runs
         * a 1x1 conv with it on its older jit_1x1 kernel. */
        CPU_DNNL_RES_BINARY,
        /* The plan put the output over the residual (plan_place_tensors'
         * residual_in_place): a sum post-op adds what the output holds,
         * which brgconv_1x1 runs, with no copy. */
        CPU_DNNL_RES_SUM,
} cpu_dnnl_res_t;

/* One op of the model table that oneDNN runs: a conv or the max pool. */
typedef struct cpu_dnnl_layer {
        int op;                 /* index in the model's table */
        model_op_kind_t kind;   /* MODEL_OP_CONV or MODEL_OP_MAXPOOL */
        dnnl_memory_desc_t w_md;        /* conv: the layout the largest bucket chose; every bucket uses it */
        void *weights;          /* conv: reordered into w_md, within cpu_dnnl's one weights block */
        dnnl_memory_t w_mem, b_mem;     /* conv; b_mem: the model's folded fp32 bias, not copied */
        size_t in_elems, out_elems;     /* per sample */
        cpu_dnnl_res_t res;
        cpu_dnnl_prim_t *by_bucket;     /* (n_buckets) */
} cpu_dnnl_layer_t;

struct cpu_dnnl {
        dnnl_stream_t stream;
        dnnl_data_type_t dt;    /* the activations' and the weights' (f32 or bf16); bias f32 */
        size_t elem_bytes;      /* of dt */
        void *weights;          /* every conv's reordered weights, one block (one large block is
                                 * mmapped and unmapped whole: freeing it leaves no heap behind) */
        int buckets[ENGINE_CUDA_MAX_BUCKETS];
        int n_buckets;
        int n_layers;
        cpu_dnnl_layer_t *layers;
        int *layer_of_op;       /* (MODEL_MAX_OPS): index into layers, -1 for ops run elsewhere */
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

int cpu_dnnl_runs(precision_t p, model_op_kind_t kind) {
        /* The max pool too, in both precisions: in fp32 oneDNN's is 4x
         * cpu_ops' plain loop (2.3 against 9.9 ms at batch 8 on 2 threads,
         * docs/perf.md); bf16's activations need it. */
        (void)p;
        return kind == MODEL_OP_CONV || kind == MODEL_OP_MAXPOOL;
}

static dnnl_data_type_t cpu_dnnl_dt(precision_t p) {
        return p == PRECISION_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* How op adds its residual in a plan whose tensors are at tensor_offset. */
static cpu_dnnl_res_t cpu_dnnl_res(const model_op_t *op, const size_t tensor_offset[MODEL_MAX_TENSORS]) {
        if (op->kind != MODEL_OP_CONV || op->residual < 0)
                return CPU_DNNL_RES_NONE;
        return tensor_offset[op->out] == tensor_offset[op->residual] ? CPU_DNNL_RES_SUM : CPU_DNNL_RES_BINARY;
}

static void cpu_dnnl_md(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int n, int c, int h, int w) {
        dnnl_dims_t dims = { n, c, h, w };

        dnnl_memory_desc_init_by_tag(md, 4, dims, dt, dnnl_nhwc);
}

/* The memory descriptors of conv op's weights, (cout, cin, kh, kw) of type
 * dt in the layout wtag, and of its fp32 bias. */
static void cpu_dnnl_conv_mds(const model_op_t *op, dnnl_data_type_t dt, dnnl_format_tag_t wtag,
                              dnnl_memory_desc_t *wt, dnnl_memory_desc_t *bias) {
        dnnl_dims_t wdims = { op->cout, op->cin, op->kh, op->kw }, bdims = { op->cout };

        dnnl_memory_desc_init_by_tag(wt, 4, wdims, dt, wtag);
        dnnl_memory_desc_init_by_tag(bias, 1, bdims, dnnl_f32, dnnl_x);
}

/* conv op's operation descriptor and attributes at batch n: NHWC
 * activations of type dt, bias, then the residual (res: a binary add or a
 * sum) and the ReLU as post-ops. w_md NULL lets oneDNN choose the weights'
 * layout. */
static dnnl_status_t cpu_dnnl_conv_desc(const model_op_t *op, dnnl_data_type_t dt, int n,
                                        const dnnl_memory_desc_t *w_md, cpu_dnnl_res_t res,
                                        dnnl_convolution_desc_t *cd, dnnl_primitive_attr_t attr) {
        dnnl_memory_desc_t src, dst, wt, bias;
        dnnl_dims_t strides = { op->stride, op->stride }, pad = { op->pad, op->pad };
        dnnl_post_ops_t po = NULL;
        dnnl_status_t s;

        cpu_dnnl_md(&src, dt, n, op->cin, op->h_in, op->w_in);
        cpu_dnnl_md(&dst, dt, n, op->cout, op->h_out, op->w_out);
        cpu_dnnl_conv_mds(op, dt, dnnl_format_tag_any, &wt, &bias);
        if (w_md)
                wt = *w_md;
        s = dnnl_convolution_forward_desc_init(cd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wt,
                                               &bias, &dst, strides, pad, pad);
        if (s == dnnl_success)
                s = dnnl_post_ops_create(&po);
        if (s == dnnl_success && res == CPU_DNNL_RES_BINARY)
                s = dnnl_post_ops_append_binary(po, dnnl_binary_add, &dst);
        if (s == dnnl_success && res == CPU_DNNL_RES_SUM)
                s = dnnl_post_ops_append_sum(po, 1.0f);
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
        dnnl_post_ops_destroy(po);
        return s;
}

/* Whether pd is a real kernel: in bf16, oneDNN falls back to its reference
 * implementation (scalar C++, tens of times slower) where the CPU lacks a
 * bf16 kernel for a shape, and that is refused, never picked silently. */
static int cpu_dnnl_check_impl(const_dnnl_primitive_desc_t pd, const model_op_t *op, dnnl_data_type_t dt,
                               errbuf_t *err) {
        const char *impl = NULL;

        if (dt != dnnl_bf16)
                return 0;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
                impl = "unknown";
        if (strncmp(impl, "ref", 3) == 0 || strstr(impl, ":ref") || strcmp(impl, "unknown") == 0)
                return errbuf_set(err, -EOPNOTSUPP,
                                  "oneDNN has no bf16 kernel for %s on this CPU (only its '%s' implementation, "
                                  "instruction set %s); use [model] precision = fp32",
                                  op->name, impl, cpu_dnnl_isa());
        return 0;
}

/* The primitive descriptor of op (a conv or a max pool) at batch n in type
 * dt, scratchpad in user mode. w_md, res: as cpu_dnnl_conv_desc. */
static int cpu_dnnl_pd(const model_op_t *op, dnnl_data_type_t dt, int n, const dnnl_memory_desc_t *w_md,
                       cpu_dnnl_res_t res, dnnl_primitive_desc_t *ret, errbuf_t *err) {
        dnnl_convolution_desc_t cd;
        dnnl_pooling_desc_t pool;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        int r;

        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success)
                s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        if (s == dnnl_success && op->kind == MODEL_OP_CONV) {
                s = cpu_dnnl_conv_desc(op, dt, n, w_md, res, &cd, attr);
                if (s == dnnl_success)
                        s = dnnl_primitive_desc_create(ret, &cd, attr, eng, NULL);
        } else if (s == dnnl_success) {
                dnnl_memory_desc_t src, dst;
                dnnl_dims_t strides = { op->stride, op->stride }, kernel = { op->kh, op->kw };
                dnnl_dims_t pad = { op->pad, op->pad };

                assert(op->kind == MODEL_OP_MAXPOOL);
                cpu_dnnl_md(&src, dt, n, op->cin, op->h_in, op->w_in);
                cpu_dnnl_md(&dst, dt, n, op->cout, op->h_out, op->w_out);
                s = dnnl_pooling_forward_desc_init(&pool, dnnl_forward_inference, dnnl_pooling_max, &src, &dst,
                                                   strides, kernel, pad, pad);
                if (s == dnnl_success)
                        s = dnnl_primitive_desc_create(ret, &pool, attr, eng, NULL);
        }
        dnnl_primitive_attr_destroy(attr);
        if (s != dnnl_success)
                return cpu_dnnl_fail(err, op, op->kind == MODEL_OP_CONV ? "the convolution's descriptor"
                                                                       : "the max pool's descriptor", s);
        r = cpu_dnnl_check_impl(*ret, op, dt, err);
        if (r < 0) {
                dnnl_primitive_desc_destroy(*ret);
                *ret = NULL;
        }
        return r;
}

static size_t cpu_dnnl_align(size_t v) {
        return (v + CPU_DNNL_ALIGN - 1) / CPU_DNNL_ALIGN * CPU_DNNL_ALIGN;
}

int cpu_dnnl_sizes(const model_t *m, int max_batch, precision_t p, const size_t tensor_offset[MODEL_MAX_TENSORS],
                   size_t *ret_scratch_bytes, size_t *ret_weights_bytes, size_t *ret_kernel_bytes, errbuf_t *err) {
        int buckets[ENGINE_CUDA_MAX_BUCKETS], n_buckets = engine_cuda_buckets(max_batch, buckets);
        size_t scratch = 0, weights = 0, prims = 0;

        if (n_buckets < 0)
                return errbuf_set(err, -EINVAL, "batch %d has no buckets", max_batch);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                dnnl_memory_desc_t w_md;

                if (!cpu_dnnl_runs(p, op->kind))
                        continue;
                /* The largest bucket chooses a conv's weights' layout; the others use it. */
                for (int b = n_buckets - 1; b >= 0; b--) {
                        int largest = b == n_buckets - 1;
                        dnnl_primitive_desc_t pd;
                        size_t sp;
                        int r = cpu_dnnl_pd(op, cpu_dnnl_dt(p), buckets[b], largest ? NULL : &w_md,
                                            cpu_dnnl_res(op, tensor_offset), &pd, err);

                        if (r < 0)
                                return r;
                        if (largest && op->kind == MODEL_OP_CONV) {
                                w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
                                weights += cpu_dnnl_align(dnnl_memory_desc_get_size(&w_md));
                        }
                        sp = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
                        if (sp > scratch)
                                scratch = sp;
                        dnnl_primitive_desc_destroy(pd);
                        prims++;
                }
        }
        *ret_scratch_bytes = cpu_dnnl_align(scratch);
        *ret_weights_bytes = weights;
        *ret_kernel_bytes = prims * cpu_dnnl_kernel_bytes_each(p);
        return 0;
}

/* Reorders conv op's folded weights, (cout, kh, kw, cin) fp32, into
 * l->weights in the layout (and type) of l->w_md, and makes the memory
 * objects of the weights and the bias. */
static int cpu_dnnl_weights(cpu_dnnl_layer_t *l, const model_t *m, const model_op_t *op, dnnl_stream_t stream,
                            errbuf_t *err) {
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
        cpu_dnnl_conv_mds(op, dnnl_f32, dnnl_ohwi, &user_md, &b_md);
        s = dnnl_memory_create(&user, &user_md, eng, m->weights + op->w_off);
        if (s == dnnl_success)
                s = dnnl_memory_create(&l->w_mem, &l->w_md, eng, l->weights);
        if (s == dnnl_success)
                s = dnnl_memory_create(&l->b_mem, &b_md, eng, m->biases + op->b_off);
        if (s == dnnl_success)
                s = dnnl_reorder_primitive_desc_create(&rpd, &user_md, eng, &l->w_md, eng, NULL);
        if (s == dnnl_success)
                s = dnnl_primitive_create(&reorder, rpd);
        if (s == dnnl_success) {
                dnnl_exec_arg_t args[] = { { DNNL_ARG_FROM, user }, { DNNL_ARG_TO, l->w_mem } };

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

/* The primitive of op at batch n and its memory objects (no data yet). */
static int cpu_dnnl_prim_make(cpu_dnnl_t *d, cpu_dnnl_prim_t *p, const cpu_dnnl_layer_t *l, const model_op_t *op,
                              int n, errbuf_t *err) {
        const dnnl_memory_desc_t *w_md = l->kind == MODEL_OP_CONV ? &l->w_md : NULL;
        dnnl_primitive_desc_t pd;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        const dnnl_query_t q[CPU_DNNL_MEMS] = { dnnl_query_src_md, dnnl_query_dst_md, dnnl_query_dst_md,
                                                dnnl_query_scratchpad_md };
        int r;

        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        r = cpu_dnnl_pd(op, d->dt, n, w_md, l->res, &pd, err);
        if (r < 0)
                return r;
        if (w_md && !dnnl_memory_desc_equal(w_md, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0))) {
                dnnl_primitive_desc_destroy(pd);
                return errbuf_set(err, -EIO, "oneDNN: %s at batch %d wants its weights in another layout", op->name,
                                  n);
        }
        s = dnnl_primitive_create(&p->prim, pd);
        for (int i = 0; i < CPU_DNNL_MEMS && s == dnnl_success; i++)
                if (i != CPU_DNNL_RES || l->res == CPU_DNNL_RES_BINARY)
                        s = dnnl_memory_create(&p->mem[i], dnnl_primitive_desc_query_md(pd, q[i], 0), eng,
                                               DNNL_MEMORY_NONE);
        dnnl_primitive_desc_destroy(pd);
        if (s != dnnl_success)
                return cpu_dnnl_fail(err, op, "creating the primitive", s);
        return 0;
}

/* Layer l for op op_index, its tensors at tensor_offset; a conv's weights'
 * layout (the largest bucket's choice), whose size cpu_dnnl_new adds up. */
static int cpu_dnnl_layer_init(cpu_dnnl_t *d, cpu_dnnl_layer_t *l, const model_t *m, int op_index,
                               const size_t tensor_offset[MODEL_MAX_TENSORS], errbuf_t *err) {
        const model_op_t *op = &m->ops[op_index];
        dnnl_primitive_desc_t pd;
        int r;

        l->op = op_index;
        l->kind = op->kind;
        l->in_elems = m->tensors[op->in].elems;
        l->out_elems = m->tensors[op->out].elems;
        l->res = cpu_dnnl_res(op, tensor_offset);
        if (op->kind != MODEL_OP_CONV)
                return 0;
        r = cpu_dnnl_pd(op, d->dt, d->buckets[d->n_buckets - 1], NULL, l->res, &pd, err);
        if (r < 0)
                return r;
        l->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_destroy(pd);
        return 0;
}

/* A conv's weights, reordered into l->weights, and l's primitive for every bucket. */
static int cpu_dnnl_layer_make(cpu_dnnl_t *d, cpu_dnnl_layer_t *l, const model_t *m, errbuf_t *err) {
        const model_op_t *op = &m->ops[l->op];
        int r;

        l->by_bucket = calloc((size_t)d->n_buckets, sizeof(*l->by_bucket));
        if (!l->by_bucket)
                return errbuf_set(err, -ENOMEM, "out of memory");
        if (l->kind == MODEL_OP_CONV) {
                r = cpu_dnnl_weights(l, m, op, d->stream, err);
                if (r < 0)
                        return r;
        }
        for (int b = 0; b < d->n_buckets; b++) {
                r = cpu_dnnl_prim_make(d, &l->by_bucket[b], l, op, d->buckets[b], err);
                if (r < 0)
                        return r;
        }
        return 0;
}

void cpu_dnnl_free(cpu_dnnl_t *d) {
        if (!d)
                return;
        for (int i = 0; i < d->n_layers; i++) {
                cpu_dnnl_layer_t *l = &d->layers[i];

                for (int b = 0; l->by_bucket && b < d->n_buckets; b++) {
                        for (int k = 0; k < CPU_DNNL_MEMS; k++)
                                dnnl_memory_destroy(l->by_bucket[b].mem[k]);
                        dnnl_primitive_destroy(l->by_bucket[b].prim);
                }
                free(l->by_bucket);
                dnnl_memory_destroy(l->w_mem);
                dnnl_memory_destroy(l->b_mem);
        }
        free(d->weights);
        free(d->layers);
        free(d->layer_of_op);
        if (d->stream)
                dnnl_stream_destroy(d->stream);
        free(d);
}

/* d's layers: every op that oneDNN runs in d's precision, and the sum of
 * the convs' reordered weights' sizes. */
static int cpu_dnnl_layers_init(cpu_dnnl_t *d, const model_t *m, precision_t p,
                                const size_t tensor_offset[MODEL_MAX_TENSORS], size_t *weights_bytes, errbuf_t *err) {
        d->layers = calloc((size_t)m->n_ops, sizeof(*d->layers));
        d->layer_of_op = calloc(MODEL_MAX_OPS, sizeof(int));
        if (!d->layers || !d->layer_of_op)
                return errbuf_set(err, -ENOMEM, "out of memory");
        *weights_bytes = 0;
        for (int i = 0; i < m->n_ops; i++) {
                cpu_dnnl_layer_t *l = &d->layers[d->n_layers];
                int r;

                d->layer_of_op[i] = -1;
                if (!cpu_dnnl_runs(p, m->ops[i].kind))
                        continue;
                d->layer_of_op[i] = d->n_layers++;
                r = cpu_dnnl_layer_init(d, l, m, i, tensor_offset, err);
                if (r < 0)
                        return r;
                if (l->kind == MODEL_OP_CONV)
                        *weights_bytes += cpu_dnnl_align(dnnl_memory_desc_get_size(&l->w_md));
        }
        return 0;
}

int cpu_dnnl_new(cpu_dnnl_t **ret, model_t *m, int max_batch, precision_t p,
                 const size_t tensor_offset[MODEL_MAX_TENSORS], bool drop_conv_weights, errbuf_t *err) {
        cpu_dnnl_t *d;
        dnnl_engine_t eng = NULL;
        dnnl_status_t s;
        size_t weights_bytes = 0, offset = 0;
        int r;

        if (!m->weights || m->conv_weights_dropped)
                return errbuf_set(err, -EINVAL, "the model has no conv weights loaded");
        if (p != PRECISION_FP32 && p != PRECISION_BF16)
                return errbuf_set(err, -EINVAL, "the CPU engine computes in fp32 or bf16, not %s", precision_name(p));
        r = cpu_dnnl_engine_get(&eng, err);
        if (r < 0)
                return r;
        d = calloc(1, sizeof(*d));
        if (!d)
                return errbuf_set(err, -ENOMEM, "out of memory");
        d->dt = cpu_dnnl_dt(p);
        d->elem_bytes = precision_bytes(p);
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
        r = cpu_dnnl_layers_init(d, m, p, tensor_offset, &weights_bytes, err);
        if (r < 0)
                goto fail;
        if (posix_memalign(&d->weights, CPU_DNNL_ALIGN, weights_bytes ? weights_bytes : CPU_DNNL_ALIGN)) {
                d->weights = NULL;
                r = errbuf_set(err, -ENOMEM, "cannot allocate %zu bytes for the reordered weights", weights_bytes);
                goto fail;
        }
        for (int i = 0; i < d->n_layers; i++) {
                cpu_dnnl_layer_t *l = &d->layers[i];

                if (l->kind == MODEL_OP_CONV) {
                        l->weights = (char *)d->weights + offset;
                        offset += cpu_dnnl_align(dnnl_memory_desc_get_size(&l->w_md));
                }
                r = cpu_dnnl_layer_make(d, l, m, err);
                if (r < 0)
                        goto fail;
                if (drop_conv_weights && l->kind == MODEL_OP_CONV)
                        model_release_conv_pages(m, l->op);
        }
        if (drop_conv_weights && model_drop_conv_weights(m) < 0) {
                r = errbuf_set(err, -ENOMEM, "out of memory for the fc's weights");
                goto fail;
        }
        *ret = d;
        return 0;
fail:
        cpu_dnnl_free(d);
        return r;
}

/* One bucket's primitive over the b samples at in, residual and out. */
static dnnl_status_t cpu_dnnl_run(cpu_dnnl_t *d, cpu_dnnl_layer_t *l, cpu_dnnl_prim_t *p, const void *in,
                                  const void *residual, void *out, void *scratch) {
        dnnl_exec_arg_t conv[6] = {
                { DNNL_ARG_SRC, p->mem[CPU_DNNL_SRC] },
                { DNNL_ARG_DST, p->mem[CPU_DNNL_DST] },
                { DNNL_ARG_SCRATCHPAD, p->mem[CPU_DNNL_SCRATCH] },
                { DNNL_ARG_WEIGHTS, l->w_mem },
                { DNNL_ARG_BIAS, l->b_mem },
                { DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, p->mem[CPU_DNNL_RES] },
        };
        int nargs = l->kind != MODEL_OP_CONV ? 3 : l->res == CPU_DNNL_RES_BINARY ? 6 : 5;
        dnnl_status_t s;

        /* The handles are the caller's buffers; oneDNN keeps no copy. */
        s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_SRC], (void *)in);
        if (s == dnnl_success)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_DST], out);
        if (s == dnnl_success)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_SCRATCH], scratch);
        if (s == dnnl_success && l->res == CPU_DNNL_RES_BINARY)
                s = dnnl_memory_set_data_handle(p->mem[CPU_DNNL_RES], (void *)residual);
        if (s == dnnl_success)
                s = dnnl_primitive_execute(p->prim, d->stream, nargs, conv);
        return s;
}

int cpu_dnnl_op(cpu_dnnl_t *d, int op_index, int n, const void *in, const void *residual, void *out,
                void *scratch) {
        cpu_dnnl_layer_t *l = &d->layers[d->layer_of_op[op_index]];
        int done = 0;

        /* The sum post-op adds what out holds: the plan put it over the residual. */
        assert(l->res != CPU_DNNL_RES_SUM || residual == out);

        /* n as the largest buckets that fit: 7 of max 8 is 4 + 2 + 1. */
        while (done < n) {
                int b = d->n_buckets - 1;
                dnnl_status_t s;

                while (d->buckets[b] > n - done)
                        b--;
                s = cpu_dnnl_run(d, l, &l->by_bucket[b], (const char *)in + (size_t)done * l->in_elems * d->elem_bytes,
                                 residual ? (const char *)residual + (size_t)done * l->out_elems * d->elem_bytes
                                          : NULL,
                                 (char *)out + (size_t)done * l->out_elems * d->elem_bytes, scratch);
                if (s != dnnl_success)
                        return -EIO;
                done += d->buckets[b];
        }
        return dnnl_stream_wait(d->stream) == dnnl_success ? 0 : -EIO;
}

/* bf16 is fp32's upper half: rounded to nearest even; a NaN stays a (quiet) NaN. */
void cpu_dnnl_to_bf16(const float *in, uint16_t *out, size_t n) {
        for (size_t i = 0; i < n; i++) {
                uint32_t u;

                memcpy(&u, &in[i], sizeof(u));
                if ((u & 0x7fffffffu) > 0x7f800000u)
                        out[i] = (uint16_t)((u >> 16) | 0x40);
                else
                        out[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
        }
}

void cpu_dnnl_from_bf16(const uint16_t *in, float *out, size_t n) {
        for (size_t i = 0; i < n; i++) {
                uint32_t u = (uint32_t)in[i] << 16;

                memcpy(&out[i], &u, sizeof(u));
        }
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

size_t cpu_dnnl_kernel_bytes_each(precision_t p) {
        if (p == PRECISION_BF16 && dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx)
                return CPU_DNNL_KERNEL_BYTES_EACH_AMX_BF16;
        return CPU_DNNL_KERNEL_BYTES_EACH;
}

int cpu_dnnl_has_bf16(void) {
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();

        return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

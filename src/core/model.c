/* model: a torchvision ResNet's layer table (from model_arch's detection),
 * and loading + BN folding of its weights from safetensors. See model.h. */
#include "core/model.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int model_add_tensor(model_t *m, int h, int w, int c, int producer) {
        model_tensor_t *t;

        assert(m->n_tensors < MODEL_MAX_TENSORS);
        t = &m->tensors[m->n_tensors];
        t->h = h;
        t->w = w;
        t->c = c;
        t->elems = (size_t)h * w * c;
        t->producer = producer;
        t->last_use = producer;
        return m->n_tensors++;
}

static void model_use(model_t *m, int tensor, int op) {
        if (tensor >= 0 && m->tensors[tensor].last_use < op)
                m->tensors[tensor].last_use = op;
}

/* Appends an op reading `in` (and `residual`), creating its output tensor.
 * Returns the output tensor id. */
static int model_add_op(model_t *m, model_op_kind_t kind, const char *name, const char *bn, int in, int cout,
                        int k, int stride, int pad, int residual, int relu) {
        const model_tensor_t *src = &m->tensors[in];
        int idx = m->n_ops++;

        assert(idx < MODEL_MAX_OPS);
        model_op_t *op = &m->ops[idx];

        memset(op, 0, sizeof(*op));
        op->kind = kind;
        snprintf(op->name, sizeof(op->name), "%s", name);
        snprintf(op->bn, sizeof(op->bn), "%s", bn ? bn : "");
        op->in = in;
        op->residual = residual;
        op->relu = relu;
        op->cin = src->c;
        op->cout = cout;
        op->kh = op->kw = k;
        op->stride = stride;
        op->pad = pad;
        op->h_in = src->h;
        op->w_in = src->w;
        switch (kind) {
        case MODEL_OP_CONV:
        case MODEL_OP_MAXPOOL:
                op->h_out = (src->h + 2 * pad - k) / stride + 1;
                op->w_out = (src->w + 2 * pad - k) / stride + 1;
                break;
        case MODEL_OP_AVGPOOL:
        case MODEL_OP_FC:
                op->h_out = op->w_out = 1;
                break;
        }
        if (kind == MODEL_OP_CONV || kind == MODEL_OP_FC) {
                op->w_off = m->weight_elems;
                op->b_off = m->bias_elems;
                m->weight_elems += (size_t)cout * k * k * op->cin;
                m->bias_elems += (size_t)cout;
        }
        model_use(m, in, idx);
        model_use(m, residual, idx);
        op->out = model_add_tensor(m, op->h_out, op->w_out, cout, idx);
        return op->out;
}

/* The layer table of arch, as torchvision builds it: the stride of a
 * bottleneck on its 3x3 conv (v1.5), the downsample on block 0 of a stage
 * when the stride or the channel count changes (so not on resnet18/34's
 * layer1). */
static void model_build(model_t *m, const model_arch_t *arch) {
        static const int planes[4] = { 64, 128, 256, 512 };
        static const int strides[4] = { 1, 2, 2, 2 };
        int expansion = arch->bottleneck ? 4 : 1;
        char name[MODEL_NAME_MAX], bn[MODEL_NAME_MAX];
        int x;

        memset(m, 0, sizeof(*m));
        m->arch = *arch;
        m->classes = arch->classes;
        m->input = model_add_tensor(m, MODEL_IN_H, MODEL_IN_W, MODEL_IN_C, -1);
        x = model_add_op(m, MODEL_OP_CONV, "conv1", "bn1", m->input, 64, 7, 2, 3, -1, 1);
        x = model_add_op(m, MODEL_OP_MAXPOOL, "maxpool", NULL, x, 64, 3, 2, 1, -1, 0);
        for (int l = 0; l < 4; l++) {
                int width = planes[l] * arch->width_factor, out_c = planes[l] * expansion;

                for (int b = 0; b < arch->blocks[l]; b++) {
                        int s = b == 0 ? strides[l] : 1, identity = x, a;

                        /* The downsample runs first so that the block input dies at conv1. */
                        if (b == 0 && (s != 1 || m->tensors[x].c != out_c)) {
                                snprintf(name, sizeof(name), "layer%d.0.downsample.0", l + 1);
                                snprintf(bn, sizeof(bn), "layer%d.0.downsample.1", l + 1);
                                identity = model_add_op(m, MODEL_OP_CONV, name, bn, x, out_c, 1, s, 0, -1, 0);
                        }
                        snprintf(name, sizeof(name), "layer%d.%d.conv1", l + 1, b);
                        snprintf(bn, sizeof(bn), "layer%d.%d.bn1", l + 1, b);
                        if (!arch->bottleneck) {
                                /* basic: 3x3 (stride) + ReLU, 3x3 + residual + ReLU */
                                a = model_add_op(m, MODEL_OP_CONV, name, bn, x, width, 3, s, 1, -1, 1);
                                snprintf(name, sizeof(name), "layer%d.%d.conv2", l + 1, b);
                                snprintf(bn, sizeof(bn), "layer%d.%d.bn2", l + 1, b);
                                x = model_add_op(m, MODEL_OP_CONV, name, bn, a, out_c, 3, 1, 1, identity, 1);
                                continue;
                        }
                        /* bottleneck: 1x1, 3x3 (stride), 1x1 + residual + ReLU */
                        a = model_add_op(m, MODEL_OP_CONV, name, bn, x, width, 1, 1, 0, -1, 1);
                        snprintf(name, sizeof(name), "layer%d.%d.conv2", l + 1, b);
                        snprintf(bn, sizeof(bn), "layer%d.%d.bn2", l + 1, b);
                        a = model_add_op(m, MODEL_OP_CONV, name, bn, a, width, 3, s, 1, -1, 1);
                        snprintf(name, sizeof(name), "layer%d.%d.conv3", l + 1, b);
                        snprintf(bn, sizeof(bn), "layer%d.%d.bn3", l + 1, b);
                        x = model_add_op(m, MODEL_OP_CONV, name, bn, a, out_c, 1, 1, 0, identity, 1);
                }
        }
        x = model_add_op(m, MODEL_OP_AVGPOOL, "avgpool", NULL, x, m->tensors[x].c, 1, 1, 0, -1, 0);
        m->logits = model_add_op(m, MODEL_OP_FC, "fc", NULL, x, arch->classes, 1, 1, 0, -1, 0);
}

int model_describe_arch(model_t **ret, const model_arch_t *arch) {
        model_t *m = calloc(1, sizeof(*m));

        if (!m)
                return -ENOMEM;
        model_build(m, arch);
        *ret = m;
        return 0;
}

int model_describe(model_t **ret) {
        model_arch_t arch;
        errbuf_t err;

        if (model_arch_by_name(&arch, "resnet50", 1000, &err) < 0)
                return -EINVAL;
        return model_describe_arch(ret, &arch);
}

int model_random(model_t **ret, uint64_t seed) {
        model_arch_t arch;
        errbuf_t err;

        if (model_arch_by_name(&arch, "resnet50", 1000, &err) < 0)
                return -EINVAL;
        return model_random_arch(ret, &arch, seed);
}

int model_random_arch(model_t **ret, const model_arch_t *arch, uint64_t seed) {
        model_t *m;
        int r;

        r = model_describe_arch(&m, arch);
        if (r < 0)
                return r;
        m->weights = malloc(m->weight_elems * sizeof(float));
        m->biases = calloc(m->bias_elems, sizeof(float));
        if (!m->weights || !m->biases) {
                model_free(m);
                return -ENOMEM;
        }
        if (seed == 0)
                seed = 0x9e3779b97f4a7c15ULL;   /* xorshift needs a non-zero state */
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];
                size_t fan_in = (size_t)op->kh * op->kw * op->cin, count = (size_t)op->cout * fan_in;
                float scale = (float)sqrt(6.0 / (double)(fan_in ? fan_in : 1));

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                for (size_t k = 0; k < count; k++) {
                        seed ^= seed >> 12;     /* xorshift64* */
                        seed ^= seed << 25;
                        seed ^= seed >> 27;
                        m->weights[op->w_off + k] =
                                scale * (float)((double)((seed * 2685821657736338717ULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
                }
        }
        snprintf(m->id, sizeof(m->id), "random");
        *ret = m;
        return 0;
}

int model_find_op(const model_t *m, const char *name) {
        for (int i = 0; i < m->n_ops; i++)
                if (strcmp(m->ops[i].name, name) == 0)
                        return i;
        return -1;
}

/* Finds name in f and checks dtype and shape; converts it to float into a
 * malloc'd buffer in *ret, unless ret is NULL (a check only: nothing read
 * beyond the header). */
static int model_take(const st_file_t *f, const char *name, unsigned ndim, const int64_t *shape, float **ret,
                      errbuf_t *err) {
        const st_tensor_t *t = st_find(f, name);
        char want[96] = "", got[96] = "";
        float *buf;

        if (!t)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s' is missing", st_name(f), name);
        if (!st_dtype_is_float(t->dtype))
                return errbuf_set(err, -EINVAL, "%s: tensor '%s' has dtype %s; expected F32, F16 or BF16",
                                  st_name(f), name, st_dtype_name(t->dtype));
        for (unsigned i = 0; i < ndim; i++)
                snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", i ? ", " : "",
                         (long long)shape[i]);
        for (unsigned i = 0; i < t->ndim; i++)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", i ? ", " : "",
                         (long long)t->shape[i]);
        if (t->ndim != ndim || memcmp(t->shape, shape, ndim * sizeof(int64_t)) != 0)
                return errbuf_set(err, -EINVAL, "%s: tensor '%s' has shape [%s]; expected [%s]", st_name(f), name,
                                  got, want);
        if (!ret)
                return 0;
        buf = malloc(t->numel * sizeof(float));
        if (!buf)
                return errbuf_set(err, -ENOMEM, "%s: out of memory reading '%s'", st_name(f), name);
        st_to_float(t, buf);
        for (size_t i = 0; i < t->numel; i++)
                if (!isfinite(buf[i])) {
                        double bad = buf[i];

                        free(buf);
                        return errbuf_set(err, -EINVAL, "%s: tensor '%s' holds a non-finite value (%g) at index %zu",
                                          st_name(f), name, bad, i);
                }
        *ret = buf;
        return 0;
}

/* Loads one conv's weight and its BN, folds them into m's blocks:
 *   w' = w * gamma / sqrt(var + eps), b' = beta - mean * gamma / sqrt(var + eps),
 * transposing (cout, cin, kh, kw) to (cout, kh, kw, cin). */
static int model_fold_conv(model_t *m, const model_op_t *op, const st_file_t *f, errbuf_t *err) {
        static const char *const bn_parts[4] = { "weight", "bias", "running_mean", "running_var" };
        int64_t wshape[4] = { op->cout, op->cin, op->kh, op->kw }, bshape[1] = { op->cout };
        float *w = NULL, *bnv[4] = { NULL, NULL, NULL, NULL };
        char name[MODEL_NAME_MAX + 16];
        bool fold = m->weights != NULL;         /* else a check of the names, dtypes and shapes only */
        int r;

        snprintf(name, sizeof(name), "%s.weight", op->name);
        r = model_take(f, name, 4, wshape, fold ? &w : NULL, err);
        if (r < 0)
                return r;
        for (int i = 0; i < 4; i++) {
                snprintf(name, sizeof(name), "%s.%s", op->bn, bn_parts[i]);
                r = model_take(f, name, 1, bshape, fold ? &bnv[i] : NULL, err);
                if (r < 0)
                        goto out;
        }
        if (!fold)
                goto out;
        for (int o = 0; o < op->cout; o++) {
                double var = bnv[3][o], scale;

                if (var < 0) {
                        r = errbuf_set(err, -EINVAL, "%s: tensor '%s.running_var' is negative (%g) at index %d",
                                       st_name(f), op->bn, var, o);
                        goto out;
                }
                scale = bnv[0][o] / sqrt(var + MODEL_BN_EPS);
                m->biases[op->b_off + o] = (float)(bnv[1][o] - bnv[2][o] * scale);
                for (int c = 0; c < op->cin; c++)
                        for (int y = 0; y < op->kh; y++)
                                for (int x = 0; x < op->kw; x++) {
                                        size_t src = (((size_t)o * op->cin + c) * op->kh + y) * op->kw + x;
                                        size_t dst = (((size_t)o * op->kh + y) * op->kw + x) * op->cin + c;

                                        m->weights[op->w_off + dst] = (float)(w[src] * scale);
                                }
        }
        r = 0;
out:
        free(w);
        for (int i = 0; i < 4; i++)
                free(bnv[i]);
        return r;
}

static int model_fold_fc(model_t *m, const model_op_t *op, const st_file_t *f, errbuf_t *err) {
        int64_t wshape[2] = { op->cout, op->cin }, bshape[1] = { op->cout };
        float *w = NULL, *b = NULL;
        bool fold = m->weights != NULL;         /* else a check only */
        int r;

        r = model_take(f, "fc.weight", 2, wshape, fold ? &w : NULL, err);
        if (r < 0)
                return r;
        r = model_take(f, "fc.bias", 1, bshape, fold ? &b : NULL, err);
        if (r < 0 || !fold) {
                free(w);
                return r;
        }
        memcpy(m->weights + op->w_off, w, (size_t)op->cout * op->cin * sizeof(float));
        memcpy(m->biases + op->b_off, b, (size_t)op->cout * sizeof(float));
        free(w);
        free(b);
        return 0;
}

/* True when name is a tensor the table expects (or tolerates). */
static int model_expects(const model_t *m, const char *name) {
        static const char *const parts[] = { "weight", "bias", "running_mean", "running_var", "num_batches_tracked" };
        const char *dot = strrchr(name, '.');
        size_t plen;

        if (!dot)
                return 0;
        plen = (size_t)(dot - name);
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (op->kind != MODEL_OP_CONV && op->kind != MODEL_OP_FC)
                        continue;
                if (strlen(op->name) == plen && strncmp(name, op->name, plen) == 0)
                        return strcmp(dot + 1, "weight") == 0 || (op->kind == MODEL_OP_FC && strcmp(dot + 1, "bias") == 0);
                if (op->bn[0] && strlen(op->bn) == plen && strncmp(name, op->bn, plen) == 0) {
                        for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
                                if (strcmp(dot + 1, parts[k]) == 0)
                                        return 1;
                        return 0;
                }
        }
        return 0;
}

/* model_load_st, or with fold false model_check_st: the same checks of the
 * architecture, names, dtypes and shapes, without reading or folding the
 * values. */
static int model_read_st(model_t **ret, const st_file_t *f, bool fold, errbuf_t *err) {
        model_arch_t arch;
        model_t *m = NULL;
        int r;

        r = model_detect(f, &arch, err);
        if (r < 0)
                return r;
        r = model_describe_arch(&m, &arch);
        if (r < 0)
                return errbuf_set(err, r, "out of memory");
        if (fold) {
                m->weights = malloc(m->weight_elems * sizeof(float));
                m->biases = malloc(m->bias_elems * sizeof(float));
        }
        if (fold && (!m->weights || !m->biases)) {
                r = errbuf_set(err, -ENOMEM, "%s: out of memory for %zu weights", st_name(f), m->weight_elems);
                goto fail;
        }
        for (size_t i = 0; i < st_count(f); i++) {
                const char *name = st_get(f, i)->name;

                if (!model_expects(m, name)) {
                        r = errbuf_set(err, -EINVAL, "%s: an unexpected tensor '%s' (not part of %s)",
                                       st_name(f), name, m->arch.name);
                        goto fail;
                }
        }
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (op->kind == MODEL_OP_CONV)
                        r = model_fold_conv(m, op, f, err);
                else if (op->kind == MODEL_OP_FC)
                        r = model_fold_fc(m, op, f, err);
                else
                        r = 0;
                if (r < 0)
                        goto fail;
        }
        if (!ret) {
                model_free(m);
                return 0;
        }
        *ret = m;
        return 0;
fail:
        model_free(m);
        return r;
}

int model_load_st(model_t **ret, const st_file_t *f, errbuf_t *err) {
        assert(ret);
        return model_read_st(ret, f, true, err);
}

int model_check_st(const st_file_t *f, errbuf_t *err) {
        return model_read_st(NULL, f, false, err);
}

int model_check(const char *path, errbuf_t *err) {
        st_file_t *f = NULL;
        int r;

        r = st_open(&f, path, err);
        if (r < 0)
                return r;
        r = model_check_st(f, err);
        st_free(f);
        return r;
}

int model_describe_file(model_t **ret, const char *path, errbuf_t *err) {
        model_arch_t arch;
        st_file_t *f = NULL;
        int r;

        r = st_open(&f, path, err);
        if (r < 0)
                return r;
        r = model_detect(f, &arch, err);
        st_free(f);
        if (r < 0)
                return r;
        r = model_describe_arch(ret, &arch);
        return r < 0 ? errbuf_set(err, r, "out of memory") : 0;
}

int model_load(model_t **ret, const char *path, errbuf_t *err) {
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int digest_len = 0;
        st_file_t *f = NULL;
        const void *bytes;
        size_t len;
        model_t *m;
        int r;

        r = st_open(&f, path, err);
        if (r < 0)
                return r;
        r = model_load_st(&m, f, err);
        if (r < 0)
                goto out;
        bytes = st_bytes(f, &len);
        if (!EVP_Digest(bytes, len, digest, &digest_len, EVP_sha256(), NULL)) {
                model_free(m);
                r = errbuf_set(err, -EIO, "%s: could not compute its SHA-256", path);
                goto out;
        }
        strcpy(m->id, "sha256:");
        for (int i = 0; i < 6; i++)
                snprintf(m->id + 7 + 2 * i, 3, "%02x", digest[i]);
        *ret = m;
out:
        st_free(f);
        return r;
}

int model_drop_conv_weights(model_t *m) {
        size_t keep = 0, at = 0;
        float *w;

        if (!m || !m->weights || m->weights_fc_only)
                return 0;
        for (int i = 0; i < m->n_ops; i++)
                if (m->ops[i].kind == MODEL_OP_FC)
                        keep += (size_t)m->ops[i].cout * m->ops[i].kh * m->ops[i].kw * m->ops[i].cin;
        /* A new block, not a realloc in place: the large one goes back to
         * the kernel whole (it is mmapped), a shrunk one might not. */
        w = malloc((keep ? keep : 1) * sizeof(float));
        if (!w)
                return -ENOMEM;
        for (int i = 0; i < m->n_ops; i++) {
                model_op_t *op = &m->ops[i];
                size_t n = (size_t)op->cout * op->kh * op->kw * op->cin;

                if (op->kind != MODEL_OP_FC)
                        continue;
                memcpy(w + at, m->weights + op->w_off, n * sizeof(float));
                op->w_off = at;
                at += n;
        }
        free(m->weights);
        m->weights = w;
        m->conv_weights_dropped = true;
        m->weights_fc_only = true;
        return 0;
}

void model_release_conv_pages(model_t *m, int op_index) {
        const model_op_t *op = &m->ops[op_index];
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), from, to;

        assert(op->kind == MODEL_OP_CONV && m->weights && !m->weights_fc_only);
        for (int i = 0; i < m->n_ops; i++)
                assert(m->ops[i].kind != MODEL_OP_FC || m->ops[i].w_off >= op->w_off);
        m->conv_weights_dropped = true;
        /* Whole pages only: the first may hold the allocator's header, the
         * last the next conv's (or the fc's) first weights. */
        from = ((uintptr_t)m->weights + page - 1) / page * page;
        to = (uintptr_t)(m->weights + op->w_off + (size_t)op->cout * op->kh * op->kw * op->cin) / page * page;
        if (to > from)
                (void)madvise((void *)from, to - from, MADV_DONTNEED);  /* advice: a failure only keeps them */
}

void model_drop_host_weights(model_t *m) {
        if (!m)
                return;
        free(m->weights);
        free(m->biases);
        m->weights = NULL;
        m->biases = NULL;
}

void model_free(model_t *m) {
        if (!m)
                return;
        model_drop_host_weights(m);
        free(m);
}

/* Unit tests of model_: the ResNet tables (ResNet-50 v1.5 in detail, every
 * torchvision architecture's parameter count), the architecture detected
 * from a file and each refusal, loading from safetensors with every
 * name/shape/dtype check, and BN folding. The weights files are built in
 * memory from a table with st_build, then broken on purpose. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "st_build.h"
#include "unit.h"

/* How to break the file the builder writes. */
typedef enum model_break {
        BREAK_NONE,
        BREAK_DROP,             /* leave out tensor `name` */
        BREAK_SHAPE,            /* first dimension of `name` + 1 */
        BREAK_DTYPE_I32,        /* `name` stored as I32 */
        BREAK_EXTRA,            /* add a tensor `name` that ResNet-50 has not */
        BREAK_NEGATIVE_VAR,     /* running_var of `name` (a BN prefix) negative at index 3 */
        BREAK_NAN,              /* a NaN in `name` at index 5 */
        BREAK_BF16,             /* every float tensor as BF16 */
        BREAK_DROP_PREFIX,      /* leave out every tensor whose name starts with `name` */
        BREAK_RESHAPE,          /* `name` gets shape model_try_shape (zeros) */
} model_break_t;

/* The architecture model_try writes (resnet50 with 1000 classes unless a
 * test says otherwise), and BREAK_RESHAPE's shape. */
static const char *model_try_arch = "resnet50";
static int model_try_classes = 1000;
static int64_t model_try_shape[4];
static unsigned model_try_ndim;

typedef struct model_file {
        st_build_tensor_t t[400];       /* what is written; breaks edit this */
        size_t n;
        void *owned[800];               /* names and data, freed at the end */
        size_t n_owned;
} model_file_t;

static void model_file_add(model_file_t *f, const char *name, unsigned ndim, const int64_t *shape, uint64_t *seed,
                           float lo, float hi) {
        st_build_tensor_t *t = &f->t[f->n];
        size_t numel = 1;
        float *d;

        for (unsigned i = 0; i < ndim; i++)
                numel *= (size_t)shape[i];
        d = malloc(numel * sizeof(float));
        for (size_t i = 0; i < numel; i++)
                d[i] = lo + (hi - lo) * (unit_rand_float(seed) + 1.0f) / 2.0f;
        t->name = f->owned[f->n_owned++] = strdup(name);
        t->dtype = "F32";
        t->ndim = ndim;
        memcpy(t->shape, shape, ndim * sizeof(int64_t));
        t->data = d;
        t->nbytes = numel * sizeof(float);
        f->owned[f->n_owned++] = d;
        f->n++;
}

/* Every tensor torchvision's resnet50 state_dict has, with random values
 * (BN variances positive), in table order. */
static void model_file_fill(model_file_t *f, const model_t *m, uint64_t seed) {
        static const char *const bn_parts[4] = { "weight", "bias", "running_mean", "running_var" };
        static const float lo[4] = { 0.5f, -0.2f, -0.2f, 0.5f }, hi[4] = { 1.5f, 0.2f, 0.2f, 2.0f };
        char name[96];

        memset(f, 0, sizeof(*f));
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (op->kind == MODEL_OP_CONV) {
                        int64_t ws[4] = { op->cout, op->cin, op->kh, op->kw }, bs[1] = { op->cout };

                        snprintf(name, sizeof(name), "%s.weight", op->name);
                        model_file_add(f, name, 4, ws, &seed, -0.1f, 0.1f);
                        for (int k = 0; k < 4; k++) {
                                snprintf(name, sizeof(name), "%s.%s", op->bn, bn_parts[k]);
                                model_file_add(f, name, 1, bs, &seed, lo[k], hi[k]);
                        }
                } else if (op->kind == MODEL_OP_FC) {
                        int64_t ws[2] = { op->cout, op->cin }, bs[1] = { op->cout };

                        model_file_add(f, "fc.weight", 2, ws, &seed, -0.05f, 0.05f);
                        model_file_add(f, "fc.bias", 1, bs, &seed, -0.1f, 0.1f);
                }
        }
}

static void model_file_free(model_file_t *f) {
        for (size_t i = 0; i < f->n_owned; i++)
                free(f->owned[i]);
}

static st_build_tensor_t *model_file_find(model_file_t *f, const char *name) {
        for (size_t i = 0; i < f->n; i++)
                if (strcmp(f->t[i].name, name) == 0)
                        return &f->t[i];
        return NULL;
}

static uint16_t model_to_bf16(float v) {
        uint32_t u;

        memcpy(&u, &v, 4);
        return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* model_try checks the file (model_check_st) instead of loading it. */
static bool model_try_check_only;

/* Builds the file with one break applied and loads it. */
static int model_try(model_break_t how, const char *name, model_t **ret, errbuf_t *err) {
        static const char extra_data[16];
        model_t *desc = NULL;
        model_file_t *f = calloc(1, sizeof(*f));
        uint16_t *bf16[400] = { NULL };
        unsigned char *img = NULL;
        st_file_t *st = NULL;
        size_t len;
        int r;

        {
                model_arch_t arch;

                CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&arch, model_try_arch, model_try_classes, err), 0);
                CU_ASSERT_EQUAL_FATAL(model_describe_arch(&desc, &arch), 0);
        }
        model_file_fill(f, desc, 42);
        if (how == BREAK_DROP_PREFIX) {
                size_t kept = 0;

                for (size_t i = 0; i < f->n; i++)
                        if (strncmp(f->t[i].name, name, strlen(name)) != 0)
                                f->t[kept++] = f->t[i];
                CU_ASSERT_FATAL(kept < f->n);
                f->n = kept;
        } else if (how != BREAK_NONE && how != BREAK_BF16 && how != BREAK_EXTRA) {
                char full[96];
                st_build_tensor_t *t;

                snprintf(full, sizeof(full), how == BREAK_NEGATIVE_VAR ? "%s.running_var" : "%s", name);
                t = model_file_find(f, full);
                CU_ASSERT_PTR_NOT_NULL_FATAL(t);
                if (how == BREAK_DROP) {
                        size_t i = (size_t)(t - f->t);

                        memmove(&f->t[i], &f->t[i + 1], (f->n - i - 1) * sizeof(f->t[0]));
                        f->n--;
                } else if (how == BREAK_SHAPE) {
                        /* Keep the file self-consistent: only the model check may object. */
                        size_t numel = 1;
                        float *d;

                        t->shape[0] += 1;
                        for (unsigned k = 0; k < t->ndim; k++)
                                numel *= (size_t)t->shape[k];
                        d = calloc(numel, sizeof(float));
                        f->owned[f->n_owned++] = d;
                        t->data = d;
                        t->nbytes = numel * sizeof(float);
                } else if (how == BREAK_DTYPE_I32) {
                        t->dtype = "I32";
                } else if (how == BREAK_NEGATIVE_VAR) {
                        ((float *)t->data)[3] = -0.5f;
                } else if (how == BREAK_NAN) {
                        ((float *)t->data)[5] = NAN;
                } else if (how == BREAK_RESHAPE) {
                        size_t numel = 1;
                        float *d;

                        t->ndim = model_try_ndim;
                        memcpy(t->shape, model_try_shape, sizeof(model_try_shape));
                        for (unsigned k = 0; k < t->ndim; k++)
                                numel *= (size_t)t->shape[k];
                        d = calloc(numel ? numel : 1, sizeof(float));
                        f->owned[f->n_owned++] = d;
                        t->data = d;
                        t->nbytes = numel * sizeof(float);
                }
        }
        if (how == BREAK_EXTRA)
                f->t[f->n++] = (st_build_tensor_t){ .name = name, .dtype = "F32", .ndim = 1,
                                                    .shape = { 4 }, .data = extra_data, .nbytes = 16 };
        if (how == BREAK_BF16)
                for (size_t i = 0; i < f->n; i++) {
                        size_t numel = f->t[i].nbytes / 4;

                        bf16[i] = malloc(numel * 2);
                        for (size_t k = 0; k < numel; k++)
                                bf16[i][k] = model_to_bf16(((const float *)f->t[i].data)[k]);
                        f->t[i].dtype = "BF16";
                        f->t[i].data = bf16[i];
                        f->t[i].nbytes = numel * 2;
                }
        r = st_build(f->t, f->n, &img, &len);
        CU_ASSERT_EQUAL_FATAL(r, 0);
        r = st_open_buffer(&st, "w.safetensors", img, len, err);
        if (r == 0)
                r = model_try_check_only ? model_check_st(st, err) : model_load_st(ret, st, err);
        st_free(st);
        free(img);
        for (size_t i = 0; i < f->n; i++)
                free(bf16[i]);
        model_file_free(f);
        free(f);
        model_free(desc);
        return r;
}

static void test_model_table_is_resnet50_v1_5(void) {
        model_t *m = NULL;
        int convs = 0, i;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        for (i = 0; i < m->n_ops; i++)
                convs += m->ops[i].kind == MODEL_OP_CONV;
        /* 1 stem + 16 bottlenecks x 3 + 4 downsamples, then maxpool, avgpool, fc. */
        CU_ASSERT_EQUAL(convs, 53);
        CU_ASSERT_EQUAL(m->n_ops, 56);
        /* torchvision's resnet50 has 25,557,032 parameters: 53,120 of them are BN
         * weights and biases, which fold away into 26,560 conv biases. */
        CU_ASSERT_EQUAL(m->weight_elems, (size_t)23454912 + 2048000);
        CU_ASSERT_EQUAL(m->bias_elems, (size_t)26560 + 1000);
        /* v1.5: the stride sits on the 3x3 conv, not on the first 1x1. */
        i = model_find_op(m, "layer2.0.conv1");
        CU_ASSERT_EQUAL(m->ops[i].stride, 1);
        i = model_find_op(m, "layer2.0.conv2");
        CU_ASSERT_EQUAL(m->ops[i].stride, 2);
        CU_ASSERT_EQUAL(m->ops[i].h_out, 28);
        i = model_find_op(m, "layer4.0.downsample.0");
        CU_ASSERT_EQUAL(m->ops[i].stride, 2);
        CU_ASSERT_STRING_EQUAL(m->ops[i].bn, "layer4.0.downsample.1");
        CU_ASSERT_EQUAL(model_find_op(m, "layer1.1.downsample.0"), -1);
        /* The residual of block 0 is its downsample; of the others, the block input. */
        i = model_find_op(m, "layer3.0.conv3");
        CU_ASSERT_EQUAL(m->ops[i].residual, m->ops[model_find_op(m, "layer3.0.downsample.0")].out);
        i = model_find_op(m, "layer3.1.conv3");
        CU_ASSERT_EQUAL(m->ops[i].residual, m->ops[model_find_op(m, "layer3.1.conv1")].in);
        CU_ASSERT_EQUAL(m->tensors[m->ops[model_find_op(m, "avgpool")].in].h, 7);
        CU_ASSERT_EQUAL(m->tensors[m->logits].c, 1000);
        CU_ASSERT_EQUAL(m->tensors[m->input].elems, (size_t)224 * 224 * 3);
        model_free(m);
}

static void test_model_load_folds_bn(void) {
        model_t *desc = NULL, *m = NULL;
        model_file_t *f = calloc(1, sizeof(*f));
        unsigned char *img;
        st_file_t *st = NULL;
        errbuf_t err;
        size_t len;
        const model_op_t *op;
        float *w, *g, *b, *mu, *var;
        int o = 7, c = 2, y = 1, x = 4;
        double scale;

        model_describe(&desc);
        model_file_fill(f, desc, 7);
        CU_ASSERT_EQUAL_FATAL(st_build(f->t, f->n, &img, &len), 0);
        CU_ASSERT_EQUAL_FATAL(st_open_buffer(&st, "w.safetensors", img, len, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_load_st(&m, st, &err), 0);
        op = &m->ops[model_find_op(m, "conv1")];
        w = (float *)model_file_find(f, "conv1.weight")->data;
        g = (float *)model_file_find(f, "bn1.weight")->data;
        b = (float *)model_file_find(f, "bn1.bias")->data;
        mu = (float *)model_file_find(f, "bn1.running_mean")->data;
        var = (float *)model_file_find(f, "bn1.running_var")->data;
        scale = g[o] / sqrt(var[o] + 1e-5);
        /* torchvision (cout, cin, kh, kw) -> ours (cout, kh, kw, cin), scaled. */
        CU_ASSERT_DOUBLE_EQUAL(m->weights[op->w_off + ((o * 7 + y) * 7 + x) * 3 + c],
                               w[((o * 3 + c) * 7 + y) * 7 + x] * scale, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(m->biases[op->b_off + o], b[o] - mu[o] * scale, 1e-6);
        op = &m->ops[model_find_op(m, "fc")];
        CU_ASSERT_EQUAL(m->weights[op->w_off + 5 * 2048 + 9],
                        ((float *)model_file_find(f, "fc.weight")->data)[5 * 2048 + 9]);
        CU_ASSERT_EQUAL(m->biases[op->b_off + 999], ((float *)model_file_find(f, "fc.bias")->data)[999]);
        st_free(st);
        free(img);
        model_free(m);
        model_free(desc);
        model_file_free(f);
        free(f);
}

static void test_model_load_bf16(void) {
        model_t *m = NULL;
        errbuf_t err;

        CU_ASSERT_EQUAL(model_try(BREAK_BF16, NULL, &m, &err), 0);
        CU_ASSERT_PTR_NOT_NULL(m);
        model_free(m);
}

static void model_expect_error(model_break_t how, const char *name, const char *needle) {
        model_t *m = NULL;
        errbuf_t err = { "" };
        int r = model_try(how, name, &m, &err);

        CU_ASSERT_EQUAL(r, -EINVAL);
        CU_ASSERT_PTR_NULL(m);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "w.safetensors"));
        if (r == 0)
                model_free(m);
}

static void test_model_rejects_missing_tensor(void) {
        model_expect_error(BREAK_DROP, "layer3.4.bn2.running_mean", "tensor 'layer3.4.bn2.running_mean' is missing");
        model_expect_error(BREAK_DROP, "fc.bias", "tensor 'fc.bias' is missing");
}

static void test_model_rejects_wrong_shape(void) {
        model_expect_error(BREAK_SHAPE, "layer2.1.conv2.weight",
                           "tensor 'layer2.1.conv2.weight' has shape [129, 128, 3, 3]; expected [128, 128, 3, 3]");
}

static void test_model_rejects_integer_dtype(void) {
        model_expect_error(BREAK_DTYPE_I32, "layer1.0.downsample.0.weight", "has dtype I32; expected F32, F16 or BF16");
}

static void test_model_rejects_unexpected_tensor(void) {
        /* A squeeze-and-excitation block's tensor: the stages still count right. */
        model_expect_error(BREAK_EXTRA, "layer1.0.se.fc1.weight",
                           "an unexpected tensor 'layer1.0.se.fc1.weight' (not part of resnet50)");
        /* A fourth block in layer4 is a stage of the wrong length, not a stray tensor. */
        model_expect_error(BREAK_EXTRA, "layer4.3.conv1.weight",
                           "layer4 has 4 blocks; torchvision's ResNets have 2 or 3");
        model_expect_error(BREAK_EXTRA, "layer5.0.conv1.weight", "an unexpected tensor 'layer5.0.conv1.weight'");
}

/* torchvision's parameter counts (sum of p.numel() over parameters()):
 * conv and fc weights, fc bias, and BN weight and bias, which fold into a
 * bias per conv output. */
static void test_model_table_of_every_arch(void) {
        static const struct {
                const char *name;
                size_t params;
                int n_ops, features;
        } archs[] = {
                { "resnet18", 11689512, 2 + 8 * 2 + 3 + 2, 512 },
                { "resnet34", 21797672, 2 + 16 * 2 + 3 + 2, 512 },
                { "resnet50", 25557032, 2 + 16 * 3 + 4 + 2, 2048 },
                { "resnet101", 44549160, 2 + 33 * 3 + 4 + 2, 2048 },
                { "resnet152", 60192808, 2 + 50 * 3 + 4 + 2, 2048 },
                { "wide_resnet50_2", 68883240, 2 + 16 * 3 + 4 + 2, 2048 },
                { "wide_resnet101_2", 126886696, 2 + 33 * 3 + 4 + 2, 2048 },
        };
        errbuf_t err;

        for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
                model_arch_t arch;
                model_t *m = NULL;
                int fc;

                CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&arch, archs[i].name, 1000, &err), 0);
                CU_ASSERT_EQUAL_FATAL(model_describe_arch(&m, &arch), 0);
                CU_ASSERT_STRING_EQUAL(m->arch.name, archs[i].name);
                CU_ASSERT_EQUAL(m->n_ops, archs[i].n_ops);
                CU_ASSERT_EQUAL(m->weight_elems + 2 * (m->bias_elems - 1000) + 1000, archs[i].params);
                fc = model_find_op(m, "fc");
                CU_ASSERT_EQUAL(m->ops[fc].cin, archs[i].features);
                CU_ASSERT_EQUAL(m->tensors[m->logits].c, 1000);
                /* The last stage's output is 7x7, whatever the depth. */
                CU_ASSERT_EQUAL(m->ops[fc - 1].h_in, 7);
                model_free(m);
        }
        CU_ASSERT_EQUAL(model_arch_by_name(&(model_arch_t){}, "resnext50_32x4d", 10, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "unknown architecture 'resnext50_32x4d'"));
        CU_ASSERT_EQUAL(model_arch_by_name(&(model_arch_t){}, "resnet18", 0, &err), -EINVAL);
        CU_ASSERT_EQUAL(model_arch_by_name(&(model_arch_t){}, "resnet18", MODEL_CLASSES_MAX + 1, &err), -EINVAL);
}

/* resnet18/34's layer1 has no downsample (64 channels in and out, stride
 * 1); a basic block is two 3x3 convs, the stride on the first. */
static void test_model_table_basic_blocks(void) {
        model_arch_t arch;
        model_t *m = NULL;
        errbuf_t err;
        int i;

        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&arch, "resnet18", 10, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_describe_arch(&m, &arch), 0);
        CU_ASSERT_EQUAL(m->classes, 10);
        CU_ASSERT_EQUAL(model_find_op(m, "layer1.0.downsample.0"), -1);
        CU_ASSERT_EQUAL(model_find_op(m, "layer1.0.conv3"), -1);
        i = model_find_op(m, "layer2.0.conv1");
        CU_ASSERT_EQUAL(m->ops[i].kh, 3);
        CU_ASSERT_EQUAL(m->ops[i].stride, 2);
        i = model_find_op(m, "layer2.0.conv2");
        CU_ASSERT_EQUAL(m->ops[i].residual, m->ops[model_find_op(m, "layer2.0.downsample.0")].out);
        CU_ASSERT_EQUAL(m->ops[model_find_op(m, "layer1.1.conv2")].residual,
                        m->ops[model_find_op(m, "layer1.1.conv1")].in);
        model_free(m);
        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&arch, "wide_resnet50_2", 3, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_describe_arch(&m, &arch), 0);
        i = model_find_op(m, "layer1.0.conv2");
        CU_ASSERT_EQUAL(m->ops[i].cin, 128);
        CU_ASSERT_EQUAL(m->ops[i].cout, 128);
        CU_ASSERT_EQUAL(m->ops[model_find_op(m, "layer1.0.conv3")].cout, 256);
        model_free(m);
}

/* The architecture and the class count come from the file alone. */
static void test_model_detects_arch_and_classes(void) {
        static const struct {
                const char *arch;
                int classes;
        } cases[] = { { "resnet18", 10 }, { "resnet34", 1 }, { "resnet50", 3 } };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                model_t *m = NULL;
                errbuf_t err = { "" };

                model_try_arch = cases[i].arch;
                model_try_classes = cases[i].classes;
                CU_ASSERT_EQUAL(model_try(BREAK_NONE, NULL, &m, &err), 0);
                if (!m) {
                        fprintf(stderr, "%s/%d: %s\n", cases[i].arch, cases[i].classes, err.msg);
                        continue;
                }
                CU_ASSERT_STRING_EQUAL(m->arch.name, cases[i].arch);
                CU_ASSERT_EQUAL(m->classes, cases[i].classes);
                CU_ASSERT_EQUAL(m->tensors[m->logits].c, cases[i].classes);
                model_free(m);
        }
        model_try_arch = "resnet50";
        model_try_classes = 1000;
}

/* Each file shape that is no torchvision ResNet gets its own sentence. */
static void test_model_rejects_unsupported_shapes(void) {
        model_expect_error(BREAK_DROP_PREFIX, "layer3.5.",
                           "layer3 has 5 blocks; torchvision's ResNets have 2, 6, 23 or 36");
        model_expect_error(BREAK_DROP_PREFIX, "layer2.", "layer2 has 0 blocks; torchvision's ResNets have 2, 4 or 8");
        model_expect_error(BREAK_DROP, "conv1.weight", "tensor 'conv1.weight' is missing: not a torchvision ResNet");
        model_expect_error(BREAK_DROP, "fc.weight", "tensor 'fc.weight' is missing");
        /* resnext50_32x4d's first grouped conv: 128 wide, 32 groups of 4. */
        model_try_shape[0] = 128, model_try_shape[1] = 4, model_try_shape[2] = 3, model_try_shape[3] = 3;
        model_try_ndim = 4;
        model_expect_error(BREAK_RESHAPE, "layer1.0.conv2.weight",
                           "'layer1.0.conv2.weight' has shape [128, 4, 3, 3], a grouped convolution (32 groups): "
                           "resnext is not supported");
        model_try_shape[0] = 0, model_try_shape[1] = 2048, model_try_ndim = 2;
        model_expect_error(BREAK_RESHAPE, "fc.weight", "'fc.weight' has shape [0, 2048]; expected [classes, features] "
                                                       "with 1 to 100000 classes");
        model_try_shape[0] = MODEL_CLASSES_MAX + 1, model_try_shape[1] = 1, model_try_ndim = 2;
        model_expect_error(BREAK_RESHAPE, "fc.weight", "'fc.weight' has shape [100001, 1]");
        /* fc's input is the last stage's width. */
        model_try_shape[0] = 1000, model_try_shape[1] = 512, model_try_ndim = 2;
        model_expect_error(BREAK_RESHAPE, "fc.weight", "tensor 'fc.weight' has shape [1000, 512]; expected [1000, 2048]");
        /* Basic blocks in a count only bottlenecks use. */
        model_try_arch = "resnet34";
        model_expect_error(BREAK_DROP_PREFIX, "layer1.2.",
                           "basic blocks with 2, 4, 6, 3 blocks per stage match no torchvision ResNet");
        /* A wide stem where a basic block must be 64 wide. */
        model_try_arch = "resnet18";
        model_try_shape[0] = 128, model_try_shape[1] = 64, model_try_shape[2] = 3, model_try_shape[3] = 3;
        model_try_ndim = 4;
        model_expect_error(BREAK_RESHAPE, "layer1.0.conv1.weight",
                           "tensor 'layer1.0.conv1.weight' has shape [128, 64, 3, 3]; expected [64, 64, 3, 3]");
        model_try_arch = "resnet50";
}

static void test_model_rejects_negative_variance(void) {
        model_expect_error(BREAK_NEGATIVE_VAR, "layer1.2.bn3", "'layer1.2.bn3.running_var' is negative");
}

static void test_model_rejects_non_finite(void) {
        model_expect_error(BREAK_NAN, "layer4.2.conv3.weight", "non-finite");
}

/* The check --check-config makes: every name, dtype and shape refused as
 * the load refuses it, but no value read (a NaN or a negative variance
 * passes; only the load sees those). */
static void test_model_check_without_values(void) {
        model_t *m = NULL;
        errbuf_t err = { "" };

        model_try_check_only = true;
        model_expect_error(BREAK_DROP, "fc.bias", "tensor 'fc.bias' is missing");
        model_expect_error(BREAK_DROP, "layer3.4.bn2.running_mean", "tensor 'layer3.4.bn2.running_mean' is missing");
        model_expect_error(BREAK_SHAPE, "layer2.1.conv2.weight",
                           "tensor 'layer2.1.conv2.weight' has shape [129, 128, 3, 3]; expected [128, 128, 3, 3]");
        model_expect_error(BREAK_DTYPE_I32, "layer1.0.downsample.0.weight", "has dtype I32; expected F32, F16 or BF16");
        model_expect_error(BREAK_EXTRA, "layer1.0.se.fc1.weight",
                           "an unexpected tensor 'layer1.0.se.fc1.weight' (not part of resnet50)");
        model_expect_error(BREAK_EXTRA, "layer4.3.conv1.weight", "layer4 has 4 blocks; torchvision's ResNets have 2 or 3");
        CU_ASSERT_EQUAL(model_try(BREAK_NONE, NULL, &m, &err), 0);
        CU_ASSERT_EQUAL(model_try(BREAK_BF16, NULL, &m, &err), 0);
        CU_ASSERT_EQUAL(model_try(BREAK_NAN, "layer4.2.conv3.weight", &m, &err), 0);
        CU_ASSERT_EQUAL(model_try(BREAK_NEGATIVE_VAR, "layer1.2.bn3", &m, &err), 0);
        CU_ASSERT_PTR_NULL(m);
        model_try_check_only = false;
        CU_ASSERT_EQUAL(model_check("/nonexistent/inferd-weights.safetensors", &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/inferd-weights.safetensors: cannot open"));
        CU_ASSERT_EQUAL(model_check("/dev/null", &err), -EINVAL);
        CU_ASSERT_STRING_EQUAL(err.msg, "/dev/null: is not a regular file");
}

static void test_model_load_missing_file(void) {
        model_t *m = NULL;
        errbuf_t err = { "" };

        CU_ASSERT_EQUAL(model_load(&m, "/nonexistent/inferd-weights.safetensors", &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/inferd-weights.safetensors"));
}

static void test_model_random_is_deterministic(void) {
        model_t *a = NULL, *b = NULL;

        CU_ASSERT_EQUAL_FATAL(model_random(&a, 3), 0);
        CU_ASSERT_EQUAL_FATAL(model_random(&b, 3), 0);
        CU_ASSERT_EQUAL(memcmp(a->weights, b->weights, a->weight_elems * sizeof(float)), 0);
        CU_ASSERT_NOT_EQUAL(a->weights[0], a->weights[1]);
        model_free(a);
        model_free(b);
}

int test_model_register(void) {
        static CU_TestInfo tests[] = {
                { "table_is_resnet50_v1_5", test_model_table_is_resnet50_v1_5 },
                { "load_folds_bn", test_model_load_folds_bn },
                { "load_bf16", test_model_load_bf16 },
                { "rejects_missing_tensor", test_model_rejects_missing_tensor },
                { "rejects_wrong_shape", test_model_rejects_wrong_shape },
                { "rejects_integer_dtype", test_model_rejects_integer_dtype },
                { "rejects_unexpected_tensor", test_model_rejects_unexpected_tensor },
                { "table_of_every_arch", test_model_table_of_every_arch },
                { "table_basic_blocks", test_model_table_basic_blocks },
                { "detects_arch_and_classes", test_model_detects_arch_and_classes },
                { "rejects_unsupported_shapes", test_model_rejects_unsupported_shapes },
                { "rejects_negative_variance", test_model_rejects_negative_variance },
                { "rejects_non_finite", test_model_rejects_non_finite },
                { "check_without_values", test_model_check_without_values },
                { "load_missing_file", test_model_load_missing_file },
                { "random_is_deterministic", test_model_random_is_deterministic },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("model", tests);
}

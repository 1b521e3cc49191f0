/* model: a torchvision ResNet's description and its weights.
 *
 * The architecture comes from the weights file alone (model_detect):
 * resnet18/34 (basic blocks), resnet50/101/152 and wide_resnet50_2/101_2
 * (bottlenecks), with any class count from 1 to MODEL_CLASSES_MAX taken
 * from fc.weight's shape. Without a file the table is ResNet-50 with 1000
 * classes (model_describe), which is what the planner assumes by default.
 *
 * One layer table serves both engines and the planner: every op (convolution,
 * pool, fully connected) with its geometry and the activation tensors it reads
 * and writes, in execution order, so that buffer liveness can be derived from
 * it. The stride of a bottleneck sits on its 3x3 conv (v1.5); block 0 of each
 * stage has the downsample. Activations are NHWC.
 *
 * model_load reads a safetensors file whose names are torchvision's
 * state_dict keys, checks every tensor's name, dtype and shape against the
 * table (naming the first missing, unexpected or mismatched one), and folds
 * each BatchNorm (eps 1e-5) into its convolution: one fp32 weight block in
 * (cout, kh, kw, cin) order and one fp32 bias block.
 *
 * It does not run anything (engines do) and does not decide where tensors
 * live in memory (plan_ does). */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/st.h"

#define MODEL_CLASSES_MAX 100000        /* fc.weight's rows: 1..MODEL_CLASSES_MAX */
#define MODEL_IN_H 224
#define MODEL_IN_W 224
#define MODEL_IN_C 3
#define MODEL_BN_EPS 1e-5
#define MODEL_MAX_OPS 160               /* resnet152: 158 */
#define MODEL_MAX_TENSORS 160
#define MODEL_NAME_MAX 32
#define MODEL_ARCH_MAX 24

/* What model_detect reads from a file, and what model_describe_arch builds. */
typedef struct model_arch {
        char name[MODEL_ARCH_MAX];      /* "resnet18" ... "wide_resnet101_2" */
        int bottleneck;                 /* 0: basic blocks (two 3x3), 1: bottlenecks (1x1, 3x3, 1x1) */
        int blocks[4];                  /* per stage, layer1..layer4 */
        int width_factor;               /* inner width / planes: 1, or 2 for wide_resnet */
        int classes;                    /* fc's outputs */
} model_arch_t;

typedef enum model_op_kind {
        MODEL_OP_CONV,          /* conv + folded BN, + residual, + ReLU */
        MODEL_OP_MAXPOOL,
        MODEL_OP_AVGPOOL,       /* global average pool to (1, 1, C) */
        MODEL_OP_FC,            /* (C) -> (classes), no activation */
} model_op_kind_t;

typedef struct model_tensor {
        int h, w, c;            /* per-sample NHWC shape */
        size_t elems;           /* h * w * c */
        int producer;           /* index of the op that writes it; -1 for the network input */
        int last_use;           /* index of the last op that reads it (== producer for the logits) */
} model_tensor_t;

typedef struct model_op {
        model_op_kind_t kind;
        char name[MODEL_NAME_MAX];      /* state_dict prefix of the weight: "layer2.0.conv2", "layer2.0.downsample.0", "fc"; "maxpool", "avgpool" */
        char bn[MODEL_NAME_MAX];        /* state_dict prefix of the BN folded into a conv: "layer2.0.bn2"; "" otherwise */
        int in, out;            /* tensor ids */
        int residual;           /* tensor id added before the ReLU (same shape as out), or -1 */
        int relu;
        int cin, cout;          /* channels; fc: features (512 or 2048) -> classes */
        int kh, kw, stride, pad;        /* conv and maxpool; 1,1,1,0 for fc */
        int h_in, w_in, h_out, w_out;
        size_t w_off;           /* into model->weights: (cout, kh, kw, cin) fp32; conv and fc only */
        size_t b_off;           /* into model->biases: (cout) fp32; conv and fc only */
} model_op_t;

typedef struct model {
        int n_ops;
        model_op_t ops[MODEL_MAX_OPS];
        int n_tensors;
        model_tensor_t tensors[MODEL_MAX_TENSORS];
        int input;              /* tensor id: (224, 224, 3) normalised */
        int logits;             /* tensor id: (1, 1, classes) */
        int classes;            /* arch.classes: the logits per sample */
        model_arch_t arch;
        size_t weight_elems;    /* every conv and fc weight, counted once */
        size_t bias_elems;
        float *weights;         /* (weight_elems) folded, NULL when described only or dropped; the fc's
                                 * blocks alone once conv_weights_dropped */
        float *biases;          /* (bias_elems) folded */
        char id[24];            /* "sha256:<first 12 hex of the file's digest>", "" when not from a file */
        bool conv_weights_dropped; /* model_release_conv_pages or _drop_conv_weights: the convs' folded
                                    * weights are not to be read */
        bool weights_fc_only;   /* model_drop_conv_weights: weights holds the fc's blocks alone */
} model_t;

/* The layer table alone, without weights: enough to plan. model_describe
 * is ResNet-50 with 1000 classes. */
int model_describe(model_t **ret);
int model_describe_arch(model_t **ret, const model_arch_t *arch);

/* The architecture called name ("resnet18", ..., "wide_resnet101_2") with
 * classes outputs. Returns 0, or -EINVAL with a sentence naming the choices. */
int model_arch_by_name(model_arch_t *ret, const char *name, int classes, errbuf_t *err);

/* Reads the architecture from f's tensor names and shapes alone (conv3
 * present: bottlenecks; blocks per stage: the highest layerN.i; widths and
 * classes: conv1's and fc's shapes). Returns 0, or -EINVAL with one sentence
 * naming what did not fit. Tensors are checked in full by model_load_st. */
int model_detect(const st_file_t *f, model_arch_t *ret, errbuf_t *err);

/* Reads path, validates it against the table, and folds BN.
 * Returns 0, or -errno with a sentence naming the file and tensor. */
int model_load(model_t **ret, const char *path, errbuf_t *err);

/* The layer table of the model in path, from its header alone (model_detect):
 * enough to plan, no weights read. */
int model_describe_file(model_t **ret, const char *path, errbuf_t *err);

/* The same from an already opened file (model->id stays ""). */
int model_load_st(model_t **ret, const st_file_t *f, errbuf_t *err);

/* Checks f against the table as model_load_st does (every tensor name,
 * dtype and shape), without reading a value: for --check-config.
 * Returns 0, or -errno with model_load_st's sentence. */
int model_check_st(const st_file_t *f, errbuf_t *err);

/* The same for the file at path: opens it (st_open: a regular file, a
 * valid safetensors header and layout) and checks it. Nothing is loaded. */
int model_check(const char *path, errbuf_t *err);

/* The layer table with seeded random weights (He-scaled uniform, zero
 * biases): for benchmarks that have no weights file. Not for predictions.
 * model_random is ResNet-50 with 1000 classes. */
int model_random(model_t **ret, uint64_t seed);
int model_random_arch(model_t **ret, const model_arch_t *arch, uint64_t seed);

/* Frees the host copy of the weights once an engine holds its own (the CUDA
 * engine after its upload), so one weight set stays resident. */
void model_drop_host_weights(model_t *m);

/* Frees the convs' folded weights once an engine holds its own copy of them
 * (the CPU engine's, reordered for oneDNN), so one weight set stays
 * resident: the fc's blocks move to a new allocation of their own (their
 * w_off changes) and every bias stays. No engine can open on m after it.
 * Returns 0 (also when already dropped or never loaded), or -ENOMEM with
 * every block kept. */
int model_drop_conv_weights(model_t *m);

/* Gives the kernel back the pages that hold nothing but the folded weights
 * of the convs up to op_index (a conv) in table order, as an engine
 * reorders them one by one, so that the old and the new copy are not both
 * resident at open: the blocks lie in table order, the fc's after every
 * conv's. The convs' weights count as dropped from then on;
 * model_drop_conv_weights frees the rest. */
void model_release_conv_pages(model_t *m, int op_index);

/* NULL is a no-op. */
void model_free(model_t *m);

/* Index of the op called name, or -1. */
int model_find_op(const model_t *m, const char *name);

/* The embedding's length: the global average pool's channels, which feed
 * the fc (fc's cin): 2048 for resnet50/101/152 and the wide ones, 512 for
 * resnet18/34. Inline: the planner (core/plan.c) uses it, and the decode
 * fuzzer links the planner without the model's loader. */
static inline int model_embedding_dim(const model_t *m) {
        /* The table's last op is the fc: its input is the pooled features. */
        assert(m->n_ops > 0 && m->ops[m->n_ops - 1].kind == MODEL_OP_FC);
        return m->ops[m->n_ops - 1].cin;
}

#endif

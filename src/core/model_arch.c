/* model_arch: which torchvision ResNet a weights file holds, read from its
 * tensor names and shapes alone (no flag, no config key). See model.h.
 *
 * It decides the architecture and the class count only; every tensor's
 * presence, dtype and shape is then checked against the table built from
 * that architecture by model_load_st. It does not read tensor data. */
#include "core/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* torchvision's ResNets (torchvision/models/resnet.py): block type, blocks per
 * stage, inner width over planes. resnext (grouped 3x3 convs) is refused. */
static const model_arch_t model_archs[] = {
        { "resnet18", 0, { 2, 2, 2, 2 }, 1, 1000 },
        { "resnet34", 0, { 3, 4, 6, 3 }, 1, 1000 },
        { "resnet50", 1, { 3, 4, 6, 3 }, 1, 1000 },
        { "resnet101", 1, { 3, 4, 23, 3 }, 1, 1000 },
        { "resnet152", 1, { 3, 8, 36, 3 }, 1, 1000 },
        { "wide_resnet50_2", 1, { 3, 4, 6, 3 }, 2, 1000 },
        { "wide_resnet101_2", 1, { 3, 4, 23, 3 }, 2, 1000 },
};
#define MODEL_N_ARCHS (sizeof(model_archs) / sizeof(model_archs[0]))

int model_arch_by_name(model_arch_t *ret, const char *name, int classes, errbuf_t *err) {
        if (classes < 1 || classes > MODEL_CLASSES_MAX)
                return errbuf_set(err, -EINVAL, "%d classes is outside 1 to %d", classes, MODEL_CLASSES_MAX);
        for (size_t i = 0; i < MODEL_N_ARCHS; i++) {
                if (strcmp(model_archs[i].name, name) == 0) {
                        *ret = model_archs[i];
                        ret->classes = classes;
                        return 0;
                }
        }
        return errbuf_set(err, -EINVAL, "unknown architecture '%s'; inferd runs resnet18, resnet34, resnet50, "
                          "resnet101, resnet152, wide_resnet50_2 or wide_resnet101_2", name);
}

/* Parses "layerN.I.rest": stage N (1..4) and block I into *stage, *block,
 * and returns rest, or NULL when name is not of that form. */
static const char *model_arch_parse_layer(const char *name, int *stage, int *block) {
        char *end;
        long b;

        if (strncmp(name, "layer", 5) != 0 || name[5] < '1' || name[5] > '4' || name[6] != '.')
                return NULL;
        if (name[7] < '0' || name[7] > '9')
                return NULL;
        b = strtol(name + 7, &end, 10);
        if (*end != '.' || b > 1000 || (name[7] == '0' && end != name + 8))
                return NULL;
        *stage = name[5] - '1';
        *block = (int)b;
        return end + 1;
}

/* "2, 6, 23 or 36": every block count torchvision uses at that stage. */
static void model_arch_stage_choices(int stage, char *buf, size_t size) {
        int seen[MODEL_N_ARCHS], n = 0;

        for (size_t i = 0; i < MODEL_N_ARCHS; i++) {
                int v = model_archs[i].blocks[stage], dup = 0;

                for (int j = 0; j < n; j++)
                        dup |= seen[j] == v;
                if (dup)
                        continue;
                /* Insertion keeps them ascending. */
                int pos = n++;

                while (pos > 0 && seen[pos - 1] > v) {
                        seen[pos] = seen[pos - 1];
                        pos--;
                }
                seen[pos] = v;
        }
        buf[0] = 0;
        for (int j = 0; j < n; j++)
                snprintf(buf + strlen(buf), size - strlen(buf), "%s%d", j == 0 ? "" : j == n - 1 ? " or " : ", ",
                         seen[j]);
}

static const char *model_arch_shape(const st_tensor_t *t, char *buf, size_t size) {
        buf[0] = 0;
        for (unsigned i = 0; i < t->ndim; i++)
                snprintf(buf + strlen(buf), size - strlen(buf), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return buf;
}

int model_detect(const st_file_t *f, model_arch_t *ret, errbuf_t *err) {
        const st_tensor_t *t, *fc;
        int blocks[4] = { 0, 0, 0, 0 }, bottleneck, width_factor;
        char shape[96], choices[64];

        if (!st_find(f, "conv1.weight"))
                return errbuf_set(err, -EINVAL, "%s: tensor 'conv1.weight' is missing: not a torchvision ResNet",
                                  st_name(f));
        for (size_t i = 0; i < st_count(f); i++) {
                int stage, block;

                if (model_arch_parse_layer(st_get(f, i)->name, &stage, &block) && block + 1 > blocks[stage])
                        blocks[stage] = block + 1;
        }
        for (int l = 0; l < 4; l++) {
                int ok = 0;

                for (size_t i = 0; i < MODEL_N_ARCHS; i++)
                        ok |= model_archs[i].blocks[l] == blocks[l];
                if (!ok) {
                        model_arch_stage_choices(l, choices, sizeof(choices));
                        return errbuf_set(err, -EINVAL, "%s: layer%d has %d block%s; torchvision's ResNets have %s",
                                          st_name(f), l + 1, blocks[l], blocks[l] == 1 ? "" : "s", choices);
                }
        }
        bottleneck = st_find(f, "layer1.0.conv3.weight") != NULL;
        /* resnext: the same names as resnet50/101, with a grouped 3x3 conv
         * (conv2.weight's second dim is its input width over the groups). */
        t = st_find(f, "layer1.0.conv2.weight");
        if (bottleneck && t && t->ndim == 4 && t->shape[1] > 0 && t->shape[1] < t->shape[0])
                return errbuf_set(err, -EINVAL,
                                  "%s: tensor 'layer1.0.conv2.weight' has shape [%s], a grouped convolution "
                                  "(%lld groups): resnext is not supported",
                                  st_name(f), model_arch_shape(t, shape, sizeof(shape)),
                                  (long long)(t->shape[0] / t->shape[1]));
        width_factor = 1;
        t = st_find(f, "layer1.0.conv1.weight");
        if (bottleneck && t && t->ndim == 4 && t->shape[0] == 128)
                width_factor = 2;
        fc = st_find(f, "fc.weight");
        if (!fc)
                return errbuf_set(err, -EINVAL, "%s: tensor 'fc.weight' is missing", st_name(f));
        if (fc->ndim != 2 || fc->shape[0] < 1 || fc->shape[0] > MODEL_CLASSES_MAX)
                return errbuf_set(err, -EINVAL,
                                  "%s: tensor 'fc.weight' has shape [%s]; expected [classes, features] with "
                                  "1 to %d classes",
                                  st_name(f), model_arch_shape(fc, shape, sizeof(shape)), MODEL_CLASSES_MAX);
        for (size_t i = 0; i < MODEL_N_ARCHS; i++) {
                const model_arch_t *a = &model_archs[i];

                if (a->bottleneck == bottleneck && a->width_factor == width_factor &&
                    memcmp(a->blocks, blocks, sizeof(blocks)) == 0) {
                        *ret = *a;
                        ret->classes = (int)fc->shape[0];
                        return 0;
                }
        }
        return errbuf_set(err, -EINVAL,
                          "%s: %s%s with %d, %d, %d, %d blocks per stage match no torchvision ResNet "
                          "(basic: resnet18 2, 2, 2, 2 and resnet34 3, 4, 6, 3; bottleneck: resnet50 3, 4, 6, 3, "
                          "resnet101 3, 4, 23, 3 and resnet152 3, 8, 36, 3; wide: 50 and 101 only)",
                          st_name(f), width_factor == 2 ? "wide " : "", bottleneck ? "bottlenecks" : "basic blocks",
                          blocks[0], blocks[1], blocks[2], blocks[3]);
}

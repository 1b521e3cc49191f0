/* daemon_model: the daemon's checks of a model against its config. See
 * daemon_model.h. */
#include "daemon/daemon_model.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

int daemon_model_check(const cfg_t *c, const model_t *m, labels_t **labels, errbuf_t *err) {
        int r;

        if (labels)
                *labels = NULL;
        if (c->service.top_k > m->classes)
                return errbuf_set(err, -EINVAL,
                                  "%s: [service] top_k = %d is above the %d class%s of the model in '%s' (%s)",
                                  c->path, c->service.top_k, m->classes, m->classes == 1 ? "" : "es",
                                  c->model.weights, m->arch.name);
        if (!labels || !c->model.labels[0])
                return 0;
        r = labels_load(labels, c->model.labels, m->classes, err);
        if (r < 0)
                return errbuf_prefix(err, r, "%s: [model] labels", c->path);
        return 0;
}

int daemon_model_describe(const cfg_t *c, model_t **ret, char *note, size_t note_len, errbuf_t *err) {
        struct stat sb;
        int r;

        if (note && note_len)
                note[0] = '\0';
        if (c->model.weights[0] && stat(c->model.weights, &sb) == 0)
                return model_describe_file(ret, c->model.weights, err);
        if (note && note_len)
                snprintf(note, note_len, "[model] weights '%s' cannot be read; planning ResNet-50 with 1000 classes",
                         c->model.weights);
        r = model_describe(ret);
        return r < 0 ? errbuf_set(err, r, "Failed to describe the model: out of memory") : 0;
}

const char *daemon_model_name(const model_t *m, char *buf, size_t len) {
        snprintf(buf, len, "%s %s", m->arch.name, m->id);
        return buf;
}

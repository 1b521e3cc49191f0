/* cfg_files: the weights and labels a config names, opened and checked
 * without loading them, for `inferd --check-config` (and so inferd-cutover
 * and the unit's ExecStartPre, which rely on it). See cfg_check_model_files
 * in cfg.h. (The files of [metrics] and of the passthrough sections are
 * checked at every load: cfg_secret.c.)
 *
 * Each check is the owning module's own: model_check for the weights (the
 * header, every tensor's name, dtype and shape, no values read), labels_load
 * for the labels (a regular file of at most 1 MiB, the count). */
#include "config/cfg.h"

#include "core/labels.h"
#include "core/model.h"

int cfg_check_model_files(const cfg_t *c, errbuf_t *err) {
        model_t *m = NULL;
        int r, classes;

        r = model_check(c->model.weights, err);
        if (r < 0)
                return errbuf_prefix(err, r, "%s: [model] weights", c->path);
        /* The labels must match the file's class count (its header only). */
        r = model_describe_file(&m, c->model.weights, err);
        if (r < 0)
                return errbuf_prefix(err, r, "%s: [model] weights", c->path);
        classes = m->classes;
        model_free(m);
        if (c->model.labels[0]) {
                labels_t *l = NULL;

                r = labels_load(&l, c->model.labels, classes, err);
                labels_free(l);
                if (r < 0)
                        return errbuf_prefix(err, r, "%s: [model] labels", c->path);
        }
        return 0;
}

/* labels: reads the class names file. See labels.h. */
#include "core/labels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct labels {
        int count;
        char **names;           /* (count) */
};

void labels_free(labels_t *l) {
        if (!l)
                return;
        for (int i = 0; i < l->count; i++)
                free(l->names[i]);
        free(l->names);
        free(l);
}

int labels_load(labels_t **ret, const char *path, int classes, errbuf_t *err) {
        labels_t *l = NULL;
        FILE *f = NULL;
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int r, lineno = 0, extra = 0;  /* extra: lines past classes, counted for the message */

        f = fopen(path, "re");
        if (!f)
                return errbuf_set(err, -errno, "%s: cannot open labels file: %s", path, strerror(errno));
        l = calloc(1, sizeof(*l));
        if (!l || !(l->names = calloc((size_t)classes, sizeof(char *)))) {
                r = errbuf_set(err, -ENOMEM, "%s: out of memory", path);
                goto fail;
        }
        while ((n = getline(&line, &cap, f)) >= 0) {
                lineno++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = '\0';
                if (l->count >= classes) {
                        extra++;
                        continue;
                }
                if (n == 0) {
                        r = errbuf_set(err, -EINVAL, "%s: line %d: empty label", path, lineno);
                        goto fail;
                }
                l->names[l->count] = strdup(line);
                if (!l->names[l->count]) {
                        r = errbuf_set(err, -ENOMEM, "%s: out of memory", path);
                        goto fail;
                }
                l->count++;
        }
        if (ferror(f)) {
                r = errbuf_set(err, -EIO, "%s: read error", path);
                goto fail;
        }
        if (l->count + extra != classes) {
                r = errbuf_set(err, -EINVAL, "%s has %d labels (one per line) but the model has %d classes", path,
                               l->count + extra, classes);
                goto fail;
        }
        free(line);
        fclose(f);
        *ret = l;
        return 0;
fail:
        free(line);
        fclose(f);
        labels_free(l);
        return r;
}

const char *labels_get(const labels_t *l, int i) {
        if (!l || i < 0 || i >= l->count)
                return NULL;
        return l->names[i];
}

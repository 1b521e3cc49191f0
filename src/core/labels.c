/* labels: reads the class names file (through textfile_read: a regular
 * file of at most 1 MiB). See labels.h. */
#include "core/labels.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/textfile.h"

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
        char *text = NULL, *line, *next;
        size_t len;
        int r, lineno = 0, extra = 0;  /* extra: lines past classes, counted for the message */

        r = textfile_read(path, TEXTFILE_MAX_BYTES, "labels file", &text, &len, err);
        if (r < 0)
                return r;
        l = calloc(1, sizeof(*l));
        if (!l || !(l->names = calloc((size_t)classes, sizeof(char *)))) {
                r = errbuf_set(err, -ENOMEM, "%s: out of memory", path);
                goto fail;
        }
        for (line = text; line < text + len; line = next) {
                char *nl = memchr(line, '\n', (size_t)(text + len - line));
                size_t n = nl ? (size_t)(nl - line) : (size_t)(text + len - line);

                next = line + n + 1;
                lineno++;
                while (n > 0 && line[n - 1] == '\r')
                        n--;
                line[n] = '\0';
                if (l->count >= classes) {
                        extra++;
                        continue;
                }
                if (n == 0) {
                        r = errbuf_set(err, -EINVAL, "%s: line %d: empty label", path, lineno);
                        goto fail;
                }
                if (memchr(line, '\0', n)) {
                        r = errbuf_set(err, -EINVAL, "%s: line %d: a NUL byte in the label", path, lineno);
                        goto fail;
                }
                l->names[l->count] = strdup(line);
                if (!l->names[l->count]) {
                        r = errbuf_set(err, -ENOMEM, "%s: out of memory", path);
                        goto fail;
                }
                l->count++;
        }
        if (l->count + extra != classes) {
                r = errbuf_set(err, -EINVAL, "%s has %d labels (one per line) but the model has %d classes", path,
                               l->count + extra, classes);
                goto fail;
        }
        free(text);
        *ret = l;
        return 0;
fail:
        free(text);
        labels_free(l);
        return r;
}

int labels_count(const labels_t *l) {
        return l ? l->count : 0;
}

const char *labels_get(const labels_t *l, int i) {
        if (!l || i < 0 || i >= l->count)
                return NULL;
        return l->names[i];
}

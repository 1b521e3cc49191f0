/* labels: the class names file (one name per line, line i = class i).
 * Reading and lookup only. */
#ifndef INFERD_LABELS_H
#define INFERD_LABELS_H

#include <stddef.h>

#include "core/errbuf.h"

typedef struct labels labels_t;

/* Reads path, a regular file of at most TEXTFILE_MAX_BYTES, which must hold
 * exactly `classes` non-empty lines (a final newline is optional; CRLF is
 * read as LF). Returns 0, or -errno with a sentence in err. */
int labels_load(labels_t **ret, const char *path, int classes, errbuf_t *err);

/* NULL is a no-op. */
void labels_free(labels_t *l);

/* The name of class i, or NULL when l is NULL or i is out of range. */
const char *labels_get(const labels_t *l, int i);
/* The classes l names (0 for NULL). */
int labels_count(const labels_t *l);

#endif

/* errbuf: formatting helpers for the error sentence that goes with -errno.
 * See errbuf.h. Deliberately tiny: no allocation, no logging. */
#include "core/errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int errbuf_set(errbuf_t *e, int r, const char *fmt, ...) {
        va_list ap;

        if (!e)
                return r;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return r;
}

int errbuf_prefix(errbuf_t *e, int r, const char *fmt, ...) {
        char prefix[sizeof(e->msg)], joined[2 * sizeof(e->msg) + 2];
        va_list ap;

        if (!e)
                return r;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        snprintf(joined, sizeof(joined), "%s: %s", prefix, e->msg);
        snprintf(e->msg, sizeof(e->msg), "%.*s", (int)sizeof(e->msg) - 1, joined);
        return r;
}

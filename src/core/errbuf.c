/* errbuf: formatting helpers for the error sentence that goes with -errno.
 * See errbuf.h. Deliberately tiny: no allocation, no logging. */
#include "core/errbuf.h"

#include <assert.h>
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

char *errbuf_escape(char *out, size_t size, const void *in, size_t len) {
        const unsigned char *p = in;
        size_t o = 0;

        assert(size > 4);
        for (size_t i = 0; i < len; i++) {
                char piece[5];
                size_t n;

                if (p[i] == '\\')
                        n = (size_t)snprintf(piece, sizeof(piece), "\\\\");
                else if (p[i] >= 0x20 && p[i] < 0x7f)
                        n = (size_t)snprintf(piece, sizeof(piece), "%c", p[i]);
                else
                        n = (size_t)snprintf(piece, sizeof(piece), "\\x%02x", p[i]);
                /* Room for this piece, and for "..." should more follow. */
                if (o + n + (i + 1 < len ? 3 : 0) >= size) {
                        memcpy(out + (o + 3 < size ? o : size - 4), "...", 4);
                        return out;
                }
                memcpy(out + o, piece, n);
                o += n;
        }
        out[o] = 0;
        return out;
}

/* errbuf: the error message that travels up with a negative errno.
 *
 * Library-level modules (st_, model_, plan_, engine_) never log: they return
 * -errno and, when the caller passed an errbuf_t, leave one specific sentence
 * in it ("weights.safetensors: tensor 'fc.bias': ..."). Only the program layer
 * (inferd-run, the daemon) prints it, once. This is not a logging module. */
#ifndef INFERD_ERRBUF_H
#define INFERD_ERRBUF_H

#include <stddef.h>

typedef struct errbuf {
        char msg[512];
} errbuf_t;

/* Writes the formatted message into e (when e is not NULL) and returns r, so
 * that a failure path reads `return errbuf_set(err, -EINVAL, "...", ...);`. */
int errbuf_set(errbuf_t *e, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in e with "<prefix>: ", keeping r. */
int errbuf_prefix(errbuf_t *e, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes len bytes of in (which may hold NULs or any byte) into out as a
 * printable C string for a message: printable ASCII as it is, a backslash
 * as \\, anything else as \xNN; past size, cut short with "...". out is
 * always terminated (size > 4). Returns out. */
char *errbuf_escape(char *out, size_t size, const void *in, size_t len);

#endif

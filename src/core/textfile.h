/* textfile: reads a small file that a person wrote (a config file, a labels
 * file, a password or key file) whole into memory, safely.
 *
 * Such a path may name anything: /dev/zero, a FIFO, a directory, a device,
 * a 10 GiB log by mistake. Reading one of those hangs or eats memory. This
 * opens without blocking (a FIFO's open would wait for a writer), refuses
 * anything but a regular file, and refuses a file over the caller's cap,
 * each with one sentence naming the path and what it was meant to be,
 * before reading a byte.
 *
 * Not here: what the bytes mean (the caller parses them), and big files
 * such as the weights (st_ maps those). */
#ifndef INFERD_TEXTFILE_H
#define INFERD_TEXTFILE_H

#include <stddef.h>

#include "core/errbuf.h"

/* The cap for the files the daemon reads this way: the config, the labels,
 * credentials. A real one is a few KiB. */
#define TEXTFILE_MAX_BYTES ((size_t)1 << 20)

/* Opens path and checks it is a regular file of at most max_bytes; then, when
 * ret is not NULL, reads it into a malloc'd buffer with a NUL after the
 * last byte (*ret; the file may hold NULs of its own: *len is its length).
 * what names the file in the sentence: "config file", "labels file".
 * Returns 0, or -errno with "<path>: the <what> ..." in err. */
int textfile_read(const char *path, size_t max_bytes, const char *what, char **ret, size_t *len, errbuf_t *err);

#endif

/* textfile: a small file read whole, never a device or a FIFO. See
 * textfile.h. */
#include "core/textfile.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a non-regular file is, for the sentence. */
static const char *textfile_kind(mode_t mode) {
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISCHR(mode))
                return "a character device";
        if (S_ISBLK(mode))
                return "a block device";
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISSOCK(mode))
                return "a socket";
        return "not a regular file";
}

int textfile_read(const char *path, size_t max_bytes, const char *what, char **ret, size_t *len, errbuf_t *err) {
        struct stat sb;
        char *buf = NULL;
        size_t n = 0;
        int fd, r;

        assert(path && what && (!ret || len));
        /* O_NONBLOCK: a FIFO's open would wait for a writer; it changes
         * nothing for a regular file's reads. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return errbuf_set(err, -errno, "%s: cannot open the %s: %s", path, what, strerror(errno));
        if (fstat(fd, &sb) < 0) {
                r = errbuf_set(err, -errno, "%s: cannot stat the %s: %s", path, what, strerror(errno));
                goto fail;
        }
        if (!S_ISREG(sb.st_mode)) {
                r = errbuf_set(err, S_ISDIR(sb.st_mode) ? -EISDIR : -EINVAL,
                               "%s: the %s is %s, not a regular file", path, what, textfile_kind(sb.st_mode));
                goto fail;
        }
        if ((uint64_t)sb.st_size > max_bytes) {
                r = errbuf_set(err, -EFBIG, "%s: the %s is %llu bytes, more than the %zu allowed", path, what,
                               (unsigned long long)sb.st_size, max_bytes);
                goto fail;
        }
        if (!ret) {
                close(fd);
                return 0;
        }
        /* Up to one byte over the cap: a file that grows while it is read
         * is refused as well. */
        buf = malloc(max_bytes + 2);
        if (!buf) {
                r = errbuf_set(err, -ENOMEM, "%s: out of memory reading the %s", path, what);
                goto fail;
        }
        while (n <= max_bytes) {
                ssize_t k = read(fd, buf + n, max_bytes + 1 - n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = errbuf_set(err, -errno, "%s: cannot read the %s: %s", path, what, strerror(errno));
                        goto fail;
                }
                if (k == 0)
                        break;
                n += (size_t)k;
        }
        if (n > max_bytes) {
                r = errbuf_set(err, -EFBIG, "%s: the %s grew past the %zu bytes allowed while it was read", path,
                               what, max_bytes);
                goto fail;
        }
        buf[n] = '\0';
        close(fd);
        *ret = buf;
        *len = n;
        return 0;
fail:
        free(buf);
        close(fd);
        return r;
}

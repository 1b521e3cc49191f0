/* log: journald-native or plain-line logging for the daemon. See log.h.
 *
 * State is one small static struct: the level, the instance and the target
 * are process-wide by nature (there is one stderr). It is written at start
 * and on reload from the event loop thread; librdkafka's own log lines are
 * routed to its queues and reach us on that thread too. Not a log rotator,
 * not a metrics sink. */
#include "config/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

static struct {
        int level;
        bool journal;
        char instance[64];
        FILE *stream;           /* NULL: stderr */
} log_state = {
        .level = LOG_INFO,
};

static const char *const log_level_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",  [LOG_ERR] = "error",
        [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

bool log_fd_is_journal_stream(int fd) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(fd, &st) < 0)
                return false;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_setup(const char *instance, log_target_t target) {
        snprintf(log_state.instance, sizeof(log_state.instance), "%s", instance ? instance : "");
        switch (target) {
        case LOG_TARGET_JOURNAL:
                log_state.journal = true;
                break;
        case LOG_TARGET_STDERR:
                log_state.journal = false;
                break;
        default:
                log_state.journal = log_fd_is_journal_stream(STDERR_FILENO);
                break;
        }
}

void log_set_level(int priority) {
        if (priority < LOG_EMERG)
                priority = LOG_EMERG;
        if (priority > LOG_DEBUG)
                priority = LOG_DEBUG;
        log_state.level = priority;
}

int log_get_level(void) {
        return log_state.level;
}

void log_set_stream(FILE *f) {
        log_state.stream = f;
}

/* Appends " key=value" pairs of the structured fields to a plain line. */
static void log_append_fields(char *buf, size_t len, const log_fields_t *f) {
        size_t n = strlen(buf);

#define APPEND(...)                                                     \
        do {                                                            \
                if (n < len) {                                          \
                        int _w = snprintf(buf + n, len - n, __VA_ARGS__); \
                        n = _w < 0 ? len : n + (size_t)_w;              \
                }                                                       \
        } while (0)
        if (!f)
                return;
        if (f->topic)
                APPEND(" topic=%s", f->topic);
        if (f->has_partition)
                APPEND(" partition=%" PRId64, f->partition);
        if (f->has_offset)
                APPEND(" offset=%" PRId64, f->offset);
        if (f->has_batch)
                APPEND(" batch=%" PRId64, f->batch);
        if (f->error)
                APPEND(" error=%s", f->error);
#undef APPEND
}

static int log_send_journal(int priority, const log_fields_t *f, const char *file, int line, const char *func,
                            const char *msg) {
        char b_msg[LOG_LINE_MAX + 16], b_prio[32], b_file[256], b_line[32], b_func[128], b_inst[96];
        char b_topic[300], b_part[48], b_off[48], b_batch[48], b_err[96];
        struct iovec iov[16];
        int n = 0;

#define IOV_STR(b, ...)                                                         \
        do {                                                                    \
                snprintf(b, sizeof(b), __VA_ARGS__);                            \
                iov[n].iov_base = b;                                            \
                iov[n].iov_len = strlen(b);                                     \
                n++;                                                            \
        } while (0)
        IOV_STR(b_msg, "MESSAGE=%s", msg);
        IOV_STR(b_prio, "PRIORITY=%d", priority);
        IOV_STR(b_file, "CODE_FILE=%s", file);
        IOV_STR(b_line, "CODE_LINE=%d", line);
        IOV_STR(b_func, "CODE_FUNC=%s", func);
        IOV_STR(b_inst, "INFERD_INSTANCE=%s", log_state.instance);
        if (f && f->topic)
                IOV_STR(b_topic, "INFERD_TOPIC=%s", f->topic);
        if (f && f->has_partition)
                IOV_STR(b_part, "INFERD_PARTITION=%" PRId64, f->partition);
        if (f && f->has_offset)
                IOV_STR(b_off, "INFERD_OFFSET=%" PRId64, f->offset);
        if (f && f->has_batch)
                IOV_STR(b_batch, "INFERD_BATCH=%" PRId64, f->batch);
        if (f && f->error)
                IOV_STR(b_err, "INFERD_ERROR=%s", f->error);
#undef IOV_STR
        return sd_journal_sendv(iov, n);
}

int log_emit(int priority, const log_fields_t *fields, const char *file, int line, const char *func,
             const char *fmt, ...) {
        char msg[LOG_LINE_MAX];
        int saved_errno = errno, r = 0;
        va_list ap;

        if (priority < LOG_EMERG || priority > LOG_DEBUG)
                priority = LOG_INFO;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        if (log_state.journal) {
                r = log_send_journal(priority, fields, file, line, func, msg);
                if (r >= 0) {
                        errno = saved_errno;
                        return 0;
                }
        }

        log_append_fields(msg, sizeof(msg), fields);
        fprintf(log_state.stream ? log_state.stream : stderr, "inferd%s%s%s: %s: %s\n",
                log_state.instance[0] ? "[" : "", log_state.instance, log_state.instance[0] ? "]" : "",
                log_level_names[priority], msg);
        fflush(log_state.stream ? log_state.stream : stderr);
        errno = saved_errno;
        return r;
}

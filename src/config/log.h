/* log: the daemon's logging, to journald natively or to stderr as plain lines.
 *
 * When stderr is the journal (systemd sets JOURNAL_STREAM to the device and
 * inode of the stream it connected, and they match fd 2), each message goes
 * to journald with sd_journal_sendv and carries structured fields:
 * INFERD_INSTANCE always, and INFERD_TOPIC, INFERD_PARTITION, INFERD_OFFSET,
 * INFERD_BATCH, INFERD_ERROR when the caller gives them. Otherwise a message
 * is one plain line on stderr, with the same fields appended as key=value.
 *
 * The level check comes before the arguments are evaluated, so a debug line
 * in the hot path costs one comparison when debug is off.
 *
 * Only the daemon layer (daemon.c, kafka.c, inferd.c) logs. Library modules
 * return -errno and an errbuf_t instead. This is not a metrics module. */
#ifndef INFERD_LOG_H
#define INFERD_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <syslog.h>

/* Optional structured fields of one message; zero-initialised means none.
 * Set them with the LOG_* designators:
 *   log_info_f(((log_fields_t){ LOG_PARTITION(p), LOG_OFFSET(o) }), "...", ...); */
typedef struct log_fields {
        const char *topic;      /* INFERD_TOPIC, NULL: absent */
        const char *error;      /* INFERD_ERROR: a short code ("bad-size"), NULL: absent */
        int64_t partition;      /* INFERD_PARTITION */
        int64_t offset;         /* INFERD_OFFSET */
        int64_t batch;          /* INFERD_BATCH: records in the batch */
        bool has_partition, has_offset, has_batch;
} log_fields_t;

#define LOG_TOPIC(v) .topic = (v)
#define LOG_ERROR_CODE(v) .error = (v)
#define LOG_PARTITION(v) .partition = (v), .has_partition = true
#define LOG_OFFSET(v) .offset = (v), .has_offset = true
#define LOG_BATCH(v) .batch = (v), .has_batch = true

typedef enum log_target {
        LOG_TARGET_AUTO,        /* the journal when JOURNAL_STREAM matches stderr, else stderr */
        LOG_TARGET_STDERR,
        LOG_TARGET_JOURNAL,
} log_target_t;

/* Sets the instance name (INFERD_INSTANCE; copied) and the target. AUTO
 * looks at JOURNAL_STREAM and fd 2 now. May be called again. */
void log_setup(const char *instance, log_target_t target);

/* Messages above this syslog priority are dropped (LOG_INFO by default). */
void log_set_level(int priority);
int log_get_level(void);

/* True when JOURNAL_STREAM names the same device:inode as fd. */
bool log_fd_is_journal_stream(int fd);

/* Plain lines go to f instead of stderr (NULL restores stderr); for tests. */
void log_set_stream(FILE *f);

/* The emitter behind the macros; fields may be NULL. Returns 0, or -errno
 * when journald refused the message (it is then written to stderr). */
int log_emit(int priority, const log_fields_t *fields, const char *file, int line, const char *func,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_full_f(priority, fields, ...)                                                       \
        do {                                                                                    \
                if ((priority) <= log_get_level()) {                                            \
                        const log_fields_t _log_f = fields;                                     \
                        log_emit((priority), &_log_f, __FILE__, __LINE__, __func__, __VA_ARGS__); \
                }                                                                               \
        } while (0)

#define log_full(priority, ...)                                                                 \
        do {                                                                                    \
                if ((priority) <= log_get_level())                                              \
                        log_emit((priority), NULL, __FILE__, __LINE__, __func__, __VA_ARGS__);  \
        } while (0)

#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)

#define log_error_f(fields, ...) log_full_f(LOG_ERR, fields, __VA_ARGS__)
#define log_warning_f(fields, ...) log_full_f(LOG_WARNING, fields, __VA_ARGS__)
#define log_info_f(fields, ...) log_full_f(LOG_INFO, fields, __VA_ARGS__)
#define log_debug_f(fields, ...) log_full_f(LOG_DEBUG, fields, __VA_ARGS__)

#endif

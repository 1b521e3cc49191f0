/* cfg_table: the key table's row type and the table itself, private to
 * cfg*.c and the unit tests (the rest of the daemon sees only cfg.h).
 *
 * One row per key of the INI file says everything about it: where it lives
 * in cfg_t, how its text is parsed and bounded, its default, its reload
 * class and, for a live key, the hook that applies a new value to the
 * running daemon. No second list of keys exists anywhere: parsing, the
 * reload diff, the reload itself, --print-config and docs/config.md all walk
 * this table. It is not the parser (cfg.c is). */
#ifndef INFERD_CFG_TABLE_H
#define INFERD_CFG_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/cfg.h"

typedef enum cfg_type {
        CFG_T_STRING,           /* non-empty text */
        CFG_T_TOPIC,            /* a Kafka topic name */
        CFG_T_PATH,             /* a file path; "" allowed only where optional */
        CFG_T_INT,              /* a decimal integer in [min, max] */
        CFG_T_SIZE,             /* a byte count with a suffix, in [min, max] bytes */
        CFG_T_BUDGET,           /* a SIZE in [min, max], or a percentage in (0, 100] */
        CFG_T_LOG_LEVEL,
        CFG_T_BACKEND,
        CFG_T_PRECISION,
        CFG_T_BOOL,             /* yes or no */
        CFG_T_DELIVERY,         /* at-least-once or exactly-once */
        CFG_T_LISTEN,           /* host:port, or "" for off */
        CFG_T_DURATION,         /* a duration with a unit ("90s", "10m") or 0, in [min, max] ms */
        CFG_T_AGE_ACTION,       /* dlq or skip */
        CFG_T_BROKERS,          /* host:port[,host:port...] */
        CFG_T_CHOICE,           /* one of the row's choices; the field is an enum (an int): its index */
} cfg_type_t;

/* Hands next's value of the row's key to the setter of ops that applies it;
 * returns what the setter returns (cfg_live_ops_t). */
typedef int (*cfg_apply_fn)(const cfg_live_ops_t *ops, const cfg_t *next, errbuf_t *why);

typedef struct cfg_key {
        const char *section;
        const char *name;
        cfg_type_t type;
        const char *def;        /* as a file would say it; NULL = required */
        int64_t min, max;       /* CFG_T_INT: the value; CFG_T_SIZE / CFG_T_BUDGET: bytes; CFG_T_DURATION: ms */
        cfg_reload_t reload;    /* how a change is taken on SIGHUP */
        cfg_apply_fn apply;     /* LIVE: required; SWAP: optional (applies it without a swap when it can);
                                 * RESTART: NULL */
        bool optional;          /* CFG_T_PATH: "" means none */
        const char *const *choices;     /* CFG_T_CHOICE: the names, in the enum's order, NULL-terminated */
        size_t offset;          /* of the field in cfg_t */
        size_t size;            /* of the field: the text types' capacity, and what a copy copies */
        const char *description;
} cfg_key_t;

/* The rows, in the order of the reference and of --print-config. */
extern const cfg_key_t cfg_keys[];
extern const size_t cfg_nkeys;
/* An upper bound on cfg_nkeys, for arrays on the stack (checked at build). */
#define CFG_KEYS_MAX 64

#define CFG_SECTION_CLIENT "kafka.client"
#define CFG_SECTION_CONSUMER "kafka.consumer"
#define CFG_SECTION_PRODUCER "kafka.producer"

/* Passthrough keys that inferd sets itself: a file may not set them. */
typedef struct cfg_reserved {
        const char *section;
        const char *name;
        const char *why;
} cfg_reserved_t;
extern const cfg_reserved_t cfg_reserved[];
extern const size_t cfg_nreserved;

/* The row of [section] name, or NULL. */
const cfg_key_t *cfg_find_key(const char *section, const char *name);

/* Whether s is a section of the table (not a passthrough one). */
bool cfg_is_section(const char *s);

/* "2GiB" when bytes is a whole number of a binary unit, else plain bytes;
 * returns buf. In cfg.c, for its messages and for cfg_doc.c's ranges. */
const char *cfg_format_bytes(uint64_t bytes, char *buf, size_t len);

#endif

/* cfg_lines: the config file's lines checked before iniparser reads them.
 * Private to cfg.c.
 *
 * iniparser 4.1 says "input line too long in FILE (N)" for a NUL byte, a
 * long line and some lines without '=', never naming the section or the
 * key, and it keeps the last of a key set twice without a word. This walks
 * the text once the way iniparser does (sections, key = value, comments,
 * '\' continuations, CRLF read as LF) and turns each of those into one
 * sentence that names the file, the section, the key and the line.
 *
 * It does not parse values (iniparser and the key table do) or know which
 * sections and keys exist (cfg.c does). */
#ifndef INFERD_CFG_LINES_H
#define INFERD_CFG_LINES_H

#include <stddef.h>

#include <iniparser.h>

#include "core/errbuf.h"

/* The longest line (its continuations included, without the line end)
 * iniparser reads whole: its buffer is 1024 bytes with the newline. */
#define CFG_LINE_MAX 1000

/* Checks len bytes of text, the file at path. Returns 0, or -EINVAL with
 * "<path>: [section] key: line N: ..." in err. */
int cfg_lines_check(const char *path, const char *text, size_t len, errbuf_t *err);

/* Parses the len bytes of text (checked by cfg_lines_check), the file at
 * path, with iniparser (which reads only a path: it gets them through a
 * memfd). Returns 0 with *ret a new dictionary, or -errno with iniparser's
 * first message, as "<path>: line N: syntax error: '...'", in err. */
int cfg_lines_parse(dictionary **ret, const char *path, const char *text, size_t len, errbuf_t *err);

#endif

/* cfg_doc: the key table written as its documentation, in two formats from
 * one walk over the table: markdown, the reference in docs/config.md
 * (`inferd --print-config-reference`), and roff, the man page inferd.ini(5)
 * in man/inferd.ini.5 (`inferd --print-config-man`). Both are committed and
 * tests hold them to what the table makes now (tests/unit/test_cfg_doc.c,
 * tests/deb).
 *
 * The prose around the table is written once, in the few pieces of markdown
 * that docs/config.md uses: paragraphs, `code`, **strong**, "## " headings
 * and "- " list items. The markdown writer prints it as it is; the man
 * writer translates each piece (cfg_doc_man_line). It is not a markdown
 * parser, and a piece of markdown outside that list is printed as text. */
#include "config/cfg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "core/units.h"
#include "config/cfg_lines.h"
#include "config/cfg_table.h"

typedef enum cfg_doc_format {
        CFG_DOC_MARKDOWN,
        CFG_DOC_MAN,
} cfg_doc_format_t;

typedef struct cfg_doc {
        FILE *out;
        cfg_doc_format_t format;
        bool blank;             /* man: a blank line came; the next text starts a paragraph */
        bool overflow;          /* a piece of prose did not fit cfg_doc_text's buffer */
} cfg_doc_t;

static const char *cfg_type_name(cfg_type_t t) {
        switch (t) {
        case CFG_T_STRING: return "string";
        case CFG_T_TOPIC: return "topic";
        case CFG_T_PATH: return "path";
        case CFG_T_INT: return "integer";
        case CFG_T_SIZE: return "size";
        case CFG_T_BUDGET: return "size or percent";
        case CFG_T_LOG_LEVEL: return "log level";
        case CFG_T_BACKEND: return "backend";
        case CFG_T_PRECISION: return "precision";
        case CFG_T_BOOL: return "yes or no";
        case CFG_T_DELIVERY: return "delivery";
        case CFG_T_LISTEN: return "address";
        case CFG_T_DURATION: return "duration";
        case CFG_T_AGE_ACTION: return "dlq or skip";
        case CFG_T_CHOICE: return "choice";
        case CFG_T_BROKERS: return "addresses";
        }
        return "?";
}

/* The "range" column of the reference. */
static const char *cfg_range_text(const cfg_key_t *k, char *buf, size_t len) {
        char lo[32], hi[32];

        switch (k->type) {
        case CFG_T_INT:
                snprintf(buf, len, "%" PRId64 "..%" PRId64, k->min, k->max);
                return buf;
        case CFG_T_SIZE:
                snprintf(buf, len, "%s..%s", cfg_format_bytes((uint64_t)k->min, lo, sizeof(lo)),
                         cfg_format_bytes((uint64_t)k->max, hi, sizeof(hi)));
                return buf;
        case CFG_T_BUDGET:
                snprintf(buf, len, "SIZE %s..%s, or PCT in (0, 100]", cfg_format_bytes((uint64_t)k->min, lo, sizeof(lo)),
                         cfg_format_bytes((uint64_t)k->max, hi, sizeof(hi)));
                return buf;
        case CFG_T_LOG_LEVEL:
                return "debug, info, notice, warning, err";
        case CFG_T_BACKEND:
                return "auto, cpu, cuda";
        case CFG_T_PRECISION:
                return "auto, fp32, fp16, bf16";
        case CFG_T_BOOL:
                return "yes, no";
        case CFG_T_DELIVERY:
                return "at-least-once, exactly-once";
        case CFG_T_TOPIC:
                return "a-z A-Z 0-9 . _ -";
        case CFG_T_STRING:
                return "non-empty";
        case CFG_T_PATH:
                return k->optional ? "file, or empty" : "file";
        case CFG_T_LISTEN:
                return "host:port, or empty";
        case CFG_T_DURATION:
                snprintf(buf, len, "%s..%s", units_format_duration_ms((uint64_t)k->min, lo, sizeof(lo)),
                         units_format_duration_ms((uint64_t)k->max, hi, sizeof(hi)));
                return buf;
        case CFG_T_AGE_ACTION:
                return "dlq, skip";
        case CFG_T_CHOICE:
                buf[0] = '\0';
                for (int i = 0; k->choices[i]; i++)
                        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "", k->choices[i]);
                return buf;
        case CFG_T_BROKERS:
                return "host:port[,host:port...]";
        }
        return "";
}

/* One line of text as roff: `code` and **strong** in bold, a backslash as
 * \e, a dash in code as a minus sign (\-, so that an option or a value
 * pastes as typed), and a line that would start with a control character
 * (. or ', at the start of s or after a newline in it) guarded with \&.
 * literal: s is all code (a value), without the backquotes and in the
 * caller's font. */
static void cfg_doc_man_inline(FILE *out, const char *s, size_t n, bool literal) {
        bool code = literal, strong = false;

        for (size_t i = 0; i < n; i++) {
                if ((i == 0 || s[i - 1] == '\n') && (s[i] == '.' || s[i] == '\''))
                        fputs("\\&", out);
                if (s[i] == '`' && !literal) {
                        fputs(code ? "\\fR" : "\\fB", out);
                        code = !code;
                } else if (!code && s[i] == '*' && i + 1 < n && s[i + 1] == '*') {
                        fputs(strong ? "\\fR" : "\\fB", out);
                        strong = !strong;
                        i++;
                } else if (s[i] == '\\')
                        fputs("\\e", out);
                else if (s[i] == '-' && code)
                        fputs("\\-", out);
                else
                        fputc(s[i], out);
        }
        if ((code && !literal) || strong)
                fputs("\\fR", out);
}

/* One line of the markdown prose as roff: a heading as .SH, a list item as
 * a bulleted .IP, a blank line as the start of a new paragraph (.PP, once
 * text follows), anything else as text that roff fills. */
static void cfg_doc_man_line(cfg_doc_t *d, const char *s, size_t n) {
        if (n == 0) {
                d->blank = true;
                return;
        }
        if (n > 3 && strncmp(s, "## ", 3) == 0) {
                fputs(".SH ", d->out);
                s += 3, n -= 3;
        } else if (n > 2 && strncmp(s, "- ", 2) == 0) {
                fputs(".IP \\(bu 2\n", d->out);
                s += 2, n -= 2;
        } else if (d->blank)
                fputs(".PP\n", d->out);
        d->blank = false;
        cfg_doc_man_inline(d->out, s, n, false);
        fputc('\n', d->out);
}

/* A piece of the prose (a printf format), written in d's format. */
__attribute__((format(printf, 2, 3))) static void cfg_doc_text(cfg_doc_t *d, const char *fmt, ...) {
        char text[4096];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(text)) {
                d->overflow = true;
                return;
        }
        if (d->format == CFG_DOC_MARKDOWN) {
                fputs(text, d->out);
                return;
        }
        for (const char *p = text; *p;) {
                const char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t)(nl - p) : strlen(p);

                cfg_doc_man_line(d, p, len);
                p += len + (nl ? 1 : 0);
        }
}

/* One row of the table: a markdown table row, or a man page entry (.TP)
 * under a .SS heading for each new section. */
static void cfg_doc_key(cfg_doc_t *d, const cfg_key_t *k, const char **section) {
        char range[96];
        const char *range_text = cfg_range_text(k, range, sizeof(range));

        if (d->format == CFG_DOC_MARKDOWN) {
                fprintf(d->out, "| `[%s]` | `%s` | %s | %s%s%s | %s | %s | %s |\n", k->section, k->name,
                        cfg_type_name(k->type), k->def ? (*k->def ? "`" : "") : "",
                        k->def ? (*k->def ? k->def : "(empty)") : "(required)", k->def && *k->def ? "`" : "",
                        range_text, cfg_reload_name(k->reload), k->description);
                return;
        }
        if (!*section || strcmp(*section, k->section) != 0) {
                fprintf(d->out, ".SS [%s]\n", k->section);
                *section = k->section;
        }
        fprintf(d->out, ".TP\n\\fB%s\\fR = \\fI%s\\fR\n", k->name, cfg_type_name(k->type));
        if (!k->def)
                fputs("Required, no default", d->out);
        else if (!*k->def)
                fputs("Default: empty", d->out);
        else {
                fputs("Default: \\fB", d->out);
                cfg_doc_man_inline(d->out, k->def, strlen(k->def), true);
                fputs("\\fR", d->out);
        }
        fputs("; range: ", d->out);
        cfg_doc_man_inline(d->out, range_text, strlen(range_text), false);
        fprintf(d->out, "; reload: \\fB%s\\fR.\n.br\n", cfg_reload_name(k->reload));
        cfg_doc_man_inline(d->out, k->description, strlen(k->description), false);
        fputc('\n', d->out);
        d->blank = false;
}

/* The page's head: the markdown title and the note that it is generated,
 * or the man page's header, NAME and SYNOPSIS. */
static void cfg_doc_head(cfg_doc_t *d) {
        if (d->format == CFG_DOC_MARKDOWN) {
                fputs("# inferd configuration reference\n"
                      "\n"
                      "<!-- Generated by cfg_write_reference() (`inferd --print-config-reference`) from the key\n"
                      "     table in src/config/cfg_table.c. Edit the table, not this file. -->\n"
                      "\n",
                      d->out);
                return;
        }
        fputs(".\\\" Generated by cfg_write_man() (inferd --print-config-man) from the key table in\n"
              ".\\\" src/config/cfg_table.c. Edit the table, not this file.\n"
              ".TH INFERD.INI 5 \"\" inferd \"File Formats Manual\"\n"
              /* No hyphenation, so that a key or an option never breaks, and
               * so lines adjusted left only (a long value cannot be spread). */
              ".nh\n"
              ".ad l\n"
              ".SH NAME\n"
              "inferd.ini \\- configuration file of the inferd daemon\n"
              ".SH SYNOPSIS\n"
              "\\fB/etc/inferd/\\fIinstance\\fB.ini\\fR\n"
              ".SH DESCRIPTION\n",
              d->out);
}

/* The man page's tail: the files, and the pages to read next. */
static void cfg_doc_man_tail(cfg_doc_t *d) {
        cfg_doc_text(d,
                     "\n"
                     "## FILES\n"
                     "- `/etc/inferd/<instance>.ini`: the file of the instance `<instance>` (a colour: blue,\n"
                     "green); `inferd@<instance>.service` checks it (`inferd --check-config -c FILE`) and runs\n"
                     "`inferd -c FILE`, and `systemctl reload inferd@<instance>` sends the daemon SIGHUP.\n"
                     "- `" CFG_DEFAULT_PATH "`: the file that `inferd` reads without `-c`.\n"
                     "- `/etc/inferd/example.ini` and `/etc/inferd/example-green.ini`: an example pair, blue\n"
                     "and green, to copy.\n"
                     "\n"
                     "## SEE ALSO\n"
                     "**inferd**(8), **inferd-cutover**(8), **inferd-run**(1), **systemctl**(1)\n");
}

/* Walks the table once, in d's format (see the top of this file). Returns
 * 0, or -EIO when the stream failed (or the prose outgrew its buffer). */
static int cfg_write_doc(cfg_doc_t *d) {
        const char *section = NULL;

        cfg_doc_head(d);
        cfg_doc_text(d,
                "inferd reads one INI file, `/etc/inferd/<instance>.ini` under systemd (`-c FILE`\n"
                "otherwise). Section and key names are case-insensitive. A key that is absent takes its\n"
                "default; an unknown section or key, a bad value, or a missing required key is an error\n"
                "that names the file, the section and the key, and the daemon does not start (or, on\n"
                "SIGHUP, keeps its running configuration). Unquoted values end at `;` or `#` (a\n"
                "comment): quote a value that contains them.\n"
                "\n"
                "The file must be a regular file of at most 1 MiB (a FIFO, a device or a directory is\n"
                "refused before it is read), and a line at most %d characters. Every line is a\n"
                "`[section]`, `key = value`, a comment (`;` or `#`) or blank; a line that ends in `\\`\n"
                "goes on to the next. CRLF line ends read as LF. A key set twice in one section with\n"
                "another value is an error naming both lines (the same value twice is not). A NUL\n"
                "byte is an error.\n"
                "\n"
                "The %s says what `systemctl reload` (SIGHUP) does with a changed key:\n"
                "**live**, applied at once; **swap**, taken by a model swap in place (the new weights\n"
                "loaded and checked beside the running ones, the pipeline drained, the plan made again,\n"
                "the old weights replaced; a refused swap changes nothing); **restart**, logged as\n"
                "needing a restart and not applied.\n"
                "\n"
                "A SIZE is a byte count with an optional suffix `KiB`, `MiB`, `GiB` or `TiB` (also `K`,\n"
                "`M`, `G`, `T`; binary), e.g. `512MiB` or `1.5GiB`. A percentage (`70%%`) is of the\n"
                "device's total memory. A duration is a whole number with a unit, `ms`, `s`, `m`, `h`\n"
                "or `d` (`90s`, `10m`), or `0`.\n"
                "\n",
                CFG_LINE_MAX, d->format == CFG_DOC_MARKDOWN ? "Reload column" : "reload class of each key");
        if (d->format == CFG_DOC_MARKDOWN)
                fputs("| Section | Key | Type | Default | Range | Reload | Description |\n"
                      "|---|---|---|---|---|---|---|\n",
                      d->out);
        else
                fputs(".SH KEYS\n", d->out);
        for (size_t i = 0; i < cfg_nkeys; i++)
                cfg_doc_key(d, &cfg_keys[i], &section);
        cfg_doc_text(d,
                "\n"
                "## `[kafka.client]`, `[kafka.consumer]` and `[kafka.producer]`\n"
                "\n"
                "Every key in these sections is passed verbatim, in file order, to librdkafka's\n"
                "configuration (see librdkafka's CONFIGURATION.md): `[kafka.client]` to every client\n"
                "inferd makes (the consumer, the producer, the metadata client of\n"
                "`inferd --topic-partitions`, and the tools that read the instance's config), then\n"
                "`[kafka.consumer]` or `[kafka.producer]`, which override it per client. Security\n"
                "settings (`security.protocol`, `ssl.*`, `sasl.*`) belong in `[kafka.client]`.\n"
                "librdkafka checks them when the daemon starts (and `inferd --check-config` does too);\n"
                "its error text is reported with the file, the section and the key. A change to them\n"
                "needs a restart.\n"
                "\n"
                "Any value may be written `file:PATH` (the file's content, its trailing newline\n"
                "removed) or `credential:NAME` (the file `NAME` in `$CREDENTIALS_DIRECTORY`, which\n"
                "systemd's `LoadCredential=` or `LoadCredentialEncrypted=` fills). A key that names a\n"
                "file for librdkafka (`*.location`) gets the path instead of the content, and the file\n"
                "must be readable when the config is loaded. A missing or unreadable file is an error\n"
                "naming the file and the key, at start, on `--check-config` and on reload (which then\n"
                "keeps the running config). Secret keys (`sasl.password`, `ssl.key.password`, any\n"
                "`*password*` or `*secret*`, `ssl.key.pem`) are shown as `(secret)` by\n"
                "`inferd --print-config`, and `inferd --check-config` warns when one is written in\n"
                "plain text in a file that every user can read. inferd sets these itself, and a file\n"
                "may not (in `[kafka.client]`, none of them):\n"
                "\n");
        for (size_t i = 0; i < cfg_nreserved; i++)
                cfg_doc_text(d, "- `[%s]` `%s`: %s.\n", cfg_reserved[i].section, cfg_reserved[i].name,
                             cfg_reserved[i].why);
        if (d->format == CFG_DOC_MAN)
                cfg_doc_man_tail(d);
        return ferror(d->out) || d->overflow ? -EIO : 0;
}

int cfg_write_reference(FILE *out) {
        cfg_doc_t d = { .out = out, .format = CFG_DOC_MARKDOWN };

        return cfg_write_doc(&d);
}

int cfg_write_man(FILE *out) {
        cfg_doc_t d = { .out = out, .format = CFG_DOC_MAN };

        return cfg_write_doc(&d);
}

/* Unit tests of cfg_doc: the man page inferd.ini(5) that the key table
 * makes (cfg_write_man). man/inferd.ini.5 must be exactly what it prints
 * now, every key of the table must have its entry, and no line may reach
 * roff as a request we did not write. (docs/config.md, the same walk in
 * markdown, is test_cfg's reference_doc_current.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg.h"
#include "config/cfg_table.h"
#include "unit.h"

/* cfg_write_man's text into *text, NUL-terminated; the caller frees it. */
static void man_text(char **text, size_t *len) {
        FILE *f = open_memstream(text, len);

        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(cfg_write_man(f), 0);
        fclose(f);
}

/* man/inferd.ini.5 is exactly what cfg_write_man prints: regenerate it with
 * `build/inferd --print-config-man > man/inferd.ini.5`. */
static void test_cfg_doc_man_current(void) {
        size_t want_len = 0;
        char *want = NULL;

        man_text(&want, &want_len);
        unit_assert_file_is("man/inferd.ini.5", want, want_len);
        free(want);
}

/* One .TP entry per key, each under its section's .SS heading, and no
 * other .TP: the page holds the table, all of it. */
static void test_cfg_doc_man_lists_every_key(void) {
        size_t len = 0, entries = 0;
        char *text = NULL, *p;

        man_text(&text, &len);
        for (size_t i = 0; i < cfg_nkeys; i++) {
                char heading[64], entry[128];
                const char *h, *e;

                snprintf(heading, sizeof(heading), "\n.SS [%s]\n", cfg_keys[i].section);
                snprintf(entry, sizeof(entry), "\n.TP\n\\fB%s\\fR = \\fI", cfg_keys[i].name);
                h = strstr(text, heading);
                CU_ASSERT_PTR_NOT_NULL(h);
                /* The key's entry follows its section's heading, before the next heading. */
                e = h ? strstr(h, entry) : NULL;
                CU_ASSERT_PTR_NOT_NULL(e);
                if (h && e) {
                        const char *next = strstr(h + 1, "\n.S");

                        CU_ASSERT_TRUE(!next || e < next);
                }
        }
        for (p = text; (p = strstr(p, "\n.TP\n")); p++)
                entries++;
        CU_ASSERT_EQUAL(entries, cfg_nkeys);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n.TH INFERD.INI 5 "));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n.SH NAME\ninferd.ini \\- "));
        free(text);
}

/* Every line that roff reads as a request is one of the few the writer
 * means (a description or a value starting with '.' or '\'' would be read
 * as one, and lost), and no markdown is left: no backquote, no "**". */
static void test_cfg_doc_man_roff_only(void) {
        static const char *const requests[] = {
                ".\\\" ", ".TH ", ".nh\n", ".ad l\n", ".SH ", ".SS ", ".TP\n", ".PP\n", ".IP ", ".br\n",
        };
        size_t len = 0;
        char *text = NULL;

        man_text(&text, &len);
        for (char *line = text; line && *line;) {
                char *nl = strchr(line, '\n');

                if (line[0] == '.' || line[0] == '\'') {
                        bool known = false;

                        for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++)
                                known |= strncmp(line, requests[i], strlen(requests[i])) == 0;
                        if (!known)
                                fprintf(stderr, "\nunexpected roff request: %.*s\n", (int)(nl ? nl - line : 40), line);
                        CU_ASSERT_TRUE(known);
                }
                line = nl ? nl + 1 : NULL;
        }
        CU_ASSERT_PTR_NULL(strchr(text, '`'));
        CU_ASSERT_PTR_NULL(strstr(text, "**"));
        /* A dash in a value is a minus sign, as typed: at-least-once. */
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "Default: \\fBat\\-least\\-once\\fR"));
        free(text);
}

int test_cfg_doc_register(void) {
        static CU_TestInfo tests[] = {
                { "man_current", test_cfg_doc_man_current },
                { "man_lists_every_key", test_cfg_doc_man_lists_every_key },
                { "man_roff_only", test_cfg_doc_man_roff_only },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("cfg_doc", tests);
}

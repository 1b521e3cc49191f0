/* tracectx: W3C Trace Context headers checked and bounded. See tracectx.h. */
#include "pipeline/tracectx.h"

#include <string.h>

static bool tracectx_is_lchex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* Whether v[0..n) are n lowercase hex digits, not all of them '0' when
 * nonzero is asked. */
static bool tracectx_hex(const char *v, size_t n, bool nonzero) {
        bool zero = true;

        for (size_t i = 0; i < n; i++) {
                if (!tracectx_is_lchex(v[i]))
                        return false;
                zero = zero && v[i] == '0';
        }
        return !nonzero || !zero;
}

bool tracectx_parent_valid(const char *v, size_t len) {
        if (!v || len < TRACECTX_PARENT_BYTES)
                return false;
        if (!tracectx_hex(v, 2, false) || !strncmp(v, "ff", 2))
                return false;   /* ff: the spec's forbidden version */
        if (v[2] != '-' || v[35] != '-' || v[52] != '-')
                return false;
        if (!tracectx_hex(v + 3, 32, true) || !tracectx_hex(v + 36, 16, true) || !tracectx_hex(v + 53, 2, false))
                return false;
        if (!strncmp(v, "00", 2))
                return len == TRACECTX_PARENT_BYTES;
        /* A later version may add fields, after a dash. */
        return len == TRACECTX_PARENT_BYTES || v[TRACECTX_PARENT_BYTES] == '-';
}

static bool tracectx_is_lcalpha(char c) {
        return c >= 'a' && c <= 'z';
}

/* The characters after a key's first: lcalpha / DIGIT / "_" / "-" / "*" / "/". */
static bool tracectx_is_keychar(char c) {
        return tracectx_is_lcalpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

/* simple-key (first lcalpha, up to 256) or, with at, tenant-id "@"
 * system-id (tenant: first lcalpha or DIGIT, up to 241; system: first
 * lcalpha, up to 14). */
static bool tracectx_key_valid(const char *k, size_t n) {
        const char *at = memchr(k, '@', n);
        size_t tenant = at ? (size_t)(at - k) : n, system = at ? n - tenant - 1 : 0;

        if (tenant == 0)
                return false;
        if (!tracectx_is_lcalpha(k[0]) && !(at && k[0] >= '0' && k[0] <= '9'))
                return false;
        for (size_t i = 1; i < tenant; i++)
                if (!tracectx_is_keychar(k[i]))
                        return false;
        if (!at)
                return n <= 256;
        if (tenant > 241 || system == 0 || system > 14 || !tracectx_is_lcalpha(at[1]))
                return false;
        for (size_t i = 2; i <= system; i++)
                if (!tracectx_is_keychar(at[i]))
                        return false;
        return true;
}

/* value: 1 to 256 of 0x20-0x7E but ',' and '=', the last not a space. */
static bool tracectx_value_valid(const char *v, size_t n) {
        if (n == 0 || n > 256 || v[n - 1] == ' ')
                return false;
        for (size_t i = 0; i < n; i++)
                if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=')
                        return false;
        return true;
}

/* list-member: key "=" value. */
static bool tracectx_member_valid(const char *m, size_t n, size_t *key_len) {
        const char *eq = memchr(m, '=', n);

        if (!eq)
                return false;
        *key_len = (size_t)(eq - m);
        return tracectx_key_valid(m, *key_len) && tracectx_value_valid(eq + 1, n - *key_len - 1);
}

typedef struct tracectx_member {
        const char *at;
        size_t len, key_len;
} tracectx_member_t;

/* Whether kept[0..n) holds a member with m's key. */
static bool tracectx_key_seen(const tracectx_member_t *kept, int n, const tracectx_member_t *m) {
        for (int i = 0; i < n; i++)
                if (kept[i].key_len == m->key_len && !memcmp(kept[i].at, m->at, m->key_len))
                        return true;
        return false;
}

size_t tracectx_state_cut(const char *v, size_t len, char *out, bool *cut) {
        tracectx_member_t kept[TRACECTX_STATE_MAX_MEMBERS];
        size_t pos = 0, total = 0, w = 0;
        int n = 0;

        *cut = false;
        while (v && pos < len) {
                const char *comma = memchr(v + pos, ',', len - pos);
                size_t end = comma ? (size_t)(comma - v) : len, b = pos, e = end;
                tracectx_member_t m;

                pos = end + 1;
                while (b < e && (v[b] == ' ' || v[b] == '\t'))
                        b++;
                while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
                        e--;
                if (b == e)
                        continue;       /* an empty member: allowed, not kept */
                m = (tracectx_member_t){ .at = v + b, .len = e - b };
                if (n == TRACECTX_STATE_MAX_MEMBERS || !tracectx_member_valid(m.at, m.len, &m.key_len) ||
                    tracectx_key_seen(kept, n, &m)) {
                        *cut = true;
                        continue;
                }
                kept[n++] = m;
                total += m.len + (n > 1);
        }
        /* Over 512 characters: the long members go first, from the right,
         * then the others from the right. */
        while (total > TRACECTX_STATE_MAX_CHARS) {
                int drop = n - 1;

                for (int i = n - 1; i >= 0; i--)
                        if (kept[i].len > TRACECTX_STATE_LONG_MEMBER) {
                                drop = i;
                                break;
                        }
                total -= kept[drop].len + (n > 1);
                memmove(&kept[drop], &kept[drop + 1], (size_t)(n - drop - 1) * sizeof(kept[0]));
                n--;
                *cut = true;
        }
        for (int i = 0; i < n; i++) {
                if (i > 0)
                        out[w++] = ',';
                memcpy(out + w, kept[i].at, kept[i].len);
                w += kept[i].len;
        }
        out[w] = '\0';
        return w;
}

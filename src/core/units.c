/* units: parsing "11GiB" / "70%" and printing byte counts. See units.h. */
#include "core/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
        const char *suffix;
        uint64_t factor;
} units_suffixes[] = {
        { "", 1 },
        { "B", 1 },
        { "K", 1ULL << 10 }, { "KiB", 1ULL << 10 }, { "KB", 1ULL << 10 },
        { "M", 1ULL << 20 }, { "MiB", 1ULL << 20 }, { "MB", 1ULL << 20 },
        { "G", 1ULL << 30 }, { "GiB", 1ULL << 30 }, { "GB", 1ULL << 30 },
        { "T", 1ULL << 40 }, { "TiB", 1ULL << 40 }, { "TB", 1ULL << 40 },
};

int units_parse_size(const char *s, uint64_t *ret) {
        const char *p = s, *num_end;
        uint64_t whole = 0;
        double frac = 0.0, scale = 0.1;
        int digits = 0, has_frac = 0;

        if (!s)
                return -EINVAL;
        while (isspace((unsigned char)*p))
                p++;
        for (; isdigit((unsigned char)*p); p++, digits++) {
                if (whole > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                whole = whole * 10 + (uint64_t)(*p - '0');
        }
        if (*p == '.') {
                has_frac = 1;
                for (p++; isdigit((unsigned char)*p); p++, digits++, scale /= 10)
                        frac += (*p - '0') * scale;
        }
        if (digits == 0)
                return -EINVAL;
        num_end = p;
        while (isspace((unsigned char)*p))
                p++;
        {
                char suffix[8];
                size_t n = 0;

                while (*p && !isspace((unsigned char)*p) && n < sizeof(suffix) - 1)
                        suffix[n++] = *p++;
                suffix[n] = '\0';
                while (isspace((unsigned char)*p))
                        p++;
                if (*p)
                        return -EINVAL;
                for (size_t i = 0; i < sizeof(units_suffixes) / sizeof(units_suffixes[0]); i++) {
                        uint64_t f = units_suffixes[i].factor;
                        double extra;

                        if (strcasecmp(suffix, units_suffixes[i].suffix) != 0)
                                continue;
                        if (has_frac && f == 1 && frac != 0.0)
                                return -EINVAL;         /* a fraction of a byte */
                        if (whole > UINT64_MAX / f)
                                return -ERANGE;
                        extra = floor(frac * (double)f);
                        if ((double)(whole * f) + extra > 1.8e19)
                                return -ERANGE;
                        *ret = whole * f + (uint64_t)extra;
                        (void)num_end;
                        return 0;
                }
        }
        return -EINVAL;
}

int units_is_percent(const char *s) {
        size_t n;

        if (!s)
                return 0;
        n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1]))
                n--;
        return n > 0 && s[n - 1] == '%';
}

int units_parse_budget(const char *s, uint64_t capacity_bytes, uint64_t *ret) {
        char *end;
        double pct;

        if (!units_is_percent(s))
                return units_parse_size(s, ret);
        errno = 0;
        pct = strtod(s, &end);
        if (errno || end == s)
                return -EINVAL;
        while (isspace((unsigned char)*end))
                end++;
        if (*end != '%' || !(pct > 0.0) || pct > 100.0 || capacity_bytes == 0)
                return -EINVAL;
        for (end++; isspace((unsigned char)*end); end++)
                ;
        if (*end)
                return -EINVAL;
        *ret = (uint64_t)((double)capacity_bytes * pct / 100.0);
        return 0;
}

const char *units_format_size(uint64_t bytes, char *buf, size_t len) {
        static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        double v = (double)bytes;
        int i = 0;

        while (v >= 1024.0 && i < 4) {
                v /= 1024.0;
                i++;
        }
        if (i == 0)
                snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        else
                snprintf(buf, len, "%.1f %s", v, names[i]);
        return buf;
}

int units_parse_listen(const char *s, char *host, size_t host_len, unsigned *port) {
        const char *colon = strrchr(s, ':'), *h = s;
        char *end;
        size_t n;
        long p;

        if (!colon || colon == s || !colon[1] || colon[1] == '-' || colon[1] == '+')
                return -EINVAL;
        n = (size_t)(colon - s);
        if (s[0] == '[') {
                if (n < 3 || colon[-1] != ']')
                        return -EINVAL;
                h++;
                n -= 2;
        } else if (memchr(s, ']', n) || memchr(s, ':', n)) {
                return -EINVAL;         /* a stray bracket, or a bare IPv6 address */
        }
        errno = 0;
        p = strtol(colon + 1, &end, 10);
        if (errno || *end || p < 1 || p > 65535)
                return -EINVAL;
        if (host) {
                if (n >= host_len)
                        return -EINVAL;
                memcpy(host, h, n);
                host[n] = '\0';
        }
        if (port)
                *port = (unsigned)p;
        return 0;
}

/* Longest accepted duration: a year, far past any Kafka retention that a
 * deadline on records is meant for, and no overflow in microseconds. */
#define UNITS_DURATION_MAX_MS (366ULL * 24 * 3600 * 1000)

static const struct {
        const char *suffix;
        uint64_t ms;
} units_durations[] = {
        { "d", 24ULL * 3600 * 1000 }, { "h", 3600ULL * 1000 }, { "m", 60ULL * 1000 }, { "s", 1000 }, { "ms", 1 },
};

int units_parse_duration_ms(const char *s, uint64_t *ret_ms) {
        const char *p = s;
        uint64_t n = 0;
        int digits = 0;

        if (!s)
                return -EINVAL;
        while (isspace((unsigned char)*p))
                p++;
        for (; isdigit((unsigned char)*p); p++, digits++) {
                n = n * 10 + (uint64_t)(*p - '0');
                if (n > UNITS_DURATION_MAX_MS)
                        return -ERANGE;
        }
        if (digits == 0)
                return -EINVAL;
        {
                const char *end = p;
                size_t len;

                while (*end && !isspace((unsigned char)*end))
                        end++;
                len = (size_t)(end - p);
                while (isspace((unsigned char)*end))
                        end++;
                if (*end)
                        return -EINVAL;
                if (len == 0) {
                        /* Only zero needs no unit: any other bare number is ambiguous. */
                        if (n != 0)
                                return -EINVAL;
                        *ret_ms = 0;
                        return 0;
                }
                for (size_t i = 0; i < sizeof(units_durations) / sizeof(units_durations[0]); i++) {
                        if (strlen(units_durations[i].suffix) != len || strncmp(p, units_durations[i].suffix, len))
                                continue;
                        if (n > UNITS_DURATION_MAX_MS / units_durations[i].ms)
                                return -ERANGE;
                        *ret_ms = n * units_durations[i].ms;
                        return 0;
                }
        }
        return -EINVAL;
}

const char *units_format_duration_ms(uint64_t ms, char *buf, size_t len) {
        if (ms == 0) {
                snprintf(buf, len, "0");
                return buf;
        }
        for (size_t i = 0; i < sizeof(units_durations) / sizeof(units_durations[0]); i++)
                if (ms % units_durations[i].ms == 0) {
                        snprintf(buf, len, "%llu%s", (unsigned long long)(ms / units_durations[i].ms),
                                 units_durations[i].suffix);
                        return buf;
                }
        return buf;     /* not reached: the last unit divides everything */
}

int units_parse_long(const char *s, long min, long max, long *ret) {
        char *end;
        long v;

        if (!s || !*s || isspace((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < min || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

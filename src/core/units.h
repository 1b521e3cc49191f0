/* units: sizes, budgets and addresses as people write them ("11GiB",
 * "512MiB", "70%", "127.0.0.1:9464"). Parsing and formatting only. */
#ifndef INFERD_UNITS_H
#define INFERD_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* A byte count with an optional suffix B, KiB, MiB, GiB, TiB (also K, M, G, T,
 * binary); an optional fractional part is allowed with a suffix ("1.5GiB").
 * Returns 0, or -EINVAL (bad text) / -ERANGE (overflow). */
int units_parse_size(const char *s, uint64_t *ret);

/* A SIZE, or a percentage of capacity_bytes ("70%", 0 < PCT <= 100).
 * A percentage with capacity_bytes == 0 is -EINVAL. */
int units_parse_budget(const char *s, uint64_t capacity_bytes, uint64_t *ret);

/* True when s is a percentage ("70%"). */
int units_is_percent(const char *s);

/* "host:port" or "[v6]:port": a non-empty host (an IPv6 one in brackets;
 * bare, it would be ambiguous) and a decimal port in 1..65535. Whether the
 * host resolves is not looked at. Writes the host without brackets into
 * host (host_len bytes) and the port into *port; either may be NULL to
 * validate only. Returns 0, or -EINVAL (bad text, or a host longer than
 * host_len - 1). */
int units_parse_listen(const char *s, char *host, size_t host_len, unsigned *port);

/* A duration as people write it: a whole number with a unit, ms, s, m, h
 * or d ("90s", "10m", "1500ms"), or a bare "0". Writes milliseconds into
 * *ret_ms. Returns 0, or -EINVAL (bad text, a missing unit) / -ERANGE (more
 * than a year). */
int units_parse_duration_ms(const char *s, uint64_t *ret_ms);

/* A whole decimal number in [min, max], nothing around it ("12", "-3"; not
 * "12x", " 12" or ""): a count on a command line. Returns 0, or -EINVAL
 * (bad text, or outside the range). */
int units_parse_long(const char *s, long min, long max, long *ret);

/* The shortest exact text of a duration in that form ("10m", "1500ms",
 * "0"); returns buf. */
const char *units_format_duration_ms(uint64_t ms, char *buf, size_t len);

/* "97.5 MiB"; returns buf. */
const char *units_format_size(uint64_t bytes, char *buf, size_t len);

#endif

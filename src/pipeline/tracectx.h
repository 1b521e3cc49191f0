/* tracectx: the W3C Trace Context headers (https://www.w3.org/TR/trace-context/)
 * that a prediction copies from its input, checked and bounded as the spec
 * says, so that a producer's header can never make an output too large to
 * produce (issue 41, item 4: a 1.2 MB tracestate stopped its partition):
 *
 *   traceparent  version "-" trace-id (32 lowercase hex digits, not all
 *                zero) "-" parent-id (16, not all zero) "-" flags (2); an
 *                invalid one is not propagated;
 *   tracestate   at most 32 list members of at most 512 characters in all,
 *                cut as the spec allows (empty and malformed members and a
 *                key seen before dropped, members over 128 characters
 *                removed first, then members from the right).
 *
 * Pure functions over bytes. Not here: which headers are copied, the cap
 * on the others (correlation-id), counting the cuts (pipeline_produce.c). */
#ifndef INFERD_TRACECTX_H
#define INFERD_TRACECTX_H

#include <stdbool.h>
#include <stddef.h>

#define TRACECTX_PARENT_BYTES 55        /* version 00: 2 + 1 + 32 + 1 + 16 + 1 + 2 */
#define TRACECTX_STATE_MAX_MEMBERS 32
#define TRACECTX_STATE_MAX_CHARS 512
#define TRACECTX_STATE_LONG_MEMBER 128  /* members over this go first when the list is over 512 */

/* Whether v (len bytes, not NUL-terminated) is a traceparent to propagate:
 * version 00 of exactly 55 characters, or a later version (not ff) whose
 * first 55 characters parse as version 00's and are followed by nothing
 * or by "-". */
bool tracectx_parent_valid(const char *v, size_t len);

/* Writes tracestate v (len bytes) as the spec allows it to be propagated
 * into out (TRACECTX_STATE_MAX_CHARS + 1 bytes: NUL-terminated): its valid
 * list members, without surrounding blanks, joined by ",", cut as the file
 * comment says. Returns the length written (0: nothing to propagate).
 * *cut says whether a member was left out (blanks and empty members do not
 * count). Linear in len. */
size_t tracectx_state_cut(const char *v, size_t len, char *out, bool *cut);

#endif

/* dlq: what a DLQ copy keeps when it cannot be produced whole.
 *
 * A refused record's DLQ copy carries its key, value and headers. When the
 * copy is over the producer's message.max.bytes, or the broker refuses it
 * as too large for the DLQ topic (its max.message.bytes), it is produced
 * again without the value, with every header value over
 * DLQ_HEADER_KEEP_BYTES cut to nothing, and headers saying what was left
 * out: inferd-dlq-value-omitted: <bytes of the value>, and one
 * inferd-dlq-header-omitted: <name>=<bytes> per cut header. So a poison
 * record's copy can always be produced and its offset committed.
 *
 * Not here: producing, counting, the offsets (pipeline_produce.c). */
#ifndef INFERD_DLQ_H
#define INFERD_DLQ_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

/* Header values up to this size are kept in a cut copy. */
#define DLQ_HEADER_KEEP_BYTES 1024

#define DLQ_HEADER_VALUE_OMITTED "inferd-dlq-value-omitted"
#define DLQ_HEADER_HEADER_OMITTED "inferd-dlq-header-omitted"

/* A new header list for the cut copy of a record whose value had
 * value_bytes: in's headers (borrowed; NULL = none) with the values over
 * DLQ_HEADER_KEEP_BYTES emptied, plus the omission headers. NULL when out
 * of memory. The caller owns the result. */
rd_kafka_headers_t *dlq_headers_cut(const rd_kafka_headers_t *in, size_t value_bytes);

#endif

/* dlq: the headers of a DLQ copy cut to fit. See dlq.h. */
#include "pipeline/dlq.h"

#include <inttypes.h>
#include <stdio.h>

rd_kafka_headers_t *dlq_headers_cut(const rd_kafka_headers_t *in, size_t value_bytes) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(in ? rd_kafka_header_cnt(in) + 2 : 2);
        const char *name;
        const void *v;
        size_t len, i = 0;
        char note[320];

        if (!h)
                return NULL;
        while (in && rd_kafka_header_get_all(in, i++, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                if (len <= DLQ_HEADER_KEEP_BYTES) {
                        rd_kafka_header_add(h, name, -1, v, (ssize_t)len);
                        continue;
                }
                /* The name stays, so that what was there is still known. */
                rd_kafka_header_add(h, name, -1, "", 0);
                snprintf(note, sizeof(note), "%.256s=%zu", name, len);
                rd_kafka_header_add(h, DLQ_HEADER_HEADER_OMITTED, -1, note, -1);
        }
        snprintf(note, sizeof(note), "%zu", value_bytes);
        rd_kafka_header_add(h, DLQ_HEADER_VALUE_OMITTED, -1, note, -1);
        return h;
}

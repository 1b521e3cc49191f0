/* pipeline_source: what a record's outputs need of it (pipeline_source_t),
 * and letting its librdkafka message go once its bytes are in a slot.
 *
 * A consumed message keeps the whole decompressed message set it came in
 * alive (librdkafka decompresses a set into one buffer that its messages
 * share). Kept until its prediction was produced, each slot's records kept
 * 64 or more 150 KB images' worth of those buffers alive beside the slots'
 * own copies, so the broker thread decompressed every set into memory that
 * had left the cache; kcat frees each message at once. A raw record's bytes
 * are in its slot once placed, unchanged until the slot is released
 * (engine.h), so its message goes then: the record keeps a copy of its
 * topic, key and headers, and its value is the slot's copy. A decoded
 * record keeps its message whole (its value, the encoded image, is not in
 * the slot).
 *
 * Not here: the outputs themselves (pipeline_produce.c). */
#include "pipeline/pipeline_priv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void pipeline_source_of(pipeline_source_t *s, const rd_kafka_message_t *m) {
        rd_kafka_headers_t *h = NULL;

        if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
                h = NULL;
        *s = (pipeline_source_t){
                .topic = rd_kafka_topic_name(m->rkt),
                .partition = m->partition,
                .offset = m->offset,
                .timestamp_ms = rd_kafka_message_timestamp(m, NULL),
                .key = m->key,
                .key_len = m->key ? m->key_len : 0,
                .headers = h,
                .value = m->payload,
                .len = m->len,
        };
}

/* Copies what s views of its message (topic, key, headers) into s's own
 * memory, and takes value (len bytes) as its value. false: out of memory,
 * s unchanged. */
static bool pipeline_source_copy(pipeline_source_t *s, const void *value, size_t len) {
        size_t topic_len = strlen(s->topic) + 1;
        char *copied = malloc(topic_len + s->key_len);
        rd_kafka_headers_t *headers = NULL;

        if (!copied)
                return false;
        if (s->headers && !(headers = rd_kafka_headers_copy(s->headers))) {
                free(copied);
                return false;
        }
        memcpy(copied, s->topic, topic_len);
        if (s->key)
                memcpy(copied + topic_len, s->key, s->key_len);
        s->topic = copied;
        s->key = s->key ? copied + topic_len : NULL;
        s->headers = headers;
        s->value = value;
        s->len = len;
        s->copied = copied;
        s->copied_headers = headers;
        return true;
}

void pipeline_source_keep(pipeline_source_t *s, rd_kafka_message_t *m, const void *value, size_t len) {
        pipeline_source_of(s, m);
        s->msg = m;
        /* Out of memory: the message stays, as a decoded record's does. */
        if (value && pipeline_source_copy(s, value, len)) {
                assert(len == m->len);
                rd_kafka_message_destroy(m);
                s->msg = NULL;
        }
}

void pipeline_source_release(pipeline_source_t *s) {
        if (s->msg)
                rd_kafka_message_destroy(s->msg);
        if (s->copied_headers)
                rd_kafka_headers_destroy(s->copied_headers);
        free(s->copied);
        *s = (pipeline_source_t){};
}

/* pipeline_cache: the result cache on the records' path ([cache] entries;
 * the table itself is cache.c).
 *
 * As a record is taken, once its format is known (a refused record never
 * gets here), its key is the SHA-256 of its value and of a context naming
 * what else its result depends on: the model (its id, the SHA-256 of its
 * weights file as predictions name it), the backend and precision, the
 * output kind, the preprocessing options ([decode] fast and
 * exif_orientation) and the record's format. A hit is produced at once from
 * the cached result (pipeline_produce_hit): it takes no decode, no slot and
 * no batch place, and its offset is tracked in take order like any
 * record's, so that commits and transactions cover it. A miss keeps its key
 * with it (a staging entry, then its slot position; a record held for room
 * keeps its key until it is taken, so that it is hashed once) and, once its
 * prediction is handed to the producer, its result is put under the key
 * (pipeline_produce.c): a record whose output is not finite, or that goes
 * to the DLQ for any reason, is never put. A record whose twin is still in
 * flight is a miss: both are computed.
 *
 * What is cached is the engine's result for the record: engine_top_k
 * classes and scores and, when the output has one, the raw embedding (the
 * engine's, before [output] embedding_normalize). The prediction is made
 * from it as from a slot's results, so the labels, the live top_k and the
 * per-record fields (key, offsets, headers, latency) are the record's own.
 *
 * Memory: one block made at start (cache_new), counted by the plan's
 * "cache" term (plan_cache_bytes, the same figure); each slot position's
 * key beside the positions' other arrays. A model swap empties it and
 * carves the block for the new model's result size; a live [cache] entries
 * resizes it within that block, emptying it. */
#include "pipeline/pipeline_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "core/plan.h"

/* The plan counts what cache.c allocates. */
_Static_assert(CACHE_ENTRY_OVERHEAD_BYTES == PLAN_CACHE_ENTRY_BYTES, "cache.h and plan.h disagree");
_Static_assert(sizeof(engine_topk_t) == PLAN_CACHE_CLASS_BYTES, "engine_topk_t and plan.h disagree");

/* One cached result: engine_top_k classes, then the raw embedding. */
static size_t pipeline_cache_value_bytes(const pipeline_t *p) {
        return (size_t)p->engine_top_k * sizeof(engine_topk_t) +
               (size_t)engine_embedding_dim(p->engine) * sizeof(float);
}

/* The key's context of the running model and options (the record's format
 * is added per record). */
static void pipeline_cache_context(pipeline_t *p) {
        snprintf(p->cache_context, sizeof(p->cache_context), "model=%s;backend=%s;precision=%s;kind=%s;%s",
                 p->meta.model_id ? p->meta.model_id : "", p->meta.backend ? p->meta.backend : "",
                 p->meta.precision ? p->meta.precision : "", prediction_kind_names[p->meta.output.kind],
                 p->cache_preprocessing);
}

int pipeline_cache_new(pipeline_t *p, int entries, const char *preprocessing) {
        int r;

        if (entries <= 0)
                return 0;
        r = cache_new(&p->cache, entries, pipeline_cache_value_bytes(p));
        if (r < 0)
                return r;
        p->cache_keys = calloc((size_t)batch_depth(p->batch) * (size_t)p->capacity, sizeof(*p->cache_keys));
        if (!p->cache_keys)
                return -ENOMEM;
        snprintf(p->cache_preprocessing, sizeof(p->cache_preprocessing), "%s", preprocessing ? preprocessing : "");
        pipeline_cache_context(p);
        return 0;
}

void pipeline_cache_free(pipeline_t *p) {
        cache_free(p->cache);
        free(p->cache_keys);
}

bool pipeline_cache_take(pipeline_t *p, rd_kafka_message_t *m, record_format_t fmt, pipeline_cache_key_t *key,
                         int *r) {
        char context[sizeof(p->cache_context) + 48];
        const engine_topk_t *v;

        key->set = false;
        if (!p->cache || cache_limit(p->cache) == 0)
                return false;
        snprintf(context, sizeof(context), "%s;format=%s", p->cache_context, record_format_mime(fmt));
        if (m == p->cache_held && p->cache_held_key.set)
                key->k = p->cache_held_key.k;   /* held since its last try: hashed then */
        else if (cache_key_of(p->cache, m->payload, m->len, context, &key->k) < 0) {
                log_warning("The result cache cannot hash a record (libcrypto failed): it is computed");
                return false;
        }
        v = cache_get(p->cache, &key->k);
        if (!v) {
                key->set = true;
                return false;
        }
        /* The embedding after the classes, when the engine gives one. */
        *r = pipeline_produce_hit(p, m, v, engine_embedding_dim(p->engine) > 0 ? (const float *)(v + p->engine_top_k)
                                                                               : NULL);
        return true;
}

void pipeline_cache_held(pipeline_t *p, const rd_kafka_message_t *m, const pipeline_cache_key_t *key) {
        p->cache_held = m;
        p->cache_held_key = m && key ? *key : (pipeline_cache_key_t){};
}

void pipeline_cache_keep(pipeline_t *p, size_t pos, const pipeline_cache_key_t *key) {
        if (p->cache_keys)
                p->cache_keys[pos] = key ? *key : (pipeline_cache_key_t){};
}

void pipeline_cache_put(pipeline_t *p, size_t pos, const engine_topk_t *scores, const float *raw) {
        size_t top_bytes = (size_t)p->engine_top_k * sizeof(engine_topk_t);
        unsigned char *v;

        if (!p->cache_keys || !p->cache_keys[pos].set)
                return;
        p->cache_keys[pos].set = false;
        v = cache_put(p->cache, &p->cache_keys[pos].k);
        if (!v)
                return;         /* emptied to 0 since the record was taken */
        memcpy(v, scores, top_bytes);
        if (raw)
                memcpy(v + top_bytes, raw, (size_t)engine_embedding_dim(p->engine) * sizeof(float));
}

void pipeline_cache_swapped(pipeline_t *p) {
        if (!p->cache)
                return;
        /* A record held across the swap: its key names the old model. */
        pipeline_cache_held(p, NULL, NULL);
        pipeline_cache_context(p);
        if (cache_reshape(p->cache, pipeline_cache_value_bytes(p)) < 0) {
                /* Not one result of the new model fits the block made at
                 * start: off until a restart plans it again. */
                cache_resize(p->cache, 0);
                log_warning("The result cache is off: one result of the new model (%zu bytes) is larger than the "
                            "cache made at start; restart inferd to plan it again",
                            pipeline_cache_value_bytes(p));
        }
}

int pipeline_set_cache_entries(pipeline_t *p, int entries) {
        if (!p->cache)
                return entries == 0 ? 0 : -ENOSPC;
        return cache_resize(p->cache, entries);
}

/* prediction: the output record, one JSON object on one line.
 *
 *   {"top":[{"class":281,"label":"tabby","score":0.8123},...],
 *    "model":"sha256:<12 hex>","backend":"cuda","precision":"fp16",
 *    "instance":"green","latency_ms":3.1}
 *
 * "label" appears when a labels file is loaded, "instance" when one is given
 * (the daemon), "input" when one is given (inferd-run names the file). Used
 * by inferd-run and by the daemon, so the two print the same schema.
 *
 * With [output] kind = embedding or both, the record's embedding (the
 * pooled features that feed the fc) goes with it, in one of three formats
 * (prediction_output_t; docs/records.md has the schema of each). */
#ifndef INFERD_PREDICTION_H
#define INFERD_PREDICTION_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"
#include "core/labels.h"

/* [output] kind: what a prediction carries. */
typedef enum prediction_kind {
        PREDICTION_KIND_CLASSES,        /* the top-k classes: the schema above, byte for byte */
        PREDICTION_KIND_EMBEDDING,      /* the embedding instead of "top" */
        PREDICTION_KIND_BOTH,           /* "top" and the embedding */
} prediction_kind_t;

/* [output] embedding_format: how the embedding is written. */
typedef enum prediction_embedding_format {
        PREDICTION_EMBEDDING_JSON,      /* "embedding":[0.0123,...] in the JSON */
        PREDICTION_EMBEDDING_F32LE,     /* the record's value is dim float32 little-endian; the JSON (without
                                         * the embedding) goes in the header PREDICTION_HEADER_JSON */
        PREDICTION_EMBEDDING_BASE64,    /* "embedding":"<base64 of the f32le bytes>" in the JSON */
} prediction_embedding_format_t;

/* [output] embedding_normalize. */
typedef enum prediction_normalize {
        PREDICTION_NORMALIZE_NONE,      /* as the model computes it */
        PREDICTION_NORMALIZE_L2,        /* divided by its L2 norm (a zero vector stays zero) */
} prediction_normalize_t;

/* The value names, in enum order, NULL-terminated: "classes", "embedding",
 * "both"; "json", "f32le", "base64"; "none", "l2". The config table and
 * inferd-run parse with them. */
extern const char *const prediction_kind_names[];
extern const char *const prediction_format_names[];
extern const char *const prediction_normalize_names[];

typedef struct prediction_output {
        prediction_kind_t kind;
        prediction_embedding_format_t format;
        prediction_normalize_t normalize;
} prediction_output_t;

/* The headers of an output with an embedding: its length ("2048") and the
 * model that made it ("sha256:<12 hex>"; a swap may change both); with
 * f32le, the prediction's JSON. */
#define PREDICTION_HEADER_DIM "inferd-embedding-dim"
#define PREDICTION_HEADER_MODEL "inferd-model"
#define PREDICTION_HEADER_JSON "inferd-prediction"

/* The longest embedding of any supported architecture (model_embedding_dim:
 * 512 * 4), for callers' buffers, and the most its "embedding" member
 * takes in a line: "%.9g" writes at most 15 characters a float32
 * ("-1.17549435e-38"), then a comma; base64 takes less. */
#define PREDICTION_EMBEDDING_DIM_MAX 2048
#define PREDICTION_EMBEDDING_TEXT_MAX_BYTES (PREDICTION_EMBEDDING_DIM_MAX * 16 + 16)

static inline bool prediction_has_embedding(const prediction_output_t *o) {
        return o->kind != PREDICTION_KIND_CLASSES;
}

/* The embedding as it goes out: in (dim fp32, the engine's) copied to out,
 * divided by its L2 norm (computed in double) under
 * PREDICTION_NORMALIZE_L2. Returns 0, or -EDOM when a value is not finite
 * (such a record has no prediction, like one with non-finite logits). */
int prediction_embedding_prepare(const prediction_output_t *o, const float *in, int dim, float *out);

/* v (dim floats) as float32 little-endian into out (4 * dim bytes): the
 * f32le value. */
void prediction_embedding_f32le(const float *v, int dim, unsigned char *out);

typedef struct prediction_meta {
        const char *model_id;   /* "sha256:..." */
        const char *backend;    /* "cpu", "cuda" */
        const char *precision;  /* "fp32", ... */
        const char *instance;   /* NULL to leave out */
        const char *input;      /* NULL to leave out */
        const labels_t *labels; /* NULL to leave out "label" */
        prediction_output_t output;     /* all 0: classes, today's schema */
} prediction_meta_t;

/* One record's results. */
typedef struct prediction_row {
        const engine_topk_t *top;       /* (k); not read for PREDICTION_KIND_EMBEDDING */
        int k;
        const float *embedding;         /* (dim), prediction_embedding_prepare's; read only when the output
                                         * has one in its JSON (json, base64) */
        int dim;
        double latency_ms;
} prediction_row_t;

/* What of a prediction stays the same from record to record (meta's
 * strings and labels), encoded once: made for a meta, it borrows nothing of
 * it. Not thread-safe (one encoder a thread). */
typedef struct prediction_encoder prediction_encoder_t;

/* 0, or -ENOMEM. */
int prediction_encoder_new(prediction_encoder_t **ret, const prediction_meta_t *meta);
/* NULL is a no-op. */
void prediction_encoder_free(prediction_encoder_t *e);

/* Writes one prediction of k classes into buf as snprintf does (at most
 * size bytes with the NUL; no trailing newline) and returns the length it
 * has, whether it fitted or not, or -EOVERFLOW. */
int prediction_encode(prediction_encoder_t *e, char *buf, size_t size, const engine_topk_t *top, int k,
                      double latency_ms);

/* One prediction of the encoder's output kind, as prediction_encode:
 *   classes    {"top":[...],"model":...}
 *   embedding  {"embedding":[...],"model":...}
 *   both       {"top":[...],"embedding":[...],"model":...}
 * with "embedding" a JSON array of numbers (json: "%.9g", so that each
 * float32 reads back exactly), a base64 string of the f32le bytes (base64),
 * or left out (f32le: the caller writes the vector as the value). */
int prediction_encode_row(prediction_encoder_t *e, char *buf, size_t size, const prediction_row_t *row);

/* The same into a malloc'd NUL-terminated string in *ret, with an encoder
 * made for the call. Returns its length, or -ENOMEM. */
int prediction_format(char **ret, const engine_topk_t *top, int k, double latency_ms,
                      const prediction_meta_t *meta);
int prediction_format_row(char **ret, const prediction_row_t *row, const prediction_meta_t *meta);

#endif

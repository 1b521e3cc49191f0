/* prediction: the output record, one JSON object on one line.
 *
 *   {"top":[{"class":281,"label":"tabby","score":0.8123},...],
 *    "model":"sha256:<12 hex>","backend":"cuda","precision":"fp16",
 *    "instance":"green","latency_ms":3.1}
 *
 * "label" appears when a labels file is loaded, "instance" when one is given
 * (the daemon), "input" when one is given (inferd-run names the file). Used
 * by inferd-run and by the daemon, so the two print the same schema. */
#ifndef INFERD_PREDICTION_H
#define INFERD_PREDICTION_H

#include <stddef.h>

#include "engine/engine.h"
#include "core/labels.h"

typedef struct prediction_meta {
        const char *model_id;   /* "sha256:..." */
        const char *backend;    /* "cpu", "cuda" */
        const char *precision;  /* "fp32", ... */
        const char *instance;   /* NULL to leave out */
        const char *input;      /* NULL to leave out */
        const labels_t *labels; /* NULL to leave out "label" */
} prediction_meta_t;

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

/* The same into a malloc'd NUL-terminated string in *ret, with an encoder
 * made for the call. Returns its length, or -ENOMEM. */
int prediction_format(char **ret, const engine_topk_t *top, int k, double latency_ms,
                      const prediction_meta_t *meta);

#endif

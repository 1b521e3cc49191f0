/* prediction: the output JSON line. See prediction.h.
 *
 * jansson encodes every string and every number; what is assembled here is
 * only the fixed frame between them (keys, brackets, commas, as jansson's
 * JSON_COMPACT writes them). The strings that do not change from record to
 * record (the model, backend, precision, instance, input, and each class's
 * label) are encoded once, when the encoder is made: building and dumping a
 * whole jansson tree for each record took 3.7 us, a fifth of what the
 * event loop spends on a record (docs/perf.md, "Issue 18 after the slots let
 * their messages go..."). */
#include "engine/prediction.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f32fmt.h"

/* Rounds to 6 significant decimals so that lines stay short and stable. */
static double prediction_round(double v, double scale) {
        return round(v * scale) / scale;
}

#define PREDICTION_JSON_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(7))

const char *const prediction_kind_names[] = { "classes", "embedding", "both", NULL };
const char *const prediction_format_names[] = { "json", "f32le", "base64", NULL };
const char *const prediction_normalize_names[] = { "none", "l2", NULL };

struct prediction_encoder {
        char *middle;           /* ,"model":...[,"backend":...][,"precision":...][,"instance":...] */
        char *end;              /* ,"input":... or NULL */
        char **labels;          /* (n_labels) ,"label":"..." for each class; NULL: none */
        int n_labels;
        json_t *real;           /* reused: jansson writes each number */
        prediction_output_t output;
};

int prediction_embedding_prepare(const prediction_output_t *o, const float *in, int dim, float *out) {
        double sum = 0.0, scale = 1.0;

        for (int i = 0; i < dim; i++) {
                if (!isfinite(in[i]))
                        return -EDOM;
                sum += (double)in[i] * in[i];
        }
        if (o->normalize == PREDICTION_NORMALIZE_L2 && sum > 0.0)
                scale = 1.0 / sqrt(sum);
        for (int i = 0; i < dim; i++)
                out[i] = scale == 1.0 ? in[i] : (float)(in[i] * scale);
        return 0;
}

void prediction_embedding_f32le(const float *v, int dim, unsigned char *out) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(out, v, (size_t)dim * sizeof(float));
#else
        for (int i = 0; i < dim; i++) {
                uint32_t u;

                memcpy(&u, &v[i], sizeof(u));
                for (int b = 0; b < 4; b++)
                        out[4 * i + b] = (unsigned char)(u >> (8 * b));
        }
#endif
}

/* Appends `,"key":<value encoded by jansson>` to the malloc'd *s (NULL: "")
 * when value is not NULL. The value is consumed. false: out of memory. */
static bool prediction_append(char **s, const char *key, json_t *value) {
        char *enc, *out;

        if (!value)
                return true;    /* as json_object_set_new(o, key, NULL) left it out */
        enc = json_dumps(value, PREDICTION_JSON_FLAGS);
        json_decref(value);
        if (!enc || asprintf(&out, "%s,\"%s\":%s", *s ? *s : "", key, enc) < 0) {
                free(enc);
                return false;
        }
        free(enc);
        free(*s);
        *s = out;
        return true;
}

void prediction_encoder_free(prediction_encoder_t *e) {
        if (!e)
                return;
        for (int i = 0; i < e->n_labels; i++)
                free(e->labels[i]);
        free(e->labels);
        free(e->middle);
        free(e->end);
        json_decref(e->real);
        free(e);
}

int prediction_encoder_new(prediction_encoder_t **ret, const prediction_meta_t *meta) {
        prediction_encoder_t *e = calloc(1, sizeof(*e));

        if (!e)
                return -ENOMEM;
        e->real = json_real(0.0);
        if (!e->real)
                goto fail;
        e->output = meta->output;
        /* The keys after "top", in order; latency_ms's number goes between
         * the two parts. A string jansson cannot take (not UTF-8) is left
         * out, as it was when the tree was built for each record. */
        if (!prediction_append(&e->middle, "model", json_string(meta->model_id ? meta->model_id : "")) ||
            !prediction_append(&e->middle, "backend", json_string(meta->backend)) ||
            !prediction_append(&e->middle, "precision", json_string(meta->precision)) ||
            (meta->instance && !prediction_append(&e->middle, "instance", json_string(meta->instance))) ||
            (meta->input && !prediction_append(&e->end, "input", json_string(meta->input))))
                goto fail;
        e->n_labels = labels_count(meta->labels);
        if (e->n_labels > 0 && !(e->labels = calloc((size_t)e->n_labels, sizeof(char *))))
                goto fail;
        for (int i = 0; i < e->n_labels; i++) {
                const char *name = labels_get(meta->labels, i);

                if (name && !prediction_append(&e->labels[i], "label", json_string(name)))
                        goto fail;
        }
        *ret = e;
        return 0;
fail:
        prediction_encoder_free(e);
        return -ENOMEM;
}

/* The output as snprintf writes it: at most size bytes, NUL-terminated when
 * size > 0, len counting every byte wanted. */
typedef struct prediction_out {
        char *buf;
        size_t size, len;
} prediction_out_t;

static void prediction_put(prediction_out_t *o, const char *s, size_t n) {
        if (o->len + 1 < o->size) {
                size_t room = o->size - 1 - o->len;

                memcpy(o->buf + o->len, s, n < room ? n : room);
        }
        o->len += n;
}

static void prediction_put_str(prediction_out_t *o, const char *s) {
        prediction_put(o, s, strlen(s));
}

/* A number as jansson writes a real (JSON_REAL_PRECISION(7)); nothing for
 * one jansson cannot take (NaN, infinite), and key then not either. */
static void prediction_put_real(prediction_out_t *o, prediction_encoder_t *e, const char *key, double v) {
        char num[64];
        size_t n;

        if (json_real_set(e->real, v) < 0)
                return;
        n = json_dumpb(e->real, num, sizeof(num), PREDICTION_JSON_FLAGS);
        if (n == 0 || n >= sizeof(num))
                return;
        prediction_put_str(o, key);
        prediction_put(o, num, n);
}

/* "embedding":[...] as "%.9g" numbers: the shortest printf form that
 * reads back as the same float32 (jansson's 7 digits would not), written
 * by f32fmt_g9, printf's text without printf's cost on the loop. The
 * values are finite (prediction_embedding_prepare). */
static void prediction_put_embedding_json(prediction_out_t *o, const float *v, int dim) {
        char num[F32FMT_MAX + 1];

        prediction_put_str(o, "\"embedding\":[");
        for (int i = 0; i < dim; i++) {
                size_t n = 0;

                if (i)
                        num[n++] = ',';
                n += f32fmt_g9(num + n, v[i]);
                prediction_put(o, num, n);
        }
        prediction_put(o, "]", 1);
}

/* "embedding":"<base64>" of the f32le bytes (OpenSSL's encoder, no line
 * breaks), 3 bytes (12 values) at a time through two small buffers on the
 * stack: nothing is allocated. */
static void prediction_put_embedding_base64(prediction_out_t *o, const float *v, int dim) {
        enum { CHUNK_VALUES = 384 };    /* 1,536 bytes: a multiple of 3, so no padding inside */
        unsigned char raw[CHUNK_VALUES * sizeof(float)], text[CHUNK_VALUES * sizeof(float) / 3 * 4 + 4];

        prediction_put_str(o, "\"embedding\":\"");
        for (int i = 0; i < dim; i += CHUNK_VALUES) {
                int n = dim - i < CHUNK_VALUES ? dim - i : CHUNK_VALUES;
                int len;

                prediction_embedding_f32le(v + i, n, raw);
                len = EVP_EncodeBlock(text, raw, n * (int)sizeof(float));
                prediction_put(o, (const char *)text, (size_t)len);
        }
        prediction_put(o, "\"", 1);
}

int prediction_encode_row(prediction_encoder_t *e, char *buf, size_t size, const prediction_row_t *row) {
        prediction_out_t o = { .buf = buf, .size = size };
        bool top = e->output.kind != PREDICTION_KIND_EMBEDDING;
        bool emb = prediction_has_embedding(&e->output) && e->output.format != PREDICTION_EMBEDDING_F32LE;
        char num[32];

        assert(!emb || (row->embedding && row->dim > 0));
        prediction_put(&o, "{", 1);
        if (top) {
                prediction_put_str(&o, "\"top\":[");
                for (int i = 0; i < row->k; i++) {
                        int cls = row->top[i].cls;

                        /* As jansson writes an integer. */
                        snprintf(num, sizeof(num), "%s{\"class\":%" PRId64, i ? "," : "", (int64_t)cls);
                        prediction_put_str(&o, num);
                        if (cls >= 0 && cls < e->n_labels && e->labels[cls])
                                prediction_put_str(&o, e->labels[cls]);
                        prediction_put_real(&o, e, ",\"score\":", prediction_round(row->top[i].score, 1e6));
                        prediction_put(&o, "}", 1);
                }
                prediction_put(&o, "]", 1);
        }
        if (emb) {
                if (top)
                        prediction_put(&o, ",", 1);
                if (e->output.format == PREDICTION_EMBEDDING_BASE64)
                        prediction_put_embedding_base64(&o, row->embedding, row->dim);
                else
                        prediction_put_embedding_json(&o, row->embedding, row->dim);
        }
        /* "model" always, so never NULL; its comma goes when nothing is before it. */
        prediction_put_str(&o, e->middle + (top || emb ? 0 : 1));
        prediction_put_real(&o, e, ",\"latency_ms\":", prediction_round(row->latency_ms, 1e3));
        if (e->end)
                prediction_put_str(&o, e->end);
        prediction_put(&o, "}", 1);
        if (size > 0)
                buf[o.len < size ? o.len : size - 1] = '\0';
        return o.len > INT32_MAX ? -EOVERFLOW : (int)o.len;
}

int prediction_encode(prediction_encoder_t *e, char *buf, size_t size, const engine_topk_t *top, int k,
                      double latency_ms) {
        prediction_row_t row = { .top = top, .k = k, .latency_ms = latency_ms };

        return prediction_encode_row(e, buf, size, &row);
}

int prediction_format_row(char **ret, const prediction_row_t *row, const prediction_meta_t *meta) {
        prediction_encoder_t *e = NULL;
        char *s = NULL;
        int n, r;

        r = prediction_encoder_new(&e, meta);
        if (r < 0)
                return r;
        n = prediction_encode_row(e, NULL, 0, row);
        if (n >= 0 && (s = malloc((size_t)n + 1)))
                n = prediction_encode_row(e, s, (size_t)n + 1, row);
        prediction_encoder_free(e);
        if (n < 0) {
                free(s);
                return n;
        }
        if (!s)
                return -ENOMEM;
        *ret = s;
        return n;
}

int prediction_format(char **ret, const engine_topk_t *top, int k, double latency_ms,
                      const prediction_meta_t *meta) {
        prediction_row_t row = { .top = top, .k = k, .latency_ms = latency_ms };

        return prediction_format_row(ret, &row, meta);
}

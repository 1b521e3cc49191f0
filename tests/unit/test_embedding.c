/* Unit tests of the embeddings ([output] kind = embedding | both): each
 * format (json, f32le, base64) and normalisation (none, l2) of the
 * prediction encoder, parsed back; kind = classes byte for byte as before;
 * the CPU engine's embedding against its own fc, in fp32 and bf16, and the
 * plan's count of its bytes. Against torchvision: tests/golden. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_dnnl.h"
#include "engine/engine.h"
#include "engine/prediction.h"
#include "engine_check.h"
#include "unit.h"

#define EMB_DIM 6

static const engine_topk_t emb_top[2] = { { 7, 0.75f }, { 2, 0.25f } };
/* Values whose shortest float32 forms need all 9 digits, a negative, a zero and a tiny one. */
static const float emb_vec[EMB_DIM] = { 0.1f, -1.0f / 3.0f, 0.0f, 123456.789f, 1e-30f, 2.0f / 3.0f };

static char *emb_line(prediction_kind_t kind, prediction_embedding_format_t format, const float *vec) {
        prediction_meta_t meta = { .model_id = "sha256:0123456789ab", .backend = "cpu", .precision = "fp32",
                                   .output = { .kind = kind, .format = format } };
        prediction_row_t row = { .top = emb_top, .k = 2, .embedding = vec, .dim = EMB_DIM, .latency_ms = 1.5 };
        char *line = NULL;

        CU_ASSERT(prediction_format_row(&line, &row, &meta) > 0);
        return line;
}

/* json: "embedding" an array that reads back float32 for float32; "top"
 * with both, not with embedding. */
static void test_embedding_json(void) {
        for (int both = 0; both < 2; both++) {
                char *line = emb_line(both ? PREDICTION_KIND_BOTH : PREDICTION_KIND_EMBEDDING,
                                      PREDICTION_EMBEDDING_JSON, emb_vec);
                json_t *j = json_loads(line, 0, NULL), *a;

                CU_ASSERT_PTR_NOT_NULL_FATAL(j);
                a = json_object_get(j, "embedding");
                CU_ASSERT_EQUAL_FATAL(json_array_size(a), EMB_DIM);
                for (int i = 0; i < EMB_DIM; i++)
                        CU_ASSERT_EQUAL((float)json_number_value(json_array_get(a, i)), emb_vec[i]);
                CU_ASSERT_EQUAL(json_object_get(j, "top") != NULL, both);
                CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "model")), "sha256:0123456789ab");
                /* "top" first, then "embedding", then the rest as before. */
                CU_ASSERT(strncmp(line, both ? "{\"top\":[" : "{\"embedding\":[", both ? 8 : 14) == 0);
                json_decref(j);
                free(line);
        }
}

/* The longest "embedding" member (2048 of the widest "%.9g" numbers) fits
 * PREDICTION_EMBEDDING_TEXT_MAX_BYTES, which the pipeline's line reserves. */
static void test_embedding_json_bound(void) {
        static float v[PREDICTION_EMBEDDING_DIM_MAX];
        prediction_meta_t meta = { .model_id = "m", .output = { .kind = PREDICTION_KIND_EMBEDDING } };
        prediction_row_t row = { .embedding = v, .dim = PREDICTION_EMBEDDING_DIM_MAX };
        char *with = NULL, *without = NULL;
        int n;

        for (int i = 0; i < PREDICTION_EMBEDDING_DIM_MAX; i++)
                v[i] = i % 2 ? -1.17549435e-38f : -1.40129846e-45f;     /* FLT_MIN, the smallest denormal */
        n = prediction_format_row(&with, &row, &meta);
        meta.output.format = PREDICTION_EMBEDDING_F32LE;
        CU_ASSERT_FATAL(n > 0 && prediction_format_row(&without, &row, &meta) > 0);
        CU_ASSERT(strlen(with) - strlen(without) <= PREDICTION_EMBEDDING_TEXT_MAX_BYTES);
        CU_ASSERT(strlen(with) - strlen(without) > PREDICTION_EMBEDDING_DIM_MAX * 15);
        free(with);
        free(without);
}

/* base64: the f32le bytes, decoded back. */
static void test_embedding_base64(void) {
        char *line = emb_line(PREDICTION_KIND_EMBEDDING, PREDICTION_EMBEDDING_BASE64, emb_vec);
        json_t *j = json_loads(line, 0, NULL);
        const char *b64;
        unsigned char raw[64], want[EMB_DIM * 4];
        int n;

        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        b64 = json_string_value(json_object_get(j, "embedding"));
        CU_ASSERT_PTR_NOT_NULL_FATAL(b64);
        CU_ASSERT_EQUAL(strlen(b64), 32);      /* 24 bytes: 4 * 8 characters, no padding */
        n = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)strlen(b64));
        CU_ASSERT_EQUAL(n, 24);
        prediction_embedding_f32le(emb_vec, EMB_DIM, want);
        CU_ASSERT_EQUAL(memcmp(raw, want, sizeof(want)), 0);
        CU_ASSERT_PTR_NULL(json_object_get(j, "top"));
        json_decref(j);
        free(line);
        /* Longer than one of the encoder's chunks (384 values), its last
         * chunk padded: the same text as the whole vector encoded at once. */
        {
                static float v[1001];
                static unsigned char bytes[sizeof(v)], whole[sizeof(v) / 3 * 4 + 8];
                prediction_meta_t meta = { .model_id = "m", .output = { .kind = PREDICTION_KIND_EMBEDDING,
                                                                        .format = PREDICTION_EMBEDDING_BASE64 } };
                prediction_row_t row = { .embedding = v, .dim = 1001 };

                for (int i = 0; i < 1001; i++)
                        v[i] = (float)i * 0.37f - 100.0f;
                prediction_embedding_f32le(v, 1001, bytes);
                EVP_EncodeBlock(whole, bytes, (int)sizeof(bytes));
                CU_ASSERT_FATAL(prediction_format_row(&line, &row, &meta) > 0);
                j = json_loads(line, 0, NULL);
                CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "embedding")), (const char *)whole);
                json_decref(j);
                free(line);
        }
}

/* f32le: the vector's bytes little-endian, and a line without it (the
 * daemon's header): with kind embedding it opens on "model". */
static void test_embedding_f32le(void) {
        const float v[2] = { 1.0f, -2.5f };
        const unsigned char want[8] = { 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0 };
        unsigned char got[8];
        char *line;

        prediction_embedding_f32le(v, 2, got);
        CU_ASSERT_EQUAL(memcmp(got, want, 8), 0);
        line = emb_line(PREDICTION_KIND_EMBEDDING, PREDICTION_EMBEDDING_F32LE, emb_vec);
        CU_ASSERT_STRING_EQUAL(line, "{\"model\":\"sha256:0123456789ab\",\"backend\":\"cpu\",\"precision\":\"fp32\","
                                     "\"latency_ms\":1.5}");
        free(line);
        line = emb_line(PREDICTION_KIND_BOTH, PREDICTION_EMBEDDING_F32LE, emb_vec);
        CU_ASSERT_PTR_NULL(strstr(line, "embedding"));
        CU_ASSERT(strncmp(line, "{\"top\":[{\"class\":7,", 19) == 0);
        free(line);
}

/* kind = classes: today's line, byte for byte, whatever the format says. */
static void test_embedding_classes_unchanged(void) {
        prediction_meta_t meta = { .model_id = "sha256:0123456789ab", .backend = "cpu", .precision = "fp32" };
        char *before = NULL, *now;

        CU_ASSERT_FATAL(prediction_format(&before, emb_top, 2, 1.5, &meta) > 0);
        CU_ASSERT_STRING_EQUAL(before, "{\"top\":[{\"class\":7,\"score\":0.75},{\"class\":2,\"score\":0.25}],"
                                       "\"model\":\"sha256:0123456789ab\",\"backend\":\"cpu\",\"precision\":\"fp32\","
                                       "\"latency_ms\":1.5}");
        now = emb_line(PREDICTION_KIND_CLASSES, PREDICTION_EMBEDDING_BASE64, emb_vec);
        CU_ASSERT_STRING_EQUAL(now, before);
        free(now);
        free(before);
}

/* none copies; l2 divides by the norm (a zero vector stays zero); a value
 * that is not finite is refused either way. */
static void test_embedding_normalize(void) {
        prediction_output_t none = { .kind = PREDICTION_KIND_BOTH }, l2 = none;
        const float v[3] = { 3.0f, 0.0f, -4.0f }, zero[3] = { 0 };
        float out[3], bad[3] = { 1.0f, NAN, 0.0f };

        l2.normalize = PREDICTION_NORMALIZE_L2;
        CU_ASSERT_EQUAL(prediction_embedding_prepare(&none, v, 3, out), 0);
        CU_ASSERT_EQUAL(memcmp(out, v, sizeof(v)), 0);
        CU_ASSERT_EQUAL(prediction_embedding_prepare(&l2, v, 3, out), 0);
        CU_ASSERT_EQUAL(out[0], 0.6f);
        CU_ASSERT_EQUAL(out[1], 0.0f);
        CU_ASSERT_EQUAL(out[2], -0.8f);
        CU_ASSERT_EQUAL(prediction_embedding_prepare(&l2, zero, 3, out), 0);
        CU_ASSERT(out[0] == 0 && out[1] == 0 && out[2] == 0);
        CU_ASSERT_EQUAL(prediction_embedding_prepare(&none, bad, 3, out), -EDOM);
        bad[1] = INFINITY;
        CU_ASSERT_EQUAL(prediction_embedding_prepare(&l2, bad, 3, out), -EDOM);
}

/* A CPU engine on a resnet18 (512 features) with embeddings in precision p:
 * each record's embedding is what its fc read, so the model's own fc over
 * it gives its logits; NULL without embeddings. */
static void emb_engine_check(precision_t p) {
        model_arch_t arch;
        model_t *m = NULL;
        engine_options_t o;
        engine_t *e = NULL;
        errbuf_t err;
        const model_op_t *fc;

        CU_ASSERT_EQUAL_FATAL(model_arch_by_name(&arch, "resnet18", 10, &err), 0);
        CU_ASSERT_EQUAL_FATAL(model_random_arch(&m, &arch, 11), 0);
        fc = &m->ops[m->n_ops - 1];
        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = p;
        o.max_batch = 3;
        o.top_k = 3;
        o.embedding = true;
        o.cpu_keep_conv_weights = true;         /* a second engine opens on m below */
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, NULL, 0, &err), 0);
        CU_ASSERT_EQUAL(engine_embedding_dim(e), 512);
        CU_ASSERT_EQUAL(model_embedding_dim(m), 512);
        for (int i = 0; i < 3; i++)
                engine_check_fill(e, 0, i, 40 + i, i == 1 ? RECORD_F32_CHW : RECORD_RGB8);
        CU_ASSERT_EQUAL_FATAL(engine_submit(e, 0, 3, &err), 0);
        CU_ASSERT_EQUAL_FATAL(engine_wait(e, 0, &err), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(engine_slot_embedding(e, 0));
        for (int i = 0; i < 3; i++) {
                const float *emb = engine_slot_embedding(e, 0) + (size_t)i * 512;
                const float *lg = engine_slot_logits(e, 0) + (size_t)i * 10;
                float want[10];
                double norm = 0;

                for (int c = 0; c < 10; c++) {
                        double acc = m->biases[fc->b_off + c];

                        for (int j = 0; j < 512; j++)
                                acc += (double)m->weights[fc->w_off + (size_t)c * 512 + j] * emb[j];
                        want[c] = (float)acc;
                }
                for (int j = 0; j < 512; j++)
                        norm += (double)emb[j] * emb[j];
                CU_ASSERT(norm > 0);    /* not the zeros of an unwritten buffer */
                CU_ASSERT(engine_check_rel_l2(lg, want, 10) < 1e-5);
        }
        engine_free(e);
        /* Without embeddings: none, and the plan counts none. */
        o.embedding = false;
        CU_ASSERT_EQUAL_FATAL(engine_open(&e, m, &o, NULL, 0, &err), 0);
        CU_ASSERT_PTR_NULL(engine_slot_embedding(e, 0));
        CU_ASSERT_EQUAL(engine_embedding_dim(e), 0);
        CU_ASSERT_EQUAL(engine_plan_of(e)->engine.embedding_bytes, 0);
        engine_free(e);
        model_free(m);
}

static void test_embedding_cpu_engine_fp32(void) {
        emb_engine_check(PRECISION_FP32);
}

static void test_embedding_cpu_engine_bf16(void) {
        if (!cpu_dnnl_has_bf16()) {
                fprintf(stderr, "no bf16 on this CPU: the bf16 embedding is not checked\n");
                return;
        }
        emb_engine_check(PRECISION_BF16);
}

/* The plan counts the slots' embeddings in the pinned host bytes, on both
 * engines: depth x batch x dim fp32, aligned. */
static void test_embedding_plan_counts(void) {
        model_t *m = NULL;
        engine_options_t o;
        errbuf_t err;
        plan_t with, without;

        CU_ASSERT_EQUAL_FATAL(model_describe(&m), 0);
        for (int cuda = 0; cuda < 2; cuda++) {
                engine_options_init(&o);
                o.backend = cuda ? BACKEND_CUDA : BACKEND_CPU;
                o.device_memory_bytes = (uint64_t)16 << 30;
                o.max_batch = 8;
                CU_ASSERT_EQUAL_FATAL(engine_plan(m, &o, &without, NULL, 0, &err), 0);
                o.embedding = true;
                CU_ASSERT_EQUAL_FATAL(engine_plan(m, &o, &with, NULL, 0, &err), 0);
                CU_ASSERT_EQUAL(with.max_batch, 8);
                CU_ASSERT_EQUAL(with.embedding_dim, 2048);
                CU_ASSERT_EQUAL(without.embedding_dim, 0);
                CU_ASSERT_EQUAL(with.engine.embedding_bytes, (uint64_t)2 * 8 * 2048 * 4);
                CU_ASSERT_EQUAL(with.pinned_host_bytes - without.pinned_host_bytes, with.engine.embedding_bytes);
                /* CUDA: the device staging holds them too. */
                CU_ASSERT_EQUAL(with.engine.staging_bytes - without.engine.staging_bytes,
                                cuda ? with.engine.embedding_bytes : 0);
                CU_ASSERT_EQUAL(with.total_bytes - without.total_bytes, cuda ? with.engine.embedding_bytes : 0);
        }
        model_free(m);
}

int test_embedding_register(void) {
        static CU_TestInfo tests[] = {
                { "json", test_embedding_json },
                { "json_bound", test_embedding_json_bound },
                { "base64", test_embedding_base64 },
                { "f32le", test_embedding_f32le },
                { "classes_unchanged", test_embedding_classes_unchanged },
                { "normalize", test_embedding_normalize },
                { "cpu_engine_fp32", test_embedding_cpu_engine_fp32 },
                { "cpu_engine_bf16", test_embedding_cpu_engine_bf16 },
                { "plan_counts", test_embedding_plan_counts },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("embedding", tests);
}

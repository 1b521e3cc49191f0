/* Unit tests of prediction_ and labels_: the output JSON parsed back with
 * jansson, and the labels file's checks. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/labels.h"
#include "engine/prediction.h"
#include "unit.h"

static char *prediction_write_labels(const char *body) {
        char *path = strdup("/tmp/inferd-labels-XXXXXX");
        int fd = mkstemp(path);

        if (write(fd, body, strlen(body)) != (ssize_t)strlen(body))
                CU_FAIL("write");
        close(fd);
        return path;
}

static void test_prediction_schema(void) {
        engine_topk_t top[2] = { { 281, 0.8123f }, { 3, 0.05f } };
        char *path = prediction_write_labels("zero\none\ntwo\nthree \"quoted\"\n");
        labels_t *labels = NULL;
        prediction_meta_t meta = { .model_id = "sha256:0123456789ab", .backend = "cpu", .precision = "fp32",
                                   .instance = "green" };
        json_t *j, *t0, *t1;
        char *line;

        /* A 4-class labels file: class 281 has no label, class 3 has one with quotes. */
        CU_ASSERT_EQUAL_FATAL(labels_load(&labels, path, 4, NULL), 0);
        meta.labels = labels;
        CU_ASSERT_FATAL(prediction_format(&line, top, 2, 3.14159, &meta) > 0);
        CU_ASSERT_PTR_NULL(strchr(line, '\n'));
        j = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        t0 = json_array_get(json_object_get(j, "top"), 0);
        t1 = json_array_get(json_object_get(j, "top"), 1);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(t0, "class")), 281);
        CU_ASSERT_PTR_NULL(json_object_get(t0, "label"));
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(t0, "score")), 0.8123, 1e-6);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t1, "label")), "three \"quoted\"");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "model")), "sha256:0123456789ab");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "backend")), "cpu");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "precision")), "fp32");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "instance")), "green");
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "latency_ms")), 3.142, 1e-9);
        CU_ASSERT_PTR_NULL(json_object_get(j, "input"));
        json_decref(j);
        free(line);
        labels_free(labels);
        unlink(path);
        free(path);
}

/* The line as a jansson tree dumped whole gives it (how prediction_format
 * wrote it before the encoder): the reference the encoder must match byte
 * for byte. */
static char *prediction_by_tree(const engine_topk_t *top, int k, double latency_ms, const prediction_meta_t *meta) {
        json_t *root = json_object(), *list = json_array();
        char *s;

        for (int i = 0; i < k; i++) {
                json_t *item = json_object();
                const char *label = labels_get(meta->labels, top[i].cls);

                json_object_set_new(item, "class", json_integer(top[i].cls));
                if (label)
                        json_object_set_new(item, "label", json_string(label));
                json_object_set_new(item, "score", json_real(round(top[i].score * 1e6) / 1e6));
                json_array_append_new(list, item);
        }
        json_object_set_new(root, "top", list);
        json_object_set_new(root, "model", json_string(meta->model_id ? meta->model_id : ""));
        json_object_set_new(root, "backend", json_string(meta->backend));
        json_object_set_new(root, "precision", json_string(meta->precision));
        if (meta->instance)
                json_object_set_new(root, "instance", json_string(meta->instance));
        json_object_set_new(root, "latency_ms", json_real(round(latency_ms * 1e3) / 1e3));
        if (meta->input)
                json_object_set_new(root, "input", json_string(meta->input));
        s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
        json_decref(root);
        return s;
}

/* The encoder's line is the whole tree's, byte for byte: labels that need
 * escaping (quotes, a backslash, a control character, UTF-8), classes
 * without a label, scores and latencies of every magnitude (jansson's %.7g,
 * its ".0" and its exponents), with and without instance and input, k from
 * 0 to 5; and into a buffer too small, snprintf's contract. */
static void test_prediction_encoder_matches_the_tree(void) {
        static const float scores[] = { 0.0f, 1.0f, 0.8123f, 0.05f, 1e-7f, 3.4e-5f, 0.999999f, 0.5f, 123456.7f };
        static const double latencies[] = { 0.0, 0.0004, 3.14159, 12.0, 99999.9996, 1e7 };
        char *path = prediction_write_labels("zero\n\"one\"\nback\\slash\ncaf\xc3\xa9\ntab\there\nbell\x01\n");
        labels_t *labels = NULL;
        prediction_meta_t metas[] = {
                { .model_id = "sha256:0123456789ab", .backend = "cpu", .precision = "fp32", .instance = "green" },
                { .model_id = NULL, .backend = "cuda", .precision = "bf16", .input = "a \"file\".jpg" },
                { .model_id = "sha256:0123456789ab", .backend = "cpu", .precision = "fp32", .instance = "blue",
                  .input = "x" },
        };
        int checked = 0;

        CU_ASSERT_EQUAL_FATAL(labels_load(&labels, path, 6, NULL), 0);
        metas[0].labels = labels;
        metas[2].labels = labels;
        for (size_t m = 0; m < sizeof(metas) / sizeof(metas[0]); m++) {
                prediction_encoder_t *e = NULL;

                CU_ASSERT_EQUAL_FATAL(prediction_encoder_new(&e, &metas[m]), 0);
                for (size_t l = 0; l < sizeof(latencies) / sizeof(latencies[0]); l++)
                        for (int k = 0; k <= 5; k++) {
                                engine_topk_t top[5];
                                char buf[1024], small[16], *want;
                                int n;

                                for (int i = 0; i < k; i++)
                                        top[i] = (engine_topk_t){ .cls = (int)((l * 3 + (size_t)i * 2 + m) % 9),
                                                                  .score = scores[(l + (size_t)i * 4) % 9] };
                                want = prediction_by_tree(top, k, latencies[l], &metas[m]);
                                CU_ASSERT_PTR_NOT_NULL_FATAL(want);
                                n = prediction_encode(e, buf, sizeof(buf), top, k, latencies[l]);
                                CU_ASSERT_EQUAL(n, (int)strlen(want));
                                if (strcmp(buf, want) != 0) {
                                        CU_FAIL("the encoder's line is not the tree's");
                                        fprintf(stderr, "  encoder: %s\n  tree:    %s\n", buf, want);
                                }
                                /* Too small: the same length, a NUL-terminated prefix. */
                                CU_ASSERT_EQUAL(prediction_encode(e, small, sizeof(small), top, k, latencies[l]), n);
                                CU_ASSERT(strlen(small) == sizeof(small) - 1 && !strncmp(small, want, sizeof(small) - 1));
                                free(want);
                                checked++;
                        }
                prediction_encoder_free(e);
        }
        CU_ASSERT_EQUAL(checked, 3 * 6 * 6);
        labels_free(labels);
        unlink(path);
        free(path);
}

static void test_labels_rejects_bad_files(void) {
        errbuf_t err = { "" };
        labels_t *l = NULL;
        char *path;

        path = prediction_write_labels("a\nb\n");
        CU_ASSERT_EQUAL(labels_load(&l, path, 3, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "has 2 labels (one per line) but the model has 3 classes"));
        unlink(path);
        free(path);
        path = prediction_write_labels("a\n\nc\n");
        CU_ASSERT_EQUAL(labels_load(&l, path, 3, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "line 2: empty label"));
        unlink(path);
        free(path);
        path = prediction_write_labels("a\nb\nc\nd\n");
        CU_ASSERT_EQUAL(labels_load(&l, path, 3, &err), -EINVAL);
        /* The whole file is counted, so the sentence names both counts. */
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "has 4 labels (one per line) but the model has 3 classes"));
        unlink(path);
        free(path);
        CU_ASSERT_EQUAL(labels_load(&l, "/nonexistent/labels.txt", 3, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/labels.txt"));
        path = prediction_write_labels("a\r\nb\r\nc");       /* CRLF and no final newline are fine */
        CU_ASSERT_EQUAL(labels_load(&l, path, 3, &err), 0);
        CU_ASSERT_STRING_EQUAL(labels_get(l, 2), "c");
        CU_ASSERT_STRING_EQUAL(labels_get(l, 0), "a");
        CU_ASSERT_PTR_NULL(labels_get(l, 3));
        labels_free(l);
        unlink(path);
        free(path);
}

int test_prediction_register(void) {
        static CU_TestInfo tests[] = {
                { "schema", test_prediction_schema },
                { "encoder_matches_the_tree", test_prediction_encoder_matches_the_tree },
                { "labels_rejects_bad_files", test_labels_rejects_bad_files },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("prediction", tests);
}

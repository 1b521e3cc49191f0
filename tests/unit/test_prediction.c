/* Unit tests of prediction_ and labels_: the output JSON parsed back with
 * jansson, and the labels file's checks. */
#include <errno.h>
#include <jansson.h>
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
                { "labels_rejects_bad_files", test_labels_rejects_bad_files },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("prediction", tests);
}

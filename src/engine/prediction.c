/* prediction: formats the output JSON line with jansson. See prediction.h. */
#include "engine/prediction.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rounds to 6 significant decimals so that lines stay short and stable. */
static double prediction_round(double v, double scale) {
        return round(v * scale) / scale;
}

int prediction_format(char **ret, const engine_topk_t *top, int k, double latency_ms,
                      const prediction_meta_t *meta) {
        json_t *root = NULL, *list = NULL;
        char *s;
        int r = -ENOMEM;

        root = json_object();
        list = json_array();
        if (!root || !list)
                goto fail;
        for (int i = 0; i < k; i++) {
                json_t *item = json_object();
                const char *label = labels_get(meta->labels, top[i].cls);

                if (!item)
                        goto fail;
                json_object_set_new(item, "class", json_integer(top[i].cls));
                if (label)
                        json_object_set_new(item, "label", json_string(label));
                json_object_set_new(item, "score", json_real(prediction_round(top[i].score, 1e6)));
                if (json_array_append_new(list, item) < 0)
                        goto fail;
        }
        json_object_set_new(root, "top", list);
        list = NULL;
        json_object_set_new(root, "model", json_string(meta->model_id ? meta->model_id : ""));
        json_object_set_new(root, "backend", json_string(meta->backend));
        json_object_set_new(root, "precision", json_string(meta->precision));
        if (meta->instance)
                json_object_set_new(root, "instance", json_string(meta->instance));
        json_object_set_new(root, "latency_ms", json_real(prediction_round(latency_ms, 1e3)));
        if (meta->input)
                json_object_set_new(root, "input", json_string(meta->input));
        s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
        if (!s)
                goto fail;
        json_decref(root);
        *ret = s;
        return (int)strlen(s);
fail:
        json_decref(list);
        json_decref(root);
        return r;
}

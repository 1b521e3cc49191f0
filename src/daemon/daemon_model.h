/* daemon_model: what the daemon checks of a model against its config, at
 * start and before a swap in place: [service] top_k within the class count,
 * the labels file's line count, and the names it gives the model (start-up
 * log, inferd_build_info). Private to src/daemon/daemon*.c.
 *
 * It does not load weights (model_load does) nor plan (engine_plan does). */
#ifndef INFERD_DAEMON_MODEL_H
#define INFERD_DAEMON_MODEL_H

#include <stddef.h>

#include "core/errbuf.h"
#include "core/labels.h"
#include "core/model.h"
#include "config/cfg.h"

/* [service] top_k against m's classes, and c's [model] labels (when set)
 * read against them into *labels (NULL when none is configured; labels NULL:
 * the top_k check alone). Returns 0,
 * or -errno with one sentence naming the file, section and key. */
int daemon_model_check(const cfg_t *c, const model_t *m, labels_t **labels, errbuf_t *err);

/* The model's table for `inferd --plan`: [model] weights' architecture read
 * from the file's header; ResNet-50 with 1000 classes when the file does not
 * exist (note then says so). Returns 0, or -errno with a sentence. */
int daemon_model_describe(const cfg_t *c, model_t **ret, char *note, size_t note_len, errbuf_t *err);

/* "resnet18 sha256:0123456789ab": the architecture and the file's hash, as
 * inferd_build_info's model label gives them. */
const char *daemon_model_name(const model_t *m, char *buf, size_t len);

#endif

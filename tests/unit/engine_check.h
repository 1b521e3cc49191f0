/* engine_check: what the engine suites (test_engine_cpu, test_engine_onednn)
 * share: a CPU engine opened for them, records of seeded random content
 * placed in a slot, and a batch of them run through the engine. */
#ifndef INFERD_TEST_ENGINE_CHECK_H
#define INFERD_TEST_ENGINE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

#define R50_CLASSES 1000        /* model_random: ResNet-50 with ImageNet's classes */

/* A CPU engine over m with batches of up to max_batch, top-3, in precision
 * p, on oneDNN or (reference) cpu_ops' convolutions; NULL (the reason on
 * stderr) when it cannot open. */
engine_t *engine_check_open(model_t *m, int max_batch, precision_t p, bool reference);

/* ||a - b|| / ||b|| over n elements: the relative L2 error of a against b. */
double engine_check_rel_l2(const float *a, const float *b, size_t n);

/* Places record i of slot with random content of seed; returns where it went. */
void *engine_check_fill(engine_t *e, int slot, int i, uint64_t seed, record_format_t f);

/* The n records of seeds through slot 0 of e (rgb8, the second f32: a
 * slot holds one f32 record beside the rgb8 ones, engine/pack.h);
 * their logits to out (n, the model's classes). 0 or the engine's -errno. */
int engine_check_batch(engine_t *e, const uint64_t *seeds, int n, float *out);

#endif

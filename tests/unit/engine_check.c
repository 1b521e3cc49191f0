/* engine_check: the engine suites' shared helpers (engine_check.h). */
#include "engine_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

engine_t *engine_check_open(model_t *m, int max_batch, precision_t p, bool reference) {
        engine_options_t o;
        engine_t *e = NULL;
        errbuf_t err;

        engine_options_init(&o);
        o.backend = BACKEND_CPU;
        o.precision = p;
        o.cpu_reference = reference;
        /* The suites open several engines on one model. */
        o.cpu_keep_conv_weights = true;
        o.max_batch = max_batch;
        o.top_k = 3;
        if (engine_open(&e, m, &o, NULL, 0, &err) < 0) {
                fprintf(stderr, "engine_open: %s\n", err.msg);
                return NULL;
        }
        return e;
}

double engine_check_rel_l2(const float *a, const float *b, size_t n) {
        double num = 0, den = 0;

        for (size_t i = 0; i < n; i++) {
                num += pow((double)a[i] - b[i], 2);
                den += pow(b[i], 2);
        }
        return sqrt(num / den);
}

void *engine_check_fill(engine_t *e, int slot, int i, uint64_t seed, record_format_t f) {
        unsigned char *p = engine_slot_place(e, slot, i, f);

        CU_ASSERT_PTR_NOT_NULL_FATAL(p);

        if (f == RECORD_RGB8)
                for (size_t k = 0; k < RECORD_RGB8_BYTES; k++)
                        p[k] = (unsigned char)(unit_rand_u64(&seed) >> 56);
        else
                for (size_t k = 0; k < RECORD_F32_CHW_BYTES / 4; k++)
                        ((float *)p)[k] = unit_rand_float(&seed) * 2.0f;
        return p;
}

int engine_check_batch(engine_t *e, const uint64_t *seeds, int n, float *out) {
        errbuf_t err;
        int r;

        for (int i = 0; i < n; i++)
                engine_check_fill(e, 0, i, seeds[i], i == 1 ? RECORD_F32_CHW : RECORD_RGB8);
        if ((r = engine_submit(e, 0, n, &err)) < 0 || (r = engine_wait(e, 0, &err)) < 0)
                return r;
        memcpy(out, engine_slot_logits(e, 0), (size_t)n * e->model->classes * sizeof(float));
        return 0;
}

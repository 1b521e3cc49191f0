/* Unit tests of the embeddings: the CPU engine's embedding against its own
 * fc, in fp32 and bf16, and the plan's count of its bytes. Against
 * torchvision: tests/golden. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_dnnl.h"
#include "engine/engine.h"
#include "engine_check.h"
#include "unit.h"

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
                { "cpu_engine_fp32", test_embedding_cpu_engine_fp32 },
                { "cpu_engine_bf16", test_embedding_cpu_engine_bf16 },
                { "plan_counts", test_embedding_plan_counts },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("embedding", tests);
}

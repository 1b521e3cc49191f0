/* Unit tests of the activation arena's two layouts (plan_place_tensors):
 * the CPU engine's, where a residual conv's output takes its dead residual
 * input's bytes (oneDNN adds it as a sum post-op, in place), and the one
 * without, which the CUDA engine and the CPU reference keep exactly as it
 * was before the in-place option (their offsets pinned below). The engines'
 * numerics on the in-place layout are test_engine_cpu's and the golden
 * suite's. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/plan.h"
#include "core/record.h"
#include "engine/engine.h"
#include "unit.h"

/* ResNet-50's and ResNet-18's offsets (elements a sample, tensor order)
 * without the in-place option, as main at 526218f placed them, before the
 * option existed: the CUDA engine's layout, which must not move. */
static const size_t layout_r50_before[57] = {
        802816, 0, 802816, 0, 1003520, 1605632, 802816, 0, 1605632, 0, 802816, 1605632, 802816, 0, 401408,
        802816, 401408, 0, 802816, 0, 401408, 802816, 401408, 0, 802816, 0, 401408, 602112, 200704, 0,
        200704, 401408, 200704, 0, 401408, 0, 200704, 401408, 200704, 0, 401408, 0, 200704, 401408, 200704,
        0, 100352, 200704, 100352, 0, 200704, 0, 100352, 200704, 100352, 0, 2048,
};
static const size_t layout_r18_before[24] = {
        802816, 0, 802816, 0, 200704, 0, 401408, 0, 100352, 200704, 0, 100352, 0, 50176, 100352, 0,
        50176, 0, 25088, 50176, 0, 25088, 1024, 0,
};

static model_t *layout_model(const char *arch) {
        model_arch_t a;
        model_t *m = NULL;

        if (model_arch_by_name(&a, arch, 1000, NULL) < 0 || model_describe_arch(&m, &a) < 0)
                return NULL;
        return m;
}

/* Whether a and b are the residual and the output of one op that
 * plan_residual_in_place allows. */
static bool layout_in_place_pair(const model_t *m, int a, int b) {
        for (int i = 0; i < m->n_ops; i++) {
                const model_op_t *op = &m->ops[i];

                if (plan_residual_in_place(m, i) &&
                    ((op->residual == a && op->out == b) || (op->residual == b && op->out == a)))
                        return true;
        }
        return false;
}

/* Checks m's placement off (arena elements a sample): aligned, within the
 * arena, and no two tensors live at once sharing bytes, except, in place,
 * an op's residual and output, which then start at one offset. Returns how
 * many such pairs share. */
static int layout_check(const model_t *m, const size_t *off, size_t arena, bool in_place) {
        int shared = 0;

        for (int a = 0; a < m->n_tensors; a++) {
                const model_tensor_t *ta = &m->tensors[a];

                CU_ASSERT(off[a] % PLAN_TENSOR_ALIGN_ELEMS == 0);
                CU_ASSERT(off[a] + ta->elems <= arena);
                for (int b = a + 1; b < m->n_tensors; b++) {
                        const model_tensor_t *tb = &m->tensors[b];
                        bool live_together = !(ta->last_use < tb->producer || tb->last_use < ta->producer);
                        bool bytes_overlap = off[a] < off[b] + tb->elems && off[b] < off[a] + ta->elems;

                        if (!live_together || !bytes_overlap)
                                continue;
                        if (in_place && layout_in_place_pair(m, a, b) && off[a] == off[b]) {
                                shared++;
                                continue;
                        }
                        CU_FAIL("two live tensors share bytes");
                        fprintf(stderr, "tensors %d [%d, %d] at %zu and %d [%d, %d] at %zu overlap\n", a,
                                ta->producer, ta->last_use, off[a], b, tb->producer, tb->last_use, off[b]);
                }
        }
        return shared;
}

/* The residual convs whose output sits on its residual's offset. */
static int layout_count_in_place(const model_t *m, const size_t *off) {
        int n = 0;

        for (int i = 0; i < m->n_ops; i++)
                if (m->ops[i].residual >= 0 && off[m->ops[i].out] == off[m->ops[i].residual])
                        n++;
        return n;
}

/* Without the in-place option no two tensors live at once share bytes.
 * At layer1.0.conv3 three tensors are live at once: its input (56*56*64 =
 * 200,704), the downsample (56*56*256 = 802,816) and the output (802,816):
 * 1,806,336 elements is a floor for any such placement, and the greedy
 * placement reaches it, against 11,468,264 for all 57 tensors without
 * reuse. */
static void test_plan_layout_never_overlaps_live_tensors(void) {
        size_t off[MODEL_MAX_TENSORS], arena, sum = 0;
        model_t *m = layout_model("resnet50");

        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        arena = plan_place_tensors(m, false, off);
        CU_ASSERT_EQUAL(layout_check(m, off, arena, false), 0);
        CU_ASSERT_EQUAL(layout_count_in_place(m, off), 0);
        for (int a = 0; a < m->n_tensors; a++)
                sum += m->tensors[a].elems;
        CU_ASSERT_EQUAL(arena, 1806336);
        CU_ASSERT_EQUAL(sum, 11468264);
        model_free(m);
}

/* ResNet-50 in place: every one of its 16 residual convs (each block's
 * conv3, whose residual, the block's input or its downsample, dies there)
 * writes over its residual, and nothing else shares live bytes. The arena's
 * floor moves from layer1.0.conv3 (its input 56*56*64 = 200,704, the
 * downsample and the output, 802,816 each: 1,806,336) to layer2.0.conv1:
 * the stage's input (56*56*256 = 802,816), the downsample made before it
 * (28*28*512 = 401,408) and its output (56*56*128 = 401,408): 1,605,632,
 * which the greedy placement reaches. ResNet-18's 8 basic blocks (conv2
 * over the residual) gain nothing: its floor is the stem's conv1 output
 * and the max pool's (802,816 + 200,704 = 1,003,520) either way. */
static void test_plan_layout_resnet_in_place(void) {
        size_t off[MODEL_MAX_TENSORS], arena;
        model_t *m = layout_model("resnet50"), *r18 = layout_model("resnet18");

        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r18);
        arena = plan_place_tensors(m, true, off);
        CU_ASSERT_EQUAL(arena, 1605632);
        CU_ASSERT_EQUAL(layout_check(m, off, arena, true), 16);
        CU_ASSERT_EQUAL(layout_count_in_place(m, off), 16);
        for (int i = 0; i < m->n_ops; i++)
                CU_ASSERT_EQUAL(plan_residual_in_place(m, i), m->ops[i].residual >= 0);
        /* An op's other input never shares its output's bytes. */
        for (int i = 0; i < m->n_ops; i++)
                if (m->ops[i].in != m->ops[i].out)
                        CU_ASSERT_NOT_EQUAL(off[m->ops[i].in], off[m->ops[i].out]);

        arena = plan_place_tensors(r18, true, off);
        CU_ASSERT_EQUAL(arena, 1003520);
        CU_ASSERT_EQUAL(layout_check(r18, off, arena, true), 8);
        CU_ASSERT_EQUAL(layout_count_in_place(r18, off), 8);
        model_free(m);
        model_free(r18);
}

/* A residual that a later op still reads (another branch) keeps its bytes:
 * layer1.1.conv3's residual marked as read by the op after it, and that one
 * conv is then placed apart, the other 15 in place. */
static void test_plan_layout_in_place_needs_a_dead_residual(void) {
        size_t off[MODEL_MAX_TENSORS], arena;
        model_t *m = layout_model("resnet50");
        int i, r;

        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        i = model_find_op(m, "layer1.1.conv3");
        CU_ASSERT_FATAL(i >= 0 && i + 1 < m->n_ops);
        r = m->ops[i].residual;
        CU_ASSERT_FATAL(r >= 0);
        CU_ASSERT_EQUAL(plan_residual_in_place(m, i), 1);
        m->tensors[r].last_use = i + 1;
        CU_ASSERT_EQUAL(plan_residual_in_place(m, i), 0);
        arena = plan_place_tensors(m, true, off);
        CU_ASSERT_NOT_EQUAL(off[m->ops[i].out], off[r]);
        CU_ASSERT_EQUAL(layout_check(m, off, arena, true), 15);
        CU_ASSERT_EQUAL(layout_count_in_place(m, off), 15);
        model_free(m);
}

static void layout_request(plan_request_t *req, backend_t b, precision_t p) {
        memset(req, 0, sizeof(*req));
        req->backend = b;
        req->precision = p;
        req->device_memory_bytes = (uint64_t)1 << 40;
        req->budget_bytes = (uint64_t)1 << 40;
        req->host_budget_bytes = (uint64_t)1 << 40;
        req->pipeline_depth = 2;
        req->record_bytes = RECORD_MAX_BYTES;
        req->max_batch = 8;
        req->top_k = 5;
        req->terms = b == BACKEND_CUDA ? engine_cuda_plan_terms : engine_cpu_plan_terms;
}

/* The CUDA engine's plans (fp16 and fp32) and the CPU reference's do not
 * ask for the in-place layout, and their offsets are the ones pinned above,
 * as before the option; oneDNN's CPU plan asks for it, and its activation
 * term is the smaller arena's (1,605,632 elements a sample, 4 bytes each). */
static void test_plan_layout_cuda_unchanged(void) {
        static const precision_t cuda_p[2] = { PRECISION_FP16, PRECISION_FP32 };
        model_t *m = layout_model("resnet50"), *r18 = layout_model("resnet18");
        size_t off[MODEL_MAX_TENSORS];
        plan_request_t req;
        plan_t p;

        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r18);
        CU_ASSERT_EQUAL_FATAL(m->n_tensors, 57);
        CU_ASSERT_EQUAL_FATAL(r18->n_tensors, 24);
        for (int k = 0; k < 2; k++) {
                layout_request(&req, BACKEND_CUDA, cuda_p[k]);
                CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 8, &p), 0);
                CU_ASSERT_FALSE(p.engine.residual_in_place);
                CU_ASSERT_EQUAL(p.arena_elems_per_sample, 1806336);
                CU_ASSERT_EQUAL(memcmp(p.tensor_offset, layout_r50_before, sizeof(layout_r50_before)), 0);
                CU_ASSERT_EQUAL(p.activation_bytes_per_sample, 1806336 * precision_bytes(cuda_p[k]));
                CU_ASSERT_EQUAL_FATAL(plan_at_batch(r18, &req, 8, &p), 0);
                CU_ASSERT_EQUAL(p.arena_elems_per_sample, 1003520);
                CU_ASSERT_EQUAL(memcmp(p.tensor_offset, layout_r18_before, sizeof(layout_r18_before)), 0);
        }
        CU_ASSERT_EQUAL(plan_place_tensors(m, false, off), 1806336);
        CU_ASSERT_EQUAL(memcmp(off, layout_r50_before, sizeof(layout_r50_before)), 0);

        layout_request(&req, BACKEND_CPU, PRECISION_FP32);
        req.cpu_reference = true;
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 8, &p), 0);
        CU_ASSERT_FALSE(p.engine.residual_in_place);
        CU_ASSERT_EQUAL(memcmp(p.tensor_offset, layout_r50_before, sizeof(layout_r50_before)), 0);

        req.cpu_reference = false;
        CU_ASSERT_EQUAL_FATAL(plan_at_batch(m, &req, 8, &p), 0);
        CU_ASSERT_TRUE(p.engine.residual_in_place);
        CU_ASSERT_EQUAL(p.arena_elems_per_sample, 1605632);
        CU_ASSERT_EQUAL(p.activation_bytes_per_sample, 1605632 * 4);
        CU_ASSERT_EQUAL(p.activation_bytes, 8 * 1605632 * 4);
        CU_ASSERT_EQUAL(layout_count_in_place(m, p.tensor_offset), 16);
        model_free(m);
        model_free(r18);
}

int test_plan_layout_register(void) {
        static CU_TestInfo tests[] = {
                { "never_overlaps_live_tensors", test_plan_layout_never_overlaps_live_tensors },
                { "resnet_in_place", test_plan_layout_resnet_in_place },
                { "in_place_needs_a_dead_residual", test_plan_layout_in_place_needs_a_dead_residual },
                { "cuda_unchanged", test_plan_layout_cuda_unchanged },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("plan_layout", tests);
}

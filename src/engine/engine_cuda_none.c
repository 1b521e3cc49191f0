/* engine_cuda_none: the CUDA backend of a build made without nvcc.
 *
 * It keeps the symbols that engine.c links against, so one engine.c serves
 * both builds: opening fails with -ENODEV and a sentence saying why, the
 * probe reports no device with the same reason, and engine_cuda_built is 0.
 * It is not a fallback engine; --backend auto chooses the CPU on the probe's
 * answer. engine_cuda_plan_terms lives in engine_cuda_plan.c, which every
 * build compiles, so planning for a GPU still works here. */
#include <errno.h>
#include <stdio.h>

#include "engine/engine.h"

#define NONE_REASON "this build of inferd has no CUDA engine (nvcc was not found at build time)"

const int engine_cuda_built = 0;

static int none_open(engine_t *e, errbuf_t *err) {
        (void)e;
        return errbuf_set(err, -ENODEV, NONE_REASON);
}

static void none_close(engine_t *e) {
        (void)e;
}

static void *none_slot_input(engine_t *e, int slot) {
        (void)e;
        (void)slot;
        return NULL;
}

static int none_submit(engine_t *e, int slot, int n, errbuf_t *err) {
        (void)e;
        (void)slot;
        (void)n;
        return errbuf_set(err, -ENODEV, NONE_REASON);
}

static int none_reap(engine_t *e, int *slot, errbuf_t *err) {
        (void)e;
        (void)slot;
        return errbuf_set(err, -ENODEV, NONE_REASON);
}

static const float *none_slot_logits(engine_t *e, int slot) {
        (void)e;
        (void)slot;
        return NULL;
}

static const engine_topk_t *none_slot_topk(engine_t *e, int slot) {
        (void)e;
        (void)slot;
        return NULL;
}

static int none_completion_fd(engine_t *e) {
        (void)e;
        return -1;
}

const engine_ops_t engine_cuda_ops = {
        .name = "cuda",
        .open = none_open,
        .close = none_close,
        .slot_input = none_slot_input,
        .submit = none_submit,
        .reap = none_reap,
        .slot_logits = none_slot_logits,
        .slot_topk = none_slot_topk,
        .completion_fd = none_completion_fd,
};

int engine_cuda_probe(int device, uint64_t *total_bytes, char *why, size_t why_len) {
        (void)device;
        if (total_bytes)
                *total_bytes = 0;
        if (why && why_len > 0)
                snprintf(why, why_len, "%s", NONE_REASON);
        return 0;
}

int engine_cuda_pci_bus_id(int device, char *buf, size_t len, errbuf_t *err) {
        (void)device;
        if (buf && len > 0)
                buf[0] = '\0';
        return errbuf_set(err, -ENODEV, NONE_REASON);
}

int engine_cuda_device_memory(int device, char *name, size_t name_len, uint64_t *total_bytes, uint64_t *free_bytes,
                              errbuf_t *err) {
        (void)device;
        if (name && name_len > 0)
                name[0] = '\0';
        *total_bytes = 0;
        *free_bytes = 0;
        return errbuf_set(err, -ENODEV, NONE_REASON);
}

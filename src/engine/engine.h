/* engine: the interface that both executors of the plan implement.
 *
 * An engine is opened on a loaded model and a plan. It owns one arena of
 * plan->total_bytes (device memory for CUDA, host memory for the CPU) and the
 * host staging of plan->pipeline_depth slots, each holding up to
 * plan->max_batch records. The caller packs raw records straight into a
 * slot's input buffer, submits the slot, and learns of its completion
 * through a file descriptor that becomes readable (an eventfd), so an event
 * loop can wait for it beside everything else. Results (logits, and the
 * top-k with softmax scores) stay in the slot until it is submitted again.
 *
 * Submission never blocks on compute and never allocates: every buffer was
 * carved at open. Errors are -errno with a sentence in an errbuf_t; a CUDA
 * failure is -EIO carrying CUDA's message.
 *
 * This header knows no backend. engine_cpu.c and cuda/ implement
 * engine_ops_t; engine.c chooses one. */
#ifndef INFERD_ENGINE_H
#define INFERD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/record.h"

#define ENGINE_TOPK_MAX MODEL_CLASSES

typedef struct engine_topk {
        int32_t cls;            /* class index, 0..999 */
        float score;            /* softmax probability */
} engine_topk_t;

typedef struct engine engine_t;

enum {
        ENGINE_SLOT_IDLE,       /* free to pack */
        ENGINE_SLOT_BUSY,       /* submitted, not yet reaped */
        ENGINE_SLOT_DONE,       /* results ready until the next submit */
};

typedef struct engine_ops {
        const char *name;       /* "cpu", "cuda" */
        int (*open)(engine_t *e, errbuf_t *err);        /* fills e->impl, carves the arena */
        void (*close)(engine_t *e);
        void *(*slot_input)(engine_t *e, int slot);     /* (max_batch, RECORD_MAX_BYTES) host staging */
        int (*submit)(engine_t *e, int slot, int n, errbuf_t *err);
        int (*reap)(engine_t *e, int *slot, errbuf_t *err);     /* 1 + slot, 0 none, -errno */
        const float *(*slot_logits)(engine_t *e, int slot);     /* (n, 1000) fp32 */
        const engine_topk_t *(*slot_topk)(engine_t *e, int slot);       /* (n, top_k) */
        int (*completion_fd)(engine_t *e);
} engine_ops_t;

struct engine {
        const engine_ops_t *ops;
        model_t *model;         /* borrowed; the CUDA engine drops its host weights after upload */
        plan_request_t request; /* what the plan was made from; an engine may re-plan with a measured context */
        plan_t plan;            /* copied at open; an engine's open may lower max_batch, never raise it */
        int device;             /* CUDA device ordinal */
        record_format_t *formats;       /* (depth, max_batch): the format of each packed record */
        int *slot_n;            /* (depth): records in the slot's current batch */
        unsigned char *slot_state;      /* (depth): ENGINE_SLOT_* */
        void *impl;
};

/* Options for engine_open. */
typedef struct engine_options {
        backend_t backend;      /* AUTO: CUDA when a device is present, else the CPU (with a warning in *warning) */
        precision_t precision;  /* AUTO: fp16 on CUDA, fp32 on the CPU */
        int device;             /* CUDA ordinal */
        const char *device_budget;      /* SIZE or PCT ("70%"); NULL = 70% */
        const char *host_budget;        /* SIZE; NULL = 2GiB */
        uint64_t device_memory_bytes;   /* 0 = ask the device (or the host's RAM for the CPU) */
        int max_batch;          /* cap, default 256 */
        int pipeline_depth;     /* >= 2, default 2 */
        int top_k;              /* 1..ENGINE_TOPK_MAX, default 5 */
        int decode_threads;     /* JPEG/PNG decode contexts to plan (src/decode); 0 = none */
        uint64_t decode_max_pixels;     /* their image limit ([decode] max_pixels) */
        uint64_t decode_input_bytes;    /* per context, a copy of the encoded input (inferd-run), or 0 */
} engine_options_t;

void engine_options_init(engine_options_t *o);

/* Resolves AUTO backend/precision, asks the device (or host) for its memory,
 * and makes the plan, without opening anything heavy. *warning receives a
 * sentence when AUTO fell back to the CPU (may be NULL). For --plan. */
int engine_plan(const model_t *m, const engine_options_t *o, plan_t *ret, char *warning, size_t warning_len,
                errbuf_t *err);

/* Plans (as engine_plan) and opens the chosen engine on m. m must hold
 * weights and outlive the engine. */
int engine_open(engine_t **ret, model_t *m, const engine_options_t *o, char *warning, size_t warning_len,
                errbuf_t *err);

/* NULL is a no-op. Waits for work in flight. */
void engine_free(engine_t *e);

const char *engine_backend(const engine_t *e);
precision_t engine_precision(const engine_t *e);
const plan_t *engine_plan_of(const engine_t *e);
int engine_slots(const engine_t *e);
int engine_max_batch(const engine_t *e);

/* Where record i of slot goes (RECORD_MAX_BYTES of host staging). The caller
 * copies the record's bytes and tells its format. */
void *engine_slot_record(engine_t *e, int slot, int i);
void engine_slot_set_format(engine_t *e, int slot, int i, record_format_t f);

/* Starts the batch of n records (1 <= n <= max_batch) packed in slot. */
int engine_submit(engine_t *e, int slot, int n, errbuf_t *err);

/* The fd that becomes readable when a submitted slot completes. */
int engine_completion_fd(engine_t *e);

/* Returns 1 and *slot for a completed slot (clearing the fd's readiness when
 * none is left), 0 when none has completed yet, or -errno (-EIO: the device
 * failed; the batch is lost and the engine is unusable). Never blocks. */
int engine_reap(engine_t *e, int *slot, errbuf_t *err);

/* Blocks until slot completes (poll on the completion fd, then reap). For
 * callers without an event loop, such as inferd-run. */
int engine_wait(engine_t *e, int slot, errbuf_t *err);

/* Results of a completed slot: logits (n, 1000) fp32, and top-k (n, top_k)
 * sorted by descending score. */
const float *engine_slot_logits(engine_t *e, int slot);
const engine_topk_t *engine_slot_topk(engine_t *e, int slot);

/* Backends, for engine.c. */
extern const engine_ops_t engine_cpu_ops;
int engine_cpu_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret);

/* The CUDA backend (cuda/ when built with nvcc; otherwise engine_cuda_none.c,
 * which reports that this build has no CUDA). */
extern const engine_ops_t engine_cuda_ops;
int engine_cuda_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret);
/* Number of usable CUDA devices (0 when none or no driver); fills the total
 * memory of `device` when there is one. Never fails loudly: a reason for 0
 * goes to why. */
int engine_cuda_probe(int device, uint64_t *total_bytes, char *why, size_t why_len);
/* Whether this build includes the CUDA engine. */
extern const int engine_cuda_built;

#endif

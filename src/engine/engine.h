/* engine: the interface that both executors of the plan implement.
 *
 * An engine is opened on a loaded model and a plan. It owns one arena of
 * plan->total_bytes (device memory for CUDA, host memory for the CPU) and the
 * host staging of plan->pipeline_depth slots, each holding up to
 * plan->max_batch records packed by format (engine/pack.h: an rgb8 record
 * takes its 150,528 bytes, a float32 one 602,112, and a slot holds
 * max_batch rgb8 records or fewer when float32 ones are among them). The
 * caller places raw records straight into a slot's input buffer
 * (engine_slot_place), submits the slot, and learns of its completion
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
#include "engine/pack.h"

#define ENGINE_TOPK_MAX 1000    /* and at most the model's classes */

typedef struct engine_topk {
        int32_t cls;            /* class index, 0..classes-1 */
        float score;            /* softmax probability */
} engine_topk_t;

/* A row without a prediction. When a row's logits have a non-finite max or
 * softmax sum (a NaN or an infinity: an fp16/bf16 overflow, or weights that
 * overflow), softmax would give NaN scores on classes 0..k-1, which look
 * plausible. Both engines instead mark such a row: every entry of its top-k
 * is { ENGINE_TOPK_NONFINITE, NaN }. Its logits are left as computed.
 * Callers test a row with engine_topk_is_finite() and refuse that record
 * (the daemon's DLQ code RECORD_ERR_NON_FINITE_OUTPUT). */
#define ENGINE_TOPK_NONFINITE (-1)

/* row: the k entries of one record's top-k. 0 when the row is marked. */
static inline int engine_topk_is_finite(const engine_topk_t *row) {
        return row[0].cls != ENGINE_TOPK_NONFINITE;
}

typedef struct engine engine_t;

enum {
        ENGINE_SLOT_IDLE,       /* free to pack */
        ENGINE_SLOT_BUSY,       /* submitted, not yet reaped */
        ENGINE_SLOT_DONE,       /* results ready until the next submit */
};

/* The device's memory as the driver sees it (engine_device_memory). */
typedef struct engine_device_memory {
        uint64_t used_bytes;    /* in use on the device, by every process */
        uint64_t total_bytes;   /* the device's capacity */
        uint64_t arena_bytes;   /* what this engine holds: its one arena */
} engine_device_memory_t;

typedef struct engine_ops {
        const char *name;       /* "cpu", "cuda" */
        int (*open)(engine_t *e, errbuf_t *err);        /* fills e->impl, carves the arena */
        void (*close)(engine_t *e);
        void *(*slot_input)(engine_t *e, int slot);     /* pack_capacity_bytes(max_batch) of host staging */
        int (*submit)(engine_t *e, int slot, int n, errbuf_t *err);
        int (*reap)(engine_t *e, int *slot, errbuf_t *err);     /* 1 + slot, 0 none, -errno */
        const float *(*slot_logits)(engine_t *e, int slot);     /* (n, classes) fp32 */
        const engine_topk_t *(*slot_topk)(engine_t *e, int slot);       /* (n, top_k) */
        const float *(*slot_embedding)(engine_t *e, int slot);  /* (n, embedding_dim) fp32; only planned */
        int (*completion_fd)(engine_t *e);
        /* A model swap in place (engine_swap_plan, engine_swap); NULL in an
         * executor that cannot swap. swap_fits: whether plan (made for next)
         * fits what open allocated; changes nothing. open sets e->held_*,
         * which the plan then charges. swap: e is idle; frees
         * e's weights, then puts next's in the same arena for plan. */
        int (*swap_fits)(const engine_t *e, const model_t *next, const plan_t *plan, errbuf_t *err);
        int (*swap)(engine_t *e, model_t *next, const plan_t *plan, errbuf_t *err);
        /* NULL for an engine without a device of its own (the CPU's). */
        int (*device_memory)(engine_t *e, engine_device_memory_t *ret, errbuf_t *err);
} engine_ops_t;

/* The CUDA engine's two experiment switches (cuda/README.md), never for
 * production. The caller decides; inferd, inferd-run and the GPU tests take
 * them from the operator's environment (engine_cuda_options_from_env). The
 * CPU engine ignores them. */
typedef struct engine_cuda_options {
        bool residual_kernel;   /* residual convs: the BIAS epilogue and an add-ReLU kernel, not C in cuBLASLt's
                                 * RELU_BIAS epilogue (INFERD_CUDA_RESIDUAL=kernel) */
        bool bias_precision;    /* fp16/bf16 conv biases in the precision, not fp32 (INFERD_CUDA_BIAS=precision) */
} engine_cuda_options_t;

struct engine {
        const engine_ops_t *ops;
        model_t *model;         /* borrowed; the CUDA engine drops its host weights after upload */
        plan_request_t request; /* what the plan was made from; an engine may re-plan with a measured context */
        plan_t plan;            /* copied at open; an engine's open may lower max_batch, never raise it */
        int device;             /* CUDA device ordinal */
        engine_cuda_options_t cuda;     /* the options' switches at open; a swap keeps them */
        /* What ops->open allocated and keeps until close, a model swap
         * included: its arena and its host staging (pinned on CUDA). A
         * swap's plan charges them (plan_request_t held_*). */
        uint64_t held_arena_bytes;
        uint64_t held_pinned_host_bytes;
        uint64_t held_decode_staging_bytes;     /* the plan's at open: the daemon's pipeline made them */
        uint64_t held_cache_bytes;      /* the plan's at open: the daemon's pipeline made its result cache */
        record_format_t *formats;       /* (depth, max_batch): the format of each packed record */
        uint64_t *offsets;      /* (depth, max_batch): where each record starts in the slot's input */
        pack_t *packs;          /* (depth): the packing of each slot's current batch */
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
        int decode_threads;     /* JPEG/PNG decode contexts to plan (src/decode); 0 = decode_threads_auto */
        int decode_threads_auto;        /* with decode_threads 0: as many as the host budget allows, up to
                                         * this (plan_decode_fit); both 0: no decoding planned */
        uint64_t host_reserve_bytes;    /* host budget kept free of pinned buffers and decoding (librdkafka) */
        uint64_t kafka_hold_us;         /* librdkafka's queue holds this long a hold's records (plan_request_t) */
        int kafka_hold_rate_per_s;      /* at this rate ([batching] max_images_per_s; 0: no cap) */
        int kafka_fetch_responses;      /* librdkafka's fetch responses at once ([kafka] brokers) */
        int kafka_compression_ratio;    /* the input's records decompress up to this ([kafka] max_compression_ratio) */
        uint64_t decode_max_pixels;     /* their image limit ([decode] max_pixels) */
        bool decode_running;            /* decode_threads and decode_max_pixels are the running pool's (a
                                         * model swap in place): see plan_request_t */
        uint64_t decode_input_bytes;    /* per context, a copy of the encoded input (inferd-run), or 0 */
        bool decode_staged;             /* the daemon's decode staging (plan_request_t) */
        engine_cuda_options_t cuda;     /* all off after engine_options_init */
        int cpu_threads;                /* the CPU engine's threads ([engine] threads); 0: OpenMP's default
                                         * (OMP_NUM_THREADS, else the CPUs the process may run on) */
        bool cpu_reference;             /* tests only: the CPU engine runs cpu_ops' reference convolutions
                                         * (im2col + OpenBLAS) instead of oneDNN's */
        bool cpu_no_bf16;               /* tests only: the CPU engine refuses bf16 as on a CPU without
                                         * AVX512_BF16 or AMX */
        bool cpu_keep_conv_weights;     /* tests only: the CPU engine leaves the model its folded conv
                                         * weights after its reorder (another engine opens on the same
                                         * model); the plan then charges them */
        bool embedding;                 /* each slot also gives its records' embeddings (engine_slot_embedding);
                                         * the plan counts their bytes */
        int cache_entries;              /* the daemon's result cache ([cache] entries; 0: none): the plan
                                         * counts it against the host budget (plan_request_t) */
} engine_options_t;

void engine_options_init(engine_options_t *o);
/* The switches as the environment sets them: residual_kernel when
 * INFERD_CUDA_RESIDUAL is "kernel", bias_precision when INFERD_CUDA_BIAS is
 * "precision"; any other value, or none, leaves a switch off. For the
 * callers' main paths; the engine itself never reads the environment. */
void engine_cuda_options_from_env(engine_cuda_options_t *o);

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
/* Allocates the host bookkeeping of e's slots (formats, offsets, counts,
 * states, packing) for e->plan: engine_open's, and that of any other
 * executor that builds an engine_t itself (the pipeline benchmark's).
 * engine_free frees it. */
int engine_slots_alloc(engine_t *e, errbuf_t *err);

const char *engine_backend(const engine_t *e);
precision_t engine_precision(const engine_t *e);
const plan_t *engine_plan_of(const engine_t *e);
int engine_slots(const engine_t *e);
int engine_max_batch(const engine_t *e);

/* Places record i of slot's batch, of format f (RECORD_RGB8 or
 * RECORD_F32_CHW), and returns where its pack_row_bytes(f) bytes go in the
 * slot's host staging; the caller copies them there. Records are packed in
 * the order placed: i == 0 starts a new batch, and any other i must be the
 * count placed so far. Returns NULL when the record does not fit (the slot
 * is full: submit it) or f is not runnable. */
void *engine_slot_place(engine_t *e, int slot, int i, record_format_t f);

/* Copies a record's len bytes to where engine_slot_place put it (dst),
 * as memcpy does, but with streaming stores from ENGINE_SLOT_COPY_STREAM_MIN
 * bytes: nothing on the copying thread reads the slot again (the device's
 * DMA or the engine's preprocessing does), so the slot's lines are neither
 * read first nor kept in the cache, which stays with the records still to
 * come. On the mock broker the consumer's broker thread, which decompresses
 * them, took 7% less CPU a record than beside memcpy (docs/perf.md, "Issue
 * 18 after the slots let their messages go..."). */
#define ENGINE_SLOT_COPY_STREAM_MIN 4096
void engine_slot_copy(void *dst, const void *src, size_t len);

/* Whether slot's batch can take one more record of either format (then
 * engine_slot_place cannot fail for it): fewer than max_batch placed, and
 * room for a float32 record. A caller filling a slot submits it once this
 * is false. */
int engine_slot_has_room(const engine_t *e, int slot);

/* The packed bytes of slot's first n records (what the CUDA engine copies
 * to the device). For the backends. */
uint64_t engine_slot_input_bytes(const engine_t *e, int slot, int n);

/* Starts the batch of the first n records placed in slot (1 <= n <=
 * max_batch). A slot may be submitted again without placing anew: its
 * records stay where they were placed until record 0 is placed again. */
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

/* Asks the driver for the device's memory (cudaMemGetInfo): a call into
 * the driver, cheap but not free, so the daemon samples it on a timer.
 * -EOPNOTSUPP for an engine without a device (the CPU engine); -EIO with
 * CUDA's sentence when the driver fails. */
int engine_device_memory(engine_t *e, engine_device_memory_t *ret, errbuf_t *err);

/* Results of a completed slot: logits (n, classes) fp32, and top-k (n, top_k)
 * sorted by descending score; a row whose logits are not finite is marked
 * (ENGINE_TOPK_NONFINITE above). */
const float *engine_slot_logits(engine_t *e, int slot);
const engine_topk_t *engine_slot_topk(engine_t *e, int slot);

/* The embeddings of a completed slot: (n, engine_embedding_dim) fp32, each
 * row the global average pool's output that feeds the fc (torchvision's
 * penultimate features, fc = Identity()), as computed: not normalised.
 * NULL when the engine was opened without engine_options_t embedding. */
const float *engine_slot_embedding(engine_t *e, int slot);
/* The embedding's length (model_embedding_dim of the model now running: a
 * swap may change it), or 0 when the engine gives none. */
int engine_embedding_dim(const engine_t *e);

/* A model swap in place: a reload that changes the weights file, the
 * precision or a budget, applied without a restart and without a second
 * weight set on the device.
 *
 * engine_swap_plan makes the plan that next and o give, as engine_open
 * would (same backend; the pipeline depth and top-k of e; the batch at most
 * e's, which its bookkeeping and its caller's batcher were sized for; the
 * decode contexts o names, which should be the ones the caller runs, with
 * decode_running: the engine knows nothing of them), and
 * checks that it fits what e allocated at open: the arena (device memory on
 * CUDA: nothing is allocated after open) and the host staging. Those stay
 * allocated whatever batch the new plan carves, so the plan charges them as
 * held (plan_request_t held_*: total_bytes counts the whole arena,
 * pinned_host_bytes the whole staging), and a budget that cannot hold them
 * is refused with a sentence that says so. It changes
 * nothing, so the caller can refuse the reload with *err (-ENOSPC: the
 * budget or the arena is too small; -EOPNOTSUPP: this executor cannot swap)
 * while e keeps serving.
 *
 * engine_swap then replaces e's weights with next's, for that plan. e must
 * be idle (no slot in flight: -EBUSY otherwise, and nothing changed). The
 * old weights are freed first (the CUDA engine overwrites its weights
 * region), then next's are put in the same arena, which is carved again for
 * the plan; the CUDA engine plans its GEMMs and captures its graphs again.
 * On success e->model is next (borrowed, as at open; the CUDA engine drops
 * next's host weights) and the caller may free the old model. Any other
 * failure leaves e without usable weights: the caller must free e (the
 * daemon exits, so that systemd restarts it on the file as configured).
 *
 * On the CPU engine the weights are the model's own host blocks: next,
 * loaded before engine_swap_plan, is the staged copy, and becomes the one
 * resident set once the caller frees the old model. */
int engine_swap_plan(const engine_t *e, const model_t *next, const engine_options_t *o, plan_t *ret,
                     errbuf_t *err);
int engine_swap(engine_t *e, model_t *next, const plan_t *plan, errbuf_t *err);

/* Backends, for engine.c. */
extern const engine_ops_t engine_cpu_ops;
int engine_cpu_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret);
/* 0 when the CPU engine computes in p here with options o: fp32 always,
 * bf16 where oneDNN has bf16 kernels (AVX512_BF16 or AMX; o->cpu_no_bf16,
 * a test's, hides them) and not on the reference; else -EOPNOTSUPP (bf16
 * on a CPU without them) or -EINVAL, with the sentence in err (may be NULL). */
int engine_cpu_precision_check(precision_t p, const engine_options_t *o, errbuf_t *err);

/* The CUDA backend (cuda/ when built with nvcc; otherwise engine_cuda_none.c,
 * which reports that this build has no CUDA). */
extern const engine_ops_t engine_cuda_ops;
int engine_cuda_plan_terms(const model_t *m, const plan_request_t *req, int batch, plan_engine_terms_t *ret);
/* Number of usable CUDA devices (0 when none or no driver); fills the total
 * memory of `device` when there is one. Never fails loudly: a reason for 0
 * goes to why. */
int engine_cuda_probe(int device, uint64_t *total_bytes, char *why, size_t why_len);
/* The PCI bus id of CUDA device `device` ("0000:19:00.0"), which names the
 * same device to NVML; no context is created. -ENODEV with the reason. */
int engine_cuda_pci_bus_id(int device, char *buf, size_t len, errbuf_t *err);
/* The device's name and memory through cudaMemGetInfo. This creates the
 * device's primary context (device memory of its own), so devinfo uses it
 * only when NVML is absent. -ENODEV or -EIO with the reason. */
int engine_cuda_device_memory(int device, char *name, size_t name_len, uint64_t *total_bytes, uint64_t *free_bytes,
                              errbuf_t *err);
/* Whether this build includes the CUDA engine. */
extern const int engine_cuda_built;

#endif

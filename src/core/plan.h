/* plan: the memory planner.
 *
 * Every device byte and every pinned host byte is decided here, before the
 * first record is read. The inputs are the model's layer table, the engine,
 * the precision, the device's memory and the budget, the pipeline depth and
 * the record size; the outputs are the terms below and the largest batch that
 * fits. An engine then allocates exactly plan->total_bytes on its device (one
 * arena) and plan->pinned_host_bytes of host staging, and carves every buffer
 * from them at the offsets given here. Nothing is allocated after that.
 *
 * A model swap in place (engine_swap_plan) keeps that arena and that staging
 * as allocated at open, whatever batch the new plan carves from them: its
 * request names them (held_arena_bytes, held_pinned_host_bytes), and the
 * plan charges what is held, never less (arena_kept_bytes, and
 * pinned_host_bytes at least the held staging), so a budget below what the
 * process really holds is refused instead of planned around.
 *
 * Activation memory comes from buffer liveness: tensors whose lifetimes (from
 * the op that writes them to the last op that reads them) do not overlap
 * share bytes. Offsets are per sample; a batch of B places every tensor at
 * B * offset, which is valid because every tensor scales with the batch.
 *
 * The engine-specific terms (workspaces, CUDA context and graphs, device
 * staging) come from a plan_terms_fn that each engine provides, so the
 * planner itself knows no engine. It allocates nothing but the plan. */
#ifndef INFERD_PLAN_H
#define INFERD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/model.h"

typedef enum backend {
        BACKEND_AUTO,
        BACKEND_CPU,
        BACKEND_CUDA,
} backend_t;

typedef enum precision {
        PRECISION_AUTO,         /* fp16 on CUDA, fp32 on the CPU */
        PRECISION_FP32,
        PRECISION_FP16,
        PRECISION_BF16,
} precision_t;

/* "auto", "cpu", "cuda"; "auto", "fp32", "fp16", "bf16". */
const char *backend_name(backend_t b);
const char *precision_name(precision_t p);
int backend_from_string(const char *s, backend_t *ret);
int precision_from_string(const char *s, precision_t *ret);
/* Bytes per activation or weight element: 4 for fp32, 2 for fp16 and bf16. */
size_t precision_bytes(precision_t p);

/* The engine's own terms at batch size `batch`. Each is in bytes on the
 * device (host memory for the CPU engine), except pinned_host_bytes. */
typedef struct plan_engine_terms {
        uint64_t context_bytes;         /* CUDA context and libraries; on the CPU, oneDNN's JIT kernels
                                         * (host memory: cpu_dnnl_sizes) */
        uint64_t graph_bytes;           /* captured CUDA graphs for every batch bucket */
        uint64_t workspace_bytes;       /* im2col / GEMM / top-k scratch */
        uint64_t staging_bytes;         /* device-side input and output buffers of all slots */
        uint64_t pinned_host_bytes;     /* host input and output buffers of all slots */
        bool weights_in_arena;          /* the weights are carved from the engine's one arena (CUDA), not
                                         * kept in the model's own blocks (the CPU): the arena is then
                                         * weights + activations + workspace + staging, else without the
                                         * weights (plan_arena_bytes) */
        /* Elements per sample of the largest single GEMM operand the engine
         * forms with the batch folded into its rows (the CUDA engine: conv1's
         * im2col matrix). The planner keeps operand * batch below
         * PLAN_OPERAND_ELEMS_LIMIT. 0: no operand grows with the batch that
         * way (the CPU engine runs its im2col in bounded chunks). */
        uint64_t gemm_operand_elems_per_sample;
        /* A second copy of the weights the engine keeps beside the model's
         * blocks (the CPU engine's weights reordered for oneDNN): part of
         * the plan's weights term. */
        uint64_t weights_copy_bytes;
        /* The engine writes a residual conv's output over its residual
         * input where that input dies there (plan_residual_in_place; the
         * CPU engine's oneDNN convs, whose sum post-op reads the output):
         * the planner places the two at one offset. */
        bool residual_in_place;
        /* The slots' embedding outputs (plan_request_t embedding): (batch,
         * dim) fp32 a slot, in the pinned host bytes (and on the CUDA
         * engine in its staging too); counted there, shown apart. */
        uint64_t embedding_bytes;
} plan_engine_terms_t;

/* The host buffers of one decode context (src/decode carves them from these
 * sizes, once; nothing is allocated per record). An encoded image of up to
 * max_pixels is decoded whole, then resized and cropped to 224x224 RGB8. */
#define PLAN_DECODE_MAX_SIDE 65535      /* longer sides are refused: JPEG's own bound, and absurd for PNG */
#define PLAN_DECODE_OUT_SIDE 224        /* CenterCrop(224) */
#define PLAN_DECODE_RESIZE_SIDE 256     /* Resize(256), the shorter side */
typedef struct plan_decode_terms {
        uint64_t pixel_bytes;           /* the decoded image: max_pixels x 4 bytes (CMYK is the widest kept) */
        uint64_t resize_rows;           /* rows of the horizontal pass kept for the vertical one */
        uint64_t resize_taps;           /* filter taps per output pixel, at most */
        uint64_t resize_bytes;          /* those rows (224 x rows x 3) and both coefficient tables */
        uint64_t input_bytes;           /* a copy of the encoded record (max_bytes), only for callers that read files */
        uint64_t buffer_bytes;          /* the sum of the above: what a context allocates, once */
        uint64_t library_bytes;         /* a bound on what libjpeg / libspng allocate for themselves per image
                                         * (progressive JPEG keeps every coefficient: 2 bytes per sample) */
} plan_decode_terms_t;

/* The buffers of one decode context for images of at most max_pixels, with
 * a copy of the encoded input when input_bytes > 0. Returns 0, or -EINVAL
 * when max_pixels is 0. */
int plan_decode_terms(uint64_t max_pixels, uint64_t input_bytes, plan_decode_terms_t *ret);

/* librdkafka's floors, whatever the budget leaves: a consumer queue that
 * holds a float32 record, and a producer queue above its default
 * message.max.bytes (1,000,000), so that the largest DLQ copy fits an
 * empty queue. The fetch responses' floor depends on their shape
 * (plan_kafka_fetch_min_bytes); plan_kafka_min_bytes is the three floors'
 * sum. */
#define PLAN_KAFKA_QUEUE_MIN_BYTES ((uint64_t)4 << 20)
#define PLAN_KAFKA_PRODUCER_MIN_BYTES ((uint64_t)4 << 20)
/* A record batch as a broker stores it, at most (Kafka's default
 * max.message.bytes, 1 MiB + 12): a fetch response carries at least one
 * batch even past fetch.max.bytes (KIP-74), so no wire limit below it
 * bounds a response. */
#define PLAN_KAFKA_FETCH_WIRE_MIN_BYTES ((uint64_t)1048588)
/* fetch.max.bytes's largest planned value. */
#define PLAN_KAFKA_FETCH_WIRE_MAX_BYTES ((uint64_t)256 << 20)
/* The defaults of the fetch responses' shape without a config (tests,
 * tools): one broker, records that do not compress. */
#define PLAN_KAFKA_FETCH_RESPONSES_DEFAULT 1
#define PLAN_KAFKA_COMPRESSION_RATIO_DEFAULT 1

/* What librdkafka's fetch responses may hold at once: it fetches from every
 * broker that leads an assigned partition in parallel (`responses`), and
 * decompresses each response whole into its queue as it arrives, whatever
 * the queue holds: a response of W bytes on the wire takes W (the response)
 * + ratio x W (its records, decompressed) while it is read. The plan's
 * fetch term is responses x (1 + ratio) x fetch.max.bytes. */
static inline uint64_t plan_kafka_fetch_scale(int responses, int ratio) {
        return (uint64_t)(responses > 0 ? responses : 1) * (uint64_t)(1 + (ratio > 0 ? ratio : 1));
}
static inline uint64_t plan_kafka_fetch_min_bytes(int responses, int ratio) {
        return plan_kafka_fetch_scale(responses, ratio) * PLAN_KAFKA_FETCH_WIRE_MIN_BYTES;
}
static inline uint64_t plan_kafka_min_bytes(int responses, int ratio) {
        return PLAN_KAFKA_QUEUE_MIN_BYTES + plan_kafka_fetch_min_bytes(responses, ratio) +
               PLAN_KAFKA_PRODUCER_MIN_BYTES;
}
/* queued.max.messages.kbytes's largest value (librdkafka's 2097151 KiB). */
#define PLAN_KAFKA_QUEUE_MAX_BYTES ((uint64_t)2097151 << 10)

/* The records librdkafka's consumer queue must hold for a hold of hold_us:
 * the planned intake rate over the hold when there is a cap (rate_per_s),
 * and in any case one full batch for every slot, which the slots take at
 * once when they free (without a cap the engine's rate is not planned: the
 * plan cannot know it, so the slots' refill is the rate it plans). */
uint64_t plan_kafka_hold_records(uint64_t hold_us, int rate_per_s, int pipeline_depth, int batch);

/* Splits the host bytes left for librdkafka (rest_bytes): half for the
 * consumer queue (at least PLAN_KAFKA_QUEUE_MIN_BYTES, at most 1 GiB),
 * and at least hold_bytes (up to PLAN_KAFKA_QUEUE_MAX_BYTES); what is left
 * of it, half for the fetch responses of the given shape (fetch_scale,
 * plan_kafka_fetch_scale: *fetch_wire_bytes, fetch.max.bytes, is the term
 * over it, between PLAN_KAFKA_FETCH_WIRE_MIN_BYTES and _MAX_BYTES) and half
 * for the producer's queue (at most 1 GiB); each at least its floor. The
 * three stay within rest_bytes whenever rest_bytes >= hold_bytes + the fetch
 * and producer floors. */
void plan_kafka_split(uint64_t rest_bytes, uint64_t hold_bytes, uint64_t fetch_scale, uint64_t *queue_bytes,
                      uint64_t *fetch_bytes, uint64_t *fetch_wire_bytes, uint64_t *producer_bytes);

/* What decided the number of decode contexts. */
typedef enum plan_decode_limit {
        PLAN_DECODE_LIMIT_NONE,         /* no decoding planned */
        PLAN_DECODE_LIMIT_THREADS,      /* an explicit count ([decode] threads) */
        PLAN_DECODE_LIMIT_CORES,        /* automatic: the cores minus one */
        PLAN_DECODE_LIMIT_BUDGET,       /* automatic: the host budget's share (at least 1) */
        PLAN_DECODE_LIMIT_RUNNING,      /* the running pool's, kept by a model swap in place (the pool is
                                         * made at start and never resized) */
} plan_decode_limit_t;

/* "none", "threads", "cores", "budget", "running". */
const char *plan_decode_limit_name(plan_decode_limit_t l);

/* The host budget's rule for decode contexts. host_left_bytes is what the
 * host budget leaves after the pinned buffers; reserve_bytes must stay free
 * of decoding (librdkafka's floor); each context costs per_thread_bytes.
 *   threads > 0: exactly that many, when threads * per_thread_bytes +
 *     reserve_bytes <= host_left_bytes;
 *   threads == 0 (automatic): up to auto_max contexts, taking at most half
 *     of host_left_bytes (so that librdkafka keeps the other half for
 *     prefetching), and 1 whenever 1 fits beside the reserve.
 * Returns 0 with *ret_threads and *ret_limit set, or -ENOSPC when not even
 * the contexts asked for (1 when automatic) fit. */
int plan_decode_fit(uint64_t host_left_bytes, uint64_t reserve_bytes, int threads, int auto_max,
                    uint64_t per_thread_bytes, int *ret_threads, plan_decode_limit_t *ret_limit);

/* The sentence of plan_decode_fit's -ENOSPC, naming the numbers and the keys
 * to change (the pinned buffers and the decode staging only when
 * pinned_bytes > 0: --check-config knows neither). Returns -ENOSPC. */
int plan_decode_refuse(errbuf_t *err, uint64_t host_budget_bytes, uint64_t pinned_bytes, uint64_t staging_bytes,
                       uint64_t reserve_bytes, int threads, uint64_t max_pixels, uint64_t per_thread_bytes);

/* The sentence when a budget cannot hold the decode contexts that already
 * run (a model swap's plan: PLAN_DECODE_LIMIT_RUNNING): they stay until a
 * restart whatever the file says, so only the budget can change. Returns
 * -ENOSPC. */
int plan_decode_refuse_running(errbuf_t *err, uint64_t host_budget_bytes, uint64_t pinned_bytes,
                               uint64_t staging_bytes, uint64_t reserve_bytes, int threads, uint64_t max_pixels,
                               uint64_t per_thread_bytes);

/* No GEMM operand of a planned batch reaches this many elements: 2^31, where
 * 32-bit element indices and counts (cuBLASLt's kernels, grid arithmetic)
 * stop being safe. The planner caps the batch below it rather than
 * splitting that GEMM. */
#define PLAN_OPERAND_ELEMS_LIMIT ((uint64_t)1 << 31)

/* What decided a plan's max_batch. */
typedef enum plan_limit {
        PLAN_LIMIT_MAX_BATCH,           /* the request's max_batch (config [memory] max_batch) */
        PLAN_LIMIT_BUDGET,              /* the device (or host) budget: one more sample does not fit */
        PLAN_LIMIT_OPERAND,             /* one more sample takes a GEMM operand to PLAN_OPERAND_ELEMS_LIMIT */
} plan_limit_t;

/* "max_batch", "budget", "operand". */
const char *plan_limit_name(plan_limit_t l);

struct plan_request;
typedef int (*plan_terms_fn)(const model_t *m, const struct plan_request *req, int batch,
                             plan_engine_terms_t *ret);

typedef struct plan_request {
        backend_t backend;              /* CPU or CUDA (AUTO resolved by the caller) */
        precision_t precision;          /* resolved, never AUTO */
        uint64_t device_memory_bytes;   /* capacity of the device (host RAM for the CPU engine) */
        uint64_t budget_bytes;          /* what the plan may use of it */
        uint64_t host_budget_bytes;     /* what the pinned host buffers may use */
        int pipeline_depth;             /* batches in flight, >= 2 */
        size_t record_bytes;            /* the largest input record accepted */
        int max_batch;                  /* upper bound on the batch (config [memory] max_batch) */
        int top_k;
        uint64_t measured_context_bytes; /* CUDA: measured after device init; 0 = use the estimate */
        plan_terms_fn terms;            /* the engine's terms */
        int decode_threads;             /* exactly this many decode contexts; 0: see decode_threads_auto */
        int decode_threads_auto;        /* with decode_threads 0: as many as the host budget's rule allows
                                         * (plan_decode_fit), up to this many; 0 and 0: no decoding planned */
        uint64_t decode_max_pixels;     /* [decode] max_pixels */
        bool decode_running;            /* decode_threads (> 0) and decode_max_pixels are a running pool's
                                         * (a model swap in place): charged as they are, and a refusal
                                         * says so (PLAN_DECODE_LIMIT_RUNNING) */
        uint64_t decode_input_bytes;    /* per context: a copy of the encoded record (inferd-run), or 0 */
        bool decode_staged;             /* with decoding: the daemon's staging, one decoded 224x224 RGB8
                                         * image per slot position (pipeline_depth x batch), where records
                                         * wait between their decode and their slot (pipeline_decode.c) */
        uint64_t host_reserve_bytes;    /* host bytes that neither the pinned buffers nor decoding may take
                                         * (the daemon: librdkafka's floor; inferd-run: 0) */
        /* librdkafka's consumer queue holds the records the daemon leaves
         * in it while its pipeline is full (the hold: PIPELINE_HOLD_MAX_US
         * before fetching pauses): see plan_kafka_hold_records. 0: no
         * Kafka (inferd-run). */
        uint64_t kafka_hold_us;
        int kafka_hold_rate_per_s;      /* [batching] max_images_per_s; 0: no cap */
        /* The fetch responses' shape (plan_kafka_fetch_scale): responses
         * at once ([kafka] brokers' addresses) and the most the input's
         * records compress ([kafka] max_compression_ratio); 0: 1. */
        int kafka_fetch_responses;
        int kafka_compression_ratio;
        /* What the running engine allocated at open and a model swap in
         * place keeps (engine_swap_plan); 0 for a plan made for an open.
         * The plan charges at least these, whatever its batch carves. */
        uint64_t held_arena_bytes;      /* its one arena (device memory; host memory for the CPU engine) */
        uint64_t held_pinned_host_bytes; /* its host staging of every slot */
        uint64_t held_decode_staging_bytes; /* the pipeline's decode staging, made at start */
        bool cpu_reference;             /* the CPU engine runs cpu_ops' reference convolutions, not oneDNN's
                                         * (tests only; engine_options_t) */
        bool cpu_keep_conv_weights;     /* the CPU engine leaves the model its folded conv weights
                                         * (tests only; engine_options_t) */
        int cpu_threads;                /* the CPU engine's threads ([engine] threads); 0: OpenMP's default */
        bool embedding;                 /* the engine gives each record's embedding too (the pooled
                                         * features, model_embedding_dim fp32): [output] kind */
        int cache_entries;              /* the daemon's result cache ([cache] entries; 0: none): host memory,
                                         * plan_cache_bytes at this top_k and embedding */
        uint64_t held_cache_bytes;      /* a model swap's plan: the cache made at start, kept whole */
} plan_request_t;

typedef struct plan {
        char model[MODEL_ARCH_MAX];     /* the planned model's architecture: "resnet50" */
        int classes;                    /* its logits per sample */
        backend_t backend;
        precision_t precision;
        int max_batch;                  /* the largest batch that fits */
        plan_limit_t limit;             /* what decided max_batch (plan_make; MAX_BATCH from plan_at_batch) */
        int operand_batch_cap;          /* the largest batch whose GEMM operands stay below
                                         * PLAN_OPERAND_ELEMS_LIMIT; 0: no such cap */
        int pipeline_depth;
        int top_k;
        int embedding_dim;              /* the request's embedding: model_embedding_dim; 0 when not planned */
        size_t record_bytes;
        uint64_t device_memory_bytes;
        uint64_t budget_bytes;
        uint64_t host_budget_bytes;
        uint64_t weights_bytes;         /* counted once */
        uint64_t activation_bytes_per_sample;
        uint64_t activation_bytes;      /* per sample * max_batch */
        plan_engine_terms_t engine;     /* at max_batch */
        uint64_t workspace_bytes;       /* == engine.workspace_bytes */
        uint64_t pinned_host_bytes;     /* charged against the host budget: engine.pinned_host_bytes (what
                                         * this batch carves), or held_pinned_host_bytes when more is held */
        uint64_t total_bytes;           /* device: context + graphs + weights + activations + workspace + staging
                                         * + arena_kept_bytes */
        /* A model swap's plan (the request's held_*; 0 otherwise): the
         * arena and the staging allocated at open, which the swap keeps,
         * and the part of that arena this plan's batch does not carve,
         * charged in total_bytes all the same. */
        uint64_t held_arena_bytes;
        uint64_t held_pinned_host_bytes;
        uint64_t arena_kept_bytes;      /* held_arena_bytes - plan_arena_bytes(), when positive */
        /* Host (pageable) memory of the decode contexts: not device memory,
         * so outside the device budget, but charged against the host
         * budget beside the pinned buffers (plan_decode_fit). */
        int decode_threads;
        plan_decode_limit_t decode_limit; /* what decided decode_threads */
        uint64_t decode_max_pixels;
        plan_decode_terms_t decode;     /* per context */
        uint64_t decode_staging_bytes;  /* with decode_staged: pipeline_depth x batch RGB8 images (or the
                                         * held ones, when more), else 0 */
        uint64_t decode_host_bytes;     /* decode_threads x (buffer_bytes + library_bytes) + decode_staging_bytes */
        /* The result cache (pipeline/cache.h): host (pageable) memory,
         * charged against the host budget beside the pinned buffers and
         * decoding; plan_cache_bytes, or the cache held since start when
         * more (a model swap's plan). */
        int cache_entries;
        uint64_t cache_bytes;
        uint64_t host_reserve_bytes;    /* the request's */
        uint64_t host_rest_bytes;       /* host budget - pinned - decode - cache: what is left (the daemon
                                         * gives it to librdkafka's queues) */
        /* librdkafka's share of host_rest_bytes (plan_kafka_split): its
         * consumer queue (queued.max.messages.kbytes), the fetch responses
         * it reads at once, decompressed (fetch.max.bytes times the scale
         * of plan_kafka_fetch_scale) and its producer queue
         * (queue.buffering.max.kbytes). The queue holds at least the hold's
         * records; host_reserve_bytes is raised so that it can. */
        uint64_t kafka_hold_us;         /* the request's */
        uint64_t kafka_hold_records;    /* plan_kafka_hold_records; 0 without Kafka */
        uint64_t kafka_hold_bytes;      /* kafka_hold_records * record_bytes */
        uint64_t kafka_queue_bytes, kafka_fetch_bytes, kafka_producer_bytes;
        int kafka_fetch_responses, kafka_compression_ratio; /* the request's, at least 1 */
        uint64_t kafka_fetch_wire_bytes; /* fetch.max.bytes: kafka_fetch_bytes over the shape's scale */
        /* Liveness result: per-sample element offset of each activation tensor
         * in the activation arena, and the arena's size in elements. */
        size_t tensor_offset[MODEL_MAX_TENSORS];
        size_t arena_elems_per_sample;
} plan_t;

/* The result cache's bytes per entry beside its value: the key (a SHA-256)
 * and four int32 links (pipeline/cache.h, CACHE_ENTRY_OVERHEAD_BYTES); and
 * per class of a value's top-k, a class index and its score (engine_topk_t). */
#define PLAN_CACHE_ENTRY_BYTES 48
#define PLAN_CACHE_CLASS_BYTES 8

/* The result cache of entries records' results (0: none): each a key, its
 * links, top_k classes and, with embedding_dim, the fp32 embedding. */
uint64_t plan_cache_bytes(int entries, int top_k, int embedding_dim);

/* Places every activation tensor of m by liveness. Returns the per-sample
 * arena size in elements; offsets[] receives each tensor's element offset.
 * With residual_in_place, each op that plan_residual_in_place names has its
 * output at its residual input's offset; without, no two tensors live at
 * once share bytes (the CUDA engine's layout). */
size_t plan_place_tensors(const model_t *m, bool residual_in_place, size_t offsets[MODEL_MAX_TENSORS]);

/* Whether op op_index of m is a conv whose residual input is read by no
 * later op and is not its own input, so that its output may take the
 * residual's bytes. */
int plan_residual_in_place(const model_t *m, int op_index);

/* Alignment, in elements, of every activation tensor's per-sample offset,
 * and in bytes of every weight and bias block: vector loads and cuBLASLt
 * want aligned pointers, and the padding is part of the plan. */
#define PLAN_TENSOR_ALIGN_ELEMS 128
#define PLAN_WEIGHT_ALIGN_BYTES 256

/* Lays out the weights of m in precision p: for each conv/fc op i in table
 * order, its weight block (cout, kh, kw, cin) in p at w_offset[i] and its fp32
 * bias (cout) at b_offset[i], both aligned to PLAN_WEIGHT_ALIGN_BYTES (other
 * ops get 0). Returns the total bytes: the plan's weights_bytes. Either
 * array may be NULL. The CPU engine keeps fp32 weights in the model's own
 * blocks; the CUDA engine uploads into exactly this layout. */
uint64_t plan_weight_layout(const model_t *m, precision_t p, size_t w_offset[MODEL_MAX_OPS],
                            size_t b_offset[MODEL_MAX_OPS]);

/* The bytes of the model's own folded fp32 blocks that the CPU engine keeps
 * beside its reordered copy (plan_engine_terms_t weights_copy_bytes), laid
 * out as plan_weight_layout does: every bias and the fc's weights, and the
 * convs' weights too when convs (the reference reads them, or a test keeps
 * them: model_drop_conv_weights frees them otherwise). */
uint64_t plan_cpu_model_weight_bytes(const model_t *m, bool convs);

/* The engine's one arena as this plan carves it: activations, workspace and
 * staging, and the weights when engine.weights_in_arena. Without
 * arena_kept_bytes: a swap's held arena is at least this. */
uint64_t plan_arena_bytes(const plan_t *p);

/* The device total for a given batch (the quantity plan_make bounds). */
int plan_at_batch(const model_t *m, const plan_request_t *req, int batch, plan_t *ret);

/* Finds the largest batch <= req->max_batch whose device total fits
 * req->budget_bytes, whose pinned host bytes, with the decode contexts and
 * req->host_reserve_bytes, fit req->host_budget_bytes (automatic decode
 * contexts count as one there, then take their share of what the batch
 * leaves: plan_decode_fit), and
 * whose largest GEMM operand stays below PLAN_OPERAND_ELEMS_LIMIT (the
 * plan's limit and operand_batch_cap say which bound decided).
 * With req->held_* (a model swap's plan), every batch is charged at least
 * the arena and the staging held, so the search cannot get under the budget
 * by carving less of them.
 * When not even one sample fits, returns -ENOSPC with a sentence that names
 * the term that did not fit (for held buffers: that they are held since
 * start, and that a larger budget or a restart is the way out). */
int plan_make(const model_t *m, const plan_request_t *req, plan_t *ret, errbuf_t *err);

/* Writes the plan as one JSON object on one line (the keys of the design:
 * max_batch, weights_bytes, activation_bytes_per_sample, workspace_bytes,
 * pinned_host_bytes, total_bytes, budget_bytes, and the rest). */
int plan_write_json(const plan_t *p, FILE *out);
/* Writes a human-readable table. */
int plan_write_text(const plan_t *p, FILE *out);

#endif

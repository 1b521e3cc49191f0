/* cfg_table: the table of the INI file's keys, one row a key, and the
 * apply hooks of the live ones. See cfg_table.h.
 *
 * Each row says its reload class: RESTART (logged on SIGHUP, not applied),
 * LIVE (its .apply hook hands the new value to the running daemon's setter,
 * cfg_live_ops_t) or SWAP (taken by a model swap in place; [model]
 * precision's hook applies it without one when the engine ignores it). The
 * [decode] defaults are decode.h's macros, as text. Parsing, diffing and
 * printing the rows is cfg.c's job. */
#include "config/cfg_table.h"

#include <string.h>

#include "decode/decode.h"

/* --- the apply hooks: next's value to the setter that applies it ---------------- */

static int cfg_apply_log_level(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_log_level(o->userdata, next->service.log_level, why);
}

static int cfg_apply_top_k(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_top_k(o->userdata, next->service.top_k, why);
}

/* [service] trace_headers and timing_header: one setter takes both. */
static int cfg_apply_headers(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_headers(o->userdata, next->service.trace_headers, next->service.timing_header, why);
}

static int cfg_apply_max_batch(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_max_batch(o->userdata, next->memory.max_batch, why);
}

static int cfg_apply_max_delay_ms(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_max_delay_ms(o->userdata, next->batching.max_delay_ms, why);
}

static int cfg_apply_max_images_per_s(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_max_images_per_s(o->userdata, next->batching.max_images_per_s, why);
}

/* [batching] max_record_age and max_record_age_action: one setter takes both. */
static int cfg_apply_max_record_age(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_max_record_age(o->userdata, next->batching.max_record_age_ms,
                                     next->batching.max_record_age_action, why);
}

static int cfg_apply_cache_entries(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_cache_entries(o->userdata, next->cache.entries, why);
}

/* A SWAP key's hook: -EAGAIN from the setter means "swap". */
static int cfg_apply_precision(const cfg_live_ops_t *o, const cfg_t *next, errbuf_t *why) {
        return o->set_precision(o->userdata, next->model.precision, why);
}

/* --- the table ------------------------------------------------------------------ */

#define F(f) .offset = offsetof(cfg_t, f), .size = sizeof(((cfg_t *)0)->f)
#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)
#define TiB ((int64_t)1 << 40)
/* A macro's value as a default text: CFG_STR(DECODE_DEFAULT_MAX_PIXELS). */
#define CFG_STR_(x) #x
#define CFG_STR(x) CFG_STR_(x)

const cfg_key_t cfg_keys[] = {
        {
                .section = "service", .name = "instance", .type = CFG_T_STRING, .def = "default",
                .reload = CFG_RELOAD_RESTART, F(service.instance),
                .description = "Instance name (the colour, e.g. blue), copied into every prediction and log line.",
        },
        {
                .section = "service", .name = "trace_headers", .type = CFG_T_BOOL, .def = "yes",
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_headers, F(service.trace_headers),
                .description = "Copy the W3C trace context headers (traceparent, tracestate) of an input record to its prediction, as correlation-id always is; bounded as the spec allows (an invalid traceparent is not copied, nor a tracestate after it; a tracestate is cut to 32 members and 512 characters; a correlation-id to 1,024 bytes), each cut named in inferd-header-cut. (A DLQ copy keeps every header of its record, these too, whatever this says.)",
        },
        {
                .section = "service", .name = "timing_header", .type = CFG_T_BOOL, .def = "no",
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_headers, F(service.timing_header),
                .description = "Add an inferd-timing header to every prediction: the record's milliseconds in each stage, queue=...;decode=...;batch_wait=...;engine=...;produce=... (produce: from the engine's results to the hand-over to the producer).",
        },
        {
                .section = "service", .name = "log_level", .type = CFG_T_LOG_LEVEL, .def = "info",
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_log_level, F(service.log_level),
                .description = "Least severe message logged.",
        },
        {
                .section = "service", .name = "top_k", .type = CFG_T_INT, .def = "5", .min = 1, .max = 1000,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_top_k, F(service.top_k),
                .description = "Classes per prediction, most probable first; at most the model's class count (more is refused at start and on reload).",
        },

        {
                .section = "kafka", .name = "brokers", .type = CFG_T_BROKERS, .def = "localhost:9092",
                .reload = CFG_RELOAD_RESTART, F(kafka.brokers),
                .description = "Bootstrap servers, host:port[,host:port...].",
        },
        {
                .section = "kafka", .name = "group_id", .type = CFG_T_STRING, .def = "inferd",
                .reload = CFG_RELOAD_RESTART, F(kafka.group_id),
                .description = "Consumer group; instances in one group share the input partitions.",
        },
        {
                .section = "kafka", .name = "input_topic", .type = CFG_T_TOPIC, .def = "images",
                .reload = CFG_RELOAD_RESTART, F(kafka.input_topic),
                .description = "Topic the images are read from.",
        },
        {
                .section = "kafka", .name = "output_topic", .type = CFG_T_TOPIC, .def = "predictions",
                .reload = CFG_RELOAD_RESTART, F(kafka.output_topic),
                .description = "Topic the predictions are written to (one per input record, same key).",
        },
        {
                .section = "kafka", .name = "dlq_topic", .type = CFG_T_TOPIC, .def = "images.dlq",
                .reload = CFG_RELOAD_RESTART, F(kafka.dlq_topic),
                .description = "Dead-letter topic for records that cannot be classified, with inferd-error headers.",
        },
        {
                .section = "kafka", .name = "static_membership", .type = CFG_T_BOOL, .def = "no",
                .reload = CFG_RELOAD_RESTART, F(kafka.static_membership),
                .description = "yes sets group.instance.id to <group_id>-<instance>: a restart within session.timeout.ms "
                        "keeps the partitions without a rebalance.",
        },
        {
                .section = "kafka", .name = "delivery", .type = CFG_T_DELIVERY, .def = "at-least-once",
                .reload = CFG_RELOAD_RESTART, F(kafka.delivery),
                .description = "exactly-once puts each batch's predictions, DLQ copies and consumed offsets in one Kafka "
                        "transaction (transactional.id <group_id>-<instance>-<input_topic>), so a read_committed "
                        "consumer sees each input once.",
        },
        {
                .section = "kafka", .name = "transaction_max_ms", .type = CFG_T_INT, .def = "500",
                .min = 0, .max = 60000,                 .reload = CFG_RELOAD_RESTART, F(kafka.transaction_max_ms),
                .description = "exactly-once: a transaction gathers the batches completed within this long, then commits "
                        "(0: one transaction per batch). A read_committed consumer sees a prediction up to this long "
                        "after it is made, plus the commit; each commit closes the intake until what is in flight "
                        "is acknowledged.",
        },
        {
                .section = "kafka", .name = "max_compression_ratio", .type = CFG_T_INT, .def = "8",
                .min = 1, .max = 1000,                  .reload = CFG_RELOAD_RESTART, F(kafka.max_compression_ratio),
                .description = "The most that the input topic's record batches compress on the wire (their records' "
                        "bytes over their bytes in a fetch). librdkafka decompresses each fetch response whole as it "
                        "arrives, from every broker that leads an assigned partition at once, so the plan's fetch term "
                        "is (the addresses in brokers) x (1 + this) x fetch.max.bytes, and fetch.max.bytes is that "
                        "term's share over the product, at least 1MiB (inferd --plan shows them). Photographs as RGB8 "
                        "or float32 compress about 1.5-3:1, JPEG and PNG records 1:1; synthetic or blank images far "
                        "more. The daemon measures the ratio (librdkafka's statistics: with [metrics] listen set, the default) and says so in its log when "
                        "the input passes it, or when more brokers lead its partitions than brokers lists.",
        },

        {
                .section = "model", .name = "weights", .type = CFG_T_PATH,
                .reload = CFG_RELOAD_SWAP, F(model.weights),
                .description = "A torchvision ResNet's safetensors file (state_dict names; F32, F16 or BF16): resnet18, 34, 50, 101, 152, wide_resnet50_2 or 101_2, any class count, detected from the file. On reload, a new file is swapped in place (validated first, never two weight sets on the device), and may change the architecture and the class count.",
        },
        {
                .section = "model", .name = "labels", .type = CFG_T_PATH, .def = "",
                .reload = CFG_RELOAD_SWAP, .optional = true, F(model.labels),
                .description = "Class labels, one per line: exactly as many lines as the model has classes; empty for none. Read again with a model swap in place.",
        },
        {
                .section = "model", .name = "precision", .type = CFG_T_PRECISION, .def = "fp16",
                .reload = CFG_RELOAD_SWAP, .apply = cfg_apply_precision, F(model.precision),
                .description = "Compute precision: on CUDA fp32, fp16 or bf16 (auto means fp16); the CPU engine computes in fp32 whatever this says, except bf16, which it computes in where the CPU has AVX512_BF16 or AMX and refuses at start elsewhere. Reloaded by a model swap in place, within the arena allocated at start (on the CPU engine only a change to or from bf16 swaps, and from bf16 to fp32 needs fp32's larger arena: a restart).",
        },

        {
                .section = "engine", .name = "backend", .type = CFG_T_BACKEND, .def = "auto",
                .reload = CFG_RELOAD_RESTART, F(engine.backend),
                .description = "auto takes CUDA when a device is present, else the CPU.",
        },
        {
                .section = "engine", .name = "device", .type = CFG_T_INT, .def = "0", .min = 0, .max = 63,
                .reload = CFG_RELOAD_RESTART, F(engine.device),
                .description = "CUDA device ordinal.",
        },
        {
                .section = "engine", .name = "threads", .type = CFG_T_INT, .def = "0", .min = 0, .max = 1024,
                .reload = CFG_RELOAD_RESTART, F(engine.threads),
                .description = "The CPU engine's threads (oneDNN's OpenMP threads). 0: OpenMP's default, OMP_NUM_THREADS or else the cores inferd may run on. The decode threads take a core only while they decode, about a seventh of one at the CPU engine's rate; set threads to the cores less [decode] threads to keep the two apart.",
        },

        {
                .section = "memory", .name = "gpu_budget", .type = CFG_T_BUDGET, .def = "70%",
                .min = 1 * MiB, .max = 1 * TiB,
                .reload = CFG_RELOAD_SWAP, F(memory.gpu_budget),
                .description = "Device memory the plan may use: a SIZE or a percentage of the device's memory. Reloaded by a model swap in place, whose plan charges the whole arena allocated at start (kept until a restart, whatever batch the swap carves from it): a budget too small for it is refused; the batch never goes above the one at start.",
        },
        {
                .section = "memory", .name = "host_budget", .type = CFG_T_SIZE, .def = "2GiB",
                .min = 1 * MiB, .max = 1 * TiB,
                .reload = CFG_RELOAD_SWAP, F(memory.host_budget_bytes),
                .description = "Host memory for the pinned buffers, the decode threads' buffers and librdkafka's queues: what the pinned buffers and the decode threads leave goes half to prefetched records, a quarter to the fetch responses as they decompress, a quarter to produced records not yet acknowledged; it is at least 8MiB and the fetch responses' floor (1MiB a response, decompressed up to [kafka] max_compression_ratio: 17MiB with one broker and the default 8), and at least what lets the prefetch queue hold the back-pressure hold's records (one full batch of float32 records per slot, or a second at max_images_per_s when more) beside the other two: a smaller budget lowers the batch. inferd --plan shows the three. Reloaded by a model swap in place, whose plan must hold the pinned buffers allocated at start (kept until a restart, whatever batch the swap carves from them) and the decode threads running since start (the decode pool is never resized): a budget too small for them is refused; librdkafka's limits stay as at start.",
        },
        {
                .section = "memory", .name = "max_batch", .type = CFG_T_INT, .def = "256", .min = 1, .max = 4096,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_max_batch, F(memory.max_batch),
                .description = "Upper bound on the batch; the plan may choose less. Live only up to the plan's batch.",
        },

        {
                .section = "batching", .name = "max_delay_ms", .type = CFG_T_INT, .def = "5", .min = 0, .max = 10000,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_max_delay_ms, F(batching.max_delay_ms),
                .description = "A partial batch is submitted after this long.",
        },
        {
                .section = "batching", .name = "max_images_per_s", .type = CFG_T_INT, .def = "0",
                .min = 0, .max = 10000000,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_max_images_per_s, F(batching.max_images_per_s),
                .description = "Throughput cap in images a second: a token bucket one batch deep before batch submission; at the cap the daemon takes no more records, as under back-pressure. 0 = no cap.",
        },
        {
                .section = "batching", .name = "max_record_age", .type = CFG_T_DURATION, .def = "0",
                .min = 0, .max = 366LL * 24 * 3600 * 1000,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_max_record_age, F(batching.max_record_age_ms),
                .description = "A deadline on records: one whose Kafka timestamp is older than this when it is taken is not run (max_record_age_action says what happens to it) and its offset is committed. A duration with a unit (90s, 10m, 1h); 0 = off. A timestamp in the future (clock skew) never expires.",
        },
        {
                .section = "batching", .name = "max_record_age_action", .type = CFG_T_AGE_ACTION, .def = "dlq",
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_max_record_age, F(batching.max_record_age_action),
                .description = "What happens to a record past max_record_age: dlq sends it to the DLQ with inferd-error expired and its age in inferd-error-detail; skip commits it with no copy anywhere, counted in inferd_records_total{outcome=\"expired\"}.",
        },

        {
                .section = "drain", .name = "timeout_s", .type = CFG_T_INT, .def = "30", .min = 1, .max = 3600,
                .reload = CFG_RELOAD_RESTART, F(drain.timeout_s),
                .description = "On SIGTERM, time allowed to finish the batches in flight, flush and commit.",
        },

        {
                .section = "metrics", .name = "listen", .type = CFG_T_LISTEN, .def = "127.0.0.1:9464",
                .reload = CFG_RELOAD_RESTART, F(metrics.listen),
                .description = "Address of the HTTP endpoint (GET /metrics, /livez, /readyz, /healthz), host:port; empty turns it off. Two "
                        "instances on one host need different ports (blue 9464, green 9465).",
        },
        {
                .section = "metrics", .name = "tls_cert", .type = CFG_T_PATH, .def = "",
                .reload = CFG_RELOAD_RESTART, .optional = true, F(metrics.tls_cert),
                .description = "PEM certificate (chain) of the endpoint: with tls_key, it serves HTTPS only (a plain-HTTP "
                        "request is refused). May be credential:NAME. Read at start: rotate by a restart.",
        },
        {
                .section = "metrics", .name = "tls_key", .type = CFG_T_PATH, .def = "",
                .reload = CFG_RELOAD_RESTART, .optional = true, F(metrics.tls_key),
                .description = "PEM private key (unencrypted) of tls_cert; keep it readable by the service only (credential:NAME "
                        "suits it).",
        },
        {
                .section = "metrics", .name = "basic_auth_users", .type = CFG_T_PATH, .def = "",
                .reload = CFG_RELOAD_RESTART, .optional = true, F(metrics.basic_auth_users),
                .description = "File of user:bcrypt-hash lines (htpasswd -nB, as Prometheus's web config): GET /metrics then needs "
                        "HTTP basic auth (401 otherwise). May be credential:NAME. Use it with TLS: basic auth over plain "
                        "HTTP sends the password in clear.",
        },
        {
                .section = "metrics", .name = "auth_healthz", .type = CFG_T_BOOL, .def = "no",
                .reload = CFG_RELOAD_RESTART, F(metrics.auth_healthz),
                .description = "yes: the probes (/healthz, /livez, /readyz) need basic auth too; no leaves them open for "
                        "load balancers and kubelets (they tell only whether the daemon is alive and ready, and why not).",
        },
        {
                .section = "metrics", .name = "max_connections", .type = CFG_T_INT, .def = "32", .min = 1, .max = 10000,
                .reload = CFG_RELOAD_RESTART, F(metrics.max_connections),
                .description = "Connections the endpoint holds at once; one more is accepted and closed at once. A scraper or a "
                        "health check holds one for milliseconds (or one kept alive between scrapes).",
        },
        {
                .section = "metrics", .name = "max_connections_per_ip", .type = CFG_T_INT, .def = "8",
                .min = 0, .max = 10000,
                .reload = CFG_RELOAD_RESTART, F(metrics.max_connections_per_ip),
                .description = "Connections one client address may hold at once, so that one client cannot take them all; "
                        "0: only max_connections.",
        },
        {
                .section = "metrics", .name = "timeout_s", .type = CFG_T_INT, .def = "10", .min = 1, .max = 3600,
                .reload = CFG_RELOAD_RESTART, F(metrics.timeout_s),
                .description = "A connection idle this long is closed (Prometheus's default scrape_timeout is 10 s). A "
                        "client that sends a byte now and then is closed all the same by header_timeout_s.",
        },
        {
                .section = "metrics", .name = "probes_listen", .type = CFG_T_LISTEN, .def = "",
                .reload = CFG_RELOAD_RESTART, F(metrics.probes_listen),
                .description = "A second address, host:port, that serves the probes only (/livez, /readyz, /healthz; "
                        "plain HTTP, no auth, /healthz's short reason) with connection slots of its own, so that clients "
                        "filling listen's slots never fail a kubelet's probe. Point the probes at it and let only the "
                        "kubelet reach it (a NetworkPolicy). Empty: the probes are on listen only.",
        },
        {
                .section = "metrics", .name = "header_timeout_s", .type = CFG_T_INT, .def = "5", .min = 0, .max = 3600,
                .reload = CFG_RELOAD_RESTART, F(metrics.header_timeout_s),
                .description = "A connection that has not sent a whole request header (and finished its TLS handshake) "
                        "this long after it was accepted is closed, whatever bytes it trickles (slowloris); after an "
                        "answer, the next header is due within timeout_s plus this. 0: no deadline.",
        },
        {
                .section = "metrics", .name = "connections_per_ip_per_s", .type = CFG_T_INT, .def = "50",
                .min = 0, .max = 100000,
                .reload = CFG_RELOAD_RESTART, F(metrics.connections_per_ip_per_s),
                .description = "New connections one client address may open a second (bursts of twice that); one more is "
                        "closed as it is accepted. IPv6 addresses count by their /64. 0: no limit.",
        },
        {
                .section = "metrics", .name = "tls_handshakes_per_ip_per_s", .type = CFG_T_INT, .def = "5",
                .min = 0, .max = 100000,
                .reload = CFG_RELOAD_RESTART, F(metrics.tls_handshakes_per_ip_per_s),
                .description = "With tls_cert: new connections a second from one client address (bursts of twice that), "
                        "since each TLS handshake is a private-key operation on the event loop; one more is closed as "
                        "it is accepted. Prometheus keeps its connection alive between scrapes. 0: no limit.",
        },
        {
                .section = "metrics", .name = "tls_handshakes_per_s", .type = CFG_T_INT, .def = "50",
                .min = 0, .max = 100000,
                .reload = CFG_RELOAD_RESTART, F(metrics.tls_handshakes_per_s),
                .description = "With tls_cert: new connections a second from all addresses together (bursts of twice "
                        "that), after tls_handshakes_per_ip_per_s: the bound on the loop's time in handshakes (about "
                        "1 to 2 ms each with an RSA-2048 key, less with ECDSA) whatever the number of addresses. 0: no "
                        "limit.",
        },

        {
                .section = "decode", .name = "threads", .type = CFG_T_INT, .def = "0", .min = 0, .max = 256,
                .reload = CFG_RELOAD_RESTART, F(decode.threads),
                .description = "JPEG/PNG/WebP decode threads, each with buffers for max_pixels charged against [memory] host_budget (inferd --plan shows them). 0: the cores minus one, capped by half of what the pinned buffers leave of host_budget, at least 1. An explicit count that does not fit beside the pinned buffers and librdkafka's floors (17MiB with one broker and the defaults) is refused at start and by --check-config. Made at start, never resized: a model swap's plan charges the threads that run, not this key's new value.",
        },
        {
                .section = "decode", .name = "max_pixels", .type = CFG_T_INT, .def = CFG_STR(DECODE_DEFAULT_MAX_PIXELS),
                .min = 1, .max = 2147483647,
                .reload = CFG_RELOAD_RESTART, F(decode.max_pixels),
                .description = "Largest image accepted, in pixels; a header claiming more is refused as too-large before decoding. Sizes the decode threads' buffers at start; a model swap's plan charges them as made.",
        },
        {
                .section = "decode", .name = "max_bytes", .type = CFG_T_SIZE,
                .def = CFG_STR(DECODE_DEFAULT_MAX_BYTES_MIB) "MiB",
                .min = 1 * KiB, .max = 1 * GiB,
                .reload = CFG_RELOAD_RESTART, F(decode.max_bytes),
                .description = "Largest encoded (JPEG/PNG/WebP) record accepted; more is refused as too-large.",
        },
        {
                .section = "decode", .name = "fast", .type = CFG_T_BOOL, .def = "no",
                .reload = CFG_RELOAD_RESTART, F(decode.fast),
                .description = "Faster, less exact decoding of large JPEGs: a JPEG whose shorter side is 1024 or more is reduced in the DCT domain (to a shorter side of 512 or more) before the resize. The crop covers the same region, but the records are no longer identical to torchvision's (measured cost in docs/records.md); smaller JPEGs and PNGs are unaffected.",
        },
        {
                .section = "decode", .name = "exif_orientation", .type = CFG_T_BOOL, .def = "no",
                .reload = CFG_RELOAD_RESTART, F(decode.exif_orientation),
                .description = "Turn each JPEG, PNG or WebP as its EXIF orientation tag says (the eight orientations: flips and quarter turns) before the resize, as PIL's ImageOps.exif_transpose does, so that a phone's portrait photograph is classified upright. no (the default) ignores the tag, as torchvision does: the records are then identical to torchvision's. An EXIF block that cannot be read is ignored (the image is decoded as stored).",
        },
        {
                .section = "decode", .name = "max_scan_megapixels", .type = CFG_T_INT,
                .def = CFG_STR(DECODE_DEFAULT_MAX_SCAN_MEGAPIXELS),
                .min = 0, .max = 2147483647,
                .reload = CFG_RELOAD_RESTART, F(decode.max_scan_megapixels),
                .description = "The decode cost limit: a JPEG whose scans times its megapixels is over this is refused as too-costly before it is decoded (its scans are counted from its markers). A usual progressive JPEG has 10 scans, a baseline one 1; 499 nearly empty scans of a 49 MP image took 4.8 s and held up the records around it. 0: no limit.",
        },
        {
                .section = "output", .name = "kind", .type = CFG_T_CHOICE, .def = "classes",
                .choices = prediction_kind_names, .reload = CFG_RELOAD_RESTART, F(output.kind),
                .description = "What a prediction carries: classes (the top-k, the schema of docs/records.md), embedding (the image's embedding, the global-average-pooled features that feed the fc: 2048 values for resnet50/101/152 and the wide ones, 512 for resnet18/34, instead of the classes) or both. With an embedding, every output has the headers inferd-embedding-dim and inferd-model, and the plan counts the slots' embedding buffers.",
        },
        {
                .section = "output", .name = "embedding_format", .type = CFG_T_CHOICE, .def = "json",
                .choices = prediction_format_names, .reload = CFG_RELOAD_RESTART, F(output.embedding_format),
                .description = "How the embedding is written: json (\"embedding\":[...] in the prediction, numbers that read back as the same float32), f32le (the record's value is the raw float32 little-endian vector, and the prediction's JSON is in the header inferd-prediction) or base64 (\"embedding\":\"...\", the f32le bytes in base64). Only with kind = embedding or both.",
        },
        {
                .section = "output", .name = "embedding_normalize", .type = CFG_T_CHOICE, .def = "none",
                .choices = prediction_normalize_names, .reload = CFG_RELOAD_RESTART, F(output.embedding_normalize),
                .description = "none (the features as the model computes them) or l2 (divided by their L2 norm, so that a dot product is the cosine similarity). Only with kind = embedding or both.",
        },
        {
                .section = "cache", .name = "entries", .type = CFG_T_INT, .def = "0", .min = 0, .max = 16777216,
                .reload = CFG_RELOAD_LIVE, .apply = cfg_apply_cache_entries, F(cache.entries),
                .description = "The result cache: how many records' results (top-k classes, and the embedding with [output] kind = embedding or both) are kept, keyed by the SHA-256 of the record's value with the model, the preprocessing options and the output kind. A record whose value is in the cache skips decoding and the engine, and its prediction, the same as a computed one, has the header inferd-cache: hit. Least recently used out first; a model swap empties it; a record sent to the DLQ is never kept. Host memory made at start and counted by the plan (the cache term of inferd --plan, 48 bytes a record plus 8 a class and 4 an embedding value: 88 bytes with top_k 5, 8.3 KiB with a 2048-value embedding). Live: a reload may lower it, set it to 0 (empties it and turns it off) or raise it again up to the value at start, emptying the cache; above that it is refused until a restart. 0: no cache.",
        },
};

const size_t cfg_nkeys = sizeof(cfg_keys) / sizeof(cfg_keys[0]);
_Static_assert(sizeof(cfg_keys) / sizeof(cfg_keys[0]) <= CFG_KEYS_MAX, "raise CFG_KEYS_MAX");

static const char *const cfg_sections[] = { "service", "kafka", "model", "engine", "memory", "batching", "drain",
                                             "metrics", "decode", "output", "cache" };

const cfg_reserved_t cfg_reserved[] = {
        { CFG_SECTION_CONSUMER, "bootstrap.servers", "set [kafka] brokers instead" },
        { CFG_SECTION_CONSUMER, "metadata.broker.list", "set [kafka] brokers instead" },
        { CFG_SECTION_CONSUMER, "group.id", "set [kafka] group_id instead" },
        { CFG_SECTION_CONSUMER, "enable.auto.offset.store",
          "inferd stores each offset itself, after its prediction is delivered" },
        { CFG_SECTION_PRODUCER, "bootstrap.servers", "set [kafka] brokers instead" },
        { CFG_SECTION_PRODUCER, "metadata.broker.list", "set [kafka] brokers instead" },
        { CFG_SECTION_PRODUCER, "enable.idempotence", "inferd's producer is always idempotent" },
        { CFG_SECTION_PRODUCER, "transactional.id", "set [kafka] delivery = exactly-once instead" },
        { CFG_SECTION_CONSUMER, "group.instance.id", "set [kafka] static_membership = yes instead" },
};

const size_t cfg_nreserved = sizeof(cfg_reserved) / sizeof(cfg_reserved[0]);

const cfg_key_t *cfg_find_key(const char *section, const char *name) {
        for (size_t i = 0; i < cfg_nkeys; i++)
                if (strcmp(cfg_keys[i].section, section) == 0 && strcmp(cfg_keys[i].name, name) == 0)
                        return &cfg_keys[i];
        return NULL;
}

bool cfg_is_section(const char *s) {
        for (size_t i = 0; i < sizeof(cfg_sections) / sizeof(cfg_sections[0]); i++)
                if (strcmp(cfg_sections[i], s) == 0)
                        return true;
        return false;
}

const char *cfg_reload_name(cfg_reload_t reload) {
        switch (reload) {
        case CFG_RELOAD_RESTART: return "restart";
        case CFG_RELOAD_LIVE: return "live";
        case CFG_RELOAD_SWAP: return "swap";
        }
        return "?";
}

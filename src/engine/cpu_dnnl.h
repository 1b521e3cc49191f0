/* cpu_dnnl: the CPU engine's convolutions and its max pool as oneDNN
 * primitives.
 *
 * One oneDNN primitive per conv of the model table and per batch bucket
 * (engine_cuda_buckets: 1, 2, 4, ... below max_batch, then max_batch; a
 * batch of n runs as chunks of the largest buckets that fit, so a batch of 1
 * costs one sample, not max_batch). Activations are NHWC, fp32 or bf16 (the
 * engine's precision; bf16 accumulates in fp32 inside oneDNN's kernels). The
 * global average pool, the fc and the head are cpu_ops', shared with the
 * reference (in bf16 the engine widens the pool's input). The bias (fp32),
 * the residual add and the ReLU are fused into each convolution. Where the
 * plan put a conv's output over its residual input (plan_place_tensors'
 * residual_in_place, which the engine asks for), the add is a sum post-op
 * that reads the output's bytes, which oneDNN 2.6 runs on its faster 1x1
 * kernel (brgconv_1x1); elsewhere a binary post-op reads the residual.
 *
 * Memory: the folded weights are reordered once, at open, into the layout
 * and type the primitives chose (blocks of this module, counted by the
 * plan's weights term: cpu_dnnl_sizes); the scratchpad is in user mode and
 * comes from the caller (the plan's workspace term); the code oneDNN
 * generates for each primitive is charged per primitive (the plan's context
 * term on the CPU). Executing allocates no buffer.
 *
 * bf16 needs a CPU with a bf16 kernel (AVX512_BF16 or AMX: cpu_dnnl_has_bf16);
 * a primitive for which oneDNN has only its reference implementation is
 * refused, never run.
 *
 * It is not the reference: cpu_ops is, and the tests hold this against it. */
#ifndef INFERD_CPU_DNNL_H
#define INFERD_CPU_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"
#include "core/model.h"
#include "core/plan.h"

typedef struct cpu_dnnl cpu_dnnl_t;

/* What one primitive keeps resident, at most on average: the code oneDNN
 * generates for it and its own objects on the heap. oneDNN has no query for
 * it, so it is measured (oneDNN 2.6.3, docs/perf.md):
 * - AVX-512 with bf16 (a Zen 5 EPYC; RSS around dnnl_primitive_create): 82
 *   to 121 KiB a primitive on average over ResNet-18, -50, -101 and
 *   wide_resnet50_2's convs and max pool, fp32 and bf16, from 24 KiB (a
 *   small 1x1) to 240 KiB (layer4's 1x1s), the same at any batch;
 * - an Intel Xeon with AMX (/proc/PID/smaps during `inferd-run --bench`,
 *   ResNet-50 at batch 1 to 64): fp32 on the avx512_core kernels 104 KiB
 *   (41 of code, 63 of objects); bf16 on the AMX brgconv kernels 241 to 243
 *   KiB at batch 8 to 64 (134 to 142 of code, 99 of objects; issue 42).
 * The plan charges cpu_dnnl_kernel_bytes_each for each primitive
 * (cpu_dnnl_sizes' kernel bytes), as the CUDA plan charges each captured
 * graph. */
#define CPU_DNNL_KERNEL_BYTES_EACH ((size_t)128 << 10)
#define CPU_DNNL_KERNEL_BYTES_EACH_AMX_BF16 ((size_t)256 << 10)

/* The bytes the plan charges for each primitive in precision p on this
 * CPU: CPU_DNNL_KERNEL_BYTES_EACH_AMX_BF16 where bf16 runs on AMX,
 * CPU_DNNL_KERNEL_BYTES_EACH elsewhere. */
size_t cpu_dnnl_kernel_bytes_each(precision_t p);

/* Whether cpu_dnnl runs ops of this kind in precision p (fp32 or bf16):
 * the convs and the max pool. The engine runs the others. */
int cpu_dnnl_runs(precision_t p, model_op_kind_t kind);

/* What cpu_dnnl_new would hold for m at max_batch in precision p with its
 * tensors at tensor_offset (a plan's), without weights: the largest
 * scratchpad of any primitive, the reordered weights' bytes, and its
 * primitives' code (CPU_DNNL_KERNEL_BYTES_EACH for each layer and bucket).
 * -EOPNOTSUPP (with the sentence) where oneDNN has no real kernel for a
 * layer in p. */
int cpu_dnnl_sizes(const model_t *m, int max_batch, precision_t p, const size_t tensor_offset[MODEL_MAX_TENSORS],
                   size_t *ret_scratch_bytes, size_t *ret_weights_bytes, size_t *ret_kernel_bytes, errbuf_t *err);

/* Creates the primitives of every layer of m and bucket of max_batch in
 * precision p (fp32 or bf16), for activations placed at tensor_offset (the
 * plan's: a conv whose output is at its residual's offset adds it as a sum),
 * and reorders m's weights (which must be loaded) into blocks of its own.
 * With drop_conv_weights, m's folded conv weights are given back as each is
 * reordered (model_release_conv_pages) and freed at the end
 * (model_drop_conv_weights), so that one weight set stays resident and the
 * two are never whole side by side; after a failure m's convs count as
 * dropped too. */
int cpu_dnnl_new(cpu_dnnl_t **ret, model_t *m, int max_batch, precision_t p,
                 const size_t tensor_offset[MODEL_MAX_TENSORS], bool drop_conv_weights, errbuf_t *err);

/* NULL is a no-op. */
void cpu_dnnl_free(cpu_dnnl_t *d);

/* Runs op op_index of the model (cpu_dnnl_runs says which) over n
 * (1..max_batch) samples. A conv: out = relu?(conv(in) + bias + residual),
 * in (n, h, w, cin), residual (n, ho, wo, cout) or NULL as the op says, out
 * (n, ho, wo, cout), which is residual itself where the plan put it there;
 * a max pool: out = maxpool(in), residual NULL. All NHWC
 * in d's precision. scratch holds cpu_dnnl_sizes' scratch bytes. Returns 0
 * or -EIO (a oneDNN failure, which a created primitive does not have). */
int cpu_dnnl_op(cpu_dnnl_t *d, int op_index, int n, const void *in, const void *residual, void *out,
                void *scratch);

/* fp32 to bf16 (rounded to nearest even, a NaN kept) and back (exact). */
void cpu_dnnl_to_bf16(const float *in, uint16_t *out, size_t n);
void cpu_dnnl_from_bf16(const uint16_t *in, float *out, size_t n);

/* The instruction set oneDNN's kernels use on this CPU ("avx512_core",
 * "avx2", ...), and whether it has bf16 arithmetic (AVX512_BF16 or AMX). */
const char *cpu_dnnl_isa(void);
int cpu_dnnl_has_bf16(void);

#endif

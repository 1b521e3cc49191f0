/* cpu_dnnl: the CPU engine's convolutions as oneDNN primitives.
 *
 * One oneDNN convolution per conv of the model table and per batch bucket
 * (engine_cuda_buckets: 1, 2, 4, ... below max_batch, then max_batch; a
 * batch of n runs as chunks of the largest buckets that fit, so a batch of 1
 * costs one sample, not max_batch). Activations stay NHWC fp32, as cpu_ops
 * has them, so the pools, the fc and the head are shared with the reference.
 * The bias, the residual add (a binary post-op reading the residual tensor)
 * and the ReLU are fused into each convolution.
 *
 * Memory: the folded weights are reordered once, at open, into the layout
 * the primitives chose (blocks of this module, counted by the plan's weights
 * term: cpu_dnnl_sizes); the scratchpad is in user mode and comes from the
 * caller (the plan's workspace term). Executing allocates no buffer.
 *
 * It is not the reference: cpu_ops is, and the tests hold this against it. */
#ifndef INFERD_CPU_DNNL_H
#define INFERD_CPU_DNNL_H

#include <stddef.h>

#include "core/errbuf.h"
#include "core/model.h"

typedef struct cpu_dnnl cpu_dnnl_t;

/* What cpu_dnnl_new would hold for m at max_batch, without weights: the
 * largest scratchpad of any primitive and the reordered weights' bytes. */
int cpu_dnnl_sizes(const model_t *m, int max_batch, size_t *ret_scratch_bytes, size_t *ret_weights_bytes,
                   errbuf_t *err);

/* Creates the primitives of every conv of m and bucket of max_batch and
 * reorders m's weights (which must be loaded) into blocks of its own. */
int cpu_dnnl_new(cpu_dnnl_t **ret, const model_t *m, int max_batch, errbuf_t *err);

/* NULL is a no-op. */
void cpu_dnnl_free(cpu_dnnl_t *d);

/* out = relu?(conv(in) + bias + residual) for conv op_index of the model,
 * over n (1..max_batch) samples: in (n, h, w, cin), residual (n, ho, wo,
 * cout) or NULL as the op says, out (n, ho, wo, cout), all NHWC fp32.
 * scratch holds cpu_dnnl_sizes' scratch bytes. Returns 0 or -EIO (a oneDNN
 * failure, which a created primitive does not have). */
int cpu_dnnl_conv(cpu_dnnl_t *d, int op_index, int n, const float *in, const float *residual, float *out,
                  void *scratch);

/* The instruction set oneDNN's kernels use on this CPU ("avx512_core",
 * "avx2", ...), and whether it has bf16 arithmetic (AVX512_BF16 or AMX). */
const char *cpu_dnnl_isa(void);
int cpu_dnnl_has_bf16(void);

#endif

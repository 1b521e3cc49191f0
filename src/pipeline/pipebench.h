/* pipebench: the stand-in for the engine in `inferd --bench-pipeline`.
 *
 * The pipeline benchmark measures what the daemon itself can move (consume,
 * validate, pack, produce, delivery reports, offsets, commit) with the
 * model's compute left out. This executor implements engine_ops_t and does
 * no work: a submitted slot is complete at once (submit writes the
 * completion eventfd), and every result is class 0 with score 0. Its name,
 * PIPEBENCH_BACKEND_NAME, is the "backend" of every prediction it yields,
 * so its output cannot be mistaken for a model's.
 *
 * It is not a backend: [engine] backend cannot select it, only the
 * --bench-pipeline flag, which the daemon logs as a benchmark at start. */
#ifndef INFERD_PIPEBENCH_H
#define INFERD_PIPEBENCH_H

#include "engine/engine.h"
#include "core/errbuf.h"
#include "core/plan.h"

#define PIPEBENCH_BACKEND_NAME "none-pipeline-benchmark"

/* An engine_t with plan's slots (pipeline_depth x max_batch records of
 * host staging) and no compute. Free it with engine_free. */
int pipebench_open(engine_t **ret, const plan_t *plan, errbuf_t *err);

#endif

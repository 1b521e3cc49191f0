/* pipebench: a no-compute executor for the pipeline benchmark. See
 * pipebench.h. Not a backend, not a test double for numerics: it exists so
 * that the daemon's own ceiling can be measured apart from the model. */
#include "pipeline/pipebench.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct pipebench {
        int efd;                /* eventfd: a slot completed */
        int depth, max_batch, top_k, classes;
        unsigned char *input;   /* (depth, max_batch, RECORD_MAX_BYTES) host staging, never read */
        float *logits;          /* (depth, max_batch, classes) zeros */
        engine_topk_t *topk;    /* (depth, max_batch, top_k) class 0, score 0 */
        float *embedding;       /* (depth, max_batch, embedding_dim) ones, when the plan has embeddings */
        int embedding_dim;
        int *done;              /* (depth) FIFO of completed slots */
        int done_head, done_len;
} pipebench_t;

static void pipebench_ops_close(engine_t *e);

static int pipebench_ops_open(engine_t *e, errbuf_t *err) {
        pipebench_t *p = calloc(1, sizeof(*p));
        size_t records;

        if (!p)
                return errbuf_set(err, -ENOMEM, "out of memory");
        p->depth = e->plan.pipeline_depth;
        p->max_batch = e->plan.max_batch;
        p->top_k = e->plan.top_k;
        records = (size_t)p->depth * (size_t)p->max_batch;
        p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        /* calloc: pages never written cost nothing, like the pinned slots
         * they stand in for. */
        p->input = calloc(records, RECORD_MAX_BYTES);
        p->classes = e->plan.classes;
        p->logits = calloc(records * (size_t)p->classes, sizeof(float));
        p->topk = calloc(records * (size_t)p->top_k, sizeof(engine_topk_t));
        p->done = calloc((size_t)p->depth, sizeof(int));
        /* [output] kind = embedding or both: a vector of ones (finite, and
         * of norm > 0 for l2), so that their encoding is measured too. */
        p->embedding_dim = e->plan.embedding_dim;
        if (p->embedding_dim > 0) {
                size_t n = records * (size_t)p->embedding_dim;

                p->embedding = malloc(n * sizeof(float));
                for (size_t i = 0; p->embedding && i < n; i++)
                        p->embedding[i] = 1.0f;
        }
        e->impl = p;
        if (p->efd < 0 || !p->input || !p->logits || !p->topk || !p->done ||
            (p->embedding_dim > 0 && !p->embedding)) {
                pipebench_ops_close(e);
                return errbuf_set(err, -ENOMEM, "out of memory for the pipeline benchmark's slots");
        }
        return 0;
}

static void pipebench_ops_close(engine_t *e) {
        pipebench_t *p = e->impl;

        if (!p)
                return;
        if (p->efd >= 0)
                close(p->efd);
        free(p->input);
        free(p->logits);
        free(p->topk);
        free(p->embedding);
        free(p->done);
        free(p);
        e->impl = NULL;
}

static void *pipebench_ops_slot_input(engine_t *e, int slot) {
        pipebench_t *p = e->impl;

        return p->input + (size_t)slot * (size_t)p->max_batch * RECORD_MAX_BYTES;
}

static int pipebench_ops_submit(engine_t *e, int slot, int n, errbuf_t *err) {
        pipebench_t *p = e->impl;
        uint64_t one = 1;

        (void)n;
        if (p->done_len == p->depth)
                return errbuf_set(err, -EBUSY, "every slot is already complete");
        p->done[(p->done_head + p->done_len) % p->depth] = slot;
        p->done_len++;
        if (write(p->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
                return errbuf_set(err, -EIO, "writing the completion eventfd failed");
        return 0;
}

static int pipebench_ops_reap(engine_t *e, int *slot, errbuf_t *err) {
        pipebench_t *p = e->impl;
        uint64_t v;

        (void)err;
        if (p->done_len == 0) {
                while (read(p->efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
                        ;
                return 0;
        }
        *slot = p->done[p->done_head];
        p->done_head = (p->done_head + 1) % p->depth;
        p->done_len--;
        return 1;
}

static const float *pipebench_ops_slot_logits(engine_t *e, int slot) {
        pipebench_t *p = e->impl;

        return p->logits + (size_t)slot * (size_t)p->max_batch * (size_t)p->classes;
}

static const engine_topk_t *pipebench_ops_slot_topk(engine_t *e, int slot) {
        pipebench_t *p = e->impl;

        return p->topk + (size_t)slot * (size_t)p->max_batch * (size_t)p->top_k;
}

static const float *pipebench_ops_slot_embedding(engine_t *e, int slot) {
        pipebench_t *p = e->impl;

        return p->embedding + (size_t)slot * (size_t)p->max_batch * (size_t)p->embedding_dim;
}

static int pipebench_ops_completion_fd(engine_t *e) {
        return ((pipebench_t *)e->impl)->efd;
}

static const engine_ops_t pipebench_ops = {
        .name = PIPEBENCH_BACKEND_NAME,
        .open = pipebench_ops_open,
        .close = pipebench_ops_close,
        .slot_input = pipebench_ops_slot_input,
        .submit = pipebench_ops_submit,
        .reap = pipebench_ops_reap,
        .slot_logits = pipebench_ops_slot_logits,
        .slot_topk = pipebench_ops_slot_topk,
        .slot_embedding = pipebench_ops_slot_embedding,
        .completion_fd = pipebench_ops_completion_fd,
};

int pipebench_open(engine_t **ret, const plan_t *plan, errbuf_t *err) {
        engine_t *e = calloc(1, sizeof(*e));
        int r;

        if (!e)
                return errbuf_set(err, -ENOMEM, "out of memory");
        e->plan = *plan;
        r = engine_slots_alloc(e, err);
        if (r < 0)
                goto fail;
        r = pipebench_ops.open(e, err);
        if (r < 0)
                goto fail;
        /* From here engine_free closes it through the ops. */
        e->ops = &pipebench_ops;
        *ret = e;
        return 0;
fail:
        engine_free(e);
        return r;
}

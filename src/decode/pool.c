/* decode_pool: threads, two rings of job pointers and an eventfd. See
 * pool.h. One mutex guards both rings; a condition variable wakes idle
 * threads; the eventfd counts nothing but readiness: it is written when a
 * job completes and drained when the done ring is found empty. */
#include "decode/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "decode/decode.h"

typedef struct decode_ring {
        decode_job_t **items;           /* (capacity) */
        size_t head, len;
} decode_ring_t;

typedef struct decode_worker {
        decode_pool_t *pool;
        decode_t *ctx;
        pthread_t tid;
        bool started;
} decode_worker_t;

struct decode_pool {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        decode_ring_t queued, done;
        size_t capacity;
        size_t running;
        bool stopping;
        int efd;
        int n_workers;
        uint64_t max_pixels;            /* every context's, as made */
        decode_worker_t *workers;
};

static void decode_ring_push(decode_ring_t *q, size_t cap, decode_job_t *j) {
        q->items[(q->head + q->len) % cap] = j;
        q->len++;
}

static decode_job_t *decode_ring_pop(decode_ring_t *q, size_t cap) {
        decode_job_t *j;

        if (!q->len)
                return NULL;
        j = q->items[q->head];
        q->head = (q->head + 1) % cap;
        q->len--;
        return j;
}

static void *decode_worker_main(void *arg) {
        decode_worker_t *w = arg;
        decode_pool_t *p = w->pool;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                decode_job_t *j;
                uint64_t one = 1;

                while (!p->stopping && p->queued.len == 0)
                        pthread_cond_wait(&p->wake, &p->lock);
                if (p->stopping)
                        break;
                j = decode_ring_pop(&p->queued, p->capacity);
                p->running++;
                pthread_mutex_unlock(&p->lock);

                j->code = NULL;
                j->err.msg[0] = '\0';
                j->r = decode_record(w->ctx, j->data, j->len, j->format, j->out, NULL, &j->code, &j->err);

                pthread_mutex_lock(&p->lock);
                p->running--;
                decode_ring_push(&p->done, p->capacity, j);
                /* An eventfd write cannot fail short of a bug: the counter
                 * would need 2^64 - 1 writes without a read. */
                (void)!write(p->efd, &one, sizeof(one));
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

void decode_pool_set_max_scan_megapixels(decode_pool_t *p, uint64_t megapixels) {
        /* Before the first job: a worker takes its job under this lock, so it sees the value. */
        pthread_mutex_lock(&p->lock);
        for (int i = 0; i < p->n_workers; i++)
                decode_set_max_scan_megapixels(p->workers[i].ctx, megapixels);
        pthread_mutex_unlock(&p->lock);
}

int decode_pool_new(decode_pool_t **ret, int threads, uint64_t max_pixels, size_t max_bytes, bool fast,
                    bool exif_orientation, size_t capacity, errbuf_t *err) {
        decode_pool_t *p;
        int r;

        if (threads < 1 || capacity < 1)
                return errbuf_set(err, -EINVAL, "a decode pool needs at least one thread and one job (%d, %zu)",
                                  threads, capacity);
        p = calloc(1, sizeof(*p));
        if (!p)
                return errbuf_set(err, -ENOMEM, "out of memory");
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        p->capacity = capacity;
        p->max_pixels = max_pixels;
        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        p->queued.items = calloc(capacity, sizeof(*p->queued.items));
        p->done.items = calloc(capacity, sizeof(*p->done.items));
        p->workers = calloc((size_t)threads, sizeof(*p->workers));
        if (p->efd < 0) {
                r = errbuf_set(err, -errno, "cannot make the decode pool's eventfd: %s", strerror(errno));
                goto fail;
        }
        if (!p->queued.items || !p->done.items || !p->workers) {
                r = errbuf_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        for (int i = 0; i < threads; i++) {
                decode_worker_t *w = &p->workers[i];

                w->pool = p;
                r = decode_new(&w->ctx, max_pixels, max_bytes, false, err);
                if (r < 0)
                        goto fail;
                decode_set_fast(w->ctx, fast);      /* before the thread starts: it reads them */
                decode_set_exif_orientation(w->ctx, exif_orientation);
                r = -pthread_create(&w->tid, NULL, decode_worker_main, w);
                if (r < 0) {
                        errbuf_set(err, r, "cannot start decode thread %d: %s", i, strerror(-r));
                        goto fail;
                }
                w->started = true;
                p->n_workers++;
        }
        *ret = p;
        return 0;
fail:
        p->n_workers = threads;         /* free every context made so far */
        decode_pool_free(p);
        return r;
}

int decode_pool_threads(const decode_pool_t *p) {
        return p->n_workers;
}

uint64_t decode_pool_max_pixels(const decode_pool_t *p) {
        return p->max_pixels;
}

void decode_pool_free(decode_pool_t *p) {
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; p->workers && i < p->n_workers; i++) {
                if (p->workers[i].started)
                        pthread_join(p->workers[i].tid, NULL);
                decode_free(p->workers[i].ctx);
        }
        if (p->efd >= 0)
                close(p->efd);
        free(p->workers);
        free(p->queued.items);
        free(p->done.items);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
}

static size_t decode_pool_held(const decode_pool_t *p) {
        return p->queued.len + p->running + p->done.len;
}

int decode_pool_submit(decode_pool_t *p, decode_job_t *job) {
        int r = 0;

        pthread_mutex_lock(&p->lock);
        if (decode_pool_held(p) >= p->capacity)
                r = -EAGAIN;
        else {
                decode_ring_push(&p->queued, p->capacity, job);
                pthread_cond_signal(&p->wake);
        }
        pthread_mutex_unlock(&p->lock);
        return r;
}

int decode_pool_fd(const decode_pool_t *p) {
        return p->efd;
}

decode_job_t *decode_pool_reap(decode_pool_t *p) {
        decode_job_t *j;

        pthread_mutex_lock(&p->lock);
        j = decode_ring_pop(&p->done, p->capacity);
        if (!j) {
                uint64_t n;

                /* Drained under the lock, so a completion cannot slip
                 * between the empty ring and the read. */
                (void)!read(p->efd, &n, sizeof(n));
        }
        pthread_mutex_unlock(&p->lock);
        return j;
}

size_t decode_pool_pending(decode_pool_t *p) {
        size_t n;

        pthread_mutex_lock(&p->lock);
        n = decode_pool_held(p);
        pthread_mutex_unlock(&p->lock);
        return n;
}

int decode_pool_full(decode_pool_t *p) {
        return decode_pool_pending(p) >= p->capacity;
}

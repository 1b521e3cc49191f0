/* kafka_txn_thread: exactly-once's calls that wait on the brokers run on a
 * thread of the kafka module's own, so that the event loop never waits on a
 * transaction coordinator (issue 36): sending the offsets to the
 * transaction, its commit, its abort, and the read of the group's committed
 * offsets that a rewind starts from, and init_transactions at start-up; and
 * without exactly-once, a revoke's commit of the consumer's offsets. The owner hands over one job at a time
 * (kafka_txn_submit), watches kafka_txn_fd, and takes the result on its own
 * thread (kafka_txn_collect), where the module's state (txn_open,
 * txn_failed) changes: the thread reads and writes none of it, only the job.
 * Each librdkafka call is made whole, never in slices: send_offsets is
 * retriable but not resumable, and librdkafka recommends -1 (the
 * transaction's remaining timeout) for the commit and the abort.
 *
 * Not here: when to commit (daemon_txn.c); the calls themselves and their
 * failures' classes (kafka_txn.c). */
#include "kafka/kafka_priv.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config/log.h"

static bool kafka_txn_quitting(kafka_txn_job_t *j) {
        bool quit;

        pthread_mutex_lock(&j->lock);
        quit = j->quit;
        pthread_mutex_unlock(&j->lock);
        return quit;
}

/* The consumer's commit of its stored offsets (at least once), waiting for
 * the group coordinator's answer however long it takes; the wait's 100 ms
 * turns only look whether the module is being freed (the request is sent
 * once). */
static int kafka_offsets_commit_call(kafka_t *k, kafka_txn_job_t *j) {
        rd_kafka_queue_t *q = rd_kafka_queue_new(k->consumer);
        rd_kafka_resp_err_t re;
        bool answered = false;

        if (!q)
                return errbuf_set(&j->err, -ENOMEM, "Failed to commit offsets: out of memory");
        re = rd_kafka_commit_queue(k->consumer, NULL, q, NULL, NULL);
        while (!re && !answered) {
                rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);

                if (!ev) {
                        if (kafka_txn_quitting(j)) {
                                re = RD_KAFKA_RESP_ERR__DESTROY;
                                break;
                        }
                        continue;
                }
                if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_OFFSET_COMMIT) {
                        re = rd_kafka_event_error(ev);
                        answered = true;
                }
                rd_kafka_event_destroy(ev);
        }
        rd_kafka_queue_destroy(q);
        if (re == RD_KAFKA_RESP_ERR__NO_OFFSET || re == RD_KAFKA_RESP_ERR_NO_ERROR)
                return 0;
        return errbuf_set(&j->err, -EIO, "Failed to commit offsets: %s", rd_kafka_err2str(re));
}

/* Runs j's calls on the transaction thread; fills its result. */
static void kafka_txn_run(kafka_t *k, kafka_txn_job_t *j) {
        int r = 0;

        j->status = 0;
        j->committed = j->aborted = false;
        j->cause[0] = '\0';
        j->rewind_to = NULL;
        if (j->kind == KAFKA_TXN_JOB_INIT) {
                j->status = kafka_txn_init(k, KAFKA_TXN_TIMEOUT_MS, j->timeout_ms, &j->err);
                return;
        }
        if (j->kind == KAFKA_TXN_JOB_OFFSETS) {
                j->status = kafka_offsets_commit_call(k, j);
                j->committed = j->status == 0;
                return;
        }
        if (j->kind == KAFKA_TXN_JOB_COMMIT) {
                r = kafka_txn_commit_calls(k, j->offsets, j->timeout_ms, &j->err);
                j->committed = r == 0;
                if (r != -ECANCELED) {
                        j->status = r;
                        return;
                }
                /* Abortable: the transaction can only be aborted, here,
                 * before the owner hears of it. */
                snprintf(j->cause, sizeof(j->cause), "%s", j->err.msg);
        }
        r = kafka_txn_abort_call(k, j->timeout_ms, &j->err);
        if (r < 0) {
                j->status = r;
                return;
        }
        j->aborted = true;
        j->status = j->kind == KAFKA_TXN_JOB_COMMIT ? -ECANCELED : 0;
        if (j->rewind && (r = kafka_committed_read(k, &j->rewind_to, &j->err)) < 0)
                j->status = r;
}

static void *kafka_txn_main(void *arg) {
        kafka_t *k = arg;
        kafka_txn_job_t *j = &k->txn_job;

        pthread_mutex_lock(&j->lock);
        for (;;) {
                while (!j->pending && !j->quit)
                        pthread_cond_wait(&j->wake, &j->lock);
                if (j->quit)
                        break;
                pthread_mutex_unlock(&j->lock);
                kafka_txn_run(k, j);
                pthread_mutex_lock(&j->lock);
                j->pending = false;
                if (eventfd_write(j->fd, 1) < 0)
                        log_error("The transaction thread could not signal its result: %s", strerror(errno));
                pthread_cond_broadcast(&j->wake);
        }
        pthread_mutex_unlock(&j->lock);
        return NULL;
}

int kafka_txn_thread_start(kafka_t *k, errbuf_t *err) {
        kafka_txn_job_t *j = &k->txn_job;
        int r;

        j->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (j->fd < 0)
                return errbuf_set(err, -errno, "eventfd: %s", strerror(errno));
        pthread_mutex_init(&j->lock, NULL);
        pthread_cond_init(&j->wake, NULL);
        j->inited = true;
        r = pthread_create(&j->thread, NULL, kafka_txn_main, k);
        if (r)
                return errbuf_set(err, -r, "Failed to start the transaction thread: %s", strerror(r));
        j->started = true;
        return 0;
}

void kafka_txn_thread_stop(kafka_t *k) {
        kafka_txn_job_t *j = &k->txn_job;

        if (j->started) {
                /* A job still running ends within its calls' timeouts. */
                pthread_mutex_lock(&j->lock);
                j->quit = true;
                pthread_cond_broadcast(&j->wake);
                pthread_mutex_unlock(&j->lock);
                pthread_join(j->thread, NULL);
                j->started = false;
        }
        if (j->inited) {
                pthread_mutex_destroy(&j->lock);
                pthread_cond_destroy(&j->wake);
                j->inited = false;
        }
        if (j->offsets)
                rd_kafka_topic_partition_list_destroy(j->offsets);
        if (j->rewind_to)
                rd_kafka_topic_partition_list_destroy(j->rewind_to);
        j->offsets = j->rewind_to = NULL;
        if (j->fd >= 0)
                close(j->fd);
        j->fd = -1;
}

int kafka_txn_fd(const kafka_t *k) {
        return k->txn_job.fd;
}

bool kafka_txn_busy(const kafka_t *k) {
        return k->txn_job.busy;
}

int kafka_txn_submit(kafka_t *k, kafka_txn_job_kind_t kind, const rd_kafka_topic_partition_list_t *offsets,
                     int timeout_ms, bool rewind, errbuf_t *err) {
        kafka_txn_job_t *j = &k->txn_job;
        int r;

        assert((k->transactional || kind == KAFKA_TXN_JOB_OFFSETS) && j->started && !j->busy);
        /* Offsets with no transaction open: one is begun for them. */
        if (kind == KAFKA_TXN_JOB_COMMIT && !k->txn_open && offsets && offsets->cnt > 0 &&
            (r = kafka_txn_begin(k, err)) < 0)
                return r;
        j->offsets = offsets && offsets->cnt > 0 ? rd_kafka_topic_partition_list_copy(offsets) : NULL;
        if (offsets && offsets->cnt > 0 && !j->offsets)
                return errbuf_set(err, -ENOMEM, "Out of memory copying the transaction's offsets");
        pthread_mutex_lock(&j->lock);
        j->kind = kind;
        j->timeout_ms = timeout_ms;
        j->rewind = rewind;
        j->pending = j->busy = true;
        pthread_cond_broadcast(&j->wake);
        pthread_mutex_unlock(&j->lock);
        return 0;
}

int kafka_txn_collect(kafka_t *k, kafka_txn_result_t *res, errbuf_t *err) {
        kafka_txn_job_t *j = &k->txn_job;
        eventfd_t v;
        bool pending;

        pthread_mutex_lock(&j->lock);
        pending = j->pending;
        pthread_mutex_unlock(&j->lock);
        if (!j->busy || pending)
                return -EINPROGRESS;
        (void)eventfd_read(j->fd, &v);
        j->busy = false;
        if (j->offsets)
                rd_kafka_topic_partition_list_destroy(j->offsets);
        j->offsets = NULL;
        /* The module's state follows the job, here on the owner's thread. */
        if ((j->kind == KAFKA_TXN_JOB_COMMIT || j->kind == KAFKA_TXN_JOB_ABORT) && (j->committed || j->aborted)) {
                k->txn_open = false;
                k->txn_failed = false;
        }
        /* The abort's purged outputs are reported now, with no transaction
         * open, so that none is taken for a failure of the next one
         * (kafka_dr_cb). */
        if (j->aborted)
                rd_kafka_poll(k->producer, 0);
        *res = (kafka_txn_result_t){ .kind = j->kind, .committed = j->committed, .aborted = j->aborted,
                                     .rewind_to = j->rewind_to };
        snprintf(res->cause, sizeof(res->cause), "%s", j->cause);
        j->rewind_to = NULL;
        if (j->status < 0)
                errbuf_set(err, j->status, "%s", j->err.msg);
        return j->status;
}

int kafka_txn_wait(kafka_t *k, kafka_txn_result_t *res, errbuf_t *err) {
        int r;

        while ((r = kafka_txn_collect(k, res, err)) == -EINPROGRESS && k->txn_job.busy) {
                struct pollfd p = { .fd = k->txn_job.fd, .events = POLLIN };

                if (poll(&p, 1, 100) == 0 && k->cb.txn_waiting)
                        k->cb.txn_waiting(k->userdata);
        }
        return r;
}

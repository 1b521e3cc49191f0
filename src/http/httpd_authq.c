/* httpd_authq: the password worker. See httpd_authq.h.
 *
 * Two lists under one mutex: `todo` (the loop appends, the worker takes)
 * and `done` (the worker appends, the loop takes when the eventfd says so).
 * A job belongs to whichever list holds it, or to the side that took it. */
#include "http/httpd_authq.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

/* The worker's nice value, above the loop's: a flood of checks takes the
 * CPU the pipeline leaves, not the pipeline's. */
#define HTTPD_AUTHQ_NICE 10

typedef struct httpd_authq_job {
        struct httpd_authq_job *next;
        void *cookie;
        bool ok;
        char *user, *password;          /* owned; password wiped before free */
} httpd_authq_job_t;

struct httpd_authq {
        httpd_auth_t *auth;             /* borrowed */
        httpd_authq_done_fn done;
        void *userdata;
        unsigned max_pending, pending;  /* pending: loop thread only */
        int efd;                        /* owned */
        sd_event_source *io;
        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        /* Under lock: */
        bool stop;
        httpd_authq_job_t *todo, **todo_tail, *done_head, **done_tail;
};

static void httpd_authq_job_free(httpd_authq_job_t *j) {
        if (!j)
                return;
        if (j->password)
                explicit_bzero(j->password, strlen(j->password));
        free(j->password);
        free(j->user);
        free(j);
}

static void *httpd_authq_main(void *arg) {
        httpd_authq_t *q = arg;
        uint64_t one = 1;

        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), HTTPD_AUTHQ_NICE);
        pthread_mutex_lock(&q->lock);
        for (;;) {
                httpd_authq_job_t *j;

                while (!q->stop && !q->todo)
                        pthread_cond_wait(&q->wake, &q->lock);
                if (q->stop)
                        break;
                j = q->todo;
                q->todo = j->next;
                if (!q->todo)
                        q->todo_tail = &q->todo;
                pthread_mutex_unlock(&q->lock);

                j->ok = httpd_auth_verify(q->auth, j->user, j->password);

                pthread_mutex_lock(&q->lock);
                j->next = NULL;
                *q->done_tail = j;
                q->done_tail = &j->next;
                /* An eventfd write fails only when the counter would
                 * overflow, and then it is readable anyway. */
                (void)!write(q->efd, &one, sizeof(one));
        }
        pthread_mutex_unlock(&q->lock);
        return NULL;
}

/* The worker's answers, on the loop thread: a match is remembered (the
 * loop owns the cache), and every password is wiped as its job is freed. */
void httpd_authq_dispatch(httpd_authq_t *q) {
        httpd_authq_job_t *list, *next;
        uint64_t n;

        if (!q)
                return;
        (void)!read(q->efd, &n, sizeof(n));
        pthread_mutex_lock(&q->lock);
        list = q->done_head;
        q->done_head = NULL;
        q->done_tail = &q->done_head;
        pthread_mutex_unlock(&q->lock);
        for (; list; list = next) {
                next = list->next;
                q->pending--;
                if (list->ok)
                        httpd_auth_remember(q->auth, list->user, list->password);
                q->done(q->userdata, list->cookie, list->ok, list->user);
                httpd_authq_job_free(list);
        }
}

static int httpd_authq_on_done(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        (void)s;
        (void)fd;
        (void)revents;
        httpd_authq_dispatch(userdata);
        return 0;
}

int httpd_authq_new(httpd_authq_t **ret, httpd_auth_t *auth, sd_event *event, unsigned max_pending,
                    httpd_authq_done_fn done, void *userdata) {
        httpd_authq_t *q = calloc(1, sizeof(*q));
        sigset_t all, old;
        int r;

        if (!q)
                return -ENOMEM;
        q->efd = -1;
        q->auth = auth;
        q->done = done;
        q->userdata = userdata;
        q->max_pending = max_pending ? max_pending : 1;
        q->todo_tail = &q->todo;
        q->done_tail = &q->done_head;
        pthread_mutex_init(&q->lock, NULL);
        pthread_cond_init(&q->wake, NULL);
        q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (q->efd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(event, &q->io, q->efd, EPOLLIN, httpd_authq_on_done, q);
        if (r < 0)
                goto fail;
        /* The worker takes no signal: they reach the loop's signalfd. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = -pthread_create(&q->thread, NULL, httpd_authq_main, q);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                goto fail;
        q->started = true;
        *ret = q;
        return 0;
fail:
        httpd_authq_free(q);
        return r;
}

int httpd_authq_submit(httpd_authq_t *q, const char *user, const char *password, void *cookie) {
        httpd_authq_job_t *j;

        if (q->pending >= q->max_pending)
                return -EBUSY;
        j = calloc(1, sizeof(*j));
        if (!j || !(j->user = strdup(user)) || !(j->password = strdup(password))) {
                httpd_authq_job_free(j);
                return -ENOMEM;
        }
        j->cookie = cookie;
        q->pending++;
        pthread_mutex_lock(&q->lock);
        *q->todo_tail = j;
        q->todo_tail = &j->next;
        pthread_cond_signal(&q->wake);
        pthread_mutex_unlock(&q->lock);
        return 0;
}

unsigned httpd_authq_pending(const httpd_authq_t *q) {
        return q->pending;
}

static void httpd_authq_drop(httpd_authq_job_t *list) {
        for (httpd_authq_job_t *next; list; list = next) {
                next = list->next;
                httpd_authq_job_free(list);
        }
}

void httpd_authq_free(httpd_authq_t *q) {
        if (!q)
                return;
        if (q->started) {
                pthread_mutex_lock(&q->lock);
                q->stop = true;
                pthread_cond_signal(&q->wake);
                pthread_mutex_unlock(&q->lock);
                pthread_join(q->thread, NULL);
        }
        httpd_authq_drop(q->todo);
        httpd_authq_drop(q->done_head);
        sd_event_source_disable_unref(q->io);
        if (q->efd >= 0)
                close(q->efd);
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->wake);
        free(q);
}

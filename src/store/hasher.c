#include "store/hasher.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/err.h"

struct hasher {
    pthread_t threads[HASHER_THREADS_MAX];
    unsigned nthreads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t finished;                    /* broadcast whenever a job is done */
    int busy;                                   /* guarded by lock: workers hashing */
    struct hasher_job *pending, **pending_tail; /* guarded by lock */
    struct hasher_job *done, **done_tail;       /* guarded by lock */
    int stopping;                               /* guarded by lock */
    int efd;
};

static void *worker(void *arg)
{
    struct hasher *h = arg;
    struct hasher_job *job;
    uint64_t one = 1;

    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (!h->pending && !h->stopping)
            pthread_cond_wait(&h->wake, &h->lock);
        if (!(job = h->pending))
            break;
        if (!(h->pending = job->next))
            h->pending_tail = &h->pending;
        h->busy++;
        pthread_mutex_unlock(&h->lock);
        job->status = digest_leaves_of(job->bytes, job->size, job->first, job->n, job->leaves);
        job->next = NULL;
        pthread_mutex_lock(&h->lock);
        *h->done_tail = job;
        h->done_tail = &job->next;
        h->busy--;
        pthread_cond_broadcast(&h->finished);
        /* Cannot fail: the counter does not overflow at one increment per job. */
        ssize_t n = write(h->efd, &one, sizeof(one));
        (void)n;
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* Stops the first n workers (the others never started). */
static void stop_workers(struct hasher *h, unsigned n)
{
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(h->threads[i], NULL);
}

int hasher_start(struct hasher **out, unsigned threads)
{
    struct hasher *h;
    int rc;

    if (threads < 1 || threads > HASHER_THREADS_MAX)
        return err_set(FERRY_EINVAL, "hasher threads: %u, not 1 to %u", threads,
                       HASHER_THREADS_MAX);
    if (!(h = calloc(1, sizeof(*h))))
        return err_set(FERRY_ENOMEM, "hasher");
    h->pending_tail = &h->pending;
    h->done_tail = &h->done;
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->efd < 0) {
        rc = err_sys("eventfd");
        goto free_h;
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    pthread_cond_init(&h->finished, NULL);
    for (; h->nthreads < threads; h->nthreads++) {
        if ((rc = pthread_create(&h->threads[h->nthreads], NULL, worker, h)) != 0) {
            rc = err_set(FERRY_ESYS, "pthread_create(hasher): error %d", rc);
            goto stop_started;
        }
    }
    *out = h;
    return 0;

stop_started:
    stop_workers(h, h->nthreads);
    pthread_cond_destroy(&h->finished);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->lock);
    close(h->efd);
free_h:
    free(h);
    return rc;
}

struct hasher_job *hasher_stop(struct hasher *h)
{
    struct hasher_job *jobs;

    stop_workers(h, h->nthreads);
    jobs = hasher_take_done(h);
    pthread_cond_destroy(&h->finished);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->lock);
    close(h->efd);
    free(h);
    return jobs;
}

void hasher_wait_idle(struct hasher *h)
{
    pthread_mutex_lock(&h->lock);
    while (h->pending || h->busy)
        pthread_cond_wait(&h->finished, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

/* Moves the jobs of arg from the list at *head (tail *tail) to *out; how many. */
static uint32_t take_of(struct hasher_job **head, struct hasher_job ***tail, const void *arg,
                        struct hasher_job **out)
{
    struct hasher_job **pp = head, *job;
    uint32_t n = 0;

    while ((job = *pp)) {
        if (job->arg != arg) {
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        job->next = *out;
        *out = job;
        n++;
    }
    *tail = pp;
    return n;
}

struct hasher_job *hasher_cancel(struct hasher *h, const void *arg, uint32_t n, uint32_t *dropped)
{
    struct hasher_job *out = NULL;
    uint32_t got;

    pthread_mutex_lock(&h->lock);
    got = *dropped = take_of(&h->pending, &h->pending_tail, arg, &out);
    /* The others are running (a job's chunks at most: milliseconds) or done. */
    while ((got += take_of(&h->done, &h->done_tail, arg, &out)) < n)
        pthread_cond_wait(&h->finished, &h->lock);
    pthread_mutex_unlock(&h->lock);
    return out;
}

int hasher_fd(const struct hasher *h)
{
    return h->efd;
}

void hasher_submit(struct hasher *h, struct hasher_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&h->lock);
    *h->pending_tail = job;
    h->pending_tail = &job->next;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

struct hasher_job *hasher_take_done(struct hasher *h)
{
    struct hasher_job *jobs;
    uint64_t count;

    /* Resets readiness; EAGAIN only means no signal since the last take. */
    ssize_t n = read(h->efd, &count, sizeof(count));
    (void)n;
    pthread_mutex_lock(&h->lock);
    jobs = h->done;
    h->done = NULL;
    h->done_tail = &h->done;
    pthread_mutex_unlock(&h->lock);
    return jobs;
}

/*
 * hasher.h - leaves of object digests (common/digest.h), computed on worker threads so that a
 * seal of a 64 MiB object does not stall the event loop (and every other client) for tens of
 * milliseconds: the chunks of one object are cut into jobs that the threads share.
 *
 * Ownership and locking: a job belongs to the caller until hasher_submit(), to the hasher
 * until hasher_take_done() returns it. `pending` and `done` are guarded by `lock`; a worker
 * writes job->leaves and job->status before moving the job to `done` under the lock, so the
 * caller reads them after taking the job, with the mutex ordering the two. Jobs are
 * independent: they finish in any order. The bytes hashed must stay mapped until the job is
 * taken back, by hasher_take_done() or hasher_cancel() (the store takes back the jobs of an
 * object before it frees it; a receiver whose object went away only drops the result).
 */
#ifndef FERRY_HASHER_H
#define FERRY_HASHER_H

#include <stdint.h>

#include "common/digest.h"

struct hasher;

/* Leaves [first, first + n) of the object at bytes (size bytes in all) into leaves. */
struct hasher_job {
    const uint8_t *bytes;
    uint64_t size, first, n;
    uint8_t *leaves; /* n * DIGEST_LEN bytes: the result */
    int status;      /* 0, or FERRY_ESYS when OpenSSL failed */
    void *arg;
    struct hasher_job *next;
};

/* Jobs of one object are cut at this many chunks, so that the threads share it. */
#define HASHER_JOB_CHUNKS 4u
/* Worker threads per hasher (the machine's cores, at most). */
#define HASHER_THREADS_MAX 8u

/* threads: 1 to HASHER_THREADS_MAX workers. */
int hasher_start(struct hasher **out, unsigned threads);
/* Finishes the jobs submitted, stops the workers, frees h and returns the finished jobs that
 * were not taken yet. */
struct hasher_job *hasher_stop(struct hasher *h);
/* Blocks until every submitted job is finished (for callers that cannot go on without
 * them: a create that needs the space of objects still being hashed). */
void hasher_wait_idle(struct hasher *h);
/* Readable (an eventfd) when finished jobs wait in hasher_take_done(). */
int hasher_fd(const struct hasher *h);
void hasher_submit(struct hasher *h, struct hasher_job *job);
/* Takes back the n jobs of arg not taken yet: those still queued at once (*dropped of them:
 * never run), those running once they finish (waits for them: HASHER_JOB_CHUNKS chunks at
 * most), those done. After it, no worker reads their bytes. */
struct hasher_job *hasher_cancel(struct hasher *h, const void *arg, uint32_t n, uint32_t *dropped);
/* The finished jobs, oldest first (NULL when none); resets the fd's readiness. */
struct hasher_job *hasher_take_done(struct hasher *h);

#endif

/*
 * hasher.h - digests of large sealed objects, computed on a worker thread so that a seal of
 * a 64 MiB object does not stall the event loop (and every other client) for milliseconds.
 *
 * Ownership and locking: a job belongs to the caller until hasher_submit(), to the hasher
 * until hasher_take_done() returns it. `pending` and `done` are guarded by `lock`; the worker
 * writes job->digest before moving the job to `done` under the lock, so the caller reads it
 * after taking the job, with the mutex ordering the two. The bytes hashed must stay mapped
 * and unchanged until the job is taken back (the store pins the object meanwhile).
 */
#ifndef FERRY_HASHER_H
#define FERRY_HASHER_H

#include <stdint.h>
#include <xxhash.h>

struct hasher;

/* What a job does. A digest taken in pieces (HASHER_UPDATE, then HASHER_FINISH or
 * HASHER_DROP) lives in a state that only the worker touches once its first job is submitted:
 * jobs run one at a time in the order submitted, so its pieces go in in order. */
enum hasher_kind {
    HASHER_ONESHOT, /* digest = XXH3_64bits_withSeed(bytes, len, seed) */
    HASHER_UPDATE,  /* bytes[0..len) into state */
    HASHER_FINISH,  /* digest = the state's digest; the state is freed */
    HASHER_DROP,    /* the state is freed */
};

struct hasher_job {
    int kind; /* enum hasher_kind */
    const uint8_t *bytes;
    uint64_t len, seed;
    XXH3_state_t *state; /* HASHER_UPDATE, _FINISH, _DROP */
    uint64_t digest;     /* the result */
    void *arg;
    struct hasher_job *next;
};

int hasher_start(struct hasher **out);
/* Finishes the jobs submitted, stops the worker, frees h and returns the finished jobs that
 * were not taken yet. */
struct hasher_job *hasher_stop(struct hasher *h);
/* Blocks until every submitted job is finished (for callers that cannot go on without
 * them: a create that needs the space of objects still being hashed). */
void hasher_wait_idle(struct hasher *h);
/* Readable (an eventfd) when finished jobs wait in hasher_take_done(). */
int hasher_fd(const struct hasher *h);
void hasher_submit(struct hasher *h, struct hasher_job *job);
/* The finished jobs, oldest first (NULL when none); resets the fd's readiness. */
struct hasher_job *hasher_take_done(struct hasher *h);

#endif

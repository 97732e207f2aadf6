/* spill_io.c - the spill's worker threads: group writes in chunks, reads checked against the
 * digest, forgets, segment removal (spill_int.h has the locking rules). */
#include "store/spill_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"

static void signal_loop(struct spill *sp)
{
    uint64_t one = 1;
    /* Cannot fail: the counter does not overflow at one increment per task. */
    ssize_t n = write(sp->efd, &one, sizeof(one));
    (void)n;
}

/* Caller holds the lock. */
static void push_done_locked(struct spill *sp, struct task *t)
{
    t->next = NULL;
    *sp->done_tail = t;
    sp->done_tail = &t->next;
    signal_loop(sp);
}

static void push_done(struct spill *sp, struct task *t)
{
    pthread_mutex_lock(&sp->lock);
    push_done_locked(sp, t);
    pthread_mutex_unlock(&sp->lock);
}

void spill_io_queue(struct spill *sp, struct task *t)
{
    pthread_mutex_lock(&sp->lock);
    t->next = NULL;
    *sp->pending_tail = t;
    sp->pending_tail = &t->next;
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
}

/* Writes or reads all of [buf, buf + len) at off: 0, or -errno (-EIO for a short read). */
static int full_io(int fd, uint8_t *buf, uint64_t len, uint64_t off, int write_it)
{
    while (len) {
        ssize_t n = write_it ? pwrite(fd, buf, len, (off_t)off) : pread(fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        buf += n;
        len -= (uint64_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* ---- writes ---- */

/* Records the group's first failure. */
static void group_fail(struct spill *sp, struct grp *gr, int err, const char *what)
{
    pthread_mutex_lock(&sp->lock);
    if (gr->status == 0) {
        gr->status = err == -ENOSPC || err == -EDQUOT ? FERRY_ENOSPACE : FERRY_ESYS;
        snprintf(gr->why, sizeof(gr->why), "spill: %s %s/%08" PRIu32 ".seg at %" PRIu64 ": %s",
                 what, sp->dir, gr->seg->no, gr->off, strerror(-err));
    }
    pthread_mutex_unlock(&sp->lock);
}

/* Every chunk is written (or one failed): the header goes last, then the loop hears of it. */
static void group_finish(struct spill *sp, struct grp *gr)
{
    struct task *t = gr->start;
    int rc;

    if (gr->status == 0 && (rc = full_io(gr->seg->fd, gr->hdr, gr->hdr_len, gr->off, 1)) < 0)
        group_fail(sp, gr, rc, "writing the header of");
    if (gr->status != 0 && ftruncate(gr->seg->fd, (off_t)gr->off) < 0)
        log_warn("spill: cutting %08" PRIu32 ".seg back: %s", gr->seg->no, strerror(errno));
    free(gr->hdr);
    gr->hdr = NULL;
    t->kind = T_GROUP_DONE;
    t->grp = gr;
    t->status = gr->status;
    snprintf(t->why, sizeof(t->why), "%s", gr->why);
    push_done(sp, t);
}

/* Room first, so that a full disk fails the group before any byte is written. */
static void run_start(struct spill *sp, struct grp *gr)
{
    struct task *c, *next;

    if (fallocate(gr->seg->fd, 0, (off_t)gr->off, (off_t)gr->group_len) < 0 && errno != EOPNOTSUPP)
        group_fail(sp, gr, -errno, "reserving");
    if (gr->status != 0 || !gr->chunks) {
        for (c = gr->chunks; c; c = next) {
            next = c->next;
            free(c);
        }
        gr->chunks = NULL;
        group_finish(sp, gr);
        return;
    }
    for (c = gr->chunks, gr->chunks = NULL; c; c = next) {
        next = c->next;
        spill_io_queue(sp, c);
    }
}

static uint64_t job_len(const struct spill_job *job)
{
    return job->entry.data_size + job->entry.metadata_size;
}

/* Copies the part of the group's objects in [from, from + len) into buf, zeroes between. */
static void fill_chunk(const struct grp *gr, uint8_t *buf, uint64_t from, uint64_t len)
{
    uint64_t cursor = from, end = from + len;

    for (uint32_t i = 0; i < gr->n; i++) {
        const struct spill_job *job = gr->jobs[i];
        uint64_t ps = job->entry.payload_off;
        uint64_t pe = ps + job->entry.data_size + job->entry.metadata_size;
        uint64_t lo = ps > cursor ? ps : cursor, hi = pe < end ? pe : end;
        if (lo >= hi)
            continue;
        memset(buf + (cursor - from), 0, lo - cursor);
        memcpy(buf + (lo - from), job->mem + (lo - ps), hi - lo);
        cursor = hi;
    }
    memset(buf + (cursor - from), 0, end - cursor);
}

/* The part of [ps, pe) that can move straight between the arena and the file: blocks of
 * sp->align, for objects of SPILL_DIRECT_MIN bytes or more (their bytes are laid out so that the
 * file and memory agree modulo the alignment). 0 when there is none. */
static int direct_span(const struct spill *sp, uint64_t ps, uint64_t pe, uint64_t *d0, uint64_t *d1)
{
    if (!sp->direct || pe - ps < SPILL_DIRECT_MIN)
        return 0;
    *d0 = (ps + sp->align - 1) / sp->align * sp->align;
    *d1 = pe / sp->align * sp->align;
    return *d1 > *d0;
}

/* Writes [from, to) of the group: the aligned middles of large objects straight from the arena,
 * the rest (small objects, edges, gaps) through bounce. 0, or -errno. */
static int write_range(struct spill *sp, struct grp *gr, uint8_t *bounce, uint64_t from,
                       uint64_t to)
{
    uint64_t c = from, d0, d1;
    uint32_t i = 0;
    int rc = 0;

    if (sp->fault_write_delay_ms)
        usleep(sp->fault_write_delay_ms * 1000u);
    while (c < to && rc == 0) {
        uint64_t next = to; /* where the next direct span starts, or to */
        int direct = 0;
        while (i < gr->n && gr->jobs[i]->entry.payload_off + job_len(gr->jobs[i]) <= c)
            i++;
        for (uint32_t k = i; k < gr->n && gr->jobs[k]->entry.payload_off < to; k++) {
            const struct spill_job *job = gr->jobs[k];
            uint64_t ps = job->entry.payload_off;
            if (!direct_span(sp, ps, ps + job_len(job), &d0, &d1) || d1 <= c)
                continue;
            if (d0 <= c) {
                uint64_t hi = d1 < to ? d1 : to;
                rc = full_io(gr->seg->fd, job->mem + (c - ps), hi - c, gr->off + c, 1);
                c = hi;
                direct = 1;
            } else if (d0 < to) {
                next = d0;
            }
            break;
        }
        if (direct)
            continue;
        fill_chunk(gr, bounce, c, next - c);
        rc = full_io(gr->seg->fd, bounce, next - c, gr->off + c, 1);
        c = next;
    }
    return rc;
}

/* Whether a status that other workers may set is still 0 (read under the lock). */
static int still_ok(struct spill *sp, const int *status)
{
    int ok;

    pthread_mutex_lock(&sp->lock);
    ok = *status == 0;
    pthread_mutex_unlock(&sp->lock);
    return ok;
}

static void run_wchunk(struct spill *sp, struct task *t, uint8_t *bounce)
{
    struct grp *gr = t->grp;
    uint32_t left;
    int rc;

    if (still_ok(sp, &gr->status) &&
        (rc = write_range(sp, gr, bounce, t->from, t->from + t->len)) < 0)
        group_fail(sp, gr, rc, "writing");
    free(t);
    pthread_mutex_lock(&sp->lock);
    left = --gr->chunks_left;
    pthread_mutex_unlock(&sp->lock);
    if (left == 0)
        group_finish(sp, gr);
}

int spill_io_prepare(struct spill *sp, struct grp *gr, const struct spill_group *g,
                     const struct spill_entry *e, struct spill_job **jobs)
{
    struct task **tail = &gr->chunks;

    if (posix_memalign((void **)&gr->hdr, SPILL_BLOCK, g->hdr_len) != 0)
        goto fail;
    spill_hdr_encode(gr->hdr, g, e);
    if (sp->keyed && spill_hdr_sign(gr->hdr, g->hdr_len, sp->key, gr->seg->no, gr->off) < 0)
        goto fail;
    if (!(gr->jobs = malloc(g->n * sizeof(*jobs))) || !(gr->start = calloc(1, sizeof(*gr->start))))
        goto fail;
    memcpy(gr->jobs, jobs, g->n * sizeof(*jobs));
    for (uint32_t i = 0; i < g->n; i++)
        gr->jobs[i]->entry.payload_off = e[i].payload_off;
    gr->start->kind = T_START;
    gr->start->grp = gr;
    for (uint64_t from = g->hdr_len; from < g->group_len; from += SPILL_CHUNK) {
        struct task *c = calloc(1, sizeof(*c));
        if (!c)
            goto fail;
        c->kind = T_WCHUNK;
        c->grp = gr;
        c->from = from;
        c->len = g->group_len - from < SPILL_CHUNK ? g->group_len - from : SPILL_CHUNK;
        *tail = c;
        tail = &c->next;
        gr->chunks_left++;
    }
    return 0;

fail:
    while (gr->chunks) {
        struct task *c = gr->chunks;
        gr->chunks = c->next;
        free(c);
    }
    free(gr->start);
    free(gr->jobs);
    free(gr->hdr);
    gr->start = NULL;
    gr->jobs = NULL;
    gr->hdr = NULL;
    return err_set(FERRY_ENOMEM, "spill: a group of %u objects", g->n);
}

/* ---- reads ---- */

static void read_fail(struct spill *sp, struct spill_job *job, int status, const char *fmt,
                      const char *detail)
{
    pthread_mutex_lock(&sp->lock);
    if (job->status == 0) {
        job->status = status;
        snprintf(job->why, sizeof(job->why), fmt, detail);
    }
    pthread_mutex_unlock(&sp->lock);
}

/* The last chunk is in: the bytes must be the object's. */
static void read_finish(struct spill *sp, struct spill_job *job)
{
    uint64_t len = job_len(job), n = digest_leaves(len);
    uint8_t root[DIGEST_LEN], one[DIGEST_LEN] = {0}, *leaves;

    if (job->status)
        return;
    if (!(leaves = n > 1 ? malloc(n * DIGEST_LEN) : one)) {
        read_fail(sp, job, FERRY_ENOMEM, "%s: no memory for its leaves", "spill");
        return;
    }
    if (digest_leaves_of(job->mem, len, 0, n, leaves) < 0 ||
        digest_root(job->entry.data_size, job->entry.metadata_size, leaves, n, root) < 0 ||
        memcmp(root, job->entry.digest, DIGEST_LEN) != 0) {
        read_fail(sp, job, FERRY_EIO, "%s: its bytes on disk do not match its digest", "spill");
        if (leaves != one)
            free(leaves);
        return;
    }
    job->leaves = leaves != one ? leaves : NULL;
}

/* Reads [from, to) of the file (aligned) through bounce, keeping the object's part. */
static int read_bounced(struct spill_job *job, uint8_t *bounce, uint64_t from, uint64_t to)
{
    uint64_t start = job->file_off, end = start + job_len(job);
    uint64_t lo = from > start ? from : start, hi = to < end ? to : end;
    int rc = full_io(job->fd, bounce, to - from, from, 0);

    if (rc == 0 && hi > lo)
        memcpy(job->mem + (lo - start), bounce + (lo - from), hi - lo);
    return rc;
}

/* Reads [from, to) of the file: the object's aligned middle straight into the arena when its
 * destination agrees with the file modulo the alignment (the store places restores so), the
 * edges through bounce. 0, or -errno. */
static int read_range(struct spill *sp, struct spill_job *job, uint8_t *bounce, uint64_t from,
                      uint64_t to)
{
    uint64_t start = job->file_off, d0, d1;
    int rc = 0;

    if ((uintptr_t)job->mem % sp->align != start % sp->align ||
        !direct_span(sp, start, start + job_len(job), &d0, &d1) || d1 <= from || d0 >= to)
        return read_bounced(job, bounce, from, to);
    if (from < d0)
        rc = read_bounced(job, bounce, from, d0);
    if (rc == 0)
        rc = full_io(job->fd, job->mem + ((from > d0 ? from : d0) - start),
                     (to < d1 ? to : d1) - (from > d0 ? from : d0), from > d0 ? from : d0, 0);
    if (rc == 0 && to > d1)
        rc = read_bounced(job, bounce, d1, to);
    return rc;
}

static void run_rchunk(struct spill *sp, struct task *t, uint8_t *bounce)
{
    struct spill_job *job = t->job;
    struct task *done = NULL;
    int rc;

    if (still_ok(sp, &job->status) &&
        (rc = read_range(sp, job, bounce, t->from, t->from + t->len)) < 0)
        read_fail(sp, job, FERRY_EIO, "spill: reading its bytes: %s", strerror(-rc));
    pthread_mutex_lock(&sp->lock);
    if (--job->tasks_left == 0)
        done = t;
    pthread_mutex_unlock(&sp->lock);
    if (!done) {
        free(t);
        return;
    }
    read_finish(sp, job);
    done->kind = T_READ_DONE;
    push_done(sp, done);
}

int spill_io_read(struct spill *sp, struct spill_job *job)
{
    uint64_t len = job->entry.data_size + job->entry.metadata_size;
    uint64_t a = job->file_off / SPILL_BLOCK * SPILL_BLOCK, b = spill_round(job->file_off + len);
    struct task *list = NULL, **tail = &list, *t;
    uint32_t n = 0;

    if (b == a) /* no bytes: one empty chunk finishes it */
        b = a + SPILL_BLOCK;
    for (uint64_t from = a; from < b; from += SPILL_CHUNK, n++) {
        if (!(t = calloc(1, sizeof(*t)))) {
            while ((t = list)) {
                list = t->next;
                free(t);
            }
            return err_set(FERRY_ENOMEM, "spill: a read of %" PRIu64 " bytes", len);
        }
        t->kind = T_RCHUNK;
        t->job = job;
        t->from = from;
        t->len = b - from < SPILL_CHUNK ? b - from : SPILL_CHUNK;
        *tail = t;
        tail = &t->next;
    }
    job->tasks_left = n;
    while ((t = list)) {
        list = t->next;
        spill_io_queue(sp, t);
    }
    return 0;
}

/* ---- forgets and drops ---- */

/* Flags entry index deleted in its group's header (read, changed, written back whole). */
static int flag_deleted(struct spill *sp, struct grp *gr, uint32_t index)
{
    struct spill_entry *e = calloc(SPILL_ENTRIES_MAX, sizeof(*e));
    struct spill_group g;
    uint8_t *buf = NULL;
    int rc = -ENOMEM;

    if (!e || posix_memalign((void **)&buf, SPILL_BLOCK, gr->hdr_len) != 0)
        goto free_buffers;
    pthread_mutex_lock(&sp->hdr_lock);
    if ((rc = full_io(gr->seg->fd, buf, gr->hdr_len, gr->off, 0)) == 0) {
        /* With a key, a header changed since it was read at open is not signed again. */
        if (spill_hdr_decode_fixed(buf, gr->hdr_len, &g) < 0 || g.hdr_len != gr->hdr_len ||
            index >= g.n || spill_hdr_decode(buf, &g, e) < 0 ||
            (sp->keyed && spill_hdr_verify(buf, g.hdr_len, sp->key, gr->seg->no, gr->off) < 0)) {
            rc = -EBADMSG;
        } else {
            e[index].flags |= SPILL_ENTRY_DELETED;
            spill_hdr_encode(buf, &g, e);
            rc = sp->keyed && spill_hdr_sign(buf, g.hdr_len, sp->key, gr->seg->no, gr->off) < 0
                     ? -EBADMSG
                     : full_io(gr->seg->fd, buf, gr->hdr_len, gr->off, 1);
        }
    }
    pthread_mutex_unlock(&sp->hdr_lock);
free_buffers:
    free(buf);
    free(e);
    return rc;
}

/* Frees the blocks wholly inside [from, to) of fd. */
static void punch(int fd, uint64_t from, uint64_t to)
{
    from = spill_round(from);
    to = to / SPILL_BLOCK * SPILL_BLOCK;
    if (to > from)
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from,
                        (off_t)(to - from));
}

static void run_forget(struct spill *sp, struct task *t)
{
    struct grp *gr = t->grp;
    const struct spill_rec *r = &gr->recs[t->index];
    int rc = flag_deleted(sp, gr, t->index);

    if (rc < 0)
        log_warn("spill: flagging a deleted object in %s/%08" PRIu32 ".seg at %" PRIu64
                 ": %s (a restart may find it again)",
                 sp->dir, gr->seg->no, gr->off, strerror(-rc));
    if (t->whole)
        punch(gr->seg->fd, gr->off + gr->hdr_len, gr->off + gr->group_len);
    else
        punch(gr->seg->fd, gr->off + r->payload_off, gr->off + r->payload_off + r->len);
    push_done(sp, t);
}

static void run_drop(struct spill *sp, struct task *t)
{
    char name[32];

    snprintf(name, sizeof(name), "%08" PRIu32 ".seg", t->seg->no);
    if (unlinkat(sp->dir_fd, name, 0) < 0)
        log_warn("spill: removing %s/%s: %s", sp->dir, name, strerror(errno));
    close(t->seg->fd);
    t->seg->fd = -1;
    push_done(sp, t);
}

/* ---- the workers ---- */

static void run(struct spill *sp, struct task *t, uint8_t *bounce)
{
    switch (t->kind) {
    case T_START:
        run_start(sp, t->grp);
        break;
    case T_WCHUNK:
        run_wchunk(sp, t, bounce);
        break;
    case T_RCHUNK:
        run_rchunk(sp, t, bounce);
        break;
    case T_FORGET:
        run_forget(sp, t);
        break;
    case T_DROP:
        run_drop(sp, t);
        break;
    default:
        break;
    }
}

static void *worker(void *arg)
{
    struct spill *sp = arg;
    uint8_t *bounce = NULL;
    struct task *t;

    /* Without its buffer a worker takes nothing; the others do the work. */
    if (posix_memalign((void **)&bounce, SPILL_BLOCK, SPILL_CHUNK) != 0)
        return NULL;
    pthread_mutex_lock(&sp->lock);
    for (;;) {
        while (!sp->pending && !sp->stopping)
            pthread_cond_wait(&sp->wake, &sp->lock);
        if (!(t = sp->pending))
            break;
        if (!(sp->pending = t->next))
            sp->pending_tail = &sp->pending;
        sp->busy++;
        pthread_mutex_unlock(&sp->lock);
        run(sp, t, bounce);
        pthread_mutex_lock(&sp->lock);
        sp->busy--;
        if (!sp->pending && !sp->busy)
            pthread_cond_broadcast(&sp->idle);
    }
    pthread_mutex_unlock(&sp->lock);
    free(bounce);
    return NULL;
}

int spill_io_start(struct spill *sp)
{
    int rc;

    if ((sp->fault_write_delay_ms = fault_value("spill-write-delay-ms", 60000)))
        log_warn("spill: test fault on: each write waits %u ms", sp->fault_write_delay_ms);
    sp->pending_tail = &sp->pending;
    sp->done_tail = &sp->done;
    sp->jobs_done_tail = &sp->jobs_done;
    if ((sp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return err_sys("spill: eventfd");
    pthread_mutex_init(&sp->lock, NULL);
    pthread_mutex_init(&sp->hdr_lock, NULL);
    pthread_cond_init(&sp->wake, NULL);
    pthread_cond_init(&sp->idle, NULL);
    for (; sp->nthreads < SPILL_THREADS; sp->nthreads++) {
        if ((rc = pthread_create(&sp->threads[sp->nthreads], NULL, worker, sp)) != 0) {
            spill_io_stop(sp);
            return err_set(FERRY_ESYS, "spill: pthread_create: error %d", rc);
        }
    }
    return 0;
}

void spill_io_stop(struct spill *sp)
{
    pthread_mutex_lock(&sp->lock);
    sp->stopping = 1;
    pthread_cond_broadcast(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
    for (int i = 0; i < sp->nthreads; i++)
        pthread_join(sp->threads[i], NULL);
    sp->nthreads = 0;
    pthread_cond_destroy(&sp->idle);
    pthread_cond_destroy(&sp->wake);
    pthread_mutex_destroy(&sp->hdr_lock);
    pthread_mutex_destroy(&sp->lock);
    close(sp->efd);
    sp->efd = -1;
}

struct task *spill_io_take(struct spill *sp)
{
    struct task *list;
    uint64_t count;
    ssize_t n = read(sp->efd, &count, sizeof(count)); /* EAGAIN: no signal since the last */

    (void)n;
    pthread_mutex_lock(&sp->lock);
    list = sp->done;
    sp->done = NULL;
    sp->done_tail = &sp->done;
    pthread_mutex_unlock(&sp->lock);
    return list;
}

/* ---- the loop's side of completions ---- */

void spill_done_push(struct spill *sp, struct spill_job *job)
{
    job->next = NULL;
    *sp->jobs_done_tail = job;
    sp->jobs_done_tail = &job->next;
    signal_loop(sp);
}

struct spill_job *spill_take_done(struct spill *sp)
{
    struct task *t = spill_io_take(sp), *next;
    struct spill_job *jobs;

    for (; t; t = next) {
        next = t->next;
        spill_task_done(sp, t);
    }
    jobs = sp->jobs_done;
    sp->jobs_done = NULL;
    sp->jobs_done_tail = &sp->jobs_done;
    return jobs;
}

int spill_fd(const struct spill *sp)
{
    return sp->efd;
}

/* Every worker idle and nothing queued, then what they finished taken in (which may start the
 * next group): until nothing is left to do. */
void spill_wait_idle(struct spill *sp)
{
    for (;;) {
        struct task *t, *next;
        pthread_mutex_lock(&sp->lock);
        while (sp->pending || sp->busy)
            pthread_cond_wait(&sp->idle, &sp->lock);
        pthread_mutex_unlock(&sp->lock);
        if (!(t = spill_io_take(sp)))
            break;
        for (; t; t = next) {
            next = t->next;
            spill_task_done(sp, t);
        }
    }
}

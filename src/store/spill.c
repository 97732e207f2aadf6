/* spill.c - the spill directory: segments, groups, recovery and the loop's side of the I/O
 * (spill.h); the workers' side is spill_io.c. */
#include "store/spill_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/text.h"
#include "common/proto.h"
#include "common/size.h"

/* Segments a directory may hold (256 TiB of full ones): the list read at open is bounded. */
#define SPILL_SEGMENTS_MAX (1u << 20)
/* Files not named as segments whose names are logged at open; the rest are only counted. */
#define SPILL_IGNORED_LOGGED 8

/* ---- segments ---- */

/* Opens segment no relative to the directory, never through a link (O_NOFOLLOW) nor as a
 * terminal: the fd, or FERRY_ESYS. */
static int seg_open_fd(struct spill *sp, uint32_t no, int flags)
{
    char name[32];
    int fd;

    flags |= O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
    snprintf(name, sizeof(name), "%08" PRIu32 ".seg", no);
    fd = openat(sp->dir_fd, name, flags | (sp->direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && errno == EINVAL && sp->direct) {
        /* A file system without O_DIRECT (tmpfs before 6.6): the page cache, then. */
        sp->direct = 0;
        log_warn("spill: %s does not support O_DIRECT; spilling through the page cache", sp->dir);
        fd = openat(sp->dir_fd, name, flags, 0600);
    }
    if (fd < 0)
        return err_set(FERRY_ESYS, "spill: %s/%s: %s", sp->dir, name,
                       errno == ELOOP ? "a symbolic link, not followed" : strerror(errno));
    return fd;
}

static struct seg *seg_add(struct spill *sp, uint32_t no, int fd, uint64_t end)
{
    struct seg *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->no = no;
    s->fd = fd;
    s->end = end;
    s->next = sp->segs;
    sp->segs = s;
    if (no >= sp->next_seg)
        sp->next_seg = no + 1;
    return s;
}

static void seg_unlink_list(struct spill *sp, struct seg *s)
{
    for (struct seg **pp = &sp->segs; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            return;
        }
    }
}

/* A segment with nothing live and no task on it, other than the one written to, goes. */
static void seg_maybe_drop(struct spill *sp, struct seg *s)
{
    struct task *t;

    for (int l = 0; l < SPILL_LANES; l++)
        if (s == sp->active[l])
            return;
    if (s->groups || s->users || s->dropping)
        return;
    if (!(t = calloc(1, sizeof(*t))))
        return; /* kept: it is removed at the next start, when found empty */
    s->dropping = 1;
    s->users++;
    t->kind = T_DROP;
    t->seg = s;
    spill_io_queue(sp, t);
}

/* The segment of lane the next group of group_len bytes goes to: its active one while it has
 * room (or is empty), else a new one. */
static struct seg *seg_for(struct spill *sp, int lane, uint64_t group_len)
{
    struct seg *a = sp->active[lane];
    int fd;

    if (a && (a->end == 0 || a->end + group_len <= SPILL_SEGMENT_MAX))
        return a;
    if ((fd = seg_open_fd(sp, sp->next_seg, O_CREAT | O_EXCL)) < 0)
        return NULL;
    sp->active[lane] = seg_add(sp, sp->next_seg, fd, 0);
    if (!sp->active[lane]) {
        close(fd);
        sp->active[lane] = a;
        err_set(FERRY_ENOMEM, "spill: segment record");
        return NULL;
    }
    if (a)
        seg_maybe_drop(sp, a);
    return sp->active[lane];
}

/* ---- groups ---- */

static struct grp *grp_new(struct seg *s, uint64_t off, const struct spill_group *g)
{
    struct grp *gr = calloc(1, sizeof(*gr) + g->n * sizeof(struct spill_rec));

    if (!gr)
        return NULL;
    gr->seg = s;
    gr->off = off;
    gr->hdr_len = g->hdr_len;
    gr->group_len = g->group_len;
    gr->seq = g->seq;
    gr->n = g->n;
    gr->next = s->grps;
    if (gr->next)
        gr->next->prev = gr;
    s->grps = gr;
    return gr;
}

static void grp_free(struct grp *gr)
{
    if (gr->prev)
        gr->prev->next = gr->next;
    else
        gr->seg->grps = gr->next;
    if (gr->next)
        gr->next->prev = gr->prev;
    free(gr);
}

/* Frees every group of s (the segment is going): no need to unlink them one by one. */
void spill_free_groups(struct seg *s)
{
    struct grp *gr;

    while ((gr = s->grps)) {
        s->grps = gr->next;
        free(gr);
    }
}

/* A group with nothing live and no task on it is freed; its segment may go then. */
static void grp_maybe_free(struct spill *sp, struct grp *gr)
{
    struct seg *s = gr->seg;

    if (gr->live || gr->tasks)
        return;
    s->groups--;
    grp_free(gr);
    seg_maybe_drop(sp, s);
}

/* The bytes an entry counts for in disk_bytes: its payload, 64-byte aligned. */
static uint64_t entry_bytes(uint64_t len)
{
    return (len + 63) / 64 * 64;
}

uint64_t spill_rec_bytes(const struct spill_rec *r)
{
    return entry_bytes(r->len);
}

uint64_t spill_rec_seq(const struct spill_rec *r)
{
    return r->grp->seq;
}

uint64_t spill_rec_phase(const struct spill *sp, const struct spill_rec *r)
{
    return (r->grp->off + r->payload_off) % sp->align;
}

uint32_t spill_align(const struct spill *sp)
{
    return sp->align;
}

/* The alignment O_DIRECT needs of memory and file offsets here (statx), at least 512 and at
 * most a block; a block when the kernel does not say. */
static uint32_t dio_align(int fd)
{
    struct statx st;
    uint32_t a;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) < 0 || !(st.stx_mask & STATX_DIOALIGN) ||
        !st.stx_dio_mem_align)
        return SPILL_BLOCK;
    a = st.stx_dio_mem_align > st.stx_dio_offset_align ? st.stx_dio_mem_align
                                                       : st.stx_dio_offset_align;
    return a < 512 ? 512 : a > SPILL_BLOCK ? SPILL_BLOCK : a;
}

/* ---- writing ---- */

/* Lays out the next group from the queued jobs and hands it to the workers. */
static void group_start(struct spill *sp)
{
    struct spill_entry entries[SPILL_ENTRIES_MAX];
    struct spill_group g = {0};
    struct spill_job *job, *jobs[SPILL_ENTRIES_MAX];
    uint64_t bytes = 0, pos;
    struct grp *gr = NULL;
    struct seg *s;
    uint32_t n = 0;
    int lane = 0;

    while (lane < SPILL_LANES && sp->writing[lane])
        lane++;
    if (lane == SPILL_LANES) /* both busy: the next group starts when one is done */
        return;

    for (job = sp->queue; job && n < SPILL_ENTRIES_MAX; job = job->next) {
        uint64_t len = job->entry.data_size + job->entry.metadata_size;
        if (n && bytes + len > SPILL_GROUP_BYTES)
            break;
        entries[n] = job->entry;
        jobs[n++] = job;
        bytes += entry_bytes(len);
    }
    if (n == 0)
        return;
    g.n = n;
    g.seq = sp->next_seq;
    g.hdr_len = spill_hdr_len(entries, n);
    pos = g.hdr_len;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len = entries[i].data_size + entries[i].metadata_size;
        /* A large object starts where the file agrees with its memory modulo the alignment
         * (groups start on blocks): its middle is written without a copy. */
        if (len >= SPILL_DIRECT_MIN)
            pos += ((uintptr_t)jobs[i]->mem % sp->align + sp->align - pos % sp->align) % sp->align;
        entries[i].payload_off = pos;
        pos += entry_bytes(len);
    }
    g.group_len = spill_round(pos);
    if (!(s = seg_for(sp, lane, g.group_len)) || !(gr = grp_new(s, s->end, &g)) ||
        spill_io_prepare(sp, gr, &g, entries, jobs) < 0) {
        if (gr)
            grp_free(gr);
        /* Every queued write fails: none would start before the next write is asked for. */
        spill_fail_queue(sp, UINT32_MAX, ferry_errmsg());
        return;
    }
    /* Taken off the queue: they are the group's now. */
    sp->queue = jobs[n - 1]->next;
    if (!sp->queue)
        sp->queue_tail = &sp->queue;
    sp->next_seq++;
    s->end += g.group_len;
    s->groups++;
    s->users++;
    gr->lane = lane;
    sp->writing[lane] = gr;
    spill_io_queue(sp, gr->start);
}

int spill_write(struct spill *sp, struct spill_job *job)
{
    uint64_t len = job->entry.data_size + job->entry.metadata_size;
    uint64_t need = entry_bytes(len) + SPILL_BLOCK;
    char f[3][SIZE_FORMAT_LEN];

    if (sp->counters.disk_bytes + sp->queued_bytes + need > sp->max_bytes)
        return err_set(FERRY_ENOSPACE, "spill directory %s: %s used of %s (%s), %s more needed",
                       sp->dir,
                       size_format(sp->counters.disk_bytes + sp->queued_bytes, f[0], sizeof(f[0])),
                       size_format(sp->max_bytes, f[1], sizeof(f[1])), spill_bound_origin(sp),
                       size_format(need, f[2], sizeof(f[2])));
    job->kind = SPILL_JOB_WRITE;
    job->status = 0;
    job->rec = NULL;
    job->next = NULL;
    *sp->queue_tail = job;
    sp->queue_tail = &job->next;
    sp->queued_bytes += need;
    group_start(sp);
    return 0;
}

/* The group being written is done: its jobs get their records (or its failure). */
static void group_done(struct spill *sp, struct grp *gr, int status, const char *why)
{
    struct seg *s = gr->seg;

    sp->writing[gr->lane] = NULL;
    s->users--;
    for (uint32_t i = 0; i < gr->n; i++) {
        struct spill_job *job = gr->jobs[i];
        uint64_t len = job->entry.data_size + job->entry.metadata_size;
        sp->queued_bytes -= entry_bytes(len) + SPILL_BLOCK;
        job->status = status;
        if (status == 0) {
            gr->recs[i] = (struct spill_rec){
                .grp = gr, .index = i, .payload_off = job->entry.payload_off, .len = len};
            job->rec = &gr->recs[i];
            gr->live++;
            sp->counters.written_objects++;
            sp->counters.written_bytes += len;
            sp->counters.disk_bytes += entry_bytes(len);
        } else {
            snprintf(job->why, sizeof(job->why), "%s", why);
            sp->counters.write_failures++;
        }
        spill_done_push(sp, job);
    }
    free(gr->jobs);
    gr->jobs = NULL;
    if (status == 0) {
        gr->accounted = gr->group_len - spill_entries_bytes(gr);
        sp->counters.disk_bytes += gr->accounted;
    } else {
        s->end = gr->off; /* nothing after it was written: the chain goes on from here */
        s->groups--;
        grp_free(gr);
        gr = NULL;
    }
    if (gr && gr->live == 0)
        grp_maybe_free(sp, gr);
    if (sp->queue)
        group_start(sp);
}

/* Fails the first n queued jobs (their group could not be laid out). */
void spill_fail_queue(struct spill *sp, uint32_t n, const char *why)
{
    for (uint32_t i = 0; i < n && sp->queue; i++) {
        struct spill_job *job = sp->queue;
        uint64_t len = job->entry.data_size + job->entry.metadata_size;
        sp->queue = job->next;
        sp->queued_bytes -= entry_bytes(len) + SPILL_BLOCK;
        job->status = FERRY_ESYS;
        snprintf(job->why, sizeof(job->why), "%s", why);
        sp->counters.write_failures++;
        spill_done_push(sp, job);
    }
    if (!sp->queue)
        sp->queue_tail = &sp->queue;
}

/* ---- reading and forgetting ---- */

void spill_read(struct spill *sp, struct spill_job *job)
{
    struct spill_rec *r = job->rec;
    struct grp *gr = r->grp;

    job->kind = SPILL_JOB_READ;
    job->status = 0;
    job->why[0] = '\0';
    job->fd = gr->seg->fd;
    job->file_off = gr->off + r->payload_off;
    gr->tasks++;
    gr->seg->users++;
    job->grp = gr;
    if (spill_io_read(sp, job) < 0) {
        job->status = FERRY_ENOMEM;
        snprintf(job->why, sizeof(job->why), "%s", ferry_errmsg());
        spill_read_done(sp, job);
    }
}

void spill_read_done(struct spill *sp, struct spill_job *job)
{
    struct grp *gr = job->grp;

    gr->seg->users--;
    gr->tasks--;
    if (job->status == 0) {
        sp->counters.read_objects++;
        sp->counters.read_bytes += job->entry.data_size + job->entry.metadata_size;
    } else {
        sp->counters.read_failures++;
    }
    grp_maybe_free(sp, gr);
    spill_done_push(sp, job);
}

void spill_forget(struct spill *sp, struct spill_rec *r)
{
    struct grp *gr = r->grp;
    struct task *t;

    if (r->dead)
        return;
    r->dead = 1;
    gr->live--;
    sp->counters.disk_bytes -= entry_bytes(r->len);
    if (gr->live == 0)
        sp->counters.disk_bytes -= gr->accounted;
    if (!(t = calloc(1, sizeof(*t)))) {
        /* The entry stays live on disk: a restart would serve the deleted object again. */
        log_warn("spill: out of memory flagging a deleted object in %s", sp->dir);
        grp_maybe_free(sp, gr);
        return;
    }
    t->kind = T_FORGET;
    t->grp = gr;
    t->index = r->index;
    t->whole = gr->live == 0;
    gr->tasks++;
    gr->seg->users++;
    spill_io_queue(sp, t);
}

/* A forget or a drop is done (on the loop's thread). */
void spill_task_done(struct spill *sp, struct task *t)
{
    if (t->kind == T_FORGET) {
        t->grp->seg->users--;
        t->grp->tasks--;
        grp_maybe_free(sp, t->grp);
    } else if (t->kind == T_DROP) {
        seg_unlink_list(sp, t->seg);
        free(t->seg);
    } else if (t->kind == T_GROUP_DONE) {
        group_done(sp, t->grp, t->status, t->why);
    } else if (t->kind == T_READ_DONE) {
        spill_read_done(sp, t->job);
    }
    free(t);
}

/* ---- recovery ---- */

/* Cuts segment s at pos (a damaged group there), counting and saying so. */
static void seg_cut(struct spill *sp, struct seg *s, uint64_t pos, uint64_t size, const char *why)
{
    sp->counters.recovery_dropped++;
    log_warn("spill: %s/%08" PRIu32 ".seg: damaged group at offset %" PRIu64 " (%s): the %" PRIu64
             " bytes from there are dropped",
             sp->dir, s->no, pos, why, size - pos);
    if (ftruncate(s->fd, (off_t)pos) < 0)
        log_warn("spill: cutting %08" PRIu32 ".seg: %s", s->no, strerror(errno));
}

/* Whether buf starts a group header of another format version (a ferryd of another release
 * wrote it): its segment is left alone for that ferryd, not cut as damaged. */
static int other_version(const uint8_t *buf)
{
    uint64_t magic = 0, version = 0;

    for (int i = 7; i >= 0; i--) {
        magic = magic << 8 | buf[i];
        version = version << 8 | (i < 4 ? buf[8 + i] : 0);
    }
    return magic == SPILL_MAGIC && version != SPILL_VERSION;
}

/* Reads the group header at pos into buf (SPILL_HDR_MAX bytes, aligned) and checks it against
 * the file: 0, FERRY_EPROTO (damaged), FERRY_ENOSYS (another format version) or, with a key,
 * FERRY_EAUTH (not signed with it). */
static int read_group(struct spill *sp, struct seg *s, uint64_t pos, uint64_t size, uint8_t *buf,
                      struct spill_group *g, struct spill_entry *e)
{
    ssize_t n;
    int rc;

    if (size - pos < SPILL_BLOCK)
        return err_set(FERRY_EPROTO, "a partial block");
    if ((n = pread(s->fd, buf, SPILL_BLOCK, (off_t)pos)) != SPILL_BLOCK)
        return err_set(FERRY_EPROTO, "%s", n < 0 ? strerror(errno) : "short read");
    if ((rc = spill_hdr_decode_fixed(buf, SPILL_BLOCK, g)) < 0)
        return other_version(buf) ? err_set(FERRY_ENOSYS, "%s", ferry_errmsg()) : rc;
    if (g->group_len > size - pos)
        return err_set(FERRY_EPROTO, "a group of %" PRIu64 " bytes, %" PRIu64 " left in the file",
                       g->group_len, size - pos);
    if (g->seq == 0 || g->seq >= UINT64_MAX / 2) /* next_seq must not wrap */
        return err_set(FERRY_EPROTO, "group sequence %" PRIu64, g->seq);
    if (g->hdr_len > SPILL_BLOCK) {
        n = pread(s->fd, buf + SPILL_BLOCK, g->hdr_len - SPILL_BLOCK, (off_t)(pos + SPILL_BLOCK));
        if (n != (ssize_t)(g->hdr_len - SPILL_BLOCK))
            return err_set(FERRY_EPROTO, "%s", n < 0 ? strerror(errno) : "short read");
    }
    if ((rc = spill_hdr_decode(buf, g, e)) < 0)
        return rc;
    for (uint32_t i = 0; i < g->n; i++) /* names as a client could give them */
        if (e[i].name[0] && proto_check_name(e[i].name) < 0)
            return err_set(FERRY_EPROTO, "entry %" PRIu32 ": %s", i, ferry_errmsg());
    return sp->keyed ? spill_hdr_verify(buf, g->hdr_len, sp->key, s->no, pos) : 0;
}

/* Takes in the group just read at pos: its records, and found() for its live entries. */
static int take_group(struct spill *sp, struct seg *s, uint64_t pos, const struct spill_group *g,
                      const struct spill_entry *e, spill_found_fn *found, void *ctx)
{
    struct grp *gr = grp_new(s, pos, g);

    if (!gr)
        return err_set(FERRY_ENOMEM, "spill: group record");
    s->groups++;
    if (g->seq >= sp->next_seq)
        sp->next_seq = g->seq + 1;
    for (uint32_t i = 0; i < g->n; i++) {
        uint64_t len = e[i].data_size + e[i].metadata_size;
        gr->recs[i] =
            (struct spill_rec){.grp = gr, .index = i, .payload_off = e[i].payload_off, .len = len};
        if (e[i].flags & SPILL_ENTRY_DELETED) {
            gr->recs[i].dead = 1;
            continue;
        }
        gr->live++;
        sp->counters.recovered_objects++;
        sp->counters.disk_bytes += entry_bytes(len);
    }
    gr->accounted = g->group_len - spill_entries_bytes(gr);
    if (gr->live)
        sp->counters.disk_bytes += gr->accounted;
    for (uint32_t i = 0; i < g->n; i++) {
        if (!gr->recs[i].dead)
            found(ctx, sp, &e[i], &gr->recs[i]);
    }
    grp_maybe_free(sp, gr);
    return 0;
}

/* Walks segment s's chain twice: first checking every group (with a key, a group without its
 * MAC refuses the whole segment: FERRY_EAUTH, nothing taken, nothing cut; so does a group of
 * another format version: FERRY_ENOSYS), then taking the intact ones in; a damaged group ends
 * the chain and the segment is cut there. */
static int recover_segment(struct spill *sp, struct seg *s, uint64_t size, uint8_t *buf,
                           struct spill_entry *e, spill_found_fn *found, void *ctx)
{
    struct spill_group g;
    char why[256] = "";
    uint64_t pos = 0, end;
    int rc = 0;

    while (pos < size && (rc = read_group(sp, s, pos, size, buf, &g, e)) == 0)
        pos += g.group_len;
    if (pos < size && (rc == FERRY_EAUTH || rc == FERRY_ENOSYS))
        return rc;
    if (pos < size)
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
    for (end = pos, pos = 0; pos < end; pos += g.group_len) {
        if (read_group(sp, s, pos, size, buf, &g, e) < 0) /* changed since: the end */
            break;
        if ((rc = take_group(sp, s, pos, &g, e, found, ctx)) < 0)
            return rc;
    }
    if (pos < size)
        seg_cut(sp, s, pos, size, why[0] ? why : ferry_errmsg());
    s->end = pos;
    return 0;
}

uint64_t spill_entries_bytes(const struct grp *gr)
{
    uint64_t sum = 0;

    for (uint32_t i = 0; i < gr->n; i++)
        sum += entry_bytes(gr->recs[i].len);
    return sum;
}

/* NNNNNNNN.seg, eight digits exactly (strtoul would take spaces and signs: two names for one
 * segment). */
static int seg_number(const char *name, uint32_t *no)
{
    uint64_t v = 0;

    if (strlen(name) != 12 || strcmp(name + 8, ".seg") != 0)
        return -1;
    for (int i = 0; i < 8; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    if (v > UINT32_MAX - 1)
        return -1;
    *no = (uint32_t)v;
    return 0;
}

/* A file in the directory that is not a segment: counted, and named (escaped) in the log. */
static void ignore_file(struct spill *sp, const char *name)
{
    char esc[1024]; /* a d_name is at most 255 bytes, 4 per escaped byte */

    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, "LOCK") == 0)
        return;
    if (sp->counters.files_ignored++ < SPILL_IGNORED_LOGGED)
        log_warn("spill: %s: ignoring \"%s\": not a segment", sp->dir,
                 text_safe(name, esc, sizeof(esc)));
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The segment numbers in the directory, ascending: *out (free it), *n. */
static int list_segments(struct spill *sp, uint32_t **out, size_t *n)
{
    DIR *d = fdopendir(dup(sp->dir_fd));
    struct dirent *de;
    uint32_t *v = NULL, no;
    size_t cap = 0;

    *n = 0;
    if (!d)
        return err_set(FERRY_ESYS, "spill: reading %s: %s", sp->dir, strerror(errno));
    while ((de = readdir(d))) {
        if (seg_number(de->d_name, &no) < 0) {
            ignore_file(sp, de->d_name);
            continue;
        }
        if (*n == SPILL_SEGMENTS_MAX) {
            free(v);
            closedir(d);
            return err_set(FERRY_ENOSPACE, "spill: %s holds more than %u segments", sp->dir,
                           SPILL_SEGMENTS_MAX);
        }
        if (*n == cap) {
            uint32_t *nv = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return err_set(FERRY_ENOMEM, "spill: segment list");
            }
            v = nv;
        }
        v[(*n)++] = no;
    }
    closedir(d);
    if (sp->counters.files_ignored > SPILL_IGNORED_LOGGED)
        log_warn("spill: %s: %" PRIu64 " files in all ignored: not segments", sp->dir,
                 sp->counters.files_ignored);
    if (*n)
        qsort(v, *n, sizeof(*v), cmp_u32);
    *out = v;
    return 0;
}

/* A file found as a segment is taken only if it is what this daemon makes: a regular file of
 * its user's, with one link (not a way to a file elsewhere), that nobody else can write.
 * 0, or FERRY_EPERM with why. */
static int seg_check(int fd, struct stat *st)
{
    if (fstat(fd, st) < 0)
        return err_set(FERRY_ESYS, "fstat: %s", strerror(errno));
    if (!S_ISREG(st->st_mode) || st->st_uid != geteuid() || st->st_nlink != 1 ||
        (st->st_mode & (S_IWGRP | S_IWOTH)))
        return err_set(FERRY_EPERM,
                       "%s of uid %u, mode %04o, %ju links; a segment is a regular file of "
                       "uid %u with one link, writable by no one else",
                       S_ISREG(st->st_mode) ? "a file" : "not a regular file", (unsigned)st->st_uid,
                       (unsigned)(st->st_mode & 07777), (uintmax_t)st->st_nlink,
                       (unsigned)geteuid());
    return 0;
}

/* Segment no is refused (why in ferry_errmsg()): counted in *counter, logged, left alone. */
static void seg_refuse(struct spill *sp, uint32_t no, uint64_t *counter)
{
    (*counter)++;
    log_warn("spill: %s/%08" PRIu32 ".seg refused, left alone: %s", sp->dir, no, ferry_errmsg());
}

/* Recovers segment no: taken in, refused (left alone, counted, logged), or an error that stops
 * the daemon (memory). */
static int recover_one(struct spill *sp, uint32_t no, uint8_t *buf, struct spill_entry *e,
                       spill_found_fn *found, void *ctx)
{
    /* O_NONBLOCK: a FIFO planted as a segment does not hold the start. */
    int fd = seg_open_fd(sp, no, O_NONBLOCK), rc;
    struct stat st;
    struct seg *s;

    if (no >= sp->next_seg) /* never created anew, even when refused */
        sp->next_seg = no + 1;
    if (fd < 0 || seg_check(fd, &st) < 0) {
        seg_refuse(sp, no, &sp->counters.segments_refused);
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (!(s = seg_add(sp, no, fd, 0))) {
        close(fd);
        return err_set(FERRY_ENOMEM, "spill: segment record");
    }
    s->users++; /* not dropped while walked, when a group with nothing live is freed */
    rc = recover_segment(sp, s, (uint64_t)st.st_size, buf, e, found, ctx);
    s->users--;
    if (rc == FERRY_EAUTH || rc == FERRY_ENOSYS) {
        seg_refuse(sp, no,
                   rc == FERRY_EAUTH ? &sp->counters.segments_unauthentic
                                     : &sp->counters.segments_refused);
        seg_unlink_list(sp, s);
        close(fd);
        free(s);
        return 0;
    }
    if (rc == 0)
        seg_maybe_drop(sp, s);
    return rc;
}

static int recover(struct spill *sp, spill_found_fn *found, void *ctx)
{
    uint8_t *buf = NULL;
    struct spill_entry *e = calloc(SPILL_ENTRIES_MAX, sizeof(*e));
    uint32_t *nos = NULL;
    size_t n = 0;
    int rc;

    if (!e || posix_memalign((void **)&buf, SPILL_BLOCK, SPILL_HDR_MAX) != 0) {
        rc = err_set(FERRY_ENOMEM, "spill: recovery buffers");
        goto free_buffers;
    }
    if ((rc = list_segments(sp, &nos, &n)) < 0)
        goto free_buffers;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = recover_one(sp, nos[i], buf, e, found, ctx);
    free(nos);
free_buffers:
    free(buf);
    free(e);
    return rc;
}

/* ---- life cycle ---- */

/* The directory must be this daemon's alone: whoever else can write it can plant segments
 * (objects under ids of their choosing, without a key) or links to files that recovery would
 * open. Checked on what was opened, not on the path. */
static int check_dir(const char *dir, int fd)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return err_set(FERRY_ESYS, "--spill-dir %s: fstat: %s", dir, strerror(errno));
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return err_set(FERRY_EPERM,
                       "--spill-dir %s: mode %04o, owned by uid %u: it must be owned by ferryd's "
                       "user (uid %u) and writable by no one else; chown %u and chmod 0700 it, "
                       "or give ferryd a directory of its own",
                       dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                       (unsigned)geteuid(), (unsigned)geteuid());
    return 0;
}

static int open_dir(struct spill *sp, const char *dir)
{
    int rc;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return err_set(FERRY_ESYS, "--spill-dir %s: %s", dir, strerror(errno));
    sp->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sp->dir_fd < 0)
        return err_set(FERRY_ESYS, "--spill-dir %s: %s", dir,
                       errno == ELOOP ? "a symbolic link (give the directory itself)"
                                      : strerror(errno));
    if ((rc = check_dir(dir, sp->dir_fd)) < 0)
        return rc;
    sp->lock_fd =
        openat(sp->dir_fd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (sp->lock_fd < 0)
        return err_set(FERRY_ESYS, "--spill-dir %s: LOCK: %s", dir, strerror(errno));
    if (flock(sp->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return err_set(errno == EWOULDBLOCK ? FERRY_EBUSY : FERRY_ESYS, "--spill-dir %s: %s", dir,
                       errno == EWOULDBLOCK ? "another ferryd uses it" : strerror(errno));
    sp->align = dio_align(sp->lock_fd);
    return 0;
}

/* The file system's figures, for a bound from them (SPILL_FS_KEEP_DIV): read before recovery,
 * which then cannot fail after handing objects out for want of them. */
static int measure_fs(struct spill *sp)
{
    struct statvfs fs;

    if (fstatvfs(sp->dir_fd, &fs) < 0)
        return err_set(FERRY_ESYS, "--spill-dir %s: statvfs: %s", sp->dir, strerror(errno));
    sp->bound.from_fs = 1;
    sp->bound.fs_bytes = (uint64_t)fs.f_blocks * fs.f_frsize;
    sp->bound.fs_free = (uint64_t)fs.f_bavail * fs.f_frsize;
    return 0;
}

/* After recovery: what the directory holds (counted as used in fs_free) and the free space
 * beyond a tenth of the file system. */
static void bound_from_fs(struct spill *sp)
{
    uint64_t keep = sp->bound.fs_bytes / SPILL_FS_KEEP_DIV, avail = sp->bound.fs_free;

    sp->max_bytes = sp->counters.disk_bytes + (avail > keep ? avail - keep : 0);
}

int spill_open(struct spill **out, const char *dir, uint64_t max_bytes, const uint8_t *key,
               spill_found_fn *found, void *ctx)
{
    struct spill *sp = calloc(1, sizeof(*sp));
    int rc;

    if (!sp || !(sp->dir = strdup(dir))) {
        free(sp);
        return err_set(FERRY_ENOMEM, "spill");
    }
    sp->dir_fd = sp->lock_fd = -1;
    sp->max_bytes = max_bytes;
    sp->direct = 1;
    sp->next_seq = 1;
    sp->queue_tail = &sp->queue;
    if (key) {
        sp->keyed = 1;
        memcpy(sp->key, key, MAC_LEN);
    }
    if ((rc = open_dir(sp, dir)) < 0 || (!max_bytes && (rc = measure_fs(sp)) < 0) ||
        (rc = spill_io_start(sp)) < 0)
        goto close_spill;
    if ((rc = recover(sp, found, ctx)) < 0) {
        spill_close(sp);
        return rc;
    }
    if (!max_bytes)
        bound_from_fs(sp);
    sp->counters.direct = (uint64_t)sp->direct;
    *out = sp;
    return 0;

close_spill:
    if (sp->lock_fd >= 0)
        close(sp->lock_fd);
    if (sp->dir_fd >= 0)
        close(sp->dir_fd);
    free(sp->dir);
    explicit_bzero(sp->key, sizeof(sp->key));
    free(sp);
    return rc;
}

void spill_close(struct spill *sp)
{
    struct seg *s;
    struct spill_job *jobs;

    spill_wait_idle(sp);
    /* What came back is the caller's to have taken; what is left here is only internal. */
    jobs = spill_take_done(sp);
    (void)jobs;
    spill_io_stop(sp);
    while ((s = sp->segs)) {
        sp->segs = s->next;
        if (fdatasync(s->fd) < 0)
            log_warn("spill: syncing %08" PRIu32 ".seg: %s", s->no, strerror(errno));
        close(s->fd);
        spill_free_groups(s);
        free(s);
    }
    close(sp->lock_fd);
    close(sp->dir_fd);
    free(sp->dir);
    explicit_bzero(sp->key, sizeof(sp->key));
    free(sp);
}

uint64_t spill_queued_bytes(const struct spill *sp)
{
    return sp->queued_bytes;
}

uint64_t spill_max_bytes(const struct spill *sp)
{
    return sp->max_bytes;
}

const struct spill_bound *spill_bound(const struct spill *sp)
{
    return &sp->bound;
}

const char *spill_bound_origin(const struct spill *sp)
{
    return sp->bound.from_fs ? "its file system's free space at start less a tenth of it; "
                               "--spill-max sets it"
                             : "--spill-max";
}

const struct spill_counters *spill_counters(const struct spill *sp)
{
    return &sp->counters;
}

const char *spill_dir(const struct spill *sp)
{
    return sp->dir;
}

/*
 * spill_int.h - what spill.c (the loop's side) and spill_io.c (the workers) share.
 *
 * Locking: `lock` guards pending, done, busy and stopping, and the fields marked "locked"
 * below; hdr_lock serialises the read-modify-write of group headers (forgets). Everything
 * else belongs to the loop's thread. A task belongs to the queue, then to the worker running
 * it, then to the done list, then to the loop's thread, which frees it.
 */
#ifndef FERRY_SPILL_INT_H
#define FERRY_SPILL_INT_H

#include <pthread.h>

#include "common/mac.h"
#include "store/spill.h"

#define SPILL_LANES 2

struct grp;

struct seg {
    uint32_t no;
    int fd;
    uint64_t end;    /* where the next group goes */
    uint64_t groups; /* groups with live entries, or being written */
    uint32_t users;  /* tasks queued or running on fd */
    int dropping;    /* being removed */
    struct grp *grps;
    struct seg *next;
};

struct spill_rec {
    struct grp *grp;
    uint32_t index;
    uint64_t payload_off, len;
    int dead; /* forgotten (or flagged deleted on disk) */
};

enum task_kind { T_START = 1, T_WCHUNK, T_RCHUNK, T_FORGET, T_DROP, T_GROUP_DONE, T_READ_DONE };

struct task {
    int kind;
    struct grp *grp;       /* T_START, T_WCHUNK, T_FORGET, T_GROUP_DONE */
    struct spill_job *job; /* T_RCHUNK, T_READ_DONE */
    struct seg *seg;       /* T_DROP */
    uint64_t from, len;    /* T_WCHUNK: in the group; T_RCHUNK: in the file */
    uint32_t index;        /* T_FORGET: the entry */
    int whole;             /* T_FORGET: nothing is live in the group any more */
    int status;            /* T_GROUP_DONE */
    char why[256];
    struct task *next;
};

struct grp {
    struct seg *seg;
    uint64_t off, hdr_len, group_len, seq;
    uint32_t n, live;
    int lane;
    uint32_t tasks;          /* forgets and reads in flight */
    uint64_t accounted;      /* its header and padding's share of disk_bytes */
    struct grp *prev, *next; /* in seg->grps */
    /* While it is written. */
    uint8_t *hdr;
    struct spill_job **jobs;
    struct task *start, *chunks;
    uint32_t chunks_left; /* locked */
    int status;           /* locked */
    char why[256];        /* locked */
    struct spill_rec recs[];
};

struct spill {
    char *dir;
    int dir_fd, lock_fd, efd;
    uint64_t max_bytes; /* always set: given, or from the file system (bound) */
    struct spill_bound bound;
    int direct;
    int keyed;                     /* group headers are signed with key */
    uint8_t key[MAC_LEN];          /* spill_open's */
    uint32_t align;                /* of O_DIRECT's memory and offsets: 512 to SPILL_BLOCK */
    uint32_t fault_write_delay_ms; /* test hook (spill-write-delay-ms): a slow disk */
    struct seg *segs;
    /* Two groups are written at once, each at the end of its own segment (a lane), so that a
     * failed group is always its segment's last: the chain never has a hole. */
    struct seg *active[SPILL_LANES];
    uint32_t next_seg;
    uint64_t next_seq;
    struct spill_job *queue, **queue_tail; /* writes not yet in a group */
    uint64_t queued_bytes;                 /* of queue and the group being written */
    struct grp *writing[SPILL_LANES];
    struct spill_job *jobs_done, **jobs_done_tail;
    struct spill_counters counters;
    pthread_t threads[SPILL_THREADS];
    int nthreads;
    pthread_mutex_t lock, hdr_lock;
    pthread_cond_t wake, idle;
    struct task *pending, **pending_tail; /* locked */
    struct task *done, **done_tail;       /* locked */
    int busy, stopping;                   /* locked */
};

int spill_io_start(struct spill *sp);
void spill_io_stop(struct spill *sp);
void spill_io_queue(struct spill *sp, struct task *t);
/* Encodes gr's header and makes its tasks (gr->start first): FERRY_ENOMEM. */
int spill_io_prepare(struct spill *sp, struct grp *gr, const struct spill_group *g,
                     const struct spill_entry *e, struct spill_job **jobs);
/* Queues the chunks of a read (job->file_off, the entry's sizes and digest set). */
int spill_io_read(struct spill *sp, struct spill_job *job);
/* Takes the workers' finished tasks. */
struct task *spill_io_take(struct spill *sp);

void spill_done_push(struct spill *sp, struct spill_job *job);
void spill_task_done(struct spill *sp, struct task *t);
void spill_read_done(struct spill *sp, struct spill_job *job);
void spill_fail_queue(struct spill *sp, uint32_t n, const char *why);
uint64_t spill_entries_bytes(const struct grp *gr);
void spill_free_groups(struct seg *s);

#endif

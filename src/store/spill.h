/*
 * spill.h - a spill directory: object records in segment files (spill_fmt.h), written and read
 * by worker threads so that the event loop never waits on the disk.
 *
 * Files: NNNNNNNN.seg, at most SPILL_SEGMENT_MAX bytes each unless one object is larger (then
 * its group is the segment's only one), so neither tiny files nor one huge file appear;
 * objects written together share a group (up to SPILL_GROUP_BYTES or SPILL_ENTRIES_MAX).
 * A LOCK file, held with flock, keeps a second daemon out of the directory.
 *
 * Threads and ownership: everything here belongs to the loop's thread except the tasks, which
 * the SPILL_THREADS workers take from `pending` and put on `done` under `lock`. A job belongs to
 * the caller until spill_write/spill_read, to the spill until spill_take_done returns it.
 * Up to SPILL_LANES (2) groups are written at a time, each to a segment of its own (its chunks
 * in parallel); reads and forgets run beside them.
 * A write's bytes (job->mem) must stay mapped and unchanged, and a read's destination unused,
 * until the job comes back. Records (struct spill_rec) belong to the spill; the caller keeps
 * the pointer until it calls spill_forget (the object is deleted) or spill_close.
 *
 * Durability: a group's header is written after its bytes (kill -9 safe, see spill_fmt.h).
 * Segments are fdatasync'd at spill_close only, not per group nor when full: after a power
 * loss a group whose header reached the disk before its bytes is caught by the digest check
 * when it is read, and never served.
 */
#ifndef FERRY_SPILL_H
#define FERRY_SPILL_H

#include <stdint.h>

#include "store/spill_fmt.h"

#define SPILL_SEGMENT_MAX (256ull << 20)
#define SPILL_GROUP_BYTES (32ull << 20) /* a group closes at this many bytes of objects */
#define SPILL_CHUNK (4u << 20)          /* the unit of one pwrite/pread */
#define SPILL_THREADS 4
/* Objects this large move between the arena and the disk without a copy, but for their edges. */
#define SPILL_DIRECT_MIN (256u << 10)

struct spill;
struct spill_rec; /* one object's entry on disk */
struct grp;

struct spill_counters {
    uint64_t written_objects, written_bytes; /* objects and their bytes written */
    uint64_t read_objects, read_bytes;       /* restored intact */
    uint64_t write_failures, read_failures;  /* objects */
    uint64_t recovered_objects;              /* found at open */
    uint64_t recovery_dropped;               /* groups or entries found damaged at open */
    uint64_t segments_refused;               /* at open: not a regular file of ours with one link */
    uint64_t segments_unauthentic;           /* at open, with a key: a group without its MAC */
    uint64_t files_ignored;                  /* at open: not named as a segment */
    uint64_t disk_bytes;                     /* gauge: bytes of groups with live objects */
    uint64_t direct;                         /* gauge: 1 when files use O_DIRECT */
};

enum spill_job_kind { SPILL_JOB_WRITE = 1, SPILL_JOB_READ = 2 };

struct spill_job {
    int kind;
    struct spill_entry entry; /* the object's record (payload_off is set by the spill) */
    uint8_t *mem;             /* write: the object's bytes; read: where they go */
    struct spill_rec *rec;    /* read: the record; write: the new one (NULL if it failed) */
    int status;               /* 0, or FERRY_ENOSPACE, FERRY_ESYS, FERRY_EIO */
    uint8_t *leaves;          /* read, status 0: the bytes' leaves (malloc'd; NULL for one
                               * chunk), the caller's to keep or free */
    char why[256];            /* what failed, with the file and offset */
    void *arg;                /* the caller's */
    /* The spill's. */
    struct spill_job *next;
    uint64_t file_off; /* read: the aligned range [file_off, file_off + file_len) read */
    uint64_t file_len;
    uint32_t tasks_left; /* guarded by the spill's lock */
    int fd;
    struct grp *grp;
};

/* Found at open: an object's entry and its record. */
typedef void spill_found_fn(void *ctx, struct spill *sp, const struct spill_entry *e,
                            struct spill_rec *r);

/* Without a bound given, the directory may hold what it holds at open and what its file system
 * has free then for an unprivileged user (root's reserve stays free too), less a tenth of the
 * file system (1 / SPILL_FS_KEEP_DIV): whoever fills the store through the socket cannot fill a
 * file system others use (logs, the system), and a disk 90 % full is where alerts start. */
#define SPILL_FS_KEEP_DIV 10

/* Where the directory's bound came from (spill_open). */
struct spill_bound {
    int from_fs;       /* 1: from the file system (no bound given) */
    uint64_t fs_bytes; /* from_fs: the file system's size at open */
    uint64_t fs_free;  /* from_fs: its free space for an unprivileged user at open */
};

/* Opens (creating it, 0700, if needed) the directory, takes its lock, reads every segment's chain
 * and calls found() for each live entry (a duplicate id: the newest group's, the other
 * forgotten). The directory must be owned by the euid and writable by no one else (FERRY_EPERM
 * otherwise: whoever can write it can plant objects, or links that recovery would follow).
 * Everything read from it is hostile: a file that is not a regular file of ours with one link
 * and no write permission for others is refused (left alone, counted, logged); a damaged group
 * ends its segment's chain: the segment is cut there and the loss counted and logged.
 * key: NULL, or MAC_LEN bytes (derived from the cluster secret; copied): every group header is
 * signed with it, and a segment with a group whose MAC fails is refused whole and left alone.
 * max_bytes: the most the directory may hold (0: from its file system, SPILL_FS_KEEP_DIV). */
int spill_open(struct spill **out, const char *dir, uint64_t max_bytes, const uint8_t *key,
               spill_found_fn *found, void *ctx);
/* Waits for every job and task, syncs the files and frees the spill; records become invalid. */
void spill_close(struct spill *sp);

/* Readable (an eventfd) when jobs are done. */
int spill_fd(const struct spill *sp);

/* Queues the write of job->entry's object from job->mem: FERRY_ENOSPACE (detail with the
 * figures) when the directory's limit has no room for it, nothing queued then. */
int spill_write(struct spill *sp, struct spill_job *job);
/* Queues the read of job->rec into job->mem; the bytes are checked against the digest (their
 * leaves, computed for that, come back in job->leaves). */
void spill_read(struct spill *sp, struct spill_job *job);
/* The record's object is gone: its entry is flagged deleted on disk, its bytes' blocks freed,
 * and a segment left with nothing live removed. r is invalid after. */
void spill_forget(struct spill *sp, struct spill_rec *r);

/* Finished jobs, oldest first, or NULL; resets the fd's readiness. */
struct spill_job *spill_take_done(struct spill *sp);

/* Blocks until no job or task is queued or running (the daemon is stopping). */
void spill_wait_idle(struct spill *sp);

/* Bytes of the directory the object's record takes (its share of disk_bytes). */
uint64_t spill_rec_bytes(const struct spill_rec *r);
/* The record's group's sequence number: of two records of one id, the larger is newer. */
uint64_t spill_rec_seq(const struct spill_rec *r);
/* Where restores should place a record's object so that its middle is read without a copy:
 * at an arena offset equal to spill_rec_phase() modulo spill_align(). */
uint64_t spill_rec_phase(const struct spill *sp, const struct spill_rec *r);
uint32_t spill_align(const struct spill *sp);
/* Bytes queued or being written. */
uint64_t spill_queued_bytes(const struct spill *sp);
uint64_t spill_max_bytes(const struct spill *sp);
const struct spill_bound *spill_bound(const struct spill *sp);
/* What set the bound, for messages: "--spill-max", or the file system's figures and how to
 * set another. */
const char *spill_bound_origin(const struct spill *sp);
const struct spill_counters *spill_counters(const struct spill *sp);
const char *spill_dir(const struct spill *sp);

#endif

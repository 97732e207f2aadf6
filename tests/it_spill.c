/*
 * it_spill.c - ferryd --spill-dir on a 16 MiB arena: four arenas of objects read back
 * bit-exact, restores of concurrent readers, a reader's reference against spilling, restarts
 * (after --persist-on-exit, after kill -9 in the middle of spilling), deletes, the
 * --spill-max limit, a full disk (a tmpfs) and damaged files.
 */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define ARENA "16M"
#define MIB (1u << 20)

/* A daemon with its spill directory in its own temporary directory. */
struct spilld {
    struct ferryd d;
    char spill[160];
    const char *args[12];
};

/* Starts s->d (h_daemon_init done, or not yet: first) on s->spill with extra options. */
static void spill_start(struct spilld *s, const char *const *extra)
{
    size_t n = 0;

    if (!s->d.dir[0]) {
        h_daemon_init(&s->d);
        snprintf(s->spill, sizeof(s->spill), "%s/spill", s->d.dir);
    }
    s->args[n++] = "--spill-dir";
    s->args[n++] = s->spill;
    for (; extra && *extra && n + 1 < sizeof(s->args) / sizeof(s->args[0]); extra++)
        s->args[n++] = *extra;
    s->args[n] = NULL;
    h_daemon_start(&s->d, ARENA, s->args);
}

static void spill_done(struct spilld *s)
{
    if (s->d.pid > 0)
        h_daemon_stop(&s->d);
    h_daemon_cleanup(&s->d);
}

/* n objects "<prefix>i" of size bytes (and 64 bytes of metadata), patterned by id. */
static void put_many(ferry_client *c, const char *prefix, int n, uint64_t size)
{
    for (int i = 0; i < n; i++) {
        ferry_id id = h_idf("%s%d", prefix, i);
        int rc = h_put_direct(c, &id, size, 64);
        if (rc != FERRY_OK)
            fail_msg("put %s%d: %s: %s", prefix, i, ferry_strerror(rc), ferry_errmsg());
    }
}

static void check_many(ferry_client *c, const char *prefix, int n, uint64_t size)
{
    for (int i = 0; i < n; i++) {
        ferry_id id = h_idf("%s%d", prefix, i);
        h_assert_object(c, &id, size, 64);
    }
}

/* Waits (5 s at most) until the daemon has written nothing for 100 ms: its counters hold. */
static void settle(ferry_client *c)
{
    uint64_t last = UINT64_MAX;

    for (int i = 0; i < 50; i++) {
        uint64_t now = h_stats(c).spill_writes;
        if (now == last)
            return;
        last = now;
        h_sleep_ms(100);
    }
    fail_msg("the daemon kept writing to its spill directory for 5 s");
}

static int location(ferry_client *c, const ferry_id *id)
{
    int present = -1;
    H_OK(ferry_contains(c, id, &present));
    return present;
}

/* Four arenas of 1 MiB objects, and small ones between them: every one comes back bit-exact,
 * nothing is evicted, the early ones were spilled (ls and contains say so) and restored. */
static void spilling_keeps_four_arenas_of_objects_bit_exact(void **state)
{
    struct spilld s = {0};
    ferry_object_info info;

    spill_start(&s, NULL);
    ferry_client *c = h_connect(&s.d);
    put_many(c, "big", 64, MIB);
    put_many(c, "small", 300, 3000);
    ferry_id first = h_id("big0");
    assert_int_equal(location(c, &first), FERRY_ON_DISK);
    assert_int_equal(h_list_find(c, &first, &info), 1);
    assert_int_equal(info.state, FERRY_STATE_SPILLED);
    check_many(c, "big", 64, MIB);
    check_many(c, "small", 300, 3000);
    ferry_stats st = h_stats(c);
    assert_int_equal(st.evicted_objects, 0);
    assert_int_equal(st.sealed_objects, 364);
    assert_true(st.spill_writes >= 48);
    assert_true(st.restores >= 48);
    assert_int_equal(st.restore_failures, 0);
    assert_true(st.spill_disk_bytes >= 48ull * MIB);
    assert_true(st.used_bytes <= 16ull * MIB);
    /* A delete of a spilled object frees its disk space. */
    ferry_id last_small = h_id("small299");
    assert_int_equal(location(c, &last_small), FERRY_IN_MEMORY);
    put_many(c, "more", 16, MIB); /* pushes big1 back to disk */
    ferry_id one = h_id("big1");
    assert_int_equal(location(c, &one), FERRY_ON_DISK);
    settle(c);
    uint64_t before = h_stats(c).spill_disk_bytes;
    H_OK(ferry_delete(c, &one));
    assert_int_equal(h_contains(c, &one), 0);
    assert_true(h_stats(c).spill_disk_bytes <= before - MIB);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

struct reader {
    struct ferryd *d;
    ferry_id id;
    int ok;
};

static void *read_spilled(void *arg)
{
    struct reader *r = arg;
    ferry_client *c;
    ferry_buffer b;

    if (ferry_connect(r->d->sock, &c) != FERRY_OK)
        return NULL;
    if (ferry_get(c, &r->id, 1, 10000, &b) == FERRY_OK && b.status == FERRY_OK &&
        b.data_size == 4 * MIB && h_check(b.data, b.data_size, h_seed(&r->id)) == -1)
        r->ok = 1;
    ferry_release(c, &r->id);
    ferry_disconnect(c);
    return NULL;
}

/* Eight clients get one spilled object at once: one restore serves them all. A reference held
 * by a reader keeps its object in memory while the arena is refilled twice over. */
static void concurrent_readers_share_one_restore_and_a_reference_wins(void **state)
{
    struct spilld s = {0};
    struct reader r[8];
    pthread_t t[8];
    ferry_buffer held;

    spill_start(&s, NULL);
    ferry_client *c = h_connect(&s.d);
    put_many(c, "q", 12, 4 * MIB);
    ferry_id q0 = h_id("q0");
    assert_int_equal(location(c, &q0), FERRY_ON_DISK);
    uint64_t restores = h_stats(c).restores;
    for (int i = 0; i < 8; i++) {
        r[i] = (struct reader){.d = &s.d, .id = q0};
        assert_int_equal(pthread_create(&t[i], NULL, read_spilled, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_true(r[i].ok);
    }
    assert_int_equal(h_stats(c).restores, restores + 1);

    ferry_id q1 = h_id("q1");
    H_OK(ferry_get(c, &q1, 1, 10000, &held));
    put_many(c, "w", 8, 4 * MIB);
    assert_int_equal(location(c, &q1), FERRY_IN_MEMORY);
    assert_int_equal(h_check(held.data, held.data_size, h_seed(&q1)), -1);
    H_OK(ferry_release(c, &q1));
    check_many(c, "w", 8, 4 * MIB);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* --persist-on-exit: after SIGTERM and a restart on the same directory every object is back,
 * names too; a deleted one stays deleted. */
static void persist_on_exit_brings_every_object_back(void **state)
{
    static const char *const persist[] = {"--persist-on-exit", NULL};
    struct spilld s = {0};
    ferry_object_info info;

    spill_start(&s, persist);
    ferry_client *c = h_connect(&s.d);
    put_many(c, "p", 40, MIB);
    put_many(c, "t", 50, 1000);
    ferry_id gone = h_id("p3"), named = h_id("t7");
    H_OK(ferry_delete(c, &gone));
    H_OK(ferry_set_name(c, &named, "seventh"));
    ferry_disconnect(c);
    h_daemon_stop(&s.d);

    spill_start(&s, persist);
    c = h_connect(&s.d);
    ferry_stats st = h_stats(c);
    assert_int_equal(st.spill_recovered_objects, 89);
    assert_int_equal(st.sealed_objects, 89);
    assert_int_equal(st.spill_recovery_dropped, 0);
    assert_int_equal(h_contains(c, &gone), 0);
    assert_int_equal(h_list_find(c, &named, &info), 1);
    assert_string_equal(info.name, "seventh");
    for (int i = 0; i < 40; i++) {
        ferry_id id = h_idf("p%d", i);
        if (i != 3)
            h_assert_object(c, &id, MIB, 64);
    }
    check_many(c, "t", 50, 1000);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* kill -9 while objects are being spilled, five times at different moments: whatever comes back
 * after a restart is whole and verified (a get checks the digest), nothing else is listed. */
static void kill_during_spilling_leaves_nothing_half_written(void **state)
{
    struct spilld s = {0};

    for (int round = 0; round < 5; round++) {
        spill_start(&s, NULL);
        ferry_client *c = h_connect(&s.d);
        int n = 0;
        /* Fill past the spill mark, then kill once writes are under way. */
        for (; n < 24 + 3 * round; n++) {
            ferry_id id = h_idf("r%d-%d", round, n);
            H_OK(h_put_direct(c, &id, 2 * MIB, 64));
        }
        h_daemon_kill(&s.d);
        ferry_disconnect(c);

        spill_start(&s, NULL);
        c = h_connect(&s.d);
        ferry_object_info *objs;
        size_t count;
        H_OK(ferry_list(c, &objs, &count));
        assert_true(count > 0);
        for (size_t i = 0; i < count; i++) {
            ferry_buffer b;
            H_OK(ferry_get(c, &objs[i].id, 1, 10000, &b));
            assert_int_equal(b.status, FERRY_OK);
            assert_int_equal(h_check(b.data, b.data_size, h_seed(&objs[i].id)), -1);
            H_OK(ferry_release(c, &objs[i].id));
        }
        ferry_free(objs);
        ferry_stats st = h_stats(c);
        assert_int_equal(st.restore_failures, 0);
        printf("round %d: %d put, %zu back after kill -9, %" PRIu64 " damaged groups dropped\n",
               round, n, count, st.spill_recovery_dropped);
        ferry_disconnect(c);
        h_daemon_stop(&s.d);
    }
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* --spill-max reached: a create that needs room fails with ENOSPACE naming memory and disk,
 * and what was spilled before still reads back. */
/* Creates that wait for room behind a slow disk (spill-write-delay-ms) leave the loop asleep:
 * its busy turns stay within a few per request. A parked create was scheduled again every
 * turn and the loop never slept: six 6 MiB puts made 12,105 epoll_waits, against 30 with room
 * to spare. */
static void creates_waiting_for_room_leave_the_loop_asleep(void **state)
{
    enum { PUTS = 6, TURNS_PER_PUT = 20 };
    struct spilld s = {0};

    setenv("FERRY_FAULT", "spill-write-delay-ms=200", 1);
    spill_start(&s, NULL);
    unsetenv("FERRY_FAULT");
    ferry_client *c = h_connect(&s.d);
    ferry_stats s0 = h_stats(c);
    put_many(c, "slow-disk-", PUTS, 6 * MIB);
    ferry_stats s1 = h_stats(c);
    uint64_t busy = s1.loop_busy_turns - s0.loop_busy_turns;
    printf("%d puts of 6 MiB behind a slow disk: %llu creates waited, %llu loop turns, %llu "
           "busy\n",
           PUTS, (unsigned long long)(s1.creates_waited - s0.creates_waited),
           (unsigned long long)(s1.loop_turns - s0.loop_turns), (unsigned long long)busy);
    assert_true(s1.creates_waited > s0.creates_waited); /* they did wait */
    if (busy > PUTS * TURNS_PER_PUT)
        fail_msg("%llu busy loop turns for %d puts: the loop spun while creates waited",
                 (unsigned long long)busy, PUTS);
    check_many(c, "slow-disk-", PUTS, 6 * MIB);
    ferry_disconnect(c);
    spill_done(&s);
    (void)state;
}

static void spill_max_reached_fails_creates_and_damages_nothing(void **state)
{
    static const char *const max[] = {"--spill-max", "12M", NULL};
    struct spilld s = {0};
    int rc = FERRY_OK, n = 0;

    spill_start(&s, max);
    ferry_client *c = h_connect(&s.d);
    for (; n < 64 && rc == FERRY_OK; n++) {
        ferry_id id = h_idf("m%d", n);
        rc = h_put_direct(c, &id, MIB, 64);
    }
    assert_int_equal(rc, FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "arena"));
    assert_non_null(strstr(ferry_errmsg(), "spill directory"));
    assert_true(n > 16 && n < 40);
    ferry_stats st = h_stats(c);
    assert_true(st.spill_disk_bytes <= 12ull * MIB);
    assert_int_equal(st.evicted_objects, 0);
    /* The arena is full of objects that cannot be written: deleting the newest eight makes
     * room to read the spilled ones back. */
    n--; /* objects stored: m0 .. m(n-1) */
    for (int i = n - 8; i < n; i++) {
        ferry_id id = h_idf("m%d", i);
        H_OK(ferry_delete(c, &id));
    }
    check_many(c, "m", n - 8, MIB);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* Mounts a tmpfs of size (mount's form: "12m") on s->spill, made in s->d's new directory, in a
 * mount namespace of this test process (the daemon inherits it; the mount goes with the
 * namespace): 0, or the errno that kept it from being mounted (s->d is cleaned up then). */
static int mount_disk(struct spilld *s, const char *size)
{
    char opts[64];
    int err;

    h_daemon_init(&s->d);
    snprintf(s->spill, sizeof(s->spill), "%s/spill", s->d.dir);
    snprintf(opts, sizeof(opts), "size=%s,mode=0700", size);
    if (mkdir(s->spill, 0700) == 0 && unshare(CLONE_NEWNS) == 0 &&
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
        mount("tmpfs", s->spill, "tmpfs", 0, opts) == 0)
        return 0;
    err = errno;
    h_daemon_cleanup(&s->d);
    return err;
}

/* The disk itself full: a 12 MiB tmpfs mounted on the spill directory in a mount namespace of
 * this test process (the daemon inherits it). Creates that need room fail with ENOSPACE and
 * both figures, the failed writes are counted, and what was written reads back. Skipped where
 * the test may not mount. */
static void a_full_disk_fails_creates_and_damages_nothing(void **state)
{
    static const char *const past_the_disk[] = {"--spill-max", "1G", NULL};
    struct spilld s = {0};
    int rc = FERRY_OK, n = 0, err = mount_disk(&s, "12m");

    if (err)
        H_SKIP("cannot mount a tmpfs here (%s)", strerror(err));
    spill_start(&s,
                past_the_disk); /* without a bound of its own, it would stop short of the disk */
    ferry_client *c = h_connect(&s.d);
    for (; n < 64 && rc == FERRY_OK; n++) {
        ferry_id id = h_idf("f%d", n);
        rc = h_put_direct(c, &id, MIB, 64);
    }
    assert_int_equal(rc, FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "spill directory"));
    ferry_stats st = h_stats(c);
    assert_true(st.spill_write_failures > 0);
    assert_int_equal(st.evicted_objects, 0);
    n--;
    for (int i = n - 8; i < n; i++) {
        ferry_id id = h_idf("f%d", i);
        H_OK(ferry_delete(c, &id));
    }
    check_many(c, "f", n - 8, MIB);
    ferry_disconnect(c);
    s.d.ok = 1;
    h_daemon_stop(&s.d);
    umount2(s.spill, MNT_DETACH);
    h_daemon_cleanup(&s.d);
    (void)state;
}

/* Without --spill-max the spill may hold what its file system had free at start less a tenth of
 * the file system: on a 40 MiB tmpfs, 1 MiB puts into the 16 MiB arena fail with ENOSPACE naming
 * that bound and --spill-max, a tenth of the tmpfs is still free, and what was spilled reads
 * back. Without the default the spill wrote until the disk itself refused. */
static void spill_without_a_max_leaves_the_file_system_room(void **state)
{
    struct spilld s = {0};
    struct statvfs fs;
    int rc = FERRY_OK, n = 0, err = mount_disk(&s, "40m");

    if (err)
        H_SKIP("cannot mount a tmpfs here (%s)", strerror(err));
    spill_start(&s, NULL);
    ferry_client *c = h_connect(&s.d);
    for (; n < 128 && rc == FERRY_OK; n++) {
        ferry_id id = h_idf("r%d", n);
        rc = h_put_direct(c, &id, MIB, 64);
    }
    assert_int_equal(rc, FERRY_ENOSPACE);
    printf("%d objects put; %s\n", n - 1, ferry_errmsg());
    assert_non_null(strstr(ferry_errmsg(), "spill directory"));
    assert_non_null(strstr(ferry_errmsg(), "--spill-max"));
    assert_int_equal(statvfs(s.spill, &fs), 0);
    uint64_t size = (uint64_t)fs.f_blocks * fs.f_frsize, left = (uint64_t)fs.f_bavail * fs.f_frsize;
    ferry_stats st = h_stats(c);
    printf("tmpfs of %" PRIu64 " bytes: %" PRIu64 " free; the spill holds %" PRIu64
           " of at most %" PRIu64 "\n",
           size, left, st.spill_disk_bytes, st.spill_max_bytes);
    assert_true(st.spill_max_bytes > 0 && st.spill_max_bytes <= size - size / 10);
    assert_true(st.spill_disk_bytes <= st.spill_max_bytes);
    assert_true(left >= size / 10);
    assert_true(h_file_contains(s.d.log, "a tenth of its file system left free"));
    n--;
    for (int i = n - 8; i < n; i++) {
        ferry_id id = h_idf("r%d", i);
        H_OK(ferry_delete(c, &id));
    }
    check_many(c, "r", n - 8, MIB);
    ferry_disconnect(c);
    s.d.ok = 1;
    h_daemon_stop(&s.d);
    umount2(s.spill, MNT_DETACH);
    h_daemon_cleanup(&s.d);
    (void)state;
}

/* Flips one byte at offset off of the spill directory's first segment. */
static void damage(const struct spilld *s, off_t off)
{
    char path[256];
    uint8_t byte;

    snprintf(path, sizeof(path), "%s/00000000.seg", s->spill);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &byte, 1, off), 1);
    byte ^= 0x5a;
    assert_int_equal(pwrite(fd, &byte, 1, off), 1);
    close(fd);
}

/* A damaged object's bytes fail its get with FERRY_EIO (the daemon serves on, the others read
 * back); a damaged group header is dropped at start and counted. */
static void damaged_spill_files_fail_gets_not_the_daemon(void **state)
{
    static const char *const persist[] = {"--persist-on-exit", NULL};
    /* A group of one 4 MiB object: a 4 KiB header, then 4 MiB + 64 bytes rounded up to 4 KiB. */
    const off_t group = 4096 + (4 * MIB + 4096);
    struct spilld s = {0};
    ferry_buffer b;
    int damaged = 0;

    spill_start(&s, persist);
    ferry_client *c = h_connect(&s.d);
    put_many(c, "x", 6, 4 * MIB); /* one object per group (a group holds at most 8 MiB) */
    ferry_disconnect(c);
    h_daemon_stop(&s.d);
    damage(&s, 4096 + 1000); /* inside the first group's object */

    spill_start(&s, persist);
    c = h_connect(&s.d);
    for (int i = 0; i < 6; i++) {
        ferry_id id = h_idf("x%d", i);
        int rc = ferry_get(c, &id, 1, 10000, &b);
        if (rc == FERRY_EIO) {
            assert_int_equal(b.status, FERRY_EIO);
            assert_int_equal(h_contains(c, &id), 0);
            damaged++;
            continue;
        }
        H_OK(rc);
        h_assert_buffer(&b, &id, 4 * MIB, 64);
        H_OK(ferry_release(c, &id));
    }
    assert_int_equal(damaged, 1);
    assert_int_equal(h_stats(c).restore_failures, 1);
    ferry_disconnect(c);
    h_daemon_stop(&s.d);

    /* The second group's header: it and everything after it in the segment are dropped. */
    damage(&s, group + 16);
    spill_start(&s, persist);
    c = h_connect(&s.d);
    ferry_stats st = h_stats(c);
    assert_int_equal(st.spill_recovery_dropped, 1);
    assert_true(st.spill_recovered_objects < 5);
    for (int i = 0; i < 6; i++) {
        ferry_id id = h_idf("x%d", i);
        if (h_contains(c, &id))
            h_assert_object(c, &id, 4 * MIB, 64);
    }
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* A second daemon on the same directory is refused before it reserves its arena. */
static void second_daemon_on_the_directory_is_refused(void **state)
{
    struct spilld s = {0}, t = {0};

    spill_start(&s, NULL);
    h_daemon_init(&t.d);
    const char *args[] = {"--spill-dir", s.spill, NULL};
    assert_int_equal(h_daemon_try_start(&t.d, ARENA, args), -1);
    h_daemon_cleanup(&t.d);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* ---- a spill directory others can write to, and what they plant there ---- */

/* A file of n bytes of 'v' at path (the test's own, standing for root's). */
static void victim_file(const char *path, size_t n)
{
    char buf[10000];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    assert_true(fd >= 0 && n <= sizeof(buf));
    memset(buf, 'v', n);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    close(fd);
}

static void assert_victim_intact(const char *path, size_t n)
{
    char buf[10000];
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof(buf)), (ssize_t)n);
    close(fd);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(buf[i], 'v');
}

/* The spill directory made by the test, mode `mode` (after umask), owned by uid. */
static void make_spill_dir(struct spilld *s, mode_t mode, uid_t uid)
{
    h_daemon_init(&s->d);
    snprintf(s->spill, sizeof(s->spill), "%s/spill", s->d.dir);
    assert_int_equal(mkdir(s->spill, 0700), 0);
    assert_int_equal(chmod(s->spill, mode), 0);
    if (uid != geteuid() && chown(s->spill, uid, (gid_t)-1) < 0) {
        int err = errno;
        h_daemon_cleanup(&s->d);
        H_SKIP("cannot give the spill directory to uid %u here (%s)", (unsigned)uid, strerror(err));
    }
}

/* A symbolic link and a hard link planted as segments, to files of someone else's (here the
 * test's): they are refused and counted, their targets keep every byte, and the daemon spills
 * to segments of its own beside them. */
static void links_planted_as_segments_are_refused_and_left_alone(void **state)
{
    struct spilld s = {0};
    char victim[192], hard[192], seg[192];

    make_spill_dir(&s, 0700, geteuid());
    snprintf(victim, sizeof(victim), "%s/victim", s.d.dir);
    snprintf(hard, sizeof(hard), "%s/hardvictim", s.d.dir);
    victim_file(victim, 10000);
    victim_file(hard, 10000);
    snprintf(seg, sizeof(seg), "%s/00000000.seg", s.spill);
    assert_int_equal(symlink(victim, seg), 0);
    snprintf(seg, sizeof(seg), "%s/00000001.seg", s.spill);
    assert_int_equal(link(hard, seg), 0);

    spill_start(&s, NULL);
    ferry_client *c = h_connect(&s.d);
    assert_victim_intact(victim, 10000);
    assert_victim_intact(hard, 10000);
    assert_int_equal(h_stat(c, "spill_segments_refused"), 2);
    assert_true(h_file_contains(s.d.log, "00000000.seg"));
    put_many(c, "own", 24, MIB); /* past the arena: written to new segments */
    check_many(c, "own", 24, MIB);
    assert_true(h_stats(c).spill_writes > 0);
    assert_victim_intact(victim, 10000);
    assert_victim_intact(hard, 10000);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* Spill directories that another user can write to (0777, 1777) or that another user owns are
 * refused: the daemon does not start, says why with the mode and the owner, and a symbolic link
 * planted there is not followed. */
static void spill_dir_others_can_write_is_refused(void **state)
{
    static const mode_t modes[] = {0777, 01777, 0700};
    char victim[192], seg[192], mode[32];

    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        struct spilld s = {0};
        uid_t owner = modes[i] == 0700 ? 65534 : geteuid(); /* nobody */
        make_spill_dir(&s, modes[i], owner);
        snprintf(victim, sizeof(victim), "%s/victim", s.d.dir);
        victim_file(victim, 10000);
        snprintf(seg, sizeof(seg), "%s/00000000.seg", s.spill);
        assert_int_equal(symlink(victim, seg), 0);
        const char *args[] = {"--spill-dir", s.spill, NULL};
        assert_int_equal(h_daemon_try_start(&s.d, ARENA, args), -1);
        assert_victim_intact(victim, 10000);
        snprintf(mode, sizeof(mode), "mode %04o", (unsigned)modes[i]);
        assert_true(h_file_contains(s.d.log, mode));
        snprintf(mode, sizeof(mode), "owned by uid %u", (unsigned)owner);
        assert_true(h_file_contains(s.d.log, mode));
        h_daemon_cleanup(&s.d);
    }
    (void)state;
}

/* With a secret, a segment written without it (a valid one: another daemon's, planted in the
 * directory) is not served: its object's id stays unknown, the segment is counted; the node's
 * own segments, authenticated, come back. */
static void segment_without_the_secrets_mac_is_not_served(void **state)
{
    struct spilld s = {0}, planter = {0};
    char secret[192], from[192], to[192];
    char cmd[512];

    h_daemon_init(&s.d);
    snprintf(secret, sizeof(secret), "%s/secret", s.d.dir);
    h_write_file(secret, "a cluster secret of some length\n");
    const char *persist_secret[] = {"--persist-on-exit", "--secret-file", secret, NULL};
    static const char *const persist[] = {"--persist-on-exit", NULL};
    ferry_id chosen = h_id("chosen"), own = h_id("own");

    spill_start(&planter, persist);
    ferry_client *c = h_connect(&planter.d);
    H_OK(h_put_direct(c, &chosen, 4096, 0));
    ferry_disconnect(c);
    h_daemon_stop(&planter.d);

    snprintf(s.spill, sizeof(s.spill), "%s/spill", s.d.dir);
    spill_start(&s, persist_secret);
    c = h_connect(&s.d);
    H_OK(h_put_direct(c, &own, 4096, 0));
    ferry_disconnect(c);
    h_daemon_stop(&s.d);
    snprintf(from, sizeof(from), "%s/00000000.seg", planter.spill);
    snprintf(to, sizeof(to), "%s/00000007.seg", s.spill);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);

    spill_start(&s, persist_secret);
    c = h_connect(&s.d);
    assert_int_equal(h_contains(c, &chosen), 0);
    h_assert_object(c, &own, 4096, 0);
    assert_int_equal(h_stat(c, "spill_segments_unauthenticated"), 1);
    ferry_disconnect(c);
    planter.d.ok = 1;
    spill_done(&planter);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* A segment of another format version (a previous release's) is refused and left as it is, not
 * cut as damaged. */
static void segment_of_another_format_version_is_left_alone(void **state)
{
    static const char *const persist[] = {"--persist-on-exit", NULL};
    struct spilld s = {0};
    char path[256];
    uint8_t version;
    ferry_id id = h_id("old");

    spill_start(&s, persist);
    ferry_client *c = h_connect(&s.d);
    H_OK(h_put_direct(c, &id, 4096, 0));
    ferry_disconnect(c);
    h_daemon_stop(&s.d);
    snprintf(path, sizeof(path), "%s/00000000.seg", s.spill);
    long size = h_file_size(path);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &version, 1, 8), 1);
    version++;
    assert_int_equal(pwrite(fd, &version, 1, 8), 1);
    close(fd);

    spill_start(&s, persist);
    c = h_connect(&s.d);
    assert_int_equal(h_contains(c, &id), 0);
    assert_int_equal(h_file_size(path), size);
    assert_int_equal(h_stat(c, "spill_segments_refused"), 1);
    ferry_disconnect(c);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

/* A file name read from the directory reaches the log with its control bytes escaped. */
static void file_names_from_disk_are_logged_escaped(void **state)
{
    struct spilld s = {0};
    char path[256];

    make_spill_dir(&s, 0700, geteuid());
    snprintf(path, sizeof(path), "%s/\x1b]0;owned\x07\x1b[2J.seg", s.spill);
    h_write_file(path, "x");
    spill_start(&s, NULL);
    ferry_client *c = h_connect(&s.d);
    uint64_t ignored = h_stat(c, "spill_files_ignored");
    ferry_disconnect(c);
    h_daemon_stop(&s.d);
    assert_true(h_file_contains(s.d.log, "\\x1b]0;owned\\x07\\x1b[2J.seg"));
    assert_false(h_file_contains(s.d.log, "\x1b"));
    assert_int_equal(ignored, 1);
    s.d.ok = 1;
    spill_done(&s);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spilling_keeps_four_arenas_of_objects_bit_exact),
        cmocka_unit_test(concurrent_readers_share_one_restore_and_a_reference_wins),
        cmocka_unit_test(persist_on_exit_brings_every_object_back),
        cmocka_unit_test(kill_during_spilling_leaves_nothing_half_written),
        cmocka_unit_test(creates_waiting_for_room_leave_the_loop_asleep),
        cmocka_unit_test(spill_max_reached_fails_creates_and_damages_nothing),
        cmocka_unit_test(spill_without_a_max_leaves_the_file_system_room),
        cmocka_unit_test(a_full_disk_fails_creates_and_damages_nothing),
        cmocka_unit_test(damaged_spill_files_fail_gets_not_the_daemon),
        cmocka_unit_test(second_daemon_on_the_directory_is_refused),
        cmocka_unit_test(links_planted_as_segments_are_refused_and_left_alone),
        cmocka_unit_test(spill_dir_others_can_write_is_refused),
        cmocka_unit_test(segment_without_the_secrets_mac_is_not_served),
        cmocka_unit_test(segment_of_another_format_version_is_left_alone),
        cmocka_unit_test(file_names_from_disk_are_logged_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * unit_fabric_peer.c - the fabric's view of peers on this host (fabric_peer.c, and the shm lock
 * guard of quirks/quirk_shmlock.c and quirk_watch.c), in-process: which
 * endpoint names carry a process we may check, when a peer counts as exited, and when our own
 * shm region's lock is freed (only when held for long while a peer was seen to die), and when the
 * watchdog frees a lock a call spins on (a dead peer's; ours, once a process died). The rest
 * (posts held back, connections failed, regions swept) is exercised against real daemons by
 * it_cluster_kills and it_cluster_chaos.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "skip.h"
#include "transport/fabric/fabric_int.h"

static struct fi_info info;
static struct xlistener f;
/* The workarounds' counters (process-wide) when the case began. */
static uint64_t busy0, freed0;

static int setup(void **state)
{
    memset(&info, 0, sizeof(info));
    memset(&f, 0, sizeof(f));
    info.addr_format = FI_ADDR_STR;
    f.info = &info;
    busy0 = quirks_count(QUIRK_SHM_LOCK);
    freed0 = quirks_count(QUIRK_WATCHDOG);
    return 0;
}

static pid_t name_pid(const char *name)
{
    return fab_name_pid(&f, (const uint8_t *)name, strlen(name));
}

/* Our own name is read back as our process; made-up, foreign or malformed ones as none. */
static void test_names(void **state)
{
    char mine[128], other_ns[128];
    fab_local_name(mine, sizeof(mine));
    assert_int_equal(name_pid(mine), getpid());
    char with_prefix[160];
    snprintf(with_prefix, sizeof(with_prefix), "fi_shm://%s:0:0", mine);
    assert_int_equal(name_pid(with_prefix), getpid());
    snprintf(other_ns, sizeof(other_ns), "ferry-%d-1-00000000", (int)getpid());
    assert_int_equal(name_pid(other_ns), 0); /* another pid namespace: its ids mean nothing */
    assert_int_equal(name_pid("ferry-1-4026531836-0"), 0); /* init is never a peer */
    assert_int_equal(name_pid("ferry-0-4026531836-0"), 0); /* kill(0) would be our group */
    assert_int_equal(name_pid("ferry--5-4026531836-0"), 0);
    assert_int_equal(name_pid("ferry-99999999999-4026531836-0"), 0);
    assert_int_equal(name_pid("fi_shm://1234"), 0); /* shm's own default names */
    assert_int_equal(name_pid("ferry-12x-4026531836-0"), 0);
    info.addr_format = FI_SOCKADDR_IN; /* names of other providers are addresses */
    assert_int_equal(name_pid(mine), 0);
}

/* A peer counts as exited once its process is gone (reaped), not while it runs. */
static void test_exited(void **state)
{
    struct fconn c = {.f = &f};
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    snprintf(c.base.peer, sizeof(c.base.peer), "child");
    c.peer_pid = child;
    assert_int_equal(fab_peer_exited(&c), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(fab_peer_exited(&c), 1);
    assert_int_equal(fab_peer_exited(&c), 1);
    assert_int_equal(f.stats.peers_exited, 1); /* counted once */
    assert_true(f.peer_exit_ms > 0);
    c.peer_pid = 0; /* no process known: never exited */
    c.peer_exited = 0;
    assert_int_equal(fab_peer_exited(&c), 0);
}

/* Calls quirks_own_locked for about ms milliseconds: the last answer. */
static int look_for(int ms)
{
    uint64_t end = loop_now_ms() + (uint64_t)ms;
    int held = 1;
    while (loop_now_ms() < end && (held = quirks_own_locked(&f)))
        usleep(1000);
    return held;
}

/* Our lock held for long is freed only when a peer was seen to die meanwhile; a free one is
 * never touched. */
static void test_own_lock(void **state)
{
    volatile int lock = 1; /* x86-64 glibc: 1 is free */
    f.shm.own_lock = &lock;
    assert_int_equal(quirks_own_locked(&f), 0);
    lock = 0;                                               /* held */
    assert_int_equal(look_for(FAB_LOCK_STUCK_MS + 500), 1); /* nobody died: still held */
    assert_int_equal(lock, 0);
    assert_int_equal(f.stats.locks_recovered, 0);
    f.shm.own_held = (struct quirks_held){0}; /* a new holding, during which a peer dies */
    assert_int_equal(quirks_own_locked(&f), 1);
    f.peer_exit_ms = loop_now_ms();
    assert_int_equal(look_for(FAB_LOCK_STUCK_MS + 1000), 0);
    assert_int_equal(lock, 1);
    assert_int_equal(f.stats.locks_recovered, 1);
    assert_true(quirks_count(QUIRK_SHM_LOCK) - busy0 >= FAB_LOCK_STUCK_POLLS);
}

/* A lock on a page shared with children (x86-64 glibc: 1 is free), and a child that takes it
 * and waits to be killed. */
static pthread_spinlock_t *shared_lock(void)
{
    pthread_spinlock_t *lock =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(lock != MAP_FAILED);
    assert_int_equal(pthread_spin_init(lock, PTHREAD_PROCESS_SHARED), 0);
    return lock;
}

/* A child that takes lock (when not NULL) and then waits to be killed. */
static pid_t child_holding(pthread_spinlock_t *lock)
{
    int ready[2];
    char c;
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test ends, and its children with it */
        if (lock)
            pthread_spin_lock(lock);
        (void)!write(ready[1], "x", 1);
        for (;;)
            pause();
    }
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
    return child;
}

/* The loop's thread in a provider call that spins on a lock as the provider does
 * (pthread_spin_lock: a locked decrement, then waits), with the watchdog told of it. */
struct spinner {
    pthread_t thread;
    pthread_spinlock_t *lock;
    struct fconn *c; /* the call's peer, or NULL */
    atomic_int done;
    uint64_t took_ms;
};

static void *spin_main(void *arg)
{
    struct spinner *s = arg;
    uint64_t t0 = clock_mono_ns();
    quirks_call_begin(&f, s->c);
    pthread_spin_lock(s->lock);
    quirks_call_end(&f);
    s->took_ms = (clock_mono_ns() - t0) / 1000000;
    pthread_spin_unlock(s->lock);
    atomic_store(&s->done, 1);
    return NULL;
}

static void spin_start(struct spinner *s, pthread_spinlock_t *lock, struct fconn *c)
{
    *s = (struct spinner){.lock = lock, .c = c};
    assert_int_equal(pthread_create(&s->thread, NULL, spin_main, s), 0);
}

/* Joins the spinner within ms, or ends the process (the spin, and the watchdog thread the next
 * test's setup would clear under it, with it): a failure. */
static void spin_join(struct spinner *s, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000 + 1;
    if (pthread_timedjoin_np(s->thread, NULL, &until) != 0) {
        fprintf(stderr, "FAILED: the call still spins on the lock after %d ms: not freed\n", ms);
        _exit(1);
    }
}

/* Whether this platform's spin locks are the ones the guard knows (1 free, else held). */
static int known_lock(void)
{
    pthread_spinlock_t l;
    pthread_spin_init(&l, PTHREAD_PROCESS_PRIVATE);
    return *(volatile int *)&l == 1;
}

static void reap(pid_t child)
{
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

/* A peer killed (and not yet reaped: a zombie) while holding its region's lock: a post that
 * spins on that lock is freed by the watchdog, counted and logged; while the peer lives, its
 * lock is never touched. */
static void test_watchdog_frees_a_dead_peers_lock(void **state)
{
    if (!known_lock())
        H_SKIP("this libfabric's shm region is not laid out as the lock guard knows");
    pthread_spinlock_t *lock = shared_lock();
    uint8_t *region = (uint8_t *)lock - 8;
    struct fconn c = {.f = &f, .peer_region = region};
    struct spinner s;
    f.shm.lock_off = 8;
    assert_int_equal(quirks_watch_start(&f.shm.watchdog, NULL), 0);
    c.peer_pid = child_holding(lock); /* the peer takes its lock */

    spin_start(&s, lock, &c);
    usleep(3 * FAB_WATCH_STUCK_MS * 1000); /* a live holder: left alone */
    assert_int_equal(atomic_load(&s.done), 0);
    assert_int_equal(fab_pid_gone(c.peer_pid), 0);

    kill(c.peer_pid, SIGKILL); /* killed inside it, not reaped */
    uint64_t t0 = clock_mono_ns();
    spin_join(&s, 5000);
    uint64_t after_ms = (clock_mono_ns() - t0) / 1000000;
    printf("the dead peer's lock freed %llu ms after the kill, the call %llu ms in\n",
           (unsigned long long)after_ms, (unsigned long long)s.took_ms);
    assert_true(after_ms < 1000); /* looks every 20 ms: the kill is seen at once */
    assert_int_equal(quirks_count(QUIRK_WATCHDOG) - freed0, 1);
    assert_int_equal(fab_pid_gone(c.peer_pid), 1); /* a zombie */
    waitpid(c.peer_pid, NULL, 0);
    assert_int_equal(fab_pid_gone(c.peer_pid), 1);

    spin_start(&s, lock, &c); /* a free lock stays free: nothing counted */
    spin_join(&s, 5000);
    assert_int_equal(quirks_count(QUIRK_WATCHDOG) - freed0, 1);
    quirks_watch_stop(&f.shm.watchdog);
    assert_int_equal(f.shm.watchdog.running, 0);
    munmap((void *)lock, 4096);
}

/* Our region's lock (the holder cannot be named) taken by a process killed inside it: a
 * completion read that spins on it is freed once it has been held FAB_LOCK_STUCK_MS and a
 * process on this host was found gone; held as long by a live one, it is left alone. */
static void test_watchdog_frees_our_lock_after_a_peer_died(void **state)
{
    if (!known_lock())
        H_SKIP("this libfabric's shm region is not laid out as the lock guard knows");
    pthread_spinlock_t *own = shared_lock();
    struct spinner s;
    pid_t holder = child_holding(own), other = child_holding(NULL);
    pid_t peers[2] = {other, holder};
    assert_int_equal(quirks_watch_start(&f.shm.watchdog, (volatile int *)own), 0);
    quirks_watch_set_peers(&f.shm.watchdog, peers, 2);

    spin_start(&s, own, NULL);
    usleep((FAB_LOCK_STUCK_MS + 300) * 1000); /* held past the limit, nobody died */
    assert_int_equal(atomic_load(&s.done), 0);

    kill(holder, SIGKILL);
    uint64_t t0 = clock_mono_ns();
    spin_join(&s, 5000);
    uint64_t after_ms = (clock_mono_ns() - t0) / 1000000;
    printf("our lock freed %llu ms after its holder's kill, the read %llu ms in\n",
           (unsigned long long)after_ms, (unsigned long long)s.took_ms);
    assert_true(after_ms < 1000); /* held 2 s already: freed once the death is seen */
    assert_int_equal(quirks_count(QUIRK_WATCHDOG) - freed0, 1);
    quirks_watch_stop(&f.shm.watchdog);
    waitpid(holder, NULL, 0);
    reap(other);
    munmap((void *)own, 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_names, setup),
        cmocka_unit_test_setup(test_exited, setup),
        cmocka_unit_test_setup(test_own_lock, setup),
        cmocka_unit_test_setup(test_watchdog_frees_a_dead_peers_lock, setup),
        cmocka_unit_test_setup(test_watchdog_frees_our_lock_after_a_peer_died, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

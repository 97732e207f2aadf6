/*
 * unit_fabric_peer.c - the fabric's view of peers on this host (fabric_peer.c), in-process: which
 * endpoint names carry a process we may check, when a peer counts as exited, and when our own
 * shm region's lock is freed (only when held for long while a peer was seen to die), and when the
 * watchdog frees a dead peer's lock that a post spins on. The rest
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
#include <sys/wait.h>

#include "transfer/fabric/fabric_int.h"

static struct fi_info info;
static struct xlistener f;

static int setup(void **state)
{
    memset(&info, 0, sizeof(info));
    memset(&f, 0, sizeof(f));
    info.addr_format = FI_ADDR_STR;
    f.info = &info;
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

/* Calls fab_own_locked for about ms milliseconds: the last answer. */
static int look_for(int ms)
{
    uint64_t end = loop_now_ms() + (uint64_t)ms;
    int held = 1;
    while (loop_now_ms() < end && (held = fab_own_locked(&f)))
        usleep(1000);
    return held;
}

/* Our lock held for long is freed only when a peer was seen to die meanwhile; a free one is
 * never touched. */
static void test_own_lock(void **state)
{
    volatile int lock = 1; /* x86-64 glibc: 1 is free */
    f.own_lock = &lock;
    assert_int_equal(fab_own_locked(&f), 0);
    lock = 0;                                               /* held */
    assert_int_equal(look_for(FAB_LOCK_STUCK_MS + 500), 1); /* nobody died: still held */
    assert_int_equal(lock, 0);
    assert_int_equal(f.stats.locks_recovered, 0);
    f.own_held_ms = 0; /* a new holding, during which a peer dies */
    assert_int_equal(fab_own_locked(&f), 1);
    f.peer_exit_ms = loop_now_ms();
    assert_int_equal(look_for(FAB_LOCK_STUCK_MS + 1000), 0);
    assert_int_equal(lock, 1);
    assert_int_equal(f.stats.locks_recovered, 1);
    assert_true(f.stats.locks_busy >= FAB_LOCK_STUCK_POLLS);
}

/* A child process that waits to be killed. */
static pid_t idle_child(void)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    return child;
}

/* Spins for the lock like the provider does (bounded here by ms): 1 once it was taken. */
static int spin_for(pthread_spinlock_t *lock, int ms)
{
    uint64_t end = loop_now_ms() + (uint64_t)ms;
    while (pthread_spin_trylock(lock) != 0)
        if (loop_now_ms() >= end)
            return 0;
    return 1;
}

/* A peer killed (and not yet reaped: a zombie) while holding its region's lock: a post that
 * spins on that lock is freed by the watchdog, counted and logged; while the peer lives, its
 * lock is never touched. */
static void test_watchdog_frees_a_dead_peers_lock(void **state)
{
    static union {
        uint8_t page[4096];
        pthread_spinlock_t at8[4];
    } region;
    pthread_spinlock_t *lock = &region.at8[2]; /* byte 8 */
    struct fconn c = {.f = &f, .peer_region = region.page};
    f.lock_off = 8;
    assert_int_equal(fab_watch_start(&f.watchdog), 0);
    assert_int_equal(pthread_spin_init(lock, PTHREAD_PROCESS_SHARED), 0);
    c.peer_pid = idle_child();
    assert_int_equal(pthread_spin_lock(lock), 0); /* the peer takes its lock */

    fab_call_begin(&c); /* a live holder: left alone */
    assert_int_equal(spin_for(lock, 3 * FAB_WATCH_STUCK_MS), 0);
    fab_call_end(&f);
    assert_int_equal(f.stats.peer_locks_freed, 0);
    assert_int_equal(fab_pid_gone(c.peer_pid), 0);

    kill(c.peer_pid, SIGKILL); /* killed inside it, not reaped */
    fab_call_begin(&c);
    uint64_t t0 = loop_now_ms();
    assert_int_equal(spin_for(lock, 5000), 1);
    uint64_t took = loop_now_ms() - t0;
    fab_call_end(&f);
    printf("the dead peer's lock freed after %llu ms\n", (unsigned long long)took);
    assert_true(took >= FAB_WATCH_STUCK_MS);
    assert_int_equal(f.stats.peer_locks_freed, 1);
    assert_int_equal(fab_pid_gone(c.peer_pid), 1); /* a zombie */
    waitpid(c.peer_pid, NULL, 0);
    assert_int_equal(fab_pid_gone(c.peer_pid), 1);

    pthread_spin_unlock(lock); /* ours, taken above: a free lock stays free */
    fab_call_begin(&c);
    usleep(3 * FAB_WATCH_STUCK_MS * 1000);
    fab_call_end(&f);
    assert_int_equal(f.stats.peer_locks_freed, 1);
    fab_watch_stop(&f.watchdog);
    assert_int_equal(f.watchdog.running, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_names, setup),
        cmocka_unit_test_setup(test_exited, setup),
        cmocka_unit_test_setup(test_own_lock, setup),
        cmocka_unit_test_setup(test_watchdog_frees_a_dead_peers_lock, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

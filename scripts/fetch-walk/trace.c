/*
 * trace.c - the function entries of ferryd's loop thread, for scripts/fetch-walk.sh: linked
 * into a ferryd built with -finstrument-functions (this file without it). SIGUSR1 starts a
 * segment of the record, SIGUSR2 ends it; at exit the record goes to $FERRY_WALK_OUT, one
 * line a function entry (its offset in the executable, hex), "--" between segments.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NO_TRACE __attribute__((no_instrument_function))
#define MAX_CALLS (1u << 20)
#define MARK UINTPTR_MAX /* between segments */

static uintptr_t calls[MAX_CALLS];
static volatile sig_atomic_t recording;
static unsigned ncalls;

NO_TRACE static void on_start(int sig)
{
    (void)sig;
    if (ncalls < MAX_CALLS)
        calls[ncalls++] = MARK;
    recording = 1;
}

NO_TRACE static void on_stop(int sig)
{
    (void)sig;
    recording = 0;
}

NO_TRACE void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    if (recording && ncalls < MAX_CALLS && syscall(SYS_gettid) == getpid())
        calls[ncalls++] = (uintptr_t)fn;
}

NO_TRACE void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)fn;
    (void)site;
}

NO_TRACE static void dump(void)
{
    const char *out = getenv("FERRY_WALK_OUT");
    Dl_info info;
    FILE *f;

    if (!out || !dladdr((void *)dump, &info) || !(f = fopen(out, "w")))
        return;
    for (unsigned i = 0; i < ncalls; i++) {
        if (calls[i] == MARK)
            fputs("--\n", f);
        else
            fprintf(f, "%lx\n", (unsigned long)(calls[i] - (uintptr_t)info.dli_fbase));
    }
    fclose(f);
}

NO_TRACE __attribute__((constructor)) static void trace_init(void)
{
    signal(SIGUSR1, on_start);
    signal(SIGUSR2, on_stop);
    atexit(dump);
}

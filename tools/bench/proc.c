/* proc.c - the scratch directory and the child processes (ferryd, redis-server) of
 * ferry-bench. Every child is stopped at exit, and gets SIGTERM from the kernel should
 * ferry-bench die without running its exit handlers. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define STOP_WAIT_MS 5000

static char tmpdir_path[64];

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tmpdir(void *arg)
{
    (void)arg;
    nftw(tmpdir_path, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *bench_tmpdir(void)
{
    if (tmpdir_path[0] != '\0')
        return tmpdir_path;
    strcpy(tmpdir_path, "/tmp/ferry-bench.XXXXXX");
    if (mkdtemp(tmpdir_path) == NULL)
        bench_fail("mkdtemp %s: %s", tmpdir_path, strerror(errno));
    bench_on_exit(remove_tmpdir, NULL);
    return tmpdir_path;
}

const char *bench_which(const char *name)
{
    static char path[PATH_MAX];
    const char *dirs = getenv("PATH");
    if (dirs == NULL)
        dirs = "/usr/local/bin:/usr/bin:/bin";
    while (*dirs != '\0') {
        size_t len = strcspn(dirs, ":");
        snprintf(path, sizeof(path), "%.*s/%s", (int)len, dirs, name);
        if (len > 0 && access(path, X_OK) == 0)
            return path;
        dirs += len + (dirs[len] == ':');
    }
    return NULL;
}

/* In the child: output to the log, death with the parent, then exec; never returns. */
static void exec_child(const char *log_path, char *const argv[])
{
    pid_t parent = getppid();
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1); /* the parent died before the prctl took effect */
    execvp(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

void bench_proc_show_log(const struct bench_proc *p)
{
    char line[512];
    FILE *f = fopen(p->log_path, "r");
    if (f == NULL)
        return;
    fprintf(stderr, "ferry-bench: --- %s log (%s) ---\n", p->name, p->log_path);
    while (fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    fprintf(stderr, "ferry-bench: --- end of %s log ---\n", p->name);
    fclose(f);
}

static void report_end(const struct bench_proc *p, int status)
{
    if (WIFSIGNALED(status))
        fprintf(stderr, "ferry-bench: %s (pid %d) died of signal %d\n", p->name, (int)p->pid,
                WTERMSIG(status));
    else
        fprintf(stderr, "ferry-bench: %s (pid %d) exited with status %d\n", p->name, (int)p->pid,
                WEXITSTATUS(status));
    bench_proc_show_log(p);
}

int bench_proc_ended(struct bench_proc *p)
{
    int status;
    if (p->pid <= 0)
        return 1;
    if (waitpid(p->pid, &status, WNOHANG) != p->pid)
        return 0;
    report_end(p, status);
    p->pid = 0;
    return 1;
}

/* Waits up to ms for the process to end; 1 when it did (and is reaped). */
static int wait_end(struct bench_proc *p, unsigned ms)
{
    for (unsigned waited = 0; waited < ms; waited += 10) {
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid)
            return 1;
        bench_sleep_ms(10);
    }
    return 0;
}

void bench_proc_stop(struct bench_proc *p)
{
    if (bench_proc_ended(p))
        return;
    kill(p->pid, SIGTERM);
    if (!wait_end(p, STOP_WAIT_MS)) {
        fprintf(stderr, "ferry-bench: %s (pid %d) ignored SIGTERM for %d ms: killing it\n", p->name,
                (int)p->pid, STOP_WAIT_MS);
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    p->pid = 0;
}

static void stop_at_exit(void *arg)
{
    bench_proc_stop(arg);
    free(arg);
}

struct bench_proc *bench_proc_start(const char *name, char *const argv[])
{
    struct bench_proc *p = calloc(1, sizeof(*p));
    if (p == NULL)
        bench_fail("out of memory");
    p->name = name;
    snprintf(p->log_path, sizeof(p->log_path), "%s/%s.log", bench_tmpdir(), name);
    fflush(NULL); /* no buffered output may be written twice */
    p->pid = fork();
    if (p->pid < 0)
        bench_fail("fork for %s: %s", name, strerror(errno));
    if (p->pid == 0)
        exec_child(p->log_path, argv);
    bench_on_exit(stop_at_exit, p);
    return p;
}

uint64_t bench_proc_minor_faults(const struct bench_proc *p)
{
    char path[64];
    unsigned long long faults = 0;
    if (p == NULL)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)p->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    /* pid (comm) state ppid pgrp session tty_nr tpgid flags minflt; %[^)] ends comm at its
     * first ')', right for the names of the processes started here. */
    if (fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %llu", &faults) != 1)
        faults = 0;
    fclose(f);
    return faults;
}

int bench_proc_log_has(const struct bench_proc *p, const char *needle)
{
    char line[512];
    int found = 0;
    FILE *f = fopen(p->log_path, "r");

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

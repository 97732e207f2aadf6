/*
 * gets.c - ferry-bench gets: get+release of one resident object, by 1 and 2 client processes
 * at once, with gets without the daemon (the shared index) and through it (FERRY_FASTPATH=0),
 * in interleaved rounds: each client's ops/s and p50, their sum, and the daemon's CPU time per
 * get (from /proc/PID/stat: utime + stime), so that "the daemon does nothing for a fast get"
 * is a figure.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

#define MAX_SAMPLES (1u << 20)
#define GETS_PROCS 2

struct child_result {
    uint64_t ops;
    double p50_ns;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A client process: connects (fast or not), waits for go, gets and releases id for seconds,
 * writes its result. */
static void child(const char *sock, const ferry_id *id, int fast, double seconds, int go_fd,
                  int out_fd)
{
    static double samples[MAX_SAMPLES];
    struct child_result r = {0};
    ferry_client *c;
    ferry_buffer b;
    char go;
    double end;

    setenv("FERRY_FASTPATH", fast ? "1" : "0", 1);
    if (ferry_connect(sock, &c) < 0 || read(go_fd, &go, 1) != 1)
        _exit(2);
    end = now_ns() + seconds * 1e9;
    for (double t = now_ns(); t < end;) {
        if (ferry_get(c, id, 1, 0, &b) < 0 || ferry_release(c, id) < 0)
            _exit(3);
        double t2 = now_ns();
        if (r.ops < MAX_SAMPLES)
            samples[r.ops] = t2 - t;
        r.ops++;
        t = t2;
    }
    qsort(samples, r.ops < MAX_SAMPLES ? r.ops : MAX_SAMPLES, sizeof(double), cmp_double);
    r.p50_ns = samples[(r.ops < MAX_SAMPLES ? r.ops : MAX_SAMPLES) / 2];
    ferry_disconnect(c);
    _exit(write(out_fd, &r, sizeof(r)) == sizeof(r) ? 0 : 4);
}

/* The daemon's CPU time so far, in ns (utime + stime). */
static double cpu_ns(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return 0;
    buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
    fclose(f);
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) * 1e9 / (double)sysconf(_SC_CLK_TCK);
}

struct run {
    double ops_per_sec, p50_ns, cpu_per_get_ns;
};

/* One measurement: procs clients at once, fast or not. */
static struct run measure(const char *sock, const ferry_id *id, pid_t daemon, int fast, int procs,
                          double seconds)
{
    int go[2], out[2];
    pid_t pids[GETS_PROCS];
    struct run r = {0};
    double cpu0, total = 0, p50 = 0;

    if (pipe(go) < 0 || pipe(out) < 0)
        bench_fail("pipe: %s", strerror(errno));
    for (int i = 0; i < procs; i++) {
        if ((pids[i] = fork()) < 0)
            bench_fail("fork: %s", strerror(errno));
        if (pids[i] == 0)
            child(sock, id, fast, seconds, go[0], out[1]);
    }
    usleep(100000); /* connected */
    cpu0 = daemon ? cpu_ns(daemon) : 0;
    for (int i = 0; i < procs; i++)
        if (write(go[1], "g", 1) != 1)
            bench_fail("go: %s", strerror(errno));
    for (int i = 0; i < procs; i++) {
        struct child_result c;
        int status;
        if (read(out[0], &c, sizeof(c)) != sizeof(c))
            bench_fail("a client process failed");
        total += (double)c.ops;
        p50 += c.p50_ns / procs;
        waitpid(pids[i], &status, 0);
    }
    r.ops_per_sec = total / seconds;
    r.p50_ns = p50;
    r.cpu_per_get_ns = daemon ? (cpu_ns(daemon) - cpu0) / total : 0;
    close(go[0]);
    close(go[1]);
    close(out[0]);
    close(out[1]);
    return r;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_gets(int argc, char **argv)
{
    uint64_t size = 1 << 20;
    double seconds = 0.5;
    int rounds = 5;
    const char *daemon_args[] = {"--memory", "256M", NULL};
    struct bench_proc *daemon;
    char sock[512];
    ferry_id id = ferry_peer_id(bench_nonce(), 1, 'g');
    static double ops[2][GETS_PROCS][20], p50[2][GETS_PROCS][20], cpu[2][GETS_PROCS][20];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ferry-bench gets [--size BYTES] [--seconds S] [--rounds N]\n"
                            "  get+release of one resident object by 1 and 2 client processes, "
                            "without the daemon and through it\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (rounds < 1 || rounds > 20 || seconds <= 0 || size > (128u << 20))
        bench_fail("--rounds 1 to 20, --seconds above 0, --size up to 128M");
    ferry_client *c = ferry_peer_start(NULL, "ferryd", daemon_args, &daemon);
    snprintf(sock, sizeof(sock), "%s/ferryd.sock", bench_tmpdir());
    uint8_t *payload = bench_alloc_faulted(size);
    bench_check_ferry(ferry_put(c, &id, payload, size, NULL, 0), "put");
    for (int r = 0; r < rounds; r++) {
        /* Interleaved: every case once per round, in an order that turns with the round. */
        for (int k = 0; k < 4; k++) {
            int which = (k + r) % 4, fast = which / 2, procs = which % 2 + 1;
            struct run m = measure(sock, &id, daemon->pid, fast, procs, seconds);
            ops[fast][procs - 1][r] = m.ops_per_sec;
            p50[fast][procs - 1][r] = m.p50_ns;
            cpu[fast][procs - 1][r] = m.cpu_per_get_ns;
        }
    }
    printf("get+release of one %" PRIu64 "-byte object, %d rounds of %.1f s per case "
           "(medians):\n",
           size, rounds, seconds);
    printf("  %-22s %9s %14s %9s %18s\n", "path", "processes", "ops/s (sum)", "p50 ns",
           "daemon CPU ns/get");
    double sum[2][GETS_PROCS];
    for (int fast = 1; fast >= 0; fast--)
        for (int p = 0; p < GETS_PROCS; p++) {
            sum[fast][p] = median(ops[fast][p], rounds);
            printf("  %-22s %9d %14.0f %9.0f %18.1f\n",
                   fast ? "without the daemon" : "through the daemon", p + 1, sum[fast][p],
                   median(p50[fast][p], rounds), median(cpu[fast][p], rounds));
        }
    printf("  2 processes / 1: %.2f without the daemon, %.2f through it; without / through, "
           "1 process: %.1f\n",
           sum[1][1] / sum[1][0], sum[0][1] / sum[0][0], sum[1][0] / sum[0][0]);
    free(payload);
    return 0;
}

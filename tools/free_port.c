/* free_port.c - see free_port.h. */
#include "free_port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOWEST_PORT 10000
#define HIGHEST_PORT 65535
#define MIN_WINDOW 1000
#define TRIES 200
#define RESERVE_S 120  /* longer than any daemon takes to bind what it was given */
#define LOCK_TRIES 500 /* of 2 ms: a lock held longer is not waited for */

/* The kernel's ephemeral range; Linux's default where it cannot be read. */
static void ephemeral_range(int *lo, int *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    *lo = 32768;
    *hi = 60999;
    if (f) {
        if (fscanf(f, "%d %d", lo, hi) != 2) {
            *lo = 32768;
            *hi = 60999;
        }
        fclose(f);
    }
}

/* 0 if port (0: any) binds on 127.0.0.1 now; *port is the port bound. */
static int try_bind(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)*port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        *port = ntohs(a.sin_port);
        rc = 0;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* The registry's directory, ours alone: its fd, or -1 (another user's, a link, too open). */
static int registry_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[256];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/ferry-ports-%u", tmp && *tmp ? tmp : "/tmp",
                     (unsigned)getuid()),
        fd;

    if (n < 0 || (size_t)n >= sizeof(path) || (mkdir(path, 0700) != 0 && errno != EEXIST))
        return -1;
    if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_uid != getuid() || (st.st_mode & 077)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The registry's lock in dir, taken within about a second: its fd, or -1. */
static int registry_lock(int dir)
{
    int fd = openat(dir, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

    for (int i = 0; fd >= 0 && i < LOCK_TRIES; i++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        usleep(2000);
    }
    if (fd >= 0)
        close(fd);
    return -1;
}

/* 1 if port is reserved by a pick of the last RESERVE_S seconds; else reserves it, 0. */
static int reserved_else_reserve(int dir, int port)
{
    char name[16];
    struct stat st;
    int fd;

    snprintf(name, sizeof(name), "%d", port);
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && time(NULL) - st.st_mtime < RESERVE_S)
        return 1;
    if ((fd = openat(dir, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) >= 0) {
        futimens(fd, NULL);
        close(fd);
    }
    return 0;
}

/* A free port of the window that no pick reserved, reserved now; or -1 with errno. */
static int pick_in(int first, int count)
{
    static unsigned state;
    int port = -1, dir = registry_dir(), lock = dir >= 0 ? registry_lock(dir) : -1;

    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    }
    errno = EADDRINUSE;
    for (int k = 0; k < TRIES; k++) {
        state = state * 1103515245u + 12345u;
        int p = first + (int)((state >> 8) % (unsigned)count);
        if (lock >= 0 && reserved_else_reserve(dir, p))
            continue;
        if (try_bind(&p) == 0) {
            port = p;
            break;
        }
    }
    int saved = errno;
    if (lock >= 0)
        close(lock); /* releases the flock */
    if (dir >= 0)
        close(dir);
    errno = saved;
    return port;
}

int free_port_pick(void)
{
    int lo, hi, port = 0;
    ephemeral_range(&lo, &hi);
    if (lo - LOWEST_PORT >= MIN_WINDOW)
        return pick_in(LOWEST_PORT, lo - LOWEST_PORT);
    if (HIGHEST_PORT - hi >= MIN_WINDOW)
        return pick_in(hi + 1, HIGHEST_PORT - hi);
    return try_bind(&port) == 0 ? port : -1; /* the range covers everything */
}

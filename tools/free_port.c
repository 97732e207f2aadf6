/* free_port.c - see free_port.h. */
#include "free_port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LOWEST_PORT 10000
#define HIGHEST_PORT 65535
#define MIN_WINDOW 1000
#define TRIES 200

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

int free_port_pick(void)
{
    static unsigned state;
    int lo, hi, first, count, port = 0;
    ephemeral_range(&lo, &hi);
    if (lo - LOWEST_PORT >= MIN_WINDOW) {
        first = LOWEST_PORT;
        count = lo - LOWEST_PORT;
    } else if (HIGHEST_PORT - hi >= MIN_WINDOW) {
        first = hi + 1;
        count = HIGHEST_PORT - hi;
    } else {
        return try_bind(&port) == 0 ? port : -1; /* the range covers everything */
    }
    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    }
    for (int k = 0; k < TRIES; k++) {
        state = state * 1103515245u + 12345u;
        port = first + (int)((state >> 8) % (unsigned)count);
        if (try_bind(&port) == 0)
            return port;
    }
    return -1;
}

/*
 * delayline.c - ferry-delayline: what netem would do on the testbed's links, in user space, for
 * kernels without sch_netem (this project's machine has none: tc offers tbf and pfifo only).
 *
 *   ferry-delayline [--delay-us US] [--loss PCT] [--limit BYTES] [--seed N] NAME...
 *
 * For each NAME it makes two TAP devices, NAME (for the bridge) and NAME-n (to be moved into a
 * node's namespace and renamed), and forwards every frame between them after US microseconds,
 * dropping each with probability PCT percent, in each direction. A frame waits in a FIFO of its
 * direction; past BYTES waiting (default 8 MiB) a frame is dropped as a full queue would (tail
 * drop). The devices live as long as the process: SIGTERM or SIGINT ends it, and they go. It
 * prints "ready" on stdout once every device exists, and its counters on stderr at the end (and
 * at SIGUSR1): frames and bytes forwarded, dropped for loss, dropped for a full queue.
 *
 * Frames cross with their virtio-net header (IFF_VNET_HDR), so that without loss the kernel hands
 * over TCP segments of up to 64 KiB (TSO) and one read and one write carry each; with loss the
 * devices take no TSO, so that each MTU-sized packet is dropped on its own, as on a wire.
 * Timing: a timerfd (CLOCK_MONOTONIC, absolute) wakes the process for the earliest frame due.
 * Each wake-up of a sleeping process is late by what the scheduler takes (70-80 us on this
 * project's VM), which would add to every hop's delay: the process keeps the mean lateness of
 * its timer's wake-ups (wake_ns, a moving average) and arms the timer that much early; a frame
 * due sooner than that is waited for by polling (epoll_wait without sleeping), which takes a core
 * while frames that close to their time wait (always, on links of a round trip below about
 * 300 us that carry a stream). A busy machine still adds its own waits: measure the round trip
 * a testbed gives (ferry-bench cluster's rtt) before relying on it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINKS 256
#define FRAME_MAX (65536 + 64) /* a TSO segment, its Ethernet header and the virtio-net one */
#define VNET_HDR 12            /* struct virtio_net_hdr_mrg_rxbuf: what TUNSETVNETHDRSZ sets */
#define READS_PER_TURN 64      /* frames read from one device before looking at the others */

/* A frame waiting in a direction's FIFO. */
struct frame {
    uint64_t due_ns;
    uint32_t len;
    struct frame *next;
    uint8_t data[];
};

/* One direction of a link: frames read from `from`, written to `to` when due. */
struct dir {
    int from, to;
    struct frame *head, *tail;
    uint64_t queued; /* bytes waiting */
};

struct counters {
    uint64_t frames, bytes, lost, full, write_errors;
};

static struct dir dirs[2 * MAX_LINKS];
static size_t ndirs;
static struct counters count;
static uint64_t delay_ns, limit = 8u << 20;
/* The mean lateness of the timer's wake-ups (1/8 of each new one), and when the timer is armed
 * for (0: not armed). */
static uint64_t wake_ns, armed_ns;
static double loss; /* probability, 0 to 1 */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void die(const char *what)
{
    fprintf(stderr, "ferry-delayline: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* xorshift64*: loss needs no more than a fast uniform draw. */
static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53);
}

/* A TAP device called name, non-blocking, with virtio-net headers and, without loss, TSO. */
static int tap_open(const char *name)
{
    struct ifreq ifr = {0};
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC), hdr = VNET_HDR;
    unsigned offload = TUN_F_CSUM | (loss > 0 ? 0 : TUN_F_TSO4 | TUN_F_TSO6);

    if (fd < 0)
        die("open /dev/net/tun");
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0)
        die(name);
    if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0 || ioctl(fd, TUNSETOFFLOAD, offload) < 0)
        die("TUNSETVNETHDRSZ, TUNSETOFFLOAD");
    return fd;
}

/* Reads what device d->from has (a turn's worth), dropping or queueing each frame. A frame
 * counts against the limit with its bookkeeping, so that a flood of small frames is bounded too. */
static void read_dir(struct dir *d, uint64_t now)
{
    static uint8_t buf[FRAME_MAX];

    for (int i = 0; i < READS_PER_TURN; i++) {
        ssize_t n = read(d->from, buf, sizeof(buf));
        uint64_t cost;
        struct frame *f;
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("read");
            return;
        }
        cost = sizeof(*f) + (uint64_t)n;
        if (d->queued + cost > limit) {
            count.full++;
            continue;
        }
        if (loss > 0 && uniform() < loss) {
            count.lost++;
            continue;
        }
        if (!(f = malloc(cost)))
            die("malloc");
        memcpy(f->data, buf, (size_t)n);
        f->len = (uint32_t)n;
        f->due_ns = now + delay_ns;
        f->next = NULL;
        if (d->tail)
            d->tail->next = f;
        else
            d->head = f;
        d->tail = f;
        d->queued += cost;
    }
}

/* Notes how late the timer's wake-up at now was. */
static void note_lateness(uint64_t now)
{
    uint64_t late = now > armed_ns ? now - armed_ns : 0;

    if (!armed_ns)
        return;
    wake_ns = wake_ns - wake_ns / 8 + late / 8;
    armed_ns = 0;
}

/* Writes every frame due by now; the earliest still waiting in all directions, or 0. */
static uint64_t release_due(uint64_t now)
{
    uint64_t next = 0;

    for (size_t k = 0; k < ndirs; k++) {
        struct dir *d = &dirs[k];
        struct frame *f;
        while ((f = d->head) && f->due_ns <= now) {
            if (write(d->to, f->data, f->len) == (ssize_t)f->len) {
                count.frames++;
                count.bytes += f->len - VNET_HDR;
            } else {
                count.write_errors++;
            }
            d->head = f->next;
            if (!d->head)
                d->tail = NULL;
            d->queued -= sizeof(*f) + f->len;
            free(f);
        }
        if (d->head && (!next || d->head->due_ns < next))
            next = d->head->due_ns;
    }
    return next;
}

/* Arms the timer for due_ns. */
static void arm(int tfd, uint64_t due_ns)
{
    struct itimerspec it = {0};

    armed_ns = due_ns;
    it.it_value.tv_sec = (time_t)(due_ns / 1000000000u);
    it.it_value.tv_nsec = (long)(due_ns % 1000000000u);
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL) < 0) /* 0: disarmed */
        die("timerfd_settime");
}

/* The wait before the frame due at next (0: none waits): -1 to sleep until a frame comes, 0 to
 * poll (it is due sooner than a wake-up would take), else the timer armed a wake-up early. */
static int wait_for(int tfd, uint64_t next, uint64_t now)
{
    if (!next)
        return -1;
    if (next <= now + wake_ns)
        return 0;
    if (armed_ns != next - wake_ns)
        arm(tfd, next - wake_ns);
    return -1;
}

static void report(void)
{
    fprintf(stderr,
            "ferry-delayline: %" PRIu64 " frames (%" PRIu64 " bytes) forwarded, %" PRIu64
            " lost, %" PRIu64 " dropped by a full queue, %" PRIu64 " writes failed\n",
            count.frames, count.bytes, count.lost, count.full, count.write_errors);
}

static void usage(void)
{
    fprintf(stderr, "usage: ferry-delayline [--delay-us US] [--loss PCT] [--limit BYTES] "
                    "[--seed N] NAME...\n");
    exit(2);
}

static void options(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"delay-us", required_argument, NULL, 'd'},
        {"loss", required_argument, NULL, 'l'},
        {"limit", required_argument, NULL, 'q'},
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    char *end;

    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        errno = 0;
        switch (ch) {
        case 'd':
            delay_ns = strtoull(optarg, &end, 10) * 1000u;
            break;
        case 'l':
            loss = strtod(optarg, &end) / 100.0;
            if (loss < 0 || loss > 1)
                usage();
            break;
        case 'q':
            limit = strtoull(optarg, &end, 10);
            break;
        case 's':
            rng = strtoull(optarg, &end, 10) | 1;
            break;
        default:
            usage();
        }
        if (errno || *end)
            usage();
    }
    if (optind == argc || argc - optind > MAX_LINKS)
        usage();
}

int main(int argc, char **argv)
{
    struct epoll_event ev[64];
    sigset_t sigs;
    int ep, tfd, sfd;

    options(argc, argv);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        (sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
        die("epoll, timerfd, signalfd");
    for (int i = optind; i < argc; i++) {
        char node[IFNAMSIZ];
        int b, n;
        if (strlen(argv[i]) > IFNAMSIZ - 3) {
            fprintf(stderr, "ferry-delayline: %s: names of at most %d characters\n", argv[i],
                    IFNAMSIZ - 3);
            return 2;
        }
        snprintf(node, sizeof(node), "%s-n", argv[i]);
        b = tap_open(argv[i]);
        n = tap_open(node);
        dirs[ndirs++] = (struct dir){.from = n, .to = b};
        dirs[ndirs++] = (struct dir){.from = b, .to = n};
    }
    for (size_t k = 0; k < ndirs; k++) {
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = k};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, dirs[k].from, &e) < 0)
            die("epoll_ctl");
    }
    struct epoll_event et = {.events = EPOLLIN, .data.u64 = UINT64_MAX - 1};
    struct epoll_event es = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &et) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &es) < 0)
        die("epoll_ctl");
    printf("ready\n");
    fflush(stdout);
    for (int timeout = -1;;) {
        int n = epoll_wait(ep, ev, 64, timeout);
        uint64_t now, next;
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        now = now_ns();
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == UINT64_MAX) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                    report();
                    if (si.ssi_signo != SIGUSR1)
                        return 0;
                }
            } else if (ev[i].data.u64 == UINT64_MAX - 1) {
                uint64_t expirations;
                (void)!read(tfd, &expirations, sizeof(expirations));
                note_lateness(now);
            } else {
                read_dir(&dirs[ev[i].data.u64], now);
            }
        }
        now = now_ns();
        next = release_due(now);
        timeout = wait_for(tfd, next, now);
    }
}

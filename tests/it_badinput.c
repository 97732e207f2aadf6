/*
 * it_badinput.c - raw connections that break the protocol: random bytes, oversized and
 * truncated frames, a first message other than HELLO, unknown types, counts beyond the
 * payload, a release of an id never got, PUT_BATCH offsets outside the staging area. Each
 * such connection is closed by the daemon with a logged reason and counted in
 * stats.protocol_errors, while a libferry client keeps being served. Silent or stalled
 * connections must not hold anyone up, and the arena a client holds cannot be resized.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/proto.h"

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

static void header(uint8_t out[PROTO_HEADER_SIZE], uint32_t len, uint16_t type, uint16_t flags)
{
    uint8_t *p = h_le32(out, len);
    p = h_le16(p, type);
    p = h_le16(p, flags);
    h_le64(p, 7);
}

static int hello_conn(const struct ferryd *d)
{
    int fd = h_raw_connect(d->sock);
    assert_int_equal(h_raw_hello(fd), 0);
    return fd;
}

/* What a rejection is measured against. */
struct before {
    uint64_t errors;
    long log_size;
};

static struct before snap(const struct ferryd *d, ferry_client *c)
{
    struct before b = {h_stats(c).protocol_errors, h_file_size(d->log)};
    return b;
}

/* A put, get and check through libferry: the daemon still serves. */
static void still_serves(ferry_client *c)
{
    static int n;
    ferry_id id = h_idf("alive-%d", n++);
    uint8_t *data = h_pattern(3000, h_seed(&id));
    H_OK(ferry_put(c, &id, data, 3000, NULL, 0));
    free(data);
    h_assert_object(c, &id, 3000, 0);
}

/* The daemon closes fd (bounded), logs something, counts one protocol error more, lets
 * the connection go, and still serves c. */
static void expect_rejected(const struct ferryd *d, ferry_client *c, int fd, const struct before *b,
                            const char *what)
{
    if (!h_raw_wait_closed(fd, H_EVENT_MS))
        fail_msg("%s: the daemon did not close the connection within %d ms", what, H_EVENT_MS);
    close(fd);
    uint64_t errors = H_WAIT_STAT(c, protocol_errors, b->errors + 1);
    if (errors != b->errors + 1)
        fail_msg("%s: protocol_errors is %llu, expected %llu", what, (unsigned long long)errors,
                 (unsigned long long)b->errors + 1);
    struct h_wait w;
    for (h_wait_begin(&w, H_EVENT_MS); h_file_size(d->log) <= b->log_size;)
        if (!h_wait_next(&w))
            fail_msg("%s: nothing was logged", what);
    assert_int_equal(H_WAIT_STAT(c, clients, 1), 1);
    still_serves(c);
}

static ferry_client *client(struct ferryd *d)
{
    ferry_client *c = h_connect(d);
    assert_int_equal(H_WAIT_STAT(c, clients, 1), 1);
    return c;
}

/* Garbage whose header is invalid on its own (non-zero flags), so that the daemon cannot
 * be waiting for more of it. */
static void random_bytes(uint8_t *buf, size_t n, uint32_t seed)
{
    uint32_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
    if (buf[6] == 0 && buf[7] == 0)
        buf[6] = 1;
}

/* The daemon's arena memfd, reopened through /proc as the same file (what every client holds). */
static int arena_fd(const struct ferryd *d)
{
    char dir[64], link[256], path[320];
    struct dirent *e;
    int fd = -1;

    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)d->pid);
    DIR *fds = opendir(dir);
    assert_non_null(fds);
    while (fd < 0 && (e = readdir(fds))) {
        ssize_t n;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        n = readlink(path, link, sizeof(link) - 1);
        if (n > 0 && (link[n] = '\0', strstr(link, "memfd:ferry-arena")))
            fd = open(path, O_RDWR | O_CLOEXEC);
    }
    closedir(fds);
    assert_true(fd >= 0);
    return fd;
}

/* The arena's memfd is in every client's hands, writable: truncating it (or growing it) must
 * fail, and the daemon go on serving. */
H_TEST(arena_size_cannot_be_changed_by_a_client)
{
    ferry_client *c = client(d);
    ferry_id x = h_id("survives-truncate");

    H_OK(h_put_direct(c, &x, 4096, 0));
    int fd = arena_fd(d);
    int seals = fcntl(fd, F_GET_SEALS);
    assert_true(seals >= 0);
    assert_true((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
                (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    assert_int_equal(ftruncate(fd, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(fd, 1ll << 40), -1);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, 0), -1); /* sealed for good */
    close(fd);
    h_assert_object(c, &x, 4096, 0);
    ferry_disconnect(c);
}

/* Random bytes as the first thing on a connection. */
H_TEST(random_bytes_are_rejected)
{
    ferry_client *c = client(d);
    for (uint32_t seed = 1; seed <= 20; seed++) {
        struct before b = snap(d, c);
        uint8_t junk[256];
        random_bytes(junk, sizeof(junk), seed * 2654435761u);
        int fd = h_raw_connect(d->sock);
        assert_int_equal(h_raw_write(fd, junk, sizeof(junk)), 0);
        expect_rejected(d, c, fd, &b, "random bytes");
    }
    assert_int_equal(h_stats(c).protocol_errors, 20);
    ferry_disconnect(c);
}

/* A header announcing more than PROTO_MAX_REQUEST is refused before any payload, first
 * thing or after HELLO. */
H_TEST(header_longer_than_max_request_is_rejected)
{
    ferry_client *c = client(d);
    uint8_t h[PROTO_HEADER_SIZE];
    struct before b = snap(d, c);
    int fd = h_raw_connect(d->sock);
    header(h, PROTO_MAX_REQUEST + 1, PROTO_HELLO, 0);
    assert_int_equal(h_raw_write(fd, h, sizeof(h)), 0);
    expect_rejected(d, c, fd, &b, "oversized HELLO");

    b = snap(d, c);
    fd = hello_conn(d);
    header(h, UINT32_MAX, PROTO_CREATE, 0);
    assert_int_equal(h_raw_write(fd, h, sizeof(h)), 0);
    expect_rejected(d, c, fd, &b, "oversized CREATE");
    ferry_disconnect(c);
}

/* A frame cut short by the end of the stream (header or payload). */
H_TEST(truncated_frame_then_eof_is_rejected)
{
    ferry_client *c = client(d);
    uint8_t buf[PROTO_HEADER_SIZE + 5] = {0};
    header(buf, 12, PROTO_HELLO, 0);
    struct before b = snap(d, c);
    int fd = h_raw_connect(d->sock);
    assert_int_equal(h_raw_write(fd, buf, sizeof(buf)), 0);
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    expect_rejected(d, c, fd, &b, "HELLO cut in its payload");

    b = snap(d, c);
    fd = hello_conn(d);
    header(buf, FERRY_ID_SIZE + 16, PROTO_CREATE, 0);
    assert_int_equal(h_raw_write(fd, buf, 9), 0); /* half a header */
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    expect_rejected(d, c, fd, &b, "CREATE cut in its header");
    ferry_disconnect(c);
}

/* Anything but HELLO first, and a HELLO with a wrong magic; a HELLO of another protocol
 * version is told why (an error reply) and stays unable to do anything else. */
H_TEST(first_message_must_be_a_valid_hello)
{
    ferry_client *c = client(d);
    uint8_t id[FERRY_ID_SIZE] = {1, 2, 3}, hello[12], reply[512], *p;
    struct before b = snap(d, c);
    int fd = h_raw_connect(d->sock), n;
    assert_int_equal(h_raw_frame(fd, PROTO_CONTAINS, 1, id, sizeof(id)), 0);
    expect_rejected(d, c, fd, &b, "CONTAINS before HELLO");

    p = h_le32(hello, PROTO_MAGIC ^ 1);
    p = h_le32(p, PROTO_VERSION);
    h_le32(p, (uint32_t)getpid());
    b = snap(d, c);
    fd = h_raw_connect(d->sock);
    assert_int_equal(h_raw_frame(fd, PROTO_HELLO, 1, hello, sizeof(hello)), 0);
    expect_rejected(d, c, fd, &b, "HELLO with a bad magic");

    p = h_le32(hello, PROTO_MAGIC);
    h_le32(p, PROTO_VERSION + 1);
    b = snap(d, c);
    fd = h_raw_connect(d->sock);
    assert_int_equal(h_raw_frame(fd, PROTO_HELLO, 1, hello, sizeof(hello)), 0);
    n = (int)h_raw_reply(fd, PROTO_HELLO, reply, sizeof(reply));
    assert_true(n > 6);
    assert_int_equal((int32_t)h_rd32(reply), FERRY_EPROTO);
    assert_non_null(memmem(reply + 6, (size_t)n - 6, "client protocol", 15));
    assert_int_equal(h_raw_frame(fd, PROTO_CONTAINS, 2, id, sizeof(id)), 0);
    expect_rejected(d, c, fd, &b, "CONTAINS after a HELLO of another version");

    /* The oldest version still served (a library of the release before) is greeted. */
    p = h_le32(hello, PROTO_MAGIC);
    h_le32(p, PROTO_VERSION_MIN);
    fd = h_raw_connect(d->sock);
    assert_int_equal(h_raw_frame(fd, PROTO_HELLO, 1, hello, sizeof(hello)), 0);
    n = (int)h_raw_reply(fd, PROTO_HELLO, reply, sizeof(reply));
    assert_true(n >= 4);
    assert_int_equal((int32_t)h_rd32(reply), 0);
    close(fd);
    ferry_disconnect(c);
}

/* Types that are not requests after a good HELLO. */
H_TEST(unknown_type_after_hello_is_rejected)
{
    static const uint16_t types[] = {0, PROTO_TYPE_MAX + 1, 0x7fff, PROTO_HELLO | PROTO_REPLY_BIT};
    ferry_client *c = client(d);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct before b = snap(d, c);
        int fd = hello_conn(d);
        assert_int_equal(h_raw_frame(fd, types[i], 2, NULL, 0), 0);
        expect_rejected(d, c, fd, &b, "unknown type");
    }
    ferry_disconnect(c);
}

/* A GET whose count exceeds its payload, and one over PROTO_MAX_IDS. */
H_TEST(get_with_bad_count_is_rejected)
{
    ferry_client *c = client(d);
    uint8_t small[12 + FERRY_ID_SIZE] = {0};
    h_le32(h_le64(small, 0), 10); /* 10 ids announced, 1 present */
    struct before b = snap(d, c);
    int fd = hello_conn(d);
    assert_int_equal(h_raw_frame(fd, PROTO_GET, 2, small, sizeof(small)), 0);
    expect_rejected(d, c, fd, &b, "GET of 10 ids with 1");

    uint32_t n = PROTO_MAX_IDS + 1, len = 12 + n * FERRY_ID_SIZE;
    uint8_t *big = calloc(1, len);
    assert_non_null(big);
    h_le32(h_le64(big, 0), n);
    b = snap(d, c);
    fd = hello_conn(d);
    int sent = h_raw_frame(fd, PROTO_GET, 3, big, len);
    free(big);
    (void)sent; /* the daemon may close before reading it all */
    expect_rejected(d, c, fd, &b, "GET over PROTO_MAX_IDS");
    ferry_disconnect(c);
}

/* PEERS over PROTO_MAX_PEERS, and an EAGER_MAX short of its u64; a PEERS within the limit is
 * answered (a standalone node: no provider, no peers). */
H_TEST(peers_and_eager_max_malformed_are_rejected)
{
    ferry_client *c = client(d);
    uint8_t max[4], reply[64], *p = reply;
    struct before b = snap(d, c);
    int fd = hello_conn(d);

    h_le32(max, PROTO_MAX_PEERS + 1);
    assert_int_equal(h_raw_frame(fd, PROTO_PEERS, 2, max, sizeof(max)), 0);
    expect_rejected(d, c, fd, &b, "PEERS over PROTO_MAX_PEERS");

    b = snap(d, c);
    fd = hello_conn(d);
    assert_int_equal(h_raw_frame(fd, PROTO_EAGER_MAX, 2, max, sizeof(max)), 0);
    expect_rejected(d, c, fd, &b, "EAGER_MAX of 4 bytes");

    fd = hello_conn(d);
    h_le32(max, PROTO_MAX_PEERS);
    assert_int_equal(h_raw_frame(fd, PROTO_PEERS, 3, max, sizeof(max)), 0);
    assert_int_equal(h_raw_reply(fd, PROTO_PEERS, reply, sizeof(reply)), 4 + 1 + 4);
    assert_int_equal(h_rd32(p), 0); /* status */
    assert_int_equal(p[4], 0);      /* provider: "" */
    assert_int_equal(h_rd32(p + 5), 0);
    close(fd);
    ferry_disconnect(c);
}

/* RELEASE of an id this connection never got, even one that exists. */
H_TEST(release_of_id_never_got_is_rejected)
{
    ferry_client *c = client(d);
    ferry_id there = h_id("there"), nowhere = h_id("nowhere");
    H_OK(h_put_direct(c, &there, 10, 0));
    const ferry_id *ids[] = {&nowhere, &there};
    for (int i = 0; i < 2; i++) {
        struct before b = snap(d, c);
        int fd = hello_conn(d);
        assert_int_equal(h_raw_frame(fd, PROTO_RELEASE, 2, ids[i]->bytes, FERRY_ID_SIZE), 0);
        expect_rejected(d, c, fd, &b, "RELEASE of an id never got");
    }
    ferry_object_info info;
    assert_true(h_list_find(c, &there, &info));
    assert_int_equal(info.refcount, 0);
    ferry_disconnect(c);
}

/* Asks for the connection's staging area: its size. */
static uint64_t stage(int fd)
{
    uint8_t reply[64];
    assert_int_equal(h_raw_frame(fd, PROTO_STAGE, 3, NULL, 0), 0);
    assert_int_equal(h_raw_reply(fd, PROTO_STAGE, reply, sizeof(reply)), 20);
    assert_int_equal(h_rd32(reply), 0);
    uint64_t size = h_rd64(reply + 12);
    assert_true(size >= 64);
    return size;
}

static int put_batch(int fd, const ferry_id *id, uint64_t offset, uint64_t size)
{
    uint8_t msg[4 + PROTO_BATCH_ENTRY_SIZE], *p = h_le32(msg, 1);
    memcpy(p, id->bytes, FERRY_ID_SIZE);
    p = h_le64(p + FERRY_ID_SIZE, offset);
    p = h_le64(p, size);
    h_le64(p, 0);
    return h_raw_frame(fd, PROTO_PUT_BATCH, 4, msg, sizeof(msg));
}

/* PUT_BATCH entries must lie inside the connection's staging area: a good entry is
 * stored, one across its end, one wrapping around, and one without an area are refused. */
H_TEST(put_batch_outside_the_staging_area_is_rejected)
{
    ferry_client *c = client(d);
    ferry_id good = h_id("batch-good"), bad = h_id("batch-bad");
    struct before b = snap(d, c);
    int fd = hello_conn(d);
    uint64_t size = stage(fd);
    assert_int_equal(put_batch(fd, &good, 0, 16), 0);
    uint8_t reply[64];
    assert_int_equal(h_raw_reply(fd, PROTO_PUT_BATCH, reply, sizeof(reply)), 14);
    assert_int_equal(h_rd32(reply), 0);              /* the request's status */
    assert_int_equal(h_rd32(reply + 4), 1);          /* n */
    assert_int_equal(h_rd32(reply + 8), 0);          /* the entry's status */
    assert_int_equal(reply[12] | reply[13] << 8, 0); /* no failure, no reason */
    assert_int_equal(h_contains(c, &good), 1);
    assert_int_equal(put_batch(fd, &bad, size - 8, 16), 0);
    expect_rejected(d, c, fd, &b, "PUT_BATCH across the end of the staging area");

    b = snap(d, c);
    fd = hello_conn(d);
    stage(fd);
    assert_int_equal(put_batch(fd, &bad, UINT64_MAX - 7, 16), 0);
    expect_rejected(d, c, fd, &b, "PUT_BATCH with a wrapping offset");

    b = snap(d, c);
    fd = hello_conn(d);
    assert_int_equal(put_batch(fd, &bad, 0, 16), 0);
    expect_rejected(d, c, fd, &b, "PUT_BATCH without a staging area");
    assert_int_equal(h_contains(c, &bad), 0);
    ferry_disconnect(c);
}

/* Control: well-formed raw requests are answered, an error answer keeps the connection,
 * and nothing counts as a protocol error (so the rejections above are about the input). */
H_TEST(well_formed_raw_requests_are_answered)
{
    ferry_client *c = client(d);
    ferry_id there = h_id("there"), missing = h_id("missing");
    H_OK(h_put_direct(c, &there, 10, 0));
    int fd = hello_conn(d);
    uint8_t reply[512];
    assert_int_equal(h_raw_frame(fd, PROTO_SEAL, 5, (uint8_t[FERRY_ID_SIZE + 1]){0}, 21), 0);
    long len = h_raw_reply(fd, PROTO_SEAL, reply, sizeof(reply));
    assert_true(len >= 6);
    assert_int_equal((int32_t)h_rd32(reply), FERRY_ENOENT);
    const ferry_id *ids[] = {&there, &missing};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(h_raw_frame(fd, PROTO_CONTAINS, 6, ids[i]->bytes, FERRY_ID_SIZE), 0);
        assert_int_equal(h_raw_reply(fd, PROTO_CONTAINS, reply, sizeof(reply)), 5);
        assert_int_equal(h_rd32(reply), 0);
        assert_int_equal(reply[4], i == 0);
    }
    close(fd);
    assert_int_equal(H_WAIT_STAT(c, clients, 1), 1);
    assert_int_equal(h_stats(c).protocol_errors, 0);
    ferry_disconnect(c);
}

/* Connections that send nothing, half a header, or only HELLO hold nobody up. */
H_TEST(silent_and_stalled_connections_do_not_block_others)
{
    ferry_client *c = client(d);
    int silent = h_raw_connect(d->sock);
    int partial = h_raw_connect(d->sock);
    uint8_t h[PROTO_HEADER_SIZE];
    header(h, 12, PROTO_HELLO, 0);
    assert_int_equal(h_raw_write(partial, h, 5), 0);
    int idle = hello_conn(d);
    int64_t start = h_now_ms();
    ferry_client *other = h_connect(d);
    still_serves(c);
    still_serves(other);
    assert_true(h_now_ms() - start < 2000);
    ferry_disconnect(other);
    close(silent);
    close(idle);
    close(partial);
    assert_int_equal(H_WAIT_STAT(c, clients, 1), 1);
    ferry_disconnect(c);
}

#define HUGE (2u << 20)
#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long read_long(const char *path, const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen(path, "r");

    while (f && v < 0 && fgets(line, sizeof(line), f))
        if (!key || strncmp(line, key, strlen(key)) == 0)
            v = strtol(line + (key ? strlen(key) : 0), NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static long hugepages_before = -1; /* what the huge-page case found, put back by its teardown */

static int write_long(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    int ok = f && fprintf(f, "%ld\n", v) > 0;

    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

/* A client punches a hole in a --hugepages arena (no seal but F_SEAL_WRITE stops it), another
 * process takes the freed huge page, and the daemon then touches the range (it hashes the
 * object there when asked for its digest): it must not die of SIGBUS. It counts the fault, and
 * serves on. Raises nr_hugepages by the two the arena needs and puts it back; skipped where it
 * cannot. */
static void punched_huge_page_does_not_kill_the_daemon_nor_lock_out_new_clients(void **state)
{
    static const char *const huge[] = {"--hugepages", NULL};
    struct ferryd d;
    long before = hugepages_before = read_long(NR_HUGEPAGES, NULL);
    ferry_id big = h_id("punched"), small = h_id("after");
    uint8_t *data;

    /* Two for the store's 4 MiB, one for the shared index that follows it in the arena. */
    if (before < 0 || write_long(NR_HUGEPAGES, before + 3) < 0 ||
        read_long("/proc/meminfo", "HugePages_Free:") < 3)
        H_SKIP("cannot have three free huge pages here (nr_hugepages %ld)", before);
    h_daemon_init(&d);
    h_daemon_start(&d, "4M", huge);
    ferry_client *c = h_connect(&d), *other = h_connect(&d); /* mapped before the hole */
    H_OK(h_put_direct(other, &small, 4096, 0));              /* in the first page, which stays */
    /* Over both pages: put by copy, which shares pages (a create would take both whole). */
    data = malloc(3 * HUGE / 2);
    assert_non_null(data);
    memset(data, 1, 3 * HUGE / 2);
    H_OK(ferry_put(c, &big, data, 3 * HUGE / 2, NULL, 0));
    free(data);
    int fd = arena_fd(&d);
    assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, HUGE, HUGE), 0);
    close(fd);
    long free_pages = read_long("/proc/meminfo", "HugePages_Free:");
    assert_true(free_pages >= 1);
    size_t hog_len = (size_t)free_pages * HUGE;
    void *hog = mmap(NULL, hog_len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    assert_true(hog != MAP_FAILED);
    assert_int_equal(read_long("/proc/meminfo", "HugePages_Free:"), 0);
    uint8_t root[FERRY_DIGEST_LEN];
    H_OK(ferry_digest(c, &big, root)); /* hashed by the daemon: it reads the punched page */
    assert_true(h_wait_stat_min(other, "arena_faults", 1, H_EVENT_MS) >= 1);
    h_assert_object(other, &small, 4096, 0);
    /* A client that comes after the hole maps the arena too (no reservation of the whole
     * range: MAP_NORESERVE) and reads what lies outside the hole. */
    ferry_client *late = h_connect(&d);
    h_assert_object(late, &small, 4096, 0);
    ferry_disconnect(late);
    H_OK(ferry_delete(other, &big));
    assert_int_equal(kill(d.pid, 0), 0);
    ferry_disconnect(other);
    ferry_disconnect(c);
    munmap(hog, hog_len);
    d.ok = 1;
    h_daemon_stop(&d);
    assert_true(h_file_contains(d.log, "arena_faults"));
    h_daemon_cleanup(&d);
    (void)state;
}

static int put_hugepages_back(void **state)
{
    if (hugepages_before >= 0)
        write_long(NR_HUGEPAGES, hugepages_before);
    (void)state;
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(arena_size_cannot_be_changed_by_a_client),
        T(random_bytes_are_rejected),
        T(header_longer_than_max_request_is_rejected),
        T(truncated_frame_then_eof_is_rejected),
        T(first_message_must_be_a_valid_hello),
        T(unknown_type_after_hello_is_rejected),
        T(peers_and_eager_max_malformed_are_rejected),
        T(get_with_bad_count_is_rejected),
        T(release_of_id_never_got_is_rejected),
        T(put_batch_outside_the_staging_area_is_rejected),
        T(well_formed_raw_requests_are_answered),
        T(silent_and_stalled_connections_do_not_block_others),
        cmocka_unit_test_teardown(
            punched_huge_page_does_not_kill_the_daemon_nor_lock_out_new_clients,
            put_hugepages_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

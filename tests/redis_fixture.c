/* redis_fixture.c - see redis_fixture.h. */
#include "redis_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "free_port.h"

#define START_TIMEOUT_MS 5000

static void exec_server(int port)
{
    char arg[16];
    int null = open("/dev/null", O_WRONLY);

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (null >= 0) {
        dup2(null, STDOUT_FILENO);
        close(null);
    }
    snprintf(arg, sizeof(arg), "%d", port);
    execlp("redis-server", "redis-server", "--port", arg, "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", (char *)NULL);
    perror("exec redis-server");
    _exit(127);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int answers_ping(const struct redis_fixture *f)
{
    redisContext *c = redis_fixture_connect(f, 0);
    redisReply *r = c ? redisCommand(c, "PING") : NULL;
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;

    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return ok;
}

int redis_fixture_start(struct redis_fixture *f)
{
    long long deadline = now_ms() + START_TIMEOUT_MS;

    if (!f->port)
        f->port = free_port_pick();
    if (f->port <= 0)
        return -1;
    f->pid = fork();
    if (f->pid < 0) {
        f->pid = 0;
        return -1;
    }
    if (f->pid == 0)
        exec_server(f->port);
    while (now_ms() < deadline) {
        if (waitpid(f->pid, NULL, WNOHANG) == f->pid) {
            fprintf(stderr, "redis-server exited at start (port %d)\n", f->port);
            f->pid = 0;
            return -1;
        }
        if (answers_ping(f))
            return 0;
        usleep(20000);
    }
    fprintf(stderr, "redis-server did not answer PING in %d ms\n", START_TIMEOUT_MS);
    redis_fixture_kill(f);
    return -1;
}

void redis_fixture_kill(struct redis_fixture *f)
{
    if (!f->pid)
        return;
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
    f->pid = 0;
}

void redis_fixture_freeze(struct redis_fixture *f, int frozen)
{
    if (f->pid)
        kill(f->pid, frozen ? SIGSTOP : SIGCONT);
}

redisContext *redis_fixture_connect(const struct redis_fixture *f, int db)
{
    struct timeval tv = {.tv_sec = 1};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", f->port, tv);
    redisReply *r;

    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK)
        goto free_context;
    r = redisCommand(c, "SELECT %d", db);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r)
            freeReplyObject(r);
        goto free_context;
    }
    freeReplyObject(r);
    return c;

free_context:
    if (c)
        redisFree(c);
    return NULL;
}

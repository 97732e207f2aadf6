/*
 * redis_fixture.h - a private redis-server for tests: on 127.0.0.1, a free port, no
 * persistence, killed with the test process (PR_SET_PDEATHSIG) if the test dies first.
 */
#ifndef FERRY_REDIS_FIXTURE_H
#define FERRY_REDIS_FIXTURE_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

struct redis_fixture {
    pid_t pid; /* 0 when not running */
    int port;  /* chosen by the first start, kept by restarts */
};

/* Starts redis-server (on f->port if set, else on a free port) and waits, at most 5 s, until
 * it answers PING. 0, or -1 (with a message on stderr). */
int redis_fixture_start(struct redis_fixture *f);
/* Kills it (SIGKILL) and reaps it. */
void redis_fixture_kill(struct redis_fixture *f);
/* Freezes (SIGSTOP) or thaws (SIGCONT) it: a server that accepts but never answers. */
void redis_fixture_freeze(struct redis_fixture *f, int frozen);
/* A synchronous connection to database db (1 s timeouts), NULL on failure. */
redisContext *redis_fixture_connect(const struct redis_fixture *f, int db);

#endif

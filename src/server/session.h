/*
 * session.h - one connected client: its socket buffers, the references it holds (which
 * include one on each of its unsealed objects), its staging area and its blocked get.
 *
 * Ownership: the server's `sessions` list owns a session from accept to close; a closed
 * session moves to `closed` and is freed after the loop turn, because events of the same
 * turn may still point at it. Everything runs on the loop's thread.
 */
#ifndef FERRY_SESSION_H
#define FERRY_SESSION_H

#include <stdint.h>
#include <sys/types.h>

#include "common/proto.h"
#include "server/server.h"

/* References a session holds on objects under one id: usually one entry; more when an id was
 * deleted while held and a new object took it (release then drops the new one's first). */
/* References one object may have from clients: far below the 32-bit counts' wrap. */
#define REFS_MAX (1u << 31)

struct held {
    struct object *o;
    uint32_t count;
    struct held *next;
};

/* What a session waits for. The protocol is request-reply: a session waits for one thing at
 * most, and processes no request meanwhile (can_process). Each wait keeps its state in the
 * member named beside it; session_wait_begin and session_wait_end (session_int.h) move between
 * them, and a close ends the one under way. */
enum session_wait {
    SESSION_IDLE,  /* none: it processes its requests */
    SESSION_GET,   /* a get, for seals and restores of its ids (get) */
    SESSION_FETCH, /* a fetch, for the engine to make its ids local (fetch) */
    SESSION_DIR,   /* nodes, where or a cluster delete, for the directory's answer (dir) */
    SESSION_SEAL,  /* a seal or put batch under --strict-ids, for its claims (seal) */
    SESSION_HASH,  /* a hash, for a digest computed on demand (hash_obj) */
    SESSION_ROOM   /* a create, for room that spilling makes (in room_waiters); the request
                    * stays in the input, dispatched again then */
};

/* A session blocked in get, waiting for one of its ids (an entry in server.waiters). */
struct get_wait {
    struct session *ss;
    uint32_t index;
    int restoring; /* for a spilled object's restore, not a seal */
    ferry_id id;
    struct get_wait *prev, *next;
};

struct pending_get {
    uint64_t tag;
    uint32_t n, missing;
    uint32_t restoring; /* entries waiting for a restore: the get ends after them */
    int no_wait;        /* timeout 0: ends when nothing but absent ids is missing */
    int expired;        /* its timeout passed while restores were under way */
    uint64_t start_ns;  /* CLOCK_MONOTONIC, for the latency */
    struct proto_get_entry *entries;
    struct get_wait *waits; /* n of them; those not waiting have ss == NULL */
    struct loop_timer timer;
};

/* A session blocked in FETCH until each id is local, has failed, or the timeout ends. */
struct pending_fetch {
    uint64_t tag;
    uint16_t type; /* FETCH or FETCH_AT, which the answer names */
    uint32_t n, missing;
    int32_t *statuses; /* FETCH_PENDING until answered */
    ferry_id *ids;     /* the ids asked for */
    char *why;         /* the first failure's reason (PROTO_MAX_DETAIL + 1 bytes) */
    int64_t timeout_ms;
    uint64_t start_ns; /* CLOCK_MONOTONIC, for the latency */
    struct loop_timer timer;
};

/* A session blocked in SEAL or PUT_BATCH under ferryd --strict-ids: each object stays
 * unsealed (invisible) until it is hashed and the directory has confirmed its content as the
 * id's (a claim), then is sealed, or aborted with FERRY_EEXIST. */
struct pending_seal {
    uint16_t type;
    uint64_t tag;
    uint8_t release;   /* SEAL: give the creator's reference back once sealed */
    uint32_t n, left;  /* objects, and those not answered yet */
    uint32_t cursor;   /* where the next answer is looked for: they come in order */
    ferry_id *ids;     /* the objects' ids */
    int32_t *statuses; /* SEAL_PENDING until answered */
    char *why;         /* the first failure's reason (PROTO_MAX_DETAIL + 1 bytes) */
};

/* A session blocked in NODES, WHERE or DELETE_CLUSTER until the directory answers. */
struct pending_dir {
    uint16_t type;
    uint64_t tag;
    ferry_id id; /* WHERE, DELETE_CLUSTER */
    int looking; /* DELETE_CLUSTER: the lookup of the put (and content) recorded for id is out */
    int known;   /* DELETE_CLUSTER: root is the content of the copy here */
    uint8_t root[DIGEST_LEN];
};

struct session {
    struct server *srv;
    int fd;
    struct loop_watch watch;
    uint64_t client_id;
    pid_t pid;
    int greeted; /* HELLO done */
    int refused; /* its hello was refused (max_clients): closed once the reply is out */
    struct loop_timer hello_deadline; /* armed until its hello: FERRYD_HELLO_DEADLINE_MS */
    uint32_t fast_block; /* its block of slots in the shared index, or FASTIDX_NO_BLOCK */
    int closed;
    int scheduled;
    uint8_t wait; /* enum session_wait */
    struct pbuf in, out;
    idmap held; /* id -> struct held chain */
    alloc_block *staging;
    struct session_ring *ring; /* its ring of puts (session_ring.c), or NULL */
    struct pending_get get;
    struct pending_fetch fetch;
    struct pending_dir dir;
    struct pending_seal seal;
    struct object *hash_obj; /* SESSION_HASH: the object whose digest is awaited */
    uint64_t hash_tag;
    struct session *hash_next, **hash_pprev; /* in server.hash_waiters while blocked */
    struct session *room_next;               /* SESSION_ROOM: in server.room_waiters */
    struct session *next, **pprev;           /* in server.sessions or server.closed */
    struct session *ready_next;              /* in server.ready when scheduled */
};

/* Accepts the connection on fd (non-blocking, close-on-exec) as a new session, which must say
 * hello within FERRYD_HELLO_DEADLINE_MS; past FERRYD_UNGREETED_MAX sessions without a hello,
 * the oldest of them is closed first. The caller closes fd on failure. */
int session_open(struct server *srv, int fd);
/* Processes input left in the buffer (after a blocked get ended). */
void session_resume(struct session *ss);
/* Closes the session: drops its references, aborts its unsealed objects, cancels its get,
 * frees its staging area. reason NULL is an orderly disconnect; otherwise it is logged and
 * counted as a protocol error. */
void session_close(struct session *ss, const char *reason);
void session_free(struct session *ss);
/* o was just sealed: completes the gets that waited for it. */
void session_wake_waiters(struct server *srv, struct object *o);
/* A restore of o ended (status 0: it is resident): the gets that waited for it go on. */
void session_restored(struct server *srv, struct object *o, int status);
/* How the rings' code drops a client whose ring is bad (session_close, given by its callers:
 * session_ring.c sits below session.c). */
typedef void session_drop_fn(struct session *ss, const char *reason);
/* Each turn: takes a bounded share of every ring of puts (dropping a client whose ring is bad);
 * nonzero when some ring has more. */
int session_rings_turn(struct server *srv, session_drop_fn *drop);
/* The loop's before_sleep (loop.h): after a turn that took entries, a short sleep without
 * kicks; else asks every ring to kick it, and does not sleep when one has entries. */
int session_rings_sleep(struct loop *l, void *arg, int timeout_ms);
/* Room was freed: sessions whose create waited for it try again. */
void session_room_ready(struct server *srv);
/* o's digest is in: answers the HASH requests that waited for it, or, for an unsealed
 * object, sends its claim (--strict-ids). */
void session_hash_ready(struct server *srv, struct object *o);

#endif

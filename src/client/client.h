/*
 * client.h - libferry's internals, shared by its files: the handle and the exchange.
 *
 * Locking: every public call on a handle holds c->lock (client_enter() .. client_leave()) from its
 * first to its last access of the handle, so the socket, the buffers and the held-reference table
 * are only ever touched by one thread at a time. Arena pointers handed out are not protected and
 * need not be: the bytes of a sealed object never change, an unsealed one is its creator's.
 */
#ifndef FERRY_CLIENT_H
#define FERRY_CLIENT_H

#include <pthread.h>
#include <stdint.h>

#include "client/wview.h"
#include "common/fastidx.h"
#include "common/idmap.h"
#include "common/proto.h"
#include "common/putring.h"

/* What this handle holds under one id: references, and whether it is our unsealed object. */
/* What the handle holds of an id: refs references, nfast of them through slots of the shared
 * index (their slot numbers in fast), the others the daemon's. */
struct cheld {
    uint32_t refs;
    uint32_t unsealed; /* ours, created and not sealed */
    uint32_t wopen;    /* while unsealed: its range is open in wv at woff (ferry_create's) */
    uint64_t woff;
    uint32_t nfast, capfast;
    int *fast;
};

struct ferry_client {
    pthread_mutex_t lock;
    int fd;
    int broken;           /* the connection failed; every call now fails with FERRY_ECONN */
    char broken_why[160]; /* the failure's detail, for the calls that follow */
    uint8_t *base;        /* the arena, read-only: what gets return (wview.h) */
    struct wview wv;      /* the arena again, writable where ferry_create's caller may write */
    /* The arena a third time, writable, for libferry's own copies (put, staging, the Python
     * module's puts): no pointer into it is ever handed out, so nothing outside libferry
     * writes through it, and it costs no protection change per put (wview.h says why). */
    uint8_t *copy_base;
    uint64_t arena_size;
    uint64_t tag;
    struct pbuf out;   /* the request being sent */
    struct pbuf in;    /* the last reply, header included */
    struct preader rd; /* over `in`, after the status */
    idmap held;
    uint64_t staging_offset, staging_size;
    uint64_t spin_ns;     /* how long to poll for a reply before sleeping ($FERRY_SPIN_US) */
    int64_t timeout_ms;   /* the connection's bound on each exchange (ferry_set_timeout), -1 none */
    int64_t wait_ms;      /* the daemon-side wait of the exchange under way (get, fetch), -1 none */
    uint64_t deadline_ns; /* when the exchange under way times out (CLOCK_MONOTONIC), 0 never */
    uint16_t req_type;    /* the request under way, for messages */
    int staging_state;    /* 0 not asked yet, 1 have one, -1 the daemon had no room */
    /* Gets without the daemon (fast.c): the shared index, this handle's block of slots in it;
     * fast_on 0 when the daemon gave none, or $FERRY_FASTPATH is 0. */
    struct fastidx_view fast;
    uint32_t fast_block;
    uint64_t fast_owner; /* the block's owner generation HELLO named */
    int fast_on;
    /* Puts without a message (put.c): the ring (its own mapping of ring_size bytes, which the
     * daemon gave), what this handle published to it (entries, and the data area's position);
     * ring_state 0 not asked yet, 1 set up, -1 none (a daemon under --strict-ids: puts wait). */
    struct putring ring;
    uint64_t ring_size, ring_tail, ring_data_tail;
    int ring_state;
    uint32_t ring_ask_in; /* ring_state -1: puts before asking again (0: never) */
    uint64_t alive_ns;    /* when client_alive last looked at the socket (CLOCK_MONOTONIC) */
};

/* Ids in one get that may go without the daemon (more go its way). */
#define CLIENT_FAST_MAX_IDS 64

/* fast.c, under the lock. A get of n ids without the daemon: 1 when all were sealed and
 * resident (out filled, each held through a slot), else 0 (nothing held: ask the daemon). */
int client_fast_get(struct ferry_client *c, const ferry_id *ids, size_t n, ferry_buffer *out);
/* Gives back one reference of id held through a slot: 1, or 0 when none is, or when the daemon
 * holds one too (that one goes first: see fast.c). */
int client_fast_release(struct ferry_client *c, const ferry_id *id);

/* Under the lock: 0 while the daemon's end of the socket is open, else the connection is
 * marked broken and FERRY_ECONN returned. With every_ms, it looks at most once per every_ms
 * (the calls that send nothing and must stay cheap). */
int client_alive(struct ferry_client *c, uint64_t every_ms);
/* Locks c for a call (clearing the thread's error detail); fails if the connection is gone. */
int client_enter(struct ferry_client *c);
/* Unlocks c and returns rc. */
int client_leave(struct ferry_client *c, int rc);

/* Marks the connection lost (after an I/O or protocol failure, or a timeout: the stream is out
 * of step) and returns err; the thread's error detail is kept for the calls that follow. */
int client_broken(struct ferry_client *c, int err);
/* ferry_create under the lock: *data in wv, writable until the seal (private: in copy_base, for
 * libferry's own copy, and *data is not to be handed out). */
int client_create(struct ferry_client *c, const ferry_id *id, uint64_t data_size,
                  const void *metadata, uint64_t metadata_size, int private, uint8_t **data);
/* Seals our object (and releases the creator's reference with release), under the lock. A
 * daemon with --strict-ids aborts it when the id has other content elsewhere (FERRY_EEXIST). */
int client_seal(struct ferry_client *c, const ferry_id *id, int release);
/* Aborts our unsealed object, under the lock. */
int client_abort(struct ferry_client *c, const ferry_id *id);

/* Starts a request of the given type in c->out. */
void client_req_begin(struct ferry_client *c, uint16_t type);
/* Sends the request in c->out, expecting no reply. Starts the exchange's deadline: the
 * connection's timeout from now. */
int client_req_send(struct ferry_client *c);
/* Reads the reply of type to the request just sent: c->rd is then positioned after the status;
 * a negative status is returned with the daemon's detail. A descriptor sent with it goes to
 * *fd when fd is not NULL. */
int client_reply_read(struct ferry_client *c, uint16_t type, int *fd);
/* req_send then reply_read. */
int client_call(struct ferry_client *c, uint16_t type);
/* client_call of a request the daemon may hold for wait_ms by contract (get, fetch; -1 without
 * end): the reply is waited for that long plus the connection's timeout. */
int client_call_wait(struct ferry_client *c, uint16_t type, int64_t wait_ms);
/* FERRY_EPROTO unless the reply was consumed exactly. */
int client_reply_end(struct ferry_client *c);
/* Reads a reply of n statuses and a reason (FETCH, PUT_BATCH: u32 n, n i32, u16 length and
 * text) to its end: status k goes to statuses[idx ? idx[k] : k], the first failure to *first
 * (0 when none) and its reason to why. 0, or FERRY_EPROTO (the connection is then broken). */
int client_read_statuses(struct ferry_client *c, const char *what, size_t n, const size_t *idx,
                         int *statuses, int *first, char why[PROTO_MAX_DETAIL + 1]);
/* FERRY_EPROTO unless [offset, offset + a + b) lies inside the arena. */
int client_check_range(struct ferry_client *c, uint64_t offset, uint64_t a, uint64_t b);

/* References this handle holds, by id (for ferry_release's checks). */
int client_held_add(struct ferry_client *c, const ferry_id *id, int unsealed);
void client_held_drop(struct ferry_client *c, const ferry_id *id);

#endif

/*
 * session_int.h - what the files of the session module share (session.c: replies, references,
 * the local requests, dispatch and I/O; session_get.c: gets, blocked until their ids are
 * sealed or restored; session_put.c: seals and batched puts, strict ids; session_cluster.c:
 * fetch, nodes, where, cluster deletes, peers). Everything runs on the loop's thread.
 */
#ifndef FERRY_SESSION_INT_H
#define FERRY_SESSION_INT_H

#include <assert.h>

#include "common/putring.h"
#include "server/session.h"

/* Blocks ss in w: it waited for nothing. */
static inline void session_wait_begin(struct session *ss, enum session_wait w)
{
    assert(ss->wait == SESSION_IDLE);
    ss->wait = (uint8_t)w;
}

/* Ends ss's wait w, the one under way. */
static inline void session_wait_end(struct session *ss, enum session_wait w)
{
    assert(ss->wait == w);
    ss->wait = SESSION_IDLE;
}

/* A handler returns 0, or FERRY_EPROTO (with err_set) to close the connection. A request
 * that fails for a legitimate reason gets an error reply and returns 0. */
/* A handler answers (0) or fails the session (< 0), or says SESSION_RETRY: not now, the
 * request stays in the input and is dispatched again once room is freed (a create that waits
 * for spilling). */
typedef int handler_fn(struct session *ss, const struct proto_request *q);
#define SESSION_RETRY 1
/* Not this turn: the request stays in the input, dispatched again next turn (the client's ring
 * has had its share of this one). */
#define SESSION_YIELD 2

/* Replies (session.c): begin one (status in its header), a bare status (a failure carries
 * ferry_errmsg()), n statuses and the first failure's reason (FETCH, PUT_BATCH). */
size_t session_reply_begin(struct session *ss, const struct proto_request *q, int32_t status);
int session_reply_status(struct session *ss, const struct proto_request *q, int status);
void session_reply_statuses(struct session *ss, const struct proto_request *q,
                            const int32_t *statuses, uint32_t n, const char *why);

/* References (session.c): take one on o for the session (FERRY_EBUSY at REFS_MAX,
 * FERRY_ENOMEM); give back one held on id (0, or -1 when none is held); forget o's (its object
 * is being aborted). */
int session_held_add(struct session *ss, struct object *o);
int session_held_release(struct session *ss, const ferry_id *id);
void session_held_forget(struct session *ss, struct object *o);

/* store_create_paged for ss (page 0: placed as any object), refused (FERRY_ENOSPACE, counted)
 * while ss holds max_held objects: one client cannot take the whole table. */
int session_create(struct session *ss, const ferry_id *id, uint64_t data_size,
                   uint64_t metadata_size, uint64_t page, struct object **out);
/* Objects (session.c): the sealed one with this id, or NULL; the session's own unsealed one
 * (or an error status with its detail); FERRY_ENOENT naming the id. */
struct object *session_find_sealed(struct session *ss, const ferry_id *id);
int session_own_unsealed(struct session *ss, const ferry_id *id, struct object **out);
int session_not_found(const ferry_id *id, const char *what);

/* session_get.c */
handler_fn session_handle_get;
/* A new session's get state; at its close in SESSION_GET, the get ends without a reply (its
 * waits and timer go; the references its entries took stay in the session's holdings). */
void session_get_init(struct session *ss);
void session_get_cancel(struct session *ss);

/* session_put.c */
handler_fn session_handle_seal, session_handle_put_batch;
/* The session closes in SESSION_SEAL: its claims are withdrawn, its batch's objects aborted. */
void session_seal_abandon(struct session *ss);
/* o, unsealed, has its digest: its strict seal sends the claim. */
void session_seal_hashed(struct object *o);

/* Sends the reply just framed, the only one queued (can_process holds the request until the
 * queue is empty), with fd riding on its first byte, and closes fd: 0, or FERRY_EPROTO. */
int session_send_fd(struct session *ss, const struct proto_request *q, int fd);

/* An object of the session, created and filled from the client's bytes at src (its staging
 * area, its ring); sealed, and its creator's reference given back. */
int session_put_copy(struct session *ss, const ferry_id *id, const uint8_t *src, uint64_t data_size,
                     uint64_t metadata_size, struct object **out);
void session_put_seal(struct session *ss, struct object *o);

/* session_ring.c */
handler_fn session_handle_ring, session_handle_flush, session_handle_kick;
/* Takes the session's ring, up to its share of the turn: 0 (empty now), SESSION_YIELD (entries
 * left for the next turn), SESSION_RETRY (an entry waits for room) or FERRY_EPROTO (a bad ring:
 * close the session). A request waits for its client's ring whole. */
int session_ring_take(struct session *ss);
/* At the close: takes what the ring holds (one ring's worth), then the ring goes. */
void session_ring_close(struct session *ss);
/* Before ss's request names ids (NULL: every object, LIST): when one is not in the store, every
 * other ring is taken first (each up to its share of the turn), so that a put that returned in
 * any process is found by a request sent after it. Costs a lookup per id when all are here, and
 * nothing when no other client has a ring. */
void session_rings_before_lookup(struct session *ss, const ferry_id *ids, uint32_t n,
                                 session_drop_fn *drop);

/* session_cluster.c */
handler_fn session_handle_fetch, session_handle_location, session_handle_dir,
    session_handle_delete_cluster, session_handle_peers, session_handle_eager_max;
/* A new session's fetch state; at its close in SESSION_FETCH, the engine forgets it. */
void session_fetch_init(struct session *ss);
void session_fetch_cancel(struct session *ss);

#endif

/*
 * engine_int.h - the transfer engine's internals, shared by its files (engine.h has the protocol
 * and its guarantees).
 *
 * Records and who owns them (all on the loop's thread):
 * - want: one per id being fetched, in e->wants while unfinished. Waiters hang off it. While a
 *   pull names it (w->entry != NULL) it outlives its finish; the entry frees it.
 * - peer: an outgoing connection to a holder, in e->peers until its connection closes. Its
 *   pulls are answered in order; the head pull may be receiving bytes.
 * - inconn: an incoming connection from a receiver, in e->inconns. Objects it is sending
 *   are pinned (one reference each) until the transport says the bytes left (fabric
 *   rendezvous: the reader said it is done, or its lease ran out), or it closes.
 * - breaker: a peer whose connections on a transport keep failing; while open, that peer is
 *   reached by the next transport. Kept in e->breakers while the engine lives (one per pair).
 *
 * Transports: the engine names none. It opens every transport of the registry (registry.h)
 * that the configuration allows, and reaches each peer by the first that reaches it
 * (engine_route.c); each connection carries its transport (c->type).
 *
 * Files: engine.c (open, close, counters, what is advertised), engine_conn.c (what both sides'
 * connections share: stall watchdogs, the release of objects a closed connection was moving,
 * the incarnation), engine_want.c (the receiving side's wants: the fetch API, lookups of
 * holders, the holders tried, retries, room, the seal of what arrived), engine_peer.c (the
 * receiving side's connections: peers, their handshake, stalls and liveness, their queues,
 * pulls and replies, the bytes landing), engine_verify.c (the check of received bytes against
 * the holder's digest: streamed as they land, or after), engine_split.c (one object in ranges
 * from several holders), engine_hold.c (the holding side: incoming connections, pins, answers
 * to PULLs), engine_suspect.c (a holder's copy that a receiver found unlike its digest: checked
 * there, dropped when rewritten after its seal), engine_route.c (which transport reaches a peer,
 * and the circuit breaker).
 */
#ifndef FERRY_ENGINE_INT_H
#define FERRY_ENGINE_INT_H

#include "transfer/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "store/hasher.h"
#include "transfer/auth.h"
#include "transport/registry.h"
#include "transfer/wire.h"

#define MAX_TRIED 8
#define RETRY_FIRST_MS 10
#define RETRY_MAX_MS 200
/* A want whose object found no room (spilling makes it) is asked again when the store says
 * there is room, or after this. */
#define ROOM_WAIT_MS 1000
/* A want under way that nobody waits for any more ends after timers.orphan_ms, unless a fetch
 * takes it up again: clients wait in slices (the Python module's are 100 ms) and ask again at
 * once, and a transfer longer than a slice must not restart at every slice (a 16 MiB fetch
 * over a 1 Gbit/s link never ended that way). Short enough that a trickling holder's room is
 * freed within a second of the fetch's end. A cluster-wide delete heard between two slices
 * is kept for the next one as long (e->slice_ends, e->slice_deletes: at most SLICE_KEPT ids
 * each, forgotten all at once past that). */
#define SLICE_KEPT 4096
/* A peer that owes bytes and sends none for e->timers.stall_ms is given up on; so is a
 * connector that has not finished the handshake in handshake_ms, and a holder that has not
 * answered our hello in answer_ms: some transports (shm, rxm) never report a dead peer, and a
 * fetch should move on to the next holder in seconds, not wait out the dead one's directory
 * entry. The watchdogs look every STALL_CHECK_MS, or a quarter of the shortest of those
 * timers when it is shorter (tests scale them down). */
#define STALL_CHECK_MS 1000
/* A holder that owes bytes and sent none for this long is looked up in the directory: gone
 * from it (no heartbeat, or another run), it is dropped at once rather than after stall_ms
 * (shm and rxm never report a dead peer). */
#define LIVENESS_MS 1000
/* A receiver holding pins must read at least this fast (bytes per second, over stall_ms):
 * slower, and its pins go with its connection. */
#define MIN_RATE (64u << 10)
/* A holder whose reply came must send at least this fast (bytes per second, over each window
 * of timers.rate_ms): slower, and it is dropped, its transfers moved to other holders (one
 * trickling a byte every 20 s held 200 MiB of a receiver's arena for as long as it liked). */
#define RECV_MIN_RATE (1u << 20)
/* While other node ids wait for the pins of all, a connection of a node id holding more than
 * its share of them (pin_limit_all / the node ids that hold pins or wait for them) must read at
 * least this fast (bytes per second, over each window of timers.rate_ms), or it is dropped and
 * its pins go to them: four node ids reading 100 KiB/s held every pin of a holder for minutes,
 * and every other node's fetch failed. The rate a receiver asks of a holder. */
#define PIN_SHARE_RATE RECV_MIN_RATE
/* A receiver's PULLs wait, unread, past this many ids queued on its connection. */
#define MAX_QUEUED_IDS WIRE_MAX_IDS
/* Frames (replies) written for a receiver and not yet taken by it: past this, its PULLs wait
 * unread, checked every BACKLOG_POLL_MS until it reads. */
#define MAX_FRAME_BACKLOG (1u << 20)
#define BACKLOG_POLL_MS 20
/* A PULL names objects of at most this many recorded bytes (at least one object): within the
 * smallest pin limit of a holder, so that honest pulls are not answered busy. */
#define PULL_BYTES_MAX (64ull << 20)
/* A refused connector is given this long to read why and close. */
#define REFUSE_LINGER_MS 1000
/* Before authentication a peer may send only small frames (HELLO, AUTH). */
#define UNAUTH_MAX_FRAME 1024
/* A PULL sent before the challenge (peer->early) names this many ids at most, so that its frame
 * stays under UNAUTH_MAX_FRAME: an acceptor that refused the hello still reads it whole, and
 * the refusal's reason reaches us. */
#define EARLY_PULL_IDS 16
/* Authenticated incoming connections, in all and per node id (honest peers reuse theirs: one
 * per node and transport). A connection that authenticates past MAX_INCONNS_PER_NODE for its
 * node id closes that node's oldest; past MAX_INCONNS in all, the oldest of the node id that
 * holds the most. So a holder of the secret, who may name any node id, holds at most its share
 * (1,024 connections of one node id, each with an unread PULL, locked every new peer out). */
#define MAX_INCONNS 1024
#define MAX_INCONNS_PER_NODE 4
/* Connections that have not authenticated yet, in all and per source address: past either,
 * the oldest of them is closed, so that a flood of silent connections only churns and an
 * honest peer, which authenticates in a round trip, still gets through. */
#define MAX_UNAUTH 128
#define MAX_UNAUTH_PER_SOURCE 16
/* A receiver closes a connection it has not used for PEER_IDLE_MS; a holder closes one that
 * sent nothing for HOLDER_IDLE_MS while it owed nothing (later, so that it is the receiver
 * that closes, between pulls). */
#define PEER_IDLE_MS 45000
#define HOLDER_IDLE_MS 60000
/* Holders whose transfers failed lately, one line each in ferry stat's peers view. */
#define RECENT_FAILURES 16
/* Cluster-wide deletes remembered, for transfers that outlive their want's entry in the map
 * (its fetchers gave up, its bytes still coming): what they bring is not sealed. */
#define RECENT_DELETES 256
/* A peer whose connection on a transport fails this often in a row is reached on the next one
 * (the fallback at worst) for timers.breaker_ms. */
#define BREAKER_FAILS 3
/* Eager limits measured with ferry calibrate on our machines (docs/design/transports.md); other
 * providers start from the generic one. */
#define EAGER_DEFAULT (64u << 10)
/* An object is fetched in ranges from at most this many holders at once, this many ranges
 * from each (whole chunks of the digest, at least ENGINE_SPLIT_CHUNK_MIN bytes), dealt in
 * turn. */
#define ENGINE_SPLIT_MAX 4
#define ENGINE_SPLIT_PER_HOLDER 8
#define ENGINE_SPLIT_CHUNK_MIN DIGEST_CHUNK
#define ENGINE_SPLIT_RANGES (ENGINE_SPLIT_MAX * ENGINE_SPLIT_PER_HOLDER)
/* A relayed object (engine_relay.c) comes in ranges of this many bytes (one chunk of the
 * digest, the least a node can check and pass on): each node of a chain adds about one range's
 * time to the last one's (a broadcast of 64 MiB to 7 at 100 Mbit/s: 1.22-1.26 x a lone fetch
 * at 2 MiB, 1.09 x at 1 MiB; ferry-bench cluster). */
#define RELAY_RANGE DIGEST_CHUNK
/* A relayed object's ranges out at once: enough to keep a chain's links busy (16 MiB), few
 * enough that a partial holder that stops costs one relay deadline, not one per range. */
#define RELAY_WINDOW 16
/* A pull waits for a partial copy's ranges at most relay_ms / RELAY_WAIT_DIV, however the rest
 * of the copy progresses: a receiver gives up on a partial holder that owes it a reply and says
 * nothing for relay_ms (engine_peer.c), and the rest is the margin for our "not yet" to reach
 * it first. */
#define RELAY_WAIT_DIV 2
/* A relayed range answered "not yet" (its partial holder's copy stalled) is asked of the same
 * holder again, about half a relay deadline apart, for this many relay deadlines from its first
 * "not yet" (16 s at the defaults), then moves: long enough for that holder to find another
 * source, or for the first bytes to come down a chain of a few dozen nodes; and the most a
 * holder that answers "not yet" for ever holds each range of a fetch. */
#define RELAY_NOT_YET_DEADLINES 16

enum want_state { WANT_LOOKUP, WANT_RETRY, WANT_QUEUED, WANT_PULLING, WANT_RECEIVING, WANT_VERIFY };

struct waiter {
    engine_fetch_fn *fn;
    void *ctx;
    uint32_t index;
    struct waiter *next;
};

struct pull;

/* How a holder failed a want, and when it may be asked again by it. */
enum fault {
    FAULT_REAL,      /* the transfer failed, or its bytes were refused: never */
    FAULT_LOST,      /* it no longer holds the object (it may again): on the next retry */
    FAULT_OTHER,     /* it holds other content than the recorded one (a stale record, or a lying
                      * holder): once the directory records the content it said it had */
    FAULT_UNREACHED, /* not even connected within the answer deadline (down, or its SYNs
                      * dropped by a full link): FAULT_LOST for a want's first
                      * UNREACHED_MAX - 1 such failures, then FAULT_REAL (eng_want_failed_holder
                      * turns it into one of the two; nothing else sees it) */
};
/* How many times a want's holders may fail to connect within the answer deadline before the
 * failure counts for real: the breaker does not apply to tcp, the fallback, so without it a
 * holder whose SYNs are dropped for good (a firewall) would be asked every 3 s for ever. */
#define UNREACHED_MAX 3
/* How long a holder we could not reach may stay gone from lookups before a want it was the
 * last hope of fails: a live node's heartbeat lapses for seconds on a loaded machine (under
 * ASan beside the suite), a killed one's never comes back. */
#define GONE_GRACE_MS 10000

/* An object's content as a holder describes it in a reply. */
struct content {
    uint64_t size;              /* data and metadata bytes */
    uint8_t digest[DIGEST_LEN]; /* the store's digest (the root) */
};

/* The checks of one want's chunks in flight on the verifier: the jobs point here, not at the
 * want, which may go (or start its bytes again) before they are back; w is then NULL, and the
 * last job back frees it. */
struct vcheck {
    struct want *w;
    uint32_t out; /* jobs not back yet */
};

struct pentry {
    struct pull *pull;
    struct want *w;
    int receiving;          /* bytes are on their way into w->obj (or are being dropped) */
    int other;              /* the holder's bytes are not taken (dropped), for other_fault: */
    enum fault other_fault; /* FAULT_OTHER: not the recorded content; FAULT_LOST: a range of it
                             * laid out otherwise than the object another holder's reply made
                             * (which of the two holders is wrong is not known) */
    struct content had;     /* what the holder said it had */
};

/* A holder a want tried, and why it failed. */
struct tried {
    char node[DIRECTORY_NODE_ID_MAX + 1];
    char why[96];
    enum fault fault;   /* FAULT_REAL when any of its failures was */
    struct content had; /* FAULT_OTHER: what it said it had */
};

/* The check of a want's bytes (engine_check.c, engine_verify.c). A whole want (and a split's
 * parent) has the holder's tree: digest, the root (with a record, the recorded one), and for
 * more than one chunk its nleaves leaves, checked against the root at the reply. Each chunk is
 * checked against its leaf once its bytes are in (the transport's landed events), on the
 * verifier's threads, so that the check ends soon after the last byte and a bad chunk names its
 * sender; a part checks the chunks of its range (whole chunks) against its parent's leaves. An
 * object of one chunk is checked against the root after its last byte, on the loop. landed
 * counts the bytes of the want's range in place, in order; handed the bytes of whole chunks
 * given to checks; bad_chunk is the first chunk that failed (NO_CHUNK: none). Bytes told out of
 * order (broken) are checked after the last one; waiting: every byte is in, the want waits for
 * its checks in flight (vc). rlanded: a relayed part's bytes in place, in order,
 * before they are checked (engine_relay.c). stream: an object of one chunk, its leaf taken as
 * its bytes land (streamed of them, in order; STREAM_OFF once given up: out of order, or no
 * memory), so that only the last segment is hashed after the last byte. */
struct want_check {
    uint8_t digest[DIGEST_LEN];
    uint8_t *leaves;
    uint64_t nleaves;
    struct vcheck *vc;
    struct digest_stream *stream;
    uint64_t streamed;
#define STREAM_OFF UINT64_MAX
    uint64_t landed, handed, bad_chunk, rlanded;
#define NO_CHUNK UINT64_MAX
    int broken, waiting;
    int recheck; /* a split's parent: a dead connection may have written into checked chunks */
};

/* A fetch in ranges from several holders (engine_split.c), its parent's side: holders names
 * the n holders (seq[i] 0: a whole one; else a partial one, relays), which the nranges ranges
 * were dealt to in turn; the parent lives while parts_out parts are out. */
struct want_split {
    char holders[ENGINE_SPLIT_MAX][DIRECTORY_NODE_ID_MAX + 1];
    uint64_t seq[ENGINE_SPLIT_MAX];
    uint32_t n, nranges, parts_out;
    int failed; /* a part found no holder left: fetched whole once its parts are in */
    int leak;   /* a dead connection may write into obj for ever: never reused */
    int asked;  /* a fresh lookup was made for its split */
};

/* A want of at least relay_min recorded bytes, made findable as a partial holder
 * (engine_relay.c): seq is its place among the object's receivers (0 while asking), and the
 * chunks of its object that are in (and checked, when they came from a partial holder) are set
 * in have, which the holding side serves ranges from. Freed with the want. */
struct want_relay {
    uint64_t seq;
    int asking; /* the relay script is under way */
    int maybe;  /* the relay script may have run: unrelay at the end */
    uint8_t *have;
    uint64_t ms;   /* when a chunk last came in (or the copy began): its progress */
    uint32_t next; /* its next range to deal */
    int dealing;   /* its ranges are dealt a window at a time (eng_relay_deal) */
};

struct want {
    struct engine *e;
    ferry_id id;
    uint64_t born_ms; /* a delete heard after this undoes what it receives */
    uint64_t born_ns; /* the same, for the transfer's latency */
    int state, done;
    int busy; /* being sealed or verified: finishing must not free it */
    struct waiter *waiters;
    struct tried tried[MAX_TRIED];
    int ntried;
    char gone[160];                  /* the holders the last lookup left out, and why */
    int has_content;                 /* the directory recorded the id's content: */
    uint64_t size;                   /* only bytes of this size */
    uint8_t hash[DIGEST_LEN];        /* and digest are taken */
    char gen[DIRECTORY_GEN_MAX + 1]; /* the put the record named ("": none): the copy's */
    int deleted;                     /* deleted cluster-wide: what arrives is dropped */
    int dir_down;                    /* the last lookup found the directory unreachable */
    uint32_t retries;
    struct loop_timer retry;
    struct loop_timer orphan; /* armed while nobody waits: ends it after timers.orphan_ms */
    struct pentry *entry;     /* the pull entry naming this want, if any */
    struct peer *queued;      /* the peer whose next PULL will name it, if any */
    struct object *obj;       /* the local object being filled: made when a reply confirms its
                               * size (the record's), never before */
    int room;                 /* its create found no room yet: asked again when there is */
    /* A location's node, asked first (engine_fetch's at): held until the retry timer asks it;
     * hinted from then until a holder's reply confirms the object or the hint fails (a miss,
     * fetch_hint_misses). */
    struct hint *hint;
    int hinted;
    struct want_check check;
    char holder[DIRECTORY_NODE_ID_MAX + 1];
    /* A part (engine_part.c) is a want of its own, not in e->wants, that fills [off, off +
     * size) of its parent's object; it has no waiters, timer or lookup of its own. A want lives
     * while drains of dead connections that may still write into its object are pending. */
    struct want *parent;
    uint64_t off;
    uint32_t range; /* a part: its range's index in the parent */
    uint32_t drains;
    int split_made; /* a part's reply created the object (or tried to) */
    int dropped;    /* a part's bytes are dropped (no object to land in): never checked */
    struct want_split split;
    int no_split;       /* fetched whole from now on */
    int abandoned;      /* nobody waits for it while its bytes come: their connections close */
    uint32_t unreached; /* FAULT_UNREACHED failures so far (a split's parent counts its parts') */
    uint64_t gone_since_ms; /* when lookups began to list the unreached holder as gone; 0: not */
    /* Relaying (engine_relay.c): relay, allocated when the want asks to be findable as a
     * partial holder (NULL: it never did); relay_off: it is not to be (the record changed, the
     * directory is away). A part whose holder is partial is relayed: checked as it lands, alone
     * in its PULL; a parent that takes its ranges from partial holders is relayed too: its
     * whole-object checks are made. */
    struct want_relay *relay;
    int relay_off, relayed;
    uint64_t not_yet_ms; /* a relayed part: its holder's first "not yet" (0: none) */
};

struct pull {
    uint64_t tag;
    uint32_t n, pending; /* entries, and those still receiving */
    int replied;
    struct pentry *entries;
    struct pull *next;
};

/* A stall watchdog: while a connection owes bytes, its counter must move; checked every
 * eng_check_ms, so a stall is seen within stall_ms + eng_check_ms. */
struct watch_rate {
    struct loop_timer timer;
    uint64_t bytes;   /* the counter at the last check */
    uint64_t last_ms; /* when it last moved (or the watch started) */
    uint64_t window;  /* bytes moved since window_ms */
    uint64_t window_ms;
};

struct peer {
    struct engine *e;
    struct directory_node node;
    struct xconn *conn;
    int authed;
    /* Between nodes without a secret our (empty) proof went with the hello and pulls go before
     * the challenge comes: a first read costs the connect and one round trip. Replies are still
     * taken only after the challenge named the node the directory did (authed). */
    int early;
    struct auth_hs hs;      /* the handshake, ours first */
    struct auth_session as; /* the tags of frames after it */
    struct want **queue;    /* wants for the next PULL */
    uint32_t nqueue, capqueue;
    struct pull *pulls, **pulls_tail;
    uint64_t next_tag;
    int busy;                 /* it answered busy (pin limit): no PULL until its pulls are done */
    int asking;               /* a lookup of its liveness is under way (directory_cancel on free) */
    char why[112];            /* why this transport */
    struct watch_rate in;     /* a holder that owes bytes and sends none */
    uint64_t rx_ms, rx_bytes; /* the window of the rate of a reply's bytes: its start (0: no
                               * bytes owed after a reply), and bytes_in then */
    uint64_t born_ms;         /* when we began connecting: the handshake must end by handshake_ms */
    struct loop_timer flush;
    struct loop_timer idle; /* closes the connection after PEER_IDLE_MS unused */
    struct peer *next;
};

/* A node id that authenticated on incoming connections: its connections and the bytes pinned
 * for them, which the pin limit bounds (per node id, not per connection: one node pinned 240 of
 * 256 MiB through 4 connections). In e->innodes while it has a connection. */
struct innode {
    char node[WIRE_NODE_MAX + 1];
    uint32_t nconns;
    uint64_t pinned;
    uint32_t waiting; /* its connections whose first pull waits for the pins of all (pin_wait) */
    struct inconn *conns; /* through inconn.node_next */
    struct innode *next;
};

struct pin {
    struct object *o;
    uint64_t len;
    struct inconn *ic;
    struct pin *next, **pprev;
};

struct hpull {
    uint64_t tag;
    uint64_t eager_max; /* the receiver's */
    uint8_t flags;
    uint32_t n;
    ferry_id *ids;             /* looked up, and what is found pinned, when the pull is answered */
    int expired;               /* its ranges of partial copies waited too long: not yet */
    uint64_t arrived;          /* when it came */
    uint64_t since;            /* relay_ready: when it began to wait for a partial copy */
    struct wire_range *ranges; /* WIRE_PULL_RANGES: what of each object is sent; else NULL */
    struct hpull *next;
};

enum inconn_state { IN_HELLO, IN_AUTH, IN_READY, IN_REFUSED };

struct inconn {
    struct engine *e;
    struct xconn *conn;
    int state;
    struct loop_timer deadline; /* authenticate within handshake_ms, then HOLDER_IDLE_MS idle */
    uint64_t born;              /* loop_now_ms() at accept */
    struct auth_hs hs;          /* the handshake; hs.node_c is the peer, once it said hello */
    struct auth_session as;     /* the tags of frames after it */
    struct hpull *queue, **queue_tail;
    uint64_t queued_ids; /* ids in the queue's pulls */
    struct pin *pins;
    uint64_t pinned;          /* bytes of the pins (its node's count them against the limit) */
    struct innode *node;      /* once authenticated */
    struct inconn *node_next; /* its node's other connections */
    uint64_t given; /* bytes given to the transport (frames and ranges), against bytes_out */
    int paused;
    int pin_wait;              /* its first pull waits for the pins of all (counted in its node's
                                * waiting and e->pin_waiters) */
    uint64_t share_ms;         /* the window of its reading rate while its node id is past its
                                * share of the pins and others wait: its start (0: not so), */
    uint64_t share_bytes;      /* and bytes_out then */
    struct watch_rate out;     /* a receiver that stops reading what it asked for, or crawls */
    struct loop_timer backlog; /* looks again at a frame backlog that stopped reading */
    int waiting;               /* its first pull waits for ranges of the partial copy of waits */
    ferry_id waits;
    struct loop_timer relay; /* that wait's deadline: answer_ms after the copy's last progress */
    uint32_t suspects;       /* SUSPECTs it sent that were taken (engine_suspect.c bounds them) */
    struct inconn *next, **pprev;
};

struct breaker {
    char node[DIRECTORY_NODE_ID_MAX + 1];
    int xp; /* the transport's index in the registry */
    uint32_t fails;
    uint64_t open_until; /* ms; the next transport until then */
    char last[96];       /* the last failure */
    struct breaker *next;
};

/* A holder's last failed transfer; the oldest is replaced when the table is full. */
struct recent_failure {
    char node[DIRECTORY_NODE_ID_MAX + 1];
    char why[112];
    uint64_t at; /* loop_now_ms(); 0 for an empty slot */
};

/* Hooks: events a file tells the files above it of without naming them, so that no two files
 * of the engine call each other (scripts/file-calls.py, make lint); engine_open installs
 * them, each the one function named here. */
struct eng_hooks {
    /* A partial copy of id grew or ended (engine_relay.c): eng_relay_wake (engine_hold.c). */
    void (*copy_changed)(struct engine *e, const ferry_id *id);
    /* w's object was made, w ended (engine_want.c): eng_relay_made, eng_relay_end. */
    void (*want_made)(struct want *w);
    void (*want_ended)(struct want *w);
    /* A lookup listed w's holders (engine_want.c): eng_split, 1 when it took w (in ranges,
     * relayed, or finished), 0 to fetch it whole. */
    int (*holders_listed)(struct want *w, const struct directory_answer *a);
    /* A part's holder failed (engine_want.c): eng_part_failed. */
    void (*part_failed)(struct want *part, const char *why, enum fault fault,
                        const struct content *had);
    /* A part's checks are back (engine_verify.c): eng_part_checked. */
    void (*part_checked)(struct want *part);
    /* What a peer's connection tells (engine_peer.c connects with it): eng_pull_events. */
    const struct xconn_events *peer_events;
    /* A peer lets w go (engine_peer.c): its holder failed as fault says, w's bytes coming on
     * draining when not NULL (it may write into the object until drained): eng_pull_want_lost;
     * w leaves its queue unasked, or ends there with status: eng_pull_want_unqueued. */
    void (*want_lost)(struct want *w, struct xconn *draining, const char *why, enum fault fault);
    void (*want_unqueued)(struct want *w, int status);
};

/* A location, shared by the wants one FETCH_AT starts for it (a node entry is 2.8 KiB), and
 * immutable. hint_last keeps the latest for the next want of the same location. */
struct hint {
    unsigned refs;
    struct directory_node node;
};
/* A reference to a hint of at: hint_last's when it is the same, else a new one (NULL when out
 * of memory). eng_hint_put drops one. */
struct hint *eng_hint_get(struct engine *e, const struct directory_node *at);
void eng_hint_put(struct hint *h);

struct engine {
    struct loop *loop;
    struct hint *hint_last;
    struct store *store;
    struct directory *dir;
    struct engine_config cfg;
    struct engine_timers timers; /* cfg's, with the defaults filled in */
    uint32_t check_ms;           /* how often the watchdogs look (STALL_CHECK_MS or less) */
    char node_id[DIRECTORY_NODE_ID_MAX + 1];
    struct auth auth;                        /* the cluster secret and its proofs */
    char only[DIRECTORY_XPORT_NAME_MAX + 1]; /* --transport NAME ("" for auto) */
    const struct transport *const *reg;      /* the registry's transports, preferred first */
    size_t nreg;
    struct xlistener *ls[REGISTRY_MAX]; /* this node's endpoint on each, NULL when not open */
    const struct eng_hooks *hooks;
    uint64_t failures[REGISTRY_MAX];  /* connections on each that failed */
    uint64_t fallbacks[REGISTRY_MAX]; /* times a peer was taken off each for a while */
    uint64_t eager_max;
    struct breaker *breakers;
    struct recent_failure recent[RECENT_FAILURES];
    struct recent_delete {
        ferry_id id;
        uint64_t at; /* loop_now_ms(); 0 for an empty slot */
    } deletes[RECENT_DELETES];
    uint32_t next_delete; /* the slot the next delete takes */
    /* Between a client's fetch slices (engine_want.c): ids whose fetch ended with nobody
     * waiting, id -> uint64_t (when); cluster-wide deletes heard of such an id, or of a want
     * nobody waited for then, id -> struct slice_delete, taken by the next fetch of the id
     * within the orphan grace. */
    idmap slice_ends, slice_deletes;
    idmap wants;
    struct peer *peers;
    struct inconn *inconns;
    struct innode *innodes;
    uint32_t inconns_authed;  /* connections of the innodes */
    int pins_full;            /* a pull waits for the pins of all node ids to drop */
    uint32_t pin_waiters;     /* connections whose first pull waits so (inconn.pin_wait) */
    int breaking;             /* engine_break_pins is closing connections: */
    uint64_t breaks_draining; /* their pins whose transports have not drained yet */
    uint32_t pin_sharers;     /* node ids holding pins or waiting for them: the share's divisor */
    struct hasher *verifier;
    struct loop_watch verifier_watch;
    struct engine_counters counters;
};

/* engine_route.c */
void eng_note_failure(struct engine *e, const char *node, const char *why);

/* engine_conn.c */
/* Watchdogs: start (or keep) watching counter value now; stop. */
void eng_watch_start(struct engine *e, struct watch_rate *w, uint64_t value);
void eng_watch_stop(struct engine *e, struct watch_rate *w);
/* At a check: ms since value last moved (value is noted), and in *rate the bytes per second
 * over the last window of timers.stall_ms (0 before one has passed: *rate is then UINT64_MAX). */
uint64_t eng_watch_idle(const struct engine *e, struct watch_rate *w, uint64_t value,
                        uint64_t *rate);
/* This run's incarnation (0 without a directory). */
uint64_t eng_incarnation(const struct engine *e);
void eng_release_after(struct engine *e, struct xconn *c, struct object *o, int abort);

/* engine_route.c: transports per peer */
/* A connection to node on t failed: after BREAKER_FAILS in a row, t is not used for node for
 * timers.breaker_ms (never for the fallback, which is the last resort). */
void eng_breaker_fail(struct engine *e, const char *node, const struct transport *t,
                      const char *why);
/* Something arrived whole on t from node: its count of failures starts again. */
void eng_breaker_ok(struct engine *e, const char *node, const struct transport *t);
/* The index (in e->reg) of the transport that reaches node, with why in why; e->nreg when
 * none does (a node that advertises no transport we have). */
size_t eng_transport_for(struct engine *e, const struct directory_node *node, char *why,
                         size_t len);

/* engine_want.c: wants */
void eng_want_free(struct want *w);
/* Answers w's waiters with status and retires it (its record lives on while a pull or a part
 * names it). */
void eng_want_finish(struct want *w, int status);
/* Frees what is kept between fetch slices (engine_close). */
void eng_slices_free(struct engine *e);
/* The holder in w->holder failed as fault says (had: with FAULT_OTHER, the content it said it
 * had; else NULL): try the next (a part: another holder of its split). */
void eng_want_failed_holder(struct want *w, const char *why, enum fault fault,
                            const struct content *had);
/* Notes that node failed w; whether w tried node; fails w with every reason. */
void eng_want_note_tried(struct want *w, const char *node, const char *why, enum fault fault,
                         const struct content *had);
int eng_want_tried(const struct want *w, const char *node);
/* The holders that failed w as fault says may be asked again; with FAULT_OTHER, only those that
 * said they had rec's content. */
void eng_want_forget(struct want *w, enum fault fault, const struct content *rec);
void eng_want_fail_all(struct want *w);
/* Looks holders up (fresh: not from the cache); asks again later, with backoff. */
void eng_want_lookup(struct want *w, int fresh);
void eng_want_retry(struct want *w);
/* Creates w's object with the sizes a reply confirmed: 0, FERRY_EEXIST, FERRY_EAGAIN (w waits
 * for room), or w finished with why; w->obj is set only on 0. */
int eng_want_create(struct want *w, uint64_t data_size, uint64_t metadata_size);
/* w's bytes are in and, when checked, match: seal the object (unless deleted meanwhile). */
void eng_want_seal(struct want *w);

/* engine_pull.c: replies to pulls and the bytes they bring; the hooks named in eng_hooks */
extern const struct xconn_events eng_pull_events;
void eng_pull_want_lost(struct want *w, struct xconn *draining, const char *why, enum fault fault);
void eng_pull_want_unqueued(struct want *w, int status);

/* engine_peer.c: peers and their pulls */
/* The peer for node (connected, or connecting now), NULL without one; an existing one. */
struct peer *eng_peer_get(struct engine *e, const struct directory_node *node);
struct peer *eng_peer_find(struct engine *e, const char *node);
/* w goes in p's next PULL. */
void eng_peer_enqueue(struct peer *p, struct want *w);
/* Room in p's queue for one more want, so that the next eng_peer_enqueue cannot fail: 0, or -1
 * without memory. */
int eng_peer_reserve(struct peer *p);
void eng_peer_free(struct peer *p);
void eng_pull_free(struct pull *pl);
/* The holder's CHALLENGE: proves ours, and the peer starts pulling. */
void eng_peer_on_challenge(struct peer *p, const struct wire_msg *m);
/* Drops a peer that broke the protocol, or failed for real (its wants go to other holders). */
void eng_peer_abort(struct peer *p, const char *reason);
/* The connection closed (an xconn event). */
void eng_peer_closed(struct xconn *c, int err, const char *why);
/* The watchdog runs while the peer owes us the handshake or bytes, else the idle timer. */
void eng_peer_stall_arm(struct peer *p);
/* Closes the connections whose bytes go into abandoned wants (their other wants are asked
 * again, of the same holder too). */
void eng_peers_drop_abandoned(struct engine *e);

/* Tells holder (a peer we pull from) that chunk of its copy of id did not match its leaf
 * (engine_peer.c: a frame that cannot be sent ends the peer, whose tags are then out of step). */
void eng_peer_suspect(struct engine *e, const char *holder, const ferry_id *id, uint64_t chunk);

/* engine_suspect.c: a copy rewritten after its seal */
/* A SUSPECT that ic sent: checks the chunk of our copy, drops a copy rewritten after its seal. */
void eng_suspect_check(struct inconn *ic, const struct wire_msg *m);

/* engine_check.c: a want's check state */
/* Whether w's bytes are checked against the holder's tree before the seal (--verify, or a
 * relayed part). */
int eng_checked(const struct want *w);
/* Whether w seals with the holder's tree, taken from its reply (--verify, or a record). */
int eng_inherits(const struct engine *e, const struct want *w);
/* Starts w's checks again from its range's first byte (a new holder); forgets those in
 * flight. */
void eng_check_reset(struct want *w);

/* engine_verify.c: the check of received bytes */
/* Takes the holder's tree from its reply into w (a whole want, or a split's parent): 0, or -1
 * when its leaves do not give its root (the holder is then one of other content). */
int eng_check_tree(struct want *w, const struct wire_reply_entry *re);
/* n bytes of w's range landed at p (in order, or checked after the last byte). */
void eng_check_landed(struct want *w, const uint8_t *p, size_t n);
/* Gives the chunks of w's range not given yet to checks: 1 when some are in flight (w waits,
 * check.waiting, and eng_check_done follows), 0 when none are, -1 without memory. */
int eng_check_rest(struct want *w);
/* All of w's bytes are in: check them (on the loop or the verifier), then seal or refuse. */
void eng_want_received(struct want *w);
void eng_on_verified(struct loop *l, struct loop_watch *lw, uint32_t events);
/* The engine closes: the checks it had are back (hasher_stop); the wants waiting for them let
 * go. */
void eng_checks_closed(struct engine *e, struct hasher_job *jobs);

/* engine_part.c: parts, a range of an object each */
/* w (its split.n holders in split.holders) starts receiving in nranges ranges. */
void eng_split_begin(struct want *w, uint32_t nranges);
/* A part of w for len bytes from off (range index range), not queued; NULL without memory. */
struct want *eng_part_new(struct want *w, uint32_t range, uint64_t off, uint64_t len);
/* The engine closes: the part is freed, and its parent when it is finished. */
void eng_part_close(struct want *part);

/* engine_split.c: an object in ranges from several holders */
/* Splits w across the holders a lists when it is large enough: 1 when split (or finished with
 * why), 0 to fetch it whole. */
int eng_split(struct want *w, const struct directory_answer *a);
/* A part's reply: where its range goes (*dst NULL: dropped) and how long it is. */
int eng_part_reply(struct pentry *pe, const struct wire_reply_entry *re, uint8_t **dst,
                   uint64_t *len);
/* A part's bytes are all in (or dropped); its holder failed; its connection died while its
 * bytes were coming (c may still write into the object until drained). */
void eng_part_in(struct peer *p, struct pentry *pe, struct want *part);
void eng_part_failed(struct want *part, const char *why, enum fault fault,
                     const struct content *had);
void eng_part_drain(struct xconn *c, struct want *part);
/* A part is not (or no longer) queued: no memory to queue it, or nobody waits for its object
 * any more. It ends, and its parent is fetched whole after its other parts (a lookup that ends
 * it at once when nobody waits). */
void eng_part_unqueued(struct want *part);
/* A part's checks are back (its bytes were all in): it ends, or its holder failed. */
void eng_part_checked(struct want *part);

/* engine_relay.c: partial holders */
/* The holders a receiver of place seq (its directory_relay seq) takes ranges from, in order,
 * into out (room for n): the partial holders that began before it, latest first, then the whole
 * holders; each node once, never self nor one skip(ctx, node) refuses; a partial holder also
 * listed whole counts as whole. Their number; 0 when no partial holder comes first (the
 * receiver is then fetched as usual). */
size_t eng_relay_order(const struct directory_node *nodes, size_t n, const char *self, uint64_t seq,
                       int (*skip)(const void *ctx, const char *node), const void *ctx,
                       const struct directory_node **out);
/* Takes w (1) when it is relayed: registers it as a partial holder first (its lookups then
 * list partial holders), then deals its ranges to the receiver that began before it, else to
 * the whole holders; 0 to fetch it as usual. */
int eng_relay(struct want *w, const struct directory_answer *a);
/* A relayed object's next ranges go out, up to RELAY_WINDOW at once (nothing for others). */
void eng_relay_deal(struct want *w);
/* A part whose holder failed starts again after the chunks of its range that are in (landed
 * in order, and checked when it is relayed): 1 when none is left (it ends). */
int eng_relay_trim(struct want *part);
/* The chunks of len bytes of t's object from off (whole chunks, or up to the object's end) are
 * in (set), or are being received again. */
void eng_relay_have(struct want *t, uint64_t off, uint64_t len, int set);
/* n bytes of w's range (a part's, or a whole want's object) landed at p, unchecked. */
void eng_relay_landed(struct want *w, const uint8_t *p, size_t n);
/* w's object was made: chunks are counted from none. */
void eng_relay_made(struct want *w);
/* w ends: it is no partial holder any more. */
void eng_relay_end(struct want *w);
/* The want receiving id as a partial holder (or registering as one), or NULL; whether its
 * copy has every chunk of len bytes from off (none before it is made). */
struct want *eng_relay_source(struct engine *e, const ferry_id *id);
int eng_relay_covers(const struct want *w, uint64_t off, uint64_t len);

/* engine_hold.c: the holding side */
void eng_inconn_free(struct inconn *ic);
/* Chunks of id's partial copy came in: the pulls that wait for them look again. */
void eng_relay_wake(struct engine *e, const ferry_id *id);
void eng_on_accept(struct xlistener *l, struct xconn *c, void *arg);

/* engine_hold.c: the events of incoming connections */
extern const struct xconn_events eng_in_events;

#endif

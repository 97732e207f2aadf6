/*
 * ferry.h - the one public header of libferry, the client library of ferry.
 *
 * A client connects to the ferryd of its node over a Unix socket, maps the daemon's
 * shared-memory arena once, and from then on reads and writes object bytes in place:
 * messages carry offsets, never object bytes.
 *
 * Errors: every function returns 0 (FERRY_OK) or a negative code from enum ferry_error;
 * ferry_strerror() names a code and ferry_errmsg() gives the calling thread's detailed
 * reason for its last failure (with figures where there are any, e.g. for FERRY_ENOSPACE).
 * A call about many objects (get, fetch, put_many) also gives each one's status; the call
 * returns the first failed one's.
 *
 * Results: a result of a size the caller cannot know beforehand (list, nodes, where, peers) is
 * a new array that the caller frees with ferry_free(); fixed-size results go to the caller's
 * memory.
 *
 * Threads: a ferry_client may be shared by threads. Calls on one handle are serialised
 * by a mutex inside the handle, so a blocking ferry_get() holds up the handle's other
 * callers until it returns; threads that must block independently use one handle each.
 * Pointers returned by ferry_create() and ferry_get() stay valid until the reference is
 * given back (ferry_seal+ferry_release / ferry_abort / ferry_release) or the handle is
 * disconnected, and may be used from any thread.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release this header comes with; CMakeLists.txt's project(ferry VERSION ...) must say the
 * same (checked when the build is configured). FERRY_VERSION compares as a number:
 * #if FERRY_VERSION >= FERRY_MAKE_VERSION(0, 6, 0). ferry_version() is the library's own, which
 * may be a later release than the header a program was built with. */
#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 12
#define FERRY_VERSION_PATCH 0
#define FERRY_MAKE_VERSION(major, minor, patch) ((major)*1000000L + (minor)*1000L + (patch))
#define FERRY_VERSION                                                                              \
    FERRY_MAKE_VERSION(FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH)

/* The connection's timeout of ferry_connect ($FERRY_TIMEOUT_MS overrides it): see
 * ferry_connect_timeout. */
#define FERRY_DEFAULT_TIMEOUT_MS 30000

/* How long a fetch waits when its caller names no timeout (the ferry tool's fetch and get
 * --fetch, the Python module's fetch and get(fetch=True)): for an id no node holds yet, and
 * for the transfer itself (a 4 GiB object takes 35 s over 1 Gbit/s). */
#define FERRY_FETCH_TIMEOUT_MS 60000

#define FERRY_ID_SIZE 20
/* Longest name kept with an object (ferry_set_name). */
#define FERRY_NAME_MAX 255
/* Most ids one ferry_get, ferry_fetch or ferry_refresh takes. */
#define FERRY_MAX_IDS 65536u
/* Where ferryd listens unless told (--socket, $FERRY_SOCKET): a daemon a user started. */
#define FERRY_DEFAULT_SOCKET "/tmp/ferry.sock"
/* The socket of the system service (dist/systemd/ferryd.service). A client that names no
 * socket (ferry_connect(NULL), the ferry tool, the Python module's Client()) takes
 * $FERRY_SOCKET if it is set and not empty, else this one if anything is at this path, else
 * FERRY_DEFAULT_SOCKET. */
#define FERRY_SERVICE_SOCKET "/run/ferry/ferry.sock"

/* While a call waits for the daemon's reply, the calling thread polls for this many
 * microseconds before it sleeps; $FERRY_SPIN_US (read at ferry_connect) overrides it, 0 turns
 * polling off. Waking a sleeping thread costs more than most requests take to serve, above
 * all on virtual machines (figures in docs/performance.md); the price is the calling
 * thread's own CPU while it waits, which it would spend blocked anyway. */
#define FERRY_DEFAULT_SPIN_US 50

/* An object id: 20 opaque bytes. */
typedef struct ferry_id {
    uint8_t bytes[FERRY_ID_SIZE];
} ferry_id;

/* The one error scheme: 0 or one of these. */
enum ferry_error {
    FERRY_OK = 0,
    FERRY_EINVAL = -1,       /* an argument is invalid */
    FERRY_ENOENT = -2,       /* no such object */
    FERRY_EEXIST = -3,       /* an object with this id exists already */
    FERRY_ETOOBIG = -4,      /* larger than the whole arena */
    FERRY_ENOSPACE = -5,     /* no room even after eviction */
    FERRY_EPERM = -6,        /* only the creator may seal or abort */
    FERRY_ETIMEDOUT = -7,    /* the timeout ended first */
    FERRY_ENOTSEALED = -8,   /* the object is still being created */
    FERRY_ECONN = -9,        /* daemon unreachable, or the connection was lost */
    FERRY_EPROTO = -10,      /* malformed or unexpected message */
    FERRY_ENOMEM = -11,      /* out of memory in this process */
    FERRY_ESYS = -12,        /* a system call failed (ferry_errmsg() tells which) */
    FERRY_ENOSYS = -13,      /* operation not supported */
    FERRY_EBUSY = -14,       /* resource in use */
    FERRY_EDIRECTORY = -15,  /* the cluster directory (Redis) is unavailable */
    FERRY_ETRANSFER = -16,   /* every holder failed to deliver the object */
    FERRY_EAUTH = -17,       /* a peer failed the cluster secret's challenge */
    FERRY_EAGAIN = -18,      /* nothing is there now (a non-blocking read); try again later */
    FERRY_ESTANDALONE = -19, /* a cluster call on a node started without --directory */
    FERRY_EIO = -20,         /* the object's bytes on disk are unreadable or damaged */
    FERRY_ERROR_MIN = -20
};

/* Name of an error code ("no such object"); never NULL. */
const char *ferry_strerror(int err);

/* Detail of the calling thread's last failed ferry_ call, "" if none. */
const char *ferry_errmsg(void);

/* This library's version, "MAJOR.MINOR.PATCH": the same as `ferryd --version` and
 * `ferry --version` of the same release. */
const char *ferry_version(void);

typedef struct ferry_client ferry_client;

/* Connects to the daemon at socket_path; NULL means the default socket: $FERRY_SOCKET, else
 * FERRY_SERVICE_SOCKET if anything is there, else FERRY_DEFAULT_SOCKET (see them).
 * FERRY_ECONN when no daemon answers there; FERRY_EBUSY when it serves as many clients as it
 * may (ferryd --max-clients), naming the bound. The connection's timeout is $FERRY_TIMEOUT_MS
 * (milliseconds, -1 for none) if set, else FERRY_DEFAULT_TIMEOUT_MS (30 s). */
int ferry_connect(const char *socket_path, ferry_client **out);

/* ferry_connect with the connection's timeout timeout_ms (1 or more, or -1 for none), which
 * bounds every wait of every call on the handle for the daemon, connecting included: a stuck
 * daemon (stopped, or hung) then fails the call with FERRY_ETIMEDOUT, and ferry_errmsg() says
 * which request timed out after how long. A call that waits by contract (ferry_get,
 * ferry_fetch and ferry_get_fetch with their timeout_ms) is bounded by its own timeout plus
 * the connection's, and not at all when its own is -1. Three waits of the daemon's own count
 * against the connection's timeout alone: ferry_hash behind the digests queued before it, a
 * get of a spilled object while it is read back from disk (even with timeout_ms 0), and a seal
 * under --strict-ids while the directory confirms the id: raise the timeout (or pass -1) where
 * these may take longer, such as restores of gigabytes from a slow disk. After a timeout the reply
 * may still come, so the handle is unusable: later calls fail with FERRY_ECONN (saying why) until
 * ferry_disconnect, and its references stay held until then. */
int ferry_connect_timeout(const char *socket_path, int64_t timeout_ms, ferry_client **out);

/* Sets the connection's timeout (as in ferry_connect_timeout) for the calls from now on. */
int ferry_set_timeout(ferry_client *c, int64_t timeout_ms);

/* Closes the connection: the daemon drops every reference the handle held and aborts its
 * unsealed objects. Pointers into the arena are invalid afterwards. NULL is a no-op. */
void ferry_disconnect(ferry_client *c);

/* Creates an unsealed object visible only to its creator and returns its writable data part
 * (data_size bytes; *data is non-NULL even for 0 bytes). metadata (metadata_size bytes, may
 * be NULL when 0) is copied into the object's metadata part. The creator holds a reference.
 * FERRY_EEXIST, FERRY_ETOOBIG, FERRY_ENOSPACE. */
int ferry_create(ferry_client *c, const ferry_id *id, uint64_t data_size, const void *metadata,
                 uint64_t metadata_size, uint8_t **data);

/* Makes the object immutable and visible, waking every waiting get. Creator only. */
int ferry_seal(ferry_client *c, const ferry_id *id);

/* Drops an unsealed object. Creator only. */
int ferry_abort(ferry_client *c, const ferry_id *id);

/* A read-only view of a sealed object. */
typedef struct ferry_buffer {
    int status; /* FERRY_OK; else FERRY_ENOENT (get without waiting) or FERRY_ETIMEDOUT */
    const uint8_t *data;
    uint64_t data_size;
    const uint8_t *metadata;
    uint64_t metadata_size;
} ferry_buffer;

/* Waits until all n objects are sealed or timeout_ms ends (0 polls, -1 waits forever).
 * out[i] is filled for each id; every entry with status FERRY_OK holds a reference until
 * ferry_release(). An entry not found has status FERRY_ENOENT when timeout_ms is 0 (nothing
 * was waited for) and FERRY_ETIMEDOUT otherwise, and the call returns that code (the found
 * ones are still held); a spilled object whose bytes could not be read back has FERRY_EIO
 * (it is dropped) or FERRY_ENOSPACE, which the call then returns; another code when the call
 * failed (nothing held; when the handle broke, the connection's timeout included, every entry
 * has status FERRY_ECONN). A spilled object is waited for even when timeout_ms is 0. An id
 * listed twice is returned, and held, twice. */
int ferry_get(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms,
              ferry_buffer *out);

/* ferry_get without asking the daemon: FERRY_OK when all n objects are sealed in this node's
 * shared index (every entry then holds a reference, as ferry_get's do), else FERRY_ENOENT and
 * nothing is held (every entry has that status); FERRY_ENOSYS when this handle reads no index
 * (FERRY_FASTPATH=0, or none of its blocks of slots was free): use ferry_get. Sends nothing:
 * a first look before a fetch, which then costs no message for an object at hand. An object
 * here but not in the index (spilled, the index full), or any of more than 64 ids, is not
 * found: ferry_get finds it. Like every call, it waits for another thread's call on the same
 * handle to end. FERRY_ECONN once the daemon is gone (see ferry_connected): the handle is then
 * broken, as after any lost connection. */
int ferry_get_fast(ferry_client *c, const ferry_id *ids, size_t n, ferry_buffer *out);

/* 1 while c's connection is usable, 0 once it is not: an earlier call broke it (FERRY_ECONN,
 * a timeout, a malformed reply), or the daemon closed its end (it stopped, or was killed: c
 * fails every call from then on). Sends nothing; it waits only for another thread's call on c
 * (one poll(2) of the socket). A caller that keeps a handle between calls (a language binding)
 * asks before a call, and connects again when 0, so that a daemon restarted between two calls
 * costs no failed call. The gets that read the shared index (ferry_get, ferry_get_fast) and
 * ferry_put_nowait, which may send nothing, do the same look themselves at most once per
 * FERRY_ALIVE_CHECK_MS. */
int ferry_connected(ferry_client *c);
#define FERRY_ALIVE_CHECK_MS 1

/* Gives back one reference taken by ferry_create() or ferry_get(). FERRY_EINVAL when this
 * handle holds none for id. Does not wait for the daemon. */
int ferry_release(ferry_client *c, const ferry_id *id);

/* Where a sealed object's bytes are (ferry_contains). */
enum ferry_presence { FERRY_ABSENT = 0, FERRY_IN_MEMORY = 1, FERRY_ON_DISK = 2 };

/* *present: FERRY_IN_MEMORY when a sealed object with this id is in the store, FERRY_ON_DISK
 * when it is there but spilled (ferryd --spill-dir: the next access reads it back), else
 * FERRY_ABSENT (0); so it reads as a truth value too. */
int ferry_contains(ferry_client *c, const ferry_id *id, int *present);

/* Deletes a sealed object; one still referenced goes when its last reference does (it is
 * invisible at once). FERRY_ENOENT if absent, FERRY_ENOTSEALED for one's own unsealed object. */
int ferry_delete(ferry_client *c, const ferry_id *id);

/* Deletes an object of this node when no client references it any more: at once when none
 * does; otherwise it stays visible (gets find it and take references, which delay it further)
 * and goes with the last release, of any client. A client that dies releases what it held.
 * The lifetime of a result shared by several processes of a node, none of which knows whether
 * it is the last user (ferry.dask). A kept object is let go, and can no longer be kept
 * (FERRY_EINVAL); an object marked so is got through the daemon, which counts every reference.
 * Unsealed, only its creator may mark it (FERRY_EPERM for another client's), and it goes at
 * its last release after the seal. FERRY_ENOENT if absent. Counted in deleted_unused when it
 * goes. */
int ferry_delete_unused(ferry_client *c, const ferry_id *id);

/* Deletes id on every node of the cluster: each holder drops its copy (one still referenced
 * goes when its last reference does), the directory forgets the id, and fetches waiting for it
 * fail (FERRY_ENOENT, "deleted"), as does a fetch of it that continues one waiting for nobody
 * when the delete was heard (a client between two slices of its wait). Returns once the directory
 * has recorded the delete; other nodes drop their copies as they hear of it (within about 100 ms).
 * Succeeds when no node holds id. FERRY_ESTANDALONE without a directory, FERRY_EDIRECTORY when it
 * is down. */
int ferry_delete_cluster(ferry_client *c, const ferry_id *id);

/* Keeps a sealed object (keep 1), or this client's unsealed one, until it is let go (keep 0) or
 * deleted: it is never evicted to make room, so an object put for a reader that comes later is
 * there when it comes. Kept is the node's, not the handle's: it outlives the connection, and any
 * client may let go. With a spill directory (ferryd --spill-dir) a kept object may still be
 * spilled, as any (spilling drops nothing); without one, a store full of kept objects fails
 * creates with FERRY_ENOSPACE, whose ferry_errmsg() says so. Kept objects are bounded
 * node-wide (ferryd --max-kept: half the arena by default, and half of --max-objects): a keep
 * past the bounds fails with FERRY_ENOSPACE naming them. To keep from the start, keep
 * before sealing: ferry_create, fill, ferry_keep, ferry_seal, ferry_release. FERRY_ENOENT when
 * there is no such object. Objects evicted before anyone read them are counted
 * (evicted_unread) and logged. */
int ferry_keep(ferry_client *c, const ferry_id *id, int keep);

/* Creates, fills and seals an object, and releases it. */
int ferry_put(ferry_client *c, const ferry_id *id, const void *data, uint64_t data_size,
              const void *metadata, uint64_t metadata_size);

/* ferry_put without waiting for the daemon: a small object (up to FERRY_SMALL_PUT_MAX, data and
 * metadata) is copied into this handle's ring of puts in shared memory, and the call returns
 * without sending a message (but a kick when the daemon sleeps). The daemon stores it within a
 * loop turn or two (about a millisecond), and before it answers any later call of this handle,
 * or any call of another process, sent after this one returned, that reads the id (ferry_get,
 * ferry_contains, ferry_delete, ferry_list...): those find it. Exceptions: ferry_get_fast, which
 * asks nothing of the daemon; a client that puts more than its ring holds (about 1 MiB) per loop
 * turn, whose later puts wait for the next turn; and a store waiting for spilling to make room,
 * where the puts wait in order. A put takes effect when the daemon takes it: a create or put of
 * the same id by another process before then wins, and this put fails. A put that returned is
 * stored even if the process exits at once, unless it fails in the daemon: such failures (an id
 * that exists already, no room) are answered by the next ferry_flush. FERRY_ECONN says the
 * connection is gone, and whether this put and those before the last flush were stored is
 * unknown. A larger
 * object, or one on a daemon with --strict-ids (whose puts wait for the directory), is put as
 * ferry_put does, and its failure returned here. FERRY_EINVAL for a NULL id, or NULL data or
 * metadata with a non-zero size. With a full ring, waits for the daemon to take it. */
int ferry_put_nowait(ferry_client *c, const ferry_id *id, const void *data, uint64_t data_size,
                     const void *metadata, uint64_t metadata_size);

/* Waits until the daemon has stored every ferry_put_nowait of this handle, then answers for
 * them: 0 when all since the last ferry_flush succeeded, else the first failure's code, with
 * ferry_errmsg() naming its id, its reason and how many failed. */
int ferry_flush(ferry_client *c);

/* Objects up to this size (data + metadata) are put through the client's staging area in the
 * arena: one message exchange for a whole batch, at the price of one copy inside the daemon.
 * Larger ones are created, copied into by the caller's thread and sealed. */
#define FERRY_SMALL_PUT_MAX (64u << 10)

/* One object of a batched put. */
typedef struct ferry_put_item {
    ferry_id id;
    const void *data;
    uint64_t data_size;
    const void *metadata;
    uint64_t metadata_size;
} ferry_put_item;

/* ferry_put of n objects with one message exchange per batch of small objects (a few KiB):
 * statuses[i] receives each object's result. Returns 0 when all succeeded, else the first
 * failure's code (the others may still have succeeded: see statuses). */
int ferry_put_many(ferry_client *c, const ferry_put_item *items, size_t n, int *statuses);

/* SPILLED: sealed, its bytes on disk only until the next access reads them back. */
enum ferry_object_state {
    FERRY_STATE_CREATED = 1,
    FERRY_STATE_SEALED = 2,
    FERRY_STATE_SPILLED = 3
};

typedef struct ferry_object_info {
    ferry_id id;
    uint64_t data_size;
    uint64_t metadata_size;
    int state;                     /* enum ferry_object_state */
    uint32_t refcount;             /* references held by all clients */
    uint64_t age_ms;               /* since creation */
    char name[FERRY_NAME_MAX + 1]; /* given with ferry_set_name, or "" */
} ferry_object_info;

/* Every object in the store (sealed, and unsealed ones of any client). Free with ferry_free(). */
int ferry_list(ferry_client *c, ferry_object_info **out, size_t *n);

/* Keeps name (1..FERRY_NAME_MAX bytes, no control characters) with the object id on this node,
 * for people: ferry_list and `ferry ls` show it. The object is sealed, or this client's
 * unsealed one; a name given before replaces the old one. FERRY_ENOENT when there is no such
 * object. Names stay on the node (a fetched copy has none) and go with the object. */
int ferry_set_name(ferry_client *c, const ferry_id *id, const char *name);

/* Evicts sealed, unreferenced objects in LRU order until at least bytes are freed or none is
 * left; *freed (may be NULL) receives the bytes freed. */
int ferry_evict(ferry_client *c, uint64_t bytes, uint64_t *freed);

/* Moves the objects to the young end of the LRU. FERRY_ENOENT if any was absent (the others
 * are refreshed all the same). */
int ferry_refresh(ferry_client *c, const ferry_id *ids, size_t n);

/* An object's digest, computed once at seal: the root of a SHA-256 tree over the data then the
 * metadata (one stream, cut into 1 MiB chunks): leaf_i = SHA-256(0x00 || le64 i || chunk_i),
 * root = SHA-256(0x01 || le64 data_size || le64 metadata_size || leaf_0 || ... || leaf_n-1);
 * an empty object has one leaf of no bytes. It names the content across the cluster (the
 * directory records it; fetches take only bytes that match it). */
#define FERRY_DIGEST_LEN 32
int ferry_digest(ferry_client *c, const ferry_id *id, uint8_t out[FERRY_DIGEST_LEN]);
/* The first 8 bytes of ferry_digest's root, as a little-endian u64 (it was XXH3 before libferry
 * 0.7: kept for programs that compare digests of objects with each other). */
int ferry_hash(ferry_client *c, const ferry_id *id, uint64_t *digest);

/* What a counter measures: a total since the daemon started (counter), or a level now (gauge). */
enum ferry_stat_kind { FERRY_STAT_COUNTER = 1, FERRY_STAT_GAUGE = 2 };

/* The daemon's own counters, one table: X(name, kind, help) for each, in order; a new counter
 * goes at the end (ferry_stats_get's layout rule). struct
 * ferry_stats, the daemon's STATS reply, `ferry stat`, its JSON and the Python module's stats()
 * are all made from it. The transports' counters (fabric_*, ...) are not in it: they come,
 * named by the transport, only from ferry_stats_list. Names carry their unit (_bytes, _us). */
#define FERRY_STATS_FIELDS(X)                                                                      \
    X(capacity_bytes, GAUGE, "bytes of the arena")                                                 \
    X(used_bytes, GAUGE, "bytes allocated: objects (sizes rounded to 64 B) and staging areas")     \
    X(staging_bytes, GAUGE, "bytes of used_bytes in staging areas of connected clients")           \
    X(objects, GAUGE, "objects in the table, sealed or not")                                       \
    X(sealed_objects, GAUGE, "sealed objects in the table")                                        \
    X(clients, GAUGE, "connected clients")                                                         \
    X(evicted_objects, COUNTER, "objects evicted to make room")                                    \
    X(evicted_bytes, COUNTER, "bytes of the objects evicted")                                      \
    X(created_objects, COUNTER, "objects created")                                                 \
    X(sealed_total, COUNTER, "objects sealed")                                                     \
    X(aborted_objects, COUNTER, "unsealed objects aborted")                                        \
    X(deleted_objects, COUNTER, "objects deleted")                                                 \
    X(gets, COUNTER, "get requests")                                                               \
    X(get_timeouts, COUNTER, "get requests that ended with something missing")                     \
    X(refused_creates, COUNTER, "creates refused for lack of room (ENOSPACE, ETOOBIG)")            \
    X(protocol_errors, COUNTER, "client connections closed for a bad message")                     \
    X(connections_total, COUNTER, "client connections accepted")                                   \
    X(subscribers, GAUGE, "subscriptions open")                                                    \
    X(notifications_dropped, COUNTER, "subscribers cut off for falling behind")                    \
    X(subscriptions_refused, COUNTER, "subscriptions refused: too many open")                      \
    X(connections_opened, COUNTER, "transfer connections this node opened to peers")               \
    X(connections_accepted, COUNTER, "transfer connections peers opened to this node")             \
    X(fetches, COUNTER, "fetch requests from local clients")                                       \
    X(transfers_in, COUNTER, "objects received from peers")                                        \
    X(transfers_out, COUNTER, "objects sent to peers")                                             \
    X(transfer_failures, COUNTER, "objects (or ranges) whose transfer from one holder failed")     \
    X(split_fetches, COUNTER, "objects fetched in ranges from several holders at once")            \
    X(ranges_in, COUNTER, "ranges of objects received (split fetches)")                            \
    X(ranges_moved, COUNTER, "ranges moved to another holder after theirs failed")                 \
    X(split_fallbacks, COUNTER, "split fetches that ran out of holders and were fetched whole")    \
    X(ranges_out, COUNTER, "ranges of objects sent to peers (split fetches)")                      \
    X(bytes_in, COUNTER, "object bytes received from peers")                                       \
    X(bytes_out, COUNTER, "object bytes sent to peers")                                            \
    X(peer_errors, COUNTER, "transfer connections closed for a bad message or authentication")     \
    X(pins_deferred, COUNTER, "objects a peer asked for past its pin limit, answered busy")        \
    X(peers_too_slow, COUNTER, "peers dropped for reading what they asked for too slowly")         \
    X(connections_evicted, COUNTER, "transfer connections closed to make room for new ones")       \
    X(directory_up, GAUGE, "1 while connected to the directory")                                   \
    X(directory_lookups, COUNTER, "holder lookups sent to the directory")                          \
    X(directory_cache_hits, COUNTER, "holder lookups answered from the local cache")               \
    X(directory_reconnects, COUNTER, "connections to the directory re-established")                \
    X(id_conflicts, COUNTER, "seals of an id whose recorded content (elsewhere) differs")          \
    X(deletes_heard, COUNTER, "cluster-wide deletes of other nodes heard from the directory")      \
    X(directory_cleaned, COUNTER, "holdings of this node's past runs removed from the directory")  \
    X(unsigned_entries, COUNTER,                                                                   \
      "node entries in the directory ignored: not signed with our secret")                         \
    X(eager_max, GAUGE,                                                                            \
      "bytes up to which objects are pulled as messages on one-sided transports")                  \
    X(evictable_bytes, GAUGE, "bytes of sealed objects nobody holds: room a create may take")      \
    X(start_time_seconds, GAUGE, "when the daemon started, in seconds since the Unix epoch")       \
    X(release, GAUGE, "the daemon's release: MAJOR * 1000000 + MINOR * 1000 + PATCH")              \
    X(metrics_scrapes, COUNTER, "scrapes of /metrics answered")                                    \
    X(metrics_refused, COUNTER, "metrics requests refused: malformed, too many at once, too slow") \
    X(cluster_node, GAUGE, "1 for a node of a cluster, 0 for a standalone one")                    \
    X(spill_enabled, GAUGE, "1 when the node spills to a directory (ferryd --spill-dir)")          \
    X(spill_max_bytes, GAUGE,                                                                      \
      "the most the spill directory may hold (--spill-max, else its file system's room at start)") \
    X(spill_disk_bytes, GAUGE, "bytes of objects and their records in the spill directory")        \
    X(spilled_objects, GAUGE, "objects whose bytes are on disk only")                              \
    X(spilled_bytes, GAUGE, "bytes of the objects on disk only")                                   \
    X(spill_dirty_bytes, GAUGE, "bytes in memory that must be written before they can be freed")   \
    X(spill_writes, COUNTER, "objects written to the spill directory")                             \
    X(spill_written_bytes, COUNTER, "bytes of the objects written to the spill directory")         \
    X(spill_write_failures, COUNTER, "object writes to the spill directory that failed")           \
    X(restores, COUNTER, "objects read back from the spill directory intact")                      \
    X(restored_bytes, COUNTER, "bytes of the objects read back")                                   \
    X(restore_wait_us, COUNTER, "time from the first access of a spilled object to its bytes")     \
    X(restore_failures, COUNTER, "restores that failed: unreadable, or not matching the digest")   \
    X(creates_waited, COUNTER, "times a create or restore found no room and waited for writes")    \
    X(spill_recovered_objects, COUNTER, "objects found in the spill directory at start")           \
    X(spill_recovery_dropped, COUNTER, "damaged records of the spill directory dropped at start")  \
    X(spill_segments_refused, COUNTER,                                                             \
      "spill segments refused at start: not a regular file of ours with one link, or of another "  \
      "format version")                                                                            \
    X(spill_segments_unauthenticated, COUNTER,                                                     \
      "spill segments refused at start: a record not signed with our secret")                      \
    X(spill_files_ignored, COUNTER, "files in the spill directory that are not segments")          \
    X(spill_recovery_too_large, COUNTER,                                                           \
      "objects found in the spill directory larger than the arena, left there")                    \
    X(arena_faults, COUNTER,                                                                       \
      "huge pages of the arena found missing (punched by a client) and replaced by private "       \
      "memory")                                                                                    \
    X(max_objects, GAUGE, "objects the store holds at most (ferryd --max-objects)")                \
    X(refused_objects, COUNTER,                                                                    \
      "creates refused: the store held max_objects, or the client its unsealed share")             \
    X(accept_pauses, COUNTER,                                                                      \
      "times a listener stopped accepting for 100 ms: out of descriptors or memory")               \
    X(unsigned_records, COUNTER,                                                                   \
      "object records in the directory not believed: not signed with our secret")                  \
    X(records_repaired, COUNTER, "records not signed with our secret that a publication replaced") \
    X(unsigned_events, COUNTER,                                                                    \
      "delete events in the directory ignored: not signed with our secret")                        \
    X(stale_events, COUNTER, "signed delete events refused: taken before, or before this run")     \
    X(directory_bad_keys, COUNTER, "directory keys of the wrong type met (replaced when ours)")    \
    X(node_connections_evicted, COUNTER,                                                           \
      "transfer connections closed because their node id had the most, or past its share")         \
    X(pinned_bytes, GAUGE, "bytes of objects pinned for peers' pulls now")                         \
    X(holders_too_slow, COUNTER, "holders dropped for sending what we asked for too slowly")       \
    X(transfers_abandoned, COUNTER, "transfers under way ended: nobody waited for them any more")  \
    X(chunks_refused, COUNTER, "chunks fetched that did not match their holder's digest")          \
    X(hashed_bytes, COUNTER,                                                                       \
      "bytes hashed for digests of objects here (standalone: only those asked for or spilled)")    \
    X(hash_jobs_dropped, COUNTER,                                                                  \
      "hash jobs (4 MiB at most) dropped: their object was evicted or deleted before its turn")    \
    X(deletes_spared, COUNTER,                                                                     \
      "cluster-wide deletes heard that named other content than the copy here: it stays")          \
    X(relays, COUNTER,                                                                             \
      "fetches findable as partial holders, serving ranges before they are whole")                 \
    X(ranges_relayed, COUNTER, "ranges sent to peers from objects still being received here")      \
    X(relay_waits_expired, COUNTER,                                                                \
      "ranges asked of this node while it received them and answered not yet (not in in time)")    \
    X(kept_objects, GAUGE, "objects kept until let go (ferry_keep): never evicted for room")       \
    X(kept_bytes, GAUGE, "bytes of the kept objects")                                              \
    X(evicted_unread, COUNTER, "objects evicted to make room before any reader took them")         \
    X(fast_gets, COUNTER,                                                                          \
      "objects got without the daemon, through the shared index (as counted by the clients)")      \
    X(fast_refs, GAUGE, "references clients hold without the daemon (slots of the shared index)")  \
    X(fast_adopted, COUNTER,                                                                       \
      "objects kept past their eviction or delete because a client held them without the daemon")  \
    X(deleted_unused, COUNTER, "objects deleted at their last release (ferry_delete_unused)")      \
    X(clients_refused, COUNTER, "clients refused at their hello: max_clients were connected")      \
    X(clients_evicted, COUNTER,                                                                    \
      "client connections closed before their hello for newer ones (64 may wait for theirs)")      \
    X(hello_timeouts, COUNTER, "client connections closed for sending no hello within 10 s")       \
    X(max_clients, GAUGE,                                                                          \
      "clients connected at once at most (ferryd --max-clients, else from the descriptor limit)")  \
    X(fd_limit, GAUGE, "the daemon's descriptor limit (RLIMIT_NOFILE, raised to the hard one)")    \
    X(rewritten_after_seal, COUNTER,                                                               \
      "copies here found rewritten after their seal by a receiver's check: dropped")               \
    X(suspects_unfounded, COUNTER,                                                                 \
      "receivers' reports of a chunk unlike its digest that the copy here disproved")              \
    X(suspects_ignored, COUNTER, "receivers' reports of bad chunks past a connection's bound")     \
    X(relays_silent, COUNTER,                                                                      \
      "partial holders given up for saying nothing of a relayed range for the relay deadline")     \
    X(pins_reclaimed, COUNTER,                                                                     \
      "peers dropped for reading pins past their share too slowly while other node ids waited")    \
    X(pins_broken, COUNTER,                                                                        \
      "transfer connections closed to free their pins for a local create that found no room")      \
    X(conflicts_unlisted, COUNTER,                                                                 \
      "publications not sent: the copy was refused once as a conflict and stays unlisted")         \
    X(deletes_of_earlier_puts, COUNTER,                                                            \
      "cluster-wide deletes heard of an earlier put of the id than the copy here: it stays")       \
    X(replayed_entries, COUNTER,                                                                   \
      "entries under this node's id taken over at start: no heartbeat signed since this run "      \
      "began")                                                                                     \
    X(partial_holders_skipped, COUNTER,                                                            \
      "partial holder fields left out of lookups: past 64 holders, whole ones first")              \
    X(loop_turns, COUNTER, "turns of the daemon's event loop (each one wait for events)")          \
    X(loop_busy_turns, COUNTER,                                                                    \
      "turns of the event loop that did not sleep: work was pending (a spin shows here)")          \
    X(directory_published, COUNTER, "copies published to the directory (holder records sent)")     \
    X(directory_publish_batches, COUNTER,                                                          \
      "scripts that carried publications and withdrawals (up to 64 each)")                         \
    X(fetch_hints, COUNTER, "objects a fetch asked of the node its location named first")          \
    X(fetch_hint_misses, COUNTER,                                                                  \
      "objects the located node did not give: the directory's holders asked instead")              \
    X(fetch_hints_refused, COUNTER,                                                                \
      "locations a fetch was given that were malformed or not signed with our secret: ignored")    \
    X(puts_nowait, COUNTER, "objects put through clients' rings (ferry_put_nowait) and stored")    \
    X(puts_nowait_failed, COUNTER,                                                                 \
      "puts through clients' rings that failed, or were dropped with their client's connection")   \
    X(put_kicks, COUNTER, "kicks from clients whose put found the daemon asleep")                  \
    X(put_ring_bytes, GAUGE,                                                                       \
      "bytes of clients' rings of puts, outside the arena (pages taken as they are written)")      \
    X(fetch_hints_self, COUNTER,                                                                   \
      "objects a fetch was told this very node holds (its copy had gone): looked up")              \
    X(relay_asked_again, COUNTER,                                                                  \
      "ranges asked again of a partial holder that answered not yet (its copy had stalled)")       \
    X(directory_lapses, COUNTER,                                                                   \
      "heartbeats that found this node's entry expired (no beat for the TTL): published again")

typedef struct ferry_stats {
#define FERRY_STATS_MEMBER(name, kind, help) uint64_t name;
    FERRY_STATS_FIELDS(FERRY_STATS_MEMBER)
#undef FERRY_STATS_MEMBER
} ferry_stats;

/* The daemon's counters by the table's names (see ferry_stats_list for the transports' too)
 * into out, the caller's struct of size bytes: pass sizeof(struct ferry_stats) as the
 * program's header has it, ferry_stats_get(c, &st, sizeof st). The library writes
 * min(size, its own sizeof) bytes and never past size; a caller's struct larger than the
 * library's (a newer header) gets 0 in the counters the library does not know. So a program
 * keeps working with a later library, and a later program with an earlier one. size must be a
 * multiple of 8 (FERRY_EINVAL). The rule that makes this hold: counters are only ever added at
 * the end of FERRY_STATS_FIELDS, never removed, reordered or retyped. */
int ferry_stats_get(ferry_client *c, ferry_stats *out, size_t size);

/* A field of struct ferry_stats: its name, the byte offset of its uint64_t, its kind (enum
 * ferry_stat_kind) and what it counts. */
typedef struct ferry_stat_field {
    const char *name;
    size_t offset;
    int kind;
    const char *help;
} ferry_stat_field;

/* Every field of struct ferry_stats, in order (the table above); *n receives the count. */
const ferry_stat_field *ferry_stat_fields(size_t *n);

/* The field of the table called name, or NULL (a transport's counter, or no counter at all). */
const ferry_stat_field *ferry_stat_field_find(const char *name);

/* A counter as the daemon reports it. */
#define FERRY_STAT_NAME_MAX 47
typedef struct ferry_stat {
    char name[FERRY_STAT_NAME_MAX + 1];
    int kind; /* enum ferry_stat_kind */
    uint64_t value;
} ferry_stat;

/* Every counter of the daemon, its own (the table above, in order) then its transports' (named
 * by each transport: fabric_eager_msgs, ...): a new array in *out (free with ferry_free), its
 * length in *n. */
int ferry_stats_list(ferry_client *c, ferry_stat **out, size_t *n);

/* The value of the counter called name in v[0..n) (a ferry_stats_list result); 0 when it is not
 * there (a transport this node does not run). */
uint64_t ferry_stat_value(const ferry_stat *v, size_t n, const char *name);

enum ferry_event { FERRY_EVENT_SEALED = 1, FERRY_EVENT_DELETED = 2, FERRY_EVENT_EVICTED = 3 };

typedef struct ferry_notification {
    int event; /* enum ferry_event */
    ferry_id id;
    uint64_t data_size;
    uint64_t metadata_size;
} ferry_notification;

/* Opens a subscription: *fd becomes readable when notifications are pending, one per seal
 * and per delete or eviction, in the order they happened. The caller closes *fd. */
int ferry_subscribe(ferry_client *c, int *fd);

/* Reads the next notification from a subscription fd; blocks when none is pending unless
 * the fd is non-blocking (then FERRY_EAGAIN). FERRY_ECONN when the daemon closed it. Waiting
 * for events is the caller's: the connection's timeout does not apply (poll the fd to bound
 * it). */
int ferry_notification_read(int fd, ferry_notification *out);

/* ---- cluster ---- */

/* Makes each of the n objects local: one already local counts at once; otherwise it is
 * pulled from a node that holds it (another holder is tried if one fails), and an id that no
 * node holds yet is waited for until timeout_ms (-1 forever; 0 answers at once, with
 * FERRY_ETIMEDOUT for what is not local yet). A transfer nobody waits for any more (every
 * fetcher's timeout passed, or it left) ends, and frees its room. Several clients of
 * a node fetching one id cause one transfer. statuses[i] receives 0, FERRY_ETIMEDOUT,
 * FERRY_EDIRECTORY (no directory to ask), FERRY_ETRANSFER (every holder failed),
 * FERRY_ENOENT (deleted cluster-wide meanwhile: ferry_delete_cluster), FERRY_ENOSPACE,
 * FERRY_ETOOBIG or FERRY_ENOMEM. Returns 0 when all are local, else the first failure; when
 * the handle broke (the connection's timeout included) every status is FERRY_ECONN.
 * Takes no references: follow with ferry_get, or use ferry_get_fetch. */
int ferry_fetch(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms, int *statuses);

/* A node's location as text, with its NUL, at most (ferry_location). */
#define FERRY_LOCATION_MAX 3072
/* The size (data and metadata) from which references had better carry no location: a fetch
 * given one pulls the whole object from that node, while a lookup finds every holder, to split
 * the object among them and relay it between receivers; beside such a transfer the lookup's
 * round trip is noise. The Python module's ids follow it. */
#define FERRY_LOCATED_MAX (16u << 20)

/* The location of the node this handle talks to, into out: its id, transfer addresses and
 * incarnation, signed with the cluster secret when there is one ("ferry1;node-a;..."). A
 * reference to an object put here carries it, so that ferry_fetch_at on another node asks
 * this node at once instead of the directory (a location is the same for every object of
 * this node's run: ask once). FERRY_EDIRECTORY when the node has no directory. */
int ferry_location(ferry_client *c, char out[FERRY_LOCATION_MAX]);

/* ferry_fetch with a location per id (what ferry_location said on the node that put it):
 * each object not local is asked of that node first, and of the directory's holders only if
 * that node does not give it (it died, restarted or dropped the object; a host that does not
 * answer at all costs the answer deadline, 3 s, first). A location that is malformed, too
 * long, or not signed with the cluster secret is ignored: the id is looked up. The located
 * node's copy is taken as what that node put under the id, unchecked against the directory's
 * record (which may not be written yet); an id deleted cluster-wide lately is looked up
 * instead. locations may be NULL, and any of them NULL or "". Each distinct location crosses
 * to the daemon once (at most 256 distinct ones per call; ids of others are looked up).
 * Counted in the stats as fetch_hints, fetch_hint_misses and fetch_hints_refused; a location of
 * the fetching node itself (whose copy went since) is looked up, counted in fetch_hints_self.
 * Objects of FERRY_LOCATED_MAX and more had better be fetched without one. */
int ferry_fetch_at(ferry_client *c, const ferry_id *ids, const char *const *locations, size_t n,
                   int64_t timeout_ms, int *statuses);

/* ferry_get that first fetches the objects that are not local, within the same timeout.
 * A missing entry's status, and the call's return, is why its fetch failed (FERRY_ETIMEDOUT,
 * FERRY_EDIRECTORY, FERRY_ETRANSFER, ...); entries found hold references, as with ferry_get. */
int ferry_get_fetch(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms,
                    ferry_buffer *out);

typedef struct ferry_node_info {
    char id[64];         /* --node-id */
    char address[128];   /* transfer address, HOST:PORT */
    char transports[64]; /* transports it speaks, comma-separated ("tcp") */
    int self;            /* 1 for the node that answered */
} ferry_node_info;

/* The live nodes of the cluster, as the directory has them. Free with ferry_free(). */
int ferry_nodes(ferry_client *c, ferry_node_info **out, size_t *n);

/* The live nodes that hold a sealed copy of id. Free with ferry_free(). */
int ferry_where(ferry_client *c, const ferry_id *id, ferry_node_info **out, size_t *n);

/* ---- transports ---- */

/* ferry_set_eager_max: the provider's measured default. */
#define FERRY_EAGER_AUTO UINT64_MAX
/* Most peers one ferry_peers call returns. */
#define FERRY_PEERS_MAX 1024

/* A peer this node pulls objects from, and how. Strings are NUL-terminated (truncated to fit). */
typedef struct ferry_peer {
    char node[64];      /* the peer's --node-id */
    char transport[16]; /* the transport's name: "tcp", "fabric" */
    char provider[32];  /* the libfabric provider ("shm", "tcp;ofi_rxm"), "tcp" for tcp */
    char why[112];      /* why this transport ("both on shm", "--transport tcp", ...) */
} ferry_peer;

/* The peers this node has connected to for pulls (at most FERRY_PEERS_MAX): a new array in
 * *out (free with ferry_free), its length in *n. A standalone node has none. */
int ferry_peers(ferry_client *c, ferry_peer **out, size_t *n);

/* The libfabric provider this node's fabric runs on, into provider (32 bytes, NUL-terminated);
 * "" when it has no fabric (standalone, --transport tcp, or a fabric that did not open). It
 * comes with the same request as ferry_peers. */
int ferry_fabric_info(ferry_client *c, char provider[32]);

/* Sets the eager limit of the node's fabric for pulls from now on: objects up to bytes move
 * as messages, larger ones by one-sided reads (0: every non-empty one by reads);
 * FERRY_EAGER_AUTO restores the provider's default. The limit in effect is
 * ferry_stats.eager_max. FERRY_EINVAL on a standalone node (no transfer engine); a node on tcp
 * only keeps the value, unused. Not persistent: a restart takes --eager-max. */
int ferry_set_eager_max(ferry_client *c, uint64_t bytes);

/* Frees a result the library allocated (ferry_list, ferry_nodes, ferry_where, ferry_peers);
 * NULL is a no-op. */
void ferry_free(void *p);

/* Parses a printable id: exactly 40 hex digits are the raw id, any other string is hashed
 * to 20 bytes with SHA-1. */
int ferry_id_parse(const char *text, ferry_id *out);

/* ferry_id_parse of text's first len bytes, which may hold any bytes (NUL included). */
int ferry_id_parse_n(const char *text, size_t len, ferry_id *out);

/* The id of a name of len bytes (any bytes, NUL included): their SHA-1 digest. This is the rule
 * ferry_id_parse applies to a string that is not 40 hex digits. */
int ferry_id_from_name(const void *name, size_t len, ferry_id *out);

/* Writes the 40 hex digits of id and a NUL to out (41 bytes). */
void ferry_id_format(const ferry_id *id, char out[2 * FERRY_ID_SIZE + 1]);

#ifdef __cplusplus
}
#endif
#endif

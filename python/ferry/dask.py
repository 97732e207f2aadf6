"""ferry.dask - Dask workers that keep their large results in ferry and move them through it.

One call, from the program that drives the cluster::

    from dask.distributed import Client
    import ferry.dask

    client = Client(cluster)
    ferry.dask.install(client)  # every worker, now and later

Then a result whose out-of-band buffers (NumPy arrays, pandas frames, anything pickle protocol
5 takes without a copy) add up to `threshold` bytes or more is put in its node's ferry store
when another worker first asks for it (one copy; results no peer asks for cost nothing), and
held there while the worker keeps the result. The worker that asked receives a reference to it
(its ObjectID) instead of its bytes, and gets it through ferry: in place, without a copy, from
a worker of the same node; through ferry's transfer (its node's daemon fetching from the
holder's) from another node. It holds it as a read-only object backed by the arena, and hands
it on to further workers by the same reference.

How it plugs into Dask (distributed 2022.12), and why these points:
- The worker's data mapping (`Worker.data`, a MutableMapping Dask documents as replaceable) is
  wrapped by FerryData: that is where every result, computed or received, is kept and
  released, so the objects' lifetimes follow Dask's keys exactly.
- A serialization family, "ferry", put first in the list the worker asks its peers to use for
  the data they send it (its rpc's serializers). The family stores a large result on its first
  request, sends references to what is in the store, and lets everything else fall through to
  Dask's own families. Clients and the scheduler are not asked to use it: results gathered to
  the user arrive as Dask sends them.
- A worker plugin (WorkerPlugin) does both on every worker, present and future; Dask's comms
  are left alone (a custom comm would have to carry every message, not only data).

Lifetimes: each object is marked delete-when-unused (Client.delete_unused) before it is sealed,
and each node's copy goes when its last holder lets go: when Dask releases the key on every
worker of the node that holds it, or when those workers die. A worker that dies loses what only
it held, as Dask expects (Dask computes it again). A store that is full (StoreFull, or any ferry
error) sends the result Dask's way, and the worker says so once in its log: a result is never
lost or wrong because of the store.

Memory: the arena's pages a worker touched count in its RSS and stay mapped after their objects
go; they are the store's, bounded by ferryd --memory. The plugin makes the worker's spill and
pause thresholds see its RSS less its shared memory (the monitor's get_process_memory, which
Dask keeps replaceable). The Nanny's terminate threshold still sees the RSS: give workers a
memory_limit with room for the arena, or set distributed.worker.memory.terminate to False.

Trust: a worker takes nothing it did not make. A reference names no ObjectID: it carries a
nonce and the SHA-256 of the result's pickle stream, and the receiver derives the id from them
under this Dask cluster's key (install() makes it; the plugin carries it to every worker), so a
reference can only name an object a worker of this cluster stored, never another application's.
The receiver unpickles a private copy of the stream, and only when it has the digest the
producer recorded at its put (a stream rewritten in the arena since is refused: TransferFailed);
the out-of-band buffers are data, read in place (checked against the producer's digest tree when
they crossed nodes). It marks delete-when-unused every copy it gets, as the producer marked
its own.

Received values are read-only: tasks receive arrays they cannot write (Dask's contract: tasks do not
mutate their inputs). Results that are builtin containers (tuple, list, dict, set) are not
stored in ferry: Dask serialises their elements one by one. A fetch from another node is done by
the daemons; the receiving worker's event loop waits for it (as it waits for Dask's own
deserialisation), at most `fetch_timeout_ms`.
"""

import contextvars
import functools
import hashlib
import hmac
import logging
import os
import pickle
import sys
import threading
import weakref
from collections.abc import MutableMapping

from distributed import WorkerPlugin

import ferry

__all__ = ["install", "FerryPlugin", "FerryData", "ferry_objects"]

logger = logging.getLogger("ferry.dask")

FAMILY = "ferry"
DEFAULT_THRESHOLD = 1 << 20
DEFAULT_FETCH_TIMEOUT_MS = 60000
# After a reference could not be got, a worker takes its results as bytes for this long.
BYTES_AFTER_FAILURE_S = 30.0
_CONTAINERS = (tuple, list, dict, set, frozenset)

# This process's ferry Client (one per worker process), its settings, its worker and the
# worker's FerryData; setup().
_state = {"client": None, "fetch_timeout_ms": DEFAULT_FETCH_TIMEOUT_MS, "worker": None,
          "families": None, "data": None, "key": None}
# The key install() gives this Dask cluster's workers (one per driving process, so that a second
# install() keeps the references already handed out valid).
_install_key = None
# id(value) -> (weakref to value, ObjectID, Buffer, received, reference): the values this process holds in the
# store, as FerryData stored them or the family received them, each with the Buffer that holds
# its object for as long as the value lives (an unpickling that copied would otherwise let the
# object go while the id is still handed out). Guarded by _lock (a worker's threads); an RLock,
# since a collection inside the locked region may run forget().
_held = {}
_lock = threading.RLock()
# Set while the worker answers a peer's get_data: the only replies that carry references (an
# actor's reply, say, is dropped as soon as it is written, before its reader could get it).
_answering_peer = contextvars.ContextVar("ferry_answering_peer", default=False)


class TransferFailed(OSError):
    """A value could not be got through ferry (gone, timed out, no daemon). An OSError, so that
    Dask takes it as a failed transfer from that worker (and asks again, or recomputes), not as
    a broken result; the worker then takes results as bytes for BYTES_AFTER_FAILURE_S, so that
    asking again succeeds."""


def _remember(value, oid, buf, received=False, ref=None):
    """Records value as held in the store under oid, through buf (received: got from a peer,
    backed by the arena; ref: the reference that names it, for a value stored here); False when
    value takes no weak reference (it cannot be recognised later, so it is not handed out by
    reference)."""
    key = id(value)

    def forget(weak, key=key):
        with _lock:
            if _held.get(key, (None,))[0] is weak:
                del _held[key]

    try:
        weak = weakref.ref(value, forget)
    except TypeError:
        return False
    with _lock:
        _held[key] = (weak, oid, buf, received, ref)
    return True


def _entry_of(value):
    """value's (weak reference, ObjectID, Buffer, received, reference) in the registry, or
    None."""
    with _lock:
        entry = _held.get(id(value))
    return entry if entry and entry[0]() is value else None


def _object_id(key, nonce, stream_digest):
    """The ObjectID of a result stored under this Dask cluster's key: HMAC-SHA256(key, nonce ||
    the SHA-256 of its pickle stream), cut to 20 bytes. A reference carries the nonce and the
    stream's digest, never the id, so it can only name an object of this cluster's id space (not
    another application's), and only one whose stream has that digest."""
    mac = hmac.new(key, nonce + stream_digest, hashlib.sha256).digest()
    return ferry.ObjectID(mac[:20].hex())


def _dumps(value):
    if not _answering_peer.get():
        raise NotImplementedError  # a reference travels only in get_data's reply: Dask's way
    entry = _entry_of(value)
    # Stored before, unless its daemon restarted since (the object gone): then stored again,
    # its entry replaced.
    ref = entry[4] if entry and entry[4] and _still_there(entry[1]) else _store(value)
    if ref is None:
        raise NotImplementedError  # not ours to send: Dask's next family serialises it
    return ref, []


def _still_there(oid):
    try:
        return _state["client"].contains(oid)
    except ferry.Error:
        return False


def _store(value):
    """Puts a result a peer asks for in the store, on its first request: its ObjectID, held
    for as long as value lives (the worker's mapping keeps it, Dask's get_data message too,
    until the peer has answered), or None when it stays Dask's (small, a container, no
    buffers, the store full). Only results that travel cost a copy into the arena."""
    data, client = _state["data"], _state["client"]
    if data is None or client is None:
        return None
    try:
        weakref.ref(value)
    except TypeError:
        return None  # it could not be recognised on the next request, nor hold its object
    parts = _parts_to_store(value, data.threshold)
    if parts is None or _state["key"] is None:
        return None
    nonce, stream_digest = os.urandom(16), hashlib.sha256(parts[0]).digest()
    oid = _object_id(_state["key"], nonce, stream_digest)
    try:
        buf = client._put_parts(oid, parts, False, True)
    except Exception as e:  # noqa: BLE001 - the store's refusal or anything else: Dask's way
        data.refuse(parts, e)
        return None
    ref = {"nonce": nonce.hex(), "stream": stream_digest.hex()}
    at = _location(client) if buf.size < _LOCATED_MAX else None
    if at:
        ref["at"] = at  # where it is: the reader's node asks this one, not the directory
    _remember(value, oid, buf, ref=ref)  # takes a weak reference: checked above
    data.stored += 1
    return ref


# Results from this size on carry no location (libferry's FERRY_LOCATED_MAX): the reader's
# lookup finds every holder, to split the transfer and relay it.
_LOCATED_MAX = 16 << 20


def _location(client):
    """This node's location, or None without a directory (readers then look the id up): the
    Client's, asked once per connection to its daemon (a restarted daemon is another run)."""
    try:
        return client._here()
    except ferry.Error:
        return None


def _at(header):
    """The location a reference carries, or None: a peer's text is only passed on to our
    daemon, which believes it as far as its signature (a bad one costs a lookup)."""
    at = header.get("at") if isinstance(header, dict) else None
    return at if isinstance(at, str) and 0 < len(at.encode(errors="replace")) < 3072 else None


def _loads(header, frames):
    try:
        return _get(header)
    except TransferFailed as e:
        _take_bytes_for_a_while(str(e))
        raise


def _reference(header):
    """The ObjectID a reference names, and its stream's digest; TransferFailed for a reference
    that is malformed or reaches a process without ferry.dask."""
    client, key = _state["client"], _state["key"]
    try:
        nonce, stream_digest = bytes.fromhex(header["nonce"]), bytes.fromhex(header["stream"])
        if len(nonce) != 16 or len(stream_digest) != 32:
            raise ValueError("a nonce of 16 bytes and a digest of 32")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TransferFailed(f"ferry.dask: a malformed reference {header!r}: {e}") from e
    if client is None or key is None:
        raise TransferFailed("ferry.dask: a reference sent to a process without ferry.dask")
    return _object_id(key, nonce, stream_digest), stream_digest


def _load_checked(buf, stream_digest):
    """The value in buf, unpickled from a private copy of its pickle stream that has the digest
    its producer recorded at its put: bytes anyone changed since (a process that mapped the
    arena writable) are never unpickled. Its out-of-band buffers are read-only views of the
    arena (data: checked against the producer's tree when they crossed nodes)."""
    parts = ferry._ferry._decode_parts(buf.metadata, buf.size)
    view = memoryview(buf)
    stream_at, stream_len = parts[0]
    stream = bytes(view[stream_at : stream_at + stream_len])
    if not hmac.compare_digest(hashlib.sha256(stream).digest(), stream_digest):
        raise ValueError("its pickle stream is not the one its producer stored")
    buffers = [view[at : at + length] for at, length in parts[1:]]
    return pickle.loads(stream, buffers=buffers)


def _get(header):
    client = _state["client"]
    oid, stream_digest = _reference(header)
    try:
        buf = client.get(oid, _state["fetch_timeout_ms"], fetch=True, at=_at(header))
        # Deleted when unused, like every object of ferry.dask. Marked whether or not this get
        # fetched it: the producer's own copy is marked already, and a look before the get
        # could see a copy that went before the get made another (which would then stay).
        client.delete_unused(oid)
        value = _load_checked(buf, stream_digest)
    except (ferry.Error, ValueError, pickle.UnpicklingError) as e:  # ValueError: format, digest
        raise TransferFailed(f"ferry.dask: could not get {oid}: {e}") from e
    # Handed on to further workers by the same reference.
    ref = {"nonce": header["nonce"], "stream": header["stream"]}
    if _at(header):
        ref["at"] = _at(header)
    _remember(value, oid, buf, received=True, ref=ref)
    return value


def _take_bytes_for_a_while(why):
    """Stops asking peers for references, for BYTES_AFTER_FAILURE_S: Dask asks the same worker
    again after a failed transfer, and it must then send the bytes, or the computation would
    retry for ever (a sender outside this node's ferry cluster, a daemon restarted)."""
    worker, families = _state["worker"], _state["families"]
    if worker is None or worker.rpc.deserializers == families:
        return
    logger.warning("ferry.dask: %s; results come as bytes for %.0f s", why, BYTES_AFTER_FAILURE_S)
    worker.rpc.serializers = worker.rpc.deserializers = families

    def again():
        if _state["worker"] is worker:
            worker.rpc.serializers = worker.rpc.deserializers = (FAMILY, *families)

    # This may run in a thread Dask offloaded deserialisation to: add_callback is thread-safe.
    worker.loop.add_callback(worker.loop.call_later, BYTES_AFTER_FAILURE_S, again)


def _register_family():
    """Registers the "ferry" serialization family in this process (idempotent)."""
    from distributed.protocol.serialize import register_serialization_family

    register_serialization_family(FAMILY, _dumps, _loads)


_register_family()


def _parts_to_store(value, threshold):
    """put_object's parts of value when its out-of-band buffers reach threshold bytes; else None
    (small, a container, no buffers to share, or not picklable)."""
    if type(value) in _CONTAINERS:
        return None
    try:
        from dask.sizeof import sizeof

        if sizeof(value) < threshold:
            return None
        if _strided(value):  # a slice (a rechunk's piece): pickle would copy it in band
            value = value.copy(order="C")
        parts = ferry.pickle_parts(value)
    except Exception:  # noqa: BLE001 - anything pickle refuses stays with Dask
        return None
    if sum(memoryview(p).nbytes for p in parts[1:]) < threshold:
        return None
    return parts


def _strided(value):
    """Whether value is a NumPy array that is not contiguous (pickle keeps those in band)."""
    np = sys.modules.get("numpy")
    flags = getattr(value, "flags", None)
    return (np is not None and isinstance(value, np.ndarray) and value.dtype != object and
            not (flags.c_contiguous or flags.f_contiguous))


def _private_memory(monitor):
    """A worker's memory as its spill and pause thresholds should see it: its RSS less the
    shared memory it maps (RssShmem: the arena's pages it touched, which stay mapped after their
    objects go and are bounded by ferryd --memory, not by the worker)."""
    rss = monitor.proc.memory_info().rss
    try:
        with open(f"/proc/{monitor.proc.pid}/status") as f:
            for line in f:
                if line.startswith("RssShmem:"):
                    return max(rss - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return rss


class FerryData(MutableMapping):
    """A Dask worker's data mapping: results received through ferry, held in the arena (and so
    kept) while their key is here; the others in `inner` (the worker's own mapping, which may
    spill to disk), a large one put in the store too when a peer first asks for it (_dumps), and
    held there as long as the worker keeps it. Attributes it lacks are inner's (Dask's memory
    manager looks for a SpillBuffer's `fast` and `evict`)."""

    def __init__(self, inner, threshold=DEFAULT_THRESHOLD):
        self.inner = inner
        self.threshold = threshold
        self.held = {}  # key -> value received through ferry, backed by the arena
        self.stored = 0  # results put in the store for a peer
        self.received = 0  # results received through ferry (held, not put again)
        self.refused = 0  # results the store did not take (sent Dask's way)
        self._said_refused = False

    def __getattr__(self, name):
        if name == "inner":  # not set yet (unpickling, __init__ failing)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setitem__(self, key, value):
        self.pop(key, None)
        entry = _entry_of(value)
        if entry and entry[3]:  # received through ferry: in the arena already
            self.held[key] = value
            self.received += 1
        else:
            self.inner[key] = value

    def refuse(self, parts, why):
        """Counts a result the store did not take (it goes Dask's way); says so once."""
        self.refused += 1
        if not self._said_refused:
            self._said_refused = True
            logger.warning("ferry.dask: results the store does not take go Dask's way (first: "
                           "%d bytes): %s", sum(memoryview(p).nbytes for p in parts), why)

    def __getitem__(self, key):
        try:
            return self.held[key]
        except KeyError:
            return self.inner[key]

    def __delitem__(self, key):
        try:
            del self.held[key]
        except KeyError:
            del self.inner[key]

    def __contains__(self, key):
        return key in self.held or key in self.inner

    def __iter__(self):
        yield from list(self.held)
        yield from self.inner

    def __len__(self):
        return len(self.held) + len(self.inner)

    def __repr__(self):
        return (f"<FerryData: {len(self.held)} in ferry, {len(self.inner)} in the worker "
                f"({type(self.inner).__name__})>")


class FerryPlugin(WorkerPlugin):
    """The worker plugin of install(): connects the worker to its node's ferryd (`socket`, or
    the default: $FERRY_SOCKET, else the service's socket, else /tmp/ferry.sock), wraps its data
    mapping in FerryData, and asks its peers to send it results through ferry."""

    name = "ferry"

    def __init__(self, socket=None, threshold=DEFAULT_THRESHOLD,
                 fetch_timeout_ms=DEFAULT_FETCH_TIMEOUT_MS, key=None):
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1 byte, not {threshold}")
        if key is not None and (not isinstance(key, bytes) or len(key) < 16):
            raise ValueError("key must be bytes, at least 16 of them")
        self.socket = socket
        self.threshold = threshold
        self.fetch_timeout_ms = fetch_timeout_ms
        # This Dask cluster's key: the ids of its objects derive from it (_object_id). It
        # travels to the workers with the plugin, in Dask's own messages.
        self.key = key if key is not None else os.urandom(32)

    def setup(self, worker):
        _register_family()
        client = _state["client"]
        if client is None:
            client = ferry.Client(self.socket) if self.socket else ferry.Client()
            _state["client"] = client
        _state["fetch_timeout_ms"] = self.fetch_timeout_ms
        _state["key"] = self.key
        data = worker.memory_manager.data
        if not isinstance(data, FerryData):
            data = FerryData(data, self.threshold)
            worker.memory_manager.data = data
            worker.state.data = data
        data.threshold = self.threshold
        _state["data"] = data
        handler = worker.handlers["get_data"]
        if not getattr(handler, "_ferry", False):
            worker.handlers["get_data"] = _marking_peer_replies(handler)
        monitor = worker.monitor
        if getattr(monitor.get_process_memory, "__func__", None) is not _private_memory:
            monitor.get_process_memory = _private_memory.__get__(monitor)
        rpc = worker.rpc
        families = tuple(f for f in (rpc.deserializers or ("dask", "pickle")) if f != FAMILY)
        _state["worker"], _state["families"] = worker, families
        rpc.serializers = rpc.deserializers = (FAMILY, *families)
        logger.info("ferry.dask: worker %s keeps results of %d bytes and more in ferry (%s)",
                    worker.address, self.threshold, client.socket)

    # No teardown: install() again replaces the plugin (Dask tears the old one down first),
    # and the results the worker holds, received through ferry, must stay its own.


def _marking_peer_replies(handler):
    """get_data's handler, with _answering_peer set while it runs (its reply is serialised in
    the same task, or in work offloaded with its context). Dask inspects the handler's
    signature, which functools.wraps passes on."""

    @functools.wraps(handler)
    async def get_data(*args, **kwargs):
        token = _answering_peer.set(True)
        try:
            return await handler(*args, **kwargs)
        finally:
            _answering_peer.reset(token)

    get_data._ferry = True
    return get_data


def install(client, socket=None, threshold=DEFAULT_THRESHOLD,
            fetch_timeout_ms=DEFAULT_FETCH_TIMEOUT_MS, check=True):
    """Sets up every worker of the Dask cluster `client` drives, and every worker that joins it
    later, to keep results of `threshold` bytes or more in its node's ferry store and to move
    them through ferry (see the module's docstring). `socket`: each worker's ferryd (by
    default each worker's default socket). Also registers the "ferry" family on the scheduler,
    which relays replies between workers. With `check`, raises ValueError (after installing)
    when the workers' daemons cannot reach each other: standalone daemons (no --directory) that
    are not all one. Returns what register_worker_plugin returns."""
    global _install_key
    if _install_key is None:
        _install_key = os.urandom(32)
    plugin = FerryPlugin(socket, threshold, fetch_timeout_ms, _install_key)
    client.run_on_scheduler(_register_family)
    result = client.register_worker_plugin(plugin, name=FerryPlugin.name)
    if check:
        places = client.run(_where_am_i)
        if len(set(places.values())) > 1 and any(p[0] == "standalone" for p in places.values()):
            raise ValueError(
                "ferry.dask: the workers' ferry daemons cannot fetch from each other (each "
                "standalone one only reaches its own clients): "
                + "; ".join(f"{w} on {' '.join(p)}" for w, p in sorted(places.items()))
                + ". Put the daemons in one cluster (ferryd --directory), or the workers on one")
    return result


def _where_am_i():
    """For Client.run: ("cluster",) when this worker's daemon is in a cluster, else
    ("standalone", host, the daemon's socket): what install() compares."""
    import socket as sockets

    client = _state["client"]
    if client is None:
        return ("none",)
    try:
        client.nodes()
    except ferry.StandaloneNode:
        return ("standalone", sockets.gethostname(), os.path.realpath(client.socket))
    except ferry.Error:
        pass  # a cluster whose directory is down now
    return ("cluster",)


def ferry_objects(dask_worker=None):
    """For Client.run: (objects this worker holds in ferry, stored, received, refused)."""
    from distributed import get_worker

    data = (dask_worker or get_worker()).memory_manager.data
    if not isinstance(data, FerryData):
        return (0, 0, 0, 0)
    return (len(data.held), data.stored, data.received, data.refused)

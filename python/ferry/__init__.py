"""ferry: the Python client of the ferry object store.

A ferry daemon (ferryd) keeps immutable objects in a shared-memory arena on each node. A
Client reads them in place: Client.get returns Buffers that expose the stored bytes through
the buffer protocol (memoryview, numpy.frombuffer) without a copy, and keep their objects
alive while any view of them lives. Client.put copies any bytes-like object into the arena
once; Client.put_object and Client.get_object store Python objects with pickle protocol 5,
their out-of-band buffers (NumPy arrays, ...) in the arena, so that get_object returns arrays
backed by the arena, read-only, without a copy.

Objects stored by put_object (format version OBJECT_FORMAT_VERSION) hold, in their data part,
the pickle stream and then each out-of-band buffer, each starting at a multiple of 64 bytes;
their metadata is b"FERRYPK5", u32 version, u32 count of parts, then (u64 offset, u64 length)
per part, little-endian.
"""

import pickle

from . import _ferry
from ._ferry import (
    DEFAULT_SOCKET,
    MAX_IDS,
    SERVICE_SOCKET,
    OBJECT_FORMAT_VERSION,
    AuthenticationFailed,
    Buffer,
    Busy,
    DaemonUnreachable,
    DirectoryUnavailable,
    Error,
    InvalidArgument,
    Notification,
    NotSupported,
    ObjectExists,
    ObjectID,
    ObjectNotFound,
    ObjectNotSealed,
    ObjectTooLarge,
    OutOfMemory,
    PermissionDenied,
    ProtocolError,
    SpillDamaged,
    StandaloneNode,
    StoreFull,
    Subscription,
    SystemCallFailed,
    Timeout,
    TransferFailed,
    WouldBlock,
)

__version__ = "0.12.0"

__all__ = [
    "Client",
    "pickle_parts",
    "load_parts",
    "dlpack_unmarked",
    "ObjectID",
    "Buffer",
    "Subscription",
    "Notification",
    "Error",
    "InvalidArgument",
    "ObjectNotFound",
    "ObjectExists",
    "StoreFull",
    "ObjectTooLarge",
    "PermissionDenied",
    "Timeout",
    "ObjectNotSealed",
    "DaemonUnreachable",
    "ProtocolError",
    "OutOfMemory",
    "SystemCallFailed",
    "NotSupported",
    "Busy",
    "DirectoryUnavailable",
    "TransferFailed",
    "AuthenticationFailed",
    "WouldBlock",
    "SpillDamaged",
    "StandaloneNode",
    "DEFAULT_SOCKET",
    "SERVICE_SOCKET",
    "MAX_IDS",
    "OBJECT_FORMAT_VERSION",
]


# get_object's timeout_ms when its caller gives none: get's own default then applies.
_DEFAULT = object()


class Client(_ferry.Client):
    __slots__ = ()
    __doc__ = _ferry.Client.__doc__

    def put_object(self, obj, id=None, keep=False):
        """Stores obj (pickle protocol 5) and returns its ObjectID (a random one by default).

        Buffers that obj's objects export out of band (NumPy arrays, PickleBuffer, ...) are
        copied once, straight into the arena; non-contiguous ones go in the pickle stream.
        keep=True keeps the object until unkeep() or delete(): see Client.keep.
        """
        oid = ObjectID.random() if id is None else ObjectID(id)
        return self._put_parts(oid, pickle_parts(obj), keep)

    def get_object(self, id, timeout_ms=_DEFAULT, fetch=False):
        """Returns the object that put_object stored under id (waiting and fetching as get
        does, with get's defaults: timeout_ms 0, a fetch's with fetch). Its out-of-band buffers
        are read-only views of the arena, not copies; the object stays referenced while any of
        them is alive. ValueError for an object that put_object did not store."""
        if timeout_ms is _DEFAULT:
            buf = self.get(id, fetch=fetch)
        else:
            buf = self.get(id, timeout_ms, fetch=fetch)
        return load_parts(buf)


def pickle_parts(obj):
    """obj as put_object stores it: a tuple of its pickle (protocol 5) stream and then each
    buffer its objects export out of band, not copied (non-contiguous ones go in the stream)."""
    views = []

    def out_of_band(pickle_buffer):
        try:
            views.append(pickle_buffer.raw())
        except BufferError:  # not contiguous: pickle copies it into the stream
            return True
        return False

    stream = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    return (stream, *views)


class _Unmarked:
    """What ferry.dlpack_unmarked returns: a DLPack producer over a Buffer's bytes in place."""

    __slots__ = ("_buf",)

    def __init__(self, buf):
        self._buf = buf

    def __dlpack__(self, stream=None, **kwargs):
        if kwargs.get("copy") or (kwargs.get("max_version") or (0,))[0] >= 1:
            return self._buf.__dlpack__(stream=stream, **kwargs)  # can say read-only, or copies
        return self._buf._dlpack_unmarked(stream)

    def __dlpack_device__(self):
        return self._buf.__dlpack_device__()


def dlpack_unmarked(buf):
    """A DLPack producer of buf's bytes in place for a consumer that speaks DLPack 0.x
    (PyTorch 1.13), which cannot be told they are read-only: torch.from_dlpack(
    ferry.dlpack_unmarked(buf)). The tensor reads the arena with no copy, but it believes it may
    write, and a sealed object's pages are mapped read-only: an in-place write to it (t.add_(1),
    t[0] = 1) kills the process with SIGSEGV, and never changes the object. Use it only for
    tensors nothing writes; copy=True, or torch.tensor(numpy.frombuffer(buf)), makes a writable
    copy. Consumers of DLPack 1.0 need nothing of this: buf.__dlpack__ flags the tensor
    read-only for them."""
    if not isinstance(buf, Buffer):
        raise TypeError(f"dlpack_unmarked() takes a ferry.Buffer, not {type(buf).__name__}")
    return _Unmarked(buf)


def load_parts(buf):
    """The object a Buffer of put_object's format holds, its out-of-band buffers read-only views
    of buf (ValueError for another format)."""
    parts = _ferry._decode_parts(buf.metadata, buf.size)
    view = memoryview(buf)
    stream_at, stream_len = parts[0]
    buffers = [view[at : at + length] for at, length in parts[1:]]
    return pickle.loads(view[stream_at : stream_at + stream_len], buffers=buffers)

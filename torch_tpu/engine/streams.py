"""Streams of the tpu device: ``torch.Stream("tpu")`` / ``torch.tpu.Stream``, ``torch.tpu.current_stream()``,
``torch.tpu.stream(s)``, ``Tensor.record_stream`` and events recorded on a stream.

XLA runs a device's programs in launch order on one queue; PJRT moves data between the host and the device
beside that queue, asynchronously: an upload (``jax.device_put``) returns before its copy is done, and a
program reading the uploaded array waits for it on the device (PJRT orders them by the array's definition
event). So the compute queue is the default stream (id 0), and a side stream is a queue of transfers: an
upload made while a side stream is current (inside ``torch.tpu.stream(s)``) is noted on it
(``note_upload``), and

- ``s.synchronize()`` waits for those uploads (the default stream's: for the programs launched, not for
  side streams' uploads, as CUDA's default stream does not wait for other streams);
- ``s.query()`` says whether they are done; ``s.record_event()`` / ``event.record(s)`` mark them;
- ``s.wait_stream(other)``, ``s.wait_event(e)``, ``e.wait(s)`` order nothing more: a program that reads an
  uploaded array already waits for it, and a transfer reading a computed array for that;
- ``t.record_stream(s)`` is nothing to do: XLA keeps a buffer alive while a program or a transfer uses it
  (CUDA's caching allocator needs the hint; PJRT does not).

diffusers' group offloading with ``use_stream=True`` uploads the next group inside ``torch.tpu.stream(s)``
while the current group's programs run, and waits for ``s`` before using it: the upload overlaps the compute.
Streams are per process and one per ``Stream()`` call; the current stream is per thread, as CUDA's.
"""
from __future__ import annotations

import itertools
import threading

import torch

from ..runtime import dynamo_frames, platform, program_cache
from . import fused

_BaseStream = torch.Stream
_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, torch.Stream's device_type of a tpu stream
_ids = itertools.count(1)
_STREAMS: dict = {}  # stream id -> Stream (record_stream and torch's own Stream objects name a stream by id)
_current = threading.local()


class _StreamType(type):
    # torch.Stream objects made by torch itself (torch.accelerator, a dispatched op's argument) are streams too
    def __instancecheck__(cls, obj):
        return isinstance(obj, _BaseStream) if cls is Stream else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _BaseStream) if cls is Stream else type.__subclasscheck__(cls, sub)


def _is_tpu(device) -> bool:
    if device is None:
        accelerator = torch.accelerator.current_accelerator()
        return accelerator is not None and accelerator.type == "tpu"
    if isinstance(device, int):
        return True  # an index of the current accelerator's devices
    return torch.device(device).type == "tpu"


class Stream(_BaseStream, metaclass=_StreamType):
    """``torch.Stream``: a tpu stream is the device's compute queue (the default stream, id 0) or a queue of
    transfers (see the module); other devices' streams are torch's."""

    def __new__(cls, device=None, *, priority: int = 0, stream_id=None, device_index=None, device_type=None):
        if stream_id is not None:  # torch's own form (an existing stream by id)
            return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=device_type)
        if not _is_tpu(device):
            return super().__new__(cls, device, priority=priority)
        index = _device_index(device)
        s = super().__new__(cls, stream_id=next(_ids), device_index=index, device_type=_PRIVATEUSE1)
        s._tpu_pending = []
        _STREAMS[s.stream_id] = s
        return s

    def __init__(self, *args, **kwargs):
        pass

    @property
    def _on_tpu(self) -> bool:
        return self.device_type == _PRIVATEUSE1

    def synchronize(self) -> None:
        if not self._on_tpu:
            return super().synchronize()
        _tpu(self).wait()

    def query(self) -> bool:
        if not self._on_tpu:
            return super().query()
        return _tpu(self).done()

    def wait_event(self, event) -> None:
        if not self._on_tpu:
            return super().wait_event(event)
        _check_device(event, "wait for an event")  # ordered already (see the module)

    def wait_stream(self, stream) -> None:
        if not self._on_tpu:
            return super().wait_stream(stream)
        _check_device(stream, "wait for a stream")

    def record_event(self, event=None):
        if not self._on_tpu:
            return super().record_event(event) if event is not None else super().record_event()
        if event is None:
            event = torch.Event("tpu")
        event.record(self)
        return event

    def __enter__(self):
        if not self._on_tpu:
            return super().__enter__()
        self._tpu_previous = current()
        set_current(self)
        return self

    def __exit__(self, *exc):
        if not self._on_tpu:
            return super().__exit__(*exc)
        set_current(self.__dict__.pop("_tpu_previous", None))
        return False

    def __eq__(self, other):
        if isinstance(other, _BaseStream):
            return (self.stream_id, self.device_index, self.device_type) == \
                (other.stream_id, other.device_index, other.device_type)
        return NotImplemented

    def __hash__(self):
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self):
        if not self._on_tpu:
            return super().__repr__()
        kind = "default" if self.stream_id == 0 else "transfers"
        return f"torch.Stream device_type=tpu, device_index={self.device_index}, stream_id={self.stream_id} ({kind})"


class _DefaultStream:
    """The compute queue's state: waiting for it is waiting for the programs launched (and their errors)."""

    @staticmethod
    def wait() -> None:
        from .sync import sync

        sync(skip=_pending_side_arrays())

    @staticmethod
    def done() -> bool:
        fused.finish()
        last = program_cache.last_launched()
        return last is None or last.is_deleted() or last.is_ready()


class _SideStream:
    """A side stream's state: the uploads noted on it since it was last waited for."""

    def __init__(self, stream: Stream):
        self.stream = stream

    def live(self) -> list:
        pending = self.stream._tpu_pending
        alive = [a for a in (ref() for ref in pending) if a is not None and not a.is_deleted()]
        return alive

    def wait(self) -> None:
        arrays = self.live()
        self.stream._tpu_pending = []
        if arrays:
            with platform.X64():
                platform.jax().block_until_ready(arrays)

    def done(self) -> bool:
        arrays = [a for a in self.live() if not a.is_ready()]
        if not arrays:
            self.stream._tpu_pending = []
        return not arrays


def _tpu(stream) -> _DefaultStream | _SideStream:
    if stream.stream_id == 0:
        return _DefaultStream
    own = _STREAMS.get(stream.stream_id)
    if own is None:
        raise RuntimeError(f"tpu: stream {stream.stream_id} was not made by torch.tpu.Stream() / torch.Stream('tpu')")
    return _SideStream(own)


def _device_index(device) -> int:
    if device is None or isinstance(device, int):
        index = 0 if device is None else device
    else:
        index = torch.device(device).index or 0
    if index != 0:
        raise RuntimeError(f"tpu:{index} does not exist: torch_tpu binds one device per process (tpu:0)")
    return 0


def _check_device(obj, what: str) -> None:
    device = getattr(obj, "device", None)
    if device is not None and torch.device(device).type != "tpu":
        raise ValueError(f"a tpu stream cannot {what} of another device ({obj})")


_DEFAULT = None


def default_stream() -> Stream:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Stream(stream_id=0, device_index=0, device_type=_PRIVATEUSE1)
    return _DEFAULT


def current() -> Stream:
    """This thread's current tpu stream (the default stream unless a ``torch.tpu.stream(s)`` is active)."""
    s = getattr(_current, "stream", None)
    return default_stream() if s is None else s


def set_current(stream) -> None:
    if stream is not None:
        if not _is_tpu(stream.device):
            raise ValueError(f"torch.tpu.set_stream: {stream} is not a tpu stream")
        stream = _STREAMS.get(stream.stream_id, stream) if stream.stream_id else None
    _current.stream = stream


def side_stream() -> Stream | None:
    """The current side stream of this thread, None on the default stream (the upload path asks: cheap)."""
    return getattr(_current, "stream", None)


def note_upload(array) -> None:
    """``array`` is being uploaded while a side stream is current: that stream's transfer."""
    import weakref

    s = getattr(_current, "stream", None)
    if s is not None:
        s._tpu_pending.append(weakref.ref(array))


def _pending_side_arrays() -> frozenset:
    ids = set()
    for s in list(_STREAMS.values()):
        for ref in s._tpu_pending:
            a = ref()
            if a is not None:
                ids.add(id(a))
    return frozenset(ids)


def pending_uploads(stream) -> list:
    """The arrays a stream's recorded event waits for: a side stream's uploads (None: the default stream's
    last program)."""
    if stream is None or stream.stream_id == 0:
        return None
    return _tpu(stream).live()


class StreamContext:
    """``torch.tpu.stream(s)`` / ``torch.tpu.StreamContext(s)``: ``s`` is the current stream inside (None:
    nothing changes), as ``torch.cuda.StreamContext``."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.previous = getattr(_current, "stream", None)
        set_current(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            _current.stream = self.previous
        return False


def record_stream(func, args, kwargs):
    """``Tensor.record_stream(s)``: nothing to do on the tpu (see the module); the stream must be the tpu's."""
    stream = args[1]
    if not _is_tpu(getattr(stream, "device", None)):
        raise RuntimeError(f"record_stream: a tpu tensor cannot be recorded on a stream of another device ({stream})")
    return None




class TpuStream(Stream):
    """``torch.tpu.Stream(device=None, priority=0)``, as ``torch.cuda.Stream``: a new stream of the tpu device
    (a queue of uploads, see the module)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:  # (torch's own form, by id)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, "tpu" if device is None else _tpu_device(device), priority=priority)


def _tpu_device(device):
    if isinstance(device, int):
        return torch.device("tpu", device)
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"torch.tpu.Stream: expected a tpu device, got {device}")
    return device


def install() -> None:
    torch.Stream = Stream
    # torch.compile runs these as plain Python (a compiled region's code and guards call them)
    dynamo_frames.keep_out_all([
        *(getattr(Stream, name) for name in ("__new__", "synchronize", "query", "wait_event", "wait_stream",
                                             "record_event", "__enter__", "__exit__", "__eq__", "__hash__")),
        TpuStream.__new__, StreamContext.__enter__, StreamContext.__exit__, current, set_current, default_stream,
        note_upload, record_stream])

"""Device events: ``torch.Event("tpu")`` / ``torch.tpu.Event`` record, query, wait, synchronize and time.

torch's own ``torch.Event`` asks the device guard's C++ side, which a Python backend cannot provide
("Backend doesn't support synchronizing events"). ``Event`` is its subclass, installed as ``torch.Event``:
events of other devices keep torch's behaviour, a tpu event is served here.

The tpu device runs its programs in launch order on one queue (``program_cache.last_launched``), so an
event is a point in that queue: ``record()`` launches what fused mode has pending and remembers the
program launched last; the event completes when that program's output is ready. A watcher thread waits
for recorded events in order and notes the host clock when each completes, which ``elapsed_time`` reads
(milliseconds between the two completions: the device time of the work between the two records, as
the host observes it, within the thread's wake-up latency of ~0.1 ms). There is one queue, so
``wait()`` has nothing to order: work launched after it runs after the recorded work anyway. An event
recorded on a side stream (``engine/streams.py``) is that stream's uploads so far.
"""
from __future__ import annotations

import queue
import threading
import time

import torch

from ..runtime import program_cache
from . import fused, streams

__all__ = ["Event", "TpuEvent", "install"]

_BaseEvent = torch.Event


class _Completion:
    """One record(): the arrays it waits for (the program launched last, or a side stream's uploads) and when
    the host saw them finish."""

    __slots__ = ("marker", "recorded_at", "done_at", "done")

    def __init__(self, marker):
        self.marker, self.recorded_at, self.done_at = marker, time.perf_counter(), None
        self.done = threading.Event()


class _Watcher:
    """A daemon thread that waits for recorded completions in record order (the device's order)."""

    def __init__(self):
        self.queue: queue.Queue = queue.Queue()
        self.thread = None
        self.lock = threading.Lock()

    def add(self, c: _Completion) -> None:
        c.marker = [a for a in c.marker if a is not None and not a.is_deleted() and not a.is_ready()]
        if not c.marker:
            c.done_at = c.recorded_at
            c.done.set()
            return
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="torch_tpu-events", daemon=True)
                self.thread.start()
        self.queue.put(c)

    def _run(self) -> None:
        while True:
            c = self.queue.get()
            for array in c.marker:
                try:
                    array.block_until_ready()
                except Exception:  # noqa: BLE001 - a failed program is reported by the next read or synchronize
                    pass
            c.done_at = max(time.perf_counter(), c.recorded_at)
            c.done.set()


_WATCHER = _Watcher()


class _EventType(type):
    # torch.Event objects made by torch itself (Stream.record_event) are torch.Event instances too
    def __instancecheck__(cls, obj):
        return isinstance(obj, _BaseEvent) if cls is Event else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _BaseEvent) if cls is Event else type.__subclasscheck__(cls, sub)


class Event(_BaseEvent, metaclass=_EventType):
    """``torch.Event``; a tpu event records, waits, synchronizes and times (see the module)."""

    def __init__(self, device=None, *, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        self._tpu_timing = enable_timing
        self._tpu_completion = None

    @property
    def _on_tpu(self) -> bool:
        return self.device.type == "tpu"

    def record(self, stream=None) -> None:
        if not self._on_tpu:
            return super().record(stream) if stream is not None else super().record()
        _check_stream(stream)
        uploads = streams.pending_uploads(streams.current() if stream is None else stream)
        if uploads is None:  # the default stream: the programs launched
            fused.finish()  # what fused mode recorded so far is launched (the event covers it)
            uploads = [program_cache.last_launched()]
        self._tpu_completion = _Completion(uploads)
        _WATCHER.add(self._tpu_completion)

    def query(self) -> bool:
        if not self._on_tpu:
            return super().query()
        c = self._tpu_completion
        # (the arrays themselves: the watcher thread may not have noted them yet, and after a synchronize of
        # the stream an event recorded on it is complete)
        return c is None or c.done.is_set() or all(a.is_deleted() or a.is_ready() for a in c.marker)

    def wait(self, stream=None) -> None:
        if not self._on_tpu:
            return super().wait(stream) if stream is not None else super().wait()
        _check_stream(stream)  # one queue: later work runs after the recorded work anyway

    def synchronize(self) -> None:
        if not self._on_tpu:
            return super().synchronize()
        if self._tpu_completion is not None:
            self._tpu_completion.done.wait()

    def elapsed_time(self, end_event) -> float:
        if not self._on_tpu:
            return super().elapsed_time(end_event)
        if not isinstance(end_event, Event) or not getattr(end_event, "_on_tpu", False) or \
                not hasattr(end_event, "_tpu_completion"):
            raise ValueError(f"elapsed_time: end_event must be a tpu torch.Event, got {end_event!r}")
        if not (self._tpu_timing and end_event._tpu_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._tpu_completion is None or end_event._tpu_completion is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        self.synchronize()
        end_event.synchronize()
        return (end_event._tpu_completion.done_at - self._tpu_completion.done_at) * 1000.0

    def __repr__(self) -> str:
        return super().__repr__() if not self._on_tpu else \
            f"torch.Event device_type=tpu, device_index=0, enable_timing={self._tpu_timing}, " \
            f"recorded={self._tpu_completion is not None}"


def _check_stream(stream) -> None:
    if stream is not None and torch.device(stream.device).type != "tpu":
        raise ValueError(f"a tpu event cannot be recorded on or wait for a stream of another device ({stream})")


class TpuEvent(Event):
    """``torch.tpu.Event(enable_timing=False, blocking=False, interprocess=False)``, as ``torch.cuda.Event``:
    an event of the tpu device."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, "tpu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        super().__init__("tpu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def install() -> None:
    torch.Event = Event

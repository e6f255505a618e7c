"""What ``torch_tpu.profile`` records of torch_tpu itself: each program's run on the device and each XLA
compilation, by name, kept apart.

While a recorder is on (``start()`` .. ``stop()``), every launch (``launched(name, output)``: an aten
op's program in strict eager, a fused graph, a compiled graph, the small view/copy programs) is timed
on the device queue: the device runs its programs in launch order, so a program starts when it was
launched and the one before it finished, and ends when its output is ready (a watcher thread waits for
the outputs in order and notes the host clock: device time as the host observes it, within ~0.1 ms).
Every XLA compilation (``compiling(name)``, from ``compile_status``) is a span of its own thread. Nothing
is done when no recorder is on (one list read per launch).
"""
from __future__ import annotations

import queue
import threading
import time
import weakref

__all__ = ["Recorder", "current", "launched", "start", "stop"]

ACTIVE: list = [None]  # the recorder on, or None (read on every launch)


class Recorder:
    def __init__(self):
        self.t0 = time.perf_counter()
        self.programs: list[tuple[str, float, float]] = []  # (name, device start, end), seconds since t0
        self.compiles: list[tuple[str, float, float, str]] = []  # (name, start, end, thread name)
        self._queue: queue.Queue = queue.Queue()
        self._last_done = self.t0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="torch_tpu-device-trace", daemon=True)
        self._thread.start()

    def launched(self, name: str, output) -> None:
        self._queue.put((name, time.perf_counter(), output))

    def _watch(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            name, launched_at, output = item
            try:
                if output is not None and not output.is_deleted():
                    output.block_until_ready()
            except Exception:  # noqa: BLE001 - a failed program is reported by the next read
                pass
            done = time.perf_counter()
            begin = max(launched_at, self._last_done)
            self._last_done = done
            with self._lock:
                self.programs.append((name, begin - self.t0, done - self.t0))

    def compiled(self, name: str, began: float, ended: float) -> None:
        with self._lock:
            self.compiles.append((name, began - self.t0, ended - self.t0, threading.current_thread().name))

    def finish(self) -> None:
        """Wait for the launches recorded so far to be timed; stop the watcher."""
        self._queue.put(None)
        self._thread.join()


def start() -> Recorder:
    if ACTIVE[0] is not None:
        raise RuntimeError("torch_tpu.profile: a profile is already recording (profiles do not nest)")
    ACTIVE[0] = Recorder()
    return ACTIVE[0]


def stop() -> Recorder | None:
    rec, ACTIVE[0] = ACTIVE[0], None
    if rec is not None:
        rec.finish()
    return rec


def current() -> Recorder | None:
    return ACTIVE[0]


_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def remember(prog, name: str) -> None:
    """The name ``prog``'s launches get (the one its compilation was logged under)."""
    try:
        _NAMES[prog] = name
    except TypeError:
        pass


def name_of(prog) -> str:
    """A program's name as XLA knows it (``jit_aten.mm.default`` -> ``aten.mm.default``, ``fused.<Module>``,
    ``compiled.<fn>.<kind>``), looked up once per program."""
    try:
        return _NAMES[prog]
    except (KeyError, TypeError):
        pass
    try:
        name = prog.runtime_executable().hlo_modules()[0].name
    except Exception:  # noqa: BLE001 - a runner without an XLA executable of its own
        name = getattr(prog, "__name__", None) or type(prog).__name__
    name = name[4:] if name.startswith("jit_") else name
    try:
        _NAMES[prog] = name
    except TypeError:
        pass
    return name


def launched(prog, outputs) -> None:
    """``prog`` was launched with these outputs (a sequence or one array): time it if recording."""
    rec = ACTIVE[0]
    if rec is None:
        return
    if type(outputs) in (list, tuple):
        outputs = outputs[0] if outputs else None
    rec.launched(name_of(prog) if not isinstance(prog, str) else prog, outputs)

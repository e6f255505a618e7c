"""Strict eager while programs compile: ops wait in line for their programs and launch in call order.

A strict op whose program is new is traced and lowered on the caller's thread (torch's errors, host checks
and lowering errors still raise at the op) and compiled by XLA on a compile thread
(``runtime/compile_pool.py``), as fused eager's graphs are (``fused._Launch``). The op returns at once:
its results are ``fused.LazyArray``s whose ``launch`` is the op waiting in line (an ``OpLaunch``, a
one-op ``_Launch`` in fused's line ``_LAUNCHES``). While anything waits, every later strict op and small
program (view reads and writes, casts) is queued behind it (``launchers.LINE`` is the current launcher),
taking the earlier ones' values as inputs; at each of them the ops at the head of the line whose programs
are ready launch. So XLA compiles the programs of a model's first call side by side while the caller
lowers the next ones, and the device runs them in the order they were called.

Every point that waits launches the line: a read (``.cpu()``, ``.item()``, printing: ``fused.materialize``
launches every op up to the value), ``sync``, an event, a mode switch (``fused.finish``), reading the
device-side checks (their codes are values of the line), an op returning a Python number, a collective.
Once the line is empty the next op runs as plain strict eager again (``launchers.STRICT``): a cached
program's op costs nothing more than before.

An op whose program fails to compile, or whose launch fails, raises its strict error where it is launched
(the next op, a read, sync): it and every op queued after it did not run, as when strict eager stops at
the op that raises. Their values raise when read (the failing op's error, or one naming it), their writes
are undone (``recovery``), so every tensor holds the value it had before that op. Launch-blocking mode
never queues: it compiles and waits at each op.
"""
from __future__ import annotations

import concurrent.futures
import weakref

import torch

from ..errors import OpError, out_of_memory
from ..runtime import counters, platform, program_cache
from . import fused, recovery
from .fused import LazyArray

_counters = counters.counters
_LAUNCHES = fused._LAUNCHES  # one line for both eager modes (a mode switch empties it)
_MAX_WAITING = 1024  # ops in line at most (each holds its inputs): then the oldest is waited for
_Future = concurrent.futures.Future


class OpLaunch(fused._Launch):
    """One strict op (or small program) waiting in line: its program or the Future of one compiling, its
    inputs (arrays, numbers, values of earlier ops in line), the values it fills in, and the writes of
    those values into tensors (undone if it does not run)."""

    __slots__ = ("entry", "what")

    def __init__(self, key, prog, inputs, outs, entry, what):
        sig = tuple((0, j) for j in range(len(outs)))
        super().__init__(key, inputs, None, [(0, j, la) for j, la in enumerate(outs)], sig, sig, (), [], (), None)
        self.prog = prog
        self.entry = entry  # the op's entry (its program is kept there once compiled); None: a small program
        self.what = what    # the op and its inputs, or the small program's name (for errors)

    def wrote(self, storage, old, new) -> None:
        self.writes.append((weakref.ref(storage), old, new))

    def name(self) -> str:
        return str(self.entry.func) if self.entry is not None else self.what

    def execute(self) -> None:
        self.done = True
        results = None
        try:
            try:
                inputs = [_value(a) for a in self.inputs]
                prog = self.prog
                if type(prog) is _Future:
                    prog = self.prog = program_cache.adopt(self.key, prog)  # (raises its compile error)
                    if self.entry is not None:
                        self.entry.compiled = prog
                results = prog(*inputs)
            except Exception as exc:
                error = self._error(exc)
                stop(self, error)
                if error is exc:
                    raise
                raise error from exc
        except BaseException:
            if results is None and not any(la.error is not None for _, _, la in self.live):
                # interrupted (Ctrl-C) before it ran: it waits at the head of the line again
                self.done = False
                if not _LAUNCHES or _LAUNCHES[0] is not self:
                    _LAUNCHES.appendleft(self)
            raise
        _counters["executions"] += 1
        program_cache.note_launch(results, prog)
        fused._fill(self.live, results if type(results) in (list, tuple) else (results,), self.out_sig,
                    self.live_sig)

    def _error(self, exc: Exception) -> Exception:
        """The error strict eager raises for this launch failing (a compile error is one already)."""
        if isinstance(exc, (OpError, NotImplementedError, torch.OutOfMemoryError)):
            return exc
        what = self.entry.describe_inputs() if self.entry is not None else self.what
        oom = out_of_memory(exc, f"running {what}")
        if oom is not None:
            return oom
        return OpError(f"tpu: {what} failed to run: {exc}") if self.entry is not None else exc


def _value(a):
    """An input's array at launch (a value of an earlier op in line has run by now)."""
    if type(a) is not LazyArray:
        return a
    if a.concrete is not None:
        return a.concrete
    return fused.materialize(a)


def stop(failed: OpLaunch, error: BaseException) -> None:
    """``failed`` did not run: it and every launch queued after it fail (their values raise when read)
    and their writes are undone, latest first: tensors hold what they held before ``failed``."""
    later = list(_LAUNCHES)
    _LAUNCHES.clear()
    for _, _, la in failed.live:
        la.error = error
        la.node = la.launch = None
    for launch in later:
        launch.done = True
        if not isinstance(launch, OpLaunch):  # (a fused graph: never in line with strict ops)
            recovery.fail(launch.live, launch.writes, error, launch.nodes)
            continue
        err = OpError(f"tpu: {launch.name()} did not run: {failed.name()}, called before it, failed ({error})")
        err.__cause__ = error
        for _, _, la in launch.live:
            la.error = err
            la.node = la.launch = None
    for launch in reversed([failed] + later):
        recovery.undo(launch.writes)


def abandon(error: BaseException) -> None:
    """In a forked child: the programs of the launches in line compile on threads that did not survive
    the fork (waiting for them would hang); each fails with ``error``. Takes no lock (one may have been held
    by a thread that is gone)."""
    for launch in list(_LAUNCHES):
        launch.done = True
        for _, _, la in launch.live:
            la.error = error
            la.node = la.launch = None
    _LAUNCHES.clear()


def waiting() -> int:
    """Launches in line (strict ops, or fused graphs waiting for their programs)."""
    return len(_LAUNCHES)


def pending(a) -> bool:
    """Whether ``a`` is a value of an op still waiting in line (an input as it is)."""
    return type(a) is LazyArray and a.concrete is None and a.launch is not None and a.error is None


def example(a):
    """What lowering needs of an input: a value waiting in line as its array will be (shape, dtype, on the
    device: the same module as for the array), anything else as it is."""
    if not pending(a):
        return a
    jax = platform.jax()
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=jax.sharding.SingleDeviceSharding(platform.jax_device()))


def launch_ready() -> None:
    """Launch the ops at the head of the line whose programs are compiled (waits only when the line is
    full). Raises the error of one that fails (see ``stop``). Call with ``fused._STATE.lock`` held."""
    while _LAUNCHES and (_LAUNCHES[0].ready() or len(_LAUNCHES) > _MAX_WAITING):
        _LAUNCHES[0].complete()


def drain() -> None:
    """Launch every op in line (waits for their programs)."""
    with fused._STATE.lock, platform.X64():
        while _LAUNCHES:
            _LAUNCHES[0].complete()


def enqueue(key, prog, inputs, avals, entry=None, what: str = "") -> tuple:
    """Queue a program (compiled, or the Future of one compiling) behind the line; its values, pending.
    Call with ``fused._STATE.lock`` held."""
    outs = tuple(LazyArray(shape, dtype, None, j) for j, (shape, dtype) in enumerate(avals))
    launch = OpLaunch(key, prog, list(inputs), outs, entry, what)
    for la in outs:
        la.node, la.launch = None, launch
    _LAUNCHES.append(launch)
    _counters["queued_ops"] += 1
    return outs

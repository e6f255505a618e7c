"""How a program runs in the current execution mode, decided once by ``modes.set_mode``.

Every executor launches through ``current``: an op's program (eager), the small programs of view
reads/writes and casts (the tensor layer's ``launch``). Strict eager runs each program at once
(asynchronously); launch-blocking strict eager also waits for it; fused eager records it into the
pending graph (``fused.py``). Keeping the choice in one object keeps mode checks off the hot path.
While strict ops wait in line for programs compiling in the background (``strict_line.py``), the current
launcher is ``LINE``, which queues every launch behind them; the first op that finds the line empty makes
it ``STRICT`` again.
"""
from __future__ import annotations

import concurrent.futures
import os

from ..errors import OpError, describe, out_of_memory
from ..runtime import compile_pool, counters, device_trace, failed_values, multiprocess, platform, program_cache, spmd
from . import device_numbers, fused, graph_keys, poisoned, strict_line

_counters = counters.counters
_launched = program_cache.Launched
_tracing = device_trace.ACTIVE
_NUMBER_PLACES = device_numbers.PLACES
_LAUNCH_NUMBER_PLACES = device_numbers.LAUNCH_PLACES


def _concrete(a):
    """The concrete array of a (possibly deferred) value, with the lineage of device-side checks it has."""
    concrete = fused.materialize(a)
    if poisoned.active and concrete is not a:
        poisoned.carry(a, concrete)
    return concrete


_Future = concurrent.futures.Future


class Strict:
    """DEFER_NEVER: each program runs now; JAX dispatch does not wait for the device. A new program is
    lowered now and compiled in the background while its op waits in line (``strict_line.py``)."""

    deferred = False
    verifies_each_op = False  # read device-side checks after every op (launch blocking)
    queues = True  # a new program compiles on a compile thread while its op waits in line

    def take(self, lazy):
        """A deferred value met on the way in (left over from fused mode): its concrete array."""
        return _concrete(lazy)

    def _background(self) -> bool:
        return self.queues and compile_pool.threads() > 0

    def prepare(self, entry, example: list, args, kwargs) -> None:
        """Called once when an op entry is built: lower its program now (errors surface at the op); XLA
        compiles it now, or on a compile thread (``run_op`` then queues the op)."""
        if self._background():
            entry.compile([strict_line.example(a) for a in example], args, kwargs, background=True)
        else:
            entry.compile([fused.materialize(a) for a in example], args, kwargs)

    def _program(self, entry, arrays, args, kwargs):
        """The program of an entry that has none yet (built in fused mode, or compiling in the background):
        found in memory, the Future of it compiling (when this launcher queues), or compiled now."""
        prog = program_cache.find(entry.key)
        if type(prog) is _Future and prog.done() and prog.exception() is not None:
            prog = None  # its compile failed (raised where it was launched): compile again
        if prog is None:
            if self._background():
                prog = entry.compile([strict_line.example(a) for a in arrays], args, kwargs, background=True)
            else:
                prog = entry.compile([_concrete(a) for a in arrays], args, kwargs)
        if type(prog) is _Future and not self.queues:
            prog = program_cache.adopt(entry.key, prog)  # (waits)
        if type(prog) is not _Future:
            entry.compiled = prog
        return prog

    def run_op(self, entry, arrays: list, args, kwargs):
        # inputs computed from a device-side check not read yet give the outputs that lineage; one
        # computed from a failed check raises here (poisoned.py)
        taken = poisoned.lineage(arrays, entry.func) if poisoned.active else None
        prog = entry.compiled
        if prog is None:
            prog = self._program(entry, arrays, args, kwargs)
            if type(prog) is _Future:  # compiling: the op waits in line for it
                return _queue(taken, arrays, entry.key, prog, arrays, entry.avals, entry)
            arrays = [_concrete(a) for a in arrays]  # (see below)
        places = _NUMBER_PLACES.get(id(entry))
        if places is None or places[0] is not entry.key:
            places = device_numbers.places(entry, arrays)
        try:
            # Python numbers seen before as device scalars (device_numbers.py)
            outs = prog(*(device_numbers.inputs(arrays, places) if places[1] else arrays))
        except Exception as exc:
            if any(type(a) is fused.LazyArray for a in arrays):
                # another thread left fused mode between this op's inputs and its launch: they were taken
                # as deferred values (checked here, off the hot path)
                return self.run_op(entry, [_concrete(a) for a in arrays], args, kwargs)
            oom = out_of_memory(exc, f"running {entry.func} ({describe(args, kwargs)})")
            raise (oom or OpError(f"tpu: {entry.func} failed to run ({describe(args, kwargs)}): {exc}")) from exc
        _counters["executions"] += 1
        if outs:
            _launched.last = outs[0]  # program_cache.note_launch, inlined (hot path)
            if _tracing[0] is not None:  # torch_tpu.profile is recording
                device_trace.launched(prog, outs)
        if taken is not None:
            poisoned.mark(outs, taken, arrays)
        return outs

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        """``fn(*args)`` (one output) through the program cache; ``aval`` = its (shape, dtype)."""
        held = args
        taken = poisoned.lineage(args, what or key[0]) if poisoned.active else None
        args = tuple(fused.materialize(a) for a in args)
        prog = program_cache.lookup(key)
        if prog is None:
            if self._background():
                prog = _small_program(key, fn, args)
                if type(prog) is _Future:  # compiling: the launch waits in line for it
                    avals = (aval,) if aval is not None else graph_keys.out_avals(key, fn, args)
                    return _queue(taken, held, key, prog, args, avals, None, what or str(key[0]))[0]
            else:
                prog = program_cache.compile_program(key, fn, args)
        _counters["executions"] += 1
        places = _LAUNCH_NUMBER_PLACES.get(key)
        if places is None:
            places = device_numbers.launch_places(key, args)
        try:
            out = prog(*(device_numbers.inputs(args, places) if places[1] else args))
        except Exception as exc:
            oom = out_of_memory(exc, f"running {what or key[0]}")
            if oom is None:
                raise
            raise oom from exc
        _launched.last = out
        if _tracing[0] is not None:
            device_trace.launched(prog, out)
        if taken is not None:
            poisoned.mark((out,), taken, held)
        return out

    def collective(self, key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
        """``fn(*args)`` as one SPMD program over the mesh of ``mesh`` (global device ids); ``fn`` may
        use ``spmd.AXIS`` collectives. ``key`` starts with "collective". Returns a tuple of arrays."""
        taken = poisoned.lineage(held := args, what or key[0]) if poisoned.active else None
        args = tuple(fused.materialize(a) for a in args)
        prog = program_cache.lookup(key)
        if prog is None:
            prog = spmd.compile_program(key, fn, args, mesh, out_ndims=[len(s) for s, _ in avals], what=what)
        _counters["executions"] += 1
        outs = prog(*args)
        if taken is not None:
            poisoned.mark(outs, taken, held)
        return outs


def _small_program(key, fn, args):
    """A small program's (view reads and writes, casts) compiled program, or the Future of it compiling."""
    prog = program_cache.in_flight(key)
    if prog is None or (type(prog) is _Future and prog.done() and prog.exception() is not None):
        prog = program_cache.compile_program(key, fn, tuple(strict_line.example(a) for a in args), background=True)
    return prog


def _queue(taken, held, key, prog, inputs, avals, entry=None, what: str = ""):
    """Queue a launch behind the line (``strict_line``) and make ``LINE`` the current launcher."""
    global current
    with fused._STATE.lock:
        outs = strict_line.enqueue(key, prog, inputs, avals, entry, what)
        if current is STRICT:
            current = LINE
    if taken is not None:
        poisoned.mark(outs, taken, held)
    return outs


def queue_program(key, prog, inputs, avals, what: str) -> tuple:
    """Launch a compiled program (or the Future of one compiling) behind the launches waiting in line, in any
    eager mode (a recorded module call's, ``eager/module_replay.py``); its values, pending."""
    return _queue(None, inputs, key, prog, inputs, avals, None, what)


def _line_empty() -> bool:
    """Launch the ops at the head of the line whose programs are ready; whether the line is empty now
    (then ``STRICT`` is the current launcher again)."""
    global current
    with fused._STATE.lock:
        strict_line.launch_ready()
        if strict_line.waiting():
            return False
        if current is LINE:
            current = STRICT
    return True


class StrictLine(Strict):
    """DEFER_NEVER while ops wait in line for their programs (``strict_line.py``): every launch queues
    behind them, and launches the ops at the head of the line whose programs are ready."""

    def take(self, lazy):
        return lazy if strict_line.pending(lazy) else _concrete(lazy)

    def run_op(self, entry, arrays: list, args, kwargs):
        if entry.returns_scalar:  # its Python number is needed now: a point that waits
            strict_line.drain()
        if _line_empty():  # (may raise the error of an op in line that failed: see strict_line)
            return STRICT.run_op(entry, [_concrete(a) for a in arrays], args, kwargs)
        taken = poisoned.lineage(arrays, entry.func) if poisoned.active else None
        prog = entry.compiled
        if prog is None:
            prog = self._program(entry, arrays, args, kwargs)
        return _queue(taken, arrays, entry.key, prog, arrays, entry.avals, entry)

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        # (launches nothing that waits: a small program is called from within an op, where an earlier op's
        # error must not surface, e.g. while deferred_errors stacks pending check codes)
        if not strict_line.waiting():
            _line_empty()
            return STRICT.launch(key, fn, args, aval, what)
        held = args
        taken = poisoned.lineage(args, what or key[0]) if poisoned.active else None
        args = tuple(a if type(a) is not fused.LazyArray or strict_line.pending(a) else fused.materialize(a)
                     for a in args)
        prog = program_cache.lookup(key)
        if prog is None:
            prog = _small_program(key, fn, args)
        avals = (aval,) if aval is not None else graph_keys.out_avals(key, fn, args)
        return _queue(taken, held, key, prog, args, avals, None, what or str(key[0]))[0]

    def collective(self, key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
        strict_line.drain()
        _line_empty()
        return STRICT.collective(key, fn, args, avals, mesh, what)


class LaunchBlocking(Strict):
    """DEFER_NEVER_AND_LAUNCH_BLOCKING: wait after every op, so a failure names the op that caused it."""

    verifies_each_op = True
    queues = False

    def run_op(self, entry, arrays: list, args, kwargs):
        outs = super().run_op(entry, arrays, args, kwargs)
        try:
            for o in outs:
                o.block_until_ready()
        except Exception as exc:
            for o in outs:  # raised here: a later synchronize does not raise it again
                failed_values.remember(o)
            oom = out_of_memory(exc, f"running {entry.func} ({describe(args, kwargs)})")
            raise (oom or OpError(f"tpu: {entry.func} failed on the device ({describe(args, kwargs)}): {exc}")) from exc
        return outs

    def collective(self, key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
        outs = super().collective(key, fn, args, avals, mesh, what)
        try:
            for o in outs:
                o.block_until_ready()
        except Exception as exc:
            err = multiprocess.collective_error(exc, what)
            if err is exc:
                raise
            raise err from exc
        return outs


class Fused(Strict):
    """DEFER_AND_FUSE: programs are recorded into the pending graph and run at the next flush."""

    deferred = True
    queues = False  # (an op returning a Python number runs as a program of its own, now)

    def take(self, lazy):
        return lazy

    def prepare(self, entry, example: list, args, kwargs) -> None:
        if entry.returns_scalar:  # a Python scalar result is needed now: a program of its own
            super().prepare(entry, example, args, kwargs)
            return
        if entry.loaded:  # described on disk: it traced before, in an earlier process
            return
        # no single-op program in fused mode, but trace once so a bad lowering fails here, at the op
        jax = platform.jax()
        try:
            jax.eval_shape(entry.trace, *[fused.abstract(a) for a in example])
        except Exception as exc:
            raise OpError(f"tpu: could not lower {entry.func} ({describe(args, kwargs)}): "
                          f"{type(exc).__name__}: {exc}") from exc

    def run_op(self, entry, arrays: list, args, kwargs):
        if entry.returns_scalar:
            return super().run_op(entry, [_concrete(a) for a in arrays], args, kwargs)
        if poisoned.active:
            taken = poisoned.lineage(arrays, entry.func)
            outs = fused.record(entry.key, entry.trace, arrays, entry.avals, what=entry.what)
            poisoned.mark(outs, taken, arrays)
            return outs
        return fused.record_op(entry.key, entry.trace, arrays, entry.avals, entry.what)

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        taken = poisoned.lineage(args, what or key[0]) if poisoned.active else None
        out = fused.record(key, fn, args, None if aval is None else (aval,), what=what)[0]
        if taken is not None:
            poisoned.mark((out,), taken, args)
        return out

    def collective(self, key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
        taken = poisoned.lineage(args, what or key[0]) if poisoned.active else None
        outs = fused.record(key, fn, args, avals, what=what, mesh=mesh)
        if taken is not None:
            poisoned.mark(outs, taken, args)
        return outs


class Forked(Strict):
    """In a process forked after its parent started the XLA runtime: every launch raises (it would hang)."""

    def prepare(self, entry, example: list, args, kwargs) -> None:
        raise platform.fork_error()

    def run_op(self, entry, arrays: list, args, kwargs):
        raise platform.fork_error()

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        raise platform.fork_error()

    def collective(self, key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
        raise platform.fork_error()


STRICT = Strict()
LINE = StrictLine()
LAUNCH_BLOCKING = LaunchBlocking()
FUSED = Fused()
FORKED = Forked()
current: Strict = STRICT  # set by modes.set_mode


def _after_fork_in_child() -> None:
    global current
    if platform.runtime_started():  # the parent's XLA runtime did not survive the fork
        current = FORKED
        strict_line.abandon(platform.fork_error())  # (nor the threads compiling the line's programs)


os.register_at_fork(after_in_child=_after_fork_in_child)


def launch(key, fn, args: tuple, aval=None, what: str = ""):
    """Run (or record) one small program in the current mode: view reads/writes, casts."""
    prev = platform.X64.swap(True)  # also reached outside dispatch (to_jax of a view, saving)
    try:
        return current.launch(key, fn, args, aval, what)
    finally:
        platform.X64.restore(prev)


def _launch_recorded_collectives() -> None:
    """Before an SPMD program launches (a collective in strict eager, a compiled graph's): the fused graph
    still pending, when it holds collectives (recorded earlier), launches first."""
    if fused._graph().mesh is not None:
        fused.flush()


spmd.launch_earlier_collectives_with(_launch_recorded_collectives)


def collective(key, fn, args: tuple, avals, mesh: tuple, what: str = ""):
    """Run (or record) one collective program over a mesh of several processes' devices."""
    with platform.X64():
        return current.collective(key, fn, args, avals, mesh, what)

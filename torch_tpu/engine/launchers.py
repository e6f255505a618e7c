"""How a program runs in the current execution mode, decided once by ``modes.set_mode``.

Every executor launches through ``current``: an op's program (eager), the small programs of view
reads/writes and casts (the tensor layer's ``launch``). Strict eager runs each program at once
(asynchronously); launch-blocking strict eager also waits for it; fused eager records it into the
pending graph (``fused.py``). Keeping the choice in one object keeps mode checks off the hot path.
"""
from __future__ import annotations

import os

from ..errors import OpError, describe, out_of_memory
from ..runtime import counters, device_trace, failed_values, multiprocess, platform, program_cache, spmd
from . import fused, poisoned

_counters = counters.counters
_launched = program_cache.Launched
_tracing = device_trace.ACTIVE


def _concrete(a):
    """The concrete array of a (possibly deferred) value, with the lineage of device-side checks it has."""
    concrete = fused.materialize(a)
    if poisoned.active and concrete is not a:
        poisoned.carry(a, concrete)
    return concrete


class Strict:
    """DEFER_NEVER: each program runs now; JAX dispatch does not wait for the device."""

    deferred = False
    verifies_each_op = False  # read device-side checks after every op (launch blocking)

    def take(self, lazy):
        """A deferred value met on the way in (left over from fused mode): its concrete array."""
        return _concrete(lazy)

    def prepare(self, entry, example: list, args, kwargs) -> None:
        """Called once when an op entry is built: compile its program now (errors surface at the op)."""
        entry.compile([fused.materialize(a) for a in example], args, kwargs)

    def run_op(self, entry, arrays: list, args, kwargs):
        # inputs computed from a device-side check not read yet give the outputs that lineage; one
        # computed from a failed check raises here (poisoned.py)
        taken = poisoned.lineage(arrays, entry.func) if poisoned.active else None
        prog = entry.compiled
        if prog is None:
            arrays = [_concrete(a) for a in arrays]  # (see below)
            prog = entry.compile(arrays, args, kwargs)
        try:
            outs = prog(*arrays)
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
        taken = poisoned.lineage(held := args, what or key[0]) if poisoned.active else None
        args = tuple(fused.materialize(a) for a in args)
        prog = program_cache.lookup(key)
        if prog is None:
            prog = program_cache.compile_program(key, fn, args)
        _counters["executions"] += 1
        try:
            out = prog(*args)
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


class LaunchBlocking(Strict):
    """DEFER_NEVER_AND_LAUNCH_BLOCKING: wait after every op, so a failure names the op that caused it."""

    verifies_each_op = True

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
        return fused.record(entry.key, entry.trace, arrays, entry.avals, what=entry.what)

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
LAUNCH_BLOCKING = LaunchBlocking()
FUSED = Fused()
FORKED = Forked()
current: Strict = STRICT  # set by modes.set_mode


def _after_fork_in_child() -> None:
    global current
    if platform.runtime_started():  # the parent's XLA runtime did not survive the fork
        current = FORKED


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

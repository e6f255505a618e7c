"""How a program runs in the current execution mode, decided once by ``modes.set_mode``.

Every executor launches through ``current``: an op's program (eager), the small programs of view
reads/writes and casts (the tensor layer's ``launch``). Strict eager runs each program at once
(asynchronously); launch-blocking strict eager also waits for it; fused eager records it into the
pending graph (``fused.py``). Keeping the choice in one object keeps mode checks off the hot path.
"""
from __future__ import annotations

from ..errors import OpError, describe
from ..runtime import counters, platform, program_cache
from . import fused

_counters = counters.counters


class Strict:
    """DEFER_NEVER: each program runs now; JAX dispatch does not wait for the device."""

    deferred = False

    def take(self, lazy):
        """A deferred value met on the way in (left over from fused mode): its concrete array."""
        return fused.materialize(lazy)

    def prepare(self, entry, example: list, args, kwargs) -> None:
        """Called once when an op entry is built: compile its program now (errors surface at the op)."""
        entry.compile([fused.materialize(a) for a in example], args, kwargs)

    def run_op(self, entry, arrays: list, args, kwargs):
        prog = entry.compiled
        if prog is None:
            prog = entry.compile(arrays, args, kwargs)
        try:
            outs = prog(*arrays)
        except Exception as exc:
            raise OpError(f"tpu: {entry.func} failed to run ({describe(args, kwargs)}): {exc}") from exc
        _counters["executions"] += 1
        return outs

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        """``fn(*args)`` (one output) through the program cache; ``aval`` = its (shape, dtype)."""
        args = tuple(fused.materialize(a) for a in args)
        prog = program_cache.lookup(key)
        if prog is None:
            prog = program_cache.compile_program(key, fn, args)
        _counters["executions"] += 1
        return prog(*args)


class LaunchBlocking(Strict):
    """DEFER_NEVER_AND_LAUNCH_BLOCKING: wait after every op, so a failure names the op that caused it."""

    def run_op(self, entry, arrays: list, args, kwargs):
        outs = super().run_op(entry, arrays, args, kwargs)
        try:
            for o in outs:
                o.block_until_ready()
        except Exception as exc:
            raise OpError(f"tpu: {entry.func} failed on the device ({describe(args, kwargs)}): {exc}") from exc
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
            return super().run_op(entry, [fused.materialize(a) for a in arrays], args, kwargs)
        return fused.record(entry.key, entry.trace, arrays, entry.avals, what=str(entry.func))

    def launch(self, key, fn, args: tuple, aval=None, what: str = ""):
        return fused.record(key, fn, args, None if aval is None else (aval,), what=what)[0]


STRICT = Strict()
LAUNCH_BLOCKING = LaunchBlocking()
FUSED = Fused()
current: Strict = STRICT  # set by modes.set_mode


def launch(key, fn, args: tuple, aval=None, what: str = ""):
    """Run (or record) one small program in the current mode: view reads/writes, casts."""
    return current.launch(key, fn, args, aval, what)

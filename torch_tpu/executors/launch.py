"""Run one small program in the current execution mode: at once (strict eager) or recorded (fused).

Used for the programs that are not aten ops: strided view reads and writes, casts on copy.
"""
from __future__ import annotations

from .. import compile_cache
from .. import counters as stats
from . import fused, modes

_counters = stats.counters


def launch(key, fn, args: tuple, aval=None, what: str = ""):
    """``fn(*args)`` (one output) through the program cache; ``aval`` = (shape, dtype) of the output."""
    if modes._State.fused:
        return fused.record(key, fn, args, None if aval is None else (aval,), what=what)[0]
    args = tuple(fused.materialize(a) for a in args)
    prog = compile_cache.lookup(key)
    if prog is None:
        prog = compile_cache.compile_program(key, fn, args)
    _counters["executions"] += 1
    return prog(*args)

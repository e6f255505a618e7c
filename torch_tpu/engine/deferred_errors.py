"""Checks computed on the device, waiting to be read: raised at the next point that waits.

Each checked op leaves one small int32 array (0, or 1 + the index of its first failed condition). The
points that wait for the device anyway (reading a value to the host, ``synchronize``) read every
pending check in one transfer and raise ``DeviceAssertError`` for the first op whose check failed,
naming the op, its inputs and what was wrong. Launch-blocking mode checks after every op. Checks are
numbered in the order they are added; the values an op returned are poisoned when its check failed
(``poisoned.py``): they, and what was computed from them, raise at every later read.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import device_assert
from ..runtime import counters, platform
from . import fused, launchers, poisoned

_PENDING: list = []  # (0-d code array or LazyArray, messages, what, number); what: a description or a callable
_FOLDED: list = []   # (codes: (n,) int32 array, [(messages, what, number)...]): pending codes stacked, in order
_UNREPORTED: list = []  # (number, code, messages, what): failures a compaction found, raised at the next wait
_COUNTS = {"next": 0, "folded": 0}  # the number the next check gets; checks in _FOLDED
_LOCK = threading.Lock()
_FOLD_AT = 256
_COMPACT_AT = 1 << 16  # folded checks kept before one wait reads them and drops those that held
_COMPACTING = [False]
_READ_ONE_BY_ONE = 8  # up to this many pending codes are read as they are; more are stacked into one first
_READ_EARLY_OFF = [False]  # a check read early (read_ready) failed: the next wait reads it again and raises


_RECORDING: list = [None]  # a module call's recording (eager/module_replay.py): told of every check added


def record_adds(into) -> None:
    """Append (code, messages, what) of every check added from now on to ``into`` (None: stop)."""
    _RECORDING[0] = into


def add(code, messages, what, outputs=()) -> None:
    """``what``: the op's description, or a callable returning it (only called if the check failed).
    ``outputs``: the op's values that its check's failure poisons."""
    counters.counters["device_checks_run"] += 1
    if _RECORDING[0] is not None:
        _RECORDING[0].append((code, messages, what))
    with _LOCK:
        number = _COUNTS["next"]
        _COUNTS["next"] = number + 1
        _PENDING.append((code, messages, what, number))
        if poisoned.active:
            poisoned.forget(code)
        if outputs:
            poisoned.mark_check(outputs, number)
        if len(_PENDING) >= _FOLD_AT:
            _fold()
        compact = _COUNTS["folded"] >= _COMPACT_AT and not _COMPACTING[0]
        if compact:
            _COMPACTING[0] = True
            batches = list(_FOLDED)
    if compact:
        try:
            _compact(batches)
        finally:
            _COMPACTING[0] = False


def _compact(batches: list) -> None:
    """A loop that never waits kept the messages of every checked op it ran (growing without end): read
    the stacked codes (one wait, without the lock: the read may flush a fused graph) and keep only what
    can still be reported, the failures (raised at the next wait)."""
    values = platform.jax().device_get([fused.materialize(v) for v, _ in batches])
    with _LOCK:
        if not _FOLDED or _FOLDED[0] is not batches[0]:
            return  # a wait read and dropped them meanwhile
        del _FOLDED[:len(batches)]
        found = _failed(batches, values, [])
        _COUNTS["folded"] -= sum(len(records) for _, records in batches)
        _UNREPORTED.extend(found)
        poisoned.resolve(batches[-1][1][-1][2] + 1, _failures(found), everything=False)


def read_ready() -> None:
    """Read every pending check now if the device has computed them all (a transfer, no wait for work in
    flight), so that launches stop keeping lineage (``poisoned``) when they held. A failed one is left
    pending, with its values' lineage, for the next wait to raise (and polling stops until then): no op
    raises for it before that wait has reported it."""
    # (not blocking: this thread may hold the lock already, launching the stacking program of _fold)
    if not _LOCK.acquire(blocking=False):
        return
    try:
        if _READ_EARLY_OFF[0] or _COMPACTING[0] or not (_PENDING or _FOLDED) or _UNREPORTED:
            return
        arrays = []
        for code in [v for v, _ in _FOLDED] + [c for c, _, _, _ in _PENDING]:
            if type(code) is fused.LazyArray:  # (fused mode: computed once its graph ran)
                code = code.concrete
            if code is None or not code.is_ready():
                return
            arrays.append(code)
        values = platform.jax().device_get(arrays)
        counters.counters["device_check_reads"] += 1
        if any(np.any(np.asarray(v) != 0) for v in values):
            _READ_EARLY_OFF[0] = True
            return
        _PENDING.clear()
        _FOLDED.clear()
        _COUNTS["folded"] = 0
        poisoned.resolve(_COUNTS["next"], {}, everything=True)
    finally:
        _LOCK.release()


poisoned.read_early_with(read_ready)


def _stack(*codes):
    jnp = platform.jax().numpy
    return jnp.stack([jnp.asarray(c, jnp.int32).reshape(()) for c in codes])


def _fold() -> None:
    """Keep the list short without waiting: one small program (recorded into the pending graph in fused
    mode) stacks the pending codes into one array. The count is padded to a power of two with codes that
    never fail, so a handful of programs serve every count."""
    jnp = platform.jax().numpy
    items = list(_PENDING)
    _PENDING.clear()
    codes = [c for c, _, _, _ in items]
    codes += [jnp.zeros((), jnp.int32)] * ((1 << (len(codes) - 1).bit_length()) - len(codes))
    stacked = launchers.launch(("device-check-codes", len(codes)), _stack, tuple(codes),
                               ((len(codes),), jnp.int32), "device checks")
    _FOLDED.append((stacked, [(m, w, n) for _, m, w, n in items]))
    _COUNTS["folded"] += len(items)


def pending() -> int:
    return len(_PENDING) + _COUNTS["folded"] + len(_UNREPORTED)


def verify() -> None:
    """Read every pending check (one wait) and raise for the first failed one."""
    _READ_EARLY_OFF[0] = False  # (a check read early and failed is read again here, or was dropped)
    if not _PENDING and not _FOLDED and not _UNREPORTED:
        return
    with _LOCK:
        if len(_PENDING) > _READ_ONE_BY_ONE:
            _fold()  # one launch, then one small read, instead of a transfer per pending code
        items = list(_PENDING)
        _PENDING.clear()
        batches = list(_FOLDED)
        _FOLDED.clear()
        _COUNTS["folded"] = 0
        found = list(_UNREPORTED)
        _UNREPORTED.clear()
        upto = _COUNTS["next"]
    try:
        # (a code of a strict op that never ran, ``strict_line.stop``, has no value: its op raised already)
        batches = [b for b in batches if not _never_ran(b[0])]
        items = [item for item in items if not _never_ran(item[0])]
        arrays = [fused.materialize(v) for v, _ in batches] + [fused.materialize(c) for c, _, _, _ in items]
    except BaseException:  # computing a code failed (an op waiting in line): these checks stay pending
        with _LOCK:
            _PENDING[:0] = items
            _FOLDED[:0] = batches
            _COUNTS["folded"] += sum(len(records) for _, records in batches)
            _UNREPORTED[:0] = found
        raise
    if arrays:
        counters.counters["device_check_reads"] += 1
        values = platform.jax().device_get(arrays)
        found = _failed(batches, values, found)
        for (_, messages, what, number), value in zip(items, values[len(batches):]):
            code = int(np.asarray(value).reshape(-1)[0])
            if code:
                found.append((number, code, messages, what))
    found.sort(key=lambda f: f[0])
    failures = _failures(found)
    with _LOCK:
        everything = not _PENDING and not _FOLDED and _COUNTS["next"] == upto
        poisoned.resolve(upto, failures, everything)
    if found:
        number = found[0][0]
        raise device_assert(_message(failures[number]))


def _never_ran(code) -> bool:
    return type(code) is fused.LazyArray and code.error is not None and code.concrete is None


def check_read(a, where: str = "this tensor's value") -> None:
    """Before ``a`` (a device value) is read or handed out: raise ``DeviceAssertError`` if it was computed
    from a failed device-side check, first reading the pending checks when it was computed from one."""
    if poisoned.active and poisoned.readable(a, where):
        verify()
        poisoned.readable(a, where)


def readable_array(a, where: str = "this tensor's value"):
    """``a``'s concrete array, to be read or handed out (``check_read`` first)."""
    check_read(a, where)
    return fused.materialize(a)


def read_scalar(a):
    """The Python number a program returned (a point that waits): pending checks are read first."""
    verify()
    check_read(a, "a Python number an op returned")
    counters.counters["device_to_host_reads"] += 1
    return a.item()


def _failed(batches, values, found: list) -> list:
    """``found`` plus (number, code, messages, what) of each failed check in the stacked ``batches``."""
    for (_, records), codes in zip(batches, values):
        codes = np.asarray(codes).reshape(-1)
        for k in np.flatnonzero(codes[: len(records)]):
            messages, what, number = records[k]
            found.append((number, int(codes[k]), messages, what))
    return found


def _failures(found: list) -> dict:
    out = {}
    for number, code, messages, what in found:
        if callable(what):
            what = what()
        out[number] = poisoned.Failure(what, messages[code - 1].rstrip("."))
    return out


def _message(failure) -> str:
    return (f"tpu: {failure.what}: {failure.message}. This device-side check ran asynchronously and is reported "
            "at the first wait after the op (like CUDA's device-side assert); TORCH_TPU_LAUNCH_BLOCKING=1 "
            "reports it at the op itself. The values the op returned, and every value computed from them, "
            "raise when read from now on")

"""Checks computed on the device, waiting to be read: raised at the next point that waits.

Each checked op leaves one small int32 array (0, or 1 + the index of its first failed condition). The
points that wait for the device anyway (reading a value to the host, ``synchronize``) read every
pending check in one transfer and raise ``DeviceAssertError`` for the first op whose check failed,
naming the op, its inputs and what was wrong. Launch-blocking mode checks after every op.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import DeviceAssertError
from ..runtime import counters, platform
from . import fused, launchers

_PENDING: list = []  # (0-d code array or LazyArray, messages, what: a description or a callable making it)
_FOLDED: list = []   # [(3,) array: (1 + index of the first failed op or 0, its code, ops folded),
#                      [(messages, what)...] of the ops from index `base` on, base]
_LOCK = threading.Lock()
_FOLD_AT = 256
_COMPACT_AT = 1 << 16  # folded ops whose messages are kept before one wait reads their code and drops them
_COMPACTING = [False]
_READ_ONE_BY_ONE = 8  # up to this many pending codes are read as they are; more are folded into one first


def add(code, messages, what) -> None:
    """``what``: the op's description, or a callable returning it (only called if the check failed)."""
    counters.counters["device_checks_run"] += 1
    with _LOCK:
        _PENDING.append((code, messages, what))
        if len(_PENDING) >= _FOLD_AT:
            _fold()
        compact = bool(_FOLDED) and len(_FOLDED[1]) >= _COMPACT_AT and not _COMPACTING[0]
        if compact:
            _COMPACTING[0] = True
            folded, kept = _FOLDED[0], _FOLDED[1]
            n = len(kept)
    if compact:
        try:
            _compact(folded, kept, n)
        finally:
            _COMPACTING[0] = False


def _compact(folded, kept: list, n: int) -> None:
    """A loop that never waits kept the messages of every checked op it ran (growing without end): read
    the folded code of the first ``n`` (one wait, without the lock: the read may flush a fused graph)
    and keep only what can still be reported: nothing when they all held, the first failure otherwise
    (the folded code reports that one at every later wait)."""
    first, _, _ = (int(v) for v in np.asarray(platform.jax().device_get(fused.materialize(folded))))
    with _LOCK:
        if not _FOLDED or _FOLDED[1] is not kept:
            return  # a wait read and dropped them meanwhile
        base = _FOLDED[2]
        if first:
            kept[:] = [kept[first - 1 - base]]
            _FOLDED[2] = first - 1
        else:
            del kept[:n]
            _FOLDED[2] = base + n


def _first_failure(previous, *codes):
    """(1 + index of the first failed op, its code) over the ops folded before and these."""
    jnp = platform.jax().numpy
    stacked = jnp.stack(codes)
    failed = stacked != 0
    here = jnp.argmax(failed)
    offset = previous[2]
    mine = jnp.stack([jnp.where(failed.any(), offset + here + 1, 0), stacked[here].astype(jnp.int64)])
    merged = jnp.where(previous[0] != 0, previous[:2], mine)
    return jnp.concatenate([merged, (offset + len(codes))[None]])


def _fold() -> None:
    """Keep the list short without waiting: one small program (recorded into the pending graph in fused
    mode) reduces the pending codes to the first failure among everything folded so far. The count is
    padded to a power of two with codes that never fail, so a handful of programs serve every count."""
    jnp = platform.jax().numpy
    items = list(_PENDING)
    _PENDING.clear()
    if not _FOLDED:
        _FOLDED.extend([jnp.zeros((3,), jnp.int64), [], 0])
    codes = [c for c, _, _ in items]
    padding = (1 << (len(codes) - 1).bit_length()) - len(codes)
    codes += [jnp.zeros((), jnp.int32)] * padding
    _FOLDED[0] = launchers.launch(("device-checks", len(codes)), _first_failure,
                                  (_FOLDED[0], *codes), ((3,), jnp.int64), "device checks")
    _FOLDED[1].extend((m, w) for _, m, w in items)
    _FOLDED[1].extend([((), "padding")] * padding)


def pending() -> int:
    return len(_PENDING) + (len(_FOLDED[1]) if _FOLDED else 0)


def verify() -> None:
    """Read every pending check (one wait) and raise for the first failed one."""
    if not _PENDING and not _FOLDED:
        return
    with _LOCK:
        if len(_PENDING) > _READ_ONE_BY_ONE:
            _fold()  # one launch, then one small read, instead of a transfer per pending code
        items = list(_PENDING)
        _PENDING.clear()
        folded = list(_FOLDED)
        _FOLDED.clear()
    arrays = [fused.materialize(c) for c, _, _ in items]
    if folded:
        arrays.append(fused.materialize(folded[0]))
    counters.counters["device_check_reads"] += 1
    values = platform.jax().device_get(arrays)
    if folded:  # folded ops came first
        first, code, _ = (int(v) for v in np.asarray(values[-1]))
        if first:
            messages, what = folded[1][first - 1 - folded[2]]
            _raise_if_failed(code, messages, what)
    for (code, messages, what), value in zip(items, values):
        _raise_if_failed(int(np.asarray(value).reshape(-1)[0]), messages, what)


def _raise_if_failed(code: int, messages, what) -> None:
    if code:
        if callable(what):
            what = what()
        raise DeviceAssertError(
            f"tpu: {what}: {messages[code - 1].rstrip('.')}. This device-side check ran asynchronously and is reported at "
            "the first wait after the op (like CUDA's device-side assert); TORCH_TPU_LAUNCH_BLOCKING=1 reports "
            "it at the op itself.")

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
from ..runtime import platform
from . import fused

_PENDING: list = []  # (code array or LazyArray, messages, op description)
_LOCK = threading.Lock()
_FOLD_AT = 256


def add(code, messages, what: str) -> None:
    with _LOCK:
        _PENDING.append((code, messages, what))
        if len(_PENDING) >= _FOLD_AT:
            _fold()


def _fold() -> None:
    """Keep the list short without waiting: stack the pending codes into one array (a small program)."""
    items = list(_PENDING)
    _PENDING.clear()
    jnp = platform.jax().numpy
    codes = [fused.materialize(c) for c, _, _ in items]  # a fused graph runs first; nothing waits
    stacked = jnp.stack([jnp.reshape(c, (-1,))[:1] for c in codes])
    _PENDING.append((stacked, [(m, w) for _, m, w in items], None))


def pending() -> int:
    return len(_PENDING)


def verify() -> None:
    """Read every pending check (one wait) and raise for the first failed one."""
    if not _PENDING:
        return
    with _LOCK:
        items = list(_PENDING)
        _PENDING.clear()
    arrays = [fused.materialize(c) for c, _, _ in items]
    values = platform.jax().device_get(arrays)
    for (code, messages, what), value in zip(items, values):
        value = np.asarray(value).reshape(-1)
        if what is None:  # folded: one code per original op
            for (msgs, w), v in zip(messages, value):
                _raise_if_failed(int(v), msgs, w)
        else:
            _raise_if_failed(int(value[0]), messages, what)


def _raise_if_failed(code: int, messages, what: str) -> None:
    if code:
        raise DeviceAssertError(
            f"tpu: {what}: {messages[code - 1]}. This device-side check ran asynchronously and is reported at "
            "the first wait after the op (like CUDA's device-side assert); TORCH_TPU_LAUNCH_BLOCKING=1 reports "
            "it at the op itself.")

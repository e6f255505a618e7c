"""Device values whose failure (a program that ran out of memory) has been raised to the user once.

A failed value stays failed: reading it raises every time. But ``torch.tpu.synchronize()`` waits for every
live value, so without this record one failure would be raised again by every later synchronize for as
long as anything (a traceback, the last-launch marker) keeps the failed value alive. Weak: the record goes
with the value.
"""
from __future__ import annotations

import weakref

_REPORTED: dict = {}  # id -> weak reference (jax arrays are not hashable)


def reported(a) -> bool:
    ref = _REPORTED.get(id(a))
    return ref is not None and ref() is a


def remember(a) -> None:
    key = id(a)
    try:
        _REPORTED[key] = weakref.ref(a, lambda _, key=key: _REPORTED.pop(key, None))
    except TypeError:  # not weakly referenceable: not recorded (raised again later, never hidden)
        pass

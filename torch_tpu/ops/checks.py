"""Validity checks computed inside a program (indices in range, loss targets in range ...).

A lowering calls ``require(ok, message)`` with a traced boolean. While an executor traces it inside
``collecting()``, the condition becomes an extra program output; the executor hands it to
``engine.deferred_errors``, which raises ``DeviceAssertError`` at the next point that waits for the
device (``.cpu()``, ``.item()``, ``synchronize``), or at once in launch-blocking mode: CUDA's
device-side assert, with the op's name. Computing the flag costs little next to the gather it guards.
Outside ``collecting()`` a concrete condition (an eager data-dependent op) is checked on the spot.
"""
from __future__ import annotations

import threading

from .. import config
from ..errors import device_assert
from ..runtime import counters, platform

_STATE = threading.local()


class collecting:
    """Collect the ``require`` conditions of what is traced in this block: ``with collecting() as found``
    gives the list [(traced bool, message)], empty when TORCH_TPU_CHECKS=0. (A class, not a generator:
    every op of a fused graph is traced inside one.)"""

    __slots__ = ("previous",)

    def __enter__(self) -> list:
        self.previous = getattr(_STATE, "found", None)
        found: list = []
        _STATE.found = found if config.settings().checks else None
        return found

    def __exit__(self, *exc) -> None:
        _STATE.found = self.previous


def require(ok, message: str) -> None:
    """``ok`` (any shape; all must hold) or the op fails with ``message``."""
    jax = platform.jax()
    found = getattr(_STATE, "found", None)
    if found is not None:
        found.append((jax.numpy.all(ok), message))
        counters.counters["device_checks_traced"] += 1  # found by key only by callers that know them
    elif not isinstance(ok, jax.core.Tracer) and not bool(jax.numpy.all(ok)):
        raise device_assert(message)


def first_failure(found: list):
    """One int32 program output: 0 when every condition held, else 1 + the index of the first failed one."""
    jnp = platform.jax().numpy
    code = jnp.int32(0)
    for k in reversed(range(len(found))):
        code = jnp.where(found[k][0], code, jnp.int32(k + 1))
    return code


def index_in_range(index, size: int, negative_ok: bool):
    """Every index addresses one of ``size`` elements (``-size <= i < size`` where negatives count back)."""
    lower = -size if negative_ok else 0
    return (index >= lower) & (index < size)

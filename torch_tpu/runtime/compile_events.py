"""Counts XLA compilations (and their seconds) through JAX's monitoring events, whatever executor asked.

JAX's own persistent cache is off, so every event is a real compilation; loads from torch_tpu's disk
cache are counted apart (``cache_loads``, in program_cache)."""
from __future__ import annotations

from . import counters

_INSTALLED = False
_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",)


def _on_duration(event: str, duration: float, **_: object) -> None:
    if event in _COMPILE_EVENTS:
        counters.add("compiles", 1)
        counters.add("compile_seconds", float(duration))


def install(jax_mod) -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    mon = jax_mod.monitoring
    mon.register_event_duration_secs_listener(_on_duration)

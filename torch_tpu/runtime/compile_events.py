"""Counts XLA compilations (and their seconds) through JAX's monitoring events, whatever executor asked."""
from __future__ import annotations

from . import counters

_INSTALLED = False
_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",)
_CACHE_HIT_EVENTS = ("/jax/compilation_cache/cache_hits",)


def _on_duration(event: str, duration: float, **_: object) -> None:
    if event in _COMPILE_EVENTS:
        counters.add("compiles", 1)
        counters.add("compile_seconds", float(duration))


def _on_event(event: str, **_: object) -> None:
    if event in _CACHE_HIT_EVENTS:
        counters.add("persistent_cache_hits", 1)


def install(jax_mod) -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    mon = jax_mod.monitoring
    mon.register_event_duration_secs_listener(_on_duration)
    mon.register_event_listener(_on_event)

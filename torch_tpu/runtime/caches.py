"""Every in-memory cache of the package, registered by name, so one call empties them all.

Caches hold programs, op entries, view metadata and output shapes; each is keyed by structure, so
emptying them is always safe (the next call rebuilds, and the persistent disk cache still answers).
"""
from __future__ import annotations

_REGISTERED: dict[str, object] = {}


def register(name: str, cache):
    """Register a cache (anything with ``clear()``) under ``name``; returns it, for module-level use."""
    _REGISTERED[name] = cache
    return cache


def reset_all() -> None:
    """Empty every registered cache (``torch_tpu.reset_caches()``)."""
    for cache in _REGISTERED.values():
        cache.clear()


def sizes() -> dict[str, int]:
    return {name: len(cache) for name, cache in _REGISTERED.items()}

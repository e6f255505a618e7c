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


class Bounded(dict):
    """A dict that forgets its oldest quarter once it holds more than ``limit()`` items.

    Insertion order, not recency: lookups stay plain ``dict.get`` on the hot path. A workload that
    keeps more live program signatures than the bound rebuilds some (from the disk cache), never grows
    without end.
    """

    def __init__(self, limit):
        super().__init__()
        self._limit = limit  # a callable, read when the dict grows (settings may change)

    def __setitem__(self, key, value):
        n = len(self)
        super().__setitem__(key, value)
        if len(self) == n:  # replaced a value (fused graphs' bookkeeping, every flush): nothing to forget
            return
        limit = self._limit()
        if len(self) > limit:
            for old in list(self)[: max(len(self) - (limit * 3) // 4, 1)]:
                self.pop(old, None)  # another thread may have evicted it first


def sizes() -> dict[str, int]:
    return {name: len(cache) for name, cache in _REGISTERED.items()}

"""Per-process counters shared by every executor (see torch_tpu.stats())."""
from __future__ import annotations

import threading

_FIELDS = {
    "compiles": 0,            # XLA compilations performed (persistent-cache loads included)
    "compile_seconds": 0.0,   # seconds spent in those compilations
    "persistent_cache_hits": 0,
    "cache_hits": 0,          # op/graph program cache hits (in-memory)
    "cache_misses": 0,
    "executions": 0,          # compiled programs launched
    "flushes": 0,             # fused-mode graph materialisations
    "fused_graph_replays": 0,  # fused graphs that failed whole and ran op by op instead
    "donated_bytes": 0,       # fused-mode input buffers handed to XLA for reuse by outputs
    "graph_compiles": 0,      # torch.compile(backend="tpu") graphs compiled to a new XLA program
    "cpu_fallbacks": 0,       # ops run on the CPU under TORCH_TPU_CPU_FALLBACK=1
    "host_to_device_bytes": 0,
    "device_to_host_bytes": 0,
    "dist_xla_collectives": 0,  # tpu_dist collectives run (or recorded) as XLA programs over a mesh
    "dist_host_fallbacks": 0,   # tpu_dist collectives on tpu tensors staged through the host (gloo)
    "dist_host_bytes": 0,       # bytes of tpu tensors those fallbacks copied to and from the host
}
_counters = dict(_FIELDS)
_lock = threading.Lock()


def add(name: str, value) -> None:
    with _lock:
        _counters[name] = _counters.get(name, 0) + value


def snapshot() -> dict:
    with _lock:
        return dict(_counters)


def reset() -> None:
    with _lock:
        _counters.clear()
        _counters.update(_FIELDS)


# Hot-path counters: plain dict increments without the lock (the GIL makes them safe enough for counts).
counters = _counters

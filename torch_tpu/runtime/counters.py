"""Per-process counters shared by every executor (see torch_tpu.stats())."""
from __future__ import annotations

import threading

_FIELDS = {
    "compiles": 0,            # XLA compilations performed (real compilations only)
    "compile_seconds": 0.0,   # seconds spent in those compilations
    "cache_loads": 0,         # programs loaded from the persistent disk cache instead of compiled
    "cache_load_seconds": 0.0,
    "cache_rejects": 0,       # disk cache entries ignored (wrong key, bad checksum, unloadable): rebuilt
    "cache_stores": 0,        # entries written to the disk cache
    "cache_evictions": 0,     # entries deleted to keep the disk cache under TORCH_TPU_CACHE_MAX_MB
    "cache_prefetched": 0,    # programs, op descriptions, graph sets read ahead of need on a background thread
    "op_loads": 0,            # op descriptions loaded from disk (no meta kernel, no tracing)
    "graph_set_loads": 0,     # fused graphs' output/donation sets the last process kept, read from disk
    "cache_hits": 0,          # op/graph program cache hits (in-memory)
    "cache_misses": 0,
    "executions": 0,          # compiled programs launched
    "queued_ops": 0,          # strict ops queued behind a program compiling in the background (strict_line)
    "flushes": 0,             # fused-mode graph materialisations
    "fused_graph_replays": 0,  # fused graphs that failed whole and ran op by op instead
    "donated_bytes": 0,       # fused-mode input buffers handed to XLA for reuse by outputs
    "device_checks_traced": 0,  # device-side check conditions traced into programs (ops/checks.require)
    "device_checks_run": 0,     # program launches that returned a device-side check code
    "device_check_reads": 0,    # host reads of pending check codes (at points that wait anyway)
    "graph_compiles": 0,      # torch.compile(backend="tpu") graphs compiled to a new XLA program
    "module_captures": 0,     # compiled modules' calls traced and kept on disk for later processes (warm_start)
    "module_loads": 0,        # compiled modules' calls read from disk instead of traced
    "tpu_lowerings": 0,       # programs also lowered for a TPU under TORCH_TPU_CHECK_LOWERING=tpu
    "cpu_fallbacks": 0,       # ops run on the CPU under TORCH_TPU_CPU_FALLBACK=1
    "host_to_device_bytes": 0,
    "device_to_host_bytes": 0,
    "device_to_host_reads": 0,  # values read by the host (.cpu(), .item(), a Python number an op returned)
    "random_draws": 0,        # keys drawn by random ops (the device's RNG or a torch.Generator("tpu"))
    "module_recordings": 0,   # module calls recorded as one program to replay (eager/module_replay.py)
    "module_replays": 0,      # module calls that ran their recorded program instead of their Python
    "module_replay_refusals": 0,  # recordings refused: the call did something a replay would not repeat
    "host_copy_bytes_reused": 0,  # reads of unchanged uploads answered by their host tensor (tensor/host_copies.py)
    "dist_xla_collectives": 0,  # tpu_dist collectives run (or recorded) as XLA programs over a mesh
    "dist_host_fallbacks": 0,   # tpu_dist collectives on tpu tensors staged through the host (gloo)
    "dist_host_bytes": 0,       # bytes of tpu tensors those fallbacks copied to and from the host
}
_counters = dict(_FIELDS)
_lock = threading.Lock()
# ops run on the CPU under TORCH_TPU_CPU_FALLBACK=1, by op name ("aten::linalg_lstsq")
_fallback_ops: dict = {}


def count_fallback(op_name: str) -> None:
    with _lock:
        _counters["cpu_fallbacks"] += 1
        _fallback_ops[op_name] = _fallback_ops.get(op_name, 0) + 1


def add(name: str, value) -> None:
    with _lock:
        _counters[name] = _counters.get(name, 0) + value


def snapshot() -> dict:
    with _lock:
        return {**_counters, "cpu_fallback_ops": dict(_fallback_ops)}


def reset() -> None:
    with _lock:
        _counters.clear()
        _counters.update(_FIELDS)
        _fallback_ops.clear()


# Hot-path counters: plain dict increments without the lock (the GIL makes them safe enough for counts).
counters = _counters

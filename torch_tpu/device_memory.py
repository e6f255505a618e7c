"""``torch.tpu.memory``: the memory functions of ``torch.tpu``, as ``torch.cuda.memory`` holds CUDA's.

The statistics (``memory_stats``, ``memory_allocated`` ...) are ``torch.tpu``'s own (``device_module``,
over ``runtime/memory.py``); this module adds what CUDA's allocator has and XLA's has in another form:

- ``memory_snapshot()`` / ``_snapshot()``: CUDA's snapshot format, one segment per live device buffer
  (XLA allocates each buffer on its own: no cached segments split into blocks, no free blocks;
  ``runtime.memory.segments``);
- ``set_per_process_memory_fraction(f)`` / ``get_per_process_memory_fraction()``: live tensor storages may
  hold at most ``f`` of the device's memory; the op whose result would pass it raises
  ``torch.OutOfMemoryError``, as CUDA's allocator does (temporaries inside a program are XLA's and not counted).
"""
from __future__ import annotations

from . import device_module as _device
from .device_module import (  # noqa: F401  (torch.tpu.memory.memory_allocated ... as torch.cuda.memory's)
    empty_cache, max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated, memory_reserved,
    memory_stats, memory_summary, reset_accumulated_memory_stats, reset_max_memory_allocated,
    reset_max_memory_cached, reset_peak_memory_stats)
from .runtime import memory as _memory

__all__ = ["empty_cache", "get_per_process_memory_fraction", "max_memory_allocated", "max_memory_reserved",
           "mem_get_info", "memory_allocated", "memory_reserved", "memory_snapshot", "memory_stats",
           "memory_summary", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "reset_peak_memory_stats", "set_per_process_memory_fraction"]


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """As ``torch.cuda.set_per_process_memory_fraction``: from now on live tensors of this process may hold
    at most ``fraction`` (0 to 1) of the device's memory (``get_device_properties().total_memory``); an op
    whose result would pass it raises ``torch.OutOfMemoryError`` naming the limit. 1.0 lifts the limit."""
    _device._existing(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _memory.set_limit(fraction, _device.get_device_properties(device).total_memory)


def get_per_process_memory_fraction(device=None) -> float:
    _device._existing(device)
    return _memory.limit_fraction()


def memory_snapshot(mempool_id=None, include_traces=True) -> list:
    """As ``torch.cuda.memory_snapshot()``: the allocator's segments (``_snapshot()["segments"]``), here one
    per live device buffer of tpu:0. ``mempool_id`` is refused (XLA has no memory pools to name)."""
    if mempool_id is not None:
        raise ValueError("torch.tpu.memory_snapshot: the tpu device has no memory pools (XLA allocates every "
                         "buffer on its own); call it without mempool_id")
    return _memory.segments(_device._existing(None))


def _snapshot(device=None, augment_with_fx_traces=False) -> dict:
    """As ``torch.cuda.memory._snapshot()``: ``segments`` (see ``memory_snapshot``) and ``device_traces``
    (empty: no allocation history is recorded)."""
    return _memory.snapshot(_device._existing(device))

"""Device memory statistics under CUDA's names (``torch.tpu.memory_stats()``, ``memory_summary()``).

Two sources: PJRT's own device statistics where the platform reports them (GPU and TPU: bytes in
use, peak, reserved, limit, number of allocations), and torch_tpu's count of live tensor storages
(every platform; the only source on the CPU platform, which reports none). PJRT's peak cannot be
reset; after ``reset_peak()`` the peak reported is PJRT's once it climbs above the peak seen at the
reset (exact), else the highest of the bytes in use at the reset and the counted storages' peak since
(a lower bound: temporaries inside programs are not counted).
"""
from __future__ import annotations

import collections


class _Counts:
    """The counts (one instance: setting a class's attribute costs several times an instance's, and
    every op output and every freed storage sets some). A storage counts itself where it is made and
    freed (``tensor.tensor.TpuStorage``: inlined there, the hot path of every op output)."""

    __slots__ = ("in_use", "peak", "live", "live_peak", "allocs", "frees", "allocated_bytes", "freed_bytes",
                 "limit")

    def __init__(self):
        self.in_use = 0          # bytes of live storages
        self.peak = 0
        self.live = 0            # number of live storages
        self.live_peak = 0
        self.allocs = 0          # cumulative
        self.frees = 0
        self.allocated_bytes = 0
        self.freed_bytes = 0
        self.limit = NO_LIMIT    # bytes of live storages allowed (set_per_process_memory_fraction)


NO_LIMIT = 1 << 62
COUNTS = _Counts()


class _Limit:
    fraction = 1.0   # as torch.cuda.get_per_process_memory_fraction() reports it
    total = 0        # the device memory the fraction was taken of


def set_limit(fraction: float, total: int) -> None:
    """Live tensor storages may hold at most ``fraction`` of ``total`` bytes from now on; a storage that would
    pass it raises ``torch.OutOfMemoryError`` where it is made (``over_limit``)."""
    _Limit.fraction, _Limit.total = fraction, total
    COUNTS.limit = NO_LIMIT if fraction >= 1.0 else int(fraction * total)


def limit_fraction() -> float:
    return _Limit.fraction


def over_limit(nbytes: int, held: int) -> None:
    """Raised where ``nbytes`` more would take the live storages (``held`` bytes without them) past the
    limit: the error CUDA's allocator raises past the fraction."""
    c = COUNTS
    raise _oom_type()(
        f"tpu out of memory: tried to allocate {_fmt(nbytes).strip()} with {_fmt(held).strip()} held by tensors; "
        f"this process may hold {_fmt(c.limit).strip()} (torch.tpu.set_per_process_memory_fraction("
        f"{_Limit.fraction}) of {_fmt(_Limit.total).strip()}). Free tensors, or raise the fraction")


def _oom_type():
    import torch

    return torch.OutOfMemoryError


class _Reset:
    pjrt_peak = None    # PJRT's peak_bytes_in_use when reset_peak() ran (None: never reset)
    pjrt_in_use = 0


def resized(old: int, new: int) -> None:
    """A live storage's bytes went from ``old`` to ``new`` (freed and re-allocated in place, as FSDP does)."""
    c = COUNTS
    if new > old and c.in_use + new - old > c.limit:
        over_limit(new - old, c.in_use)  # (nothing counted yet: the resize does not happen)
    c.in_use += new - old
    if new > old:
        c.allocated_bytes += new - old
        c.peak = max(c.peak, c.in_use)
    else:
        c.freed_bytes += old - new


def in_use() -> int:
    return COUNTS.in_use


def peak() -> int:
    return COUNTS.peak


def pjrt_stats(device) -> dict:
    """PJRT's statistics of a device ({} where the platform reports none, as the CPU does)."""
    try:
        stats = device.memory_stats()
    except Exception:
        return {}
    return dict(stats or {})


def reset_peak(pjrt: dict) -> None:
    c = COUNTS
    c.peak = c.in_use
    c.live_peak = c.live
    if "peak_bytes_in_use" in pjrt:
        _Reset.pjrt_peak = int(pjrt["peak_bytes_in_use"])
        _Reset.pjrt_in_use = int(pjrt.get("bytes_in_use", 0))


def reset_accumulated() -> None:
    c = COUNTS
    c.allocs = c.frees = c.allocated_bytes = c.freed_bytes = 0


def _peak_allocated(pjrt: dict) -> int:
    if "peak_bytes_in_use" not in pjrt:
        return COUNTS.peak
    peak = int(pjrt["peak_bytes_in_use"])
    if _Reset.pjrt_peak is None or peak > _Reset.pjrt_peak:
        return peak
    return max(_Reset.pjrt_in_use, int(pjrt.get("bytes_in_use", 0)), COUNTS.peak)


def stats(pjrt: dict) -> dict:
    """``torch.cuda.memory_stats()``'s keys (the "all" pool) from PJRT's statistics and the counts,
    plus PJRT's own statistics under ``pjrt.<name>``."""
    c = COUNTS
    current = int(pjrt.get("bytes_in_use", c.in_use))
    peak = max(_peak_allocated(pjrt), current)
    reserved = int(pjrt.get("bytes_reserved", pjrt.get("pool_bytes", current)))
    reserved_peak = int(pjrt.get("peak_bytes_reserved", pjrt.get("peak_pool_bytes", max(reserved, peak))))
    out = {}

    def put(name: str, cur: int, pk: int, alloc: int, free: int) -> None:
        out[f"{name}.all.current"] = cur
        out[f"{name}.all.peak"] = max(pk, cur)
        out[f"{name}.all.allocated"] = alloc
        out[f"{name}.all.freed"] = free

    put("allocated_bytes", current, peak, c.allocated_bytes, c.freed_bytes)
    put("active_bytes", current, peak, c.allocated_bytes, c.freed_bytes)
    put("requested_bytes", c.in_use, c.peak, c.allocated_bytes, c.freed_bytes)
    put("reserved_bytes", reserved, reserved_peak, max(reserved_peak, c.allocated_bytes), 0)
    put("allocation", c.live, c.live_peak, int(pjrt.get("num_allocs", c.allocs)), c.frees)
    put("active", c.live, c.live_peak, int(pjrt.get("num_allocs", c.allocs)), c.frees)
    put("segment", 0, 0, 0, 0)  # XLA's allocator has no CUDA-style segments
    put("inactive_split", 0, 0, 0, 0)
    put("inactive_split_bytes", 0, 0, 0, 0)
    out.update({
        "num_alloc_retries": 0, "num_ooms": 0, "num_sync_all_streams": 0,
        "num_device_alloc": int(pjrt.get("num_allocs", c.allocs)), "num_device_free": c.frees,
        "max_split_size": -1,
        "oversize_allocations.current": 0, "oversize_allocations.peak": 0,
        "oversize_allocations.allocated": 0, "oversize_allocations.freed": 0,
        "oversize_segments.current": 0, "oversize_segments.peak": 0,
        "oversize_segments.allocated": 0, "oversize_segments.freed": 0,
    })
    for key, value in pjrt.items():
        if isinstance(value, (int, float)):
            out[f"pjrt.{key}"] = int(value)
    return collections.OrderedDict(sorted(out.items()))  # as torch.cuda.memory_stats() orders its keys


def segments(index: int) -> list:
    """``torch.cuda.memory_snapshot()``'s segments for tpu:``index``: one segment holding one active block
    per live buffer on the device (XLA allocates every buffer on its own: nothing is cached, split or free),
    every array JAX holds there: tensors' storages and torch_tpu's own (device scalars, RNG keys) alike."""
    from . import platform

    jax = platform.jax()
    device = platform.jax_device(index)
    out = []
    for array in jax.live_arrays():
        try:
            if array.is_deleted():
                continue
            for shard in array.addressable_shards:
                if shard.device != device:
                    continue
                size = int(shard.data.nbytes)
                address = int(shard.data.unsafe_buffer_pointer())
                block = {"address": address, "size": size, "requested_size": size, "state": "active_allocated",
                         "frames": []}
                out.append({"device": index, "address": address, "total_size": size, "allocated_size": size,
                            "active_size": size, "requested_size": size, "stream": 0,
                            "segment_type": "large" if size >= 1 << 20 else "small", "segment_pool_id": (0, 0),
                            "is_expandable": False, "frames": [], "blocks": [block]})
        except Exception:  # noqa: BLE001 - a buffer donated or freed by another thread meanwhile
            continue
    out.sort(key=lambda seg: seg["address"])
    return out


def snapshot(index: int) -> dict:
    """``torch.cuda.memory._snapshot()``'s form: the segments, and no allocation history (none is recorded)."""
    return {"segments": segments(index), "device_traces": [[]], "allocator_settings": {}}


def _fmt(n: int) -> str:
    for unit in ("B ", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:7.0f} {unit}" if unit == "B " else f"{n:7.2f} {unit}"
        n /= 1024
    return str(n)


def summary(stats: dict, device_name: str, limit: int, source: str) -> str:
    """A human-readable table like ``torch.cuda.memory_summary()``."""
    def row(cells):
        return "| " + f"{cells[0]:<21}" + "".join(f" | {c:>11}" for c in cells[1:]) + " |"

    header = row(["Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"])
    width = len(header)

    def text(t):
        return f"| {t:<{width - 4}} |"

    line, thin = "|" + "=" * (width - 2) + "|", "|" + "-" * (width - 2) + "|"
    rows = [line, text("torch_tpu memory summary, " + device_name), text("source: " + source), thin, header, thin]
    for title, key, fmt in (("Allocated memory", "allocated_bytes", _fmt), ("Requested memory", "requested_bytes", _fmt),
                            ("Reserved memory", "reserved_bytes", _fmt), ("Tensor storages", "allocation", str)):
        rows.append(row([title] + [fmt(stats[f"{key}.all.{k}"]) for k in ("current", "peak", "allocated", "freed")]))
    rows += [thin, text("device memory limit: " + _fmt(limit).strip()),
             text(f"OOMs: {stats['num_ooms']}   alloc retries: {stats['num_alloc_retries']}"), line]
    return "\n".join(rows)


def device_bytes() -> tuple[int, int | None, bool]:
    """(bytes tensors on the device hold, the device's bytes or None where PJRT does not say, whether the
    first is torch_tpu's count of live storages): PJRT's ``bytes_in_use`` and ``bytes_limit`` of this
    process's device (TPU, GPU), else the counted storages and None (the CPU platform). For out-of-memory
    errors (``errors.out_of_memory_message``)."""
    import sys

    pjrt = {}
    if "jax" in sys.modules:
        from . import platform

        try:
            pjrt = pjrt_stats(platform.jax_device(0))
        except Exception:  # noqa: BLE001 - a report, never an error of its own
            pjrt = {}
    held = int(pjrt.get("bytes_in_use", COUNTS.in_use))
    limit = pjrt.get("bytes_limit")
    return held, int(limit) if limit else None, "bytes_in_use" not in pjrt


def _install_report() -> None:
    from .. import errors

    errors.set_memory_report(device_bytes)


_install_report()

"""Device memory as device-agnostic code reaches it: ``torch.accelerator`` and ``torch.accelerator.memory``
(whose functions raised PyTorch's "Allocator for tpu is not a DeviceAllocator" INTERNAL ASSERT), accelerate's
and diffusers' memory helpers, ``torch.tpu.memory``, the snapshot, the per-process fraction and the device
capability."""
import gc

import pytest
import torch

DEV = "tpu"
ACCELERATOR_MEMORY = ["empty_cache", "get_memory_info", "max_memory_allocated", "max_memory_reserved",
                      "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
                      "reset_peak_memory_stats"]


def _device_agnostic_report(module) -> dict:
    """What a training script that only knows ``torch.accelerator`` does around a step."""
    module.reset_peak_memory_stats()
    before = module.memory_allocated()
    x = torch.ones(1024, 256, device=torch.accelerator.current_accelerator())
    during = module.memory_allocated()
    peak = module.max_memory_allocated()
    stats = module.memory_stats()
    free, total = module.get_memory_info()
    del x
    module.empty_cache()
    return dict(before=before, during=during, peak=peak, after=module.memory_allocated(), stats=stats, free=free,
                total=total, reserved=module.memory_reserved())


@pytest.mark.parametrize("module", ["torch.accelerator", "torch.accelerator.memory"])
def test_device_agnostic_memory_code_runs_on_the_tpu(module):
    mod = torch.accelerator if module == "torch.accelerator" else torch.accelerator.memory
    assert sorted(set(ACCELERATOR_MEMORY) & set(torch.accelerator.memory.__all__)) == ACCELERATOR_MEMORY
    r = _device_agnostic_report(mod)
    nbytes = 1024 * 256 * 4
    assert r["during"] >= r["before"] + nbytes and r["peak"] >= r["during"]
    assert r["after"] <= r["during"] - nbytes
    assert list(r["stats"]) == sorted(r["stats"])  # an ordered dict, as torch.accelerator.memory_stats()
    assert r["stats"]["allocated_bytes.all.current"] >= 0 and 0 <= r["free"] <= r["total"]
    assert r["reserved"] >= r["after"]
    # the same numbers as torch.tpu's, with the device given in every spelling torch.accelerator takes
    for device in (None, 0, "tpu", "tpu:0", torch.device("tpu", 0)):
        assert mod.memory_allocated(device) == torch.tpu.memory_allocated()
    mod.reset_accumulated_memory_stats()
    assert mod.memory_stats()["allocated_bytes.all.allocated"] == 0
    with pytest.raises(ValueError, match="cuda"):
        mod.memory_allocated("cuda")


def test_accelerate_memory_helpers():
    """accelerate reaches the tpu through torch.accelerator (``get_torch_accelerator_backend``)."""
    pytest.importorskip("accelerate")
    from accelerate.utils import get_max_memory, release_memory
    from accelerate.utils.imports import get_torch_accelerator_backend
    from accelerate.utils.memory import clear_device_cache

    device_type, module = get_torch_accelerator_backend()
    assert device_type == "tpu" and module is torch.accelerator
    a = torch.ones(512, 512, device=DEV)
    held = torch.accelerator.memory_allocated()
    a, = release_memory(a)  # sets it to None, collects, empties the device cache
    assert a is None and torch.accelerator.memory_allocated() <= held - 512 * 512 * 4
    clear_device_cache(garbage_collection=True)
    budget = get_max_memory()
    free, total = torch.accelerator.get_memory_info()
    assert set(budget) == {0, "cpu"} and 0 < budget[0] <= total


def test_diffusers_memory_helpers():
    pytest.importorskip("diffusers")
    from diffusers.utils.torch_utils import (backend_empty_cache, backend_max_memory_allocated,
                                             backend_reset_peak_memory_stats)

    backend_empty_cache(DEV)
    backend_reset_peak_memory_stats(DEV)
    x = torch.ones(256, 256, device=DEV)
    assert backend_max_memory_allocated(DEV) >= torch.tpu.memory_allocated() >= x.numel() * 4


def test_torch_tpu_memory_module_as_torch_cuda_memory():
    import torch.tpu.memory as memory

    assert torch.tpu.memory is memory
    for name in ("memory_allocated", "max_memory_allocated", "memory_stats", "reset_peak_memory_stats",
                 "empty_cache", "memory_reserved", "memory_snapshot", "set_per_process_memory_fraction",
                 "get_per_process_memory_fraction", "mem_get_info", "memory_summary"):
        assert callable(getattr(memory, name)) and callable(getattr(torch.tpu, name)), name
    assert memory.memory_allocated() == torch.tpu.memory_allocated()


def test_memory_snapshot_lists_live_buffers():
    """CUDA's snapshot format: a new tensor's buffer appears as an active block of its size and goes with
    the tensor."""
    x = torch.arange(300_000, dtype=torch.float32, device=DEV)
    torch.tpu.synchronize()
    segments = torch.tpu.memory_snapshot()
    sizes = [s["total_size"] for s in segments]
    assert 300_000 * 4 in sizes
    seg = segments[sizes.index(300_000 * 4)]
    assert seg["segment_type"] == "large" and seg["blocks"][0]["state"] == "active_allocated"
    assert seg["blocks"][0]["size"] == seg["allocated_size"] == 300_000 * 4
    snap = torch.accelerator.memory._snapshot()  # the device-agnostic spelling
    assert set(snap) >= {"segments", "device_traces"}
    assert sum(s["total_size"] for s in snap["segments"]) >= 300_000 * 4
    before = sum(s["total_size"] for s in torch.tpu.memory_snapshot())
    del x
    gc.collect()
    (torch.ones(1, device=DEV) + 1).cpu()  # (synchronize keeps the last program's output to wait on: 4 bytes)
    assert sum(s["total_size"] for s in torch.tpu.memory_snapshot()) <= before - 300_000 * 4 + 64
    with pytest.raises(ValueError, match="no memory pools"):
        torch.tpu.memory_snapshot(mempool_id=(1, 2))


def test_per_process_memory_fraction_raises_out_of_memory_past_it():
    total = torch.tpu.get_device_properties().total_memory
    with pytest.raises(TypeError, match="must be `float`"):
        torch.tpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Allowed range"):
        torch.tpu.set_per_process_memory_fraction(1.5)
    from torch_tpu.runtime import memory  # the limit counts tensor storages (every platform; the CPU's
    #                                         memory_allocated, while GPUs and TPUs report PJRT's bytes)

    held = memory.in_use()
    # room for 12 MiB more: `keep` and `more` (8 MiB) fit with slack, 16 MiB does not (a limit of exactly held +
    # 8 MiB, the fraction times the total again, could come out a byte under what `keep` and `more` need: CI saw
    # `more` refused)
    fraction = (held + (12 << 20)) / total
    keep = torch.ones(1 << 20, device=DEV)  # 4 MiB: under the limit
    try:
        torch.tpu.set_per_process_memory_fraction(fraction)
        assert torch.tpu.get_per_process_memory_fraction() == fraction
        counts = memory.COUNTS
        live, allocs, frees = counts.live, counts.allocs, counts.frees
        with pytest.raises(torch.OutOfMemoryError, match=r"set_per_process_memory_fraction\(.*\) of") as refused:
            torch.ones(4 << 20, device=DEV)  # 16 MiB more: past it
        assert memory.in_use() < held + (12 << 20)  # the refused result is not counted, while its error lives
        del refused
        gc.collect()
        # and once its error is gone, it is one allocation and one free (it was freed twice: live fell by one)
        assert (counts.live, counts.allocs - allocs, counts.frees - frees) == (live, 1, 1)
        more = keep + 1  # what fits still runs, and is right
        assert torch.equal(more.cpu(), torch.full((1 << 20,), 2.0))
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    big = torch.ones(4 << 20, device=DEV)  # no limit any more
    assert big.shape == (4 << 20,)


def test_device_capability_says_what_the_device_is(monkeypatch):
    from torch_tpu import device_module
    from torch_tpu.runtime import platform

    cap = torch.tpu.get_device_capability()
    assert isinstance(cap, tuple) and len(cap) == 2
    if platform.platform() == "cpu":
        assert cap == (0, 0)

    class Device:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    for kind, dev, want in (("tpu", Device(device_kind="TPU v5 lite"), (5, 0)),
                            ("tpu", Device(device_kind="TPU v6 lite"), (6, 0)),
                            ("tpu", Device(device_kind="TPU v4"), (4, 0)),
                            ("cuda", Device(device_kind="NVIDIA H100", compute_capability="9.0"), (9, 0)),
                            ("cuda", Device(device_kind="NVIDIA A100", compute_capability="8.0"), (8, 0))):
        monkeypatch.setattr(platform, "platform", lambda kind=kind: kind)
        monkeypatch.setattr(platform, "jax_device", lambda index=None, dev=dev: dev)
        assert device_module.get_device_capability() == want, dev.device_kind
    monkeypatch.undo()
    info = torch.accelerator.get_device_capability()  # torch raised "Backend doesn't support getting ..."
    assert info["capability"] == cap and info["device_kind"] == torch.tpu.get_device_name()
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= info["supported_dtypes"]
    for dtype in info["supported_dtypes"]:  # each dtype it names, a tpu tensor holds
        assert torch.zeros(2, dtype=dtype, device=DEV).cpu().dtype == dtype

"""Seeing what runs and what it holds: memory statistics under CUDA's names, memory_summary, the device
trace (programs named after their aten op / module / graph) and the compile log."""

import gc
import gzip
import json
import logging
import os

import pytest
import torch

import torch_tpu
from torch_tpu.runtime import compile_log, memory

CUDA_KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
             "allocated_bytes.all.freed", "reserved_bytes.all.current", "reserved_bytes.all.peak",
             "active_bytes.all.current", "requested_bytes.all.current", "allocation.all.current",
             "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")


def test_memory_stats_use_cuda_names_and_count_tensors():
    gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_stats()
    for key in CUDA_KEYS:
        assert isinstance(before[key], int), key
    a = torch.empty(1000, 250, device="tpu")          # 1,000,000 bytes
    b = torch.zeros(300, dtype=torch.float64, device="tpu")
    after = torch.tpu.memory_stats()
    expected = a.numel() * a.element_size() + b.numel() * b.element_size()
    grew = after["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
    counted = "pjrt.bytes_in_use" not in after
    assert grew == expected if counted else grew >= 0
    assert after["requested_bytes.all.current"] - before["requested_bytes.all.current"] == expected
    assert after["allocation.all.current"] - before["allocation.all.current"] == 2
    assert after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"] == expected
    assert torch.tpu.memory_allocated() == after["allocated_bytes.all.current"]
    assert torch.tpu.memory_reserved() == after["reserved_bytes.all.current"]
    del a, b
    gc.collect()
    freed = torch.tpu.memory_stats()
    assert freed["allocated_bytes.all.freed"] - after["allocated_bytes.all.freed"] == expected
    assert freed["allocation.all.current"] == before["allocation.all.current"]


def test_reset_peak_memory_stats():
    gc.collect()
    big = torch.empty(2_000_000, device="tpu")
    peak_with_big = torch.tpu.max_memory_allocated()
    assert peak_with_big >= torch.tpu.memory_allocated()
    del big
    gc.collect()
    torch.tpu.reset_peak_memory_stats()
    now = torch.tpu.memory_allocated()
    if "pjrt.bytes_in_use" not in torch.tpu.memory_stats():
        assert torch.tpu.max_memory_allocated() == now < peak_with_big
    small = torch.empty(1000, device="tpu")
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() >= now
    del small
    torch.tpu.reset_accumulated_memory_stats()
    assert torch.tpu.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_pjrt_statistics_map_to_cuda_names(monkeypatch):
    """PJRT's own keys (as GPU/TPU report them) become CUDA's; its peak survives a reset until beaten."""
    # the process's own counts take part too (tensors left alive by earlier tests): start them at zero
    monkeypatch.setattr(memory.COUNTS, "in_use", 0)
    monkeypatch.setattr(memory.COUNTS, "peak", 0)
    pjrt = {"bytes_in_use": 5000, "peak_bytes_in_use": 9000, "bytes_reserved": 12000,
            "peak_bytes_reserved": 15000, "num_allocs": 42, "bytes_limit": 1 << 30}
    stats = memory.stats(pjrt)
    assert stats["allocated_bytes.all.current"] == 5000 and stats["allocated_bytes.all.peak"] == 9000
    assert stats["reserved_bytes.all.current"] == 12000 and stats["reserved_bytes.all.peak"] == 15000
    assert stats["num_device_alloc"] == 42 and stats["pjrt.bytes_limit"] == 1 << 30
    saved = (memory._Reset.pjrt_peak, memory._Reset.pjrt_in_use)
    try:
        memory.reset_peak(pjrt)
        assert memory.stats(pjrt)["allocated_bytes.all.peak"] < 9000  # reset: PJRT's old peak hidden
        higher = dict(pjrt, bytes_in_use=6000, peak_bytes_in_use=11000)
        assert memory.stats(higher)["allocated_bytes.all.peak"] == 11000  # a new peak: PJRT's, exact
    finally:
        memory._Reset.pjrt_peak, memory._Reset.pjrt_in_use = saved


def test_memory_summary():
    text = torch.tpu.memory_summary()
    for line in ("memory summary", "tpu:0", "Allocated memory", "Reserved memory", "Peak Usage", "source:"):
        assert line in text, (line, text)


def _trace_names(files) -> set:
    trace = [f for f in files if f.endswith("perfetto_trace.json.gz")]
    assert trace, files
    with gzip.open(trace[0]) as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


def test_profile_writes_a_trace_with_op_module_and_graph_names(tmp_path):
    x = torch.randn(16, 16, device="tpu")
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to("tpu")
    compiled = torch.compile(lambda v: v.sin() * 2, backend="tpu", fullgraph=True, dynamic=False)
    with torch_tpu.profile(tmp_path / "logs") as prof:
        (x @ x).relu()
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            block(x)
        compiled(x)
    assert any(f.endswith(".xplane.pb") for f in prof.files)  # TensorBoard's profile plugin
    names = " ".join(_trace_names(prof.files))
    for name in ("aten.mm.default", "aten.relu.default", "fused.Sequential", "compiled."):
        assert name in names, (name, names[:2000])


def test_profile_gives_device_time_per_op_and_graph_with_compiles_apart(tmp_path, monkeypatch):
    """torch_tpu_trace.json.gz (Perfetto): one track of the device's programs named by op, module and
    graph, in launch order and never overlapping; the compilations on tracks of their own; prof.programs
    and prof.table() sum them by name (launches counted as made). JAX's Perfetto file was mostly compiler
    passes and named no program on the CPU platform."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path / "cache"))  # cold: compilations happen
    torch_tpu.reset_caches()
    x = torch.randn(16, 16, device="tpu")
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to("tpu")
    compiled = torch.compile(lambda v: v.cos() * 3, backend="tpu", fullgraph=True, dynamic=False)
    with torch_tpu.profile(tmp_path / "logs") as prof:
        for _ in range(3):
            (x @ x).tanh()
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            block(x)
        compiled(x)
        compiled(x)
    ours = [f for f in prof.files if f.endswith("torch_tpu_trace.json.gz")]
    assert ours, prof.files
    with gzip.open(ours[0]) as f:
        events = json.load(f)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    device = [e for e in spans if threads[e["tid"]] == "device: programs"]
    compiles = [e for e in spans if threads[e["tid"]].startswith("XLA compile")]
    names = {e["name"] for e in device}
    assert {"aten.mm.default", "aten.tanh.default", "fused.Sequential"} <= names, names
    assert any(n.startswith("compiled.") for n in names), names
    assert all(e["cat"] == "device" for e in device) and all(e["name"].startswith("compile ") for e in compiles)
    assert compiles and all(e["tid"] != 1 for e in compiles)
    for a, b in zip(device, device[1:]):  # one queue: in order, no overlap
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)
    progs = prof.programs
    assert progs["aten.mm.default"]["launches"] == 3 and progs["aten.tanh.default"]["launches"] == 3
    assert progs["fused.Sequential"]["launches"] == 1 and progs["fused.Sequential"]["compiles"] == 1
    assert sum(r["launches"] for n, r in progs.items() if n.startswith("compiled.")) == 2
    assert all(r["device_ms"] >= 0 for r in progs.values())
    table = prof.table()
    assert "aten.mm.default" in table and "XLA compilation" in table


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_compile_log_names_shapes_and_reason():
    log = logging.getLogger(compile_log.LOGGER_NAME)
    handler, level = _Collect(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        torch_tpu.reset_caches()
        x = torch.randn(7, 13, device="tpu")
        (x + 1).cpu()
        (torch.randn(5, 13, device="tpu") + 1).cpu()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    add = [m for m in handler.lines if " aten.add.Tensor " in m]
    assert add and all(m.startswith(("compiled ", "loaded ")) for m in add), handler.lines
    assert any("float32[7,13]" in m for m in add) and any("float32[5,13]" in m for m in add), add
    assert any("new input shapes/dtypes: float32[7,13] -> float32[5,13]" in m for m in add) or \
        any("compiled before in this process" in m for m in add), add


def test_compile_log_from_the_environment(monkeypatch):
    log = logging.getLogger(compile_log.LOGGER_NAME)
    handler, level = _Collect(), log.level
    log.addHandler(handler)
    monkeypatch.setenv("TORCH_TPU_LOG", "compiles")
    try:
        assert compile_log.enabled() and log.isEnabledFor(logging.INFO)
        (torch.ones(3, 5, device="tpu") * 2.5).cpu()
        torch_tpu.reset_caches()
        (torch.ones(3, 5, device="tpu") * 2.5).cpu()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    mul = [m for m in handler.lines if " aten.mul.Tensor " in m and "float32[3,5]" in m]
    assert mul and "compiled before in this process" in mul[-1], handler.lines
    # TORCH_LOGS=torch_tpu: torch's logging knows the name (it turns on the "torch_tpu" logger)
    from torch._logging._internal import log_registry

    assert log_registry.log_alias_to_log_qnames["torch_tpu"] == ["torch_tpu"]
    monkeypatch.setenv("TORCH_TPU_LOG", "bogus")
    with pytest.raises(torch_tpu.config.ConfigError, match="TORCH_TPU_LOG='bogus'"):
        torch_tpu.config.settings()


def test_compile_log_is_off_by_default():
    assert not logging.getLogger(compile_log.LOGGER_NAME).isEnabledFor(logging.INFO)
    assert compile_log.start() is None  # no timing, no bookkeeping per compile


def test_memory_stats_count_op_results_and_their_frees():
    """An op's result storage counts the bytes its entry computed once (a plain op, an op with a per-call
    check of a Python number, a reduction to another shape and dtype): allocations and frees as made."""
    x = torch.ones(128, device="tpu")
    y = torch.ones(128, device="tpu")
    for _ in range(2):  # (entries and programs built; their example values gone)
        x + y, x + 0.5, x.sum(dtype=torch.float64), (x > 0)
    gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_stats()
    results = [x + y, x + 0.5, x.sum(dtype=torch.float64), x > 0]
    after = torch.tpu.memory_stats()
    expected = 128 * 4 + 128 * 4 + 8 + 128
    assert [r.dtype for r in results] == [torch.float32, torch.float32, torch.float64, torch.bool]
    assert [tuple(r.shape) for r in results] == [(128,), (128,), (), (128,)]
    assert after["requested_bytes.all.current"] - before["requested_bytes.all.current"] == expected
    assert after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"] == expected
    assert after["allocation.all.current"] - before["allocation.all.current"] == 4
    assert memory.peak() >= memory.in_use()
    del results
    gc.collect()
    freed = torch.tpu.memory_stats()
    assert freed["allocated_bytes.all.freed"] - after["allocated_bytes.all.freed"] == expected
    assert freed["allocation.all.current"] == before["allocation.all.current"]
    assert freed["requested_bytes.all.current"] == before["requested_bytes.all.current"]

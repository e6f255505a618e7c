"""Unbounded growth over long sequences of calls, in the three executors (strict eager,
fused eager, torch.compile backend="tpu"). After a warm-up, what a loop leaves behind must stop growing:
live device buffers (``jax.live_arrays()``), torch_tpu's count of live storages and bytes, every
registered in-memory cache, tensors and torch_tpu objects, open file descriptors, threads. Every case
compares its values with CPU torch too.

Found (fixed):
  * [growth] every refused call (``x @ y`` of mismatched shapes, ``int_tensor.add_(1.5)``, any
    validator's refusal) left its program key and key text in the key-text memo (``stable_keys._TEXTS``,
    held by identity, bound 50 000): about 0.7 KB a call, ~35 MB before the bound. A failed entry build
    now forgets its key's text (``op_path._build_entry`` -> ``stable_keys.forget``).
  * [growth] compiled graphs with automatic dynamic shapes (``torch.compile`` default ``dynamic=None``,
    a new shape): every ``PerShape`` callable's program dict was appended to a module list and never let
    go, so ``torch._dynamo.reset()`` (or compiling a function anew) kept all its programs forever; and
    that dict had no bound, so a loop over ever new sequence lengths kept a program per length past
    ``TORCH_TPU_MAX_CACHED_PROGRAMS``. The list is now weak, the dict a ``caches.Bounded``, and
    ``torch_tpu.reset_caches()`` empties each of them (it emptied only the list).

Tried, held (kept below as cheap guards where they are): AdamW/Adam training with a StepLR scheduler,
GradScaler and autocast, ``zero_grad(set_to_none=True/False)`` alternating; inference over changing
batch sizes and sequence lengths; views made and dropped in a loop; tensors deleted (memory back to its
baseline); tpu<->cpu round trips; deepcopy and state_dict save/load through ``torch.save``; device-side
index errors detected at the next wait (strict and fused); autograd graphs built and dropped without
backward, ``retain_graph``; hooks added and removed; threads that run ops (strict and fused) and end;
eager-mode switches; ``torch.manual_seed``; ``module.to`` tpu<->cpu; ``data_ptr``/``untyped_storage``;
``torch_tpu.profile``; ``.item()``/``.tolist()``; factories with changing values; compiled training
(module + compiled optimizer step); compiled functions created anew each call; a tiny Flux pipeline with
changing prompts and resolutions, on the device and with ``enable_model_cpu_offload`` (strict, fused,
compiled transformer; too slow for this file).

Left (not torch_tpu's): dynamo keeps objects (StackSummary, FrameSummary, CapturedTraceback) for every
``torch._dynamo.reset()`` + recompile and for every call of a compiled function whose tracing raises
(``a @ b`` of mismatched shapes) - the same counts with ``backend="eager"``.
"""
import gc
import io
import copy
import os
import threading

import pytest
import torch

from tests.harness.counting import backend_objects
from tests.harness.inputs import rand
import torch_tpu
from torch_tpu.engine import device_numbers
from torch_tpu.runtime import caches, memory

FUSE = torch_tpu.EagerMode.DEFER_AND_FUSE


def _mode(mode):
    return torch.tpu.set_eager_mode(FUSE) if mode == "fused" else torch.tpu.set_eager_mode(
        torch_tpu.EagerMode.DEFER_NEVER)


def _footprint():
    import jax

    torch_tpu.sync()
    torch.tpu.synchronize()
    gc.collect()
    # (less the device scalars strict eager keeps for Python numbers: a bounded cache, engine/device_numbers.py)
    return {"live device buffers": len(jax.live_arrays()) - device_numbers.kept(),
            "live storages": memory.COUNTS.live,
            "device bytes": memory.in_use(), "open files": len(os.listdir("/proc/self/fd")),
            "threads": threading.active_count(), "tensors and torch_tpu objects": backend_objects(),
            **{f"cache {k}": v for k, v in caches.sizes().items()}}


def _assert_stops_growing(step, what, warm=6, n=30):
    """``step(i)`` for ``warm`` calls, then twice ``n`` calls: nothing may grow in the second stretch
    (the first may still fill a cache of bounded size, e.g. a shape seen for the first time)."""
    for i in range(warm):
        step(i)
    marks = [_footprint()]
    for k in range(2):
        for i in range(n):
            step(warm + k * n + i)
        marks.append(_footprint())
    grown = {k: (marks[1][k], marks[2][k]) for k in marks[2] if marks[2][k] > marks[1].get(k, 0)}
    assert not grown, f"[growth] {what}: over {n} calls {grown}"


# ---------------------------------------------------------------------------------------------------
# refused calls must leave no program key texts behind


def _refusals():
    """(name, call on a device's tensors) pairs CPU torch refuses too."""
    return [
        ("matmul shapes", lambda d: torch.ones(4, 4, device=d) @ torch.ones(3, 3, device=d)),
        ("in-place float into int", lambda d: torch.ones(2, dtype=torch.int64, device=d).add_(1.5)),
        ("cat dims", lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)])),
    ]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_refused_calls_leave_no_key_texts(mode):
    for name, call in _refusals():
        with pytest.raises(RuntimeError) as cpu_exc:
            call("cpu")
        with _mode(mode):
            def step(i):
                with pytest.raises(type(cpu_exc.value)):
                    call("tpu")

            for i in range(3):
                step(i)
            before = caches.sizes()["key texts"]
            for i in range(40):
                step(i)
            after = caches.sizes()["key texts"]
        assert after == before, f"[growth] {name}: key texts {before} -> {after} over 40 refused calls"
    # the device still works, and a later valid call of the same op is cached as usual
    with _mode(mode):
        torch.testing.assert_close((torch.ones(4, 4, device="tpu") @ torch.ones(4, 3, device="tpu")).cpu(),
                                   torch.ones(4, 4) @ torch.ones(4, 3))


# ---------------------------------------------------------------------------------------------------
# per-shape compiled graphs must be bounded, not kept forever


def _per_shape_fn(t):
    return (t * 2 + 1).sum(0)


def test_dynamo_reset_releases_per_shape_programs():
    from torch_tpu.compile import specialize

    xs = [rand(n, 3, seed=n) for n in (2, 3, 4, 5)]
    txs = [x.to("tpu") for x in xs]
    torch._dynamo.reset()
    gc.collect()
    base = specialize._LIVE.graphs_alive()  # (graphs other tests of this process still hold)
    sizes = []
    for trial in range(8):
        torch._dynamo.reset()
        f = torch.compile(_per_shape_fn, backend="tpu")  # dynamic=None: the third shape is symbolic
        for x, tx in zip(xs, txs):
            torch.testing.assert_close(f(tx).cpu(), _per_shape_fn(x))
        del f
        gc.collect()
        sizes.append(specialize._LIVE.graphs_alive())
    torch._dynamo.reset()
    assert max(sizes[4:]) <= max(sizes[:4]), f"[growth] per-shape graphs alive after each reset: {sizes}"
    assert sizes[-1] <= base + 2, f"[growth] {sizes[-1]} per-shape graphs alive after 8 resets (before: {base})"


def test_per_shape_programs_are_bounded_and_reset(monkeypatch):
    from torch_tpu.compile import specialize

    monkeypatch.setenv("TORCH_TPU_MAX_CACHED_PROGRAMS", "16")
    torch._dynamo.reset()
    f = torch.compile(_per_shape_fn, backend="tpu")
    for n in range(2, 26):  # 24 sequence lengths
        x = rand(n, 3, seed=n)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), _per_shape_fn(x))
    kept = [len(c) for c in specialize._LIVE]
    if not kept:  # no per-shape graph: say how dynamo compiled (or fell back) instead
        import torch._dynamo.config as dynamo_config
        from torch._dynamo.utils import counters

        pytest.fail(f"[growth] no per-shape graph alive: automatic_dynamic_shapes="
                    f"{dynamo_config.automatic_dynamic_shapes}, recompile_limit={dynamo_config.recompile_limit}, "
                    f"dynamo counters {dict((k, dict(v)) for k, v in counters.items() if v)}")
    assert max(kept) <= 16, f"[growth] per-shape programs past the bound 16: {kept}"
    torch_tpu.reset_caches()
    assert all(len(c) == 0 for c in specialize._LIVE), "reset_caches left per-shape programs"
    from torch_tpu.runtime import caches  # the graph is still alive: the registry must count 0 programs

    assert caches.sizes()["per-shape compiled graphs"] == 0, caches.sizes()
    x = rand(5, 3, seed=5)
    torch.testing.assert_close(f(x.to("tpu")).cpu(), _per_shape_fn(x))  # rebuilt after the reset
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------
# held: kept as guards (cheap workloads, each mode)


def _train_setup(device, compiled):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8)
    fwd = torch.compile(m, backend="tpu") if compiled and device == "tpu" else m
    return m, opt, sched, scaler, fwd


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_training_with_adamw_scheduler_and_scaler_stops_growing(mode):
    data = [(rand(4, 6, seed=s), rand(4, 3, seed=s + 9)) for s in range(3)]
    runs = {d: _train_setup(d, mode == "compiled") for d in ("cpu", "tpu")}
    tdata = [(x.to("tpu"), y.to("tpu")) for x, y in data]

    def step(i, device="tpu"):
        m, opt, sched, scaler, fwd = runs[device]
        x, y = (tdata if device == "tpu" else data)[i % 3]
        opt.zero_grad(set_to_none=i % 2 == 0)
        loss = torch.nn.functional.mse_loss(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()

    with _mode(mode):
        _assert_stops_growing(step, f"{mode} AdamW + StepLR + GradScaler", n=12)
    for i in range(6 + 24):
        step(i, "cpu")
    for a, b in zip(runs["tpu"][0].parameters(), runs["cpu"][0].parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_eager_loops_stop_growing(mode):
    """Views made and dropped, tensors deleted, tpu<->cpu round trips, deepcopy and state_dict save/load,
    graphs dropped without backward and retain_graph, hooks added and removed, device index errors at the
    next wait, threads that run ops and end: one loop of all of them."""
    X = rand(8, 8)
    m_cpu = torch.nn.Linear(8, 8)
    m = copy.deepcopy(m_cpu).to("tpu")
    bad = torch.tensor([9], device="tpu")
    acc = torch.zeros(8, device="tpu")
    acc_cpu = torch.zeros(8)

    def body(x, mod, device, i):
        v = x[i % 4:, ::2].t()  # every variation repeats with period 4
        w = x.view(64)[i % 4::3]
        out = (v.sum(0)[:4].sum() + w.sum()) * 1e-2
        h1 = mod.register_forward_hook(lambda *a: None)
        h2 = mod.weight.register_hook(lambda g: g * 1)
        y = mod(x).relu().sum()
        if i % 2:
            y.backward(retain_graph=True)
            y.backward()
            mod.zero_grad(set_to_none=i % 4 == 1)
        del y
        h1.remove()
        h2.remove()
        return out

    def step(i):
        nonlocal acc, acc_cpu
        tx = X.to("tpu")
        acc = (acc + body(tx, m, "tpu", i)).cpu().to("tpu")
        acc_cpu = acc_cpu + body(X, m_cpu, "cpu", i)
        m2 = copy.deepcopy(m)
        buf = io.BytesIO()
        torch.save(m2.state_dict(), buf)
        buf.seek(0)
        m.load_state_dict(torch.load(buf))
        if i % 4 == 0:
            with pytest.raises(IndexError, match="index"):  # (CPU's class; DeviceAssertError is one)
                tx[bad].cpu()
        out = []
        t = threading.Thread(target=lambda: out.append((tx * 2).sum().item()))
        t.start()
        t.join()
        assert out and abs(out[0] - float((X * 2).sum())) < 1e-3
        del tx

    with _mode(mode):
        _assert_stops_growing(step, f"{mode} eager loop", warm=8, n=12)
    torch.testing.assert_close(acc.cpu(), acc_cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_inference_over_changing_shapes_stops_growing(mode):
    torch.manual_seed(0)
    m_cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    m = copy.deepcopy(m_cpu).to("tpu")
    fwd = torch.compile(m, backend="tpu") if mode == "compiled" else m
    xs = [rand(b, s, 8, seed=b * 10 + s) for b in (1, 3) for s in (4, 7)]
    txs = [x.to("tpu") for x in xs]

    def step(i):
        with torch.no_grad():
            out = fwd(txs[i % 4]).softmax(-1)
        if i % 4 == 3:
            with torch.no_grad():
                torch.testing.assert_close(out.cpu(), m_cpu(xs[3]).softmax(-1), atol=1e-5, rtol=1e-5)

    with _mode(mode):
        _assert_stops_growing(step, f"{mode} inference over 4 shapes", warm=8, n=16)
    if mode == "compiled":
        torch._dynamo.reset()


def test_deleted_tensors_give_their_memory_back():
    base = _footprint()
    for mode in ("strict", "fused"):
        with _mode(mode):
            for i in range(20):
                a = torch.ones(64, 64, device="tpu") * i
                b = a @ a
                assert b[0, 0].item() == 64 * i * i
                del a, b
    after = _footprint()
    for k in ("live device buffers", "live storages", "device bytes"):
        assert after[k] <= base[k], f"[growth] {k}: {base[k]} -> {after[k]} after deleting every tensor"


def test_the_call_site_tables_are_registered_caches_emptied_by_reset():
    """Fused mode's call-site tables (per code object and instruction: every recorded op asks) are bounded
    registered caches: ``torch_tpu.reset_caches()`` empties them, and recording after that fills them again
    with the same graphs' values."""
    from torch_tpu.runtime import caches

    x = rand(4, 6, seed=3)
    names = ("call site frames", "number site frames", "call site lines")

    def record():
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            t = x.to("tpu")
            return ((t * 1.5 + 2.0).tanh() - t).cpu()

    want = (x * 1.5 + 2.0).tanh() - x
    torch.testing.assert_close(record(), want)
    assert all(caches.sizes()[n] > 0 for n in names[::2]), caches.sizes()
    torch_tpu.reset_caches()
    assert all(caches.sizes()[n] == 0 for n in names), caches.sizes()
    torch.testing.assert_close(record(), want)
    assert caches.sizes()["call site lines"] > 0

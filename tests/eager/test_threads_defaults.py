"""Threads, long loops and device defaults, as a user would meet them.

Cases (each tagged with the failure it guards against):
  * [wrong dtype] under ``torch.set_default_dtype(torch.bfloat16)`` (or float16, float64) an op seen
    before under another default dtype (``torch.arange(0, 1, 0.25)``, ``int_tensor / 2``,
    ``int_tensor * 1.5``, ``linspace``) returned the old default's dtype: the op-entry key held no
    default dtype.
  * [silent] ``x.to("tpu:1")`` (``x.tpu(1)``, ``x.to(torch.device("tpu", 1))``) of a tpu tensor returned a
    tpu:0 tensor; a factory or a CPU tensor's ``.to("tpu:1")`` already raised. Now a clear error.
  * [wrong mode] two threads' ``with torch.tpu.set_eager_mode(fused)`` blocks ending in the order they
    began: the second block ran in strict mode once the first ended, and after both the process stayed
    in fused mode (each block restored the mode it had found). The mode is per process (README).
  * [unclear error] ``nn.LazyLinear(3).to("tpu")`` raised "Can't access the shape of an uninitialized
    parameter" from inside copy_; now an error saying to call the module once on the CPU first (lazy
    modules on the tpu before their first call stay a gap: strict xfail).
  * [growth] a loop of device-checked ops (embedding, gather, indexing) that never waits kept the
    message of every checked op it ran, without end (two per step); a wait every 65536 folded checks
    now drops those that held and keeps only a failure to report.
  * [wrong value] under ``torch.use_deterministic_algorithms(True)`` memory never written (``torch.empty``,
    ``empty_like``, ``new_empty``, ``empty_strided``, the new part of ``resize_``) read as zeros; CPU and
    CUDA fill it with NaN (the largest value for integers, True for bool) so such reads show.
  * [tpu raised] ``nn.utils.rnn.pack_padded_sequence`` / ``pack_sequence`` of tpu tensors (found under
    ``set_default_device("tpu")``) raised a device mismatch: the lengths are a CPU tensor by contract.
  * [tpu raised] a CPU index tensor indexing a tpu tensor inside ``torch.compile(backend="tpu")``
    (``x[i]``, ``x[i] = v``, ``index_put_``) was refused, though eager (and CUDA) allow it.
  * [wrong value] random ops from several threads at once could draw the same numbers: the RNG offset
    was read and advanced without a lock.
Every case compares with CPU torch (harness/differential.py) in strict and fused eager and, where a graph
makes sense, compiled mode.
"""
import copy
import gc
import os
import sys
import threading
import time

import pytest
import torch

from tests.harness import differential as D
from tests.harness.counting import backend_objects, program_cache_sizes
from tests.harness.inputs import per_device, rand
from tests.harness.modes import _in_mode
from tests.harness import hangs
import torch_tpu

pytestmark = pytest.mark.usefixtures("watchdog")

ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]


# ---------------------------------------------------------------------------------------------------
# devices and defaults


def _default_dtype_ops(x):
    dev = x.device
    i = torch.arange(4, device=dev)
    return (torch.arange(0, 1, 0.25, device=dev), i / 2, i * 1.5, torch.linspace(0, 1, 3, device=dev),
            torch.full((2,), 1.5, device=dev), torch.tensor([2.5], device=dev), i.sqrt(), x.sum() + i / 3,
            torch.nn.functional.linear(x, torch.ones(3, 3, device=dev)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.float16])
def test_default_dtype_changes_between_calls(dtype):
    """The same calls under float32, then under another default dtype, then float32 again: each result
    has the dtype CPU torch gives (the op entries of the first pass served the second)."""
    x = rand(2, 3)
    modes = ALL if dtype is torch.bfloat16 else EAGER  # compiled graphs once (dynamo guards the default)
    D.check(_default_dtype_ops, x, modes=modes)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        D.check(_default_dtype_ops, x.to(dtype), modes=modes, atol=1e-2, rtol=1e-2)
    finally:
        torch.set_default_dtype(old)
    D.check(_default_dtype_ops, x, modes=modes)


def _cpu_scalar_mix(x):
    s = torch.tensor(2.5)            # a CPU 0-dim tensor: allowed with device tensors, as on CUDA
    i = torch.tensor(3)
    b = torch.tensor(True)
    return (x + s, s * x, x * i, torch.where(x > 0, x, s), x.clamp(min=torch.tensor(-0.5)),
            torch.maximum(x, torch.tensor(0.25)), x.masked_fill(x > 1, s), x.pow(i), x * b,
            torch.addcmul(x, x, x, value=2) - s)


def _cpu_scalar_inplace(x):
    x.mul_(torch.tensor(3.0))
    x.add_(torch.tensor(1), alpha=2)
    x[0] = torch.tensor(-7.0)
    return x


def _cpu_index(x):
    i = torch.tensor([0, 2, 2])      # CPU index tensors index a device tensor, as on CUDA
    m = torch.tensor([True, False, True, False])
    y = x.clone()
    y[i] = 5.0
    y[torch.tensor([1])] += 1.0
    z = x.clone()
    z.index_put_((torch.tensor([3, 0]),), torch.tensor([9.0, 8.0], device=x.device))
    return x[i], x[m], x[i, None], y, z, x[torch.tensor(1)]


def _cpu_nonscalar(x):
    return x + torch.ones(4)


def _out_wrong_device(x):
    return torch.add(x, x, out=torch.empty(4))


@pytest.mark.parametrize("case", ["cpu_scalar_mix", "cpu_scalar_inplace", "cpu_index"])
def test_cpu_tensors_allowed_with_tpu(case):
    fn = {"cpu_scalar_mix": _cpu_scalar_mix, "cpu_scalar_inplace": _cpu_scalar_inplace,
          "cpu_index": _cpu_index}[case]
    D.check(fn, rand(4), modes=EAGER)


@pytest.mark.parametrize("mode", EAGER)
def test_cpu_nonscalar_and_wrong_out_device_raise_naming_both(mode):
    with _in_mode(mode):
        x = torch.ones(4, device="tpu")
        for fn in (_cpu_nonscalar, _out_wrong_device, lambda x: torch.add(torch.ones(4), torch.ones(4),
                                                                            out=torch.empty(4, device="tpu")),
                   lambda x: x.index_select(0, torch.tensor([1]))):
            with pytest.raises(RuntimeError, match=r"(?s)(tpu.*cpu|cpu.*tpu)"):
                fn(x).cpu()
        torch.testing.assert_close((x * 2).cpu(), torch.full((4,), 2.0))


@pytest.mark.parametrize("mode", EAGER)
def test_second_device_is_refused(mode):
    """``.to("tpu:1")`` of a tpu tensor returned a tpu:0 tensor without a word (one device per
    process): now a clear error, like a factory or a CPU tensor's ``.to("tpu:1")``."""
    with _in_mode(mode):
        x = torch.ones(3, device="tpu")
        for make in (lambda: x.to("tpu:1"), lambda: x.to(torch.device("tpu", 1)), lambda: x.tpu(1),
                     lambda: torch.ones(3).to("tpu:1"), lambda: torch.zeros(2, device="tpu:1"),
                     lambda: torch.nn.Linear(2, 2).to("tpu:1"), lambda: x.new_ones(2, device="tpu:1")):
            with pytest.raises(RuntimeError, match="tpu:1.*one device per process"):
                make()
        assert x.to("tpu:0").device == x.device == torch.device("tpu", 0)
        assert torch.device("tpu").index is None and x.device.index == 0 and x.get_device() == 0
        assert x.device != torch.device("tpu")  # as torch.device("cuda:0") != torch.device("cuda")
        assert torch.ones(2).tpu().device == x.device and x.is_tpu and not torch.ones(1).is_tpu
        torch.testing.assert_close(x.to("tpu").cpu(), torch.ones(3))


def test_default_device_factories_and_modules():
    """``torch.set_default_device("tpu")``: factories and module construction land on the tpu and
    compute what CPU torch computes from the same values (the tpu's random numbers are its own)."""
    def run(device, state=None, x=None):
        with torch.device(device):
            m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.GELU())
            e = torch.nn.Embedding(5, 4)
            if state is not None:
                m.load_state_dict(state[0])
                e.load_state_dict(state[1])
            x = torch.randn(2, 3) if x is None else x.to(device)
            ids = torch.tensor([1, 4])
            out = m(x) + e(ids) + torch.arange(4) * 0.5 + torch.ones(4) + torch.eye(4)[1]
            out.sum().backward()
            devices = {t.device.type for t in (x, ids, out, m[0].weight, m[0].weight.grad, e.weight)}
            cpu_state = ({k: v.cpu() for k, v in m.state_dict().items()},
                         {k: v.cpu() for k, v in e.state_dict().items()})
            return out.detach().cpu(), m[0].weight.grad.cpu(), devices, cpu_state, x.cpu()

    old = torch.get_default_device()
    try:
        torch.set_default_device("tpu")
        got = run("tpu")
        assert torch.zeros(1).device.type == "tpu"
    finally:
        torch.set_default_device(None if old.type == "cpu" else old)  # (cpu would leave a mode active)
    exp = run("cpu", got[3], got[4])
    assert got[2] == {"tpu"} and exp[2] == {"cpu"}
    torch.testing.assert_close(got[0], exp[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], exp[1], atol=1e-5, rtol=1e-5)
    assert torch.zeros(1).device.type == old.type


def _deterministic_ops(x, idx):
    z = torch.zeros(4, device=x.device)
    return (z.index_add(0, idx, x), z.scatter_add(0, idx, x), z.index_put((idx,), x, accumulate=True),
            x.cumsum(0), x.sort().values, torch.bincount(idx, minlength=4), x.kthvalue(2).values,
            torch.nn.functional.embedding_bag(idx, x[:, None].expand(4, 3).contiguous(),
                                              torch.tensor([0, 2], device=x.device), mode="sum"))


def _uninitialised(x):
    d = x.device
    return (torch.empty(3, device=d), torch.empty_like(x), x.new_empty(2, dtype=torch.int32),
            torch.empty(2, dtype=torch.bool, device=d), torch.empty_strided((2, 3), (1, 2), device=d),
            torch.empty(2, dtype=torch.uint8, device=d), x.clone().resize_(6), torch.empty(0, device=d))


def test_use_deterministic_algorithms():
    """Accumulating ops give CPU torch's values; memory never written reads as on CPU and CUDA (NaN,
    the dtype's largest value, True), not zeros."""
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        D.check(_deterministic_ops, rand(4), torch.tensor([0, 0, 3, 1]), modes=ALL)
        D.check(_uninitialised, rand(4), modes=EAGER)
    finally:
        torch.use_deterministic_algorithms(old)
    assert (torch.empty(64, device="tpu").cpu() == 0).all()  # off again: no fill


@pytest.mark.parametrize("mode", EAGER)
def test_non_blocking_copies_see_the_value_at_the_call(mode):
    """``non_blocking=True`` both ways, then an in-place write on the source: the copy holds the value
    the source had when the copy was asked for."""
    with _in_mode(mode):
        for pin in (False, True):
            c = torch.arange(6.0)
            c = c.pin_memory() if pin else c
            d = c.to("tpu", non_blocking=True)
            c.add_(100)
            g = torch.empty(6, device="tpu")
            g.copy_(c, non_blocking=True)
            c.mul_(0)
            torch.testing.assert_close(d.cpu(), torch.arange(6.0))
            torch.testing.assert_close(g.cpu(), torch.arange(6.0) + 100)
        t = torch.arange(5.0, device="tpu") * 2
        h = t.to("cpu", non_blocking=True)
        t.add_(1)
        h2 = torch.empty(5).pin_memory()
        h2.copy_(t, non_blocking=True)
        t.zero_()
        v = t[1:4]
        h3 = v.to("cpu", non_blocking=True)
        v.fill_(-1)
        torch.tpu.synchronize()
        torch.testing.assert_close(h, torch.arange(5.0) * 2)
        torch.testing.assert_close(h2, torch.arange(5.0) * 2 + 1)
        torch.testing.assert_close(h3, torch.zeros(3))
        # non-contiguous sources and destinations
        c = torch.arange(12.0).reshape(3, 4)
        d, e = c.t().to("tpu", non_blocking=True), c[:, 1].to("tpu", non_blocking=True)
        c.zero_()
        t = torch.arange(12.0, device="tpu").reshape(3, 4)
        h = torch.zeros(4, 3)
        h.t().copy_(t, non_blocking=True)
        hv = t[1:, ::2].to("cpu", non_blocking=True)
        t.mul_(0)
        s = torch.arange(4.0)
        g = torch.zeros(8, device="tpu")
        g[::2].copy_(s, non_blocking=True)
        s.fill_(-1)
        torch.tpu.synchronize()
        ref = torch.arange(12.0).reshape(3, 4)
        torch.testing.assert_close(d.cpu(), ref.t())
        torch.testing.assert_close(e.cpu(), ref[:, 1])
        torch.testing.assert_close(h.t(), ref)
        torch.testing.assert_close(hv, ref[1:, ::2])
        torch.testing.assert_close(g.cpu()[::2], torch.arange(4.0))


# ---------------------------------------------------------------------------------------------------
# threads


def _run_threads(targets, timeout=60):
    """Start every target on its own thread, join with a timeout: a hang fails, an exception is
    reported with its thread's traceback."""
    import traceback

    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException:  # noqa: BLE001
                errors.append(traceback.format_exc())
        return run

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: interleave ops, flushes and reads
    try:
        threads = [threading.Thread(target=guard(fn), daemon=True) for fn in targets]
        [t.start() for t in threads]
        progress, why = hangs.Progress(os.getpid(), 2 * timeout, stall_s=60), None
        while any(t.is_alive() for t in threads) and why is None:
            threads[0].join(1.0) if threads[0].is_alive() else [t.join(1.0) for t in threads if t.is_alive()][:1]
            why = progress.verdict()  # a hang is no progress, not a slow machine
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), f"[hang] a thread did not finish: {why}"
    assert not errors, errors[0]


def _own_work(seed, steps):
    def run():
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(6, 6, generator=g), torch.randn(6, generator=g)
        ta, tb = a.to("tpu"), b.to("tpu")
        for i in range(steps):
            ta = (ta @ ta.t()).tanh() + tb * (i % 3)
            ta.mul_(0.5)
            a = (a @ a.t()).tanh() + b * (i % 3)
            a.mul_(0.5)
            if i % 10 == 9:
                torch.testing.assert_close(ta.cpu(), a, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ta.cpu(), a, atol=1e-4, rtol=1e-4)
    return run


@pytest.mark.parametrize("mode", EAGER)
def test_threads_each_with_own_tensors_and_a_shared_one(mode):
    """Threads computing on their own tensors, threads reading one shared tensor, a thread calling
    ``torch.tpu.synchronize()`` and two calling ``torch_tpu.sync()`` (a fused flush from two threads at
    once) while the main thread queues work: every value equals CPU torch's, nothing hangs."""
    shared = rand(8, 8, seed=3)
    tshared = shared.to("tpu")

    def reader(k):
        def run():
            for i in range(15):
                r = (tshared * (k + 1)).sum(0) + i
                torch.testing.assert_close(r.cpu(), (shared * (k + 1)).sum(0) + i, atol=1e-4, rtol=1e-4)
        return run

    def syncing(fn):
        def run():
            for _ in range(30):
                fn()
        return run

    with _in_mode(mode):
        targets = [_own_work(k, 30) for k in range(3)] + [reader(k) for k in range(2)]
        targets += [syncing(torch.tpu.synchronize), syncing(torch_tpu.sync), syncing(torch_tpu.sync)]

        def main_work():
            m, tm = rand(5, 5), rand(5, 5).to("tpu")
            for _ in range(60):
                tm = tm * 0.9 + 1
                m = m * 0.9 + 1
            torch.testing.assert_close(tm.cpu(), m)
        _run_threads(targets + [main_work])
        torch.testing.assert_close(tshared.cpu(), shared)


@pytest.mark.parametrize("mode", EAGER)
def test_backward_in_threads(mode):
    """Training steps (forward, backward, SGD update) on tpu in several threads at once, each its own
    parameters: the gradients and weights equal CPU torch's."""
    def train(seed):
        def run():
            torch_w = rand(5, 5, seed=seed)
            ws = [torch_w.clone().to(d).requires_grad_() for d in ("cpu", "tpu")]
            xs = [rand(3, 5, seed=seed + 10).to(d) for d in ("cpu", "tpu")]
            for _ in range(4):
                for w, x in zip(ws, xs):
                    loss = ((x @ w).sin() @ w.t()).pow(2).mean()
                    loss.backward()
                    with torch.no_grad():
                        w.sub_(0.1 * w.grad)
                    w.grad = None
            torch.testing.assert_close(ws[1].detach().cpu(), ws[0].detach(), atol=1e-5, rtol=1e-5)
        return run

    with _in_mode(mode):
        _run_threads([train(k) for k in range(3)])


def test_mode_blocks_from_threads_end_out_of_order():
    """The eager mode is one per process (README). Two threads' ``with set_eager_mode(fused)`` blocks
    ending in the order they began: the second block kept fused mode until it ended (it had switched
    to strict when the first ended), and after both the process was left in fused mode."""
    E = torch_tpu.EagerMode
    assert torch.tpu.eager_mode is E.DEFER_NEVER
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
            a_in.set()
            assert b_in.wait(30)
            x = torch.arange(4.0, device="tpu") * 2
        a_out.set()
        seen["first"] = x.cpu()

    def second():
        assert a_in.wait(30)
        with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
            b_in.set()
            assert a_out.wait(30)
            seen["inside"] = torch.tpu.eager_mode
            y = torch.arange(4.0, device="tpu") + 1
        seen["second"] = y.cpu()

    try:
        _run_threads([first, second])
        assert seen["inside"] is E.DEFER_AND_FUSE
        assert torch.tpu.eager_mode is E.DEFER_NEVER
    finally:
        torch.tpu.eager_mode = E.DEFER_NEVER
    torch.testing.assert_close(seen["first"], torch.arange(4.0) * 2)
    torch.testing.assert_close(seen["second"], torch.arange(4.0) + 1)


def test_mode_switch_in_a_thread_while_main_computes():
    """A thread switching the (process-wide) mode back and forth while the main thread computes: the
    main thread's ops run in whichever mode is current, and every value is right."""
    E = torch_tpu.EagerMode
    stop = threading.Event()

    def switcher():
        for i in range(40):
            with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE if i % 2 else E.DEFER_NEVER):
                torch.ones(2, device="tpu").add_(i).cpu()
        stop.set()

    def main_work():
        x, tx = rand(4, 4), rand(4, 4).to("tpu")
        i = 0
        while not stop.is_set() or i < 20:
            tx = (tx @ tx.t() * 0.1).sin() + 0.5
            tx.add_(0.01)
            x = (x @ x.t() * 0.1).sin() + 0.5
            x.add_(0.01)
            i += 1
        torch.testing.assert_close(tx.cpu(), x, atol=1e-5, rtol=1e-5)

    _run_threads([switcher, main_work])
    assert torch.tpu.eager_mode is E.DEFER_NEVER


def test_lazy_module_moved_before_first_call_raises_clearly():
    """``nn.LazyLinear(3).to("tpu")`` raised torch's "Can't access the shape of an uninitialized
    parameter" from inside copy_; now an error that says what to do, which works."""
    with pytest.raises(RuntimeError, match="lazy module.*call the module once on the CPU"):
        torch.nn.LazyLinear(3).to("tpu")
    D.check(lambda m, x: m(x), per_device(lambda d: _initialised_lazy().to(d)), rand(2, 4), modes=EAGER)


def _initialised_lazy():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.LazyBatchNorm1d())
    m(torch.zeros(2, 4))
    return m


def test_lazy_module_before_its_first_call_is_refused_clearly():
    """A limit (README): module.to('tpu') would turn an UninitializedParameter into a plain Parameter (torch's
    Module._apply cannot swap a CPU tensor's data for a tpu tensor's), so the move is refused, naming the way
    out; called once on the CPU first, the module moves and computes as on CPU."""
    with pytest.raises(RuntimeError, match=r"a lazy module's uninitialized parameter cannot move to the tpu.*"
                                           r"call the module once on the CPU"):
        torch.nn.LazyLinear(3).to("tpu")
    torch.manual_seed(0)
    m = torch.nn.LazyLinear(3)
    x = torch.randn(2, 4)
    ref = m(x)
    m.to("tpu")
    torch.testing.assert_close(m(x.to("tpu")).cpu(), ref)


# ---------------------------------------------------------------------------------------------------
# growth over long loops


@pytest.mark.parametrize("mode", EAGER)
@pytest.mark.parametrize("fail_at", [None, 150])
def test_device_checks_of_a_loop_that_never_waits_stay_bounded(mode, fail_at, monkeypatch):
    """A loop of checked ops (embedding, gather) that never waits kept the messages of every op it ran
    (two per step, without end). Now a wait every ``_COMPACT_AT`` folded checks drops those that held;
    a failed one is still reported at the next wait, naming its op."""
    from torch_tpu.engine import deferred_errors

    monkeypatch.setattr(deferred_errors, "_COMPACT_AT", 512)
    with _in_mode(mode), torch.no_grad():
        torch.manual_seed(0)
        emb = torch.nn.Embedding(50, 8)
        ids = torch.randint(0, 50, (4, 5))
        temb, tids, bad = copy.deepcopy(emb).to("tpu"), ids.to("tpu"), torch.tensor([60], device="tpu")
        acc, tacc = torch.zeros(8), torch.zeros(8, device="tpu")
        most = 0
        for i in range(600):
            tacc += temb(tids).sum((0, 1)) * 1e-3
            tacc += torch.gather(tacc, 0, tids[0, :1] % 8)
            if i == fail_at:
                torch.nn.functional.embedding(bad, temb.weight)  # index 60 of 50 rows: fails on the device
            if i % 100 == 0:
                most = max(most, deferred_errors.pending())
            if fail_at is None:
                acc += emb(ids).sum((0, 1)) * 1e-3
                acc += torch.gather(acc, 0, ids[0, :1] % 8)
        assert most <= 512 + 256 + 16, f"[growth] {most} device checks kept"
        if fail_at is None:
            torch.testing.assert_close(tacc.cpu(), acc)
        else:
            with pytest.raises(torch_tpu.DeviceAssertError if hasattr(torch_tpu, "DeviceAssertError")
                               else RuntimeError, match="embedding"):
                tacc.cpu()
        assert deferred_errors.pending() == 0
        torch.testing.assert_close((torch.ones(2, device="tpu") * 2).cpu(), torch.full((2,), 2.0))


def _footprint():
    """What must stop growing: compiles, in-memory cache sizes, live device bytes, Python objects."""
    from torch_tpu.runtime import caches, memory

    torch_tpu.sync()
    torch.tpu.synchronize()
    gc.collect()
    st = torch_tpu.stats()
    return {"compiles": st["compiles"], "cache_misses": st["cache_misses"], "graph_compiles": st["graph_compiles"],
            "caches": {**caches.sizes(), **program_cache_sizes()}, "device bytes": memory.in_use(),
            "objects": len(gc.get_objects()), "backend objects": backend_objects()}


def _assert_no_growth(before, after, what):
    grown = {k: (before[k], after[k]) for k in ("compiles", "cache_misses", "graph_compiles", "device bytes")
             if after[k] != before[k]}
    grown.update({f"cache {k}": (before["caches"].get(k), v) for k, v in after["caches"].items()
                  if v > before["caches"].get(k, 0)})
    if after["backend objects"] > before["backend objects"]:
        grown["tensors and torch_tpu objects"] = (before["backend objects"], after["backend objects"])
    if after["objects"] - before["objects"] > 2000:  # the total moves by a few hundred from step to step
        grown["python objects"] = (before["objects"], after["objects"])
    assert not grown, f"[growth] {what}: {grown}"


@pytest.mark.parametrize("mode", EAGER)
def test_training_loop_with_schedules_shapes_and_eval_stops_growing(mode):
    """72 steps of a tiny model: a learning rate changed by a scheduler and by hand, batch sizes
    cycling among three shapes, train/eval alternating, no_grad and inference_mode evaluation, grads
    zeroed to None or to zeros. Between two points of the same phase after warm-up nothing grows
    (compiles, caches, live device bytes, Python objects), and the weights equal CPU torch's."""
    def make(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(),
                                torch.nn.Linear(12, 3)).to(device)
        # SGD: Adam turns the rounding noise of a gradient that is zero in exact arithmetic (the bias
        # before a BatchNorm) into steps of +-lr, different on any two devices
        opt = torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=400)
        return m, opt, sched

    data = [(rand(b, 6, seed=b), rand(b, 3, seed=b + 1)) for b in (3, 5, 8)]
    models = {"cpu": make("cpu"), "tpu": make("tpu")}
    tdata = [(x.to("tpu"), y.to("tpu")) for x, y in data]
    marks = {}

    def step(i, device):
        m, opt, sched = models[device]
        x, y = (data if device == "cpu" else tdata)[i % 3]
        if i % 4 == 3:
            m.eval()
            with torch.inference_mode() if i % 8 == 3 else torch.no_grad():
                val = (m(x) - y).pow(2).mean()
            m.train()
            return val
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad(set_to_none=i % 2 == 0)
        loss.backward()
        if i % 6 == 0:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        for g in opt.param_groups:
            g["weight_decay"] = 1e-3 * (1 + i % 5)
        return loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU torch's batch_norm waits on its thread pool on a loaded machine
    try:
        with _in_mode(mode):
            for i in range(73):
                if i in (48, 72):
                    marks[i] = _footprint()
                for device in ("cpu", "tpu"):
                    out = step(i, device)
                    if i % 12 == 0:
                        out.item()
    finally:
        torch.set_num_threads(threads)
    _assert_no_growth(marks[48], marks[72], f"{mode} training loop, steps 48 -> 72 (one cycle)")
    for p, q in zip(models["cpu"][0].parameters(), models["tpu"][0].parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-4, rtol=1e-4)


def _packed_lstm(x, lstm):
    from torch.nn.utils import rnn

    p = rnn.pack_padded_sequence(x, [4, 2, 1], batch_first=True)
    out, (h, c) = lstm(p)
    pad, lens = rnn.pad_packed_sequence(out, batch_first=True)
    (pad.sum() + h.sum()).backward()
    return p.data, p.batch_sizes, pad, lens, h, c, x.grad


def _packed_gru(a, b, gru):
    from torch.nn.utils import rnn

    p = rnn.pack_sequence([a, b], enforce_sorted=False)
    out, h = gru(p)
    return rnn.pad_packed_sequence(out)[0], h, rnn.unpack_sequence(p)[1], p.sorted_indices


def test_packed_sequences():
    """``pack_padded_sequence`` / ``pack_sequence`` of tpu tensors raised a device mismatch: their
    lengths and batch sizes are CPU tensors by contract (as on CUDA)."""
    def lstm(d):
        torch.manual_seed(0)
        return torch.nn.LSTM(3, 5, batch_first=True).to(d)

    def gru(d):
        torch.manual_seed(0)
        return torch.nn.GRU(2, 3).to(d)

    x = rand(3, 4, 3)
    D.check(_packed_lstm, per_device(lambda d: x.clone().to(d).requires_grad_()), per_device(lstm),
            modes=EAGER, atol=1e-5, rtol=1e-5)
    D.check(_packed_gru, rand(2, 2), rand(3, 2, seed=3), per_device(gru), modes=["strict"], atol=1e-5,
            rtol=1e-5)


def _index_with_cpu(x, i, v):
    y = x[i] * 2 + x[i, None].sum()
    x[i] = v
    x.index_put_((i,), torch.ones(2, device=x.device), accumulate=True)
    return y, x * 1


def test_cpu_index_tensors_in_compiled_graphs():
    """``x[cpu_index]`` and ``x[cpu_index] = v`` (allowed by eager, as on CUDA) in a compiled function
    were refused ("a cpu tensor that aten.index.Tensor uses on the CPU"): the index is uploaded with
    the call. A CPU 0-dim value mixes with tpu tensors there too."""
    i = torch.tensor([1, 3])
    D.check(_index_with_cpu, rand(4), per_device(lambda d: i.clone()),
            per_device(lambda d: torch.tensor(7.0)), modes=ALL)


@pytest.mark.parametrize("mode", EAGER)
def test_random_ops_from_threads_draw_distinct_numbers(mode, monkeypatch):
    """Random ops from several threads at once: two threads could read the same RNG offset and draw
    the same numbers (the offset was read and advanced without a lock). The key making is slowed down
    so that threads switch in the middle of a draw."""
    from torch_tpu.runtime import rng

    real = rng.key_data

    def slow(*a):
        time.sleep(0.001)
        return real(*a)

    monkeypatch.setattr(rng, "key_data", slow)
    outs = {k: [] for k in range(4)}

    def draw(k):
        def run():
            for _ in range(15):
                outs[k].append(torch.randn(4, device="tpu").cpu())
        return run

    with _in_mode(mode):
        _run_threads([draw(k) for k in range(4)])
    values = [tuple(v.tolist()) for k in outs for v in outs[k]]
    assert len(set(values)) == len(values) == 60, "[wrong value] two draws were equal"

"""Fused eager (DEFER_AND_FUSE): deferral, flush points, graph caching, memory, errors, disk cache.

Numerical equality with CPU torch in this mode is covered where the other suites are parametrised
over ``eager_mode`` (aliasing, pipelines) and by ``test_op_matches_cpu_fused``.
"""
import json
import os
import subprocess
import sys
import tracemalloc

import pytest
import torch

import torch_tpu
from tests.harness import differential as D
from torch_tpu import EagerMode
from torch_tpu.engine import fused
from torch_tpu.runtime import disk_cache, prefetch

FUSE = EagerMode.DEFER_AND_FUSE


def test_ops_are_deferred_until_a_value_is_needed():
    a = torch.randn(8, 8)
    x = a.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        y = torch.relu(x @ x) + 1
        z = y.sum(dim=0)
        assert torch_tpu.stats()["flushes"] == 0 and fused.pending_nodes() >= 3
        out = z.cpu()  # the read flushes
        assert torch_tpu.stats()["flushes"] == 1 and fused.pending_nodes() == 0
    torch.testing.assert_close(out, (torch.relu(a @ a) + 1).sum(dim=0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("read", ["item", "tolist", "bool", "repr", "nonzero", "sync", "to_cpu_copy"])
def test_every_read_flushes_with_the_right_value(read):
    a = torch.tensor([[1.0, -2.0], [0.0, 4.0]])
    x = a.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = x * 3 - 1
        if read == "item":
            assert y[1, 1].item() == 11.0
        elif read == "tolist":
            assert y.tolist() == (a * 3 - 1).tolist()
        elif read == "bool":
            assert bool((y > 10).any())
        elif read == "repr":
            assert "11." in repr(y)
        elif read == "nonzero":  # output shape depends on values
            torch.testing.assert_close(torch.nonzero(y > 0).cpu(), torch.nonzero(a * 3 - 1 > 0))
        elif read == "sync":
            torch_tpu.sync()
            assert fused.pending_nodes() == 0
            torch.testing.assert_close(y.cpu(), a * 3 - 1)
        else:
            c = torch.empty(2, 2)
            c.copy_(y)
            torch.testing.assert_close(c, a * 3 - 1)


def test_mode_switches_and_environment():
    assert torch.tpu.eager_mode == EagerMode.DEFER_NEVER
    torch.tpu.eager_mode = FUSE
    try:
        x = torch.ones(3, device="tpu") * 2
        assert fused.pending_nodes() > 0
    finally:
        torch.tpu.eager_mode = EagerMode.DEFER_NEVER  # leaving fused mode runs pending work
    assert fused.pending_nodes() == 0
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    code = "import torch, torch_tpu; print(torch.tpu.eager_mode.name)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TORCH_TPU_DEFER_AND_FUSE="1"),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "DEFER_AND_FUSE"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        return x + torch.tanh(self.norm(self.lin(x))) * 0.1


def test_repeated_steps_hit_the_graph_cache_and_memory_stays_flat():
    torch.manual_seed(0)
    model = _Block()
    x_cpu = torch.randn(4, 32)
    ref = x_cpu.clone()
    with torch.no_grad():
        for _ in range(200):
            ref = model(ref)
    model.to("tpu")
    x = x_cpu.to("tpu")
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        for step in range(200):
            x = model(x)  # the outermost module call ends a graph: every step is the same graph
            x = x * 1.0
            if step == 20:
                prefetch.stop()  # the background threads (loading the last run's programs, writing
                torch_tpu.sync()
                disk_cache.flush_writes()  # new ones) allocate too: let them finish first
                torch_tpu.reset_stats()
                mem = torch.tpu.memory_allocated()
                tracemalloc.start()
                host0 = tracemalloc.get_traced_memory()[0]
            if step == 199:
                torch_tpu.sync()
                host1 = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
        stats = torch_tpu.stats()
        assert stats["compiles"] == 0, stats
        assert stats["flushes"] >= 170
        assert torch.tpu.memory_allocated() <= mem + 4096
        assert host1 - host0 < 1_000_000, f"host memory grew by {host1 - host0} bytes over 179 steps"
    torch.testing.assert_close(x.cpu(), ref, atol=1e-4, rtol=1e-4)


def test_dead_intermediates_are_not_materialised():
    x = torch.randn(16, 16).to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = x
        for _ in range(10):
            y = torch.sin(y) * 2 + 1  # 30 intermediates, only the last one stays alive
        torch_tpu.sync()
        nodes, outputs = fused.last_flush()
    assert nodes >= 30 and outputs == 1


def test_a_temporary_updated_in_place_is_not_materialised():
    """torch's rms_norm adds eps to its mean in place; the record kept to undo that write if the graph fails
    made the dead mean an output of every fused graph holding an RMSNorm (8 extra outputs per FLUX block)."""
    x = torch.randn(4, 8, 16)
    xt = x.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = torch.rms_norm(xt, (16,), eps=1e-6) * 2
        z = xt.pow(2).mean(-1, keepdim=True)
        z.add_(1.0)  # a write into a temporary, which dies before the flush
        w = xt * z.rsqrt()
        del z
        torch_tpu.sync()
        nodes, outputs = fused.last_flush()
    assert outputs == 2, (nodes, outputs)
    torch.testing.assert_close(y.cpu(), torch.rms_norm(x, (16,), eps=1e-6) * 2)
    torch.testing.assert_close(w.cpu(), x * (x.pow(2).mean(-1, keepdim=True) + 1).rsqrt())


def test_view_offsets_are_constants_of_a_graph_and_one_line_of_chunks_stays_constant():
    """A fused graph's view offsets are numbers of the graph like any other: constants of its program
    (a static slice for XLA, nothing copied to the device per launch), six chunks read on one line each a
    constant of its own; an offset that changes where it enters becomes an input (one more compile)."""
    emb = torch.randn(4, 24)
    et = emb.to("tpu")

    def step():
        parts = et.chunk(6, dim=-1)
        out = parts[0]
        for k, p in enumerate(parts[1:]):
            out = out + p * (k + 2)
        return out

    want = sum(p * (k + 1) for k, p in enumerate(emb.chunk(6, dim=-1)))
    with torch.tpu.set_eager_mode(FUSE):
        for _ in range(2):
            before = torch_tpu.stats()["cache_misses"]
            got = step()
            torch_tpu.sync()
            assert fused.last_flush_constants() >= 5  # the offsets (and the numbers 2..6)
        assert torch_tpu.stats()["cache_misses"] == before  # the second step: the same program
        torch.testing.assert_close(got.cpu(), want)
        rows = [(et[i] * 2).cpu() for i in range(4)]  # one place, a new offset each time
    for i, r in enumerate(rows):
        torch.testing.assert_close(r, emb[i] * 2)


def test_numbers_are_constants_until_they_change_where_they_enter():
    """A fused graph's Python numbers are constants of its program (XLA folds them; as one parameter each,
    a chain of 1000 ``v + 1`` compiled 7x slower, and every run copied each number to the device). A
    number whose value changes at its place in the code becomes an input: one more compile, then none."""
    x = torch.randn(16)
    xt = x.to("tpu")

    def step(v, k):
        v = v * 0.5 + 1.0  # the same numbers at every step
        return v - k / 10  # one that changes from step to step

    builds, constants = [], []
    with torch.tpu.set_eager_mode(FUSE):
        for k in range(4):
            torch_tpu.sync()
            before = torch_tpu.stats()["cache_misses"]
            out = step(xt, k)
            torch_tpu.sync()
            builds.append(torch_tpu.stats()["cache_misses"] - before)
            constants.append(fused.last_flush_constants())
            torch.testing.assert_close(out.cpu(), step(x, k))
    assert constants == [3, 2, 2, 2], constants
    assert builds[1:] == [1, 0, 0], builds


def test_a_constant_zero_changing_sign_is_another_number():
    """0.0 and -0.0 are equal numbers of other signs: a graph whose constant was 0.0 must not serve -0.0
    (``x * -0.0`` is -0.0 for a positive x), nor the reverse: where the sign changes, the number changes."""
    x = torch.tensor([1.0, -2.0, 3.0])
    calls = [D.named(f"x * {s!r}", lambda v, s=s: (v * s, torch.full_like(v, s))) for s in (0.0, -0.0, 0.0, -0.0)]
    D.check_sequence(calls, x, modes=["fused"], signed_zeros=True)


def test_recorded_ops_know_the_users_line_and_where_their_numbers_were_written():
    """A node names the user's file:line (error reports); a number's place is the innermost frame outside
    torch_tpu and torch's operator glue: the user's line for ``1 - x`` (``Tensor.__rsub__`` passed), the
    optimizer's own line for its step size (whichever user line calls ``step()``)."""
    import inspect

    x = torch.randn(4).to("tpu")
    p = torch.nn.Parameter(torch.randn(4).to("tpu"))
    p.grad = torch.randn(4).to("tpu")
    opt = torch.optim.SGD([p], lr=0.5)
    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.sync()
        line = inspect.currentframe().f_lineno + 1
        y = 1 - x * 0.25
        g = fused._graph()
        assert all(n.where[1] == f"{__file__}:{line}" for n in g.nodes), [n.where for n in g.nodes]
        assert {site[1] for site in g.number_sites.values()} == {(__file__, line)}
        torch_tpu.sync()
        opt.step()
        sites = {site[1][0] for site in fused._graph().number_sites.values()}
        assert sites and all(f"{os.sep}torch{os.sep}optim{os.sep}" in f for f in sites), sites
        torch_tpu.sync()
    torch.testing.assert_close(y.cpu(), 1 - x.cpu() * 0.25)


def test_a_number_that_changes_inside_one_graph_is_an_input_at_once():
    """A loop's counter enters one graph with many values: an input from the first compile on (no
    program per value), so the same loop again compiles nothing."""
    x = torch.randn(16)
    xt = x.to("tpu")

    def loop(v):
        for i in range(12):
            v = v * 0.75 + i
        return v

    with torch.tpu.set_eager_mode(FUSE):
        torch.testing.assert_close(loop(xt).cpu(), loop(x))
        # 0.75: the same at every step (12 uses, constants); the counter: an input at each of its 12 uses, its
        # first value's too, since it changes inside this graph
        assert fused.last_flush_constants() == 12
        torch_tpu.sync()
        before = torch_tpu.stats()["cache_misses"]
        torch.testing.assert_close(loop(xt).cpu(), loop(x))
        assert torch_tpu.stats()["cache_misses"] == before


def test_in_place_updates_of_live_tensors_are_flushed():
    base = torch.zeros(4, 4)
    b = base.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        b[1:3, 1:3] += 5
        v = b.t()
        v[0].fill_(-1)
    base[1:3, 1:3] += 5
    base.t()[0].fill_(-1)
    torch.testing.assert_close(b.cpu(), base)
    torch.testing.assert_close(v.cpu(), base.t())


def test_backward_through_fused_graphs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    x = torch.randn(5, 8)
    model(x).pow(2).mean().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        model(x.to("tpu")).pow(2).mean().backward()
        grads = [p.grad.cpu() for p in model.parameters()]
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def test_failing_op_is_named_with_its_user_location():
    from tests.harness.failing_ops import boom_op

    op = boom_op()
    x = torch.ones(3, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = x + 1
        z = op(y)  # the line the error must point at
        line = sys._getframe().f_lineno - 1
        with pytest.raises(RuntimeError) as info:
            z.cpu()
    msg = str(info.value)
    assert "tputest.boom" in msg and f"test_fused.py:{line}" in msg, msg


_CHILD = r"""
import json, torch, torch_tpu
from torch_tpu import EagerMode
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(48, 48), torch.nn.SiLU(), torch.nn.LayerNorm(48), torch.nn.Linear(48, 8)).to("tpu")
x = torch.randn(6, 48).to("tpu")
torch_tpu.reset_stats()
with torch.no_grad(), torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
    out = m(x).softmax(-1).cpu()
from torch_tpu.runtime import disk_cache
disk_cache.flush_writes()
print(json.dumps(torch_tpu.stats()))
"""


def test_persistent_cache_makes_a_second_process_compile_less(tmp_path):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["compiles"] > 0 and first["cache_loads"] == 0, first
    # the second process compiles nothing: every program (and every op's description) comes from disk
    assert second["compiles"] == 0 and second["cache_loads"] >= 1 and second["op_loads"] >= 1, second


def test_in_place_updates_reuse_the_buffer_memory(monkeypatch):
    rows = torch.arange(64 * 128, dtype=torch.float32).reshape(64, 128)
    buf = rows.to("tpu")
    keep = buf.clone()  # a second tensor: its buffer must never be donated
    monkeypatch.setenv("TORCH_TPU_FUSED_DONATE_INPLACE", "1")
    nbytes = 64 * 128 * 4
    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        for i in range(5):
            buf[i] = -1.0  # the old buffer is unreachable after the write: XLA may reuse it
            buf.mul_(2)
            torch_tpu.sync()
        donated = torch_tpu.stats()["donated_bytes"]
    expected = rows.clone()
    for i in range(5):
        expected[i] = -1.0
        expected.mul_(2)
    torch.testing.assert_close(buf.cpu(), expected)
    torch.testing.assert_close(keep.cpu(), rows)
    assert donated >= 5 * nbytes, donated


def test_by_default_only_dead_temporaries_are_donated():
    """An in-place write's old buffer is what a failed graph undoes to: kept unless opted in."""
    buf = torch.ones(64, 128, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        for _ in range(3):
            buf.mul_(2)
            torch_tpu.sync()
        assert torch_tpu.stats()["donated_bytes"] == 0
        tmp = buf * 3
        torch_tpu.sync()  # tmp is concrete now
        out = tmp + 1
        del tmp  # nothing but the pending graph holds tmp's buffer: safe to reuse
        torch_tpu.sync()
        assert torch_tpu.stats()["donated_bytes"] >= 64 * 128 * 4
    assert out.cpu().eq(25.0).all()


def test_a_failing_graph_behaves_like_the_failing_op_on_cpu():
    """Values before the failing op are computed, the failing op and everything after it fail with its
    name and line, and in-place writes from then on are undone; the device keeps working."""
    from tests.harness.failing_ops import boom_op

    op = boom_op()
    x = torch.ones(4, device="tpu")
    p = torch.full((4,), 5.0, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        before = x * 2
        p.add_(before)              # recorded before the failing op: kept
        bad = op(x); line = sys._getframe().f_lineno  # noqa: E702
        p.mul_(10)                  # after it: undone
        after = x + 1               # after it: never ran (as on CPU)
        with pytest.raises(fused.FusedGraphError) as info:
            torch_tpu.sync()
        assert "tputest.boom" in str(info.value) and f"test_fused.py:{line}" in str(info.value)
        torch.testing.assert_close(before.cpu(), torch.full((4,), 2.0))
        torch.testing.assert_close(p.cpu(), torch.full((4,), 7.0))
        for lost in (bad, after):
            with pytest.raises(fused.FusedGraphError, match="tputest.boom"):
                lost.cpu()
        torch.testing.assert_close((p * x).cpu(), torch.full((4,), 7.0))  # the device keeps working



def test_an_interrupted_forward_does_not_stop_module_exit_flushes():
    """A KeyboardInterrupt skips torch's always-called hooks; the next outermost call still ends its graph."""
    class Stop(torch.nn.Module):
        def forward(self, x):
            raise KeyboardInterrupt

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.stop, self.interrupt = torch.nn.Linear(4, 4), Stop(), True

        def forward(self, x):
            x = self.lin(x)
            if self.interrupt:
                self.stop(x)
            return x * 2

    m = Model().to("tpu")
    x = torch.ones(2, 4, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        with pytest.raises(KeyboardInterrupt):
            m(x)
        m.interrupt = False
        y = m(x)
        assert fused.pending_nodes() == 0  # flushed when the outermost call returned
    torch.testing.assert_close(y.cpu(), m.cpu()(torch.ones(2, 4)) * 1.0)

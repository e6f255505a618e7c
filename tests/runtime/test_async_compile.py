"""Fused eager compiles new graphs on background threads (``runtime/compile_pool.py``): a flushed graph
whose program is new waits in line while the program goes on recording; graphs launch in record order.

Each test holds the compile threads at a gate, so the graphs really wait, then checks the values
against CPU torch, the errors, the writes that a failure undoes, and an interrupt while waiting.
"""
import signal
import threading
import warnings

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu.engine import fused
from torch_tpu.runtime import program_cache

FUSE = EagerMode.DEFER_AND_FUSE


@pytest.fixture
def gate(monkeypatch):
    """Fused graphs' compiles on compile threads wait until ``gate.set()``; counts how many waited at once
    (strict ops' programs, compiled in the background too, are not held: see test_strict_line.py)."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "")  # every graph compiles (nothing from disk)
    monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "4")
    torch_tpu.reset_caches()
    original = program_cache._compile_and_keep
    event = threading.Event()
    state = {"now": 0, "most": 0, "background": 0}
    lock = threading.Lock()

    def held(lowered, done):
        if threading.current_thread() is not threading.main_thread() and done[0][0] == "fused":
            with lock:
                state["now"] += 1
                state["background"] += 1
                state["most"] = max(state["most"], state["now"])
            event.wait(60)
            with lock:
                state["now"] -= 1
        return original(lowered, done)

    monkeypatch.setattr(program_cache, "_compile_and_keep", held)
    event.state = state
    yield event
    event.set()
    torch_tpu.sync()


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def test_graphs_wait_for_their_programs_while_recording_goes_on(gate):
    torch.manual_seed(0)
    net, x = _Net(), torch.randn(4, 16)
    tnet, tx = _Net().to("tpu"), x.to("tpu")
    tnet.load_state_dict(net.state_dict())
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        y = tnet(tx)                 # a graph of its own (module exit): compiling, waiting
        z = (y * 3).softmax(-1)      # glue: recorded on y, a value still being computed
        w = tnet(z)                  # flushed at module entry and exit: more graphs waiting
        assert fused.waiting_graphs() >= 2
        assert gate.state["most"] >= 2  # several graphs compile at once
        gate.set()
        got_w, got_y = w.cpu(), y.cpu()
    assert fused.waiting_graphs() == 0
    with torch.no_grad():
        ey = net(x)
        ew = net((ey * 3).softmax(-1))
    torch.testing.assert_close(got_y, ey, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_w, ew, atol=1e-5, rtol=1e-5)


def test_in_place_updates_through_waiting_graphs_match_cpu(gate):
    a = torch.randn(6, 5)
    b = torch.randn(6, 5)
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        for t, u in ((a, b), (ta, tb)):
            t.mul_(2)
            v = t[1:4]              # a view of a value still being computed
            if t.device.type == "tpu":
                fused.flush()
            v.add_(u[:3])
            t.t()[0].clamp_(max=0.5)
            if t.device.type == "tpu":
                fused.flush()
                assert fused.waiting_graphs() >= 1
            s = t.sum(0)
        gate.set()
        got_a, got_s = ta.cpu(), (tb + ta.sum(0)).cpu()
    torch.testing.assert_close(got_a, a)
    torch.testing.assert_close(got_s, b + a.sum(0))


def test_the_same_graph_flushed_again_while_compiling_compiles_once(gate):
    x = torch.randn(8, 8)
    tx = x.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        outs = [tx]  # every graph's input is kept (one donation set: one program)
        for _ in range(3):
            tx = (tx @ tx.T).tanh()
            fused.flush()
            outs.append(tx)
        assert fused.waiting_graphs() == 3
        gate.set()
        got = [o.cpu() for o in outs]
    assert gate.state["background"] == 1 and torch_tpu.stats()["compiles"] == 1
    for g in got[1:]:
        x = (x @ x.T).tanh()
        torch.testing.assert_close(g, x, atol=1e-5, rtol=1e-5)


def test_a_background_compile_failure_runs_the_graph_op_by_op(gate, monkeypatch):
    held = program_cache._compile_and_keep

    def failing(lowered, done):
        if threading.current_thread() is not threading.main_thread():
            gate.wait(60)  # (held: else the graph may fail before the flush looks at it, and launch at once)
            raise RuntimeError("simulated XLA compile failure")
        return held(lowered, done)

    monkeypatch.setattr(program_cache, "_compile_and_keep", failing)
    x = torch.randn(5, 3)
    with torch.tpu.set_eager_mode(FUSE):
        y = (x.to("tpu") + 1).exp()
        fused.flush()
        assert fused.waiting_graphs() == 1
        gate.set()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = y.cpu()
    assert any("ran op by op" in str(w.message) for w in caught)
    torch.testing.assert_close(got, (x + 1).exp())


def test_an_earlier_graph_failing_fails_the_later_ones_and_undoes_their_writes(gate):
    from tests.harness.failing_ops import boom_op

    op = boom_op()
    p0 = torch.arange(4.0)
    x = torch.ones(4, device="tpu")
    p = p0.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = op(x + 1)        # fails while it runs
        fused.flush()
        p.add_(y)            # a later graph: reads y, writes p
        q = p * 2
        fused.flush()
        assert fused.waiting_graphs() == 2
        gate.set()
        with pytest.raises(RuntimeError, match="tputest.boom"):
            q.cpu()          # the first failure is the one raised
        with pytest.raises(RuntimeError, match="earlier graph"):
            q.cpu()
        with pytest.raises(RuntimeError, match="tputest.boom"):
            y.cpu()
        torch.testing.assert_close(p.cpu(), p0)  # as on CPU: p.add_ never ran
    assert fused.waiting_graphs() == 0


def test_an_interrupt_while_waiting_leaves_the_graph_in_line(gate):
    x = torch.randn(7)
    tx = x.to("tpu")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with torch.tpu.set_eager_mode(FUSE):
            y = (tx * 2).cumsum(0)
            fused.flush()
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                y.cpu()
            assert fused.waiting_graphs() == 1
            gate.set()
            got = y.cpu()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    torch.testing.assert_close(got, (x * 2).cumsum(0))


def test_sync_and_a_mode_change_launch_every_waiting_graph(gate):
    x = torch.randn(3, 3)
    tx = x.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        y = tx.sin()
        fused.flush()
        assert fused.waiting_graphs() == 1
        gate.set()
        torch_tpu.sync()
        assert fused.waiting_graphs() == 0
        z = y.cos()
        fused.flush()
    assert fused.waiting_graphs() == 0  # leaving fused mode launched it
    torch.testing.assert_close(z.cpu(), x.sin().cos())


def test_no_compile_threads_compiles_on_the_calling_thread(gate, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "0")
    x = torch.randn(4)
    with torch.tpu.set_eager_mode(FUSE):
        y = (x.to("tpu") - 1).abs()
        fused.flush()
        assert fused.waiting_graphs() == 0
        got = y.cpu()
    assert gate.state["background"] == 0
    torch.testing.assert_close(got, (x - 1).abs())


def test_training_steps_with_graphs_waiting_match_cpu(gate):
    torch.manual_seed(1)
    net, x, y = _Net(), torch.randn(8, 16), torch.randn(8, 16)
    tnet = _Net().to("tpu")
    tnet.load_state_dict(net.state_dict())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    topt = torch.optim.AdamW(tnet.parameters(), lr=1e-2)
    tx, ty = x.to("tpu"), y.to("tpu")
    losses, tlosses = [], []
    with torch.tpu.set_eager_mode(FUSE):
        for step in range(3):
            for model, o, a, b, out in ((net, opt, x, y, losses), (tnet, topt, tx, ty, tlosses)):
                o.zero_grad()
                loss = torch.nn.functional.mse_loss(model(a), b)
                loss.backward()       # backward reads values of graphs still compiling
                o.step()
                out.append(loss.detach())
            if step == 0:
                assert fused.waiting_graphs() >= 1
                gate.set()
        got = [t.cpu() for t in tlosses]
        params = {k: v.cpu() for k, v in tnet.state_dict().items()}
    torch.testing.assert_close(torch.stack(got), torch.stack(losses), atol=1e-5, rtol=1e-5)
    for k, v in net.state_dict().items():
        torch.testing.assert_close(params[k], v, atol=1e-5, rtol=1e-5)


def test_the_line_of_waiting_graphs_is_bounded(gate, monkeypatch):
    monkeypatch.setattr(fused, "_MAX_WAITING", 3)
    x = torch.randn(5)
    tx = x.to("tpu")
    waited = []

    def release_soon():
        gate.wait(0.5)
        gate.set()

    with torch.tpu.set_eager_mode(FUSE):
        threading.Thread(target=release_soon, daemon=True).start()
        for i in range(6):
            tx = tx * 2 + i  # one graph (one program) per step, all waiting for the first compile
            fused.flush()
            waited.append(fused.waiting_graphs())
        got = tx.cpu()
    assert max(waited) <= 3
    for i in range(6):
        x = x * 2 + i
    torch.testing.assert_close(got, x)


def test_leaving_fused_mode_when_a_waiting_graph_fails_still_leaves_it(gate):
    from tests.harness.failing_ops import boom_op

    op = boom_op()
    x = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="tputest.boom"):
        with torch.tpu.set_eager_mode(FUSE):
            y = op(x * 2)
            fused.flush()
            gate.set()
    assert torch.tpu.eager_mode == EagerMode.DEFER_NEVER  # the error did not keep the process fused
    with pytest.raises(RuntimeError, match="tputest.boom"):
        y.cpu()
    torch.testing.assert_close((x + 1).cpu(), torch.full((3,), 2.0))

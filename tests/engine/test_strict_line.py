"""Strict eager compiles new programs on compile threads while their ops wait in line
(``engine/strict_line.py``): values, order, errors, reads, views and in-place writes, device-side checks,
mode switches and threads, against CPU torch and against strict eager compiling on the calling thread.

Each test holds the compile threads at a gate, so the ops really wait in line.
"""
import threading

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu.engine import fused, launchers, strict_line
from torch_tpu.errors import DeviceAssertError, OpError
from torch_tpu.runtime import program_cache


@pytest.fixture
def gate(monkeypatch):
    """Strict programs' compiles on compile threads wait until ``gate.set()``; ``gate.state`` counts
    them; ``gate.state["fail"]``: a piece of a program key whose compile fails."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "")  # every program compiles (nothing from disk)
    monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "2")
    torch_tpu.sync()
    torch_tpu.reset_caches()
    original = program_cache._compile_and_keep
    event = threading.Event()
    state = {"background": 0, "main": 0, "fail": None, "broken": None}

    def held(lowered, done):
        if done[0][0] == "fused":  # fused graphs compile as ever (test_async_compile.py holds those)
            return original(lowered, done)
        if threading.current_thread() is threading.main_thread():
            state["main"] += 1
        else:
            state["background"] += 1
            event.wait(60)
        if state["fail"] is not None and state["fail"] in str(done[0]):
            raise OpError(f"tpu: XLA could not compile {done[5]}: simulated failure")
        prog = original(lowered, done)
        if state["broken"] is not None and state["broken"] in str(done[0]):
            def broken(*args):
                raise RuntimeError("simulated launch failure")
            return broken
        return prog

    monkeypatch.setattr(program_cache, "_compile_and_keep", held)
    event.state = state
    yield event
    event.set()
    try:
        torch_tpu.sync()
    except Exception:  # noqa: BLE001 - a test's failure was raised already
        pass


def test_ops_wait_in_line_and_run_in_order(gate):
    x = torch.randn(5, 7)
    tx = x.to("tpu")
    a = tx * 2
    b = (a + 1).exp()
    c = b.sum(1, keepdim=True) - a
    assert strict_line.waiting() >= 3 and launchers.current is launchers.LINE
    assert gate.state["main"] == 0
    gate.set()
    got = c.cpu()
    ea = x * 2
    torch.testing.assert_close(got, (ea + 1).exp().sum(1, keepdim=True) - ea)
    torch.testing.assert_close(b.cpu(), (ea + 1).exp())
    torch_tpu.sync()
    assert strict_line.waiting() == 0
    (tx + 1).cpu()  # the next op finds the line empty: plain strict eager again
    assert launchers.current is launchers.STRICT


def test_launches_follow_call_order_whatever_order_programs_arrive_in(gate, monkeypatch):
    order = []
    execute = strict_line.OpLaunch.execute

    def noted(self):
        order.append(self.name())
        return execute(self)

    monkeypatch.setattr(strict_line.OpLaunch, "execute", noted)
    x = torch.randn(4, 3)
    tx = x.to("tpu")
    tx.neg()          # compiled ahead: its program is ready before the ops below are called
    gate.set()
    program_cache.wait_in_flight()
    gate.clear()
    a = tx.exp()      # new: waits at the gate
    b = tx.neg()      # ready, but called after a: queued behind it
    c = a + b
    assert strict_line.waiting() == 3
    gate.set()
    got = c.cpu()
    assert order[-3:] == ["aten.exp.default", "aten.neg.default", "aten.add.Tensor"]
    torch.testing.assert_close(got, x.exp() - x)


def test_a_read_launches_the_line_up_to_its_value(gate):
    x = torch.randn(6)
    tx = x.to("tpu")
    y = tx.sin()
    z = tx.cos()
    gate.set()
    torch.testing.assert_close(y.cpu(), x.sin())
    assert strict_line.waiting() == 1  # z's op, called after y's, still waits
    assert float((z * 2).sum().item()) == pytest.approx(float((x.cos() * 2).sum()), rel=1e-5)


def test_the_same_program_while_compiling_compiles_once(gate):
    x = torch.randn(3, 4)
    tx = x.to("tpu")
    outs = [tx]
    for _ in range(4):
        outs.append(outs[-1].tanh())
    assert strict_line.waiting() == 4
    gate.set()
    got = [o.cpu() for o in outs[1:]]
    assert gate.state["background"] == 1
    for g in got:
        x = x.tanh()
        torch.testing.assert_close(g, x)


def test_a_cast_of_a_waiting_value_and_of_the_computed_value_share_one_program(gate):
    # a cast's key holds its source's dtype: a waiting value's (what the line's avals say: JAX's scalar
    # type, jnp.bool_) and a computed array's (np.dtype(bool)) must be one key. They were two, so a second
    # identical pipeline call compiled CLIP's ``(input_ids == eos).int()`` again (a new program every call)
    x = torch.randn(3, 4)
    waiting = (x.to("tpu") > 0).int()  # the comparison waits for its program: the cast's source is pending
    assert strict_line.waiting() >= 1
    gate.set()
    torch.testing.assert_close(waiting.cpu(), (x > 0).int())
    computed = x.to("tpu") > 0
    computed.cpu()  # (computed now)
    before = torch_tpu.stats()["compiles"]
    torch.testing.assert_close(computed.int().cpu(), (x > 0).int())
    assert torch_tpu.stats()["compiles"] == before


def test_views_and_in_place_writes_onto_waiting_values_match_cpu(gate):
    a = torch.randn(6, 5)
    b = torch.randn(6, 5)
    ta, tb = a.to("tpu"), b.to("tpu")
    for t, u in ((a, b), (ta, tb)):
        t.mul_(2)
        v = t[1:4]
        v.add_(u[:3])
        t.t()[0].clamp_(max=0.5)
        w = t.view(30)[3:9]
        w.sub_(1)
        s = t.sum(0)
    assert strict_line.waiting() > 0
    gate.set()
    torch.testing.assert_close(ta.cpu(), a)
    torch.testing.assert_close(s.cpu(), a.sum(0))
    torch.testing.assert_close(w.cpu(), a.view(30)[3:9])


def test_a_failing_compile_stops_the_line_there_and_undoes_later_writes(gate):
    gate.state["fail"] = "exp"
    x = torch.randn(4)
    p0 = torch.arange(4.0)
    tx, p = x.to("tpu"), p0.to("tpu")
    a = tx + 1           # runs
    b = a.exp()          # its compile fails
    p.add_(b)            # called after it: does not run, its write is undone
    d = a * 3            # independent, but called after the failing op: does not run either
    gate.set()
    with pytest.raises(OpError, match="XLA could not compile.*simulated failure"):
        d.cpu()          # the point that launches the line raises the failing op's error
    with pytest.raises(OpError, match="did not run"):
        d.cpu()
    with pytest.raises(OpError, match="simulated failure"):
        b.cpu()
    torch.testing.assert_close(a.cpu(), x + 1)
    torch.testing.assert_close(p.cpu(), p0)  # as strict eager: p.add_ never ran
    assert strict_line.waiting() == 0
    torch_tpu.sync()  # raised once, not again
    gate.state["fail"] = None
    torch.testing.assert_close((tx + 1).exp().cpu(), (x + 1).exp())  # compiled again, runs


def test_a_failing_compile_raises_at_the_next_op_that_finds_it(gate):
    gate.state["fail"] = "cosh"
    x = torch.randn(3)
    tx = x.to("tpu")
    y = tx.cosh()
    gate.set()
    program_cache.wait_in_flight()
    with pytest.raises(OpError, match="simulated failure"):
        tx * 5  # launches the line first: the earlier op's error, before this op runs
    gate.state["fail"] = None
    with pytest.raises(OpError, match="simulated failure"):
        y.cpu()
    torch.testing.assert_close((tx * 5).cpu(), x * 5)


def test_a_failing_launch_raises_strict_errors_where_the_line_reaches_it(gate):
    gate.state["broken"] = "atan"
    x = torch.randn(4)
    tx = x.to("tpu")
    y = tx.atan()
    z = tx + 2
    gate.set()
    with pytest.raises(OpError, match=r"atan.*failed to run: simulated launch failure"):
        torch.tpu.synchronize()
    with pytest.raises(OpError, match="did not run: aten.atan.default, called before it, failed"):
        z.cpu()
    with pytest.raises(OpError, match="failed to run"):
        y.cpu()
    torch_tpu.reset_caches()  # (forget the broken program)
    torch.testing.assert_close((tx + 2).cpu(), x + 2)


def test_a_failed_device_side_check_with_ops_waiting(gate):
    x = torch.randn(5, 3)
    idx = torch.tensor([0, 7])
    tx = x.to("tpu")
    z = tx[idx.to("tpu")]        # out of range: checked on the device
    w = z + 1                    # computed from it
    ok = tx * 2                  # not
    assert strict_line.waiting() > 0
    gate.set()
    with pytest.raises(DeviceAssertError, match="out of bounds|out of range|index"):
        torch.tpu.synchronize()
    with pytest.raises(DeviceAssertError):
        w.cpu()
    torch.testing.assert_close(ok.cpu(), x * 2)
    torch.tpu.synchronize()  # reported once


def test_a_check_held_while_waiting_is_read_at_the_next_wait(gate):
    x = torch.randn(5, 3)
    tx = x.to("tpu")
    z = tx[torch.tensor([4, 0]).to("tpu")]
    gate.set()
    torch.tpu.synchronize()
    torch.testing.assert_close(z.cpu(), x[[4, 0]])


@pytest.mark.parametrize("mode", [EagerMode.DEFER_AND_FUSE, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING])
def test_a_mode_switch_launches_the_line(gate, mode):
    x = torch.randn(4, 4)
    tx = x.to("tpu")
    y = tx.sigmoid() * 3
    assert strict_line.waiting() > 0
    gate.set()
    with torch.tpu.set_eager_mode(mode):
        assert strict_line.waiting() == 0
        z = y.t() @ y
        got = z.cpu()
    e = x.sigmoid() * 3
    torch.testing.assert_close(got, e.t() @ e, atol=1e-5, rtol=1e-5)


def test_launch_blocking_never_queues(gate):
    x = torch.randn(3, 3)
    with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        y = (x.to("tpu") * 4).erf()
        assert strict_line.waiting() == 0
        got = y.cpu()
    assert gate.state["background"] == 0 and gate.state["main"] >= 1
    torch.testing.assert_close(got, (x * 4).erf())


def test_no_compile_threads_compiles_at_the_op(gate, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "0")
    x = torch.randn(6)
    y = (x.to("tpu") - 2).abs()
    assert strict_line.waiting() == 0 and gate.state["background"] == 0
    torch.testing.assert_close(y.cpu(), (x - 2).abs())


def test_threads_queue_on_one_line(gate):
    xs = [torch.randn(8, 3) for _ in range(3)]
    txs = [x.to("tpu") for x in xs]
    results, errors = {}, []

    def work(k):
        try:
            t = txs[k]
            for _ in range(3):
                t = (t * 1.5).softmax(-1) + k
            results[k] = t
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for th in threads:
        th.start()
    release = threading.Timer(0.3, gate.set)
    release.start()
    for th in threads:
        th.join(60)
    release.join()
    assert not errors
    for k, x in enumerate(xs):
        for _ in range(3):
            x = (x * 1.5).softmax(-1) + k
        torch.testing.assert_close(results[k].cpu(), x)


def test_training_step_with_ops_waiting_matches_cpu(gate):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    tnet = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).to("tpu")
    tnet.load_state_dict(net.state_dict())
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    topt = torch.optim.SGD(tnet.parameters(), lr=0.1)
    losses = []
    for model, o, a, b in ((net, opt, x, y), (tnet, topt, x.to("tpu"), y.to("tpu"))):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(model(a), b)
        loss.backward()  # autograd's device thread queues its ops on the same line
        o.step()
        losses.append(loss.detach())
        if a.device.type == "tpu":
            assert strict_line.waiting() > 0
            gate.set()
    torch.testing.assert_close(losses[1].cpu(), losses[0], atol=1e-6, rtol=1e-5)
    for k, v in net.state_dict().items():
        torch.testing.assert_close(tnet.state_dict()[k].cpu(), v, atol=1e-6, rtol=1e-5)


def test_stats_count_what_ran_and_compiled(gate):
    x = torch.randn(2, 9)
    tx = x.to("tpu")
    torch_tpu.reset_stats()
    y = (tx * 3).log1p()
    assert torch_tpu.stats()["executions"] == 0 and torch_tpu.stats()["queued_ops"] == 2
    gate.set()
    y.cpu()
    st = torch_tpu.stats()
    assert st["executions"] == 2 and st["compiles"] == 2
    torch_tpu.reset_stats()  # (waits for compiles in flight: none counted after it)
    (tx * 3).log1p().cpu()
    assert torch_tpu.stats()["compiles"] == 0


def test_a_fused_value_and_a_waiting_value_meet(gate):
    x = torch.randn(4)
    tx = x.to("tpu")
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        f = tx * 7  # recorded, not run
    y = f + tx.exp()  # strict: takes the fused value (runs its graph), waits in line
    gate.set()
    torch.testing.assert_close(y.cpu(), x * 7 + x.exp())
    assert fused.pending_nodes() == 0

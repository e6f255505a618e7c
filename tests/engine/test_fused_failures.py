"""Failures inside fused graphs and interrupted module calls.

Fused eager records ops and runs them as one program. When that program (or its recording) fails:
  * the error must name the op that caused it (not another op of the graph),
  * every value that was pending and does not depend on the failing op must survive, in-place
    parameter updates included (donated input buffers must not be lost),
  * the device must keep working ("a deferred value was lost" must never follow),
exactly as CPU torch, where the ops before the failing one have run and the rest never ran.
A KeyboardInterrupt (or any exception) inside ``forward`` must not leave the module-depth counter
stuck (afterwards the end of each outermost module call flushes again).
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.compare import assert_same, read, sync
from tests.harness.errors import assert_device_works, _exc_text, is_clear
from tests.harness.inputs import DEV
from tests.harness.failing_ops import boom_everywhere_op

pytestmark = pytest.mark.usefixtures("watchdog")


@pytest.fixture
def fused():
    import torch_tpu

    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        yield


X = torch.arange(12, dtype=torch.float32).reshape(4, 3)
BAD = torch.tensor([0, 9])


def _fail_gather(x, i):
    return torch.gather(x, 0, i[:, None].expand(2, 3))


# A failing op in the middle of pending work: CPU raises at the failing op, with everything before it
# done. The harness then compares every input (including the in-place updated ones).
SCENARIOS = {
    "inplace_then_bad_index": lambda x, p, i: (p.add_(1), x[i]),
    "inplace_then_bad_gather": lambda x, p, i: (p.mul_(2), _fail_gather(x, i)),
    "inplace_then_bad_embedding": lambda x, p, i: (p.sub_(0.5), F.embedding(i, x)),
    "inplace_then_bad_index_put": lambda x, p, i: (p.add_(3), x.index_put_((i,), torch.tensor(1.0, device=x.device))),
    "inplace_then_bad_scatter_add": lambda x, p, i: (p.div_(2), x.scatter_add_(0, i[:, None].expand(2, 3),
                                                                              torch.ones(2, 3, device=x.device))),
    "chain_then_bad_index": lambda x, p, i: (p.copy_(p * 3 + x[:1]), x.index_select(0, i)),
    "two_inplace_then_bad": lambda x, p, i: (p.add_(1), x.mul_(2), x[i]),
    "bad_then_inplace": lambda x, p, i: (x[i], p.add_(1)),
    "inplace_then_shape_error": lambda x, p, i: (p.add_(1), x @ x),
    "inplace_then_dtype_error": lambda x, p, i: (p.add_(1), x @ x.T.double()),
    "inplace_then_no_lowering": lambda x, p, i: (p.add_(1), torch.histc(x, bins=3)),
    "inplace_then_python_error": lambda x, p, i: (p.add_(1), (_ for _ in ()).throw(ValueError("user code"))),
    "inplace_then_bad_cross_entropy": lambda x, p, i: (p.add_(1), F.cross_entropy(x[:2], i)),
    "inplace_then_bool_mask_shape": lambda x, p, i: (p.add_(1), x[torch.tensor([True, False], device=x.device)]),
    "inplace_then_item_of_bad": lambda x, p, i: (p.add_(1), x[i].sum().item()),
}


# Work issued AFTER a failing op: an index checked on the device fails asynchronously, so the ops issued
# after it and before the next wait still run (as on CUDA, whose device-side assert is also reported
# later); the error is then raised at the wait, naming the failing op. Only launch blocking stops at the
# op itself, as CPU torch does. Those scenarios are compared with CPU torch under launch blocking, and in
# fused mode with the asynchronous rule stated (test_work_after_a_failing_op_runs_until_the_wait).
AFTER_FAILURE = {"bad_then_inplace"}


@pytest.mark.parametrize("case", sorted(set(SCENARIOS) - AFTER_FAILURE))
def test_failure_keeps_pending_values(fused, case):
    """Same as CPU: the error is raised, every mutation made before it is kept, the device works."""
    D.check(SCENARIOS[case], X.clone(), torch.ones(3), BAD)


@pytest.mark.parametrize("case", sorted(AFTER_FAILURE))
def test_failure_stops_at_the_op_under_launch_blocking(case):
    D.check(SCENARIOS[case], X.clone(), torch.ones(3), BAD, modes=["blocking"])


def test_work_after_a_failing_op_runs_until_the_wait(fused):
    """Fused mode: ``x[bad]`` then ``p.add_(1)`` -- the error is raised at the read, naming the index op,
    and ``p.add_(1)`` ran (asynchronous device errors); every value stays readable."""
    x, p = X.clone().to(DEV), torch.ones(3).to(DEV)
    with pytest.raises(IndexError) as info:  # (CPU's class; the deferred DeviceAssertError is one)
        read(SCENARIOS["bad_then_inplace"](x, p, BAD.to(DEV)))
    assert is_clear(info.value) and "index" in str(info.value).lower(), f"[unclear error] {info.value}"
    assert_same(X, read(x), where="x")
    assert_same(torch.ones(3) + 1, read(p), where="p (its add_ was issued before the wait)")


def _run_then_fail_then_read(d, case):
    x, p = X.clone().to(d), torch.ones(3).to(d)
    err = None
    try:
        read(SCENARIOS[case](x, p, BAD.to(d)))
    except Exception as e:  # noqa: BLE001
        err = e
    return err, x, p


@pytest.mark.parametrize("case", ["inplace_then_bad_index", "inplace_then_bad_gather", "two_inplace_then_bad",
                                  "inplace_then_bad_scatter_add"])
def test_values_still_usable_after_failure(fused, case):
    """After the failed graph, the surviving tensors take part in new ops (never 'a deferred value was
    lost')."""
    err_c, xc, pc = _run_then_fail_then_read("cpu", case)
    err_t, xt, pt = _run_then_fail_then_read(DEV, case)
    assert err_c is not None
    assert err_t is not None, "[silent] the failing op returned a value"
    assert_same((xc * 2 + pc).sum(0), read((xt * 2 + pt).sum(0)), where="new work on the survivors")
    assert_same(pc, read(pt), where="parameter")


@pytest.mark.parametrize("case", ["inplace_then_bad_index", "inplace_then_bad_gather",
                                  "inplace_then_bad_embedding", "inplace_then_bad_cross_entropy"])
def test_error_names_the_failing_op(fused, case):
    """The error blames the op that failed (index/gather/embedding/nll), not the first op of the graph."""
    err, _, _ = _run_then_fail_then_read(DEV, case)
    assert err is not None, "[silent] no error"
    msg = str(err).lower()
    names = {"inplace_then_bad_index": ("index",), "inplace_then_bad_gather": ("gather",),
             "inplace_then_bad_embedding": ("embedding", "index_select", "index"),
             "inplace_then_bad_cross_entropy": ("nll", "cross_entropy", "target")}[case]
    assert any(n in msg for n in names), f"[unclear error] expected one of {names} in: {err}"
    assert "add_" not in msg and "aten.add" not in msg and "aten.mul" not in msg, f"[unclear error] blames another op: {err}"


def _opt_setup(d):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2).to(d)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    return m, opt


@pytest.mark.parametrize("opt_kind", ["adam", "sgd_momentum"])
def test_optimizer_step_then_failure_keeps_parameters(fused, opt_kind):
    """opt.step() pending (in-place updates of donated buffers), then a failing op: the parameters keep
    their updated values and a next step works."""
    def make_opt(params):
        return (torch.optim.Adam(params, lr=0.1) if opt_kind == "adam"
                else torch.optim.SGD(params, lr=0.1, momentum=0.9))

    _train_through_failure(make_opt, 2, lambda x, d, model: x[BAD.to(d)])


def test_repeated_failures_do_not_leak(fused):
    """Twenty failing graphs in a row leave device memory where it was."""
    import gc

    x = X.clone().to(DEV)
    read(x)
    gc.collect()
    sync()
    base = torch.tpu.memory_allocated()
    for _ in range(20):
        with pytest.raises(IndexError, match="index"):  # each one raises
            read((x * 2)[BAD.to(DEV)])
    gc.collect()
    sync()
    grown = torch.tpu.memory_allocated() - base
    assert grown <= 1024, f"[growth] device memory grew by {grown} bytes over 20 failed graphs"
    assert_device_works()


class _Interrupting(torch.nn.Module):
    def __init__(self, exc):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.exc = exc
        self.armed = True

    def forward(self, x):
        y = self.lin(x)
        if self.armed:
            self.armed = False
            raise self.exc
        return y * 2


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError, RuntimeError], ids=lambda e: e.__name__)
def test_exception_in_forward_resets_module_depth(fused, exc):
    """After ``forward`` raised, the end of the next outermost module call flushes again (the module
    depth went back to zero), and the results are right."""
    torch.manual_seed(0)
    m = _Interrupting(exc("stop")).to(DEV)
    x = X[:, :3].to(DEV)
    with pytest.raises(exc):
        m(x)
    import torch_tpu

    before = torch_tpu.stats()["flushes"]
    y = m(x)  # not read: only the end of the module call may flush
    after = torch_tpu.stats()["flushes"]
    assert after > before, ("[wrong value] the module call after an exception in forward did not flush at its end "
                            "(module-depth counter stuck)")
    torch.manual_seed(0)
    mc = _Interrupting(exc("stop"))
    mc.armed = False
    assert_same(mc(X[:, :3]), read(y), where="output", atol=1e-5, rtol=1e-5)


def test_exception_in_nested_forward(fused):
    """An exception in a nested module's forward, caught by the outer forward: outer still flushes at its end."""
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _Interrupting(ValueError("inner"))

        def forward(self, x):
            try:
                return self.inner(x)
            except ValueError:
                return x + 1

    import torch_tpu

    m = Outer().to(DEV)
    x = X[:, :3].to(DEV)
    before = torch_tpu.stats()["flushes"]
    y = m(x)
    after = torch_tpu.stats()["flushes"]
    assert after > before, "[wrong value] outer module call did not flush at its end"
    assert_same(X[:, :3] + 1, read(y), where="output")


def test_fused_graph_error_then_strict(fused):
    """A failed fused graph, then leaving fused mode: the mode switch must not raise the old error again
    nor lose values."""
    x = X.clone().to(DEV)
    x.add_(1)
    with pytest.raises(IndexError, match="index"):
        read(x[BAD.to(DEV)])
    import torch_tpu

    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER):
        assert_same(X + 1, read(x), where="value after the failed graph, in strict mode")


def test_large_pending_graph_with_one_bad_op(fused):
    """A long graph (200 ops) with one bad index in the middle: the error names the index op, and the
    values computed before it are intact."""
    def fn(x, i):
        acc = x
        outs = []
        for k in range(100):
            acc = acc * 1.01 + k
            outs.append(acc)
        bad = acc[i]
        for k in range(100):
            acc = acc - 1
        return outs[-1], bad, acc
    D.check(fn, X.clone(), BAD, match=r"(?i)index")


def test_nonfused_dependency_on_failed_value(fused):
    """A value computed from the failed op's result must raise too (never garbage)."""
    def fn(x, i):
        y = x[i]
        return (y * 2).sum()
    D.check(fn, X.clone(), BAD)


# ---------------------------------------------------------------------------------------------------
# a graph that fails while it runs (not at record time): a custom op whose lowering fails inside the program


BOOM_SCENARIOS = {
    "inplace_then_boom": lambda x, p: (p.add_(1), boom_everywhere_op()(x)),
    "values_then_boom": lambda x, p: (x * 2, p.mul_(3), boom_everywhere_op()(x + 1)),
    "chain_into_boom": lambda x, p: (p.copy_(p * 2 + 1), boom_everywhere_op()(p)),
    "inplace_on_input_then_boom": lambda x, p: (x.sub_(1), p.add_(x[0]), boom_everywhere_op()(x)),
}


@pytest.mark.parametrize("case", sorted(BOOM_SCENARIOS))
def test_failing_graph_keeps_pending_values(fused, case):
    """The failing program raises; every mutation recorded before the failing op keeps its value (as on
    CPU, where the failing op raised and nothing after it ran); the device keeps working."""
    boom_everywhere_op()
    D.check(BOOM_SCENARIOS[case], X.clone(), torch.ones(3), match=r"boom")


@pytest.mark.parametrize("case", sorted(BOOM_SCENARIOS))
def test_failing_graph_then_new_work(fused, case):
    """The scenario's pending work writes the model's weight (its ``p``) and an input before the failing op;
    after the failed graph, training goes on from the values CPU has (never 'a deferred value was lost')."""
    boom_everywhere_op()

    def failing(x, d, model):
        with torch.no_grad():  # (an in-place write of a parameter, as an optimizer's)
            return BOOM_SCENARIOS[case](x.clone(), model.weight)

    _train_through_failure(lambda params: torch.optim.Adam(params, lr=0.1), 1, failing)


def _train_through_failure(make_opt, warm_steps, failing):
    """Train a Linear a few steps, read a failing op's result, train one more step: on the tpu the error
    must come, the parameters right after it and after the next step must equal CPU's."""
    def run(d):
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2).to(d)
        opt = make_opt(m.parameters())
        x = X[:, :3].to(d)
        for _ in range(warm_steps):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        err = None
        try:
            read(failing(x, d, m))
        except Exception as e:  # noqa: BLE001
            err = e
        after_err = [p.detach().clone() for p in m.parameters()]
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        return err, after_err, [p.detach() for p in m.parameters()]

    ec, pc1, pc2 = run("cpu")
    try:
        et, pt1, pt2 = run(DEV)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"[device broken] training after the failed graph raised: {_exc_text(e)}")
    assert ec is not None and et is not None, f"[silent] {ec!r} {et!r}"
    assert_same(pc1, read(pt1), where="parameters right after the error", atol=1e-5, rtol=1e-5)
    assert_same(pc2, read(pt2), where="parameters after one more step", atol=1e-5, rtol=1e-5)

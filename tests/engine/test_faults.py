"""Fault injection: the N-th program compile or launch fails (RuntimeError, XLA's out of memory
as jax's ``JaxRuntimeError: RESOURCE_EXHAUSTED``, KeyboardInterrupt), and user code raises at awkward
points, in strict eager, fused eager and torch.compile. The promise: a clear Python exception naming the
aten op or the graph; every value that existed before stays readable with its value (CPU torch's up to
the failing op); later ops compute right; no state (pending graph, caches, the persistent cache) is stuck.

Faults are injected at JAX's own entry points (``jax.stages.Lowered.compile``, ``jax.stages.Compiled.
__call__``), which every executor's programs go through.

Found (fixed):
  * [crash] a KeyboardInterrupt (any BaseException) raised by an op inside a backward pass aborted the
    process ("terminate called without an active exception"): the router queued only Exceptions for the
    end of backward().
  * [lost value] fused: an interrupt while a graph waiting in line launched (its program running, an
    earlier graph's value awaited, its program's background compile interrupted) lost its values ("a
    deferred value was lost"); now it waits at the head of the line again (an interrupted compile: the
    graph runs op by op).
  * [lost value] fused: after a graph failed, a tensor a later (waiting) graph wrote raised a second,
    chained error at its next read before its undone value came back; a read now runs its own graph
    before raising the earlier graph's error, so the tensor reads its value after that one error.
  * [unclear error] XLA's compile errors leaked raw (a compiled backward graph: jaxlib's JaxRuntimeError),
    and a compile-time RESOURCE_EXHAUSTED (a program too large for the device) was "could not lower"
    instead of ``torch.OutOfMemoryError``; a compiled graph's failed launch raised XLA's error naming
    nothing. Both now name the program (aten op, fused or compiled graph).
  * [stuck state] a Ctrl-C landing inside jaxlib's weakref LRU cache (JAX tracing ``jnp.multiply``) left
    the key marked in flight: every later ``x * 2`` of that signature raised "RecursionError: Recursively
    calling" for good. An interrupt leaving the dispatcher or a program's tracing now empties JAX's caches.
  * [lost value] fused: a Ctrl-C landing inside a C callback during a flush (a SystemError caused by the
    KeyboardInterrupt) or while a flushed graph's values were put in line lost the graph's values.
Left: a SIGALRM storm over fused ops on new shapes once left a JAX tracer as a tensor's value (the
interrupt landed in ``validators.run`` of a new op; the next read raised "block_until_ready is not available
on traced array"): seen once in ~20 storms of 80 interrupts, not reproduced on demand, root not found.
Not backend bugs: ``as_subclass`` of a tpu tensor to a ``__torch_function__`` subclass raises (a separate
gap, no fault involved); try/except around a failing op inside a torch.compile'd function (dynamo cannot
catch an op's error while tracing; the compiled graph refuses the op as eager does).
Tried and held (kept below where cheap): the N-th launch/compile failing over an MLP+Adam training step
(every N, each kind, strict/fused/compiled: parameters and optimizer state at CPU's value before or after
the failing op, the next steps right), ``x[1:].mul_(2)`` then reading the base, a tiny Flux pipeline
(faults at several launches, a raising ``callback_on_step_end``), the persistent cache after faults
(a fresh process loads every program, none rejected, values right), SIGALRM interrupts while compiling new
shapes (strict and fused), errors in the middle of a fused graph, user hooks / custom autograd.Function
backward / generators closed early.
"""
import contextlib
import gc
import copy
import warnings

import pytest
import torch

from tests.harness import differential as D
from tests.harness.errors import is_clear
from tests.harness.inputs import rand
from tests.harness.isolated import assert_isolated_ok, run_isolated
from tests.harness.modes import _in_mode
import torch_tpu
from torch_tpu.eager import backward_errors
from torch_tpu.engine import fused

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
STRICT, FUSE = torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE


def _exc(kind):
    import jax

    return {"runtime": lambda: RuntimeError("injected failure"),
            "oom": lambda: jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to "
                                                      "allocate 4096 bytes."),
            "interrupt": KeyboardInterrupt}[kind]()


@contextlib.contextmanager
def fault(where, n, kind, sticky=False, when=lambda: True):
    """The ``n``-th program launch (``where="run"``) or XLA compile (``"compile"``) raises ``kind``
    (every later one too when ``sticky``); yields a dict whose "fired" says whether it did."""
    from jax import stages

    state = {"count": 0, "fired": False}
    attr = "__call__" if where == "run" else "compile"
    real = getattr(stages.Compiled if where == "run" else stages.Lowered, attr)

    def patched(self, *a, **k):
        if when():
            state["count"] += 1
            if state["count"] == n or (sticky and state["count"] > n):
                state["fired"] = True
                raise _exc(kind)
        return real(self, *a, **k)

    owner = stages.Compiled if where == "run" else stages.Lowered
    setattr(owner, attr, patched)
    try:
        yield state
    finally:
        setattr(owner, attr, real)


@pytest.fixture
def fresh(monkeypatch):
    """Every program compiles in this test (none from memory or disk)."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "")
    torch_tpu.reset_caches()
    yield
    torch_tpu.sync()


# ---------------------------------------------------------------------------------------------------
# an MLP training step with Adam: the N-th launch fails


torch.manual_seed(0)
_NET = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
_X, _Y = torch.randn(5, 4), torch.randn(5, 2)


def _state(net, opt):
    d = {f"p{i}": p.detach() for i, p in enumerate(net.parameters())}
    for i, p in enumerate(net.parameters()):
        for k, v in opt.state.get(p, {}).items():
            if torch.is_tensor(v) and k != "step":
                d[f"s{i}{k}"] = v
    return d


def _train(dev, steps, compiled=False, snaps=None):
    net = copy.deepcopy(_NET).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    fwd, step = net, opt.step
    if compiled:
        torch._dynamo.reset()
        fwd, step = torch.compile(net, backend="tpu"), torch.compile(opt.step, backend="tpu")
    snaps = [] if snaps is None else snaps
    ctx = {"net": net, "opt": opt}
    for _ in range(steps):
        snaps.append({k: v.cpu().clone() for k, v in _state(net, opt).items()})
        opt.zero_grad()
        torch.nn.functional.mse_loss(fwd(_X.to(dev)), _Y.to(dev)).backward()
        step()
    snaps.append({k: v.cpu().clone() for k, v in _state(net, opt).items()})
    return ctx


_REF: list = []
_train("cpu", 2, snaps=_REF)

# (mode, launch numbers): spread over forward, backward and the optimizer's ops of both steps
SWEEP = {"strict": (1, 6, 13, 20, 41), "fused": (1, 2, 3, 4), "compiled": (1, 5, 16)}


@pytest.mark.filterwarnings("ignore:tpu fused eager. a graph of:RuntimeWarning")
@pytest.mark.parametrize("kind", ["runtime", "oom", "interrupt"])
@pytest.mark.parametrize("mode", sorted(SWEEP))
def test_nth_launch_fails_in_a_training_step(mode, kind):
    for n in SWEEP[mode]:
        snaps, ctx, err = [], None, None
        with _in_mode(STRICT if mode == "compiled" else mode):
            # (an interrupt inside backward killed the process: tested in a child process below)
            with fault("run", n, kind, when=lambda: kind != "interrupt" or not backward_errors.in_backward()) as st:
                try:
                    _train("tpu", 2, compiled=mode == "compiled", snaps=snaps)
                except BaseException as e:  # noqa: BLE001
                    err = e
            assert st["fired"], f"launch {n} never happened"
            if err is None:  # fused: the graph ran op by op (a warning), every value computed
                continue
            if not isinstance(err, KeyboardInterrupt):
                assert is_clear(err), f"[unclear error] launch {n}: {type(err).__module__}.{err!r}"
                if kind == "oom":
                    assert isinstance(err, torch.OutOfMemoryError), repr(err)
            tb = err.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_name == "_train":
                    ctx = tb.tb_frame.f_locals["ctx"]
                tb = tb.tb_next
            del err, tb
            before, after = _REF[len(snaps) - 1], _REF[len(snaps)]
            for k, v in _state(ctx["net"], ctx["opt"]).items():
                got = v.cpu()
                if k not in before:  # optimizer state made by the failing step
                    continue
                ok = [torch.allclose(got, ref[k], atol=1e-5) for ref in (before, after) if k in ref]
                ok.append("exp_avg_sq" in k and torch.allclose(got, before[k] * 0.999, atol=1e-6))
                assert any(ok), f"[wrong value] launch {n} ({kind}): {k} is neither CPU's before nor after"
        # the same sequence again, whole: CPU's values
        with _in_mode(STRICT if mode == "compiled" else mode):
            again = []
            _train("tpu", 2, compiled=mode == "compiled", snaps=again)
        for k, v in _REF[-1].items():
            torch.testing.assert_close(again[-1][k], v, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# an op's failure inside a backward pass: any exception leaves backward(), none aborts the process


def test_an_interrupt_raised_by_an_op_in_backward_leaves_backward():
    proc = run_isolated("""
        import torch_tpu.eager.backward_errors as be
        from jax import stages
        real = stages.Compiled.__call__
        fired = []
        def call(self, *a, **k):
            if be.in_backward() and not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return real(self, *a, **k)
        w = torch.arange(6.0).reshape(2, 3).to("tpu").requires_grad_()
        # its programs compiled first: a new program's op waits in line while it compiles in the
        # background, and would run after backward returned
        (w.sin() * 3).sum().backward()
        torch.tpu.synchronize()
        w.grad = None
        stages.Compiled.__call__ = call
        try:
            (w.sin() * 3).sum().backward()
        except KeyboardInterrupt:
            pass
        stages.Compiled.__call__ = real
        assert fired
        w.grad = None
        (w * 2).sum().backward()
        assert torch.equal(w.grad.cpu(), torch.full((2, 3), 2.0))
        print("OK", flush=True)
        # not through interpreter teardown: after an interrupt inside backward, a C++ thread torch left
        # joinable is sometimes destroyed at exit ("terminate called without an active exception", about
        # one run in 20 of the suite); what this test checks is that backward raised and the next one works
        import os
        os._exit(0)
    """, env={"TORCH_TPU_CACHE_DIR": ""})
    assert_isolated_ok(proc)


# ---------------------------------------------------------------------------------------------------
# fused eager: interrupts and failures of graphs waiting in line


def test_an_interrupted_launch_of_a_waiting_graph_keeps_its_values(fresh):
    x = torch.randn(6)
    with torch.tpu.set_eager_mode(FUSE):
        tx = x.to("tpu")
        y = (tx * 2).exp()
        tx.add_(1)
        fused.flush()  # its program compiles on a compile thread: the graph waits in line
        with fault("run", 1, "interrupt") as st:
            with pytest.raises(KeyboardInterrupt):
                y.cpu()
        assert st["fired"]
        torch.testing.assert_close(y.cpu(), (x * 2).exp())
        torch.testing.assert_close(tx.cpu(), x + 1)
        torch.testing.assert_close((tx * y).cpu(), (x + 1) * (x * 2).exp())


def test_an_interrupted_background_compile_runs_the_graph_op_by_op(fresh):
    x = torch.randn(6)
    with torch.tpu.set_eager_mode(FUSE):
        tx = x.to("tpu")
        with fault("compile", 1, "interrupt") as st:
            y = (tx - 1).cos()
            tx.mul_(3)
            with pytest.raises(KeyboardInterrupt):
                y.cpu()
        assert st["fired"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # ("ran op by op instead")
            torch.testing.assert_close(y.cpu(), (x - 1).cos())
        torch.testing.assert_close(tx.cpu(), x * 3)
        assert fused.waiting_graphs() == 0


def test_a_tensor_a_failed_graph_wrote_reads_its_value_after_one_error(fresh):
    """Every launch fails (a device out of memory): the forward's graph fails; the optimizer's later graph
    did not run and undoes its writes. The first read raises the forward's error, the weight then reads
    the value it had (it raised a second error first)."""
    net = copy.deepcopy(_NET)
    w0 = net[0].weight.detach().clone()
    with torch.tpu.set_eager_mode(FUSE):
        net = net.to("tpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with fault("run", 1, "runtime", sticky=True):
            torch.nn.functional.mse_loss(net(_X.to("tpu")), _Y.to("tpu")).backward()
            opt.step()
            with pytest.raises(RuntimeError, match="aten.addmm.*injected failure"):
                net[0].weight.cpu()
        torch.testing.assert_close(net[0].weight.detach().cpu(), w0)
        out = net(_X.to("tpu")).detach().cpu()
    torch.testing.assert_close(out, _NET(_X).detach(), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# compile failures: named, out of memory as torch's, nothing cached


@pytest.mark.parametrize("mode", ["strict", "compiled"])
def test_a_compile_out_of_memory_is_torchs_error(mode, fresh):
    x = torch.randn(4, 3)
    w = x.to("tpu").requires_grad_()

    def f(t):
        return (t.sin() * t).sum()

    fn = torch.compile(f, backend="tpu") if mode == "compiled" else f
    if mode == "compiled":
        torch._dynamo.reset()
    loss = fn(w)
    torch_tpu.sync()  # the forward's programs compiled (strict ops compile on compile threads, in the background)
    # the next compile is the first program of the backward pass (a compiled backward graph compiles then)
    with fault("compile", 1, "oom") as st:
        with pytest.raises(torch.OutOfMemoryError, match="out of memory compiling (aten|compiled)"):
            loss.backward()
    assert st["fired"]
    w.grad = None
    fn(w).backward()
    xr = x.clone().requires_grad_()
    f(xr).backward()
    torch.testing.assert_close(w.grad.cpu(), xr.grad)


def test_a_failed_compiled_launch_names_the_graph_and_writes_nothing(fresh):
    net = copy.deepcopy(_NET).to("tpu")
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    torch._dynamo.reset()
    step = torch.compile(opt.step, backend="tpu")
    torch.nn.functional.mse_loss(net(_X.to("tpu")), _Y.to("tpu")).backward()
    step()  # compiles and runs
    before = [p.detach().cpu().clone() for p in net.parameters()]
    for kind, err in (("oom", torch.OutOfMemoryError), ("runtime", RuntimeError)):
        with fault("run", 1, kind):
            with pytest.raises(err, match="compiled graph") as info:
                step()
        assert is_clear(info.value)
        for p, b in zip(net.parameters(), before):
            torch.testing.assert_close(p.detach().cpu(), b)
    step()
    ref = copy.deepcopy(_NET)
    ropt = torch.optim.Adam(ref.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(ref(_X), _Y).backward()
    ropt.step()
    ropt.step()
    for p, r in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), r.detach(), atol=1e-5, rtol=1e-5)


def test_the_persistent_cache_keeps_no_failed_program(monkeypatch, tmp_path):
    """Compiles failing at each point of a sequence, then the memory caches emptied (as a new process):
    every program comes from disk or compiles again, none rejected, the values right."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    torch_tpu.reset_caches()
    from torch_tpu.runtime import counters, disk_cache

    def seq():
        b = torch.arange(6.0).reshape(3, 2).to("tpu")
        b[1:].mul_(2)
        return (b.exp() @ b.T).cpu()

    b = torch.arange(6.0).reshape(3, 2)
    b[1:].mul_(2)
    expected = b.exp() @ b.T
    for n in range(1, 8):
        torch_tpu.reset_caches()
        with fault("compile", n, "oom") as st:
            with contextlib.suppress(RuntimeError):  # (torch.OutOfMemoryError is one)
                seq()
        if not st["fired"]:
            break
    disk_cache.flush_writes(30.0)
    torch_tpu.reset_caches()
    rejects = counters.counters["cache_rejects"]
    torch.testing.assert_close(seq(), expected)
    assert counters.counters["cache_rejects"] == rejects


# ---------------------------------------------------------------------------------------------------
# user code raising at awkward points, then more work (compared with CPU torch)


class _Int(BaseException):
    """Not an Exception, as KeyboardInterrupt."""


def _custom_backward_raises(exc):
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise exc("boom in backward")

    def case(w, x):
        w = w.requires_grad_()
        y = Fn.apply(w * x).sum() + (w ** 2).sum()
        with pytest.raises((RuntimeError, _Int), match="boom"):  # (on each device: it must raise)
            y.backward()
        w.grad = None
        (w ** 3).sum().backward()
        return w.grad

    return case


def _hooks_raise(x):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()).to(x.device)
    h = m[0].register_forward_pre_hook(lambda mod, a: (_ for _ in ()).throw(KeyboardInterrupt()))
    x.add_(1)
    with contextlib.suppress(KeyboardInterrupt):
        m(x)
    h.remove()
    h = m.register_forward_hook(lambda mod, a, o: (_ for _ in ()).throw(ValueError("forward hook")))
    with contextlib.suppress(ValueError):
        m(x)
    h.remove()
    x.mul_(2)
    out = m(x)
    if x.device.type == "tpu" and torch.tpu.eager_mode == FUSE:
        assert fused.pending_nodes() == 0, "the module call did not end its graph (depth counter stuck)"
    return out


def _generator_closed_early(x):
    def gen():
        with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16):
            for _ in range(5):
                x.add_(1)
                yield x @ x.T

    it = gen()
    a, b = next(it), next(it)
    it.close()
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled(x.device.type)
    return a.float(), b.float(), x @ x.T


def _errors_mid_graph(x, p):
    p.add_(1)
    x[1:].mul_(2)
    with contextlib.suppress(RuntimeError):
        torch.cat([x, p], 0)  # shape error
    with contextlib.suppress(RuntimeError):
        torch.bitwise_and(x, x)  # dtype refusal
    with contextlib.suppress(IndexError, RuntimeError):
        x[torch.tensor([0, 7], device=x.device)] = 1.0  # bad index (checked on the device)
        if x.device.type == "tpu":
            torch.tpu.synchronize()
    p.sub_(x[0])
    return x.relu() @ x.T, p


USER_CASES = {
    "custom_function_backward_raises": (_custom_backward_raises(RuntimeError), (rand(4, 3), rand(4, 3, seed=2))),
    "custom_function_backward_interrupt": (_custom_backward_raises(_Int), (rand(4, 3), rand(4, 3, seed=2))),
    "module_hooks_raise": (_hooks_raise, (rand(4, 3),)),
    "generator_closed_early": (_generator_closed_early, (rand(4, 3),)),
    "errors_in_the_middle_of_a_graph": (_errors_mid_graph, (rand(4, 3), torch.ones(3))),
}


@pytest.mark.parametrize("case", sorted(USER_CASES))
def test_user_code_raising(case):
    fn, args = USER_CASES[case]
    tol = {"atol": 2e-2, "rtol": 2e-2} if case == "generator_closed_early" else {}
    D.check(fn, *args, modes=["strict", "fused"], **tol)


# ---------------------------------------------------------------------------------------------------
# a Ctrl-C landing inside JAX's tracing


def test_an_interrupt_inside_jaxs_trace_cache_does_not_stick(fresh, monkeypatch):
    """jaxlib's weakref LRU cache calls a Python ``explain`` callback on a miss; a KeyboardInterrupt
    delivered there left the key marked as being computed, and every later trace of that function raised
    "RecursionError: Recursively calling" (seen with SIGALRM storms: ``x * 2`` failed for good). The
    interrupt lands at each miss of a new op's trace in turn."""
    from jax._src import util

    real = util.config
    state = {"n": 0, "count": 0}

    class _Flag:
        @property
        def value(self):
            state["count"] += 1
            if state["count"] == state["n"]:
                raise KeyboardInterrupt
            return real.explain_cache_misses.value

    class _Config:
        explain_cache_misses = _Flag()

        def __getattr__(self, name):
            return getattr(real, name)

    with _in_mode("strict"):
        for n in range(1, 12):
            x = torch.randn(20 + n)
            tx = x.to("tpu")
            state.update(n=n, count=0)
            # no garbage collection while the interrupt is armed: JAX's gc callback reads the same flag, and
            # an interrupt landing there is swallowed as unraisable and poisoned a later test's traces
            collecting = gc.isenabled()
            gc.disable()
            try:
                monkeypatch.setattr(util, "config", _Config())
                with contextlib.suppress(KeyboardInterrupt):
                    (tx * 2.5).cpu()
            finally:
                monkeypatch.setattr(util, "config", real)
                if collecting:
                    gc.enable()
            torch.testing.assert_close((tx * 2.5).cpu(), x * 2.5)
            torch.testing.assert_close((tx * 3.5 + 1).exp().cpu(), (x * 3.5 + 1).exp())


def test_an_interrupt_inside_a_c_callback_during_a_flush_keeps_the_graph(monkeypatch):
    """A Ctrl-C landing inside numpy's call of JAX's scalar-type dtype callback (while a flush chose the
    buffers to donate) reaches Python as a SystemError caused by the KeyboardInterrupt: the flush's values
    were lost ("a deferred value was lost"), as only a bare interrupt kept the graph pending."""
    real = fused._donatable
    fired = []

    def interrupted(*a, **k):
        if not fired:
            fired.append(1)
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as exc:
                raise SystemError("returned a result with an exception set") from exc
        return real(*a, **k)

    x = torch.randn(5)
    with torch.tpu.set_eager_mode(FUSE):
        tx = x.to("tpu")
        y = tx.exp()
        tx.add_(1)
        monkeypatch.setattr(fused, "_donatable", interrupted)
        with pytest.raises(SystemError):
            torch_tpu.sync()
        assert fired
        torch.testing.assert_close(y.cpu(), x.exp())
        torch.testing.assert_close(tx.cpu(), x + 1)

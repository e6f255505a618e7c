"""How the runtime's pieces meet user code (threads, mode switches, hooks,
dispatch modes, custom ops, lifetimes, errors in the middle), compared with CPU torch.

Cases (each tagged with the failure it guards against):
  * [crash] any Python exception a user hook raised inside a backward pass over tpu tensors aborted the
    process ("terminate called without an active exception"): tensor hooks, post-accumulate-grad hooks,
    module backward (pre-)hooks, legacy module backward hooks, saved-tensor unpack hooks, checkpoint's
    recomputation, a user TorchDispatchMode raising on a backward op. The error now leaves backward().
  * [tpu raised] / [wrong value] a ``torch.library`` custom op's kernel for the tpu device
    (``register_kernel("tpu")``) was never called: the op raised "no lowering" or ran its default
    implementation; under torch.compile it raised (and a mutating custom op met an unexpected
    ``auto_functionalized`` node).
  * [growth] view programs, view metadata, layout checks, cast programs and fused-graph bookkeeping were
    unbounded dicts: every new shape added entries forever.
  * [silent] ``torch.tpu.set_eager_mode(mode)`` called as a function (not ``with``) did nothing.
  * [tpu raised] ``with torch.tpu.set_eager_mode(...)`` inside a torch.compile'd function: dynamo traced
    the mode switch and the fused flush into its graph and failed over JAX tracers.
  * [lost value] a KeyboardInterrupt inside a fused flush before its program ran (or while its
    results were filled in) lost every pending value of the graph ("deferred value was lost").
  * [crash] caches.Bounded evicting from two threads at once raised KeyError.
Every case compares with CPU torch and runs in one crash-tolerant child process.
"""
import threading

import pytest
import torch

from tests.harness import differential as D
from tests.harness.errors import expected_failure, Gap
from tests.harness.inputs import per_device, rand
from tests.harness.isolated import assert_isolated_result, isolated_fixture, param_of
from tests.harness.modes import _in_mode

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
EAGER = ["strict", "fused"]
ALL = ["strict", "fused", "compiled"]
X = rand(3, 4)


def _leaf():
    return per_device(lambda d: X.clone().to(d).requires_grad_())


def _boom(*_):
    raise RuntimeError("boom from a user hook")


class _Interrupt(BaseException):
    """Not an Exception (as KeyboardInterrupt): must still leave backward() as itself."""


def _interrupt(*_):
    raise _Interrupt("interrupted in a hook")


# ---------------------------------------------------------------------------------------------------
# a user hook raising inside a backward pass: the error leaves backward() (it aborted the process)


def _tensor_hook(x):
    y = x * 2
    y.register_hook(_boom)
    (y.sin()).sum().backward()


def _leaf_hook(x):
    x.register_hook(_boom)
    (x * x).sum().backward()


def _post_accumulate_hook(x):
    x.register_post_accumulate_grad_hook(_boom)
    (x.exp()).sum().backward()


def _linear(d):
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).to(d)


def _module_full_hook(m, x):
    m.register_full_backward_hook(_boom)
    m(x).sum().backward()


def _module_pre_hook(m, x):
    m.register_full_backward_pre_hook(_boom)
    m(x).sum().backward()


def _module_legacy_hook(m, x):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.register_backward_hook(_boom)
        m(x).sum().backward()


def _unpack_hook(x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, _boom):
        y = (x * x.sin()).sum()
    y.backward()


def _checkpoint_recompute(x):
    from torch.utils.checkpoint import checkpoint

    calls = [0]

    def f(a):
        calls[0] += 1
        if calls[0] == 2:  # the recomputation inside backward
            raise RuntimeError("boom in recomputation")
        return a.sin() * a

    checkpoint(f, x, use_reentrant=False).sum().backward()


def _dispatch_mode(x):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mul.Tensor and torch._C._current_graph_task_id() != -1:
                raise RuntimeError("boom from a dispatch mode")
            return func(*args, **(kwargs or {}))

    y = x.sin().sum()
    with Refuse():
        y.backward()


def _interrupt_hook(x):
    y = x.tanh()
    y.register_hook(_interrupt)
    try:
        y.sum().backward()
    except _Interrupt as e:
        return torch.tensor(str(e) == "interrupted in a hook")
    return torch.tensor(False)


def _then_continue(raising):
    """``raising(x)`` fails inside backward; the same leaf then trains on, as on CPU."""
    def run(x):
        try:
            raising(x)
            ok = False
        except RuntimeError:
            ok = True
        x.grad = None
        y = x.detach().clone().requires_grad_()
        (y.cos() * 3).sum().backward()
        return torch.tensor(ok), y.grad, x.detach() * 2
    return run


def _module_then_continue(m, x):
    h = m.register_full_backward_hook(_boom)
    try:
        m(x).sum().backward()
        ok = False
    except RuntimeError:
        ok = True
    h.remove()
    m.zero_grad()
    x.grad = None
    out = m(x)
    (out * out).sum().backward()
    return torch.tensor(ok), out, m.weight.grad, m.bias.grad, x.grad


HOOK_CASES = {
    "tensor_hook": lambda: D.check(_tensor_hook, _leaf(), modes=EAGER, expect_raise=True),
    "leaf_hook": lambda: D.check(_leaf_hook, _leaf(), modes=EAGER, expect_raise=True),
    "post_accumulate_hook": lambda: D.check(_post_accumulate_hook, _leaf(), modes=EAGER, expect_raise=True),
    "module_full_hook": lambda: D.check(_module_full_hook, per_device(_linear), _leaf(), modes=EAGER,
                                        expect_raise=True),
    "module_pre_hook": lambda: D.check(_module_pre_hook, per_device(_linear), _leaf(), modes=EAGER,
                                       expect_raise=True),
    "module_legacy_hook": lambda: D.check(_module_legacy_hook, per_device(_linear), _leaf(), modes=EAGER,
                                          expect_raise=True),
    "unpack_hook": lambda: D.check(_unpack_hook, _leaf(), modes=EAGER, expect_raise=True),
    "checkpoint_recompute": lambda: D.check(_checkpoint_recompute, _leaf(), modes=EAGER, expect_raise=True),
    "dispatch_mode": lambda: D.check(_dispatch_mode, _leaf(), modes=EAGER, expect_raise=True),
    "interrupt_hook": lambda: D.check(_interrupt_hook, _leaf(), modes=EAGER),
    "tensor_hook_then_continue": lambda: D.check(_then_continue(_tensor_hook), _leaf(), modes=EAGER),
    "unpack_hook_then_continue": lambda: D.check(_then_continue(_unpack_hook), _leaf(), modes=EAGER),
    "module_hook_then_continue": lambda: D.check(_module_then_continue, per_device(_linear), _leaf(),
                                                 modes=EAGER, atol=1e-5, rtol=1e-5),
}


def _grad_fn_hook(x):
    y = x * 2
    y.grad_fn.register_hook(_boom)
    y.sum().backward()


# hooks registered on a C++ autograd node (``grad_fn.register_hook`` / ``register_prehook``) are called
# by torch's C++ with no Python entry point to guard: still aborts the process
class _MyParam(torch.nn.Parameter):
    pass


def _param_subclass_kept(m):
    """``module.to("tpu")`` keeps a Parameter subclass, as ``.to("cuda")`` does: torch's Module._apply
    builds a plain ``Parameter`` when the tpu tensor is not shallow-copy compatible with the CPU one."""
    return torch.tensor(isinstance(m.weight, _MyParam)), m.weight.detach()


def _param_subclass_module(d):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    m.weight = _MyParam(m.weight.detach().clone())
    return m.to(d)


GAP_CASES = {
    "grad_fn_hook": lambda: D.check(_grad_fn_hook, _leaf(), modes=EAGER, expect_raise=True),
    "param_subclass_kept": lambda: D.check(_param_subclass_kept, per_device(_param_subclass_module),
                                           modes=EAGER),
}


# ---------------------------------------------------------------------------------------------------
# torch.library custom ops with a tpu kernel: the user's kernel runs, in every mode

_OPS = {}


def _custom_ops():
    """Defined once per process (a library namespace cannot be defined twice)."""
    if _OPS:
        return _OPS

    @torch.library.custom_op("hostile_interplay::scaled", mutates_args=(), device_types="cpu")
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    @scaled.register_fake
    def _(x):
        return torch.empty_like(x)

    calls = []

    @scaled.register_kernel("tpu")
    def _(x):  # the same math another way: through the host
        calls.append(1)
        return (x.cpu() * 3 + 1).to(x.device)

    scaled.register_autograd(lambda ctx, g: g * 3, setup_context=lambda ctx, inputs, output: None)

    @torch.library.custom_op("hostile_interplay::accumulate", mutates_args=("acc",))
    def accumulate(x: torch.Tensor, acc: torch.Tensor) -> None:
        acc.add_(x * 2)

    @accumulate.register_fake
    def _(x, acc):
        return None

    _OPS.update(scaled=scaled, calls=calls, accumulate=accumulate)
    return _OPS


def _custom_kernel_called():
    ops = _custom_ops()

    def fn(x):
        y = ops["scaled"](x.sin())
        (y * y).sum().backward()
        return y, x.grad

    before = len(ops["calls"])
    D.check(fn, _leaf(), modes=ALL, atol=1e-5, rtol=1e-5)
    assert len(ops["calls"]) - before >= 3, "the tpu kernel was not called in every mode"


def _custom_mutating():
    ops = _custom_ops()

    def fn(x, acc):
        ops["accumulate"](x * 1.5, acc)
        return acc * 2

    D.check(fn, X.clone(), torch.ones(3, 4), modes=ALL)


def _custom_library_impl():
    lib = torch.library.Library("hostile_interplay_lib", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    lib.impl("twice", lambda x: x + x, "PrivateUse1")
    try:
        D.check(lambda x: torch.ops.hostile_interplay_lib.twice(x) - 1, X.clone(), modes=EAGER)
    finally:
        lib._destroy()


CUSTOM_CASES = {
    "custom_op_tpu_kernel": _custom_kernel_called,
    "custom_op_mutating": _custom_mutating,
    "library_impl_privateuse1": _custom_library_impl,
}


# ---------------------------------------------------------------------------------------------------
# bounded in-memory caches: many distinct shapes never grow any cache past its bound


def _bounded_caches():
    import os

    from torch_tpu.runtime import caches

    limit = int(os.environ["TORCH_TPU_MAX_CACHED_PROGRAMS"])
    for mode in ("strict", "fused"):
        with _in_mode(mode):
            for n in range(2, 2 + 3 * limit // 2):
                x = torch.arange(n, dtype=torch.float32).to("tpu")
                v = x[1::2]
                v.add_(1)
                assert x.cpu().tolist() == [float(i + (i % 2)) for i in range(n)]
    # per-op and per-warning tables are bounded by the op set, not by shapes
    # and the call-site tables by the code that records ops (bounded on their own: 65536)
    by_ops = {"op routes", "scalar slots", "cpu fallback warnings", "key texts", "call site frames",
              "number site frames", "call site lines"}
    sizes = {k: v for k, v in caches.sizes().items() if k not in by_ops}
    over = {k: v for k, v in sizes.items() if v > limit}
    assert not over, f"[growth] caches past their bound {limit}: {over}"


def _bounded_concurrent_eviction():
    from torch_tpu.runtime import caches

    b = caches.Bounded(lambda: 16)
    errors = []

    def fill(k):
        try:
            for i in range(5000):
                b[(k, i)] = i
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    import sys

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=fill, args=(k,)) for k in range(4)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
    finally:
        sys.setswitchinterval(old)
    assert not errors, f"[crash] concurrent eviction raised {errors[:2]}"
    assert len(b) <= 16


GROWTH_CASES = {
    "bounded_caches": _bounded_caches,
    "bounded_concurrent_eviction": _bounded_concurrent_eviction,
}


# ---------------------------------------------------------------------------------------------------
# threads and mode switches (these held: kept as guards)


def _threads_share_pending(mode):
    """Threads consume values another thread left pending, synchronize and switch modes meanwhile."""
    def run():
        a = X.clone()
        with _in_mode(mode):
            ta = a.to("tpu")
            tb = ta * 2 + 1
            tb.add_(3)
            out, errors = {}, []

            def consume(k):
                try:
                    y = tb
                    for i in range(10):
                        y = (y @ tb.t() @ tb).tanh() + k
                    out[k] = y.cpu()
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

            threads = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
            threads.append(threading.Thread(target=torch.tpu.synchronize))
            [t.start() for t in threads]
            [t.join(60) for t in threads]
            assert not any(t.is_alive() for t in threads), "[hang] a thread did not finish"
            assert not errors, errors
        cb = a * 2 + 4
        for k in range(3):
            y = cb
            for i in range(10):
                y = (y @ cb.t() @ cb).tanh() + k
            torch.testing.assert_close(out[k], y, atol=1e-4, rtol=1e-4)
    return run


def _switch_with_pending(x):
    """Pending in-place writes through views, an autograd graph built in fused mode and run backward in
    strict mode (and back)."""
    with _in_mode("fused"):
        y = x * 2
        v = y[1:]
        v.mul_(3)
        loss = (y.sin() * x).sum()
    with _in_mode("strict"):
        v.add_(1)
        loss.backward(retain_graph=True)
    with _in_mode("fused"):
        loss.backward()
    return y, v, x.grad


def _plain_call_switches():
    """``torch.tpu.set_eager_mode(mode)`` called without ``with`` switches (it silently did nothing: a
    generator context manager never started), and as a context manager still restores the old mode."""
    import torch_tpu
    from torch_tpu.engine import fused

    E = torch_tpu.EagerMode
    torch.tpu.eager_mode = E.DEFER_NEVER
    try:
        torch.tpu.set_eager_mode(E.DEFER_AND_FUSE)
        assert torch.tpu.eager_mode is E.DEFER_AND_FUSE
        x = X.clone().to("tpu")
        y = x * 2 + 1
        assert fused.pending_nodes() > 0, "fused mode did not defer"
        with torch.tpu.set_eager_mode(E.DEFER_NEVER):
            assert torch.tpu.eager_mode is E.DEFER_NEVER
            z = y.exp()
        assert torch.tpu.eager_mode is E.DEFER_AND_FUSE
        torch.testing.assert_close(z.cpu(), (X * 2 + 1).exp())
    finally:
        torch.tpu.eager_mode = E.DEFER_NEVER


def _mode_switch_in_compiled(x):
    """A mode switch and a synchronize inside a compiled function: dynamo inlined them and traced the
    fused graph's flush into its graph (a FusedGraphError over JAX tracers); now a graph break."""
    import torch_tpu

    b = x.sin()
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        b = b + 1
        b.mul_(3)
    torch.tpu.synchronize()
    torch_tpu.sync()
    return b * 2, b.sum()


def _interrupted_flush():
    """Ctrl-C inside a flush before the program ran (here: while its output set is chosen): the
    pending values stay pending and read correctly afterwards (they were lost: "a deferred value was
    lost (internal error)")."""
    import torch_tpu
    from torch_tpu.engine import fused

    real = fused._outputs_for
    fired = []

    def interrupt_once(*a, **k):
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real(*a, **k)

    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        m = torch.nn.Linear(4, 4).to("tpu")
        x = X.clone().to("tpu")
        y = x.exp()
        x.add_(1)
        fused._outputs_for = interrupt_once
        try:
            with pytest.raises(KeyboardInterrupt):
                torch_tpu.sync()
        finally:
            fused._outputs_for = real
        out = m(x)  # the module hooks read and flush the restored graph
        w, b = m.weight.detach().cpu(), m.bias.detach().cpu()
        torch.testing.assert_close(y.cpu(), X.exp())
        torch.testing.assert_close(x.cpu(), X + 1)
        torch.testing.assert_close(out.detach().cpu(), (X + 1) @ w.t() + b)


def _interrupt_storm():
    """SIGALRM raising KeyboardInterrupt at random points of a fused loop of module calls and in-place
    writes: the counter always equals the number of completed writes (or one more), nothing is lost.
    Under no_grad: with autograd recording, a signal can still abort the process in torch's C++ (see
    the report: PythonDeviceGuard::getStream called with the interrupt pending), which no Python code
    of ours sees."""
    import random
    import signal

    import torch_tpu

    def handler(sig, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, handler)
    random.seed(0)
    n = interrupts = 0
    try:
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE), torch.no_grad():
            acc = torch.zeros(3, device="tpu")
            m = torch.nn.Linear(3, 3).to("tpu")
            for trial in range(25):
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0.0005, 0.01))
                try:
                    for i in range(100):
                        m(acc.unsqueeze(0))
                        acc.add_(1)
                        n += 1
                        if i % 17 == 0:
                            acc.cpu()
                except KeyboardInterrupt:
                    interrupts += 1
                except SystemError as exc:
                    # the signal landed inside a C extension's callback (numpy asking JAX's scalar type
                    # for its dtype): CPython reports "returned a result with an exception set", chained
                    # to the KeyboardInterrupt; the values must hold all the same
                    if not isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                        raise
                    interrupts += 1
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                v = acc.cpu()[0].item()
                assert v in (n, n + 1), f"[wrong value] counter {v}, completed writes {n}"
                n = int(v)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert interrupts > 0


THREAD_CASES = {
    "interrupted_flush": _interrupted_flush,
    "interrupt_storm": _interrupt_storm,
    "mode_switch_in_compiled": lambda: D.check(_mode_switch_in_compiled, X.clone(), modes=["compiled"]),
    "plain_call_switches": _plain_call_switches,
    "threads_share_pending_fused": _threads_share_pending("fused"),
    "threads_share_pending_strict": _threads_share_pending("strict"),
    "switch_with_pending": lambda: D.check(_switch_with_pending, _leaf(), modes=["strict"], atol=1e-5, rtol=1e-5),
}


ISOLATED_CASES = {}
ISOLATED_CASES.update({f"hook:{k}": v for k, v in HOOK_CASES.items()})
ISOLATED_CASES.update({f"gap:{k}": v for k, v in GAP_CASES.items()})
ISOLATED_CASES.update({f"custom:{k}": v for k, v in CUSTOM_CASES.items()})
ISOLATED_CASES.update({f"thread:{k}": v for k, v in THREAD_CASES.items()})


def _case_of_item(item):
    cs = getattr(item, "callspec", None)
    return cs.params.get("name") if cs is not None and item.originalname in ("test_case", "test_gap") else None


results = isolated_fixture(__file__, _case_of_item, timeout_per_case=120)
# in a child of its own: a small program bound, so that a few dozen shapes pass it
growth_results = isolated_fixture(__file__, param_of("test_growth"), timeout_per_case=120,
                                    env={"TORCH_TPU_MAX_CACHED_PROGRAMS": "24"})


@pytest.mark.parametrize("name", [n for n in ISOLATED_CASES if not n.startswith("gap:")])
def test_case(results, name):
    assert_isolated_result(results, name)


_GAP_REASONS = {
    "gap:grad_fn_hook": Gap("a hook on a C++ autograd node (grad_fn.register_hook) that raises in a tpu "
                              "backward still aborts the process: torch calls it with no Python entry point to "
                              "guard", r"\[crash\]"),
    "gap:param_subclass_kept": Gap("module.to('tpu') turns a Parameter subclass into a plain Parameter (torch's "
                                     "Module._apply: the tpu wrapper is not shallow-copy compatible): the case's "
                                     "isinstance check is False on the tpu",
                                     r"\[wrong value\] result \(mode strict\)\[0\] \(torch.bool\[\]\): CPU "
                                     r"\[True\], tpu \[False\]"),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=gap.mark()) for n, gap in _GAP_REASONS.items()])
def test_gap(results, name):
    with expected_failure(_GAP_REASONS[name]):
        assert_isolated_result(results, name)


@pytest.mark.parametrize("name", list(GROWTH_CASES))
def test_growth(growth_results, name):
    assert_isolated_result(growth_results, name)


ISOLATED_CASES.update({f"{k}": v for k, v in GROWTH_CASES.items()})

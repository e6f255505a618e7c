"""Differential harness: run the same Python function on CPU torch and on the "tpu" device and demand
the same observable behaviour.

A case passes when either
  * both devices raise, the tpu a *clear* Python exception (not SystemError, not a raw jax/jaxlib error,
    with a non-empty message) of CPU's class or a subclass of it (the class is the contract: code catches
    ``IndexError``, ``ValueError``, ``NotImplementedError``), raised by the call or, at the latest, by the
    forced read that follows it; the intended differences are listed in ``INTENDED_ERROR_DIFFERENCES``, or
  * both return the same structure, with equal dtype, shape, requires_grad and values (NaN-aware;
    -0.0 versus +0.0 too with ``signed_zeros=True``; strides with ``check_stride=True``), and the
    inputs the function mutated in place hold equal values afterwards.

The tpu side is always *read*: every result and every input is copied to the host and the device is
synchronised inside the same ``try``, so errors that the backend defers (fused graphs, asynchronous
dispatch) surface in the case that caused them. After a tpu exception the device must still work.

This module holds helpers only (no tests). Tests import it as ``from tests.harness import differential as D``.

Failure messages start with a tag so a run can be catalogued by kind:
  [wrong value] [wrong dtype] [wrong shape] [wrong structure] [wrong requires_grad] [wrong stride]
  [wrong type]            a Python scalar of another type (int vs float vs bool)
  [mutation mismatch]     an input mutated in place differs afterwards
  [silent]                CPU raised, tpu returned a value
  [lost value]            after both raised, an input the tpu should have kept cannot be read
  [tpu raised]            tpu raised, CPU returned a value
  [unclear error]         both raised, but the tpu exception is not a clear Python exception / no match
  [wrong error class]     both raised, the tpu exception is not of CPU's class (nor a listed difference)
  [late error]            the tpu error was required at the call (launch blocking, bool masks) but came later
  [device broken]         after a tpu exception, a trivial op no longer works
  [recompiles] [growth]   compile / cache counters grew where they must not
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable, Iterable, Sequence

import pytest
import torch
from torch.utils import _pytree as pytree

import torch_tpu
from tests.harness import REPO, hangs

DEV = "tpu"

# ----------------------------------------------------------------------------------------------------
# tolerances

_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}


def tolerance(dtype: torch.dtype, atol=None, rtol=None) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``: exact for integers and bool; ``atol``/``rtol`` may be numbers or
    {dtype: number} dicts that override the defaults."""
    a, r = _TOL.get(dtype, (0.0, 0.0))
    if isinstance(atol, dict):
        a = atol.get(dtype, a)
    elif atol is not None and (dtype.is_floating_point or dtype.is_complex):
        a = atol
    if isinstance(rtol, dict):
        r = rtol.get(dtype, r)
    elif rtol is not None and (dtype.is_floating_point or dtype.is_complex):
        r = rtol
    return a, r


# ----------------------------------------------------------------------------------------------------
# inputs


@dataclasses.dataclass
class PerDevice:
    """An argument built separately on each device: ``make(device) -> value`` (a view of a fresh
    tensor, a module, an optimizer...). ``make`` must build new objects on every call (``t.to("cpu")``
    returns ``t`` itself: clone first)."""
    make: Callable[[str], Any]


def per_device(make: Callable[[str], Any]) -> PerDevice:
    return PerDevice(make)


def noncontig(t: torch.Tensor) -> PerDevice:
    """``t`` (a CPU tensor) as a transposed view of a contiguous tensor on each device (same values,
    non-contiguous strides). 0/1-dim tensors become a strided (step 2) slice."""
    t = t.detach()
    if t.dim() >= 2:
        base = t.transpose(-1, -2).contiguous()
        return PerDevice(lambda d: base.clone().to(d).transpose(-1, -2))
    wide = torch.stack([t, torch.zeros_like(t)], -1).reshape(-1) if t.dim() == 1 else t.reshape(1)
    if t.dim() == 0:
        return PerDevice(lambda d: t.clone().to(d))
    return PerDevice(lambda d: wide.clone().to(d)[::2])


def _copy_tensor(t: torch.Tensor, device: str, memo: dict) -> torch.Tensor:
    key = id(t)
    if key in memo:
        return memo[key]
    base = t._base
    if base is not None and not t.requires_grad:
        # a view: copy its base once (views of one base share storage on the device too), then re-view
        b = _copy_tensor(base, device, memo)
        out = b.as_strided(t.size(), t.stride(), t.storage_offset())
    else:
        src = t.detach()
        if device == "cpu":
            out = src.clone()  # preserve_format keeps dense strides
        else:
            out = src.to(device)
        if t.requires_grad:
            out.requires_grad_(True)
    memo[key] = out
    return out


def materialise(args, device: str, memo: dict | None = None):
    """Copies of ``args`` on ``device``: tensors copied (identity preserved: a tensor passed twice is
    one tensor on the device), PerDevice built, everything else passed through."""
    memo = {} if memo is None else memo

    def one(a):
        if isinstance(a, PerDevice):
            return a.make(device)
        if isinstance(a, torch.Tensor):
            return _copy_tensor(a, device, memo)
        if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
            return type(a)(one(x) for x in a)
        if isinstance(a, dict):
            return {k: one(v) for k, v in a.items()}
        return a

    return [one(a) for a in args]


def _tensor_leaves(tree) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


# ----------------------------------------------------------------------------------------------------
# reading and comparing


class _Host:
    """A tpu value copied to the host, with what the comparison needs."""

    def __init__(self, t: torch.Tensor):
        self.device = t.device
        self.dtype = t.dtype
        self.shape = tuple(t.shape)
        self.stride = t.stride() if t.layout == torch.strided else None
        self.requires_grad = t.requires_grad
        self.value = t.detach().to("cpu")


def read(tree):
    """Copy every tensor of ``tree`` to the host (forcing deferred work to run and its errors to
    surface); Python values pass through."""
    def one(x):
        if isinstance(x, torch.Tensor):
            return _Host(x)
        return x
    return pytree.tree_map(one, tree, is_leaf=_is_size)


def _is_size(x) -> bool:
    return isinstance(x, torch.Size)


def sync():
    """Wait for the device (and flush a fused graph)."""
    torch_tpu.sync()
    torch.tpu.synchronize()


def _fmt(t: torch.Tensor, n=12) -> str:
    flat = t.reshape(-1)
    s = flat[:n].tolist()
    return f"{s}{'...' if flat.numel() > n else ''}"


def assert_same_value(exp, got, *, where="result", atol=None, rtol=None, signed_zeros=False,
                      check_stride=False, check_requires_grad=True):
    """``exp``: the CPU value (tensor or Python value); ``got``: the tpu value read by ``read``."""
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, _Host):
            pytest.fail(f"[wrong structure] {where}: CPU gave a tensor, tpu gave {type(got).__name__}: {got!r}")
        if got.dtype != exp.dtype:
            pytest.fail(f"[wrong dtype] {where}: CPU {exp.dtype}, tpu {got.dtype} "
                        f"(CPU {_fmt(exp.detach())}, tpu {_fmt(got.value)})")
        if got.shape != tuple(exp.shape):
            pytest.fail(f"[wrong shape] {where}: CPU {tuple(exp.shape)}, tpu {got.shape}")
        if check_requires_grad and got.requires_grad != exp.requires_grad:
            pytest.fail(f"[wrong requires_grad] {where}: CPU {exp.requires_grad}, tpu {got.requires_grad}")
        if check_stride and exp.layout == torch.strided and got.stride != exp.stride():
            pytest.fail(f"[wrong stride] {where}: CPU {exp.stride()}, tpu {got.stride}")
        e = exp.detach()
        g = got.value
        if e.is_quantized or e.layout != torch.strided:
            e = e.to_dense()
        a, r = tolerance(e.dtype, atol, rtol)
        if e.dtype == torch.bool or not (e.dtype.is_floating_point or e.dtype.is_complex):
            if not torch.equal(e, g):
                bad = (e != g).nonzero()[:4].tolist()
                pytest.fail(f"[wrong value] {where} ({e.dtype}{list(e.shape)}): CPU {_fmt(e)}, tpu {_fmt(g)}; "
                            f"first mismatches at {bad}")
            return
        try:
            torch.testing.assert_close(g, e, atol=a, rtol=r, equal_nan=True, check_dtype=False,
                                       check_device=False, check_layout=False, check_stride=False)
        except AssertionError as err:
            pytest.fail(f"[wrong value] {where} ({e.dtype}{list(e.shape)}): CPU {_fmt(e)}, tpu {_fmt(g)}\n"
                        f"{str(err).splitlines()[0:6]}")
        if signed_zeros and not e.is_complex():
            ef, gf = e.float(), g.float()
            zero = ef == 0
            if zero.any() and not torch.equal(torch.signbit(ef[zero]), torch.signbit(gf[zero])):
                pytest.fail(f"[wrong value] {where}: signed zeros differ: CPU {_fmt(e)}, tpu {_fmt(g)}")
        return
    if isinstance(got, _Host):
        pytest.fail(f"[wrong structure] {where}: CPU gave {type(exp).__name__} {exp!r}, tpu gave a tensor")
    if isinstance(exp, (bool, int, float, complex)) and not isinstance(exp, torch.SymInt):
        if type(exp) is not type(got):
            pytest.fail(f"[wrong type] {where}: CPU {type(exp).__name__} {exp!r}, tpu {type(got).__name__} {got!r}")
        if isinstance(exp, float) and math.isnan(exp):
            if not math.isnan(got):
                pytest.fail(f"[wrong value] {where}: CPU nan, tpu {got!r}")
            return
        if isinstance(exp, (float, complex)):
            if exp == got and not (signed_zeros and isinstance(exp, float) and exp == 0):
                return  # infinities too (inf - inf is nan)
            a, r = atol if isinstance(atol, (int, float)) else 1e-6, rtol if isinstance(rtol, (int, float)) else 1e-5
            if not abs(exp - got) <= a + r * abs(exp):
                pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")
            if signed_zeros and isinstance(exp, float) and exp == 0 and math.copysign(1, exp) != math.copysign(1, got):
                pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r} (sign of zero)")
            return
        if exp != got:
            pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")
        return
    if isinstance(exp, torch.device):
        return  # devices differ by construction
    if exp != got:
        pytest.fail(f"[wrong value] {where}: CPU {exp!r}, tpu {got!r}")


def assert_low_precision_close(got: torch.Tensor, cpu_low: torch.Tensor, cpu_fp32: torch.Tensor, *,
                               where: str = "result", steps: float = 1.0) -> None:
    """A bfloat16/float16 result of many ops against CPU torch's, by the rule the pipeline tests follow
    (integrations/test_pipelines.py): results of different, equally valid op orders and fusions differ by about
    CPU's own low-precision error from float32, so the tpu's may be at most 1.5x as far from CPU's float32 result
    as CPU's low-precision one is, and within 2x that error of CPU's low-precision result, plus ``steps`` of the
    dtype's relative step at the result's scale (a result CPU computes exactly still rounds once). A wrong op
    is off by the values' own scale, far past CPU's error."""
    got, low, ref = (t.detach().cpu().double() for t in (got, cpu_low, cpu_fp32))
    if got.shape != ref.shape:
        pytest.fail(f"[wrong shape] {where}: CPU {tuple(ref.shape)}, tpu {tuple(got.shape)}")
    cpu_err = float((low - ref).abs().max())
    step = steps * torch.finfo(cpu_low.dtype).eps * float(ref.abs().max())
    to_ref, to_low = float((got - ref).abs().max()), float((got - low).abs().max())
    text = (f"{where} ({cpu_low.dtype}): max |tpu - CPU float32| = {to_ref:.3g}, max |tpu - CPU {cpu_low.dtype}| = "
            f"{to_low:.3g}, CPU's own error max |CPU {cpu_low.dtype} - CPU float32| = {cpu_err:.3g}, one step "
            f"at the result's scale {step:.3g}")
    if not (to_ref <= 1.5 * cpu_err + step and to_low <= 2 * cpu_err + step):
        pytest.fail(f"[wrong value] {text}")


def assert_same(exp_tree, got_tree, *, where="result", **kw):
    exp_leaves, exp_spec = pytree.tree_flatten(exp_tree, is_leaf=_is_size)
    got_leaves, got_spec = pytree.tree_flatten(got_tree, is_leaf=lambda x: isinstance(x, _Host) or _is_size(x))
    if len(exp_leaves) != len(got_leaves) or (exp_spec != got_spec and len(exp_leaves) > 1):
        pytest.fail(f"[wrong structure] {where}: CPU {exp_spec}, tpu {got_spec}")
    for i, (e, g) in enumerate(zip(exp_leaves, got_leaves)):
        assert_same_value(e, g, where=where if len(exp_leaves) == 1 else f"{where}[{i}]", **kw)


# ----------------------------------------------------------------------------------------------------
# errors

# Every (case, CPU exception, tpu exception) where both raised: the report lists them.
RAISED: list[tuple[str, str, str]] = []
_LOG = os.environ.get("TORCH_TPU_DIFF_LOG")


def _record(cpu_exc, tpu_exc):
    case = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    row = (case, f"{type(cpu_exc).__name__}: {str(cpu_exc).splitlines()[0][:200] if str(cpu_exc) else ''}",
           f"{type(tpu_exc).__name__}: {str(tpu_exc).splitlines()[0][:300] if str(tpu_exc) else ''}")
    RAISED.append(row)
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(" | ".join(row) + "\n")


def _leaked_from(exc: BaseException) -> str | None:
    """The library an exception was raised inside, when that is jax/jaxlib/numpy (an error of the
    lowering leaking out unwrapped, its message naming no aten op); None otherwise."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    if last is None:
        return None
    for lib in ("/jax/", "/jaxlib/", "/numpy/"):
        if lib in last:
            return lib.strip("/")
    return None


def is_clear(exc: BaseException) -> bool:
    """A clear error: an ordinary Python exception with a message, not SystemError (a C-level
    failure), not an exception type from jax/jaxlib, and not raised inside jax/jaxlib/numpy (a
    lowering's own error leaking out unwrapped, naming no aten op)."""
    if not isinstance(exc, Exception) or isinstance(exc, SystemError):
        return False
    mod = type(exc).__module__ or ""
    if mod.startswith(("jax", "jaxlib")):
        return False
    if _leaked_from(exc) is not None:
        return False
    return bool(str(exc).strip())


@dataclasses.dataclass(frozen=True)
class ErrorDifference:
    """A place where the tpu raises another class than CPU torch, on purpose: ``tpu`` (a class, or its dotted
    name, looked up only once its module is loaded) where CPU raises ``cpu``, in ``mode`` (None: any);
    ``wraps_cpu``: the tpu error must wrap an error of CPU's class (``__cause__``, dynamo's ``inner_exception``)."""
    cpu: type
    tpu: type | str
    mode: str | None
    wraps_cpu: bool
    why: str

    def tpu_class(self):
        if not isinstance(self.tpu, str):
            return self.tpu
        module, _, name = self.tpu.rpartition(".")
        return getattr(sys.modules.get(module), name, None)


# The intended differences, each with its reason. A subclass of CPU's class is no difference (DeviceAssertError
# is an IndexError and a RuntimeError: CUDA's device-side asserts surface late too; torch.OutOfMemoryError a
# RuntimeError). Add to this list only with the reason the class cannot be CPU's.
INTENDED_ERROR_DIFFERENCES: list[ErrorDifference] = [
    ErrorDifference(Exception, "torch._dynamo.exc.BackendCompilerFailed", "compiled", True,
                    "torch.compile wraps an error the backend raises while compiling a graph in BackendCompilerFailed, "
                    "on every backend; the error it wraps must be CPU's"),
    ErrorDifference(Exception, "torch._dynamo.exc.TorchRuntimeError", "compiled", False,
                    "dynamo runs torch's meta kernels and decompositions on fake tensors before any backend sees the "
                    "graph, and raises their errors (torch._check's RuntimeError where CPU's kernel raises "
                    "NotImplementedError for a dtype it lacks) as TorchRuntimeError; inductor on the CPU does the "
                    "same: torch's behaviour, not the backend's"),
    ErrorDifference(Exception, "torch_tpu.engine.recovery.FusedGraphError", None, False,
                    "an error raised while a program runs on the device (a host callback of a custom op's lowering) "
                    "comes back as the runtime's error, its Python class lost at the device boundary; FusedGraphError "
                    "names the op and where it was recorded (CUDA reports a failing kernel as a RuntimeError too)"),
]


def _causes(exc: BaseException):
    """``exc`` and the errors it wraps: ``__cause__`` (``raise ... from``) and dynamo's ``inner_exception``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = getattr(exc, "inner_exception", None) or exc.__cause__


def error_class_difference(cpu_exc: BaseException, tpu_exc: BaseException, mode=None) -> str | None:
    """None when the tpu error is of CPU's class (or a subclass, or one of ``INTENDED_ERROR_DIFFERENCES``);
    else a description of the difference."""
    wanted = type(cpu_exc)
    if isinstance(tpu_exc, wanted):
        return None
    for diff in INTENDED_ERROR_DIFFERENCES:
        tpu_cls = diff.tpu_class()
        if (tpu_cls is not None and isinstance(cpu_exc, diff.cpu) and isinstance(tpu_exc, tpu_cls)
                and diff.mode in (None, mode)
                and (not diff.wraps_cpu or any(isinstance(e, wanted) for e in _causes(tpu_exc)))):
            return None
    return (f"CPU raised {wanted.__module__}.{wanted.__name__}, tpu {type(tpu_exc).__module__}."
            f"{type(tpu_exc).__name__} (CPU: {_exc_text(cpu_exc)}; tpu: {_exc_text(tpu_exc)})")


def _exc_text(exc: BaseException) -> str:
    s = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {s[0][:400] if s else ''}"


def assert_device_works():
    """After a tpu exception, a trivial op must still run and read back."""
    try:
        v = (torch.ones(2, device=DEV) + 1).cpu()
        sync()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"[device broken] after a tpu error a trivial op fails: {_exc_text(e)}")
    if not torch.equal(v, torch.full((2,), 2.0)):
        pytest.fail(f"[device broken] after a tpu error ones(2)+1 == {v.tolist()}")


# ----------------------------------------------------------------------------------------------------
# modes

_MODE_NAMES = {
    "strict": "DEFER_NEVER",
    "fused": "DEFER_AND_FUSE",
    "blocking": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
}


@contextlib.contextmanager
def _in_mode(mode):
    if mode is None or mode == "compiled":
        yield
        return
    if isinstance(mode, str):
        mode = torch_tpu.EagerMode[_MODE_NAMES.get(mode, mode)]
    with torch.tpu.set_eager_mode(mode):
        yield


def _mode_fn(fn, mode):
    if mode == "compiled":
        torch._dynamo.reset()
        return torch.compile(fn, backend="tpu", dynamic=False)
    return fn


def current_mode_name() -> str:
    m = torch.tpu.eager_mode
    return {v: k for k, v in _MODE_NAMES.items()}.get(m.name, m.name)


# ----------------------------------------------------------------------------------------------------
# the check


@dataclasses.dataclass
class _Outcome:
    value: Any = None
    exc: BaseException | None = None
    at_call: bool = True  # the exception came from the call itself (not from the read)
    inputs: Any = None


def _run_cpu(fn, args, kwargs):
    inputs = materialise(args, "cpu")
    kw = materialise([kwargs], "cpu")[0] if kwargs else {}
    try:
        return _Outcome(value=fn(*inputs, **kw), inputs=inputs)
    except NameError as e:  # a bug of the test itself (a missing import): "both raised" would pass it
        pytest.fail(f"[test bug] the case raised {e!r} on CPU")
    except Exception as e:  # noqa: BLE001
        return _Outcome(exc=e, inputs=inputs)


def _run_tpu(fn, args, kwargs, mode):
    memo: dict = {}
    inputs = materialise(args, DEV, memo)
    kw = materialise([kwargs], DEV, memo)[0] if kwargs else {}
    out = _Outcome(inputs=inputs)
    with _in_mode(mode):
        f = _mode_fn(fn, mode)
        try:
            value = f(*inputs, **kw)
        except Exception as e:  # noqa: BLE001
            out.exc, out.at_call = e, True
        else:
            try:
                out.value = read(value)
                out.inputs = read(inputs)
                sync()
            except Exception as e:  # noqa: BLE001
                out.exc, out.at_call = e, False
    return out


def check(fn: Callable, *args, modes: Sequence | None = None, kwargs: dict | None = None, atol=None,
          rtol=None, signed_zeros=False, check_stride=False, check_requires_grad=True, match: str | None = None,
          raise_at_call=False, check_inputs=True, expect_raise: bool | None = None):
    """Run ``fn(*args, **kwargs)`` on CPU copies and on tpu copies of the inputs and compare.

    modes: None = the current eager mode (the ``eager_mode`` fixture sets it); otherwise a sequence of
      "strict", "fused", "blocking", "compiled" (torch.compile backend="tpu") or EagerMode values, each
      run on fresh tpu inputs.
    match: a regex the tpu error message must match when both raise.
    raise_at_call: when both raise, the tpu exception must come from the call itself (not the read);
      always demanded in "blocking" mode.
    expect_raise: assert the CPU side raises (True) or not (False): guards against a case that tests
      nothing because the CPU reference does not do what the test author expected.
    Returns the CPU outcome's value (or exception).
    """
    cpu = _run_cpu(fn, args, kwargs)
    if expect_raise is not None:
        assert (cpu.exc is not None) == expect_raise, (
            f"test setup: CPU {'did not raise' if expect_raise else 'raised ' + _exc_text(cpu.exc)}")
    for mode in (modes or [None]):
        tag = "" if mode is None else f" (mode {mode if isinstance(mode, str) else mode.name})"
        tpu = _run_tpu(fn, args, kwargs, mode)
        if cpu.exc is not None:
            if tpu.exc is None:
                pytest.fail(f"[silent] CPU raised {_exc_text(cpu.exc)}; tpu returned a value{tag}")
            _record(cpu.exc, tpu.exc)
            problems = []
            if not is_clear(tpu.exc):
                where = _leaked_from(tpu.exc)
                problems.append(f"[unclear error]{tag} CPU: {_exc_text(cpu.exc)}; tpu: {type(tpu.exc).__module__}."
                                f"{_exc_text(tpu.exc)}" + (f" (raised inside {where}, unwrapped)" if where else ""))
            elif match and not re.search(match, str(tpu.exc)):
                problems.append(f"[unclear error]{tag} tpu message does not match {match!r}: {_exc_text(tpu.exc)}"
                                f" (CPU: {_exc_text(cpu.exc)})")
            else:
                difference = error_class_difference(cpu.exc, tpu.exc, mode)
                if difference:
                    problems.append(f"[wrong error class]{tag} {difference}")
            if (raise_at_call or mode == "blocking") and not tpu.at_call:
                problems.append(f"[late error]{tag} tpu raised only when the value was read, not at the call: "
                                f"{_exc_text(tpu.exc)}")
            if check_inputs:
                problems += _inputs_after_error(cpu, tpu, tag, atol, rtol)
            try:
                assert_device_works()
            except pytest.fail.Exception as f:
                problems.append(str(f).splitlines()[0])
            if problems:
                pytest.fail("\n".join(problems))
            continue
        if tpu.exc is not None:
            pytest.fail(f"[tpu raised]{tag} CPU returned a value; tpu raised "
                        f"{'at the call' if tpu.at_call else 'when read'}: {type(tpu.exc).__module__}."
                        f"{_exc_text(tpu.exc)}")
        kw = dict(atol=atol, rtol=rtol, signed_zeros=signed_zeros, check_stride=check_stride,
                  check_requires_grad=check_requires_grad)
        assert_same(cpu.value, tpu.value, where="result" + tag, **kw)
        if check_inputs:
            exp_in = _tensor_leaves(cpu.inputs)
            got_in = [x for x in pytree.tree_leaves(tpu.inputs, is_leaf=lambda x: isinstance(x, _Host))
                      if isinstance(x, _Host)]
            # modules/optimizers passed as PerDevice are not read back; plain tensors are
            if len(exp_in) == len(got_in):
                for i, (e, g) in enumerate(zip(exp_in, got_in)):
                    assert_same_value(e, g, where=f"input {i} after the call{tag}",
                                      **{**kw, "check_requires_grad": False})
    return cpu.value if cpu.exc is None else cpu.exc


def _inputs_after_error(cpu, tpu, tag, atol, rtol) -> list[str]:
    """Both raised: the inputs must hold what CPU left in them (the work before the failing op done,
    nothing lost). Reading a lost value is reported as such."""
    exp_in = _tensor_leaves(cpu.inputs)
    got_raw = [x for x in pytree.tree_leaves(tpu.inputs, is_leaf=lambda x: isinstance(x, _Host))
               if isinstance(x, (torch.Tensor, _Host))]
    if len(exp_in) != len(got_raw):
        return []
    out = []
    for i, (e, g) in enumerate(zip(exp_in, got_raw)):
        try:
            h = _Host(g) if isinstance(g, torch.Tensor) else g  # reading may raise: a lost value
        except Exception as err:  # noqa: BLE001
            out.append(f"[lost value] input {i} after the error{tag} cannot be read: {_exc_text(err)}")
            continue
        try:
            assert_same_value(e, h, where=f"input {i} after the error{tag}", atol=atol, rtol=rtol,
                              check_requires_grad=False)
        except pytest.fail.Exception as f:
            out.append(str(f).splitlines()[0])
    return out


def check_raises(fn, *args, **kw):
    """``check`` for a case where CPU torch raises (asserted, so the case tests what it says)."""
    return check(fn, *args, expect_raise=True, **kw)


# ----------------------------------------------------------------------------------------------------
# sequences: cache-key bugs live *between* calls


def check_sequence(calls: Sequence[Callable], *args, atol=None, rtol=None, signed_zeros=True,
                   check_requires_grad=True, modes=None):
    """Run ``calls`` one after the other on one set of inputs per device (state carries from call to
    call), reading each tpu result before the next call, and compare every result and, at the end,
    every input. Each call is ``call(*inputs)``; a call's ``__name__`` (or ``label`` attribute) names it
    in messages. Every mismatch of the sequence is reported, not only the first."""
    problems: list[str] = []
    for mode in (modes or [None]):
        tag = "" if mode is None else f" (mode {mode})"
        cpu_in = materialise(args, "cpu")
        tpu_in = materialise(args, DEV)
        with _in_mode(mode):
            for i, call in enumerate(calls):
                name = getattr(call, "label", None) or getattr(call, "__name__", "")
                label = f"call {i} {name}{tag}".strip()
                try:
                    exp = call(*cpu_in)
                    cexc = None
                except Exception as e:  # noqa: BLE001
                    exp, cexc = None, e
                try:
                    got = read(call(*tpu_in))
                    texc = None
                except Exception as e:  # noqa: BLE001
                    got, texc = None, e
                try:
                    if cexc is not None:
                        if texc is None:
                            pytest.fail(f"[silent] {label}: CPU raised {_exc_text(cexc)}; tpu returned a value")
                        _record(cexc, texc)
                        if not is_clear(texc):
                            where = _leaked_from(texc)
                            pytest.fail(f"[unclear error] {label}: tpu {_exc_text(texc)}"
                                        + (f" (raised inside {where}, unwrapped)" if where else ""))
                        difference = error_class_difference(cexc, texc, mode)
                        if difference:
                            pytest.fail(f"[wrong error class] {label}: {difference}")
                        continue
                    if texc is not None:
                        pytest.fail(f"[tpu raised] {label}: {type(texc).__module__}.{_exc_text(texc)}")
                    assert_same(exp, got, where=label, atol=atol, rtol=rtol, signed_zeros=signed_zeros,
                                check_requires_grad=check_requires_grad)
                except pytest.fail.Exception as f:
                    problems.append(str(f).splitlines()[0])
            try:
                got_in = read(tpu_in)
                sync()
            except Exception as e:  # noqa: BLE001
                problems.append(f"[tpu raised] reading the inputs after the sequence{tag}: {_exc_text(e)}")
                continue
        exp_l = _tensor_leaves(cpu_in)
        got_l = [x for x in pytree.tree_leaves(got_in, is_leaf=lambda x: isinstance(x, _Host)) if isinstance(x, _Host)]
        if len(exp_l) == len(got_l):
            for i, (e, g) in enumerate(zip(exp_l, got_l)):
                try:
                    assert_same_value(e, g, where=f"input {i} after the sequence{tag}", atol=atol, rtol=rtol,
                                      check_requires_grad=False)
                except pytest.fail.Exception as f:
                    problems.append(str(f).splitlines()[0])
    if problems:
        pytest.fail(f"{len(problems)} of the sequence's checks failed:\n" + "\n".join(problems))


def named(label: str, fn: Callable) -> Callable:
    """``fn`` with a label for messages."""
    fn.label = label
    return fn


def check_orders(first: Callable, second: Callable, *args, **kw):
    """Both orders of two variants (a cache entry made by one variant must never serve the other,
    whichever of them ran first in this process)."""
    check_both_orders([first, second], *args, **kw)


def check_both_orders(calls: Sequence[Callable], *args, **kw):
    """``check_sequence`` on ``calls`` and on ``calls`` reversed; failures of both are reported."""
    problems = []
    for order, seq in (("forward", list(calls)), ("reversed", list(calls)[::-1])):
        try:
            check_sequence(seq, *args, **kw)
        except pytest.fail.Exception as f:
            problems.append(f"{order} order: {f}")
    if problems:
        pytest.fail("\n".join(problems))


# ----------------------------------------------------------------------------------------------------
# counters


@contextlib.contextmanager
def counting():
    """``with counting() as c: ...`` then ``c.compiles``, ``c.cache_misses``, ``c.graph_compiles``
    (deltas of torch_tpu.stats() over the block, the device synchronised at the end)."""
    sync()
    before = torch_tpu.stats()

    class C:
        pass

    c = C()
    try:
        yield c
    finally:
        sync()
        after = torch_tpu.stats()
        for k in ("compiles", "cache_misses", "cache_hits", "graph_compiles", "executions", "flushes"):
            setattr(c, k, after.get(k, 0) - before.get(k, 0))


def backend_objects() -> int:
    """Live tensors and objects of torch_tpu's own classes (storages, lazy arrays, graph nodes...)."""
    n = 0
    for o in gc.get_objects():
        t = type(o)
        if issubclass(t, torch.Tensor) or str(t.__dict__.get("__module__", "")).startswith("torch_tpu"):
            n += 1
    return n


def program_cache_sizes() -> dict:
    """Best-effort sizes of the backend's in-process program caches (names change with the package
    layout; any module-level dict/OrderedDict/lru cache whose name says cache/entries/programs)."""
    sizes = {}
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("torch_tpu") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            low = attr.lower()
            if not any(w in low for w in ("cache", "entries", "programs", "graphs")):
                continue
            if isinstance(val, dict):
                sizes[f"{modname}.{attr}"] = len(val)
            elif hasattr(val, "cache_info"):
                try:
                    sizes[f"{modname}.{attr}"] = val.cache_info().currsize
                except Exception:  # noqa: BLE001
                    pass
    return sizes


def opinfo_db() -> list:
    """PyTorch's OpInfo database, with its per-sample search for the running unittest method turned off.

    Every sample iterator OpInfo makes calls ``extract_test_fn``, which walks ``inspect.stack()`` (reading
    the source lines of every frame under pytest) to find a ``unittest.TestCase`` method; these tests are
    plain functions, so it always found none, after spending 85% of test_op_consistency's time looking.
    """
    from torch.testing._internal import common_utils

    common_utils.extract_test_fn = _no_unittest_method
    from torch.testing._internal.opinfo import core

    core.extract_test_fn = _no_unittest_method  # bound by name at its import
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _no_unittest_method():
    return None


# ----------------------------------------------------------------------------------------------------
# isolation: cases that may kill or hang the process


def programs_run(fn):
    """(``fn()``, how many programs ran for it): the executions counter around it, after a sync on each side
    (strict mode launches a program per op; fused mode's pending graph runs at the sync after)."""
    import torch_tpu

    torch_tpu.sync()
    before = torch_tpu.stats()["executions"]
    out = fn()
    torch_tpu.sync()
    return out, torch_tpu.stats()["executions"] - before


def module_calls_seen(fn) -> list:
    """The class names of the modules whose calls a global forward hook sees while ``fn()`` runs (under no_grad):
    code that stands one op for several modules' calls must make every call when such a hook is registered."""
    import torch

    names = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: names.append(type(mod).__name__))
    try:
        with torch.no_grad():
            fn()
    finally:
        handle.remove()
    return names


_PRELUDE = """
import os, sys
import torch
import torch_tpu
"""


def _this_process_holds_a_tpu() -> bool:
    tpu = sys.modules.get("torch_tpu")
    if tpu is None:
        return False
    from torch_tpu.runtime import platform

    return platform.runtime_started() and platform.platform() == "tpu"


def run_isolated(code: str, timeout: float = 90, env: dict | None = None,
                 prelude: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process (this worktree first on sys.path), after importing torch and
    torch_tpu unless ``prelude`` is False. Returns the CompletedProcess; when the child is taken for hung
    (``hangs.run``: ``timeout`` is about the seconds it takes at most on an idle machine) returncode is None
    and stdout/stderr hold what came before."""
    full = (_PRELUDE if prelude else "") + textwrap.dedent(code)
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.pop("PYTEST_CURRENT_TEST", None)
    if _this_process_holds_a_tpu():
        # one process at a time can hold a TPU chip: a child of a test run on one computes on the CPU
        # platform (what these children check is how a process behaves, not the chip's numbers)
        e.setdefault("JAX_PLATFORMS", "cpu")
    e.update(env or {})
    try:
        return hangs.run([sys.executable, "-X", "faulthandler", "-c", full], env=e, capture_output=True,
                         text=True, timeout=timeout)
    except subprocess.TimeoutExpired as t:
        out = t.stdout.decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        err = t.stderr.decode() if isinstance(t.stderr, bytes) else (t.stderr or "")
        return subprocess.CompletedProcess(t.cmd, None, out, err)


def stderr_excerpt(err: str, n: int = 1500) -> str:
    """The useful part of a dying process's stderr: from shortly before "Fatal Python error" (the C++
    message and the Python stack), without faulthandler's list of extension modules."""
    err = err or ""
    cut = err.find("\nExtension modules:")
    if cut >= 0:
        err = err[:cut]
    at = err.find("Fatal Python error")
    if at >= 0:
        return err[max(0, at - 300):at - 300 + n]
    return err[-n:]


def assert_isolated_ok(proc: subprocess.CompletedProcess, expect: str = "OK"):
    """The subprocess exited cleanly (rc 0, no signal, no timeout) and printed ``expect`` (a regex)."""
    tail = stderr_excerpt(proc.stderr)
    if proc.returncode is None:
        pytest.fail(f"[hang] the subprocess did not finish in time; stdout={proc.stdout[-500:]!r} stderr={tail}")
    if proc.returncode < 0 or proc.returncode in (134, 139):
        pytest.fail(f"[crash] the subprocess died (rc {proc.returncode}); stdout={proc.stdout[-500:]!r} "
                    f"stderr={tail}")
    if proc.returncode != 0:
        pytest.fail(f"[tpu raised] the subprocess exited with rc {proc.returncode}; stdout="
                    f"{proc.stdout[-800:]!r} stderr={tail}")
    if not re.search(expect, proc.stdout):
        pytest.fail(f"[wrong value] the subprocess did not print {expect!r}: stdout={proc.stdout[-1500:]!r} "
                    f"stderr={tail}")


class IsolatedBatch:
    """Start many isolated snippets at once (a few at a time) so their ~4 s imports overlap; each test
    then takes its own result. ``batch.result(name)``."""

    def __init__(self, snippets: dict[str, tuple[str, dict]], workers: int = 2, timeout: float = 90):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._futures = {name: self._pool.submit(run_isolated, code, timeout, env)
                         for name, (code, env) in snippets.items()}

    def result(self, name: str) -> subprocess.CompletedProcess:
        return self._futures[name].result()

    def close(self):
        self._pool.shutdown(wait=True)


# ----------------------------------------------------------------------------------------------------
# small input makers


def fuzz_seeds(default: int) -> range:
    """The seeds a fuzz test runs: ``TORCH_TPU_FUZZ_SEEDS=N`` seeds 0..N-1, ``=A:B`` seeds A..B-1."""
    return range(*map(int, os.environ.get("TORCH_TPU_FUZZ_SEEDS", str(default)).split(":")))


def t(*vals, dtype=None, **kw) -> torch.Tensor:
    """A tiny CPU tensor from values: t(1, 2, 3), t([[1, 2]], dtype=torch.int8)."""
    if len(vals) == 1 and isinstance(vals[0], (list, tuple)):
        vals = vals[0]
    return torch.tensor(list(vals), dtype=dtype, **kw)


def rand(*shape, dtype=torch.float32, seed=0, low=-2.0, high=2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g) * (high - low) + low
    return x.to(dtype)


def module_per_device(make: Callable[[], torch.nn.Module], seed: int = 0) -> PerDevice:
    """A module built the same way on each device (same seed, same parameters)."""
    def on(device):
        torch.manual_seed(seed)
        return make().to(device)
    return per_device(on)


def leaf_per_device(*shape, seed: int = 1, dtype=torch.float32) -> PerDevice:
    """The same random values on each device, as a leaf requiring grad."""
    data = rand(*shape, seed=seed).to(dtype)
    return per_device(lambda d: data.clone().to(d).requires_grad_())


def ids(cases: Iterable) -> list[str]:
    return [c[0] for c in cases]


# ----------------------------------------------------------------------------------------------------
# crash-tolerant batches: many cases in one child process, restarted after a crash or a hang


_START, _END = "@@HOSTILE-START ", "@@HOSTILE-END "


def _worker(module_file: str) -> None:
    """Child side of ``run_cases_isolated``: load ``module_file``, read case names from stdin, run
    ``module.ISOLATED_CASES[name]()`` for each, report on stdout."""
    import importlib.util
    import json
    import traceback

    spec = importlib.util.spec_from_file_location("_isolated_cases", module_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cases = mod.ISOLATED_CASES
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        print(_START + name, flush=True)
        print(_START + name, file=sys.stderr, flush=True)
        os.environ["PYTEST_CURRENT_TEST"] = name + " (call)"
        started = time.perf_counter()
        try:
            cases[name]()
            status, msg = "pass", ""
        except pytest.fail.Exception as f:
            status, msg = "fail", str(f)
        except Exception as e:  # noqa: BLE001  (the case itself broke: report it as a failure)
            status, msg = "fail", "[tpu raised] " + _exc_text(e) + "\n" + "".join(traceback.format_exc()[-1500:])
        print(_END + json.dumps([name, status, msg, round(time.perf_counter() - started, 3)]), flush=True)
    if os.environ.get("TORCH_TPU_CASE_TIMES"):
        import torch_tpu

        s = torch_tpu.stats()
        _note_case_time(module_file, "(child's compiles: %d, compile seconds: %.1f, cache loads: %d)"
                        % (s["compiles"], s["compile_seconds"], s["cache_loads"]), time.process_time())


def _note_case_time(module_file: str, name: str, seconds: float) -> None:
    """With TORCH_TPU_CASE_TIMES=FILE, append each isolated case's time (to find what makes the suite slow)."""
    out = os.environ.get("TORCH_TPU_CASE_TIMES")
    if out:
        with open(out, "a") as f:
            f.write(f"{seconds:.3f}\t{os.path.basename(module_file)}\t{name}\n")


def run_cases_isolated(module_file: str, names: Sequence[str], timeout_per_case: float = 120,
                       env: dict | None = None, stall_s: float = 120) -> dict[str, tuple[str, str]]:
    """Run the named cases of ``module_file``'s ``ISOLATED_CASES`` in a child process; a case that
    kills the child (signal, abort) is reported as ``("crash", ...)``, one that stops making progress or
    uses more than twice ``timeout_per_case`` seconds of CPU (``hangs.Progress``: about the seconds a case
    takes at most on an idle machine; compiles use more than one thread) as ``("hang", ...)``, and the
    child is restarted for the remaining cases (``stall_s``: the seconds without CPU use taken for a hang).
    Returns {name: (status, message)}, status in pass/fail/crash/hang."""
    import json
    import queue
    import threading

    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env or {})
    code = f"from tests.harness import differential; differential._worker({module_file!r})"
    results: dict[str, tuple[str, str]] = {}
    todo = list(names)
    while todo:
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        lines: "queue.Queue[str | None]" = queue.Queue()
        err_tail: list[str] = []

        # each pump is bound to its own worker's pipe, queue and tail: read at call time, the names would be
        # the next worker's once a killed worker's pump ended late, and its end-of-file would end that one
        def pump_out(out=proc.stdout, queue_=lines):
            for ln in out:
                queue_.put(ln)
            queue_.put(None)

        def pump_err(err=proc.stderr, tail=err_tail):
            for ln in err:
                if ln.startswith(_START.strip()):
                    tail.clear()  # keep only the current case's stderr
                tail.append(ln)
                del tail[:-400]

        threading.Thread(target=pump_out, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        try:
            proc.stdin.write("\n".join(todo) + "\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass
        current = None
        # a case is hung when its processes stop using CPU or overrun their CPU budget (hangs.Progress), not
        # after a wall-clock time: a loaded machine takes longer, it does not stop
        budget = 2 * timeout_per_case  # CPU seconds: compiles run on more than one thread
        progress = hangs.Progress(proc.pid, budget + 30, stall_s)  # the first case also pays the imports
        checked = time.monotonic()
        while True:
            try:
                ln = lines.get(timeout=1.0)
            except queue.Empty:
                ln = ""  # nothing yet (a line read always ends with a newline; None is the end)
            if ln == "" or time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                why = progress.verdict()
                if why is None:
                    if ln == "":
                        continue
                else:
                    hangs.kill_tree(proc)
                    if current is None:
                        current = todo[0]
                    results[current] = ("hang", f"[hang] {why}; stderr: {''.join(err_tail)[-1200:]}")
                    break
            if ln is None:
                proc.wait()
                if current is not None:
                    results[current] = ("crash", f"[crash] the process died (rc {proc.returncode}) in this case; "
                                                 f"stderr: {stderr_excerpt(''.join(err_tail))}")
                elif todo and todo[0] not in results:
                    results[todo[0]] = ("crash", f"[crash] the worker died before the first case (rc "
                                                 f"{proc.returncode}); stderr: {stderr_excerpt(''.join(err_tail))}")
                break
            if ln.startswith(_START):
                current = ln[len(_START):].strip()
                progress = hangs.Progress(proc.pid, budget, stall_s)
            elif ln.startswith(_END):
                name, status, msg, seconds = json.loads(ln[len(_END):])
                results[name] = (status, msg)
                _note_case_time(module_file, name, seconds)
                current = None
        todo = [n for n in todo if n not in results]
    return results


def isolated_results(request, module_file: str, case_of_item: Callable, **kw) -> dict:
    """For a module-scoped fixture: run, in one crash-tolerant child, the cases of every collected test
    item of ``module_file`` (``case_of_item(item) -> name or None``)."""
    names = []
    for item in request.session.items:
        if os.path.abspath(str(item.fspath)) == os.path.abspath(module_file):
            n = case_of_item(item)
            if n is not None and n not in names:
                names.append(n)
    return run_cases_isolated(module_file, names, **kw)


def case_and_mode(item):
    """``case_of_item`` for tests parametrized by ``case`` and ``mode``: the case named "<case>:<mode>"."""
    cs = getattr(item, "callspec", None)
    if cs is None or "case" not in cs.params:
        return None
    return f"{cs.params['case']}:{cs.params['mode']}"


def param_of(test_name: str, param: str = "name"):
    """``case_of_item`` for one test function parametrized by ``param``: that parameter is the case."""
    def case_of_item(item):
        cs = getattr(item, "callspec", None)
        return cs.params.get(param) if cs is not None and item.originalname == test_name else None
    return case_of_item


def isolated_fixture(module_file: str, case_of_item: Callable, **kw):
    """A module-scoped fixture whose value is ``isolated_results`` for ``module_file``'s collected items:
    ``results = D.isolated_fixture(__file__, D.case_and_mode, timeout_per_case=120)`` (``kw``: those of
    ``run_cases_isolated``, e.g. ``env``)."""
    @pytest.fixture(scope="module")
    def results(request):
        return isolated_results(request, module_file, case_of_item, **kw)

    return results


def isolated_case_tests(module_file: str, cases: dict, xfail: dict | None = None, timeout_per_case: float = 120,
                        **kw):
    """The module fixture and the test of a file whose ``ISOLATED_CASES`` run in one crash-tolerant child:
    ``results, test_case = D.isolated_case_tests(__file__, ISOLATED_CASES, XFAIL)``; a case named in
    ``xfail`` (name -> ``Gap(reason, match)``) is a strict xfail of that failure only (``known_gap``). The
    test may take any name (``results, test_seed = ...``)."""
    xfail = xfail or {}

    def case_of_item(item):
        cs = getattr(item, "callspec", None)
        return cs.params.get("name") if cs is not None and getattr(item, "function", None) is test_case else None

    results = isolated_fixture(module_file, case_of_item, timeout_per_case=timeout_per_case, **kw)

    @pytest.mark.parametrize("name", [pytest.param(n, marks=xfail[n].mark()) if n in xfail else n for n in cases])
    def test_case(results, name):
        assert_isolated_result(results, name, xfail.get(name))

    return results, test_case


# ----------------------------------------------------------------------------------------------------
# known gaps: strict xfails pinned to the failure they expect


class KnownGap(Exception):
    """The failure a known gap expects, recognised by its message (``expected_failure``): a strict xfail with
    ``raises=KnownGap`` passes on it alone; a case that starts failing in another way fails."""


@dataclasses.dataclass(frozen=True)
class Gap:
    """A known gap: why it is one, and a regex its failure's text (``ExceptionClass: message``) matches."""
    reason: str
    match: str

    def mark(self):
        return pytest.mark.xfail(strict=True, raises=KnownGap, reason=self.reason)


@contextlib.contextmanager
def expected_failure(gap: "Gap | str | None"):
    """Inside a known gap's test: its failure, when its text matches ``gap`` (a ``Gap`` or a regex), becomes
    ``KnownGap``; any other failure passes through unchanged (and fails the xfail, whose raises= is
    ``KnownGap``). ``None``: not a gap, nothing changed."""
    if gap is None:
        yield
        return
    pattern = gap.match if isinstance(gap, Gap) else gap
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # (pytest.fail raises an OutcomeException, not an Exception)
        text = f"{type(exc).__name__}: {exc}"
        if re.search(pattern, text):
            raise KnownGap(text[:2000]) from exc
        raise


def assert_isolated_result(results: dict, name: str, gap: "Gap | None" = None):
    """The isolated case ``name`` passed; ``gap``: a known gap's case, whose expected failure becomes
    ``KnownGap`` (``expected_failure``)."""
    status, msg = results.get(name, ("missing", "the case did not run"))
    with expected_failure(gap):
        if status != "pass":
            pytest.fail(msg if msg.startswith("[") else f"[{status}] {msg}")

"""Errors in a differential case: whether the tpu's exception is a clear Python error of CPU's class (``is_clear``,
``error_class_difference``, the intended differences in ``INTENDED_ERROR_DIFFERENCES``), the device still working
after one (``assert_device_works``), and known gaps pinned to the failure they expect (``Gap``, ``KnownGap``,
``expected_failure``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys

import pytest
import torch

from tests.harness.compare import sync
from tests.harness.inputs import DEV


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

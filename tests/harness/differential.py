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

This module holds helpers only (no tests). Tests import it as ``from tests.harness import differential as D``:
it runs a case (``check``, ``check_raises``, ``check_sequence``, ``check_both_orders``, ``check_orders``, ``named``).
Its parts are modules of their own, imported from where they live: ``inputs.py`` (what a case runs on, per device),
``compare.py`` (values compared with CPU's), ``errors.py`` (errors compared with CPU's, known gaps), ``modes.py``
(the execution modes by name), ``counting.py`` (what ran and what was built), ``isolated.py`` (cases run in
crash-tolerant children).

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

import dataclasses
import re
from typing import Any, Callable, Sequence

import pytest
import torch
from torch.utils import _pytree as pytree

from tests.harness.compare import _Host, assert_same, assert_same_value, read, sync
from tests.harness.errors import (
    _exc_text, _leaked_from, _record, assert_device_works, error_class_difference, is_clear,
)
from tests.harness.inputs import DEV, _tensor_leaves, materialise
from tests.harness.modes import _in_mode, _mode_fn


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

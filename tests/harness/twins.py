"""Twin calls: two calls that differ in exactly one attribute (a dtype, strides, a conj bit, a scalar's
Python type, a keyword...) run one after the other in one process, and each is compared to CPU torch.
A program cache whose key misses that attribute hands the first call's program to the second: a silent
wrong result. Helpers only (no tests); ``tests/eager/test_cache_keys.py`` runs them.

A twin is ``Twin(name, call_a, call_b)``; a call is ``(fn, args)`` with ``args`` as ``differential``
takes them (CPU tensors copied to each device, ``PerDevice`` built per device). ``run_twin`` runs
A then B and B then A in each mode ("strict", "fused", "compiled" = torch.compile(dynamic=False),
"compiled_dyn" = torch.compile(dynamic=None)), reading every tpu result before the next call, and
returns a list of problems (empty: passed). Caches are emptied before each order, so the first call
of the pair is the one that builds the shared entry.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import pytest
import torch

import torch_tpu
from tests.harness.compare import assert_same, assert_same_value, _Host, read, sync
from tests.harness.errors import _exc_text, is_clear
from tests.harness.inputs import DEV, materialise, _tensor_leaves
from tests.harness.modes import _in_mode

MODES = ("strict", "fused", "compiled", "compiled_dyn")


@dataclasses.dataclass
class Twin:
    name: str
    a: tuple  # (fn, args)
    b: tuple
    family: str = ""
    compiled: bool = True  # also run under torch.compile
    tol: Any = None


def _compiled(fn, dynamic, memo):
    key = (id(fn), dynamic)
    if key not in memo:
        memo[key] = torch.compile(fn, backend="tpu", dynamic=dynamic)
    return memo[key]


def _call(fn, args, device, mode, memo):
    inputs = materialise(args, device)
    f = fn
    if device != "cpu" and mode in ("compiled", "compiled_dyn"):
        f = _compiled(fn, False if mode == "compiled" else None, memo)
    try:
        out = f(*inputs)
        if device != "cpu":
            out = read(out)
            ins = read(inputs)
            sync()
        else:
            ins = inputs
        return out, ins, None
    except Exception as e:  # noqa: BLE001
        return None, None, e


def _compare(label, cpu, tpu, tol):
    exp, exp_in, cexc = cpu
    got, got_in, texc = tpu
    if cexc is not None:
        if texc is None:
            return [f"[silent] {label}: CPU raised {_exc_text(cexc)}; tpu returned a value"]
        if not is_clear(texc):
            return [f"[unclear error] {label}: {type(texc).__name__}: {_exc_text(texc)}"]
        return []
    if texc is not None:
        return [f"[tpu raised] {label}: {type(texc).__module__}.{_exc_text(texc)}"]
    atol = rtol = tol
    try:
        assert_same(exp, got, where=label, atol=atol, rtol=rtol, signed_zeros=True)
        el = _tensor_leaves(exp_in)
        gl = [x for x in torch.utils._pytree.tree_leaves(got_in, is_leaf=lambda x: isinstance(x, _Host))
              if isinstance(x, _Host)]
        for i, (e, g) in enumerate(zip(el, gl)):
            assert_same_value(e, g, where=f"{label} input {i} after", atol=atol, rtol=rtol,
                                check_requires_grad=False, signed_zeros=True)
    except pytest.fail.Exception as f:
        return [str(f).splitlines()[0][:400]]
    return []


def run_twin(tw: Twin, modes: Sequence[str] = MODES) -> list[str]:
    problems = []
    for mode in modes:
        if mode.startswith("compiled") and not tw.compiled:
            continue
        for order, calls in (("AB", (tw.a, tw.b)), ("BA", (tw.b, tw.a))):
            torch_tpu.sync()
            torch_tpu.reset_caches()
            if mode.startswith("compiled"):
                torch._dynamo.reset()
            memo: dict = {}
            eager = "fused" if mode == "fused" else "strict"
            with _in_mode(eager):
                for i, (fn, args) in enumerate(calls):
                    cpu = _call(fn, args, "cpu", mode, memo)
                    tpu = _call(fn, args, DEV, mode, memo)
                    problems += _compare(f"{tw.name} {mode} {order} call {'AB'[i] if order == 'AB' else 'BA'[i]}",
                                         cpu, tpu, tw.tol)
    return problems


def alone(call, mode="strict") -> list[str]:
    """One call on empty caches: a twin failure whose second call fails alone too is no key bug."""
    torch_tpu.sync()
    torch_tpu.reset_caches()
    torch._dynamo.reset()
    memo: dict = {}
    with _in_mode("fused" if mode == "fused" else "strict"):
        return _compare(f"alone {mode}", _call(call[0], call[1], "cpu", mode, memo),
                        _call(call[0], call[1], DEV, mode, memo), None)

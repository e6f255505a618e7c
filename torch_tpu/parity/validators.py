"""The table of validators: argument checks that torch's CPU kernels make but its meta kernels do not.

A validator runs on the host when an op's entry is built, once per program key, with the call's own
arguments (tensors, Python values); it raises torch's error for the same input. Register with
``@validates(aten.op.overload, ...)`` (several validators of one op all run); in-place and out= forms use
their functional overload's. Checks of a dynamic Scalar's value (``alpha=300`` on uint8) must run on every
call: register them with ``@validates_each_call`` (they also get the result's dtype).
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..ops import registry
from . import dim_checks

VALIDATORS: dict = {}
EACH_CALL: dict = {}


def validates(*ops) -> Callable:
    def deco(fn):
        for op in ops:
            VALIDATORS.setdefault(op, []).append(fn)
        return fn

    return deco


def validates_each_call(*ops) -> Callable:
    """``fn(result_dtype, *args, **kwargs)``, run on every call (the values it reads are program inputs)."""
    def deco(fn):
        for op in ops:
            EACH_CALL.setdefault(op, []).append(fn)
        return fn

    return deco


def _own(func, kwargs) -> dict:
    """``kwargs`` without what ``func`` (a functional overload) does not take: an out= form's ``out``."""
    names = {a.name for a in func._schema.arguments}
    return {k: v for k, v in kwargs.items() if k in names} if any(k not in names for k in kwargs) else kwargs


def run(func, args, kwargs) -> None:
    """Every validator of ``func``; an in-place or out= overload without validators of its own (one a
    decomposition runs: ``celu_``) gets its functional overload's, as a lowered one does."""
    if func not in VALIDATORS and registry.mutated_arguments(func):
        func = registry.functional_variant(func) or func
    _limited_unsigned_promotion(func, args, kwargs)
    dim_checks.check(func, args, kwargs)
    own = _out_dtype(func, args, kwargs, _own(func, kwargs))
    for check in VALIDATORS.get(func, ()):
        check(*args, **own)


def checked_decompositions(table: dict) -> dict:
    """A compiled graph's decomposition table whose decompositions of validated ops run the validators
    first: a decomposed call (``hardshrink``, ``upsample_nearest2d.vec``, ``celu``) leaves no node of its
    own for ``parity.check_call``, so a compiled program computed what eager refuses."""
    def validated(op) -> bool:
        if op in VALIDATORS:
            return True
        return bool(registry.mutated_arguments(op)) and registry.functional_variant(op) in VALIDATORS

    return {op: _checked(op, fn) if isinstance(op, torch._ops.OpOverload) and validated(op) else fn
            for op, fn in table.items()}


def _checked(op, fn):
    def decomposition(*args, **kwargs):
        run(op, args, kwargs)
        return fn(*args, **kwargs)

    return decomposition


_ABOVE_TABLE = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)


@contextlib.contextmanager
def python_kernels_validated():
    """While AOTAutograd traces a compiled graph: the validated ops torch decomposes by Python kernels
    at the Autograd key (``hardshrink``, ``upsample_nearest2d``, ``multi_margin_loss``), before the
    decomposition table is consulted, run their validators first (restored on exit)."""
    saved = []
    for op in list(VALIDATORS):
        if not isinstance(op, torch._ops.OpOverload):
            continue
        kernels = getattr(op, "py_kernels", None)  # (torch's OpOverload internals: skipped if they moved)
        for key in _ABOVE_TABLE if isinstance(kernels, dict) else ():
            fn = kernels.get(key)
            if fn is not None:
                saved.append((op, key, fn))
                kernels[key] = _checked(op, fn)
                _clear_dispatch_cache(op)
    try:
        yield
    finally:
        for op, key, fn in saved:
            op.py_kernels[key] = fn
            _clear_dispatch_cache(op)


def _clear_dispatch_cache(op) -> None:
    cache = getattr(op, "_dispatch_cache", None)
    if cache is not None:
        cache.clear()


def _out_dtype(func, args, kwargs, own) -> dict:
    """An out= call of an op with a ``dtype=`` argument left None computes in its out tensor's dtype
    (``cumsum(bool_x, 0, out=bool_y)`` runs the bool kernel, which CPU does not have): ``dtype=`` is it."""
    out = kwargs.get("out")
    if not isinstance(out, torch.Tensor) or own.get("dtype") is not None:
        return own
    names = [a.name for a in func._schema.arguments]
    if "dtype" not in names or names.index("dtype") < len(args):
        return own
    return {**own, "dtype": out.dtype}


LIMITED_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def _limited_unsigned_promotion(func, args, kwargs) -> None:
    """torch refuses to promote uint16/32/64 with another dtype (``u16 * int64_tensor``); meta kernels
    promote anyway (the result was uint16). The same refusal for a pointwise op's self and other."""
    if not args or torch.Tag.pointwise not in func.tags:
        return
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args), **kwargs)
    x, other = given.get("self"), given.get("other")  # (where's condition is not promoted)
    if isinstance(x, torch.Tensor) and isinstance(other, torch.Tensor) and other.dtype != x.dtype and (
            x.dtype in LIMITED_UNSIGNED or other.dtype in LIMITED_UNSIGNED):
        torch.result_type(x, other)  # torch's own error


def each_call(func, dtype):
    """The per-call check of ``func`` (the functional overload) with result dtype ``dtype``, or None."""
    fns = EACH_CALL.get(func)
    if not fns:
        return None
    names = frozenset(a.name for a in func._schema.arguments)

    def check(args, kwargs):
        own = kwargs if names.issuperset(kwargs) else {k: v for k, v in kwargs.items() if k in names}
        for fn in fns:
            fn(dtype, *args, **own)

    return check

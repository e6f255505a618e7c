"""THE op table: one mapping from aten ops to XLA computations, used by every executor.

A lowering is a pure function over JAX arrays (tensor arguments) and plain Python values (every
other argument, static). It mirrors the aten schema: ``fn(*args, **kwargs)``. It may return arrays
of any dtype; executors cast each output to the dtype torch's meta kernel promises, so type
promotion always follows torch.

In-place (``add_``) and ``out=`` overloads need no lowering of their own: executors find the
functional overload (``add.Tensor``) and write its result back into the mutated tensors.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

aten = torch.ops.aten
prims = torch.ops.prims


@dataclasses.dataclass(frozen=True)
class Lowering:
    fn: Callable
    # Output shape depends on values (nonzero, unique, masked_select): run outside jit, eagerly.
    data_dependent: bool = False
    # Needs random bits: the executor passes ``rng_key=`` (a JAX PRNG key) as a keyword argument.
    random: bool = False
    # Reads torch.get_float32_matmul_precision() (part of the program key).
    matmul: bool = False
    # Scalar arguments whose value the lowering must see (it special-cases them), so the value is part
    # of the program key; every other Scalar (``alpha=``, ``x * 2.5``) is a traced program input.
    static: tuple = ()
    # When set, a ``static`` Scalar is static only for the values this predicate accepts (the cheap exact
    # forms a lowering special-cases); any other value of it is a traced input (a type tag in the key).
    static_when: Callable | None = None


LOWERINGS: dict[torch._ops.OpOverload, Lowering] = {}


def _overloads(op):
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    result = []
    for name in op.overloads():
        ov = getattr(op, name)
        schema = ov._schema
        if any(a.is_out for a in schema.arguments):
            continue
        result.append(ov)
    return result


def register(*ops, data_dependent: bool = False, random: bool = False, matmul: bool = False,
             static: tuple = (), static_when: Callable | None = None):
    """Decorator: ``@register(aten.add, aten.sub.Tensor)`` (a packet means every functional overload)."""

    def deco(fn):
        low = Lowering(fn, data_dependent=data_dependent, random=random, matmul=matmul, static=tuple(static),
                       static_when=static_when)
        for op in ops:
            for ov in _overloads(op):
                LOWERINGS[ov] = low
        return fn

    return deco


def lookup(func) -> Lowering | None:
    return LOWERINGS.get(func)


def resolve(func):
    """``(lowering, target)``: the lowering that computes ``func``, and the overload it lowers.

    In-place and out= overloads have no lowering of their own: the target is their functional overload
    (the executor writes its result back). A view op met in a functional graph computes what its
    ``*_copy`` form does. ``(None, func)`` when the table has nothing.
    """
    low = LOWERINGS.get(func)
    if low is not None:
        return low, func
    if mutated_arguments(func):
        fv = functional_variant(func)
        if fv is not None and fv in LOWERINGS:
            return LOWERINGS[fv], fv
        return None, func
    if func.is_view:
        packet = getattr(aten, func._schema.name.split("::", 1)[1] + "_copy", None)
        copy = getattr(packet, func._overloadname, None) if packet is not None else None
        if copy is not None and copy in LOWERINGS:
            return LOWERINGS[copy], copy
    return None, func


# ---------------------------------------------------------------------------------------------
# Schema helpers shared by executors: in-place / out= overloads -> functional overload.
# ---------------------------------------------------------------------------------------------
_FUNCTIONAL: dict = {}


_MUTATED: dict = {}  # id(op) -> (op, its written arguments): reading a schema costs ~50us a call


def mutated_arguments(func) -> tuple[tuple[int, str], ...]:
    """(position, name) of arguments the op writes to."""
    found = _MUTATED.get(id(func))
    if found is not None and found[0] is func:
        return found[1]
    out = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                if a.alias_info is not None and a.alias_info.is_write)
    _MUTATED[id(func)] = (func, out)
    return out


def _signature(args) -> list:
    return [(a.name, str(a.type)) for a in args]


def _overload_with(packet, wanted):
    """The functional overload of ``packet`` whose (name, type) arguments are ``wanted``, or None."""
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        args = ov._schema.arguments
        if not ov.is_view and not any(a.is_out for a in args) and _signature(args) == wanted:
            return ov
    return None


def functional_variant(func):
    """The functional overload computing what an in-place or out= overload writes, or None. Matched by
    argument names and types: ``pow_.Scalar`` (a Scalar exponent) is ``pow.Tensor_Scalar``, not
    ``pow.Scalar`` (a Scalar base), ``pow.Tensor_Scalar_out`` is not ``pow.Tensor_Tensor``."""
    if func in _FUNCTIONAL:
        return _FUNCTIONAL[func]
    schema = func._schema
    name = schema.name.split("::", 1)[1]
    result = None
    is_out = any(a.is_out for a in schema.arguments)
    if is_out:
        packet = getattr(aten, name, None)
        if packet is not None:
            result = _overload_with(packet, _signature([a for a in schema.arguments if not a.is_out]))
    elif name.endswith("_") and not name.endswith("__"):
        packet = getattr(aten, name[:-1], None)
        if packet is not None:
            result = _overload_with(packet, _signature(schema.arguments))
            if result is None:
                result = getattr(packet, func._overloadname, None)
            if result is None and func._overloadname == "default":
                result = getattr(packet, "default", None)
    _FUNCTIONAL[func] = result
    return result

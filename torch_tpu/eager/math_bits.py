"""Conjugate and negative views (``x.conj()``, ``x.conj().imag``): torch marks such a view with a math
bit instead of computing it, and expects each backend's kernels to honour the bit where its own
fallback does not resolve it first (copy_, clone, mm, dot, item ...). A tpu view shares its base's
storage; the bit says how to read it. This module runs a non-view op whose tensor arguments carry a
bit on resolved values (read through the view, conjugated or negated), and writes an in-place result
back through the bit, so every op sees what CPU torch computes.
"""
from __future__ import annotations

import torch

from ..tensor.tensor import TpuTensor
from ..tensor.views import without_math_bits

aten = torch.ops.aten


def _has_bit(a) -> bool:
    return isinstance(a, TpuTensor) and (a.is_conj() or a.is_neg())


def has_math_bits(args, kwargs) -> bool:
    for a in args:
        if _has_bit(a) or (type(a) in (list, tuple) and any(_has_bit(e) for e in a)):
            return True
    return any(_has_bit(v) for v in kwargs.values())


def _apply_bits(values: torch.Tensor, conj: bool, neg: bool) -> torch.Tensor:
    if conj:
        values = aten.conj_physical.default(values)
    if neg:
        values = aten.neg.default(values)
    return values


def resolved(x: TpuTensor) -> torch.Tensor:
    """A new tensor holding the values ``x`` means (its storage read through the view, then the bits)."""
    return _apply_bits(aten.clone.default(without_math_bits(x)), x.is_conj(), x.is_neg())


def _written(func) -> set:
    return {a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write}


def run_resolved(route, func, args, kwargs):
    """``route(func, ...)`` on resolved arguments; arguments the op writes are written back through
    their bits (conj and neg are their own inverses)."""
    written = _written(func)
    names = [a.name for a in func._schema.arguments]
    back = []  # (original, resolved) pairs to write back

    def one(a, name):
        if type(a) in (list, tuple):
            return type(a)(one(e, name) for e in a)
        if not _has_bit(a):
            return a
        r = resolved(a)
        if name in written:
            back.append((a, r))
        return r

    new_args = [one(a, names[i] if i < len(names) else "") for i, a in enumerate(args)]
    new_kwargs = {k: one(v, k) for k, v in kwargs.items()}
    out = route(func, new_args, new_kwargs)
    for orig, r in back:
        without_math_bits(orig).copy_(_apply_bits(r, orig.is_conj(), orig.is_neg()))
    swap = {id(r): orig for orig, r in back}
    if isinstance(out, torch.Tensor):
        return swap.get(id(out), out)
    if type(out) in (list, tuple):
        return type(out)(swap.get(id(o), o) for o in out)
    return out

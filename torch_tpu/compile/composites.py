"""Decompositions the compiled path adds to torch's core-aten table.

``_foreach_*`` ops (optimizers use them by default on the tpu device: torch counts PrivateUse1 among
the foreach devices) have no entry in torch's decomposition tables; their CompositeExplicitAutograd
kernels are loops of per-tensor aten ops. Traced through that kernel, a compiled optimizer step becomes
per-tensor ops the op table lowers, exactly as eager mode runs them (``eager/fallbacks.py``).

Dynamo itself writes some in-place methods with inductor's ``prims.fma`` (``addcmul_``/``addcdiv_`` with
``value=``, ``add_`` with a tensor ``alpha``: ``AdamW(foreach=False)``'s step): it decomposes to
``a * b + c``, what the prim's own reference computes.

A Python float dynamo passes as an input (``floats.py``) reaches the aten graph as a symbolic float;
AOTAutograd turns it back into tensor operations (its ``tensorify_python_scalars`` pass) only where it is
a positional operand of ``mul``/``add``/``sub``/``div``/``pow``.Tensor or a comparison, and specialises
it anywhere else (one compile per value again). ``_symbolic_scalar_forms`` writes the other forms an
optimizer step uses (``mul.Scalar``, ``div.Scalar``, ``alpha=``, ``value=``, ``full_like``, a float to a
tensor power) as those ops, for a symbolic
float only.
"""
from __future__ import annotations

import functools

import torch

from ..ops import registry

_TABLE = None


def decompositions() -> dict:
    global _TABLE
    if _TABLE is None:
        _TABLE = {**_foreach_composites(), **_inductor_prims(), **_symbolic_scalar_forms(),
                  torch.ops.aten.nansum.default: _nansum_of_no_dims}
    return _TABLE


def _nansum_of_no_dims(x, dim=None, keepdim=False, *, dtype=None):
    """``nansum(x, dim=[])`` sums every dim, as on CPU (torch's meta kernel keeps every dim: the compiled
    result was the total broadcast to x's shape); eager's ``rewrites.nansum_of_no_dims``."""
    if not isinstance(dim, (list, tuple)) or len(dim) != 0:
        return NotImplemented
    return torch.ops.aten.nansum.default(x, None, keepdim, dtype=dtype)


def _inductor_prims() -> dict:
    from torch._inductor import inductor_prims  # noqa: F401  (defines torch.ops.prims.fma)

    return {torch.ops.prims.fma.default: lambda a, b, c: a * b + c}


def _foreach_composites() -> dict:
    key = torch._C.DispatchKey.CompositeExplicitAutograd
    table = {}
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::_foreach_"):
            continue
        name, _, overload = full[len("aten::"):].partition(".")
        if name.endswith("_"):  # in-place: functionalisation leaves the functional form
            continue
        try:
            op = getattr(getattr(torch.ops.aten, name), overload or "default")
        except AttributeError:
            continue
        if op._schema.is_mutable or registry.lookup(op) is not None:
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeExplicitAutograd"):
            table[op] = functools.partial(op._op_dk, key)
    return table


def _symbolic(v) -> bool:
    return isinstance(v, torch.SymFloat)


def _symbolic_scalar_forms() -> dict:
    aten = torch.ops.aten

    def scalar_op(tensor_op):
        def decomposition(self, other):
            return tensor_op(self, other) if _symbolic(other) else NotImplemented
        return decomposition

    def with_alpha(tensor_op):
        def decomposition(self, other, alpha=1):
            if not _symbolic(alpha) or not isinstance(other, torch.Tensor) or not other.is_floating_point():
                return NotImplemented
            return tensor_op(self, aten.mul.Tensor(other, alpha))
        return decomposition

    def pointwise_with_value(combine):
        def decomposition(self, tensor1, tensor2, value=1):
            if not _symbolic(value) or not all(t.is_floating_point() for t in (self, tensor1, tensor2)):
                return NotImplemented
            return aten.add.Tensor(self, aten.mul.Tensor(combine(tensor1, tensor2), value))
        return decomposition

    def full_like(self, fill_value, *, dtype=None, **kwargs):
        dt = dtype if dtype is not None else self.dtype
        if not _symbolic(fill_value) or not dt.is_floating_point:
            return NotImplemented
        return aten.mul.Tensor(aten.full_like.default(self, 1, dtype=dtype, **kwargs), fill_value)

    def scalar_pow(self, exponent):  # float ** tensor (Adam's beta1 ** step)
        if not _symbolic(self):
            return NotImplemented
        dt = exponent.dtype if exponent.is_floating_point() else torch.get_default_dtype()
        return aten.pow.Tensor_Tensor(aten.mul.Tensor(aten.full_like.default(exponent, 1, dtype=dt), self), exponent)

    return {aten.full_like.default: full_like, aten.pow.Scalar: scalar_pow,
            aten.mul.Scalar: scalar_op(aten.mul.Tensor), aten.div.Scalar: scalar_op(aten.div.Tensor),
            aten.add.Tensor: with_alpha(aten.add.Tensor), aten.sub.Tensor: with_alpha(aten.sub.Tensor),
            aten.addcmul.default: pointwise_with_value(aten.mul.Tensor),
            aten.addcdiv.default: pointwise_with_value(aten.div.Tensor)}

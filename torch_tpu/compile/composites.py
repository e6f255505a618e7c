"""Decompositions the compiled path adds to torch's core-aten table.

``_foreach_*`` ops (optimizers use them by default on the tpu device: torch counts PrivateUse1 among
the foreach devices) have no entry in torch's decomposition tables; their CompositeExplicitAutograd
kernels are loops of per-tensor aten ops. Traced through that kernel, a compiled optimizer step becomes
per-tensor ops the op table lowers, exactly as eager mode runs them (``eager/fallbacks.py``).

Dynamo itself writes some in-place methods with inductor's ``prims.fma`` (``addcmul_``/``addcdiv_`` with
``value=``, ``add_`` with a tensor ``alpha``: ``AdamW(foreach=False)``'s step): it decomposes to
``a * b + c``, what the prim's own reference computes.
"""
from __future__ import annotations

import functools

import torch

from ..ops import registry

_TABLE = None


def decompositions() -> dict:
    global _TABLE
    if _TABLE is None:
        _TABLE = {**_foreach_composites(), **_inductor_prims()}
    return _TABLE


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

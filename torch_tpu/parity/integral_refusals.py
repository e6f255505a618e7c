"""Integer, bool and complex inputs CPU torch refuses with an error of its own, where torch's
decompositions and the lowerings compute something (``mvlgamma`` of bool gave inf, ``soft_margin_loss``
of int64 gave 0, ``addcdiv`` of bools computed)."""
from __future__ import annotations

import torch

from ..ops.registry import aten
from ..runtime.dtypes import TYPE_NAMES
from .validators import validates

_ADDCDIV = ("Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a "
            "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + "
            "value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * "
            "tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes.")


def _integral(t) -> bool:
    return isinstance(t, torch.Tensor) and not (t.is_floating_point() or t.is_complex())


@validates(aten.addcdiv.default, aten.addcdiv_.default)
def _addcdiv(x, tensor1, tensor2, *_, **__):
    if _integral(tensor1) and _integral(tensor2):  # bools included, as CPU's check
        raise RuntimeError(_ADDCDIV)


@validates(aten.mvlgamma.default, aten.mvlgamma_.default)
def _mvlgamma(x, *_, **__):
    if x.dtype == torch.bool:
        raise RuntimeError("The input tensor may not be a boolean tensor.")


@validates(aten.soft_margin_loss.default)
def _soft_margin_loss(x, target, *_, **__):
    if x.dtype == torch.bool:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")
    if _integral(x):  # CPU computes the float loss into a tensor of the input's dtype
        raise RuntimeError(f"result type Float can't be cast to the desired output type {TYPE_NAMES[x.dtype]}")

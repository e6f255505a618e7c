"""The dtypes CPU kernels take for an index argument, where torch's meta kernels take any integer dtype
(the lowerings then indexed with int8/int16/uint8 indices, or int32 where CPU takes int64 only)."""
from __future__ import annotations

import torch

from ..ops.registry import aten
from ..runtime.dtypes import TYPE_NAMES
from .validators import validates

_LONG = (torch.int64,)
_INT_OR_LONG = (torch.int32, torch.int64)


def _dtype_of(t):
    return t.dtype if isinstance(t, torch.Tensor) else None


def _refuse(index, allowed, exc_type, message):
    dt = _dtype_of(index)
    if dt is not None and dt not in allowed:
        raise exc_type(message.format(name=TYPE_NAMES.get(dt, dt)))


@validates(aten.put.default)
def _put(x, index, *_, **__):
    _refuse(index, _LONG, RuntimeError, "put_(): Expected a long tensor for index, but got {name}")


@validates(aten.index_copy.default)
def _index_copy(x, dim, index, *_, **__):
    _refuse(index, _LONG, RuntimeError, "index_copy_(): Expected a long tensor for index, but got {name}")


@validates(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(x, dim, index, *_, **__):
    _refuse(index, _LONG, IndexError, "index_fill_(): Expected dtype int64 for index.")


@validates(aten.index_select.default)
def _index_select(x, dim, index, *_, **__):
    _refuse(index, _INT_OR_LONG, RuntimeError, "index_select(): Expected dtype int32 or int64 for index")


@validates(aten.index_add.default)
def _index_add(x, dim, index, *_, **__):
    _refuse(index, _INT_OR_LONG, RuntimeError, "index_add_(): Expected dtype int32/int64 for index but got: {name}")


@validates(aten.index_reduce.default)
def _index_reduce(x, dim, index, *_, **__):
    _refuse(index, _INT_OR_LONG, RuntimeError,
            "index_reduce_(): Expected dtype int32/int64 for index but got: {name}")


@validates(aten.index.Tensor, aten.index_put.default)
def _advanced_indices(x, indices, *_, **__):
    for index in indices:
        _refuse(index, (torch.int64, torch.int32, torch.uint8, torch.bool), IndexError,
                "tensors used as indices must be long, int, byte or bool tensors")


@validates(aten.nll_loss_forward.default)
def _nll_loss_target(x, target, *_, **__):
    _refuse(target, (torch.int64, torch.uint8), RuntimeError,
            "expected target dtype to be Long or Byte, but got {name}")


@validates(aten.multi_margin_loss.default, aten.multilabel_margin_loss_forward.default,
           aten.nll_loss2d_forward.default)
def _margin_loss_target(x, target, *_, **__):
    _refuse(target, _LONG, RuntimeError, "expected scalar type Long but found {name}")


@validates(aten.repeat_interleave.Tensor)
def _repeats(repeats, *_, **__):
    _refuse(repeats, _INT_OR_LONG, NotImplementedError, "\"repeat_interleave_cpu\" not implemented for '{name}'")

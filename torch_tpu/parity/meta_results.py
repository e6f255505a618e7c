"""torch's meta kernel's result where CPU's kernel returns another dtype, shape or layout."""
from __future__ import annotations

import torch

from ..ops.registry import aten


def cpu_meta(func, args, kwargs, meta_out):
    """torch's meta kernel's result where it disagrees with the CPU kernel: ``bool_tensor ** True`` is
    bool on CPU (the meta kernel says int64); an unbatched multilabel_margin_loss without reduction is
    0-d (the meta kernel says (1,)), an unbatched multi_margin_loss's has the target's shape; ``2 ** x`` is contiguous on CPU (the meta kernel keeps x's layout);
    the ops of ``_cpu_memory_format`` lay their results out channels_last on CPU (the meta kernel: contiguous)."""
    if func is aten.pow.Tensor_Scalar and isinstance(meta_out, torch.Tensor) and meta_out.dtype != torch.bool:
        x = args[0]
        y = args[1] if len(args) > 1 else kwargs.get("exponent")
        if isinstance(x, torch.Tensor) and x.dtype == torch.bool and type(y) is bool:
            return torch.empty(meta_out.shape, dtype=torch.bool, device="meta")
    if func is aten.pow.Scalar and isinstance(meta_out, torch.Tensor) and not meta_out.is_contiguous():
        # ``2 ** x``: CPU's kernel lays the result out contiguously whatever x's strides (the meta kernel
        # follows x's, so ``(2 ** x.t()).view(-1)`` would fail where CPU's does not)
        return torch.empty(meta_out.shape, dtype=meta_out.dtype, device="meta")
    fmt = _cpu_memory_format(func, args)
    if fmt is not None and isinstance(meta_out, torch.Tensor) and meta_out.is_contiguous():
        return torch.empty(meta_out.shape, dtype=meta_out.dtype, device="meta", memory_format=fmt)
    if func is aten.multilabel_margin_loss_forward.default and args[0].dim() <= 1 and \
            (args[2] if len(args) > 2 else kwargs.get("reduction")) == 0:
        return torch.empty((), dtype=meta_out[0].dtype, device="meta"), meta_out[1]  # meta says (1,)
    if func is aten.multi_margin_loss.default and args[0].dim() <= 1 and \
            (args[5] if len(args) > 5 else kwargs.get("reduction", 1)) == 0:
        return torch.empty(args[1].shape, dtype=meta_out.dtype, device="meta")  # the target's shape, as on CPU
    return meta_out


_KEEPS_FORMAT = (aten.reflection_pad2d.default, aten.replication_pad2d.default, aten.reflection_pad3d.default,
                 aten.replication_pad3d.default)


def _cpu_memory_format(func, args):
    """The channels_last format CPU torch gives the result of ``func`` where its meta kernel returns a
    contiguous one, else None: a 2-d convolution (transposed too) whose input or weight is channels_last
    (CPU's mkldnn and slow kernels both), a reflection/replication pad or a roll along dims of a
    channels_last input. (A conv of a channels_last model returned contiguous results: ``.stride()``
    and ``is_contiguous`` differed from CPU, and ``y.permute(0, 2, 3, 1).view(...)`` raised.)"""
    from torch._prims_common import suggest_memory_format

    if func is aten.convolution.default:
        x, w = args[0], args[1]
        if isinstance(x, torch.Tensor) and x.dim() == 4 and torch.channels_last in (
                suggest_memory_format(x), suggest_memory_format(w)):
            return torch.channels_last
        return None
    if func in _KEEPS_FORMAT or (func is aten.roll.default and len(args) > 2 and len(args[2]) > 0):
        fmt = suggest_memory_format(args[0])
        return None if fmt is torch.contiguous_format else fmt
    return None

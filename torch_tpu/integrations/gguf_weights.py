"""diffusers' GGUF weights (``GGUFQuantizationConfig``: ``GGUFParameter``, read by ``GGUFLinear``) on the tpu.

A ``GGUFParameter`` is a CPU ``nn.Parameter`` subclass made by ``torch.Tensor._make_subclass``, which cannot wrap
a tpu tensor (itself a wrapper subclass): moving a GGUF model to the tpu failed at its first weight. On the
tpu a GGUF weight is a ``TpuGGUFParameter``: a tpu tensor that is also a ``GGUFParameter`` (``isinstance`` holds,
``quant_type`` and ``quant_shape`` are kept), made by ``GGUFParameter(tpu_tensor, quant_type=...)`` (patched).
Ops on it run as on any tpu tensor (GGUFParameter's ``__torch_function__``, which re-wraps every result, is the
tpu tensor's disabled one), so ``GGUFLinear``'s dequantization (``as_tensor()``, then plain ops) runs on the
device: in one program with the matmul in fused and compiled modes. It leaves the tpu as a CPU
``GGUFParameter`` again (``to``), so model, sequential and group offload move it both ways.
"""
from __future__ import annotations

import torch

from ..tensor.tensor import TpuTensor
from . import diffusers_hook

_MODULE = "diffusers.quantizers.gguf.utils"
_CLASS = []  # [TpuGGUFParameter], made once diffusers' GGUFParameter exists


def _tpu_class(gguf_cls):
    if _CLASS:
        return _CLASS[0]

    class TpuGGUFParameter(TpuTensor, gguf_cls):
        """A GGUF weight on the tpu (see the module)."""

        def as_tensor(self):
            return TpuTensor.detach(self)  # a plain tpu tensor of the same bytes

        def detach(self):
            return _as_gguf(TpuTensor.detach(self), self.quant_type, gguf_cls)

        def to(self, *args, **kwargs):
            out = TpuTensor.to(self, *args, **kwargs)
            if out is self:
                return out
            if isinstance(out, TpuTensor):
                return _as_gguf(out, self.quant_type, gguf_cls)
            return gguf_cls(out, requires_grad=out.requires_grad, quant_type=self.quant_type)

        def cpu(self, *args, **kwargs):
            return self.to("cpu")

        def __reduce_ex__(self, protocol):  # torch.save: the CPU GGUFParameter's form
            return self.cpu().__reduce_ex__(protocol)

    _CLASS.append(TpuGGUFParameter)
    return TpuGGUFParameter


def _as_gguf(t: TpuTensor, quant_type, gguf_cls):
    """``t`` (a new tpu tensor object nobody else holds) as a TpuGGUFParameter of ``quant_type``."""
    cls = _tpu_class(gguf_cls)
    t.__class__ = cls
    t._is_param = True
    t.quant_type = quant_type
    from diffusers.quantizers.gguf.utils import GGML_QUANT_SIZES, _quant_shape_from_byte_shape

    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    t.quant_shape = _quant_shape_from_byte_shape(t.shape, type_size, block_size)
    return t


def _patch(module) -> None:
    gguf_cls = module.GGUFParameter
    original = gguf_cls.__new__
    if hasattr(original, "__torch_tpu_original__"):
        return

    def __new__(cls, data, requires_grad=False, quant_type=None):
        if isinstance(data, TpuTensor):
            out = TpuTensor.detach(data)
            if requires_grad:
                out.requires_grad_(True)
            return _as_gguf(out, quant_type, gguf_cls)
        return original(cls, data, requires_grad=requires_grad, quant_type=quant_type)

    __new__.__torch_tpu_original__ = original
    gguf_cls.__new__ = staticmethod(__new__)


def install() -> None:
    diffusers_hook.when_executed(_MODULE, _patch)

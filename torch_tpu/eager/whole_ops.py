"""CompositeImplicit ops the op table lowers whole, because torch's decomposition would lose a check or cost
a program per piece.

torch decomposes a CompositeImplicitAutograd op above autograd, before ``__torch_dispatch__`` sees it. A
kernel on the AutogradPrivateUse1 key stops the decomposition and sends the op itself below autograd, to the
op table's lowering:

* ``one_hot``: its decomposition checks the class values only on CPU tensors (elsewhere it relies on a
  device-side assert that its ``eq`` never raises), so an out-of-range class would be silent; the lowering
  checks on the device.
* ``rms_norm`` (diffusers' RMSNorm, 16 per FLUX transformer call): its decomposition is 8 ops (two dtype
  copies, pow, mean, add_, rsqrt, two muls), 8 programs in strict eager mode and 8 recorded ops in fused mode,
  where the lowering is one. Only when nothing needs its backward (no input requires grad with grad mode on,
  no torch.func transform, no forward-AD tangent) and the inputs are what the lowering computes (real
  floating tensors on the tpu device, shapes that torch accepts); otherwise the decomposition, as before,
  with autograd through its pieces and torch's own errors. Under inference_mode the autograd keys are skipped
  and the aten op reaches ``__torch_dispatch__`` itself: the op path lowers it the same way.
* ``linear`` (every ``nn.Linear``; 48 per call of the demo transformer): its decomposition is the weight's
  transpose, and for an input of more than 2 dims a flattening view, ``addmm`` and a view back: one program
  either way, but four dispatches, four tensors made on the host and, in fused mode, the views recorded.
  Whole when nothing needs its backward, for plain tpu tensors of one floating dtype, a contiguous input and
  weight (2-d), a 1-d bias or none, shapes that agree: torch's ``addmm`` path, which rounds once. A strided
  input keeps the decomposition: with a bias torch takes ``matmul`` and ``add_`` there (two roundings), and
  XLA:CPU cannot run a bf16 dot with float32 accumulation whose operand is a transposed view of a higher-rank
  array (the decomposition copies it first). Anything else is the decomposition and its errors.
"""
from __future__ import annotations

import torch

from ..runtime import dynamo_frames
from ..runtime.dtypes import REAL_FLOATS
from ..tensor.tensor import TpuTensor
from .attention import needs_backward

aten = torch.ops.aten
_LIBRARY = None


def one_hot(x, num_classes=-1):
    if x.dtype != torch.long or num_classes < -1:
        return aten.one_hot.default.decompose(x, num_classes)  # torch's own errors
    if x.numel() == 0 and num_classes <= 0:  # CPU's check (the decomposition would reduce an empty tensor)
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    if num_classes == -1:  # the class count comes from the data: one wait, as on CPU
        low, high = (int(v) for v in torch.aminmax(x))
        if low < 0:
            raise RuntimeError("Class values must be non-negative.")
        num_classes = high + 1
    with torch._C._AutoDispatchBelowAutograd():
        return aten.one_hot.default(x, num_classes)


def _rms_norm_whole(x, normalized_shape, weight) -> bool:
    # (a tensor of another subclass on the device, a DTensor say, has its own rules for torch's pieces)
    n = len(normalized_shape)
    if not (0 < n <= x.dim()) or type(x) is not TpuTensor or x.dtype not in REAL_FLOATS:
        return False
    if tuple(x.shape[x.dim() - n:]) != tuple(normalized_shape):
        return False
    if weight is not None and (type(weight) is not TpuTensor or weight.device != x.device
                               or weight.dtype not in REAL_FLOATS or tuple(weight.shape) != tuple(normalized_shape)):
        return False
    return not needs_backward(x, weight)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    if not _rms_norm_whole(x, normalized_shape, weight):
        return aten.rms_norm.default.decompose(x, normalized_shape, weight, eps)
    with torch._C._AutoDispatchBelowAutograd():
        return aten.rms_norm.default(x, normalized_shape, weight, eps)


def _linear_whole(x, weight, bias) -> bool:
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if any(type(t) is not TpuTensor for t in tensors):
        return False
    if x.dtype not in REAL_FLOATS or any(t.dtype != x.dtype or t.device != x.device for t in tensors):
        return False
    if weight.dim() != 2 or x.dim() < 2 or x.shape[-1] != weight.shape[1]:
        return False
    if not (x.is_contiguous() and weight.is_contiguous()):
        return False
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        return False
    return not needs_backward(*tensors)


def linear(x, weight, bias=None):
    if not _linear_whole(x, weight, bias):
        return aten.linear.default.decompose(x, weight, bias)
    with torch._C._AutoDispatchBelowAutograd():
        return aten.linear.default(x, weight, bias)


def register() -> None:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("aten", "IMPL")
        _LIBRARY.impl("one_hot", one_hot, "AutogradPrivateUse1")
        _LIBRARY.impl("rms_norm", rms_norm, "AutogradPrivateUse1")
        _LIBRARY.impl("linear", linear, "AutogradPrivateUse1")
        # torch calls these from C++ when the op runs eagerly inside a compiled region (a frame dynamo skips,
        # such as nn.Linear's own forward): plain Python there (runtime/dynamo_frames.py)
        dynamo_frames.keep_out_all([one_hot, rms_norm, linear])

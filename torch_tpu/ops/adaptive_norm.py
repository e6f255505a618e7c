"""diffusers' adaptive layer norms (adaLN: the DiT/FLUX/SD3 conditioning) as ONE op, used by the eager modes
(one program in strict mode, one recorded op in fused mode):

``tpu::ada_layer_norm(x, emb, weight, bias, chunks, scale_chunk, shift_chunk, eps) -> (out, projected)``::

    projected = linear(silu(emb), weight, bias)                 # (B, chunks * D): every modulation, side by side
    scale, shift = chunk scale_chunk and chunk shift_chunk of projected (each (B, D))
    out = layer_norm(x, (D,), eps) * (1 + scale[:, None]) + shift[:, None]     # x (B, L, D)

which is what ``AdaLayerNormZero`` (6 chunks: shift 0, scale 1), ``AdaLayerNormZeroSingle`` (3: shift 0, scale 1)
and ``AdaLayerNormContinuous`` (2: scale 0, shift 1) compute with a layer norm without weight and bias. Their
other chunks (gates, the feed-forward's shift and scale) are views of ``projected``. diffusers' version is six
aten ops (silu, linear, layer_norm, add, mul, add): six programs in strict eager mode, six recorded ops in fused
mode, 7 uses per call of the demo FLUX transformer (2 double blocks x 2, 2 single blocks, the output norm).
``integrations/diffusers_norms.py`` routes diffusers' modules here.

Each step rounds to the inputs' dtype as the op-by-op path does (the lowering is the op table's own silu,
linear, layer norm, add and mul, in diffusers' order), so results match diffusers' modules to rounding. Defined
at ``import torch`` (torch only; JAX inside the lowering): a Meta kernel (shapes, the argument checks) and a
CPU kernel (the same math in torch, the reference). No Autograd kernel: the op is used only where nothing needs
its backward.
"""
from __future__ import annotations

import torch

from ..runtime import dynamo_frames
from ..runtime.dtypes import REAL_FLOATS
from .registry import register

SCHEMA = ("ada_layer_norm(Tensor x, Tensor emb, Tensor weight, Tensor? bias, int chunks, int scale_chunk, "
          "int shift_chunk, float eps) -> (Tensor, Tensor)")
_LIBS: list = []


def check(x, emb, weight, bias, chunks, scale_chunk, shift_chunk) -> None:
    """torch-style errors naming the op, the shapes and the dtypes (every kernel calls it first)."""
    name = "tpu::ada_layer_norm"
    tensors = [("x", x), ("emb", emb), ("weight", weight)] + ([("bias", bias)] if bias is not None else [])
    for what, t in tensors:
        if t.dtype not in REAL_FLOATS or t.dtype != x.dtype:
            raise RuntimeError(f"{name}: x, emb, weight and bias must be floating tensors of one dtype, got {what} "
                               f"of {t.dtype} and x of {x.dtype}")
    if x.dim() != 3 or emb.dim() != 2 or weight.dim() != 2:
        raise RuntimeError(f"{name}: x must be (batch, length, dim), emb (batch, features) and weight 2-d, got "
                           f"shapes {tuple(x.shape)}, {tuple(emb.shape)} and {tuple(weight.shape)}")
    if chunks < 1 or not (0 <= scale_chunk < chunks and 0 <= shift_chunk < chunks) or scale_chunk == shift_chunk:
        raise RuntimeError(f"{name}: scale_chunk {scale_chunk} and shift_chunk {shift_chunk} must be two different "
                           f"chunks of {chunks}")
    dim = x.shape[-1]
    if tuple(weight.shape) != (chunks * dim, emb.shape[1]):
        raise RuntimeError(f"{name}: weight must be ({chunks} x dim {dim}, emb features {emb.shape[1]}) = "
                           f"{(chunks * dim, emb.shape[1])}, got {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (chunks * dim,):
        raise RuntimeError(f"{name}: bias must be ({chunks * dim},), got {tuple(bias.shape)}")
    if emb.shape[0] != x.shape[0]:
        raise RuntimeError(f"{name}: emb's batch {emb.shape[0]} must be x's batch {x.shape[0]}")


def reference(x, emb, weight, bias, chunks, scale_chunk, shift_chunk, eps):
    """The op in torch ops (its CPU kernel; diffusers' formula)."""
    check(x, emb, weight, bias, chunks, scale_chunk, shift_chunk)
    projected = torch.nn.functional.linear(torch.nn.functional.silu(emb), weight, bias)
    parts = projected.chunk(chunks, dim=1)
    normed = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=eps)
    return normed * (1 + parts[scale_chunk][:, None]) + parts[shift_chunk][:, None], projected


def _meta(x, emb, weight, bias, chunks, scale_chunk, shift_chunk, eps):
    check(x, emb, weight, bias, chunks, scale_chunk, shift_chunk)
    return x.new_empty(x.shape), x.new_empty((x.shape[0], weight.shape[0]))


def define() -> None:
    """Define ``tpu::ada_layer_norm`` and its kernels (once per process; torch only)."""
    if _LIBS:
        return
    from . import attention

    lib = attention.fragment()
    lib.define(SCHEMA)
    lib.impl("ada_layer_norm", _meta, "Meta")
    lib.impl("ada_layer_norm", reference, "CPU")
    _LIBS.append(lib)
    # torch calls these from C++ when an op runs eagerly inside a compiled region (runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([_meta, reference])


def ada_layer_norm(x, emb, weight, bias, chunks, scale_chunk, shift_chunk, eps, precision=None):
    """The lowering: the op table's silu, linear, layer norm, add and mul in diffusers' order (each rounds to
    the inputs' dtype, as the op-by-op path does)."""
    from .activations import silu
    from .elementwise import add, mul
    from .nn import linear, native_layer_norm

    # linear's lowering returns half inputs' float32 sum (its executor rounds it): rounded here as the op-by-op
    # path rounds it, so the modulation computes in x's dtype (float32 there made a composing op's matmuls
    # float32 at "highest" precision and kept the attention off its bf16 kernel)
    projected = linear(silu(emb), weight, bias, precision).astype(x.dtype)
    dim = x.shape[-1]
    scale = projected[:, scale_chunk * dim:(scale_chunk + 1) * dim][:, None]
    shift = projected[:, shift_chunk * dim:(shift_chunk + 1) * dim][:, None]
    normed = native_layer_norm(x, (dim,), None, None, eps)[0]
    return add(mul(normed, add(scale, 1)), shift), projected


define()
register(torch.ops.tpu.ada_layer_norm.default, matmul=True,
         static=("chunks", "scale_chunk", "shift_chunk", "eps"))(ada_layer_norm)

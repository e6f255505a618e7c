"""diffusers' adaptive layer norms on tpu tensors as one op (``tpu::ada_layer_norm``, ops/adaptive_norm.py).

``AdaLayerNormZero``, ``AdaLayerNormZeroSingle`` and ``AdaLayerNormContinuous`` (FLUX's and SD3's blocks and
output norm) compute silu, linear, layer_norm, add, mul and add: six programs in strict eager mode, six recorded
ops in fused mode, for each of the 7 uses per call of the demo FLUX transformer (2 double blocks x 2, 2 single
blocks, the output norm). ``diffusers.models.normalization`` gets forwards that send the calls they can serve
exactly to the one op and every other call to diffusers' own forward, unchanged.

Served: the module as diffusers builds it for FLUX and SD3 (an ``nn.SiLU``, an ``nn.Linear``, an ``nn.LayerNorm``
over the last dimension without weight and bias; ``AdaLayerNormZero`` without its own timestep embedding and
with ``emb`` given); nothing watching or replacing those submodules' calls (``skipped_calls.py``: hooks, such as
``enable_sequential_cpu_offload``'s weight moves, global module hooks but fused mode's own, an instance forward); x a 3-d tensor, the conditioning 2-d with x's batch; x, the
conditioning and the linear's parameters plain tensors of the tpu device (not DTensors) of one floating dtype;
nothing that needs a gradient (grad mode off, or no input or parameter requiring one; no torch.func transform);
autocast off (it casts the linear's operands and runs the layer norm in float32); not while dynamo traces
(compiled mode: XLA fuses the six ops itself). Everything else: diffusers' forward, its errors included.

When: ``install()`` at ``import torch`` (torch_tpu's registration), importing nothing of diffusers: the module is
patched now if diffusers imported it already, else right after diffusers executes it (``diffusers_hook``). A
diffusers whose forwards take other parameters is left alone.
"""
from __future__ import annotations

import functools

import torch

from ..eager.attention import needs_backward
from ..runtime.dtypes import REAL_FLOATS
from ..tensor.tensor import TpuTensor
from . import diffusers_hook
from .skipped_calls import hooked

TARGET = "diffusers.models.normalization"


def layer_norm_eps(norm, dim):
    """The eps of a plain ``nn.LayerNorm`` over the last ``dim`` features (no weight, no bias), else None."""
    if type(norm) is not torch.nn.LayerNorm or norm.weight is not None or norm.bias is not None:
        return None
    return float(norm.eps) if tuple(norm.normalized_shape) == (dim,) else None


def arguments(module, x, emb, chunks):
    """(weight, bias, eps) of ``tpu::ada_layer_norm`` for a call of ``module`` it serves exactly, else None (the
    call's own conditions; a caller that skips ``module``'s call as part of a larger op checks hooks on it)."""
    if torch.compiler.is_compiling() or type(x) is not TpuTensor or type(emb) is not TpuTensor:
        return None
    if torch.is_autocast_enabled("tpu"):  # autocast casts linear's operands and runs layer_norm in float32
        return None
    silu, linear, norm = getattr(module, "silu", None), getattr(module, "linear", None), getattr(module, "norm", None)
    if type(silu) is not torch.nn.SiLU or type(linear) is not torch.nn.Linear or hooked(silu, linear, norm):
        return None
    if x.dim() != 3 or emb.dim() != 2 or emb.shape[0] != x.shape[0]:
        return None
    eps = layer_norm_eps(norm, x.shape[-1])
    weight, bias = linear.weight, linear.bias
    params = (weight,) if bias is None else (weight, bias)
    if eps is None or any(type(p) is not TpuTensor for p in params):
        return None
    if x.dtype not in REAL_FLOATS or any(t.dtype != x.dtype or t.device != x.device for t in (emb, *params)):
        return None
    if tuple(weight.shape) != (chunks * x.shape[-1], emb.shape[1]) or needs_backward(x, emb, *params):
        return None
    return weight, bias, eps


def _one_op(module, x, emb, chunks, scale_chunk, shift_chunk):
    """``tpu::ada_layer_norm``'s (out, projected) for a call it serves exactly, else None."""
    served = arguments(module, x, emb, chunks)
    if served is None:
        return None
    weight, bias, eps = served
    return torch.ops.tpu.ada_layer_norm.default(x, emb, weight, bias, chunks, scale_chunk, shift_chunk, eps)


def _zero(original):
    @functools.wraps(original)
    def forward(self, x, timestep=None, class_labels=None, hidden_dtype=None, emb=None):
        served = None if self.emb is not None or emb is None else _one_op(self, x, emb, 6, 1, 0)
        if served is None:
            return original(self, x, timestep, class_labels, hidden_dtype, emb)
        out, projected = served
        _, _, gate_msa, shift_mlp, scale_mlp, gate_mlp = projected.chunk(6, dim=1)
        return out, gate_msa, shift_mlp, scale_mlp, gate_mlp

    return forward


def _zero_single(original):
    @functools.wraps(original)
    def forward(self, x, emb=None):
        served = None if emb is None else _one_op(self, x, emb, 3, 1, 0)
        if served is None:
            return original(self, x, emb)
        out, projected = served
        return out, projected.chunk(3, dim=1)[2]

    return forward


def _continuous(original):
    @functools.wraps(original)
    def forward(self, x, conditioning_embedding):
        served = _one_op(self, x, conditioning_embedding, 2, 0, 1)
        return original(self, x, conditioning_embedding) if served is None else served[0]

    return forward


# diffusers' class -> (the method patched, its parameters, the forward that serves what it can)
_SERVED = {
    "AdaLayerNormZero": ("forward", ("self", "x", "timestep", "class_labels", "hidden_dtype", "emb"), _zero),
    "AdaLayerNormZeroSingle": ("forward", ("self", "x", "emb"), _zero_single),
    "AdaLayerNormContinuous": ("forward", ("self", "x", "conditioning_embedding"), _continuous),
}


def _patch(module) -> None:
    diffusers_hook.patch_methods(module, _SERVED)


def install() -> None:
    """Route diffusers' adaptive layer norms on tpu tensors to the one op (see the module's docstring)."""
    from ..ops import adaptive_norm

    adaptive_norm.define()
    if not installed() and not diffusers_hook.waiting(TARGET):
        diffusers_hook.when_executed(TARGET, _patch)


def installed() -> bool:
    """Whether diffusers' adaptive layer norms have the serving forwards now."""
    return diffusers_hook.methods_patched(TARGET, _SERVED)

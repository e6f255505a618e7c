"""diffusers' FLUX attention processor on tpu tensors as one op (``tpu::flux_attention`` and
``tpu::flux_joint_attention``, ops/flux_attention.py).

``FluxAttnProcessor`` computes q, k and v projections, RMS norms, concatenations, rotary embeddings, the
attention and the output projections one aten op at a time: 18 programs per double block and 8 per single
block in strict eager mode, as many recorded ops in fused mode (48 of the demo transformer's 139 programs per
call). ``diffusers.models.transformers.transformer_flux.FluxAttnProcessor`` gets a ``__call__`` that sends the
calls it can serve exactly to the one op and every other call to diffusers' own, unchanged.

Served: the ``FluxAttention`` module as diffusers builds it (``nn.Linear`` projections, not fused into
``to_qkv``; ``nn.RMSNorm`` q/k norms over head_dim with a set eps; for a joint call, the added projections and
norms, ``to_out`` as [``nn.Linear``, an ``nn.Dropout`` that drops nothing] and ``to_add_out``); no attention
mask; the processor without an attention backend or parallel config of its own, and diffusers' active backend
the native one; ``image_rotary_emb`` None or a (cos, sin) pair of (sequence, head_dim) tables; nothing watching
or replacing the submodules' calls (``skipped_calls.py``); x, the context and every parameter plain tensors of
the tpu device (not DTensors) of one floating dtype; nothing that needs a gradient; autocast off; not while
dynamo traces (compiled mode: the graph holds diffusers' ops, and ``compile/norm_rope.py`` joins the norms and
the rotary embedding there). Everything else: diffusers' processor, its errors included.

When: ``install()`` at ``import torch`` (torch_tpu's registration), importing nothing of diffusers: the class
is patched now if diffusers imported the module already, else right after diffusers executes it
(``diffusers_hook``). A diffusers whose processor takes other parameters is left alone.
"""
from __future__ import annotations

import functools
import inspect
import sys

import torch

from ..eager.attention import needs_backward
from ..runtime.dtypes import REAL_FLOATS
from ..tensor.tensor import TpuTensor
from . import diffusers_hook
from .skipped_calls import hooked

TARGET = "diffusers.models.transformers.transformer_flux"
DISPATCH = "diffusers.models.attention_dispatch"
_PARAMETERS = ("self", "attn", "hidden_states", "encoder_hidden_states", "attention_mask", "image_rotary_emb")


def _native_backend(processor) -> bool:
    """The processor computes attention with diffusers' native backend (torch's SDPA), on one device."""
    if getattr(processor, "_attention_backend", None) is not None or getattr(processor, "_parallel_config", None):
        return False
    registry = getattr(sys.modules.get(DISPATCH), "_AttentionBackendRegistry", None)
    active = getattr(registry, "_active_backend", None)
    return active is not None and getattr(active, "value", active) == "native"


def _rms_norm(norm, head_dim):
    """(weight, eps) of a plain ``nn.RMSNorm`` over head_dim with a set eps, else None."""
    if type(norm) is not torch.nn.RMSNorm or tuple(norm.normalized_shape) != (head_dim,) or norm.eps is None:
        return None
    return norm.weight, float(norm.eps)


def _dropless(dropout) -> bool:
    return type(dropout) is torch.nn.Dropout and (dropout.p == 0 or not dropout.training)


def _modules(attn, joint):
    """(linears in the op's order, norms in the op's order, other modules the call skips), or None when the
    module is not diffusers' plain FluxAttention for this call."""
    if getattr(attn, "fused_projections", False):
        return None
    linears = [getattr(attn, n, None) for n in ("to_q", "to_k", "to_v")]
    norms = [getattr(attn, n, None) for n in ("norm_q", "norm_k")]
    others = []
    if joint:
        to_out = getattr(attn, "to_out", None)
        if getattr(attn, "added_kv_proj_dim", None) is None or type(to_out) is not torch.nn.ModuleList \
                or len(to_out) != 2 or not _dropless(to_out[1]):
            return None
        linears += [getattr(attn, n, None) for n in ("add_q_proj", "add_k_proj", "add_v_proj")]
        linears += [to_out[0], getattr(attn, "to_add_out", None)]
        norms += [getattr(attn, n, None) for n in ("norm_added_q", "norm_added_k")]
        others = [to_out[1]]
    if any(type(m) is not torch.nn.Linear for m in linears):
        return None
    return linears, norms, others


def _one_op(processor, attn, x, context, attention_mask, image_rotary_emb):
    """The one op's result for a call it serves exactly, else None."""
    if attention_mask is not None or torch.compiler.is_compiling() or type(x) is not TpuTensor:
        return None
    joint = context is not None
    if (joint and type(context) is not TpuTensor) or torch.is_autocast_enabled("tpu") \
            or not _native_backend(processor):
        return None
    head_dim = getattr(attn, "head_dim", None)
    modules = _modules(attn, joint)
    if type(head_dim) is not int or head_dim <= 0 or modules is None:
        return None
    linears, norms, others = modules
    normed = [_rms_norm(n, head_dim) for n in norms]
    if any(n is None for n in normed) or hooked(*linears, *norms, *others):
        return None
    weights, biases = [m.weight for m in linears], [m.bias for m in linears]
    norm_weights, eps = [w for w, _ in normed], [e for _, e in normed]
    cos = sin = None
    if image_rotary_emb is not None:
        if not isinstance(image_rotary_emb, (tuple, list)) or len(image_rotary_emb) != 2:
            return None
        cos, sin = image_rotary_emb
    length = x.shape[1] + (context.shape[1] if joint and context.dim() == 3 else 0)
    if x.dim() != 3 or x.dtype not in REAL_FLOATS or (joint and (context.dim() != 3 or context.shape[0] != x.shape[0])):
        return None
    params = [t for t in (*weights, *biases, *norm_weights) if t is not None]
    tables = [t for t in (cos, sin) if t is not None]
    if any(type(t) is not TpuTensor for t in (*params, *tables)):
        return None
    if any(t.dtype != x.dtype or t.device != x.device for t in ([context] if joint else []) + params):
        return None
    if any(t.dtype not in REAL_FLOATS or tuple(t.shape) != (length, head_dim) or t.device != x.device
           for t in tables) or (tables and head_dim % 2):
        return None
    inner = weights[0].shape[0]
    sources = [x.shape[-1]] * 3 + ([context.shape[-1]] * 3 + [inner, inner] if joint else [])
    if inner % head_dim or any(w.shape[1] != f for w, f in zip(weights, sources)) \
            or any(w.shape[0] != inner for w in weights[1:6]):
        return None
    if needs_backward(x, context, *params, *tables):
        return None
    if joint:
        return torch.ops.tpu.flux_joint_attention.default(x, context, weights, biases, norm_weights, eps, cos, sin,
                                                          head_dim)
    return torch.ops.tpu.flux_attention.default(x, weights, biases, norm_weights, eps, cos, sin, head_dim)


def _serving_call(original):
    @functools.wraps(original)
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 image_rotary_emb=None):
        served = _one_op(self, attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        if served is None:
            return original(self, attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        return served

    return __call__


def _patch(module) -> None:
    def patch_one(name):
        cls = getattr(module, name, None)
        original = getattr(cls, "__call__", None)
        if original is None or hasattr(original, "__torch_tpu_original__"):
            return
        if tuple(inspect.signature(original).parameters) != _PARAMETERS:
            return
        call = _serving_call(original)
        call.__torch_tpu_original__ = original
        cls.__call__ = call

    diffusers_hook.patch_each(("FluxAttnProcessor",), patch_one)


def install() -> None:
    """Route diffusers' FLUX attention processor on tpu tensors to the one op (see the module's docstring)."""
    from ..ops import flux_attention

    flux_attention.define()
    if not installed() and not diffusers_hook.waiting(TARGET):
        diffusers_hook.when_executed(TARGET, _patch)


def installed() -> bool:
    """Whether diffusers' FluxAttnProcessor has the serving ``__call__`` now."""
    module = sys.modules.get(TARGET)
    call = getattr(getattr(module, "FluxAttnProcessor", None), "__call__", None)
    return module is not None and hasattr(call, "__torch_tpu_original__")

"""diffusers' FLUX attention processor and transformer blocks on tpu tensors as one op each
(``tpu::flux_attention``/``tpu::flux_joint_attention``, ops/flux_attention.py; ``tpu::flux_block``/
``tpu::flux_single_block``, ops/flux_blocks.py).

``FluxAttnProcessor`` computes q, k and v projections, RMS norms, concatenations, rotary embeddings, the
attention and the output projections one aten op at a time (18 programs per double block and 8 per single
block in strict eager mode, as many recorded ops in fused mode), and the blocks around it their adaptive norms,
residual gates, layer norms, modulations and feed-forwards (25 programs per double block and 9 per single one
with the processor and the adaptive norms as one op each). In ``diffusers.models.transformers.transformer_flux``,
``FluxAttnProcessor.__call__``, ``FluxTransformerBlock.forward`` and ``FluxSingleTransformerBlock.forward`` get
methods that send the calls they can serve exactly to the one op and every other call to diffusers' own method,
unchanged. A block not served (a hook on one of its modules, say) still has its attention and norms served
one op each where their own calls can be.

Attention served: the ``FluxAttention`` module as diffusers builds it (``nn.Linear`` projections, not fused into
``to_qkv``; ``nn.RMSNorm`` q/k norms over head_dim with a set eps; for a joint call, the added projections and
norms, ``to_out`` as [``nn.Linear``, an ``nn.Dropout`` that drops nothing] and ``to_add_out``); no attention
mask; the processor without an attention backend or parallel config of its own, and diffusers' active backend
the native one; ``image_rotary_emb`` None or a (cos, sin) pair of (sequence, head_dim) tables; nothing watching
or replacing the submodules' calls (``skipped_calls.py``); x, the context and every parameter plain tensors of
the tpu device (not DTensors) of one floating dtype; nothing that needs a gradient; autocast off; not while
dynamo traces (compiled mode: the graph holds diffusers' ops, and ``compile/norm_rope.py`` joins the norms and
the rotary embedding there). Blocks served: the same of their attention (with ``FluxAttnProcessor`` itself as
its processor), their adaptive norms served as ``diffusers_norms`` serves them, layer norms without weights,
``FeedForward`` as FLUX builds it (GELU with the tanh approximation, dropouts that drop nothing) or, in a
single block, ``proj_mlp``, ``nn.GELU(approximate="tanh")`` and ``proj_out``; no joint_attention_kwargs;
nothing watching or replacing any of the block's submodules' calls. Everything else: diffusers' code, its
errors included.

When: ``install()`` at ``import torch`` (torch_tpu's registration), importing nothing of diffusers: the class
is patched now if diffusers imported the module already, else right after diffusers executes it
(``diffusers_hook``). A diffusers whose methods take other parameters keeps them.
"""
from __future__ import annotations

import functools
import sys

import torch

from ..eager.attention import needs_backward
from ..tensor.tensor import TpuTensor
from ..ops import flux_attention
from . import diffusers_hook, diffusers_norms
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


def arguments(processor, attn, x, context, attention_mask, image_rotary_emb, length=None):
    """The arguments after the inputs of ``tpu::flux_attention`` (``tpu::flux_joint_attention`` with a context)
    for a call of ``processor`` on ``attn`` they serve exactly: (weights, biases, norm_weights, eps, cos, sin,
    head_dim), else None. ``x`` and ``context`` stand for the call's (a block checks its own: the call's are its
    normalised copies, of the same shape, dtype and device); ``length``, the tokens the rotary tables cover where
    they are not x's with the context's (a single block's attention runs over both streams, joined)."""
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
        if cos is None or sin is None:
            return None
    params = [t for t in (*weights, *biases, *norm_weights) if t is not None]
    tables = [t for t in (cos, sin) if t is not None]
    if any(type(t) is not TpuTensor for t in (*params, *tables)):
        return None
    try:  # shapes, dtypes and devices the op takes (its own check), empty tensors refused
        flux_attention.check(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim, length)
    except RuntimeError:
        return None
    if needs_backward(x, context, *params, *tables):
        return None
    return weights, biases, norm_weights, eps, cos, sin, head_dim


def _one_op(processor, attn, x, context, attention_mask, image_rotary_emb):
    """The one op's result for a call it serves exactly, else None."""
    served = arguments(processor, attn, x, context, attention_mask, image_rotary_emb)
    if served is None:
        return None
    if context is not None:
        return torch.ops.tpu.flux_joint_attention.default(x, context, *served)
    return torch.ops.tpu.flux_attention.default(x, *served)


def _serving_call(original):
    @functools.wraps(original)
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 image_rotary_emb=None):
        served = _one_op(self, attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        if served is None:
            return original(self, attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        return served

    return __call__


# --- the blocks ------------------------------------------------------------------------------------------------
def _feed_forward(ff, dim):
    """(proj, out) linears of diffusers' ``FeedForward`` as FLUX builds it (``activation_fn="gelu-approximate"``:
    GELU(tanh) with its projection, a dropout that drops nothing, the output linear), else None."""
    net = getattr(ff, "net", None)
    if type(ff).__name__ != "FeedForward" or type(net) is not torch.nn.ModuleList or len(net) not in (3, 4):
        return None
    act, out = net[0], net[2]
    if type(act).__name__ != "GELU" or not type(act).__module__.startswith("diffusers.") \
            or getattr(act, "approximate", None) != "tanh" or type(getattr(act, "proj", None)) is not torch.nn.Linear:
        return None
    if not _dropless(net[1]) or (len(net) == 4 and not _dropless(net[3])) or type(out) is not torch.nn.Linear:
        return None
    if act.proj.in_features != dim or out.in_features != act.proj.out_features or out.out_features != dim:
        return None
    return act.proj, out


def _block_inputs_served(block, x, context, temb, joint_attention_kwargs) -> bool:
    """What both blocks need of their call before their modules are looked at."""
    if joint_attention_kwargs or torch.compiler.is_compiling():
        return False
    if type(x) is not TpuTensor or type(context) is not TpuTensor or type(temb) is not TpuTensor:
        return False
    if x.dim() != 3 or context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != x.shape[-1]:
        return False
    if x.numel() == 0 or context.numel() == 0:  # empty batches or sequences: diffusers' ops
        return False
    module = sys.modules.get(TARGET)
    attn = getattr(block, "attn", None)
    return module is not None and type(getattr(attn, "processor", None)) is getattr(module, "FluxAttnProcessor", None)


def _plain_parameters(x, linears, others=()) -> list | None:
    """The linears' weights and biases (None where a linear has none), when every parameter is a tpu tensor of
    x's dtype and device and nothing needs a gradient; else None."""
    weights, biases = [m.weight for m in linears], [m.bias for m in linears]
    params = [t for t in (*weights, *biases, *others) if t is not None]
    if any(type(t) is not TpuTensor or t.dtype != x.dtype or t.device != x.device for t in params):
        return None
    return None if needs_backward(*params) else [weights, biases]


def _double_block(block, x, context, temb, image_rotary_emb, joint_attention_kwargs):
    """``tpu::flux_block``'s (context, x) for a call of a ``FluxTransformerBlock`` it serves exactly, else None."""
    if not _block_inputs_served(block, x, context, temb, joint_attention_kwargs):
        return None
    dim = x.shape[-1]
    norms = [diffusers_norms.arguments(n, t, temb, 6) if getattr(n, "emb", True) is None else None
             for n, t in ((block.norm1, x), (block.norm1_context, context))]
    attention = arguments(block.attn.processor, block.attn, x, context, None, image_rotary_emb)
    layer_norm_eps = [diffusers_norms.layer_norm_eps(getattr(block, n, None), dim) for n in ("norm2", "norm2_context")]
    ffs = [_feed_forward(getattr(block, n, None), dim) for n in ("ff", "ff_context")]
    if any(v is None for v in (*norms, attention, *layer_norm_eps, *ffs)):
        return None
    if hooked(*(m for m in block.modules() if m is not block)):
        return None
    plain = _plain_parameters(x, [m for ff in ffs for m in ff])
    if plain is None:
        return None
    weights, biases, norm_weights, eps, cos, sin, head_dim = attention
    return torch.ops.tpu.flux_block.default(
        x, context, temb, [norms[0][0], norms[1][0], *weights, *plain[0]], [norms[0][1], norms[1][1], *biases, *plain[1]],
        norm_weights, eps, [norms[0][2], norms[1][2], *layer_norm_eps], cos, sin, head_dim)


def _single_block(block, x, context, temb, image_rotary_emb, joint_attention_kwargs):
    """(context, x) of a ``FluxSingleTransformerBlock`` call ``tpu::flux_single_block`` serves exactly, as the block
    returns them (two views of the op's one result, context tokens first), else None."""
    if not _block_inputs_served(block, x, context, temb, joint_attention_kwargs):
        return None
    dim = x.shape[-1]
    norm = diffusers_norms.arguments(block.norm, x, temb, 3)
    attention = arguments(block.attn.processor, block.attn, x, None, None, image_rotary_emb,
                          length=x.shape[1] + context.shape[1])
    mlp, out, act = getattr(block, "proj_mlp", None), getattr(block, "proj_out", None), getattr(block, "act_mlp", None)
    if norm is None or attention is None or type(mlp) is not torch.nn.Linear or type(out) is not torch.nn.Linear:
        return None
    if type(act) is not torch.nn.GELU or act.approximate != "tanh" or mlp.in_features != dim \
            or out.in_features != attention[0][0].shape[0] + mlp.out_features or out.out_features != dim:
        return None
    if hooked(*(m for m in block.modules() if m is not block)):
        return None
    plain = _plain_parameters(x, [mlp, out], [context])
    if plain is None:
        return None
    weights, biases, norm_weights, eps, cos, sin, head_dim = attention
    out = torch.ops.tpu.flux_single_block.default(
        x, context, temb, [norm[0], plain[0][0], *weights, plain[0][1]], [norm[1], plain[1][0], *biases, plain[1][1]],
        norm_weights, eps, [norm[2]], cos, sin, head_dim)
    text = context.shape[1]  # the block's own split
    return out[:, :text], out[:, text:]


def _serving_block_forward(serve):
    """A block forward that returns ``serve(...)`` where it serves the call, else diffusers' own forward's."""

    def make(original):
        @functools.wraps(original)
        def forward(self, hidden_states, encoder_hidden_states, temb, image_rotary_emb=None,
                    joint_attention_kwargs=None):
            served = serve(self, hidden_states, encoder_hidden_states, temb, image_rotary_emb,
                           joint_attention_kwargs)
            if served is None:
                return original(self, hidden_states, encoder_hidden_states, temb, image_rotary_emb,
                                joint_attention_kwargs)
            return served

        return forward

    return make


_BLOCK_PARAMETERS = ("self", "hidden_states", "encoder_hidden_states", "temb", "image_rotary_emb",
                     "joint_attention_kwargs")
# diffusers' class -> (the method patched, its parameters, the method that serves what it can)
_SERVED = {
    "FluxAttnProcessor": ("__call__", _PARAMETERS, _serving_call),
    "FluxTransformerBlock": ("forward", _BLOCK_PARAMETERS, _serving_block_forward(_double_block)),
    "FluxSingleTransformerBlock": ("forward", _BLOCK_PARAMETERS, _serving_block_forward(_single_block)),
}


def _patch(module) -> None:
    diffusers_hook.patch_methods(module, _SERVED)


def install() -> None:
    """Route diffusers' FLUX attention processor and blocks on tpu tensors to one op each (see the module's
    docstring)."""
    from ..ops import flux_blocks

    flux_blocks.define()
    if not installed() and not diffusers_hook.waiting(TARGET):
        diffusers_hook.when_executed(TARGET, _patch)


def installed() -> bool:
    """Whether diffusers' FLUX processor and blocks have the serving methods now."""
    return diffusers_hook.methods_patched(TARGET, _SERVED)

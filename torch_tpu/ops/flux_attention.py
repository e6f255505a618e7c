"""diffusers' FLUX attention processor as ONE op, used by the eager modes (one program in strict mode, one
recorded op in fused mode):

``tpu::flux_attention(x, weights, biases, norm_weights, eps, cos, sin, head_dim) -> out`` (a single-stream
block: ``weights`` are to_q, to_k, to_v; ``norm_weights`` and ``eps`` norm_q's and norm_k's)::

    q, k, v = (linear(x, w, b).unflatten(-1, (-1, head_dim)) for w, b in the three projections)
    q, k = rms_norm(q, (head_dim,), norm_q, eps_q), rms_norm(k, (head_dim,), norm_k, eps_k)
    q, k = rotary_embedding(q, cos, sin), rotary_embedding(k, cos, sin)         # when cos and sin are given
    out = scaled_dot_product_attention(q, k, v) over heads, flattened back to (batch, length, heads x head_dim)

``tpu::flux_joint_attention(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim) -> (out,
context_out)`` (a double-stream block: ``weights`` are to_q, to_k, to_v, add_q_proj, add_k_proj,
add_v_proj, to_out[0] and to_add_out; ``norm_weights`` norm_q, norm_k, norm_added_q, norm_added_k): the
context's q, k and v computed the same way with their own projections and norms, put before x's along the
sequence (text tokens first, as FLUX does) before the rotary embedding and the attention; the attention's
output split back into context and x tokens, x's through to_out[0], the context's through to_add_out.

``cos`` and ``sin`` are the (sequence, head_dim) tables of ``FluxPosEmbed`` (the whole sequence: context
and x tokens), or both None. This is ``FluxAttnProcessor`` without a mask, an attention backend or a
parallel config: 16 programs per double block in strict eager mode (six projections, four norms, three
concatenations, two rotary embeddings, the attention), two more for the output projections, eight per single
block. ``integrations/diffusers_flux.py`` routes diffusers' calls here.

The lowering is the op table's own linear, rms_norm, cat, rotary_embedding and attention in diffusers'
order, each rounding to its result's dtype as the op-by-op path does; so on a TPU the norms and the rotary
embedding share one Pallas kernel and the attention takes the flash kernel, as in fused mode. Defined at
``import torch`` (torch only; JAX inside the lowering): Meta kernels (shapes, the argument checks) and CPU
kernels (the same computation in torch ops, the reference). No Autograd kernel: the ops serve only calls
where nothing needs their backward.
"""
from __future__ import annotations

import torch

from ..runtime import dynamo_frames, platform
from ..runtime.dtypes import REAL_FLOATS
from .registry import register

_ARGS = ("Tensor[] weights, Tensor?[] biases, Tensor?[] norm_weights, float[] eps, Tensor? cos, Tensor? sin, "
         "int head_dim")
SCHEMA = f"flux_attention(Tensor x, {_ARGS}) -> Tensor"
JOINT_SCHEMA = f"flux_joint_attention(Tensor x, Tensor context, {_ARGS}) -> (Tensor, Tensor)"
_LIBS: list = []

# what each weight is, in the order the ops take them
STREAM_WEIGHTS = ("to_q", "to_k", "to_v")
JOINT_WEIGHTS = STREAM_WEIGHTS + ("add_q_proj", "add_k_proj", "add_v_proj", "to_out", "to_add_out")
STREAM_NORMS = ("norm_q", "norm_k")
JOINT_NORMS = STREAM_NORMS + ("norm_added_q", "norm_added_k")


def _shape(t):
    return tuple(t.shape)


def check(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim, length=None) -> None:
    """torch-style errors naming the op, the argument, the shapes and the dtypes (every kernel calls it first).
    ``length``: the attention's sequence the rotary tables cover, when it is not x's tokens with the context's (a
    single block's attention runs over both streams, joined after this check)."""
    joint = context is not None
    name = "tpu::flux_joint_attention" if joint else "tpu::flux_attention"
    names, norm_names = (JOINT_WEIGHTS, JOINT_NORMS) if joint else (STREAM_WEIGHTS, STREAM_NORMS)
    if len(weights) != len(names) or len(biases) != len(names):
        raise RuntimeError(f"{name}: takes {len(names)} weights and biases ({', '.join(names)}), got "
                           f"{len(weights)} weights and {len(biases)} biases")
    if len(norm_weights) != len(norm_names) or len(eps) != len(norm_names):
        raise RuntimeError(f"{name}: takes {len(norm_names)} norm weights and eps ({', '.join(norm_names)}), got "
                           f"{len(norm_weights)} and {len(eps)}")
    tensors = [("x", x)] + ([("context", context)] if joint else [])
    tensors += [(n, w) for n, w in zip(names, weights)]
    tensors += [(f"{n}'s bias", b) for n, b in zip(names, biases) if b is not None]
    tensors += [(f"{n}'s weight", w) for n, w in zip(norm_names, norm_weights) if w is not None]
    for what, t in tensors:
        if t.dtype not in REAL_FLOATS or t.dtype != x.dtype:
            raise RuntimeError(f"{name}: x, the context, the weights and biases must be floating tensors of one "
                               f"dtype, got {what} of {t.dtype} and x of {x.dtype}")
        if t.device != x.device:
            raise RuntimeError(f"{name}: every tensor must be on x's device {x.device}, got {what} on {t.device}")
    if x.dim() != 3 or (joint and (context.dim() != 3 or context.shape[0] != x.shape[0])):
        raise RuntimeError(f"{name}: x and the context must be (batch, length, features) of one batch, got x "
                           f"{_shape(x)}" + (f" and context {_shape(context)}" if joint else ""))
    if x.numel() == 0 or (joint and context.numel() == 0):
        raise RuntimeError(f"{name}: x and the context need a batch row, a token and a feature, got x {_shape(x)}"
                           + (f" and context {_shape(context)}" if joint else "") + " (diffusers' own ops take empty ones)")
    if head_dim <= 0:
        raise RuntimeError(f"{name}: head_dim must be positive, got {head_dim}")
    inner = weights[0].shape[0]
    for i, (what, w) in enumerate(zip(names, weights)):
        if what in ("to_out", "to_add_out"):
            want_in = inner
        else:
            want_in = context.shape[-1] if i >= 3 else x.shape[-1]
        if w.dim() != 2 or w.shape[1] != want_in or (what not in ("to_out", "to_add_out") and w.shape[0] != inner):
            raise RuntimeError(f"{name}: {what} must be a 2-d weight of {want_in} input features"
                               + ("" if what in ("to_out", "to_add_out") else f" and to_q's {inner} outputs")
                               + f", got {_shape(w)}")
    if inner % head_dim:
        raise RuntimeError(f"{name}: the projections' {inner} features are not whole heads of head_dim {head_dim}")
    for what, w, b in zip(names, weights, biases):
        if b is not None and _shape(b) != (w.shape[0],):
            raise RuntimeError(f"{name}: {what}'s bias must be ({w.shape[0]},), got {_shape(b)}")
    for what, w in zip(norm_names, norm_weights):
        if w is not None and _shape(w) != (head_dim,):
            raise RuntimeError(f"{name}: {what}'s weight must be (head_dim,) = ({head_dim},), got {_shape(w)}")
    if (cos is None) != (sin is None):
        raise RuntimeError(f"{name}: cos and sin are given together or not at all")
    if cos is not None:
        if length is None:
            length = x.shape[1] + (context.shape[1] if joint else 0)
        for what, t in (("cos", cos), ("sin", sin)):
            if t.dtype not in REAL_FLOATS or _shape(t) != (length, head_dim) or t.device != x.device:
                raise RuntimeError(f"{name}: {what} must be a floating ({length}, {head_dim}) table (the whole "
                                   f"sequence by head_dim) on {x.device}, got {_shape(t)} {t.dtype} on {t.device}")
        if head_dim % 2:
            raise RuntimeError(f"{name}: the rotary embedding pairs channels: head_dim must be even, got {head_dim}")


# --- the reference: diffusers' processor in torch ops (the CPU kernels) --------------------------------------
def _heads_reference(x, weights, biases, norm_weights, eps, head_dim):
    """q, k, v of one stream as (batch, length, heads, head_dim), q and k normalised."""
    F = torch.nn.functional
    q, k, v = (F.linear(x, w, b).unflatten(-1, (-1, head_dim)) for w, b in zip(weights, biases))
    q = F.rms_norm(q, (head_dim,), norm_weights[0], eps[0])
    k = F.rms_norm(k, (head_dim,), norm_weights[1], eps[1])
    return q, k, v


def _attend_reference(q, k, v, cos, sin):
    from .position_embeddings import reference as rotary

    if cos is not None:
        table = (1, cos.shape[0], 1, cos.shape[1])
        cos, sin = cos.reshape(table), sin.reshape(table)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return out.permute(0, 2, 1, 3).flatten(2, 3).to(q.dtype)


def reference(x, weights, biases, norm_weights, eps, cos, sin, head_dim):
    check(x, None, weights, biases, norm_weights, eps, cos, sin, head_dim)
    return _attend_reference(*_heads_reference(x, weights, biases, norm_weights, eps, head_dim), cos, sin)


def joint_reference(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim):
    check(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim)
    F = torch.nn.functional
    image = _heads_reference(x, weights[:3], biases[:3], norm_weights[:2], eps[:2], head_dim)
    text = _heads_reference(context, weights[3:6], biases[3:6], norm_weights[2:], eps[2:], head_dim)
    out = _attend_reference(*(torch.cat([c, i], dim=1) for c, i in zip(text, image)), cos, sin)
    text_out, image_out = out.split_with_sizes([context.shape[1], x.shape[1]], dim=1)
    return (F.linear(image_out.contiguous(), weights[6], biases[6]),
            F.linear(text_out.contiguous(), weights[7], biases[7]))


def _meta(x, weights, biases, norm_weights, eps, cos, sin, head_dim):
    check(x, None, weights, biases, norm_weights, eps, cos, sin, head_dim)
    return x.new_empty((x.shape[0], x.shape[1], weights[0].shape[0]))


def _joint_meta(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim):
    check(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim)
    return (x.new_empty((x.shape[0], x.shape[1], weights[6].shape[0])),
            x.new_empty((x.shape[0], context.shape[1], weights[7].shape[0])))


def define() -> None:
    """Define ``tpu::flux_attention`` and ``tpu::flux_joint_attention`` and their kernels (once per process)."""
    if _LIBS:
        return
    from . import attention

    lib = attention.fragment()
    lib.define(SCHEMA)
    lib.impl("flux_attention", _meta, "Meta")
    lib.impl("flux_attention", reference, "CPU")
    lib.define(JOINT_SCHEMA)
    lib.impl("flux_joint_attention", _joint_meta, "Meta")
    lib.impl("flux_joint_attention", joint_reference, "CPU")
    _LIBS.append(lib)
    # torch calls these from C++ when an op runs eagerly inside a compiled region (runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([_meta, reference, _joint_meta, joint_reference])


# --- the lowering: the op table's own functions in diffusers' order ----------------------------------------
def _heads(x, weights, biases, norm_weights, eps, head_dim, precision):
    from .nn import linear, rms_norm

    batch, length = x.shape[0], x.shape[1]
    q, k, v = (linear(x, w, b, precision).astype(x.dtype).reshape(batch, length, -1, head_dim)
               for w, b in zip(weights, biases))
    return rms_norm(q, [head_dim], norm_weights[0], eps[0]), rms_norm(k, [head_dim], norm_weights[1], eps[1]), v


def _attend(q, k, v, cos, sin, precision):
    from .attention import attention
    from .position_embeddings import rotary_embedding

    swap = platform.jax().numpy.swapaxes
    if cos is not None:
        table = (1, cos.shape[0], 1, cos.shape[1])
        cos, sin = cos.reshape(table), sin.reshape(table)
        q, k = rotary_embedding(q, cos, sin), rotary_embedding(k, cos, sin)
    # (batch, heads, length, head_dim) views, as diffusers' native backend permutes: the attention's
    # sequence-major kernel permutes back and XLA cancels the pairs
    out = swap(attention(swap(q, 1, 2), swap(k, 1, 2), swap(v, 1, 2), precision=precision), 1, 2)
    return out.reshape(q.shape[0], q.shape[1], -1).astype(q.dtype)


def flux_attention(x, weights, biases, norm_weights, eps, cos, sin, head_dim, precision=None):
    return _attend(*_heads(x, weights, biases, norm_weights, eps, head_dim, precision), cos, sin, precision)


def flux_joint_attention(x, context, weights, biases, norm_weights, eps, cos, sin, head_dim, precision=None):
    from .nn import linear
    from .shape import cat

    image = _heads(x, weights[:3], biases[:3], norm_weights[:2], eps[:2], head_dim, precision)
    text = _heads(context, weights[3:6], biases[3:6], norm_weights[2:], eps[2:], head_dim, precision)
    out = _attend(*(cat([c, i], 1) for c, i in zip(text, image)), cos, sin, precision)
    split = context.shape[1]
    return (linear(out[:, split:], weights[6], biases[6], precision).astype(x.dtype),
            linear(out[:, :split], weights[7], biases[7], precision).astype(x.dtype))


define()
register(torch.ops.tpu.flux_attention.default, matmul=True, static=("eps", "head_dim"))(flux_attention)
register(torch.ops.tpu.flux_joint_attention.default, matmul=True, static=("eps", "head_dim"))(flux_joint_attention)

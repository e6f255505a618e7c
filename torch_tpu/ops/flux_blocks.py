"""diffusers' FLUX transformer blocks as ONE op each, used by the eager modes (one program per block in strict
mode, one recorded op in fused mode):

``tpu::flux_block(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim)
-> (context_out, x_out)`` is ``FluxTransformerBlock.forward`` (a double-stream block). ``weights`` (and
``biases``, None where a linear has none) are, in order: norm1's and norm1_context's modulation linears (6
chunks each), the attention's eight (``flux_attention.JOINT_WEIGHTS``), ff's two linears, ff_context's two;
``norm_weights`` and ``eps`` the attention's four q/k RMS norms; ``layer_norm_eps`` norm1's, norm1_context's,
norm2's and norm2_context's layer norms (none with weights)::

    x_n, (shift, scale, gate, shift_mlp, scale_mlp, gate_mlp) = ada_layer_norm(x, temb)      # norm1 (6 chunks)
    c_n, (c_ ... the same for the context)                                                  # norm1_context
    a, c_a = flux_joint_attention(x_n, c_n, ...)
    x = x + gate[:, None] * a;  x = x + gate_mlp[:, None] * ff(layer_norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None])
    context: the same with the c_ chunks, norm2_context and ff_context; float16 results clipped to +-65504

``tpu::flux_single_block(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin,
head_dim) -> out`` is ``FluxSingleTransformerBlock.forward`` before its final split: ``out`` holds the
context's tokens first, then x's, as the block's concatenation does (the caller returns the two slices of it,
views, as diffusers does). ``weights``: norm's modulation linear (3 chunks), proj_mlp, the attention's three,
proj_out; ``layer_norm_eps``: norm's::

    h = cat([context, x], 1);  h_n, (shift, scale, gate) = ada_layer_norm(h, temb)
    out = h + gate[:, None] * proj_out(cat([flux_attention(h_n, ...), gelu_tanh(proj_mlp(h_n))], 2))

``ff`` is diffusers' ``FeedForward`` with ``activation_fn="gelu-approximate"``: linear, gelu (tanh), linear.
A double block is 25 programs in strict eager mode with the attention and adaptive norms as one op each (52
without), a single block 9 (21). ``integrations/diffusers_flux.py`` routes diffusers' calls here.

The lowerings compose the op table's own lowerings (``ada_layer_norm``, ``flux_joint_attention``/
``flux_attention``, layer norm, linear, gelu, add, mul, cat) in diffusers' order, each rounding to its result's
dtype as the op-by-op path does. Defined at ``import torch`` (torch only; JAX inside the lowerings): Meta kernels
(shapes, the argument checks) and CPU kernels (the same computation in torch ops, the reference). No Autograd
kernel: the ops serve only calls where nothing needs their backward.
"""
from __future__ import annotations

import torch

from ..runtime import dynamo_frames
from ..runtime.dtypes import REAL_FLOATS
from . import adaptive_norm, flux_attention
from .registry import register

_ARGS = ("Tensor x, Tensor context, Tensor temb, Tensor[] weights, Tensor?[] biases, Tensor?[] norm_weights, "
         "float[] eps, float[] layer_norm_eps, Tensor? cos, Tensor? sin, int head_dim")
SCHEMA = f"flux_block({_ARGS}) -> (Tensor, Tensor)"
SINGLE_SCHEMA = f"flux_single_block({_ARGS}) -> Tensor"
_LIBS: list = []

DOUBLE_WEIGHTS = ("norm1", "norm1_context") + flux_attention.JOINT_WEIGHTS + ("ff.proj", "ff.out",
                                                                               "ff_context.proj", "ff_context.out")
SINGLE_WEIGHTS = ("norm", "proj_mlp") + flux_attention.STREAM_WEIGHTS + ("proj_out",)


def check(single, x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim) -> None:
    """torch-style errors naming the op, the argument, the shapes and the dtypes (every kernel calls it first);
    the attention's arguments are checked by its own op's check."""
    name = "tpu::flux_single_block" if single else "tpu::flux_block"
    names = SINGLE_WEIGHTS if single else DOUBLE_WEIGHTS
    if len(weights) != len(names) or len(biases) != len(names):
        raise RuntimeError(f"{name}: takes {len(names)} weights and biases ({', '.join(names)}), got "
                           f"{len(weights)} weights and {len(biases)} biases")
    if len(layer_norm_eps) != (1 if single else 4):
        raise RuntimeError(f"{name}: takes {1 if single else 4} layer norm eps, got {len(layer_norm_eps)}")
    for what, t in [("x", x), ("context", context), ("temb", temb)] + [(n, w) for n, w in zip(names, weights)] + \
            [(f"{n}'s bias", b) for n, b in zip(names, biases) if b is not None]:
        if t.dtype not in REAL_FLOATS or t.dtype != x.dtype or t.device != x.device:
            raise RuntimeError(f"{name}: x, context, temb, the weights and biases must be floating tensors of one "
                               f"dtype on one device, got {what} of {t.dtype} on {t.device} and x of {x.dtype} on "
                               f"{x.device}")
    if x.dim() != 3 or context.dim() != 3 or temb.dim() != 2 or len({x.shape[0], context.shape[0], temb.shape[0]}) != 1:
        raise RuntimeError(f"{name}: x and context must be (batch, length, features) and temb (batch, features) of "
                           f"one batch, got {tuple(x.shape)}, {tuple(context.shape)} and {tuple(temb.shape)}")
    if x.numel() == 0 or context.numel() == 0:
        raise RuntimeError(f"{name}: x and context need a batch row, a token and a feature, got {tuple(x.shape)} and "
                           f"{tuple(context.shape)} (diffusers' own ops take empty ones)")
    dim = x.shape[-1]
    if context.shape[-1] != dim:
        raise RuntimeError(f"{name}: context's features {context.shape[-1]} must be x's {dim}")
    chunks = 3 if single else 6
    for i in range(1 if single else 2):
        if tuple(weights[i].shape) != (chunks * dim, temb.shape[1]):
            raise RuntimeError(f"{name}: {names[i]}'s weight must be ({chunks} x dim {dim}, temb features "
                               f"{temb.shape[1]}), got {tuple(weights[i].shape)}")
    if single:
        mlp, attention_width, out = weights[1], weights[2].shape[0], weights[5]
        pairs = [("proj_mlp", mlp, (mlp.shape[0], dim)), ("proj_out", out, (dim, attention_width + mlp.shape[0]))]
    else:
        pairs = [(names[10 + 2 * i], weights[10 + 2 * i], (weights[10 + 2 * i].shape[0], dim)) for i in range(2)]
        pairs += [(names[11 + 2 * i], weights[11 + 2 * i], (dim, weights[10 + 2 * i].shape[0])) for i in range(2)]
        pairs += [(names[8 + i], weights[8 + i], (dim, weights[2].shape[0])) for i in range(2)]
    for what, w, shape in pairs:
        if w.dim() != 2 or tuple(w.shape) != shape:
            raise RuntimeError(f"{name}: {what}'s weight must be {shape}, got {tuple(w.shape)}")
    for what, w, b in zip(names, weights, biases):
        if b is not None and tuple(b.shape) != (w.shape[0],):
            raise RuntimeError(f"{name}: {what}'s bias must be ({w.shape[0]},), got {tuple(b.shape)}")


def _chunk(projected, i, dim):
    return projected[:, i * dim:(i + 1) * dim]


# --- the reference: diffusers' block forwards in torch ops (the CPU kernels) --------------------------------
def _feed_forward_reference(h, w1, b1, w2, b2):
    F = torch.nn.functional
    return F.linear(F.gelu(F.linear(h, w1, b1), approximate="tanh"), w2, b2)


def _clip(t):
    return t.clip(-65504, 65504) if t.dtype == torch.float16 else t


def reference(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim):
    check(False, x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim)
    F = torch.nn.functional
    dim = x.shape[-1]
    x_n, px = adaptive_norm.reference(x, temb, weights[0], biases[0], 6, 1, 0, layer_norm_eps[0])
    c_n, pc = adaptive_norm.reference(context, temb, weights[1], biases[1], 6, 1, 0, layer_norm_eps[1])
    a, c_a = flux_attention.joint_reference(x_n, c_n, weights[2:10], biases[2:10], norm_weights, eps, cos, sin,
                                            head_dim)
    streams = []
    for h, p, out, eps_2, (w1, b1, w2, b2) in (
            (x, px, a, layer_norm_eps[2], (weights[10], biases[10], weights[11], biases[11])),
            (context, pc, c_a, layer_norm_eps[3], (weights[12], biases[12], weights[13], biases[13]))):
        h = h + _chunk(p, 2, dim).unsqueeze(1) * out
        normed = F.layer_norm(h, (dim,), eps=eps_2)
        normed = normed * (1 + _chunk(p, 4, dim)[:, None]) + _chunk(p, 3, dim)[:, None]
        h = h + _chunk(p, 5, dim).unsqueeze(1) * _feed_forward_reference(normed, w1, b1, w2, b2)
        streams.append(h)
    return _clip(streams[1]), _clip(streams[0])


def single_reference(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim):
    check(True, x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim)
    F = torch.nn.functional
    h = torch.cat([context, x], dim=1)
    h_n, p = adaptive_norm.reference(h, temb, weights[0], biases[0], 3, 1, 0, layer_norm_eps[0])
    mlp = F.gelu(F.linear(h_n, weights[1], biases[1]), approximate="tanh")
    a = flux_attention.reference(h_n, weights[2:5], biases[2:5], norm_weights, eps, cos, sin, head_dim)
    out = _chunk(p, 2, x.shape[-1]).unsqueeze(1) * F.linear(torch.cat([a, mlp], dim=2), weights[5], biases[5])
    return _clip(h + out)


def _meta(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim):
    check(False, x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim)
    flux_attention.check(x, context, weights[2:10], biases[2:10], norm_weights, eps, cos, sin, head_dim)
    return context.new_empty(context.shape), x.new_empty(x.shape)


def _single_meta(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim):
    check(True, x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim)
    h = x.new_empty((x.shape[0], context.shape[1] + x.shape[1], x.shape[2]))
    flux_attention.check(h, None, weights[2:5], biases[2:5], norm_weights, eps, cos, sin, head_dim)
    return h


def define() -> None:
    """Define ``tpu::flux_block`` and ``tpu::flux_single_block`` and their kernels (once per process)."""
    if _LIBS:
        return
    from . import attention

    adaptive_norm.define()
    flux_attention.define()
    lib = attention.fragment()
    lib.define(SCHEMA)
    lib.impl("flux_block", _meta, "Meta")
    lib.impl("flux_block", reference, "CPU")
    lib.define(SINGLE_SCHEMA)
    lib.impl("flux_single_block", _single_meta, "Meta")
    lib.impl("flux_single_block", single_reference, "CPU")
    _LIBS.append(lib)
    # torch calls these from C++ when an op runs eagerly inside a compiled region (runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([_meta, reference, _single_meta, single_reference])


# --- the lowerings: the op table's own functions in diffusers' order ----------------------------------------
def _linear(h, w, b, precision):
    from .nn import linear

    return linear(h, w, b, precision).astype(h.dtype)


def _ada(x, temb, weight, bias, chunks, eps, precision):
    """``ada_layer_norm``'s (out, projected) in x's dtype, as its executor would return them (a composed lowering
    has no executor between its parts: a float32 value would make every later matmul float32)."""
    out, projected = adaptive_norm.ada_layer_norm(x, temb, weight, bias, chunks, 1, 0, eps, precision)
    return out.astype(x.dtype), projected.astype(x.dtype)


def _feed_forward(h, w1, b1, w2, b2, precision):
    from .activations import gelu

    return _linear(gelu(_linear(h, w1, b1, precision), "tanh"), w2, b2, precision)


def _clip_lowered(t):
    from ..runtime import platform

    jnp = platform.jax().numpy
    return jnp.clip(t, -65504, 65504) if t.dtype == jnp.float16 else t


def flux_block(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim,
               precision=None):
    from .elementwise import add, mul
    from .nn import native_layer_norm

    dim = x.shape[-1]
    x_n, px = _ada(x, temb, weights[0], biases[0], 6, layer_norm_eps[0], precision)
    c_n, pc = _ada(context, temb, weights[1], biases[1], 6, layer_norm_eps[1], precision)
    a, c_a = flux_attention.flux_joint_attention(x_n, c_n, weights[2:10], biases[2:10], norm_weights, eps, cos, sin,
                                                 head_dim, precision)
    streams = []
    for h, p, out, eps_2, (w1, b1, w2, b2) in (
            (x, px, a, layer_norm_eps[2], (weights[10], biases[10], weights[11], biases[11])),
            (context, pc, c_a, layer_norm_eps[3], (weights[12], biases[12], weights[13], biases[13]))):
        h = add(h, mul(_chunk(p, 2, dim)[:, None], out))
        normed = native_layer_norm(h, (dim,), None, None, eps_2)[0]
        normed = add(mul(normed, add(_chunk(p, 4, dim)[:, None], 1)), _chunk(p, 3, dim)[:, None])
        h = add(h, mul(_chunk(p, 5, dim)[:, None], _feed_forward(normed, w1, b1, w2, b2, precision)))
        streams.append(h)
    return _clip_lowered(streams[1]), _clip_lowered(streams[0])


def flux_single_block(x, context, temb, weights, biases, norm_weights, eps, layer_norm_eps, cos, sin, head_dim,
                      precision=None):
    from .activations import gelu
    from .elementwise import add, mul
    from .shape import cat

    h = cat([context, x], 1)
    h_n, p = _ada(h, temb, weights[0], biases[0], 3, layer_norm_eps[0], precision)
    mlp = gelu(_linear(h_n, weights[1], biases[1], precision), "tanh")
    a = flux_attention.flux_attention(h_n, weights[2:5], biases[2:5], norm_weights, eps, cos, sin, head_dim,
                                      precision)
    out = mul(_chunk(p, 2, x.shape[-1])[:, None], _linear(cat([a, mlp], 2), weights[5], biases[5], precision))
    return _clip_lowered(add(h, out))


define()
register(torch.ops.tpu.flux_block.default, matmul=True, static=("eps", "layer_norm_eps", "head_dim"))(flux_block)
register(torch.ops.tpu.flux_single_block.default, matmul=True,
         static=("eps", "layer_norm_eps", "head_dim"))(flux_single_block)

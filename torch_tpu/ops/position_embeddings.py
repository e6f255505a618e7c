"""diffusers' position embeddings as ONE op each, used by every execution mode (one program in strict mode,
one node of a fused or compiled graph): the rotary embedding's two steps and the sinusoidal timestep
embedding.

``tpu::timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale,
max_period)`` computes ``get_timestep_embedding`` (11 aten ops: arange, three scalings, exp, the outer
product, sin, cos and the concatenations; once per transformer call, twice with guidance).

``tpu::rotary_table(pos, dim, theta, linear_factor, freqs_dtype) -> (cos, sin)`` computes what diffusers'
``get_1d_rotary_pos_embed`` returns with ``use_real=True, repeat_interleave_real=True`` (FLUX's position
tables, one call per axis per transformer call: 13 aten ops each, 39 programs per FLUX call in strict mode)::

    freqs = 1.0 / (theta ** (arange(0, dim, 2, dtype=freqs_dtype) / dim)) / linear_factor
    angles = outer(pos, freqs);  cos, sin = angles.cos(), angles.sin() (each repeated 2x along dim 1, float32)

``tpu::rotary_embedding(x, cos, sin)`` applies the tables: what diffusers' ``apply_rotary_emb`` computes for FLUX-style models (``use_real=True``,
``use_real_unbind_dim=-1``: neighbouring channels form the pairs)::

    pairs = x.float().reshape(..., D/2, 2);  rotated = stack([-pairs[..., 1], pairs[..., 0]]).flatten(-2)
    out = (x.float() * cos + rotated * sin).to(x.dtype)

with ``cos`` and ``sin`` of ``x``'s rank, broadcasting to ``x``'s shape; the products and the sum are in
the type torch promotes ``float32`` and ``cos``/``sin`` to. diffusers' version is 8 aten ops (three dtype
copies, neg, stack, two muls, add): 8 programs in strict eager mode and 8 recorded ops in fused mode, 12
calls per FLUX.1 transformer call of 2 + 4 blocks. ``integrations/diffusers_embeddings.py`` routes diffusers'
calls here; each lowering is the same computation in diffusers' order (one program), built from the op
table's own element functions, so results match the op-by-op path to rounding.

``tpu::rms_norm_rotary(x, weight, eps, cos, sin)`` is torch's ``rms_norm`` over x's last dimension (float32,
rounded once to x's dtype) followed by ``rotary_embedding``: FLUX's q/k path, which ``compile/norm_rope.py``
finds in compiled graphs. ``weight`` is (head_dim,) or, like the tables, one row per position (a double
block normalises text and image tokens with weights of their own). On a TPU it is one Pallas kernel (the
norm in registers; ``rotary_kernel.py``); elsewhere the two computations in a row, as the graph had them.
Fused eager reaches the same kernel another way: its graphs hold the whole ``rms_norm`` op, whose lowering
notes its result while a program is traced for a TPU (``note_rms_norm``, ``note_concatenation``), and the
rotary embedding of a noted value normalises inside its kernel (``_by_kernel``).

Defined at ``import torch`` (torch only; JAX inside the lowerings): Meta kernels (shapes, dtypes, the
argument checks), CPU kernels (the same math in torch, the reference), and for the rotary application an
Autograd kernel whose backward is the rotation's transpose (``rotated``'s transpose is minus itself).

Why one module: each op's schema, meta kernel, lowering and backward are read together, and the ops share the rotary
tables' layout.
"""
from __future__ import annotations

import collections
import math
import threading

import torch

from ..runtime import dynamo_frames
from ..runtime.dtypes import REAL_FLOATS
from .registry import register

SCHEMA = "rotary_embedding(Tensor x, Tensor cos, Tensor sin) -> Tensor"
NORM_SCHEMA = "rms_norm_rotary(Tensor x, Tensor weight, float eps, Tensor cos, Tensor sin) -> Tensor"
TIMESTEP_SCHEMA = ("timestep_embedding(Tensor timesteps, int embedding_dim, bool flip_sin_to_cos, "
                   "float downscale_freq_shift, float scale, float max_period) -> Tensor")
TABLE_SCHEMA = ("rotary_table(Tensor pos, int dim, float theta, float linear_factor, ScalarType freqs_dtype) "
                "-> (Tensor, Tensor)")
_LIBS: list = []


def check(x, cos, sin) -> None:
    """torch-style errors naming the op, the shapes and the dtypes (every kernel calls it first)."""
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if t.dtype not in REAL_FLOATS:
            raise RuntimeError(f"tpu::rotary_embedding: {name} must be a floating tensor "
                               f"(float16, bfloat16, float32, float64), got {t.dtype}")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise RuntimeError(f"tpu::rotary_embedding: x's last dimension holds (real, imaginary) pairs and must "
                           f"be even, got x of shape {tuple(x.shape)}")
    if cos.dim() != x.dim() or sin.dim() != x.dim():
        raise RuntimeError(f"tpu::rotary_embedding: cos and sin must have x's rank {x.dim()}, got shapes "
                           f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    try:
        shape = torch.broadcast_shapes(x.shape, cos.shape, sin.shape)
    except RuntimeError as exc:
        raise RuntimeError(f"tpu::rotary_embedding: cos {tuple(cos.shape)} and sin {tuple(sin.shape)} do not "
                           f"broadcast to x {tuple(x.shape)}: {exc}") from None
    if tuple(shape) != tuple(x.shape):
        raise RuntimeError(f"tpu::rotary_embedding: cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must "
                           f"broadcast to x's shape {tuple(x.shape)}, not widen it to {tuple(shape)}")


def swap_pairs(t):
    """``rotated`` above, in torch: (a, b) pairs of the last dimension become (-b, a)."""
    real, imag = t.reshape(*t.shape[:-1], -1, 2).unbind(-1)
    return torch.stack([-imag, real], dim=-1).flatten(-2)


def reference(x, cos, sin):
    """The op in torch ops (its CPU kernel; diffusers' formula)."""
    check(x, cos, sin)
    xf = x.float()
    return (xf * cos + swap_pairs(xf) * sin).to(x.dtype)


def _meta(x, cos, sin):
    check(x, cos, sin)
    return x.new_empty(x.shape)


def check_norm(x, weight, eps, cos, sin) -> None:
    """``check`` for the rotation, and the norm's own arguments."""
    check(x, cos, sin)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype not in (
            torch.float16, torch.bfloat16, torch.float32):
        raise RuntimeError(f"tpu::rms_norm_rotary: x and weight must be float16, bfloat16 or float32 (the norm "
                           f"runs in float32), got {x.dtype} and {weight.dtype}")
    if weight.dim() not in (1, x.dim()) or weight.shape[-1] != x.shape[-1]:
        raise RuntimeError(f"tpu::rms_norm_rotary: weight must be (head_dim,) or of x's rank with x's last "
                           f"dimension {x.shape[-1]}, got {tuple(weight.shape)} for x {tuple(x.shape)}")
    try:
        shape = torch.broadcast_shapes(x.shape, weight.shape)
    except RuntimeError:
        shape = None
    if shape is None or tuple(shape) != tuple(x.shape):
        raise RuntimeError(f"tpu::rms_norm_rotary: weight {tuple(weight.shape)} must broadcast to x's shape "
                           f"{tuple(x.shape)}")
    if not eps >= 0:
        raise RuntimeError(f"tpu::rms_norm_rotary: eps must be a non-negative number, got {eps}")


def norm_reference(x, weight, eps, cos, sin):
    """The norm-then-rotation op in torch ops (its CPU kernel, and its autograd formula on any device):
    torch's ``rms_norm`` as its decomposition computes it, then ``rotary_embedding``."""
    check_norm(x, weight, eps, cos, sin)
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return torch.ops.tpu.rotary_embedding.default(normed, cos, sin)


def _norm_meta(x, weight, eps, cos, sin):
    check_norm(x, weight, eps, cos, sin)
    return x.new_empty(x.shape)


def _norm_autograd(x, weight, eps, cos, sin):
    """With a gradient to compute: the two ops in torch (each differentiable); else the one op."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, weight, cos, sin)):
        return norm_reference(x, weight, eps, cos, sin)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.tpu.rms_norm_rotary.default(x, weight, eps, cos, sin)


def real_numbers(t) -> bool:
    """Whether ``t`` holds real numbers (integers or floats: not bool, not complex)."""
    return t.dtype != torch.bool and not t.is_complex()


def check_table(pos, dim, freqs_dtype) -> None:
    if pos.dim() != 1 or not real_numbers(pos):
        raise RuntimeError(f"tpu::rotary_table: pos must be a 1-d real tensor of positions, got shape "
                           f"{tuple(pos.shape)} and dtype {pos.dtype}")
    if dim <= 0 or dim % 2:
        raise RuntimeError(f"tpu::rotary_table: dim must be even and positive, got {dim}")
    if freqs_dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f"tpu::rotary_table: freqs_dtype must be float32 or float64, got {freqs_dtype}")


def table_reference(pos, dim, theta, linear_factor, freqs_dtype):
    """The table op in torch ops (its CPU kernel; diffusers' formula, theta already times ntk_factor)."""
    check_table(pos, dim, freqs_dtype)
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=freqs_dtype, device=pos.device) / dim)) / linear_factor
    angles = torch.outer(pos, freqs)
    return (angles.cos().repeat_interleave(2, dim=1).float(), angles.sin().repeat_interleave(2, dim=1).float())


def _table_meta(pos, dim, theta, linear_factor, freqs_dtype):
    check_table(pos, dim, freqs_dtype)
    shape = (pos.shape[0], dim)
    return pos.new_empty(shape, dtype=torch.float32), pos.new_empty(shape, dtype=torch.float32)


def check_timesteps(timesteps, embedding_dim) -> None:
    if timesteps.dim() != 1 or not real_numbers(timesteps):
        raise RuntimeError(f"tpu::timestep_embedding: timesteps must be a 1-d real tensor, got shape "
                           f"{tuple(timesteps.shape)} and dtype {timesteps.dtype}")
    if embedding_dim < 2:
        raise RuntimeError(f"tpu::timestep_embedding: embedding_dim must be at least 2, got {embedding_dim}")


def timestep_reference(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period):
    """The timestep op in torch ops (its CPU kernel; diffusers' formula)."""
    check_timesteps(timesteps, embedding_dim)
    half = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=timesteps.device)
    emb = torch.exp(exponent / (half - downscale_freq_shift))
    emb = scale * (timesteps[:, None].float() * emb[None, :])
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if embedding_dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


def _timestep_meta(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period):
    check_timesteps(timesteps, embedding_dim)
    return timesteps.new_empty((timesteps.shape[0], embedding_dim), dtype=torch.float32)


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        with torch._C._AutoDispatchBelowAutograd():
            out = torch.ops.tpu.rotary_embedding.default(x, cos, sin)
        ctx.save_for_backward(x, cos, sin)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, cos, sin = ctx.saved_tensors
        compute = torch.promote_types(torch.promote_types(torch.float32, cos.dtype), sin.dtype)
        g = grad.to(compute)
        gx = gcos = gsin = None
        if ctx.needs_input_grad[0]:  # the transpose of the pair swap is minus the swap
            gx = (g * cos - swap_pairs(g * sin)).to(x.dtype)
        if ctx.needs_input_grad[1]:
            gcos = (g * x.float()).sum_to_size(cos.shape).to(cos.dtype)
        if ctx.needs_input_grad[2]:
            gsin = (g * swap_pairs(x.float())).sum_to_size(sin.shape).to(sin.dtype)
        return gx, gcos, gsin


def define() -> None:
    """Define ``tpu::rotary_embedding`` and its kernels (once per process; torch only)."""
    if _LIBS:
        return
    from . import attention

    lib = attention.fragment()
    lib.define(SCHEMA)
    lib.impl("rotary_embedding", _meta, "Meta")
    lib.impl("rotary_embedding", reference, "CPU")
    lib.impl("rotary_embedding", _Rotary.apply, "Autograd")
    lib.define(NORM_SCHEMA)
    lib.impl("rms_norm_rotary", _norm_meta, "Meta")
    lib.impl("rms_norm_rotary", norm_reference, "CPU")
    lib.impl("rms_norm_rotary", _norm_autograd, "Autograd")
    lib.define(TABLE_SCHEMA)
    lib.impl("rotary_table", _table_meta, "Meta")
    lib.impl("rotary_table", table_reference, "CPU")
    lib.define(TIMESTEP_SCHEMA)
    lib.impl("timestep_embedding", _timestep_meta, "Meta")
    lib.impl("timestep_embedding", timestep_reference, "CPU")
    _LIBS.append(lib)
    # torch calls these from C++ when an op runs eagerly inside a compiled region (runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([_meta, reference, _Rotary.forward, _Rotary.backward, _norm_meta, norm_reference,
                                _norm_autograd, _table_meta, table_reference,
                                _timestep_meta, timestep_reference])


class _NormalizedValues(threading.local):
    """Values traced in the program being built that are RMSNorms of a (batch, length, heads, head_dim)
    array over head_dim (the eager modes' whole ``rms_norm`` op), or their concatenation along the sequence:
    ``id(value) -> (value, [(x, weight, eps, length), ...])``. A rotary embedding of such a value in a
    program built for a TPU runs the norm inside its kernel (``_by_kernel``), from the values before the
    norm; the norm's own result, unused then, is left to XLA's dead-code elimination. The value is kept with
    its entry, so an id reused by another value never matches; only tracers are noted (a concrete array is no
    part of a program), and the newest few, enough for one attention's q and k: an entry outlives its trace
    at most until a few notes later."""

    def __init__(self):
        self.entries = collections.OrderedDict()

    def note(self, value, parts) -> None:
        self.entries[id(value)] = (value, parts)
        while len(self.entries) > 16:
            self.entries.popitem(last=False)

    def parts(self, value):
        entry = self.entries.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None


_NORMALIZED = _NormalizedValues()


def _rotary_kernel_on() -> bool:
    """Whether the program being traced takes the rotary kernel: built for a TPU, the setting naming it."""
    from .. import config
    from ..runtime import platform

    return "rotary" in config.settings().sequence_major_kernels and platform.target() == "tpu"


def note_rms_norm(out, x, normalized_shape, weight, eps) -> None:
    """``out`` is torch's ``rms_norm(x, normalized_shape, weight, eps)`` as the op table computes it (float32,
    rounded once to x's dtype); noted for the rotary kernel when it could take the norm in (see above)."""
    from ..runtime import platform

    jax = platform.jax()
    if (x.ndim != 4 or tuple(normalized_shape) != (x.shape[-1],) or out.dtype != x.dtype
            or not isinstance(out, jax.core.Tracer) or not _rotary_kernel_on()):
        return
    if weight is not None and (weight.shape != (x.shape[-1],) or weight.dtype == jax.numpy.float64):
        return
    _NORMALIZED.note(out, [(x, weight, float(eps), x.shape[1])])


def note_concatenation(out, arrays, dim) -> None:
    """``out`` is ``arrays`` concatenated along ``dim``: noted when every part is a noted norm of one eps
    concatenated along the sequence (FLUX's double blocks: text and image tokens, weights of their own)."""
    if not _NORMALIZED.entries or out.ndim != 4 or dim % 4 != 1:
        return
    parts = [_NORMALIZED.parts(a) for a in arrays]
    if all(p is not None for p in parts) and len({q[2] for p in parts for q in p}) == 1:
        _NORMALIZED.note(out, [q for p in parts for q in p])


def _norm_of(x):
    """(x before the norm, its weight: (head_dim,) or one row per position (1, length, 1, head_dim), eps)
    when x is a noted norm, else None."""
    parts = _NORMALIZED.parts(x) if _NORMALIZED.entries else None
    if parts is None:
        return None
    from ..runtime import platform

    jnp = platform.jax().numpy
    head_dim = x.shape[-1]
    weights = [jnp.ones((head_dim,), jnp.float32) if w is None else w.astype(jnp.float32) for _, w, _, _ in parts]
    if len(parts) == 1:
        return parts[0][0], weights[0], parts[0][2]
    rows = [jnp.broadcast_to(w.reshape(1, 1, 1, head_dim), (1, length, 1, head_dim))
            for w, (_, _, _, length) in zip(weights, parts)]
    return (jnp.concatenate([p[0] for p in parts], axis=1), jnp.concatenate(rows, axis=1), parts[0][2])


def _by_kernel(x, cos, sin, weight=None, eps=0.0):
    """``rotary_embedding`` (``rms_norm_rotary`` with ``weight``) by the Pallas kernel (``rotary_kernel.py``)
    in a program built for a TPU with ``TORCH_TPU_SEQUENCE_MAJOR_KERNELS`` naming ``rotary`` (the default),
    for what it takes: x sequence-major (batch, length, heads, head_dim) with head_dim a multiple of 128,
    float32 tables of shape (1, length, 1, head_dim) (diffusers' FLUX calls), a weight (head_dim,) or of the
    tables' shape; else None."""
    from ..runtime import platform

    if x.ndim != 4 or not _rotary_kernel_on():
        return None
    from . import rotary_kernel

    jnp = platform.jax().numpy
    batch, length, heads, head_dim = x.shape
    table = (1, length, 1, head_dim)
    if x.dtype not in (jnp.bfloat16, jnp.float16, jnp.float32) or cos.dtype != jnp.float32 or sin.dtype != jnp.float32:
        return None
    if cos.shape != table or sin.shape != table or not rotary_kernel.applies((batch * length, heads * head_dim),
                                                                             head_dim, length):
        return None
    if weight is None:  # the norm before it, when x is one the op table traced in this program
        normalized = _norm_of(x)
        if normalized is not None and normalized[0].dtype == x.dtype:
            x, weight, eps = normalized
    if weight is not None:
        if weight.shape not in ((head_dim,), table) or weight.dtype not in (jnp.bfloat16, jnp.float16, jnp.float32):
            return None
        weight = weight.reshape(-1, head_dim) if weight.ndim == 4 else weight
    out = platform.traced_without_x64(
        lambda a, c, s, w: rotary_kernel.rotate(a, c, s, head_dim=head_dim, weight=w, eps=eps),
        x.reshape(batch * length, heads * head_dim), cos.reshape(length, head_dim), sin.reshape(length, head_dim),
        weight)
    return out.reshape(x.shape)


def rotary_embedding(x, cos, sin):
    """The lowering: the same formula over JAX arrays (the executor casts the result to x's dtype)."""
    from ..runtime import platform

    by_kernel = _by_kernel(x, cos, sin)
    if by_kernel is not None:
        return by_kernel
    jnp = platform.jax().numpy
    # the pairs swapped in x's own dtype (exact), as diffusers does: half the bytes through the layout
    # change a trailing dimension of 2 costs on a TPU when x is bf16
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape).astype(jnp.float32)
    xf = x.astype(jnp.float32)
    by_cos = jnp.promote_types(jnp.float32, cos.dtype)
    by_sin = jnp.promote_types(jnp.float32, sin.dtype)
    total = jnp.promote_types(by_cos, by_sin)
    a = (xf.astype(by_cos) * cos.astype(by_cos)).astype(total)
    b = (rotated.astype(by_sin) * sin.astype(by_sin)).astype(total)
    return (a + b).astype(x.dtype)


def rms_norm_rotary(x, weight, eps, cos, sin):
    """The lowering: the kernel on a TPU, else the op table's rms_norm (float32, rounded to x's dtype; the weight
    broadcasts, a row per position included), then ``rotary_embedding``."""
    from . import registry

    by_kernel = _by_kernel(x, cos, sin, weight, eps)
    if by_kernel is not None:
        return by_kernel
    normed = registry.lookup(registry.aten._fused_rms_norm.default).fn(x, [x.shape[-1]], weight, eps)[0]
    return rotary_embedding(normed, cos, sin)


# 2*pi in two float64 parts, the first with its low 28 bits zero: k * _TWO_PI_HI is exact for |k| < 2**28,
# so angles up to ~1.6e9 reduce to [-pi, pi] with float64's accuracy
_TWO_PI_HI = float.fromhex("0x1.921fb5p+2")
_TWO_PI_LO = 2 * math.pi - _TWO_PI_HI


def _frequencies(dim, theta, linear_factor, freqs_dtype):
    """The table's frequencies, numbers of the program: diffusers' formula run by CPU torch on the host (dim,
    theta and the factor are static), so they are CPU's bit for bit in float32 and float64 alike. An angle
    at position ~4000 carries 4000 times a frequency's error: XLA:TPU's float32 pow was 4.9e-5 off there."""
    import torch

    exponents = torch.arange(0, dim, 2, dtype=freqs_dtype, device="cpu")[: dim // 2] / dim
    return (1.0 / (theta ** exponents) / linear_factor).numpy()


def rotary_table(pos, dim, theta, linear_factor, freqs_dtype):
    """The table lowering, in diffusers' order; the frequencies are numbers of the program (``_frequencies``).
    Float64 frequencies (FLUX's, except on mps/npu): the angles are float64 products reduced to [-pi, pi] in
    float64, and cos/sin run in float32 on the reduced angle: within a few float32 ulps of CPU torch's float64
    cos/sin rounded to float32 (on the chip too, positions to 5e6).
    XLA:TPU emulates float64, and its float64 cos/sin made this program take 7-11 s to compile on the chip (the
    slowest of the demo pipeline's first call; 5.7 s with the reduction, as long as other small programs then).
    Float32 frequencies: float32 angles and the op table's cos/sin, as the op-by-op path computes them
    (float64 positions with them: float64 angles, reduced as above)."""
    from . import registry
    from ..runtime import dtypes, platform

    jnp = platform.jax().numpy
    aten = registry.aten
    ft = dtypes.to_jax_dtype(freqs_dtype)
    freqs = jnp.asarray(_frequencies(dim, theta, linear_factor, freqs_dtype), ft)
    angle_type = jnp.promote_types(pos.dtype, ft)
    angles = pos.astype(angle_type)[:, None] * freqs[None, :].astype(angle_type)
    if angle_type == jnp.float64:
        turns = jnp.round(angles * (1 / (2 * math.pi)))
        reduced = ((angles - turns * _TWO_PI_HI) - turns * _TWO_PI_LO).astype(jnp.float32)
        cos, sin = jnp.cos(reduced), jnp.sin(reduced)
    else:
        cos = registry.lookup(aten.cos.default).fn(angles)
        sin = registry.lookup(aten.sin.default).fn(angles)
    return (jnp.repeat(cos, 2, axis=1).astype(jnp.float32), jnp.repeat(sin, 2, axis=1).astype(jnp.float32))


def timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period):
    """The timestep lowering: diffusers' steps in its order, the op table's exp/sin/cos (float32 throughout;
    Python numbers scale a float32 tensor in float32, as torch does)."""
    from . import registry
    from ..runtime import platform

    jnp = platform.jax().numpy
    aten = registry.aten
    f32 = jnp.float32
    half = embedding_dim // 2
    exponent = jnp.arange(half, dtype=f32) * jnp.asarray(-math.log(max_period), f32)
    emb = registry.lookup(aten.exp.default).fn(exponent / jnp.asarray(half - downscale_freq_shift, f32))
    emb = jnp.asarray(scale, f32) * (timesteps.astype(f32)[:, None] * emb[None, :])
    sin, cos = registry.lookup(aten.sin.default).fn(emb), registry.lookup(aten.cos.default).fn(emb)
    out = jnp.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    if embedding_dim % 2:
        out = jnp.pad(out, ((0, 0), (0, 1)))
    return out


define()
register(torch.ops.tpu.timestep_embedding.default,
         static=("embedding_dim", "flip_sin_to_cos", "downscale_freq_shift", "scale", "max_period"))(timestep_embedding)
register(torch.ops.tpu.rotary_embedding.default)(rotary_embedding)
register(torch.ops.tpu.rms_norm_rotary.default, static=("eps",))(rms_norm_rotary)
register(torch.ops.tpu.rotary_table.default, static=("dim", "theta", "linear_factor"))(rotary_table)

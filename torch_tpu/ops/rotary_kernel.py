"""FLUX's rotary embedding (and optionally the RMSNorm before it) as a Pallas TPU kernel over the
sequence-major layout: x as (rows, heads x head_dim) with rows = batch x length, each head a 128-lane
column block, the tables (length, head_dim).

Why: written with a trailing dimension of 2 (diffusers' ``[..., 64, 2]`` pairs, what
``position_embeddings.rotary_embedding`` lowers to), XLA:TPU lays the pairs out with the tokens in the lanes
(``f32[1,4608,24,64,2]{1,4,3,2,0:T(2,128)}`` in a FLUX.1-width block) and copies them back and forth; here
the pair swap is two lane rotations and a select in registers, and the result keeps x's layout.
Timed inside a FLUX block's attention piece by the retired attention-layouts probe
(``bench/results/tpu/attention_layouts.json``).

Used by ``position_embeddings.rotary_embedding`` and ``rms_norm_rotary`` (the norm in the kernel: what
compiled graphs of FLUX's attention reach, ``compile/norm_rope.py``) for programs built for a TPU while
``TORCH_TPU_SEQUENCE_MAJOR_KERNELS`` names ``rotary`` (the default). JAX only (imported inside
lowerings): trace it with JAX's 64-bit mode off (Mosaic rejects 64-bit index arithmetic).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128
_TILES = (512, 256, 128, 64, 32, 16, 8)
# The widest block of heads one grid step takes (lanes; the heads of a block share the tables' block). Measured
# on a TPU v5e, norm+rotary of a (4608, 3072) bf16 x with per-token weights: one head per step (128 lanes) 0.213
# ms, 384 lanes 0.180, 768 0.143, 1536 0.160, 3072 0.155; XLA reading and writing the same array 0.147 ms
# (``bench/results/tpu/attention_layouts.json``, its ``rotary/LANES`` rows).
MAX_BLOCK_LANES = 768


def tile_for(length: int) -> int | None:
    """The row tile: the largest of ``_TILES`` that divides the table's length, else None."""
    return next((t for t in _TILES if length % t == 0), None)


def heads_per_block(width: int, head_dim: int) -> int:
    """How many heads one grid step takes: the most whose lanes fit ``MAX_BLOCK_LANES``, dividing the heads."""
    heads = width // head_dim
    return max(k for k in range(1, heads + 1) if heads % k == 0 and (k == 1 or k * head_dim <= MAX_BLOCK_LANES))


def applies(x_shape, head_dim: int, length: int) -> bool:
    """Whether the kernel takes x (rows, heads x head_dim) with tables of ``length`` rows."""
    rows, width = x_shape
    return head_dim % LANES == 0 and width % head_dim == 0 and rows % length == 0 and tile_for(length) is not None


def _body(*refs, eps, normalize, head_dim):
    x_ref, cos_ref, sin_ref, o_ref = refs[0], refs[-3], refs[-2], refs[-1]
    cos, sin = cos_ref[...], sin_ref[...]  # (tile, head_dim): the same for every head of the block
    weight = refs[1][...] if normalize else None
    even = jnp.bitwise_and(jax.lax.broadcasted_iota(jnp.int32, cos.shape, 1), 1) == 0
    for h in range(x_ref.shape[1] // head_dim):  # the block's heads, each a lane-aligned column block
        cols = slice(h * head_dim, (h + 1) * head_dim)
        x = x_ref[:, cols].astype(jnp.float32)
        if normalize:
            x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + eps) * weight
            x = x.astype(o_ref.dtype).astype(jnp.float32)  # diffusers' RMSNorm returns x's dtype
        following = pltpu.roll(x, head_dim - 1, 1)  # x[..., i + 1] at i (jnp.roll's direction)
        preceding = pltpu.roll(x, 1, 1)  # x[..., i - 1] at i
        rotated = jnp.where(even, -following, preceding)  # (a, b) pairs become (-b, a)
        o_ref[:, cols] = (x * cos + rotated * sin).astype(o_ref.dtype)


def rotate(x, cos, sin, *, head_dim: int, weight=None, eps: float = 1e-6):
    """x (rows, heads*head_dim), rows = batch x length; cos and sin (length, head_dim) float32, the same for
    every batch element and head. ``weight`` (head_dim,) or a table (length, head_dim) like cos's (a weight
    per token: FLUX's double blocks normalise text and image tokens with weights of their own): RMSNorm each
    head first (torch's ``rms_norm`` with that weight and ``eps`` in float32, rounded to x's dtype). Returns
    x's shape and dtype: x*cos + swap(x)*sin in float32, rounded once."""
    rows, width = x.shape
    length = cos.shape[0]
    if not applies(x.shape, head_dim, length) or cos.shape != (length, head_dim) or sin.shape != cos.shape:
        raise ValueError(f"rotary kernel: x {x.shape}, tables {cos.shape} {sin.shape}, head_dim {head_dim}")
    tile = tile_for(length)
    per_table = length // tile
    heads = heads_per_block(width, head_dim)
    block = pl.BlockSpec((tile, heads * head_dim), lambda i, h: (i, h))
    table = pl.BlockSpec((tile, head_dim), lambda i, h: (jax.lax.rem(i, per_table), 0))
    normalize = weight is not None
    per_token = normalize and weight.ndim == 2
    if normalize and weight.shape != ((length, head_dim) if per_token else (head_dim,)):
        raise ValueError(f"rotary kernel: weight {weight.shape} for tables {cos.shape}")
    weight_spec = [table if per_token else pl.BlockSpec((1, head_dim), lambda i, h: (0, 0))] if normalize else []
    weight_arg = (weight.reshape(-1, head_dim).astype(jnp.float32),) if normalize else ()
    return pl.pallas_call(
        functools.partial(_body, eps=float(eps), normalize=normalize, head_dim=head_dim),
        grid=(rows // tile, width // (heads * head_dim)),
        in_specs=[block, *weight_spec, table, table],
        out_specs=block,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        name="norm_rope_sequence_major" if normalize else "rope_sequence_major",
    )(x, *weight_arg, cos.astype(jnp.float32), sin.astype(jnp.float32))

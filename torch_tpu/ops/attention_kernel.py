"""A Pallas TPU flash-attention forward kernel over the sequence-major layout diffusers' transformers compute
in: queries, keys, values and output as (batch, length, heads x head_dim) arrays, each head a 128-lane column
block of the last dimension.

Why: JAX's kernel (``jax.experimental.pallas.ops.tpu.flash_attention``, what ``attention.py`` uses by default)
takes (batch, heads, length, head_dim) arrays. diffusers projects q, k and v as (batch, length, heads x
head_dim) and permutes them to heads-major for SDPA and back after it, so XLA copies every operand and the
output around the kernel. Reading a head as a (tile, head_dim) block at column ``h * head_dim`` needs no
copy: the permutes of the caller's program and those ``attention.py`` writes to reach this layout cancel.

The online-softmax recurrence (FlashAttention-2): per (batch, head, query tile) a running row maximum and sum
over key tiles, the (tile, head_dim) output accumulated unnormalised in float32 and divided once at the end.
Scores are float32 (q @ k^T with float32 accumulation), the probabilities are cast to v's dtype for the second
matmul, as in JAX's kernel. Keys past ``kv_len`` (padding to whole tiles) and, for ``causal``, keys after the
query (top-left aligned) get a large negative score; key tiles wholly after the diagonal are skipped.
Forward only (``attention.py``'s custom VJP computes gradients with JAX's kernel, heads-major).

Used by ``attention.py`` for programs built for a TPU with ``TORCH_TPU_SEQUENCE_MAJOR_KERNELS`` naming
``attention`` (off by default until the chip shows it faster in a model). Measured alone on a TPU v5e at
FLUX.1's size (1, 4608, 24 x 128) bf16, 512-tiles: 1.99 ms against JAX's kernel's 2.15 ms
(``bench/results/tpu/attention_layouts.json``). JAX only (imported inside lowerings): trace it with JAX's 64-bit mode off.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128
# what masked scores become: far below any real score, finite so that no (-inf) - (-inf) appears
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def applies(head_dim: int) -> bool:
    """Whether a head of this size is a lane-aligned column block of the sequence-major layout."""
    return head_dim % LANES == 0


def _body(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, scale, kv_len, causal, tile_q, tile_k,
          key_tiles):
    qi, ki = pl.program_id(2), pl.program_id(3)

    @pl.when(ki == 0)
    def _start():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def _step():
        q, k = q_ref[0], k_ref[0]  # (tile_q, E), (tile_k, E)
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        if scale != 1.0:
            s = s * scale
        keep = None
        cols = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1) + ki * tile_k
        if kv_len % tile_k:
            keep = cols < kv_len
        if causal:
            rows = jax.lax.broadcasted_iota(jnp.int32, s.shape, 0) + qi * tile_q
            keep = cols <= rows if keep is None else jnp.logical_and(keep, cols <= rows)
        if keep is not None:
            s = jnp.where(keep, s, _MASKED)
        m_prev = m_ref[...]  # (tile_q, 128), every lane the row's value
        m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        p = jnp.exp(s - jnp.tile(m_next, (1, tile_k // LANES)))
        alpha = jnp.exp(m_prev - m_next)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        m_ref[...] = m_next
        pv = jax.lax.dot(p.astype(v_ref.dtype), v_ref[0], preferred_element_type=jnp.float32)
        acc_ref[...] = acc_ref[...] * jnp.tile(alpha, (1, acc_ref.shape[1] // LANES)) + pv

    if causal:  # a key tile that starts after the query tile's last row holds nothing it may see
        pl.when(ki * tile_k <= qi * tile_q + tile_q - 1)(_step)
    else:
        _step()

    @pl.when(ki == key_tiles - 1)
    def _finish():
        total = l_ref[...]
        inverse = jnp.where(total == 0.0, 1.0, 1.0 / total)
        o_ref[0] = (acc_ref[...] * jnp.tile(inverse, (1, acc_ref.shape[1] // LANES))).astype(o_ref.dtype)


def flash_attention(q, k, v, *, heads: int, kv_len: int, causal: bool, scale: float, tiles: tuple):
    """Attention over sequence-major arrays: q (B, Lq, heads*E), k and v (B, Lk, heads*E), lengths whole
    tiles (``tiles`` = (tile_q, tile_k)), keys from ``kv_len`` on padding. Returns (B, Lq, heads*E) in q's
    dtype. Trace it with JAX's 64-bit mode off (Mosaic rejects 64-bit index arithmetic)."""
    batch, lq, width = q.shape
    lk = k.shape[1]
    head_dim = width // heads
    tile_q, tile_k = tiles
    if not applies(head_dim) or lq % tile_q or lk % tile_k or tile_k % LANES or width != heads * head_dim:
        raise ValueError(f"sequence-major flash attention: q {q.shape} k {k.shape} with {heads} heads and tiles "
                         f"{tiles}: head_dim must be a multiple of {LANES} and lengths whole tiles")
    key_tiles = lk // tile_k

    def q_map(b, h, qi, ki):
        return (b, qi, h)

    def kv_map(b, h, qi, ki):
        if causal:  # a skipped tile (after the diagonal) names the last one read: no copy is made for it
            ki = jnp.minimum(ki, jax.lax.div(qi * tile_q + tile_q - 1, tile_k))  # (non-negative: no floor)
        return (b, ki, h)

    body = functools.partial(_body, scale=float(scale), kv_len=int(kv_len), causal=bool(causal), tile_q=tile_q,
                             tile_k=tile_k, key_tiles=key_tiles)
    return pl.pallas_call(
        body,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=(batch, heads, lq // tile_q, key_tiles),
            in_specs=[pl.BlockSpec((1, tile_q, head_dim), q_map),
                      pl.BlockSpec((1, tile_k, head_dim), kv_map),
                      pl.BlockSpec((1, tile_k, head_dim), kv_map)],
            out_specs=pl.BlockSpec((1, tile_q, head_dim), q_map),
            scratch_shapes=[pltpu.VMEM((tile_q, LANES), jnp.float32), pltpu.VMEM((tile_q, LANES), jnp.float32),
                            pltpu.VMEM((tile_q, head_dim), jnp.float32)]),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        name="flash_attention_sequence_major",
    )(q, k, v)

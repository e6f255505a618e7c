"""Scaled dot-product attention as ONE lowering, used by every mode (strict, fused, compiled).

``attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)`` computes torch's
``scaled_dot_product_attention`` without dropout (callers decompose when dropout_p > 0) in torch's
layout (..., heads, length, head_dim):

* TPU: the Pallas flash-attention kernel (``jax.experimental.pallas.ops.tpu``) where its shape rules
  hold (4-d, no mask, lengths multiples of 128, causal only for equal lengths);
* GPU, bf16/fp16: ``jax.nn.dot_product_attention`` (jax picks cuDNN where it takes the shapes), without
  a boolean mask (a fully masked row must give 0, as in torch);
* otherwise, and as the fallback of both: XLA's fused softmax(QK^T)V. On the CPU platform each
  (batch x head) slice's scores are computed in turn (``lax.map``), long queries in row chunks, so the
  scores stay in cache and no program holds a (B, H, Lq, Lk) temporary: about 2x less CPU time than one
  big softmax at Flux sizes, and no page faults for fresh temporaries on every call.

Scores and softmax are fp32; the normalisation divides the (Lq, Ev) output rather than the (Lq, Lk)
probabilities; a fully masked row gives 0 (torch 2.13's math and CPU kernels do too); the causal mask
is top-left aligned (query i sees keys 0..i). GQA repeats key/value heads. The backward is JAX's VJP of
the same function (it recomputes the scores: nothing of size Lq x Lk is kept from the forward).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from ..runtime import platform
from . import tpu_ops
from ._util import is_low_precision, precision_of
from .registry import aten, register

# A (batch x head) slice's score matrix up to this many bytes is computed whole; larger ones in
# query-row chunks of about this size. Whole problems up to SMALL_BYTES skip the slicing loop.
SLICE_BYTES = 8 << 20
SMALL_BYTES = 2 << 20


def _core(q, k, v, mask, is_causal, scale, prec, q_offset=0):
    """softmax(q k^T * scale + mask) v for q (..., Lq, E), k (..., Lk, E), v (..., Lk, Ev)."""
    f32 = jnp.float64 if q.dtype == jnp.float64 else jnp.float32  # float64 stays float64 (as on CPU)
    s = jnp.einsum("...qd,...kd->...qk", q, k, precision=prec, preferred_element_type=f32) * scale
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        rows = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 0) + q_offset
        cols = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 1)
        s = jnp.where(cols <= rows, s, -jnp.inf)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf) if mask.dtype == jnp.bool_ else s + mask.astype(f32)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)  # a fully masked row: exp(-inf) = 0 everywhere, no NaN
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    pv = jnp.einsum("...qk,...kd->...qd", p.astype(v.dtype) if is_low_precision(v) else p, v,
                    precision=prec, preferred_element_type=f32)
    return jnp.where(denom > 0, pv / jnp.where(denom > 0, denom, 1.0), 0.0)


def _row_chunks(q, k, v, mask, is_causal, scale, prec):
    """One (Lq, E) slice: whole, or in query-row chunks when its score matrix is large."""
    lq, lk = q.shape[-2], k.shape[-2]
    if lq * lk * 4 <= SLICE_BYTES or lq <= 16:
        return _core(q, k, v, mask, is_causal, scale, prec)
    rows = max(16, SLICE_BYTES // (4 * lk))
    n = -(-lq // rows)
    pad = n * rows - lq
    qc = jnp.pad(q, ((0, pad), (0, 0))).reshape(n, rows, q.shape[-1])
    starts = jnp.arange(n, dtype=jnp.int32) * rows
    if mask is None:
        out = jax.lax.map(lambda xs: _core(xs[0], k, v, None, is_causal, scale, prec, q_offset=xs[1]),
                          (qc, starts))
    else:
        m2 = jnp.broadcast_to(mask, (lq, lk))
        fill = True if m2.dtype == jnp.bool_ else 0
        mc = jnp.pad(m2, ((0, pad), (0, 0)), constant_values=fill).reshape(n, rows, lk)
        out = jax.lax.map(lambda xs: _core(xs[0], k, v, xs[1], is_causal, scale, prec, q_offset=xs[2]),
                          (qc, mc, starts))
    return out.reshape(n * rows, -1)[:lq]


def _xla_sliced(q, k, v, mask, is_causal, scale, prec):
    """XLA attention that keeps each (batch x head) score matrix in cache (the CPU path)."""
    lead = q.shape[:-2]
    lq, lk = q.shape[-2], k.shape[-2]
    n = math.prod(lead)
    if n * lq * lk * 4 <= SMALL_BYTES:
        return _core(q, k, v, mask, is_causal, scale, prec)
    qf = q.reshape((n,) + q.shape[-2:])
    kf = jnp.broadcast_to(k, lead + k.shape[-2:]).reshape((n,) + k.shape[-2:])
    vf = jnp.broadcast_to(v, lead + v.shape[-2:]).reshape((n,) + v.shape[-2:])
    if mask is None or all(d == 1 for d in mask.shape[:-2]):  # one mask for every slice
        m = None if mask is None else mask.reshape(mask.shape[-2:])
        out = jax.lax.map(lambda a: _row_chunks(a[0], a[1], a[2], m, is_causal, scale, prec), (qf, kf, vf))
    else:
        mf = jnp.broadcast_to(mask, lead + mask.shape[-2:]).reshape((n,) + mask.shape[-2:])
        out = jax.lax.map(lambda a: _row_chunks(*a, is_causal, scale, prec), (qf, kf, vf, mf))
    return out.reshape(lead + (lq, v.shape[-1]))


def _pallas_tpu(q, k, v, mask, is_causal, scale):
    """The Pallas TPU flash-attention kernel, or None where its rules do not hold. UNTESTED off TPU."""
    if mask is not None or q.ndim != 4 or q.shape[-2] % 128 or k.shape[-2] % 128 or \
            (is_causal and q.shape[-2] != k.shape[-2]):
        return None
    try:
        from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention
    except ImportError:
        return None
    try:
        return flash_attention(q, k, v, causal=is_causal, sm_scale=scale)
    except Exception:  # a shape or dtype the kernel does not take (found while tracing): XLA instead
        return None


def _jax_nn(q, k, v, mask, is_causal, scale):
    """``jax.nn.dot_product_attention`` (cuDNN where it applies), or None. UNTESTED off GPU."""
    if q.ndim != 4 or (is_causal and q.shape[-2] != k.shape[-2]):
        return None
    if mask is not None and mask.dtype == jnp.bool_:
        return None  # jax averages a fully masked row where torch gives 0
    bias = None if mask is None else jnp.broadcast_to(
        mask, q.shape[:2] + (q.shape[2], k.shape[2])).astype(q.dtype)
    t = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731  torch (B, H, L, E) <-> jax (B, L, H, E)
    try:
        out = jax.nn.dot_product_attention(t(q), t(k), t(v), bias=bias, scale=scale, is_causal=is_causal,
                                           implementation=None)
    except Exception:  # neither cuDNN nor jax's XLA path takes these shapes: ours instead
        return None
    return t(out)


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, precision=None):
    """torch's scaled_dot_product_attention (no dropout) over JAX arrays; the output has q's dtype."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:  # GQA (torch's meta kernel has checked the ratio)
        rep = q.shape[-3] // k.shape[-3]
        k = jnp.repeat(k, rep, axis=-3)
        v = jnp.repeat(v, rep, axis=-3)
    if attn_mask is not None and attn_mask.ndim < 2:
        attn_mask = jnp.broadcast_to(attn_mask, (q.shape[-2], k.shape[-2]))
    kind = platform.platform()
    out = None
    if kind == "tpu":
        out = _pallas_tpu(q, k, v, attn_mask, is_causal, scale)
    elif kind in ("cuda", "gpu", "rocm") and is_low_precision(q):
        out = _jax_nn(q, k, v, attn_mask, is_causal, scale)
    if out is None:
        prec = precision_of(precision)
        if kind == "cpu":
            out = _xla_sliced(q, k, v, attn_mask, is_causal, scale, prec)
        else:
            out = _core(q, k, v, attn_mask, is_causal, scale, prec)
    return out.astype(q.dtype)


def attention_backward(grad_out, q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                       precision=None):
    """Gradients of ``attention`` for q, k and v (JAX's VJP of the same computation)."""
    _, pull = jax.vjp(lambda q_, k_, v_: attention(q_, k_, v_, attn_mask, is_causal, scale, enable_gqa,
                                                   precision), q, k, v)
    return pull(grad_out.astype(q.dtype))


@register(aten.scaled_dot_product_attention.default, matmul=True)
def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, precision=None):
    # reached under inference_mode (no autograd key); dropout_p > 0 is decomposed before it gets here
    if not (type(dropout_p) in (int, float) and dropout_p == 0):
        raise NotImplementedError("tpu: scaled_dot_product_attention lowering called with dropout_p > 0")
    return attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, precision)


tpu_ops.define()
register(torch.ops.tpu.attention.default, matmul=True)(attention)
register(torch.ops.tpu.attention_backward.default, matmul=True)(attention_backward)

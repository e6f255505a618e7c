"""Scaled dot-product attention as ONE lowering, used by every mode (strict, fused, compiled).

``attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)`` computes torch's
``scaled_dot_product_attention`` without dropout (callers decompose when dropout_p > 0) in torch's
layout (..., heads, length, head_dim):

* TPU: the Pallas flash-attention kernel (``jax.experimental.pallas.ops.tpu``) for bf16 (float32 only
  below torch's "highest" matmul precision), 3-d or 4-d, without a mask, causal only for equal lengths,
  at least ~1500 x 1500 scores; lengths are padded to whole tiles (tiles measured on the chip), the padded
  keys kept out by segment ids. It is traced with JAX's 64-bit mode off (its index arithmetic must stay
  32-bit) and checked once per shape to lower for TPU, so a shape Mosaic refuses falls back to XLA. With
  ``TORCH_TPU_SEQUENCE_MAJOR_KERNELS`` naming ``attention`` (the default), 4-d heads of a multiple of 128
  channels take ``attention_kernel.py``'s kernel instead, over the (B, L, heads x E) arrays the caller's
  permuted views come from (its gradient: JAX's kernel);
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

The ops themselves live here too (namespace ``tpu``, defined by ``define()``): ``tpu::attention`` is
``scaled_dot_product_attention`` without dropout, kept as ONE op in every mode so that it is lowered as
one computation instead of torch's math decomposition (about 14 aten ops, the score matrix materialised
several times); ``tpu::attention_backward`` is its gradient for query, key and value. ``eager/attention.py``
routes SDPA to them in eager mode and rewrites dynamo's graphs to them. This module is imported at
``import torch`` for ``define()``, so it imports JAX only inside its functions (``_jax()``).

Why one module: the ``tpu::attention`` op whole: its schema, meta kernel, lowering, block-size table and backward,
read together.
"""
from __future__ import annotations

import functools
import math
import warnings

import torch

from ..runtime import caches, platform
from .registry import aten, register

_LIBS: list = []

ATTENTION_SCHEMA = ("attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
                    "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> Tensor")
ATTENTION_BACKWARD_SCHEMA = (
    "attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
    "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> (Tensor, Tensor, Tensor)")


def _meta_like(t):
    if t is None:
        return None
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _attention_meta(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    # torch's own argument checks and result shape: SDPA's math path on meta stand-ins. CPU torch's
    # kernel accepts a mask together with is_causal (it applies both, as the lowering does); the math
    # path alone refuses that pair, so the mask is checked without is_causal.
    out = torch.ops.aten.scaled_dot_product_attention.default(
        _meta_like(q), _meta_like(k), _meta_like(v), _meta_like(attn_mask), 0.0,
        is_causal and attn_mask is None, scale=scale, enable_gqa=enable_gqa)
    if _sequence_major(q, k, v):
        b, h, length, ev = out.shape
        return q.new_empty((b, length, h, ev)).transpose(1, 2)
    return q.new_empty(out.shape)


def _sequence_major(q, k, v) -> bool:
    """Whether CPU torch lays SDPA's output out as (batch, length, heads, Ev) transposed, as its flash kernel
    does for a query whose heads are inner to its sequence in memory (the (B, L, H, E) projection viewed as
    (B, H, L, E): diffusers' and transformers' layout); where its math path computes instead (Ev != E, a
    last dimension that is not dense) it is contiguous. The caller's ``out.transpose(1, 2).flatten(2)`` is then
    a view, not a copy."""
    return (q.dim() == 4 and v.shape[-1] == q.shape[-1] and q.shape[1] > 1 and q.shape[2] > 1
            and q.stride(1) < q.stride(2) and all(t.stride(-1) == 1 or t.shape[-1] == 1 for t in (q, k, v)))


def _attention_backward_meta(grad_out, q, k, v, attn_mask=None, is_causal=False, scale=None,
                             enable_gqa=False):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def define() -> list:
    """Define the ``tpu`` ops once per process; returns the libraries (kept alive here)."""
    if not _LIBS:
        lib = torch.library.Library("tpu", "DEF")
        lib.define(ATTENTION_SCHEMA)
        lib.define(ATTENTION_BACKWARD_SCHEMA)
        lib.impl("attention", _attention_meta, "Meta")
        lib.impl("attention_backward", _attention_backward_meta, "Meta")
        _LIBS.append(lib)
    return _LIBS


def fragment() -> torch.library.Library:
    """A library fragment of the ``tpu`` namespace (defined first), for another module's ops; the caller keeps it."""
    define()
    return torch.library.Library("tpu", "FRAGMENT")


def _jax():
    """(jax, jax.numpy), configured (``platform.jax``)."""
    jax = platform.jax()
    return jax, jax.numpy


# A (batch x head) slice's score matrix up to this many bytes is computed whole; larger ones in
# query-row chunks of about this size. Whole problems up to SMALL_BYTES skip the slicing loop.
SLICE_BYTES = 8 << 20
SMALL_BYTES = 2 << 20


def _core(q, k, v, mask, is_causal, scale, prec, q_offset=0):
    """softmax(q k^T * scale + mask) v for q (..., Lq, E), k (..., Lk, E), v (..., Lk, Ev)."""
    from ._util import is_low_precision

    jax, jnp = _jax()
    f32 = jnp.float64 if q.dtype == jnp.float64 else jnp.float32  # float64 stays float64 (as on CPU)
    s = jnp.einsum("...qd,...kd->...qk", q, k, precision=prec, preferred_element_type=f32) * scale
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        rows = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 0) + q_offset
        cols = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 1)
        s = jnp.where(cols <= rows, s, -jnp.inf)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf) if mask.dtype == jnp.bool_ else s + mask.astype(f32)
    # the row's max over its scores that are numbers, as torch's CPU kernel finds it (a NaN compares false): a
    # row with none (fully masked, or all NaN) is 0, as torch's; a NaN or +inf score among numbers (an
    # overflowed input) makes its row NaN, as torch's
    m = jnp.max(jnp.where(jnp.isnan(s), -jnp.inf, s), axis=-1, keepdims=True)
    masked = m == -jnp.inf
    p = jnp.exp(s - jnp.where(masked, 0.0, m))
    denom = jnp.sum(p, axis=-1, keepdims=True)
    pv = jnp.einsum("...qk,...kd->...qd", p.astype(v.dtype) if is_low_precision(v) else p, v,
                    precision=prec, preferred_element_type=f32)
    return jnp.where(masked, 0.0, pv / jnp.where(masked, 1.0, denom))


def _row_chunks(q, k, v, mask, is_causal, scale, prec):
    """One (Lq, E) slice: whole, or in query-row chunks when its score matrix is large."""
    jax, jnp = _jax()
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
    jax, jnp = _jax()
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


# The Pallas kernel's tiles, measured on a TPU v5e (bench/probes/tpu_probe.py, bench/results/tpu/probe.json):
# (1, 24, 4608, 128) bf16 forward 16.0 ms with its default 128-tiles, 2.8 ms with 512, 3.2 with 1024 (which
# pads 4608 to 5120); 1024 is 3-7% faster than 512 where it divides a length of 4096 or more. Below about
# 1500 x 1500 scores XLA's own attention is as fast (0.62 ms vs 0.72 at 1024 tokens), so it keeps those.
KERNEL_MIN_SCORES = 1 << 21
KERNEL_MIN_LENGTH = 512


def _tile(length: int, head_dim: int) -> int:
    if length >= 4096 and length % 1024 == 0 and head_dim <= 128:
        return 1024
    return 512


def _kernel_shapes(q, k, v, mask, is_causal, precision):
    """(tile_q, tile_k) where the Pallas kernel computes this attention, else None (XLA does)."""
    jnp = platform.jax().numpy
    lq, lk = q.shape[-2], k.shape[-2]
    if mask is not None or q.ndim not in (3, 4) or v.shape[-1] != q.shape[-1] or q.shape[-1] % 8:
        return None
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2] or (is_causal and lq != lk):
        return None
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (jnp.bfloat16, jnp.float32):
        return None
    if q.dtype == jnp.float32 and precision in (None, "highest"):
        return None  # its float32 matmuls take bf16 passes (2e-3 off at 1024 tokens): not torch's "highest"
    if lq * lk < KERNEL_MIN_SCORES or min(lq, lk) < KERNEL_MIN_LENGTH:
        return None
    return _tile(lq, q.shape[-1]), _tile(lk, q.shape[-1])


def _kernel(q, k, v, kv_len, is_causal, scale, tiles):
    """The Pallas flash-attention kernel on 4-d (B, H, L, E) arrays padded to whole tiles; keys past
    ``kv_len`` are padding, kept out by segment ids (queries past the real length are sliced off)."""
    jax, jnp = _jax()
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    tq, tk = tiles
    sizes = fa.BlockSizes(block_q=tq, block_k_major=tk, block_k=tk, block_b=1,
                          block_q_major_dkv=tq, block_k_major_dkv=tk, block_k_dkv=tk, block_q_dkv=tq,
                          block_k_major_dq=tk, block_k_dq=tk, block_q_dq=tq)
    segments = None
    if kv_len != k.shape[2]:
        segments = fa.SegmentIds(
            q=jnp.zeros((q.shape[0], q.shape[2]), jnp.int32),
            kv=jnp.broadcast_to((jnp.arange(k.shape[2], dtype=jnp.int32) >= kv_len).astype(jnp.int32),
                                (k.shape[0], k.shape[2])))
    return fa.flash_attention(q, k, v, segment_ids=segments, causal=is_causal, sm_scale=scale,
                              block_sizes=sizes)


def _flash(q, k, v, kv_len, is_causal, scale, tiles):
    return _flash_vjp()(q, k, v, kv_len, is_causal, scale, tiles)


@functools.lru_cache(maxsize=None)
def _flash_vjp():
    """The kernel with its own VJP, its forward and backward both traced with x64 off (jax.vjp alone
    would trace the backward later, wherever the gradient is asked for)."""
    jax = platform.jax()

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
    def flash(q, k, v, kv_len, is_causal, scale, tiles):
        return platform.traced_without_x64(_kernel, q, k, v, kv_len, is_causal, scale, tiles)

    def forward(q, k, v, kv_len, is_causal, scale, tiles):
        def kernel(a, b, c):
            return _kernel(a, b, c, kv_len, is_causal, scale, tiles)

        return platform.traced_without_x64(lambda: jax.vjp(kernel, q, k, v))

    def backward(kv_len, is_causal, scale, tiles, pull, grad):
        return platform.traced_without_x64(pull, grad)

    flash.defvjp(forward, backward)
    return flash

_LOWERS = caches.register("pallas attention lowering checks", {})


def _kernel_lowers(q, k, kv_len, is_causal, scale, tiles, heads=None) -> bool:
    """Whether the kernel lowers for a TPU at these shapes (checked once per shape with jax.export, which
    lowers for TPU on any platform): a Mosaic error comes at lowering, after tracing, where the caller's
    program could no longer fall back to XLA. ``heads``: the sequence-major kernel's (q, k of shape
    (batch, length, heads x head_dim)); None: JAX's kernel's heads-major arrays."""
    jax = platform.jax()
    key = (q.shape, k.shape, str(q.dtype), kv_len, is_causal, tiles, heads)
    ok = _LOWERS.get(key)
    if ok is None:
        s_q = jax.ShapeDtypeStruct(q.shape, q.dtype)
        s_k = jax.ShapeDtypeStruct(k.shape, k.dtype)
        if heads is None:
            def kernel(x, y, z):
                return _flash(x, y, z, kv_len, is_causal, scale, tiles)
        else:
            def kernel(x, y, z):
                return _flash_sequence_major(x, y, z, kv_len, is_causal, scale, tiles, heads)

        def fwd_bwd(a, b, c):
            out, pull = jax.vjp(kernel, a, b, c)
            return out, pull(out)

        try:
            with platform.Targeting("tpu"):  # (the Mosaic kernel, never an interpreted one: see platform)
                jax.export.export(jax.jit(fwd_bwd), platforms=("tpu",))(s_q, s_k, s_k)
            ok = True
        except Exception as exc:  # noqa: BLE001 - any refusal means: not this kernel here
            ok = False
            warnings.warn(f"tpu: the Pallas flash-attention kernel does not lower for q {tuple(q.shape)} "
                          f"k {tuple(k.shape)} {q.dtype} ({type(exc).__name__}: {str(exc)[:200]}); "
                          "XLA's attention computes it instead", stacklevel=2)
        _LOWERS[key] = ok
    return ok


def _heads_major(t, heads):
    """(batch, length, heads x head_dim) -> (batch, heads, length, head_dim)."""
    return platform.jax().numpy.swapaxes(t.reshape(t.shape[0], t.shape[1], heads, -1), 1, 2)


def _sequence_major_of(t):
    """(batch, heads, length, head_dim) -> (batch, length, heads x head_dim)."""
    jnp = platform.jax().numpy
    return jnp.swapaxes(t, 1, 2).reshape(t.shape[0], t.shape[2], t.shape[1] * t.shape[3])


def _flash_sequence_major(q, k, v, kv_len, is_causal, scale, tiles, heads):
    return _flash_sequence_major_vjp()(q, k, v, kv_len, is_causal, scale, tiles, heads)


@functools.lru_cache(maxsize=None)
def _flash_sequence_major_vjp():
    """The sequence-major kernel (``attention_kernel.py``) forward; its gradient by JAX's kernel over the
    heads-major views of the same arrays (which computes the forward again: training pays that)."""
    jax = platform.jax()
    from . import attention_kernel

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
    def flash(q, k, v, kv_len, is_causal, scale, tiles, heads):
        return platform.traced_without_x64(lambda: attention_kernel.flash_attention(
            q, k, v, heads=heads, kv_len=kv_len, causal=is_causal, scale=scale, tiles=tiles))

    def forward(q, k, v, kv_len, is_causal, scale, tiles, heads):
        return flash(q, k, v, kv_len, is_causal, scale, tiles, heads), (q, k, v)

    def backward(kv_len, is_causal, scale, tiles, heads, saved, grad):
        _, pull = jax.vjp(lambda a, b, c: _flash(a, b, c, kv_len, is_causal, scale, tiles),
                          *(_heads_major(t, heads) for t in saved))
        return tuple(_sequence_major_of(g) for g in pull(_heads_major(grad, heads)))

    flash.defvjp(forward, backward)
    return flash


def _pallas_sequence_major(q, k, v, is_causal, scale, tiles):
    """The sequence-major kernel on (batch, heads, length, head_dim) arrays that are permuted views of
    (batch, length, heads x head_dim) ones (diffusers' q, k, v): the permutes written here and the caller's
    cancel in XLA. None where it does not apply or lower."""
    from .. import config
    from . import attention_kernel

    jnp = platform.jax().numpy
    if "attention" not in config.settings().sequence_major_kernels or q.ndim != 4:
        return None
    batch, heads, lq, head_dim = q.shape
    if not attention_kernel.applies(head_dim):
        return None
    lk = k.shape[2]
    pq, pk = (-lq) % tiles[0], (-lk) % tiles[1]
    qs, ks, vs = _sequence_major_of(q), _sequence_major_of(k), _sequence_major_of(v)
    if pq:
        qs = jnp.pad(qs, ((0, 0), (0, pq), (0, 0)))
    if pk:
        ks = jnp.pad(ks, ((0, 0), (0, pk), (0, 0)))
        vs = jnp.pad(vs, ((0, 0), (0, pk), (0, 0)))
    scale = float(scale)
    if not _kernel_lowers(qs, ks, lk, is_causal, scale, tiles, heads):
        return None
    out = _flash_sequence_major(qs, ks, vs, lk, is_causal, scale, tiles, heads)[:, :lq]
    return _heads_major(out, heads)


def _pallas_tpu(q, k, v, mask, is_causal, scale, precision):
    """Attention by the Pallas TPU flash-attention kernel, or None where it does not apply."""
    jnp = platform.jax().numpy
    tiles = _kernel_shapes(q, k, v, mask, is_causal, precision)
    if tiles is None:
        return None
    by_columns = _pallas_sequence_major(q, k, v, is_causal, scale, tiles)
    if by_columns is not None:
        return by_columns
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    lq, lk = q.shape[2], k.shape[2]
    pq, pk = (-lq) % tiles[0], (-lk) % tiles[1]
    if pq:
        q = jnp.pad(q, ((0, 0), (0, 0), (0, pq), (0, 0)))
    if pk:
        k = jnp.pad(k, ((0, 0), (0, 0), (0, pk), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, pk), (0, 0)))
    scale = float(scale)
    if not _kernel_lowers(q, k, lk, is_causal, scale, tiles):
        return None
    out = _flash(q, k, v, lk, is_causal, scale, tiles)[:, :, :lq]
    return out[0] if squeeze else out


def _jax_nn(q, k, v, mask, is_causal, scale):
    """``jax.nn.dot_product_attention`` (cuDNN where it applies), or None. UNTESTED off GPU."""
    jax, jnp = _jax()
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


# Off the CPU, XLA's attention holds the whole (..., Lq, Lk) float32 score matrix: past this size it is
# computed per (batch x head) slice instead (1.3 s for (1, 24, 8192, 128) on a TPU v5e in one piece)
LARGE_SCORE_BYTES = 1 << 30


def _score_bytes(q, k) -> int:
    return 4 * math.prod(q.shape[:-1]) * k.shape[-2]


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, precision=None):
    """torch's scaled_dot_product_attention (no dropout) over JAX arrays; the output has q's dtype."""
    from ._util import is_low_precision, precision_of

    jnp = platform.jax().numpy
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:  # GQA (torch's meta kernel has checked the ratio)
        rep = q.shape[-3] // k.shape[-3]
        k = jnp.repeat(k, rep, axis=-3)
        v = jnp.repeat(v, rep, axis=-3)
    if attn_mask is not None and attn_mask.ndim < 2:
        attn_mask = jnp.broadcast_to(attn_mask, (q.shape[-2], k.shape[-2]))
    kind = platform.target()
    out = None
    if kind == "tpu":
        out = _pallas_tpu(q, k, v, attn_mask, is_causal, scale, precision)
    elif kind in ("cuda", "gpu", "rocm") and is_low_precision(q):
        out = _jax_nn(q, k, v, attn_mask, is_causal, scale)
    if out is None:
        prec = precision_of(precision, q, k, v)
        if kind == "cpu" or _score_bytes(q, k) > LARGE_SCORE_BYTES:
            out = _xla_sliced(q, k, v, attn_mask, is_causal, scale, prec)
        else:
            out = _core(q, k, v, attn_mask, is_causal, scale, prec)
    return out.astype(q.dtype)


def attention_backward(grad_out, q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                       precision=None):
    """Gradients of ``attention`` for q, k and v (JAX's VJP of the same computation)."""
    jax = platform.jax()
    _, pull = jax.vjp(lambda q_, k_, v_: attention(q_, k_, v_, attn_mask, is_causal, scale, enable_gqa,
                                                   precision), q, k, v)
    return pull(grad_out.astype(q.dtype))


@register(aten.scaled_dot_product_attention.default, matmul=True)
def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, precision=None):
    # reached under inference_mode (no autograd key); dropout_p > 0 is decomposed before it gets here
    if not (type(dropout_p) in (int, float) and dropout_p == 0):
        raise NotImplementedError("tpu: scaled_dot_product_attention lowering called with dropout_p > 0")
    return attention(q, k, v, attn_mask, is_causal, scale, enable_gqa, precision)


define()
register(torch.ops.tpu.attention.default, matmul=True)(attention)
register(torch.ops.tpu.attention_backward.default, matmul=True)(attention_backward)

"""Ops that accumulate values at the positions an index or the values themselves give: put, index_reduce,
one_hot, histc and histogram, with the same device-side range checks as indexing.py (an index outside the
tensor raises DeviceAssertError at the next wait).

Out-of-range entries of an index that writes are dropped (the in-range ones are written), so the
tensor a failed write leaves behind holds no value written at a wrapped or clamped position.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .checks import index_in_range, require
from .indexing import accumulate_into, in_range_or_dropped
from .registry import aten, register


@register(aten.put.default)
def put(x, index, source, accumulate=False):
    n = x.size
    require(index_in_range(index, n, True), f"out of range: an index addresses none of the {n} elements")
    flat = x.reshape(-1)
    idx = in_range_or_dropped(index.reshape(-1), n, True)
    src = source.reshape(-1).astype(x.dtype)
    out = accumulate_into(flat, idx, src, mode="drop") if accumulate else flat.at[idx].set(src, mode="drop")
    return out.reshape(x.shape)


@register(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, include_self=True):
    if x.dtype == jnp.bool_:  # in int32 (XLA's scatter refuses bool arithmetic)
        return index_reduce(x.astype(jnp.int32), dim, index, source.astype(jnp.int32), reduce, include_self) != 0
    size = x.shape[dim % x.ndim] if x.ndim else 1
    require(index_in_range(index, size, False), "index out of range in self")  # no negative index
    if x.ndim == 0:
        x1, s1 = x.reshape(1), source.reshape(1)
        return index_reduce(x1, 0, index.reshape(-1), s1, reduce, include_self).reshape(())
    d = dim % x.ndim
    idx = in_range_or_dropped(index.reshape(-1), size, False)
    at = (slice(None),) * d + (idx,)
    src = source.astype(x.dtype)
    inexact = jnp.issubdtype(x.dtype, jnp.inexact)
    if reduce == "prod":
        base = x if include_self else x.at[at].set(1, mode="drop")
        return base.at[at].multiply(src, mode="drop")
    if reduce in ("amax", "amin"):
        fill = (-jnp.inf if reduce == "amax" else jnp.inf) if inexact else (
            jnp.iinfo(x.dtype).min if reduce == "amax" else jnp.iinfo(x.dtype).max)
        base = x if include_self else x.at[at].set(fill, mode="drop")
        return base.at[at].max(src, mode="drop") if reduce == "amax" else base.at[at].min(src, mode="drop")
    if reduce == "mean":
        base = x if include_self else x.at[at].set(0, mode="drop")
        sums = base.at[at].add(src, mode="drop")
        shape = [1] * x.ndim
        shape[d] = size
        counts = jnp.full(shape, 1 if include_self else 0, jnp.int64)
        counts = counts.at[(slice(None),) * d + (idx,)].add(1, mode="drop")
        counts = jnp.maximum(counts, 1)  # an untouched slice keeps its value (x, or x/1)
        if inexact:
            return sums / counts.astype(x.dtype)
        return jnp.floor_divide(sums, counts.astype(x.dtype))
    raise NotImplementedError(f"index_reduce with reduce={reduce!r}")


@register(aten.one_hot.default)
def one_hot(x, num_classes):
    """Reached for long inputs with a known class count (eager.whole_ops keeps torch's decomposition,
    which checks nothing on a tpu tensor, from running first)."""
    require(x >= 0, "Class values must be non-negative.")
    require(x < num_classes, "Class values must be smaller than num_classes.")
    return (x[..., None] == jnp.arange(num_classes, dtype=x.dtype)).astype(jnp.int64)


@register(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    """torch.histc as CPU's kernel computes it: ``bins`` equal bins over [min, max] (the data's range when
    min == max, widened by 1 on each side when that range is empty); values outside it and NaN are ignored;
    a value's bin is ``int((v - lo) * bins / (hi - lo))`` with every step rounded to x's dtype (float16
    and bfloat16 arithmetic on CPU; computing it in float32 put values near an edge into the next bin),
    the last edge inclusive."""
    if x.size == 0:
        return jnp.zeros((bins,), x.dtype)
    ft = x.dtype if x.dtype == jnp.float64 else jnp.float32
    if x.dtype in (jnp.float16, jnp.bfloat16):
        info = jnp.finfo(x.dtype)
        rnd = lambda a: jax.lax.reduce_precision(a, info.nexp, info.nmant)  # noqa: E731 - kept when fused
    else:
        rnd = lambda a: a  # noqa: E731
    v = x.reshape(-1).astype(ft)
    if min == max:  # (torch: any empty range given, not only 0 and 0)
        lo, hi = jnp.min(v), jnp.max(v)
    else:
        lo, hi = jnp.asarray(min, ft), jnp.asarray(max, ft)
    require(jnp.isfinite(lo) & jnp.isfinite(hi), "histc: the range of the values is not finite")
    require(lo <= hi, "max must be larger than min")
    same = lo == hi
    lo, hi = rnd(jnp.where(same, lo - 1, lo)), rnd(jnp.where(same, hi + 1, hi))
    width = rnd(hi - lo)
    pos = jnp.trunc(rnd(rnd(rnd(v - lo) * rnd(jnp.asarray(bins, ft))) / width)).astype(jnp.int64)
    pos = jnp.where(pos == bins, bins - 1, pos)
    keep = (v >= lo) & (v <= hi)
    counts = jnp.zeros((bins,), ft).at[jnp.where(keep, pos, bins)].add(1, mode="drop")
    return counts.astype(x.dtype)


def _histogram_counts(v, w, edges, pos):
    """Counts (or summed weights) of ``v`` in the bins ``edges`` given each value's bin ``pos``; values
    outside [edges[0], edges[-1]] and NaN are left out, the last edge is inclusive (as torch.histogram)."""
    n_bins = edges.shape[0] - 1
    pos = jnp.where(pos >= n_bins, n_bins - 1, pos)
    keep = (v >= edges[0]) & (v <= edges[-1])
    add = jnp.ones_like(v) if w is None else w.reshape(-1).astype(v.dtype)
    return jnp.zeros((n_bins,), v.dtype).at[jnp.where(keep, pos, n_bins)].add(add, mode="drop")


def _histogram_result(hist, edges, density):
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return hist, edges


@register(aten.histogram.bin_ct)
def histogram(x, bins=100, range=None, weight=None, density=False):
    v = x.reshape(-1)
    if range is not None:
        lo, hi = jnp.asarray(range[0], v.dtype), jnp.asarray(range[1], v.dtype)
    elif v.size == 0:
        lo, hi = jnp.asarray(0, v.dtype), jnp.asarray(1, v.dtype)
    else:
        lo, hi = jnp.min(v), jnp.max(v)
        require(jnp.isfinite(lo) & jnp.isfinite(hi), "torch.histogram: the range of the values is not finite")
    same = lo == hi  # an empty range widens by 0.5 on each side
    lo, hi = jnp.where(same, lo - 0.5, lo), jnp.where(same, hi + 0.5, hi)
    # the edges as torch.linspace computes them: the first half from lo, the second from hi
    i = jnp.arange(bins + 1)
    step = (hi - lo) / bins
    edges = jnp.where(i < (bins + 1) // 2, lo + step * i.astype(v.dtype), hi - step * (bins - i).astype(v.dtype))
    # CPU: the bin by interpolation, then corrected against the neighbouring edges (its local search)
    guess = jnp.floor((v - edges[0]) * bins / (edges[-1] - edges[0]))
    guess = jnp.clip(jnp.nan_to_num(guess), -1, bins + 1).astype(jnp.int32)
    window = jnp.clip(guess[:, None] + jnp.arange(-1, 2)[None, :], 0, bins)
    low = jnp.maximum(guess - 1, 0)
    in_window = (guess[:, None] + jnp.arange(-1, 2)[None, :] >= 0) & (guess[:, None] + jnp.arange(-1, 2)[None, :] <= bins)
    pos = low + jnp.sum(in_window & (edges[window] <= v[:, None]), axis=1) - 1
    return _histogram_result(_histogram_counts(v, weight, edges, pos), edges, density)


@register(aten.histogram.bins_tensor)
def histogram_bins(x, bins, weight=None, density=False):
    v = x.reshape(-1)
    pos = jnp.searchsorted(bins, v, side="right") - 1
    return _histogram_result(_histogram_counts(v, weight, bins, pos), bins, density)

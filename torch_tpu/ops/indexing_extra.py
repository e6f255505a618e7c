"""More index ops: put, index_reduce, one_hot, histc, with the same device-side range checks as
indexing.py (an index outside the tensor raises DeviceAssertError at the next wait).

Out-of-range entries of an index that writes are dropped (the in-range ones are written), so the
tensor a failed write leaves behind holds no value written at a wrapped or clamped position.
"""
from __future__ import annotations

import jax.numpy as jnp

from .checks import index_in_range, require
from .indexing import in_range_or_dropped
from .registry import aten, register


@register(aten.put.default)
def put(x, index, source, accumulate=False):
    n = x.size
    require(index_in_range(index, n, True), f"out of range: an index addresses none of the {n} elements")
    flat = x.reshape(-1)
    idx = in_range_or_dropped(index.reshape(-1), n, True)
    src = source.reshape(-1).astype(x.dtype)
    out = flat.at[idx].add(src, mode="drop") if accumulate else flat.at[idx].set(src, mode="drop")
    return out.reshape(x.shape)


@register(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, include_self=True):
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
    """torch.histc: ``bins`` equal bins over [min, max] (the data's range when both are 0; widened by 1
    on each side when that range is empty); values outside it and NaN are ignored."""
    if x.size == 0:
        return jnp.zeros((bins,), x.dtype)
    ft = x.dtype if x.dtype == jnp.float64 else jnp.float32
    v = x.reshape(-1).astype(ft)
    lo, hi = jnp.asarray(min, ft), jnp.asarray(max, ft)
    from_data = (lo == 0) & (hi == 0)
    lo = jnp.where(from_data, jnp.min(v), lo)
    hi = jnp.where(from_data, jnp.max(v), hi)
    require(jnp.isfinite(lo) & jnp.isfinite(hi), "histc: the range of the values is not finite")
    require(lo <= hi, "max must be larger than min")
    same = lo == hi
    lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
    pos = jnp.floor((v - lo) * bins / (hi - lo)).astype(jnp.int64)
    pos = jnp.where(v == hi, bins - 1, pos)
    keep = (v >= lo) & (v <= hi)
    counts = jnp.zeros((bins,), ft).at[jnp.where(keep, pos, bins)].add(1, mode="drop")
    return counts.astype(x.dtype)

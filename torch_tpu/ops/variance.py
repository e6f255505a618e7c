"""var, std, var_mean, std_mean as CPU torch computes them.

CPU torch accumulates a float32 variance in float64: squares past float32's range (1e20 among zeros) do
not overflow there, and a result that fits float32 is finite (a std whose variance does not fit is too).
Here the deviations are scaled by a power of two near the largest before squaring, and the result scaled
back: the same bits as without scaling wherever nothing overflows or underflows, and no float64 (slow on
TPUs). Two CPU algorithms are followed: ``var``/``std`` over all elements take float32's mean first (a
sum past its range is inf there, and so the variance); along some dims, and ``var_mean``/``std_mean``
always, CPU runs Welford's algorithm in float64: its mean does not overflow either, and an infinity
followed by any element makes it NaN.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from . import precise_f32
from .registry import aten, register
from ._util import dims_tuple, is_low_precision, to_float


def _correction(correction, unbiased=None):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def _moments(x, dim, correction, keepdim, root: bool, welford: bool):
    """(variance or std, mean) of ``x`` over ``dim``: the squared deviations' sum over max(0, N -
    correction) (inf or NaN when that is 0; jnp.var makes every N <= correction NaN)."""
    y = to_float(x.astype(jnp.float32) if is_low_precision(x) else x)
    axis = dims_tuple(dim, x.ndim) if dim is not None else None
    n = math.prod(y.shape[a] for a in axis) if axis is not None else y.size
    denominator = max(0, n - _correction(correction))
    if y.dtype == jnp.float32:
        v, mean = _float32(y, axis, denominator, root, welford)
    else:  # float64 (as CPU: no wider type) and complex (a real variance)
        mean = jnp.mean(y, axis=axis, keepdims=True)
        if welford and not jnp.iscomplexobj(y):
            mean = _positive_zero(_welford_infinities(y, axis, mean))
        d = y - mean
        sq = jnp.real(d * jnp.conj(d)) if jnp.iscomplexobj(d) else d * d
        v = jnp.sum(sq, axis=axis, keepdims=True) / denominator
        v = jnp.sqrt(v) if root else v
    if not keepdim:
        v, mean = (t.reshape(()) if axis is None else jnp.squeeze(t, axis) for t in (v, mean))
    return v, mean


def _float32(y, axis, denominator, root, welford):
    mean = jnp.mean(y, axis=axis, keepdims=True)
    if welford or not (axis is None or len(set(axis)) == y.ndim):
        # a float64 mean: float32's where its sum fits (the small elements count), else the mean of the
        # values scaled down (a sum past float32's range), with Welford's infinities
        e = _exponent(jnp.max(jnp.abs(y), axis=axis, keepdims=True, initial=0.0))
        scaled = _times_pow2(jnp.mean(_times_pow2(y, -e), axis=axis, keepdims=True), e)
        mean = _positive_zero(_welford_infinities(y, axis, jnp.where(jnp.isfinite(mean), mean, scaled)))
    d = y - mean
    e = _exponent(jnp.max(jnp.abs(d), axis=axis, keepdims=True, initial=0.0))
    d = _times_pow2(d, -e)
    s = jnp.sum(d * d, axis=axis, keepdims=True) / denominator
    v = _times_pow2(jnp.sqrt(s), e) if root else _times_pow2(s, 2 * e)
    return v, mean


def _welford_infinities(y, axis, mean):
    """Welford's running mean is NaN once an infinity meets any later element (inf - inf); a single
    infinity in the last place leaves it infinite."""
    axes = tuple(range(y.ndim)) if axis is None else tuple(a % y.ndim for a in axis)
    if not axes:
        return mean
    kept = [a for a in range(y.ndim) if a not in axes]
    n = math.prod(y.shape[a] for a in axes)
    if n == 0 or y.size == 0:
        return mean
    flat = jnp.transpose(y, kept + list(axes)).reshape(tuple(y.shape[a] for a in kept) + (n,))
    infinite = jnp.isinf(flat)
    count = jnp.sum(infinite, axis=-1)
    last = flat[..., -1]
    value = jnp.where(count == 0, mean.reshape(count.shape),
                      jnp.where((count == 1) & infinite[..., -1], last, jnp.nan))
    return value.reshape(mean.shape)


def _positive_zero(mean):
    """Welford's mean is never -0.0: it starts at +0.0 (XLA folds ``x + 0.0`` away, so a select)."""
    return jnp.where(mean == 0, jnp.zeros((), mean.dtype), mean)


def _exponent(m):
    """e with m = f * 2**e, 0.5 <= f < 1, for a finite positive float32 m; 0 otherwise (no scaling)."""
    _, e = jnp.frexp(m)
    return jnp.where(jnp.isfinite(m) & (m > 0), e, 0).astype(jnp.int32)


def _times_pow2(x, e):
    """x * 2**e for float32 x, |e| <= 300, exactly (powers of two built from bits, three factors within
    float32's normal range: 2**-128 alone is subnormal, which XLA flushes to zero)."""
    out = x
    for part in (e // 3, e // 3, e - 2 * (e // 3)):
        out = out * precise_f32._pow2(part)
    return out


@register(aten.var.correction)
def var(x, dim=None, correction=None, keepdim=False):
    return _moments(x, dim, correction, keepdim, root=False, welford=False)[0]


@register(aten.std.correction)
def std(x, dim=None, correction=None, keepdim=False):
    return _moments(x, dim, correction, keepdim, root=True, welford=False)[0]


@register(aten.var_mean.correction)
def var_mean(x, dim=None, correction=None, keepdim=False):
    return _moments(x, dim, correction, keepdim, root=False, welford=True)


@register(aten.std_mean.correction)
def std_mean(x, dim=None, correction=None, keepdim=False):
    return _moments(x, dim, correction, keepdim, root=True, welford=True)

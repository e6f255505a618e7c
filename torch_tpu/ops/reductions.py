"""Reductions, scans, sorting."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from . import elementary
from .registry import aten, register
from ._util import complex_logaddexp, dims_tuple, is_float, is_low_precision, jdtype, norm_dim, to_float


def _acc(x, dtype=None):
    """Accumulation dtype: float32 for bf16/fp16, int64 for small ints (as torch)."""
    if dtype is not None:
        return x.astype(jdtype(dtype))
    if is_low_precision(x):
        return x.astype(jnp.float32)
    if x.dtype == jnp.bool_ or (jnp.issubdtype(x.dtype, jnp.integer)):
        return x.astype(jnp.int64)
    return x


@register(aten.sum.default)
def sum_all(x, dtype=None):
    return jnp.sum(_acc(x, dtype))


@register(aten.sum.dim_IntList)
def sum_dim(x, dim=None, keepdim=False, dtype=None):
    return jnp.sum(_acc(x, dtype), axis=dims_tuple(dim, x.ndim), keepdims=keepdim)


@register(aten.mean.default)
def mean_all(x, dtype=None):
    return jnp.mean(_acc(x, dtype))


@register(aten.mean.dim)
def mean_dim(x, dim=None, keepdim=False, dtype=None):
    return jnp.mean(_acc(x, dtype), axis=dims_tuple(dim, x.ndim), keepdims=keepdim)


@register(aten.prod.default)
def prod_all(x, dtype=None):
    return jnp.prod(_acc(x, dtype))


@register(aten.prod.dim_int)
def prod_dim(x, dim, keepdim=False, dtype=None):
    return jnp.prod(_acc(x, dtype), axis=norm_dim(dim, x.ndim), keepdims=keepdim)


@register(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return jnp.max(x, axis=dims_tuple(dim, x.ndim) if x.ndim else None, keepdims=keepdim)


@register(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return jnp.min(x, axis=dims_tuple(dim, x.ndim) if x.ndim else None, keepdims=keepdim)


@register(aten.max.default)
def max_all(x):
    return jnp.max(x)


@register(aten.min.default)
def min_all(x):
    return jnp.min(x)


def _arg_reduce(x, dim, keepdim, fn):
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    if dim is None:
        idx = fn(x.reshape(-1))
        return idx.reshape((1,) * x.ndim) if keepdim else idx
    d = dim % x.ndim
    idx = fn(x, axis=d)
    return jnp.expand_dims(idx, d) if keepdim else idx


def _nan_aware(fn):
    # torch propagates NaN: argmax of a row with NaN points at the (first) NaN.
    def inner(x, axis=None):
        if is_float(x):
            nan = jnp.isnan(x)
            has_nan = jnp.any(nan, axis=axis)
            first_nan = jnp.argmax(nan, axis=axis)
            return jnp.where(has_nan, first_nan, fn(x, axis=axis))
        return fn(x, axis=axis)

    return inner


@register(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, _nan_aware(jnp.argmax))


@register(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return _arg_reduce(x, dim, keepdim, _nan_aware(jnp.argmin))


@register(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.max(x, axis=dim % x.ndim, keepdims=keepdim), argmax(x, dim, keepdim)


@register(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.min(x, axis=dim % x.ndim, keepdims=keepdim), argmin(x, dim, keepdim)


@register(aten.aminmax.default)
def aminmax(x, dim=None, keepdim=False):
    axis = None if dim is None or x.ndim == 0 else dim % x.ndim
    return jnp.min(x, axis=axis, keepdims=keepdim), jnp.max(x, axis=axis, keepdims=keepdim)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def all_(x, dim=None, keepdim=False):
    if isinstance(dim, (list, tuple)) and len(dim) == 0:  # dim=(): torch reduces no dim (sum reduces all)
        return x != 0
    axis = None if dim is None else dims_tuple(dim, x.ndim)
    return jnp.all(x != 0, axis=axis, keepdims=keepdim)


@register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(x, dim=None, keepdim=False):
    if isinstance(dim, (list, tuple)) and len(dim) == 0:  # dim=(): torch reduces no dim (sum reduces all)
        return x != 0
    axis = None if dim is None else dims_tuple(dim, x.ndim)
    return jnp.any(x != 0, axis=axis, keepdims=keepdim)


@register(aten.logsumexp.default)
def logsumexp(x, dim, keepdim=False):
    y = to_float(_acc(x) if is_low_precision(x) else x)
    return elementary.logsumexp(y, axis=dims_tuple(dim, x.ndim), keepdims=keepdim)


@register(aten.linalg_vector_norm.default)
def vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):
    y = _acc(x, dtype) if (dtype is not None or is_low_precision(x)) else x
    y = jnp.abs(y)
    axis = dims_tuple(dim, x.ndim) if dim is not None else None
    if ord == float("inf"):
        return jnp.max(y, axis=axis, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(y, axis=axis, keepdims=keepdim)
    if ord == 0:
        return jnp.sum((y != 0).astype(y.dtype), axis=axis, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(y, axis=axis, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(y * y, axis=axis, keepdims=keepdim))
    return jnp.sum(y ** ord, axis=axis, keepdims=keepdim) ** (1.0 / ord)


@register(aten.cumsum.default)
def cumsum(x, dim, dtype=None):
    if x.ndim == 0:
        return _acc(x, dtype)
    return jnp.cumsum(_acc(x, dtype), axis=dim % x.ndim)


@register(aten.cumprod.default)
def cumprod(x, dim, dtype=None):
    if x.ndim == 0:
        return _acc(x, dtype)
    return jnp.cumprod(_acc(x, dtype), axis=dim % x.ndim)


def _cum_extreme(x, dim, op):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    n = x.shape[d]
    idx = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int64).reshape([n if i == d else 1 for i in range(x.ndim)]), x.shape)

    def combine(a, b):
        va, ia = a
        vb, ib = b
        take_b = op(vb, va) | (vb == va)
        if jnp.issubdtype(va.dtype, jnp.inexact):
            take_b = (take_b & ~jnp.isnan(va)) | jnp.isnan(vb)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    return jax.lax.associative_scan(combine, (x, idx), axis=d)


@register(aten.cummax.default)
def cummax(x, dim):
    return _cum_extreme(x, dim, jnp.greater)


@register(aten.cummin.default)
def cummin(x, dim):
    return _cum_extreme(x, dim, jnp.less)


@register(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    if x.ndim == 0:
        return x
    if x.size == 0:  # (the complex scan below indexed the first element of nothing)
        return x
    if jnp.iscomplexobj(x):  # torch's complex logaddexp step by step (cumlogsumexp's imag was off by 2 pi)
        moved = jnp.moveaxis(x, dim % x.ndim, 0)
        step = lambda acc, v: (complex_logaddexp(acc, v),) * 2  # noqa: E731
        _, out = jax.lax.scan(step, moved[0], moved[1:])
        return jnp.moveaxis(jnp.concatenate([moved[:1], out]), 0, dim % x.ndim)
    if elementary.precise(x):  # XLA's scan steps through the target's own log (coarse on a TPU)
        return jax.lax.associative_scan(elementary.logaddexp, x, axis=dim % x.ndim)
    return jax.lax.cumlogsumexp(x, axis=dim % x.ndim)


@register(aten.sort.default, aten.sort.stable)
def sort(x, dim=-1, descending=False, stable=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    if descending:
        # stable descending: sort the negated order key, keeping ties in index order
        if jnp.issubdtype(x.dtype, jnp.inexact):
            nan = jnp.isnan(x)  # torch: NaN is the largest value
            order = jnp.lexsort((jnp.where(nan, 0, -x), ~nan), axis=d)
        elif x.dtype == jnp.bool_:
            order = jnp.argsort(~x, axis=d, stable=True)
        elif jnp.issubdtype(x.dtype, jnp.unsignedinteger):
            order = jnp.argsort(jnp.iinfo(x.dtype).max - x, axis=d, stable=True)
        else:
            order = jnp.argsort(~x, axis=d, stable=True)  # ~x = -x-1: no overflow at the minimum
    else:
        order = jnp.argsort(x, axis=d, stable=True)
    return jnp.take_along_axis(x, order, axis=d), order.astype(jnp.int64)


@register(aten.argsort.default, aten.argsort.stable)
def argsort(x, dim=-1, descending=False, stable=False):
    return sort(x, dim, descending)[1]


@register(aten.topk.default)
def topk(x, k, dim=-1, largest=True, sorted=True):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    vals, idx = sort(x, d, descending=largest)
    return jax.lax.slice_in_dim(vals, 0, k, axis=d), jax.lax.slice_in_dim(idx, 0, k, axis=d)


@register(aten.kthvalue.default)
def kthvalue(x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    vals, idx = sort(x, d)
    v = jax.lax.index_in_dim(vals, k - 1, axis=d, keepdims=keepdim)
    i = jax.lax.index_in_dim(idx, k - 1, axis=d, keepdims=keepdim)
    return v, i


def _median(x, d, keepdim, ignore_nan):
    """The lower median along ``d`` and its index. median: a NaN anywhere gives NaN (the first NaN's
    index), as on CPU; nanmedian: the median of the numbers (sort puts NaN last)."""
    vals, idx = sort(x, d)
    n = x.shape[d]
    if ignore_nan and is_float(x):
        k = jnp.maximum((jnp.sum(~jnp.isnan(x), axis=d, keepdims=True) - 1) // 2, 0)
    else:
        k = jnp.full(x.shape[:d] + (1,) + x.shape[d + 1:], (n - 1) // 2)
    v = jnp.take_along_axis(vals, k, axis=d)
    i = jnp.take_along_axis(idx, k, axis=d)
    if is_float(x) and not ignore_nan:
        nan = jnp.isnan(x)
        has_nan = jnp.any(nan, axis=d, keepdims=True)
        first = jnp.argmax(nan, axis=d, keepdims=True).astype(i.dtype)
        v = jnp.where(has_nan, jnp.nan, v).astype(x.dtype)
        i = jnp.where(has_nan, first, i)
    if not keepdim:
        v, i = jnp.squeeze(v, d), jnp.squeeze(i, d)
    return v, i


@register(aten.median.default)
def median_all(x, ignore_nan=False):
    if x.size == 0:  # torch: NaN for floats (CPU refuses integer inputs: parity/)
        return jnp.full((), jnp.nan, x.dtype)
    return _median(x.reshape(-1), 0, False, ignore_nan)[0]


@register(aten.median.dim)
def median_dim(x, dim, keepdim=False, ignore_nan=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return _median(x, dim % x.ndim, keepdim, ignore_nan)


@register(aten.nanmedian.dim)
def nanmedian_dim(x, dim, keepdim=False):
    return median_dim(x, dim, keepdim, ignore_nan=True)


register(aten.nanmedian.default)(lambda x: median_all(x, ignore_nan=True))


@register(aten.count_nonzero.dim_IntList, aten.count_nonzero.default)
def count_nonzero(x, dim=None):
    axis = None if dim is None else dims_tuple(dim, x.ndim)
    return jnp.sum(x != 0, axis=axis, dtype=jnp.int64)


@register(aten.nansum.default)
def nansum(x, dim=None, keepdim=False, dtype=None):
    axis = None if dim is None else dims_tuple(dim, x.ndim)
    return jnp.nansum(_acc(x, dtype), axis=axis, keepdims=keepdim)


def _mode_1d(v):
    # CPU: sort, take the first longest run of equal values (so the smallest of the most frequent), and the
    # position of its last occurrence in the input
    n = v.shape[0]
    s = jnp.sort(v)
    starts = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    run = jnp.cumsum(starts) - 1
    length = jax.ops.segment_sum(jnp.ones((n,), jnp.int32), run, num_segments=n)
    value = s[jnp.argmax(length[run])]
    last = n - 1 - jnp.argmax((v == value)[::-1])
    return value, last.astype(jnp.int64)


@register(aten.mode.default)
def mode(x, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    moved = jnp.moveaxis(x, d, -1)
    batch = moved.shape[:-1]
    if moved.shape[-1] == 0 or math.prod(batch) == 0:
        out_shape = list(x.shape)
        if keepdim:
            out_shape[d] = 1
        else:
            del out_shape[d]
        return jnp.zeros(out_shape, x.dtype), jnp.zeros(out_shape, jnp.int64)
    values, index = jax.vmap(_mode_1d)(moved.reshape(-1, moved.shape[-1]))
    values, index = values.reshape(batch), index.reshape(batch)
    if keepdim:
        values, index = jnp.expand_dims(values, d), jnp.expand_dims(index, d)
    return values, index

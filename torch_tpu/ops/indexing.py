"""Gather/scatter/index ops. Ops whose output shape depends on values are marked data_dependent.

Why one module: the gather/scatter family (29 lowerings) shares its index normalisation and its device-side range
checks.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime import dtypes
from .checks import index_in_range, require
from .registry import aten, register
from ._util import is_low_precision, is_value, upcast


def in_range_or_dropped(index, size: int, negative_ok: bool):
    """``index`` with every out-of-range entry replaced by ``size``: a position scatters drop and no
    index dtype conversion can wrap (JAX indexes with int32 where it can, so 2**40 would become 0).
    A failed write thus writes its in-range entries only, never at a wrapped position."""
    return jnp.where(index_in_range(index, size, negative_ok), index, size)


def _integer_indices(x, indices):
    """(dim, index) of the integer advanced indices (one per leading dim; None is a full slice, bool a mask)."""
    return [(d, i) for d, i in enumerate(indices) if i is not None and i.dtype != jnp.bool_ and d < x.ndim]


def _require_in_range(x, indices):
    for d, i in _integer_indices(x, indices):
        require(index_in_range(i, x.shape[d], True), f"index out of bounds for dimension {d} with size {x.shape[d]}")


def _dropped(x, indices):
    """``indices`` with out-of-range entries made harmless (``in_range_or_dropped``)."""
    out = list(indices)
    for d, i in _integer_indices(x, indices):
        out[d] = in_range_or_dropped(i, x.shape[d], True)
    return out


def _check_indices(x, indices):
    """Advanced indices address existing elements (a device-side check); returns them made harmless."""
    _require_in_range(x, indices)
    return _dropped(x, indices)


def _check_along(x, dim, index, what="index"):
    """``index`` addresses elements of x along ``dim`` (no negative indices: gather, scatter, index_add);
    returns it with out-of-range entries made harmless."""
    size = x.shape[dim % x.ndim] if x.ndim else 1
    require(index_in_range(index, size, False),
            f"{what} out of bounds for dimension {dim % max(x.ndim, 1)} with size {size}")
    return in_range_or_dropped(index, size, False)


def _index_tuple(indices):
    return tuple(slice(None) if i is None else i for i in indices)


def accumulate_into(x, idx, src, op="add", **kw):
    """``x.at[idx].add/multiply(src)``; for bool ``x`` torch's or/and (XLA's scatter refuses bool
    arithmetic: index_put(accumulate=True), scatter_add, put and index_add of bool tensors raised)."""
    if x.dtype == jnp.bool_:
        return getattr(x.astype(jnp.int32).at[idx], op)(jnp.asarray(src).astype(jnp.int32), **kw) != 0
    return getattr(x.at[idx], op)(src, **kw)


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(x, indices):
    out = x[_index_tuple(_dropped(x, indices))]
    if out.size:  # (an empty result reads nothing: CPU checks no index then, ``zeros(0, 3)[:, [5]]`` is no error)
        _require_in_range(x, indices)
    return out


@register(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(x, indices, values, accumulate=False):
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == jnp.bool_:
        return _index_put_mask(x, indices[0], values, accumulate)
    indices = _check_indices(x, indices)
    idx = _index_tuple(indices)
    values = values.astype(x.dtype)
    return accumulate_into(x, idx, values) if accumulate else x.at[idx].set(values)


def _index_put_mask(x, mask, values, accumulate):
    """x[mask] = values without a data-dependent shape: the k-th True position takes values[k]."""
    k = mask.ndim
    lead, rest = x.shape[:k], x.shape[k:]
    m = jnp.broadcast_to(mask, lead).reshape(-1)
    flat = x.reshape((-1,) + rest)
    values = jnp.asarray(values).astype(x.dtype)
    if values.ndim > len(rest) and values.shape[0] != 1:
        pos = jnp.clip(jnp.cumsum(m.astype(jnp.int32)) - 1, 0, max(values.shape[0] - 1, 0))
        vals = jnp.broadcast_to(values, (values.shape[0],) + rest)[pos]
    else:
        vals = jnp.broadcast_to(values.reshape(values.shape[-len(rest):] if rest else ()) if values.ndim > len(rest)
                                else values, rest)[None]
    sel = m.reshape((-1,) + (1,) * len(rest))
    out = jnp.where(sel, flat + vals if accumulate else vals, flat)
    return out.reshape(x.shape)


@register(aten._index_put_impl.default)
def index_put_impl(x, indices, values, accumulate=False, unsafe=False):
    return index_put(x, indices, values, accumulate)


def _grids(index, dim):
    grids = list(jnp.meshgrid(*[jnp.arange(s) for s in index.shape], indexing="ij"))
    grids[dim] = index
    return tuple(grids)


@register(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    if index.size == 0:  # torch allows any index rank when it is empty
        return jnp.zeros(index.shape, x.dtype)
    index = _check_along(x, dim, index)
    if x.ndim == 0:
        return x.reshape(index.shape) if index.ndim == 0 else jnp.broadcast_to(x, index.shape)
    d = dim % x.ndim
    return x[_grids(index, d)]


@register(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    index = _check_along(x, dim, index)
    if x.ndim == 0:
        return jnp.asarray(src).astype(x.dtype).reshape(()) if index.size else x
    d = dim % x.ndim
    if hasattr(src, "shape") and jnp.ndim(src) > 0:
        src = src[tuple(slice(0, s) for s in index.shape)]
    return x.at[_grids(index, d)].set(jnp.asarray(src).astype(x.dtype))


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_reduce_legacy(x, dim, index, src, reduce):
    index = _check_along(x, dim, index)
    d = dim % x.ndim
    if jnp.ndim(src) > 0:
        src = src[tuple(slice(0, s) for s in index.shape)]
    src = jnp.asarray(src).astype(x.dtype)
    g = _grids(index, d)
    op = "add" if reduce == "add" else "multiply"
    if is_low_precision(x):  # CPU's scatter kernels accumulate half types in float32 (_opmath)
        return accumulate_into(upcast(x), g, upcast(src), op).astype(x.dtype)
    return accumulate_into(x, g, src, op)


@register(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    index = _check_along(x, dim, index)
    if x.ndim == 0:
        return x + jnp.sum(src)
    d = dim % x.ndim
    src = src[tuple(slice(0, s) for s in index.shape)]
    if is_low_precision(x):
        # CPU's scatter_add accumulates bf16/fp16 in float32 and rounds once (600 ones summed in bf16
        # stopped at 256 here: 256 + 1 rounds to 256); index_add and index_put(accumulate) do not
        return accumulate_into(upcast(x), _grids(index, d), upcast(src.astype(x.dtype))).astype(x.dtype)
    return accumulate_into(x, _grids(index, d), src.astype(x.dtype))


@register(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    if x.dtype == jnp.bool_:  # in int32 (XLA's scatter refuses bool arithmetic): sum/prod/amax/amin as or/and
        return scatter_reduce(x.astype(jnp.int32), dim, index, src.astype(jnp.int32), reduce, include_self) != 0
    if is_low_precision(x) and reduce in ("sum", "prod", "mean"):  # in float32, as CPU's kernel (_opmath)
        src = src.astype(x.dtype)
        return scatter_reduce(upcast(x), dim, index, upcast(src), reduce, include_self).astype(x.dtype)
    index = _check_along(x, dim, index)
    d = dim % max(x.ndim, 1)
    src = src[tuple(slice(0, s) for s in index.shape)].astype(x.dtype)
    g = _grids(index, d) if x.ndim else ()
    if reduce == "sum":
        base = x if include_self else x.at[g].set(0)
        return base.at[g].add(src)
    if reduce == "prod":
        base = x if include_self else x.at[g].set(1)
        return base.at[g].multiply(src)
    if reduce in ("amax", "amin"):
        fill = (-jnp.inf if reduce == "amax" else jnp.inf) if jnp.issubdtype(x.dtype, jnp.inexact) else (
            jnp.iinfo(x.dtype).min if reduce == "amax" else jnp.iinfo(x.dtype).max)
        base = x if include_self else x.at[g].set(fill)
        return base.at[g].max(src) if reduce == "amax" else base.at[g].min(src)
    if reduce == "mean":
        base = x if include_self else x.at[g].set(0)
        sums = base.at[g].add(src)
        counts = jnp.ones(x.shape, jnp.int64 if not jnp.issubdtype(x.dtype, jnp.inexact) else x.dtype)
        if not include_self:
            counts = counts.at[g].set(0)
        counts = counts.at[g].add(1)
        counts = jnp.maximum(counts, 1)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            return sums / counts
        return jnp.floor_divide(sums, counts.astype(x.dtype))
    raise NotImplementedError(f"scatter_reduce with reduce={reduce!r}")


@register(aten.index_select.default)
def index_select(x, dim, index):
    index = _check_along(x, dim, index)
    if x.ndim == 0:  # torch: a 0-d result whatever the (one-element) index shape
        return x
    return jnp.take(x, index.reshape(-1), axis=dim % x.ndim)  # (a 0-d index keeps the dim, of size 1)


def _along(x, dim, index):
    idx = [slice(None)] * x.ndim
    idx[dim % x.ndim] = index
    return tuple(idx)


def _one_index(index, source, ndim):
    """a 0-d index is one index (torch's kernels read ``index.numel()`` entries): made 1-d, and a 0-d
    source (allowed with a 1-d self) a slice of one."""
    if index.ndim == 0:
        index = index.reshape(1)
    if source.ndim == 0 and ndim:
        source = source.reshape((1,) * ndim)
    return index, source


@register(aten.index_add.default)
def index_add(x, dim, index, source, alpha=1):
    index = _check_along(x, dim, index)
    index, source = _one_index(index, source, x.ndim)
    if x.ndim == 0:
        return x + alpha * source.reshape(())
    src = source if is_value(alpha, 1) else source * alpha
    if is_low_precision(x) and x.ndim > 1 and is_value(alpha, 1) and dim % x.ndim in (0, x.ndim - 1):
        # CPU's kernel sums these in float32 and rounds once (a bf16 MoE/GNN ``out.index_add_(0, i, rows)``
        # of 600 ones gave 256 here: 256 + 1 rounds to 256); a 1-d self, a middle dim or alpha != 1 add
        # in the dtype, one after the other, there as here
        return accumulate_into(upcast(x), _along(x, dim, index), upcast(src.astype(x.dtype))).astype(x.dtype)
    return accumulate_into(x, _along(x, dim, index), src.astype(x.dtype))


@register(aten.index_copy.default)
def index_copy(x, dim, index, source):
    index = _check_along(x, dim, index)
    index, source = _one_index(index, source, x.ndim)
    if x.ndim == 0:
        return source.reshape(()).astype(x.dtype)
    return x.at[_along(x, dim, index)].set(source.astype(x.dtype))


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x, dim, index, value):
    size = x.shape[dim % x.ndim] if x.ndim else 1
    require(index_in_range(index, size, True), f"index out of bounds for dimension {dim} with size {size}")
    index = in_range_or_dropped(index, size, True)
    if x.ndim == 0:
        return jnp.asarray(value).astype(x.dtype).reshape(())
    return x.at[_along(x, dim, index)].set(jnp.asarray(value).astype(x.dtype))


@register(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    x, mask = jnp.broadcast_arrays(x, mask)
    flat_mask = mask.reshape(-1)
    require(jnp.sum(flat_mask.astype(jnp.int64)) <= source.size,
            "Number of elements of source < number of ones in mask")
    pos = jnp.cumsum(flat_mask.astype(jnp.int64)) - 1
    vals = source.reshape(-1)[jnp.clip(pos, 0, max(source.size - 1, 0))]
    return jnp.where(flat_mask, vals.astype(x.dtype), x.reshape(-1)).reshape(x.shape)


@register(aten.masked_scatter_backward.default)
def masked_scatter_backward(grad, mask, sizes):
    # torch: grad.masked_select(mask), zero-padded to prod(sizes), viewed as sizes (the gradient of
    # masked_scatter's source: the selected elements in order, then zeros); a static shape
    grad, mask = jnp.broadcast_arrays(grad, mask)
    flat_mask = mask.reshape(-1)
    n = int(np.prod(sizes)) if len(sizes) else 1
    pos = jnp.cumsum(flat_mask.astype(jnp.int64)) - 1
    out = jnp.zeros((n,), grad.dtype).at[jnp.where(flat_mask, pos, n)].set(grad.reshape(-1), mode="drop")
    return out.reshape(tuple(sizes))


@register(aten.take.default)
def take(x, index):
    require(index_in_range(index, x.size, True), f"out of range: an index addresses none of the {x.size} elements")
    return x.reshape(-1)[in_range_or_dropped(index, x.size, True)]


def _binary_search(seq, v, right: bool):
    """CPU's binary search (``start = mid + 1`` while ``!(seq[mid] >= v)``, ``>`` for right) over a 1-d
    ``seq``: IEEE comparisons, so a NaN in the sequence lands where CPU puts it (jnp.searchsorted
    compares in sort order, NaN largest)."""
    n = seq.shape[0]
    lo = jnp.zeros(v.shape, jnp.int64)
    hi = jnp.full(v.shape, n, jnp.int64)
    for _ in range(max(n, 1).bit_length()):
        mid = (lo + hi) // 2
        m = seq[jnp.clip(mid, 0, max(n - 1, 0))] if n else jnp.zeros(v.shape, seq.dtype)
        go_right = ~(m > v) if right else ~(m >= v)
        active = lo < hi
        lo = jnp.where(active & go_right, mid + 1, lo)
        hi = jnp.where(active & ~go_right, mid, hi)
    return lo


@register(aten.searchsorted.Tensor)
def searchsorted(sorted_seq, x, out_int32=False, right=False, side=None, sorter=None):
    side = side or ("right" if right else "left")
    if sorter is not None:
        n = sorted_seq.shape[-1]
        require(index_in_range(sorter, n, False), f"torch.searchsorted(): sorter index out of range "
                f"(the sorted sequence has {n} elements per row)")
        sorted_seq = jnp.take_along_axis(sorted_seq, in_range_or_dropped(sorter, n, False), axis=-1,
                                         mode="fill", fill_value=0)
    if sorted_seq.ndim == 1:
        return _binary_search(sorted_seq, x, side == "right")
    rows = math.prod(sorted_seq.shape[:-1])  # (explicit: reshape(-1, 0) of an empty sequence fails)
    flat_s = sorted_seq.reshape(rows, sorted_seq.shape[-1])
    flat_x = x.reshape(rows, x.shape[-1])
    out = jax.vmap(lambda s, v: _binary_search(s, v, side == "right"))(flat_s, flat_x)
    return out.reshape(x.shape)


@register(aten.searchsorted.Scalar)
def searchsorted_scalar(sorted_seq, value, out_int32=False, right=False, side=None, sorter=None):
    return searchsorted(sorted_seq, jnp.asarray(value), out_int32, right, side, sorter)


@register(aten.bucketize.Tensor)
def bucketize(x, boundaries, out_int32=False, right=False):
    return _binary_search(boundaries, x, right)


@register(aten.bucketize.Scalar)
def bucketize_scalar(value, boundaries, out_int32=False, right=False):
    return bucketize(jnp.asarray(value), boundaries, out_int32, right)


@register(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def isin(elements, test_elements, assume_unique=False, invert=False):
    res = jnp.isin(elements, test_elements)
    return ~res if invert else res


@register(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    """nonzero padded (or cut) to ``size`` rows: a static shape, so it stays inside programs."""
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    coords = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(coords, axis=1).astype(jnp.int64)


# --- data-dependent output shapes (run eagerly on concrete arrays) ------------------------------
@register(aten.nonzero.default, data_dependent=True)
def nonzero(x):
    return jnp.asarray(np.stack(np.nonzero(np.asarray(x)), axis=1).astype(np.int64)) if x.ndim else \
        jnp.zeros((int(bool(np.asarray(x))), 0), jnp.int64)


@register(aten.masked_select.default, data_dependent=True)
def masked_select(x, mask):
    x, mask = jnp.broadcast_arrays(x, mask)
    return x[np.asarray(mask)]


@register(aten._unique2.default, data_dependent=True)
def unique2(x, sorted=True, return_inverse=False, return_counts=False):
    # NaNs are distinct values, as on CPU (numpy merges them by default)
    vals, inv, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True, equal_nan=False)
    return (jnp.asarray(vals), jnp.asarray(inv.reshape(x.shape).astype(np.int64)),
            jnp.asarray(counts.astype(np.int64)) if return_counts else jnp.zeros((0,), jnp.int64))


@register(aten._unique.default, data_dependent=True)
def unique(x, sorted=True, return_inverse=False):
    """(index_fill's backward with a tensor value reaches it: NotImplementedError before.) Sorted whatever
    ``sorted`` says (CPU's unsorted order is unspecified); the inverse is empty unless asked for."""
    vals, inv, _ = unique2(x, True, True, False)
    return vals, inv if return_inverse else jnp.zeros((0,), jnp.int64)


@register(aten.unique_dim.default, data_dependent=True)
def unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    if x.ndim == 0:  # (numpy's AxisError leaked out)
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if x.size == 0 and x.shape[dim % x.ndim] != 0:  # (an empty result otherwise)
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    vals, inv, counts = np.unique(np.asarray(x), axis=dim, return_inverse=True, return_counts=True)
    return jnp.asarray(vals), jnp.asarray(inv.reshape(-1).astype(np.int64)), jnp.asarray(counts.astype(np.int64))


@register(aten.unique_consecutive.default, data_dependent=True)
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    a = np.asarray(x)
    if dim is None:
        flat = a.reshape(-1)
        if flat.size == 0:
            return jnp.asarray(flat), jnp.zeros(a.shape, jnp.int64), jnp.zeros((0,), jnp.int64)
        change = np.concatenate([[True], flat[1:] != flat[:-1]])
        inv = np.cumsum(change) - 1
        counts = np.diff(np.append(np.nonzero(change)[0], flat.size))
        return jnp.asarray(flat[change]), jnp.asarray(inv.reshape(a.shape)), jnp.asarray(counts.astype(np.int64))
    # along a dim: slices equal to the one before collapse (a 0-length dim keeps everything as it is)
    if not -a.ndim <= dim < a.ndim or a.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions" if a.ndim == 0 else
                         f"Dimension out of range (expected to be in range of [{-a.ndim}, {a.ndim - 1}], "
                         f"but got {dim})")
    dim = dim % a.ndim
    if a.size == 0 and a.shape[dim] != 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    moved = np.moveaxis(a, dim, 0)
    if moved.shape[0] == 0:
        return jnp.asarray(a), jnp.zeros((0,), jnp.int64), jnp.zeros((0,), jnp.int64)
    rows = moved.reshape(moved.shape[0], -1)
    change = np.concatenate([[True], np.any(rows[1:] != rows[:-1], axis=1)])
    inv = np.cumsum(change) - 1
    counts = np.diff(np.append(np.nonzero(change)[0], rows.shape[0]))
    return (jnp.asarray(np.moveaxis(moved[change], 0, dim)), jnp.asarray(inv.astype(np.int64)),
            jnp.asarray(counts.astype(np.int64)))


@register(aten.bincount.default, data_dependent=True)
def bincount(x, weights=None, minlength=0):
    """The output's length is the input's maximum + 1: computed on the host, as the CPU kernel."""
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.integer):
        dtype = dtypes.to_torch_dtype(a.dtype)
        raise NotImplementedError(f'"bincount_cpu" not implemented for \'{dtypes.TYPE_NAMES.get(dtype, dtype)}\'')
    if a.ndim != 1 or (a.size and a.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    w = None
    if weights is not None:
        w = np.asarray(weights)
        if w.ndim != 1 or w.shape[0] != a.shape[0]:
            raise RuntimeError("weights should be 1-d and have the same length as input")
        w = w.astype(np.float32 if w.dtype == np.float32 else np.float64)
    if a.size == 0:  # CPU: int64 zeros of minlength, weights or not (its early return ignores them)
        return jnp.zeros((minlength,), jnp.int64)
    out = np.bincount(a, w, minlength)
    return jnp.asarray(out.astype(np.int64) if w is None else out.astype(w.dtype))


@register(aten.repeat_interleave.Tensor, data_dependent=True)
def repeat_interleave_tensor(repeats, output_size=None):
    r = np.asarray(repeats)
    if r.size and r.min() < 0:
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and int(r.sum()) != output_size:  # CPU torch refuses (it returned r.sum())
        raise RuntimeError(f"repeat_interleave: allocated size does not match required size (output_size="
                           f"{output_size}, repeats sum to {int(r.sum())})")
    return jnp.asarray(np.repeat(np.arange(r.shape[0]), r).astype(np.int64))


def repeat_interleave_tensor_sized(repeats, output_size=None):
    """``repeat_interleave(repeats, output_size=n)`` in a static-shape program (compiled graphs: the
    output length is given, so the shape is not data-dependent); CPU torch refuses a wrong size."""
    require(jnp.all(repeats >= 0), "repeats can not be negative")
    require(jnp.sum(repeats) == output_size, "repeat_interleave: allocated size does not match required size")
    return jnp.repeat(jnp.arange(repeats.shape[0], dtype=jnp.int64), repeats, total_repeat_length=output_size)

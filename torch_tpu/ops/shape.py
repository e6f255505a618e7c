"""Ops that build new tensors from others' layout: cat, stack, pad, flip, repeat, tril, scatters of views,
and the ``*_copy`` forms of view ops (they appear in functionalised graphs)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..runtime import dtypes
from .registry import aten, register
from ._util import jdtype


def strided_indices(size, stride, offset):
    """Flat storage index of every element of a (size, stride, offset) view (offset may be traced)."""
    idx = offset
    for k, (s, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = s
        idx = idx + jnp.arange(s, dtype=jnp.int64).reshape(shape) * st
    return jnp.broadcast_to(idx, tuple(size))


@register(aten.cat.default)
def cat(tensors, dim=0):
    # torch skips 1-D empty tensors in cat (legacy behaviour)
    arrays = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not arrays:
        return tensors[0]
    dtype = jnp.result_type(*arrays)
    out = jnp.concatenate([a.astype(dtype) for a in arrays], axis=dim % arrays[0].ndim)
    from . import position_embeddings  # (imported at first use: it defines torch ops)

    position_embeddings.note_concatenation(out, arrays, dim)  # FLUX's normalised q/k, for the rotary kernel
    return out


@register(aten.stack.default)
def stack(tensors, dim=0):
    return jnp.stack(tensors, axis=dim % (tensors[0].ndim + 1))


@register(aten.copy.default)
def copy(x, src, non_blocking=False):
    """The functional copy_ of functionalised graphs: src cast and broadcast to x's shape and dtype."""
    return jnp.broadcast_to(dtypes.astype(jnp.asarray(src), x.dtype), x.shape)


def _bitcast_last(x, want):
    """``x``'s bytes as ``want`` (real, non-bool dtypes): the last dimension scales by the size ratio."""
    a, b = jnp.dtype(x.dtype).itemsize, jnp.dtype(want).itemsize
    if a == b:
        return jax.lax.bitcast_convert_type(x, want)
    # XLA's simplifier merges two width-changing bitcast-converts into one of the wrong shape (an HLO
    # verifier error): keep each one apart
    x = jax.lax.optimization_barrier(x)
    if a > b:
        y = jax.lax.bitcast_convert_type(x, want)
        return y.reshape(*x.shape[:-1], x.shape[-1] * (a // b))
    r = b // a
    return jax.lax.bitcast_convert_type(x.reshape(*x.shape[:-1], x.shape[-1] // r, r), want)


@register(aten.view.dtype, aten.view_copy.dtype)
def view_dtype(x, dtype):
    """torch's ``x.view(dtype)`` in a compiled graph: the same bytes reinterpreted (complex as its
    (real, imag) pairs, bool as uint8)."""
    want = jnp.dtype(jdtype(dtype))
    if x.dtype == want:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1).reshape(*x.shape[:-1], -1)
    elif x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    if jnp.issubdtype(want, jnp.complexfloating):
        part = jnp.finfo(want).dtype
        y = _bitcast_last(x, part) if x.dtype != part else x
        y = y.reshape(*y.shape[:-1], y.shape[-1] // 2, 2)
        return jax.lax.complex(y[..., 0], y[..., 1]).astype(want)
    if want == jnp.bool_:
        return _bitcast_last(x, jnp.uint8) != 0
    return _bitcast_last(x, want)


@register(aten._unsafe_view.default, aten.view_copy.default, aten.reshape.default, aten._reshape_copy.default)
def reshape(x, size):
    return jnp.reshape(x, tuple(size))


@register(aten.permute_copy.default)
def permute_copy(x, dims):
    return jnp.transpose(x, [d % x.ndim for d in dims]) if x.ndim else x


@register(aten.t_copy.default)
def t_copy(x):
    return x.T


@register(aten.transpose_copy.int)
def transpose_copy(x, dim0, dim1):
    return jnp.swapaxes(x, dim0, dim1) if x.ndim else x


@register(aten.expand_copy.default)
def expand_copy(x, size, implicit=False):
    size = tuple(x.shape[i - (len(size) - x.ndim)] if s == -1 else s for i, s in enumerate(size))
    return jnp.broadcast_to(x, size)


@register(aten.unsqueeze_copy.default)
def unsqueeze_copy(x, dim):
    return jnp.expand_dims(x, dim % (x.ndim + 1))


@register(aten.squeeze_copy.default, aten.squeeze_copy.dim, aten.squeeze_copy.dims)
def squeeze_copy(x, dim=None):
    if dim is None:
        return jnp.squeeze(x)
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    dims = tuple(d % max(x.ndim, 1) for d in dims if x.ndim and x.shape[d % x.ndim] == 1)
    return jnp.squeeze(x, dims) if dims else x


@register(aten.slice_copy.Tensor)
def slice_copy(x, dim=0, start=None, end=None, step=1):
    n = x.shape[dim]
    start, end, _ = slice(start, end, step).indices(n)
    end = max(end, start)
    return jax.lax.slice_in_dim(x, start, end, step, axis=dim % x.ndim)


@register(aten.select_copy.int)
def select_copy(x, dim, index):
    return jnp.take(x, index % x.shape[dim], axis=dim)


@register(aten.flip.default)
def flip(x, dims):
    return jnp.flip(x, axis=tuple(d % x.ndim for d in dims)) if x.ndim else x


@register(aten.roll.default)
def roll(x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), axis=tuple(dims))


@register(aten.repeat.default)
def repeat(x, repeats):
    repeats = tuple(repeats)
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, repeats)


@register(aten.repeat_interleave.self_int)
def repeat_interleave(x, repeats, dim=None, output_size=None):
    if dim is None:
        return jnp.repeat(x.reshape(-1), repeats)
    return jnp.repeat(x, repeats, axis=dim)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    pads = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pads[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    lo_hi = [(max(a, 0), max(b, 0)) for a, b in pads]
    y = jnp.pad(x, lo_hi, constant_values=jnp.asarray(value).astype(x.dtype))
    # negative padding crops
    slices = tuple(slice(-a if a < 0 else 0, (y.shape[i] + b) if b < 0 else None) for i, (a, b) in enumerate(pads))
    return y[slices]


def _pad_mode(mode):
    def lower(x, padding):
        nd = len(padding) // 2
        pads = [(0, 0)] * (x.ndim - nd) + [(padding[2 * (nd - 1 - i)], padding[2 * (nd - 1 - i) + 1]) for i in range(nd)]
        # a negative pad crops what the positive pads around the whole input give (torch's index map)
        y = jnp.pad(x, [(max(a, 0), max(b, 0)) for a, b in pads], mode=mode)
        return y[tuple(slice(-a if a < 0 else 0, y.shape[i] + b if b < 0 else None) for i, (a, b) in enumerate(pads))]

    return lower


register(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)(_pad_mode("reflect"))
register(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)(_pad_mode("edge"))


@register(aten.tril.default)
def tril(x, diagonal=0):
    return jnp.tril(x, diagonal)


@register(aten.triu.default)
def triu(x, diagonal=0):
    return jnp.triu(x, diagonal)


@register(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    n = x.shape[dim]
    start, end, step = slice(start, end, step).indices(n)
    idx = [slice(None)] * x.ndim
    idx[dim] = slice(start, end, step)
    return x.at[tuple(idx)].set(src.astype(x.dtype))


@register(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    idx = [slice(None)] * x.ndim
    idx[dim] = index % x.shape[dim]
    return x.at[tuple(idx)].set(src.astype(x.dtype))


@register(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    i = jnp.arange(src.shape[-1])
    r = i + max(-offset, 0)
    c = i + max(offset, 0)
    moved = jnp.moveaxis(x, (d1, d2), (-2, -1))
    moved = moved.at[..., r, c].set(src.astype(x.dtype))
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


@register(aten.diagonal_copy.default)
def diagonal_copy(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, dim1 % x.ndim, dim2 % x.ndim)


@register(aten.diag_embed.default)
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1] + abs(offset)
    out_nd = x.ndim + 1
    base = jnp.zeros(x.shape[:-1] + (n, n), x.dtype)
    i = jnp.arange(x.shape[-1])
    base = base.at[..., i + max(-offset, 0), i + max(offset, 0)].set(x)
    return jnp.moveaxis(base, (-2, -1), (dim1 % out_nd, dim2 % out_nd))


@register(aten.as_strided_copy.default)
def as_strided_copy(x, size, stride, storage_offset=None):
    return x.reshape(-1)[strided_indices(size, stride, storage_offset or 0)]


@register(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    idx = strided_indices(size, stride, storage_offset or 0).reshape(-1)
    return x.reshape(-1).at[idx].set(src.reshape(-1).astype(x.dtype)).reshape(x.shape)


@register(aten.unfold_copy.default)
def unfold_copy(x, dimension, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    d = dimension % x.ndim
    n = (x.shape[d] - size) // step + 1
    starts = jnp.arange(n) * step
    idx = starts[:, None] + jnp.arange(size)[None, :]
    y = jnp.take(x, idx.reshape(-1), axis=d)
    y = y.reshape(x.shape[:d] + (n, size) + x.shape[d + 1:])
    return jnp.moveaxis(y, d + 1, -1)


@register(aten.view_as_complex_copy.default)
def view_as_complex_copy(x):
    return jax.lax.complex(x[..., 0], x[..., 1])


@register(aten.view_as_real_copy.default)
def view_as_real_copy(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@register(aten.complex.default)
def complex_(real, imag):
    return jax.lax.complex(*jnp.broadcast_arrays(real, imag))


@register(aten.polar.default)
def polar(absval, angle):
    return jax.lax.complex(absval * jnp.cos(angle), absval * jnp.sin(angle))


@register(aten.split_with_sizes_copy.default)
def split_with_sizes_copy(x, split_sizes, dim=0):
    out, start = [], 0
    for s in split_sizes:
        out.append(jax.lax.slice_in_dim(x, start, start + s, axis=dim % x.ndim))
        start += s
    return out


@register(aten.unbind_copy.int)
def unbind_copy(x, dim=0):
    return [jnp.take(x, i, axis=dim) for i in range(x.shape[dim])]

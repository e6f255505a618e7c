"""Convolution, pooling and upsampling: single XLA operations (conv_general_dilated, reduce_window,
gathers with static weights) instead of torch's decompositions.

Why one module: convolution, pooling and upsampling (26 lowerings) share their window, padding and layout helpers.
"""
from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime import platform
from .registry import aten, register
from ._util import dot_general_for, exact_integer_products, is_float, is_low_precision, precision_of, upcast

# --- convolution --------------------------------------------------------------------------------
def _conv_dims(nd):
    spatial = "DHW"[-nd:] if nd <= 3 else None
    if spatial is None:
        raise NotImplementedError(f"tpu: convolution with {nd} spatial dims")
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


@register(aten.convolution.default, matmul=True)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
                precision=None):
    unbatched = False
    nd = weight.ndim - 2
    if x.ndim == nd + 1:
        x = x[None]
        unbatched = True
    dn = _conv_dims(nd)
    stride, dilation, padding = list(stride), list(dilation), list(padding)
    if len(stride) == 1:
        stride = stride * nd
    if len(dilation) == 1:
        dilation = dilation * nd
    if len(padding) == 1:
        padding = padding * nd
    prefer = jnp.float32 if is_low_precision(x) else None
    prec = precision_of(precision, x, weight)
    if not transposed:
        w, pads, window_strides, lhs_dilation = weight, [(p, p) for p in padding], stride, [1] * nd
    else:
        output_padding = list(output_padding) or [0] * nd
        if len(output_padding) == 1:
            output_padding = output_padding * nd
        # weight: (C_in, C_out/groups, *k) -> (C_out, C_in/groups, *k), flipped spatially
        cin = weight.shape[0]
        cout_g = weight.shape[1]
        k = weight.shape[2:]
        w = weight.reshape((groups, cin // groups, cout_g) + k)
        w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + k)
        w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
        pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op)
                for kk, p, d, op in zip(k, padding, dilation, output_padding)]
        window_strides, lhs_dilation = [1] * nd, stride
    out_size = _out_sizes(x.shape[2:], w.shape[2:], window_strides, pads, lhs_dilation, dilation)
    if min(out_size, default=1) >= 1 and (exact_integer_products(x, weight)
                                          or (not transposed and _as_matmul_on_tpu(x, w, out_size, prec))):
        out = _conv_as_matmul(x, w, window_strides, pads, lhs_dilation, dilation, groups, prec, out_size)
    else:
        out = jax.lax.conv_general_dilated(
            x, w, window_strides=window_strides, padding=pads, lhs_dilation=lhs_dilation, rhs_dilation=dilation,
            dimension_numbers=dn, feature_group_count=groups, precision=prec, preferred_element_type=prefer)
    if prefer is not None:
        out = out.astype(x.dtype)
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


# Unfolded inputs up to this size make a float32 convolution a matmul on a TPU (``_as_matmul_on_tpu``).
_UNFOLD_BYTES = 8 << 20


def _out_sizes(sizes, kernel, strides, pads, lhs_dilation, rhs_dilation) -> tuple:
    """The output's spatial sizes of ``lax.conv_general_dilated`` with these arguments."""
    return tuple((((n - 1) * ld + 1 + lo + hi) - d * (k - 1) - 1) // st + 1
                 for n, k, st, (lo, hi), ld, d in zip(sizes, kernel, strides, pads, lhs_dilation, rhs_dilation))


def _as_matmul_on_tpu(x, weight, out_size, prec) -> bool:
    """Whether a float32 convolution at HIGHEST or HIGH precision runs as a matmul over its unfolded input,
    in a program built for a TPU. XLA:TPU compiles such a convolution slowly (a 16-channel 3x3 over 64x64:
    5.4 s at HIGHEST against 1.4 s at DEFAULT and 0.3 s in bfloat16, on a v5e), while the same product as a
    dot over the unfolded input compiles in 0.34 s, runs as fast and is as exact (measured on the chip, 1.4e-7
    relative error against float64). Unfolding holds the input once per kernel tap, so only small inputs
    take it (``_UNFOLD_BYTES``: a VAE's 1024x1024 float32 layers keep the convolution, which also runs
    faster there)."""
    if prec not in (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGH) or platform.target() != "tpu":
        return False
    if jnp.result_type(x) != jnp.float32 or jnp.result_type(weight) != jnp.float32:
        return False
    return x.shape[0] * x.shape[1] * math.prod(weight.shape[2:]) * math.prod(out_size) * 4 <= _UNFOLD_BYTES


def _conv_as_matmul(x, weight, strides, pads, lhs_dilation, rhs_dilation, groups, prec, out_size):
    """``lax.conv_general_dilated`` as one (grouped) matmul: each kernel tap's strided window of the padded
    (and, for a transposed convolution, dilated) input, stacked after the channels, times the weight
    flattened the same way (channel, then tap). 64-bit integers for a TPU: multiplies and sums
    (``dot_general_for``)."""
    n, cin = x.shape[:2]
    cout, k = weight.shape[0], weight.shape[2:]
    padded = jax.lax.pad(x, jnp.zeros((), x.dtype),
                         [(0, 0, 0), (0, 0, 0)] + [(lo, hi, ld - 1) for (lo, hi), ld in zip(pads, lhs_dilation)])
    taps = []
    for tap in itertools.product(*(range(kk) for kk in k)):
        start = (0, 0) + tuple(t * d for t, d in zip(tap, rhs_dilation))
        limit = (n, cin) + tuple(b + (o - 1) * st + 1 for b, o, st in zip(start[2:], out_size, strides))
        taps.append(jax.lax.slice(padded, start, limit, (1, 1) + tuple(strides)))
    per_group = (cin // groups) * math.prod(k)
    cols = jnp.stack(taps, 2).reshape(n, groups, per_group, math.prod(out_size))
    w = weight.reshape(groups, cout // groups, per_group)
    y = jnp.einsum("gok,ngkp->ngop", w, cols, precision=prec, _dot_general=dot_general_for(x, weight))
    return y.reshape((n, cout) + tuple(out_size))


@register(aten.convolution_backward.default, matmul=True)
def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask, precision=None):
    def fwd(x_, w_):
        return convolution(x_, w_, None, stride, padding, dilation, transposed, output_padding, groups,
                           precision)

    _, pull = jax.vjp(fwd, x, weight)
    gx, gw = pull(grad)
    nd = weight.ndim - 2
    gb = jnp.sum(upcast(grad), axis=(0,) + tuple(range(2, 2 + nd))).astype(grad.dtype) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb)


# --- pooling / upsampling ----------------------------------------------------------------------
def _pool_args(kernel, stride, padding, dilation, nd):
    kernel = list(kernel) * (nd if len(kernel) == 1 else 1)
    stride = list(stride) if stride else kernel
    stride = stride * (nd if len(stride) == 1 else 1)
    padding = list(padding) * (nd if len(padding) == 1 else 1)
    dilation = list(dilation) * (nd if len(dilation) == 1 else 1)
    return kernel, stride, padding, dilation


def _ceil_pad(size, k, s, p, d, ceil_mode):
    eff = d * (k - 1) + 1
    out = (size + 2 * p - eff) // s + 1
    if ceil_mode:
        out = -(-(size + 2 * p - eff) // s) + 1
        if (out - 1) * s >= size + p:
            out -= 1
    extra = max((out - 1) * s + eff - (size + 2 * p), 0)
    return out, (p, p + extra)


def _max_select(a, b):
    """The better of two (value, flat index) candidates, as torch's max-pool scan keeps it: the first
    element of the window (padding, index -1, excluded) unless a later one is greater or NaN: the maximum,
    ties to the lowest index (a window of -inf gives its first element, not the padding's -1), NaN over
    numbers, the last NaN among NaNs. An order, so a reduction may combine in any order."""
    va, ia = a
    vb, ib = b
    if jnp.issubdtype(va.dtype, jnp.inexact):
        na, nb = jnp.isnan(va), jnp.isnan(vb)
        better = jnp.where(na | nb, nb & (~na | (ib > ia)), (vb > va) | ((vb == va) & (ib < ia)))
    else:
        better = (vb > va) | ((vb == va) & (ib < ia))
    take_b = (ib >= 0) & ((ia < 0) | better)
    return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)


@register(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def adaptive_max_pool(x, output_size):
    """Windows [floor(i*in/out), ceil((i+1)*in/out)) per axis, one axis at a time (the order of
    ``_max_select`` is row-major, so reducing the last axes first keeps torch's choice among ties)."""
    nd = len(output_size)
    spatial = x.shape[-nd:]
    if 0 in output_size:  # an empty result, as on CPU
        shape = x.shape[:-nd] + tuple(output_size)
        return jnp.zeros(shape, x.dtype), jnp.zeros(shape, jnp.int64)
    vals = x
    inds = jnp.broadcast_to(jnp.arange(math.prod(spatial), dtype=jnp.int64).reshape(spatial), x.shape)
    for i in reversed(range(nd)):
        axis = x.ndim - nd + i
        insz, outsz = spatial[i], output_size[i]
        starts = [(o * insz) // outsz for o in range(outsz)]
        ends = [-(-((o + 1) * insz) // outsz) for o in range(outsz)]
        length = max(e - b for b, e in zip(starts, ends))
        best = None
        for j in range(length):
            idx = jnp.array([min(b + j, e - 1) for b, e in zip(starts, ends)])
            cand = (jnp.take(vals, idx, axis=axis), jnp.take(inds, idx, axis=axis))
            best = cand if best is None else _max_select(best, cand)
        vals, inds = best
    return vals, inds


@register(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def max_pool_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    nd = 2 if len(x.shape) in (3, 4) and len(kernel_size) <= 2 else 3
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation, nd)
    spatial = x.shape[2:]
    pads = [_ceil_pad(spatial[i], k[i], s[i], p[i], d[i], ceil_mode)[1] for i in range(nd)]
    # (an integer input's lowest value in its own dtype: a Python int became an int64 init value, which
    # reduce_window refused for int32/int16/int8/uint8 inputs)
    neg = jnp.array(-jnp.inf if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.iinfo(x.dtype).min, x.dtype)
    xp = jnp.pad(x, [(0, 0), (0, 0)] + pads, constant_values=neg)
    # indices into the unpadded flattened spatial plane
    idx = jnp.arange(math.prod(spatial), dtype=jnp.int64).reshape(spatial)
    idxp = jnp.pad(idx, pads, constant_values=-1)
    idxp = jnp.broadcast_to(idxp, xp.shape)
    window = (1, 1) + tuple(k)
    strides = (1, 1) + tuple(s)
    dil = (1, 1) + tuple(d)

    select = _max_select
    vals, inds = jax.lax.reduce_window((xp, idxp), (neg, jnp.array(-1, jnp.int64)), select, window, strides,
                                       "VALID", window_dilation=dil)
    if unbatched:
        vals, inds = vals[0], inds[0]
    return vals, inds


@register(aten.max_pool2d.default)
def max_pool2d(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@register(aten.avg_pool2d.default, aten.avg_pool3d.default, aten.avg_pool1d.default)
def avg_pool(x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    nd = len(kernel_size) if len(kernel_size) > 1 else x.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    k, s, p, _ = _pool_args(kernel_size, stride, padding, (1,), nd)
    spatial = x.shape[2:]
    pads = [_ceil_pad(spatial[i], k[i], s[i], p[i], 1, ceil_mode)[1] for i in range(nd)]
    y = upcast(x)
    xp = jnp.pad(y, [(0, 0), (0, 0)] + pads)
    window = (1, 1) + tuple(k)
    strides = (1, 1) + tuple(s)
    sums = jax.lax.reduce_window(xp, 0.0, jax.lax.add, window, strides, "VALID")
    if divisor_override:
        out = sums / divisor_override
    else:
        # count: padded-with-p positions count when count_include_pad, ceil-mode overhang never does
        ones = jnp.pad(jnp.ones(spatial, y.dtype), [(pp, pp) for pp in p], constant_values=1.0 if count_include_pad else 0.0)
        if not count_include_pad:
            ones = jnp.pad(jnp.ones(spatial, y.dtype), [(pp, pp) for pp in p])
        ones = jnp.pad(ones, [(0, pd[1] - pp) for pd, pp in zip(pads, p)])
        counts = jax.lax.reduce_window(ones, 0.0, jax.lax.add, tuple(k), tuple(s), "VALID")
        out = sums / counts
    out = out.astype(x.dtype)
    return out[0] if unbatched else out


@register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool(x, output_size):
    nd = len(output_size)
    spatial = x.shape[-nd:]
    if 0 in output_size:  # an empty result, as on CPU (each window's size divided by zero here)
        return jnp.zeros(x.shape[:-nd] + tuple(output_size), x.dtype)
    y = upcast(x)
    for i, (insz, outsz) in enumerate(zip(spatial, output_size)):
        axis = x.ndim - nd + i
        if insz % outsz == 0:
            shape = y.shape[:axis] + (outsz, insz // outsz) + y.shape[axis + 1:]
            y = jnp.mean(y.reshape(shape), axis=axis + 1)
        else:
            pieces = []
            for o in range(outsz):
                start = (o * insz) // outsz
                end = -(-((o + 1) * insz) // outsz)
                pieces.append(jnp.mean(jax.lax.slice_in_dim(y, start, end, axis=axis), axis=axis, keepdims=True))
            y = jnp.concatenate(pieces, axis=axis)
    return y.astype(x.dtype)


def _nearest_index(in_size, out_size, scale, exact):
    if scale is not None and scale > 0:
        ratio = 1.0 / scale
    else:
        ratio = in_size / out_size
    o = jnp.arange(out_size, dtype=jnp.float32)
    if exact:
        src = jnp.floor((o + 0.5) * ratio)
    else:
        src = jnp.floor(o * ratio)
    return jnp.clip(src.astype(jnp.int32), 0, in_size - 1)


def _upsample_nearest(x, output_size, scales, exact):
    nd = len(output_size)
    for i in range(nd):
        axis = x.ndim - nd + i
        in_size = x.shape[axis]
        out_size = output_size[i]
        scale = scales[i] if scales else None
        if not exact and out_size % in_size == 0 and (scale is None or scale == out_size / in_size):
            x = jnp.repeat(x, out_size // in_size, axis=axis)
        else:
            x = jnp.take(x, _nearest_index(in_size, out_size, scale, exact), axis=axis)
    return x


@register(aten.upsample_nearest2d.default, aten.upsample_nearest1d.default, aten.upsample_nearest3d.default)
def upsample_nearest(x, output_size, *scales):
    return _upsample_nearest(x, output_size, [s for s in scales], exact=False)


@register(aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact1d.default,
          aten._upsample_nearest_exact3d.default)
def upsample_nearest_exact(x, output_size, *scales):
    return _upsample_nearest(x, output_size, [s for s in scales], exact=True)


def _linear_weights(in_size, out_size, align_corners, scale, dtype=jnp.float32):
    """Source positions and weights in torch's accumulate type (float64 for float64 inputs: float32
    weights were off by 1e-6)."""
    o = jnp.arange(out_size, dtype=dtype)
    if align_corners:
        src = o * ((in_size - 1) / (out_size - 1)) if out_size > 1 else jnp.zeros_like(o)
    else:
        ratio = (1.0 / scale) if (scale is not None and scale > 0) else in_size / out_size
        src = jnp.maximum((o + 0.5) * ratio - 0.5, 0.0)
    i0 = jnp.clip(jnp.floor(src).astype(jnp.int32), 0, in_size - 1)
    i1 = jnp.minimum(i0 + 1, in_size - 1)
    w1 = src - i0
    return i0, i1, w1


@register(aten.upsample_bilinear2d.default, aten.upsample_linear1d.default, aten.upsample_trilinear3d.default)
def upsample_linear(x, output_size, align_corners, *scales):
    nd = len(output_size)
    if x.dtype == jnp.uint8 and nd == 2:
        return _uint8_resize(x, output_size, align_corners, scales, 2, False)
    wdt = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    y = upcast(x) if is_float(x) else x.astype(jnp.float32)
    for i in range(nd):
        axis = x.ndim - nd + i
        scale = scales[i] if scales else None
        i0, i1, w1 = _linear_weights(x.shape[axis], output_size[i], align_corners, scale, wdt)
        shape = [1] * y.ndim
        shape[axis] = output_size[i]
        w1 = w1.reshape(shape)
        y = jnp.take(y, i0, axis=axis) * (1 - w1) + jnp.take(y, i1, axis=axis) * w1
    if not is_float(x):  # uint8: rounded as torch's CPU kernel (a truncating cast was one lower in half the pixels)
        y = jnp.clip(jnp.round(y), jnp.iinfo(x.dtype).min, jnp.iinfo(x.dtype).max)
    return y.astype(x.dtype)


# --- backward of the linear maps above: the transpose (jax.vjp) of the same forward, in fp32 ----------
def _transpose_of(forward, grad, input_shape):
    """The gradient of a linear forward at ``input_shape`` for the output gradient ``grad``."""
    zeros = jnp.zeros(input_shape, upcast(grad).dtype)
    _, pull = jax.vjp(forward, zeros)
    return pull(upcast(grad))[0].astype(grad.dtype)


@register(aten.upsample_nearest1d_backward.default, aten.upsample_nearest2d_backward.default,
          aten.upsample_nearest3d_backward.default)
def upsample_nearest_backward(grad, output_size, input_size, *scales):
    return _transpose_of(lambda v: upsample_nearest(v, output_size, *scales), grad, tuple(input_size))


@register(aten._upsample_nearest_exact1d_backward.default, aten._upsample_nearest_exact2d_backward.default,
          aten._upsample_nearest_exact3d_backward.default)
def upsample_nearest_exact_backward(grad, output_size, input_size, *scales):
    return _transpose_of(lambda v: upsample_nearest_exact(v, output_size, *scales), grad, tuple(input_size))


@register(aten.upsample_linear1d_backward.default, aten.upsample_bilinear2d_backward.default,
          aten.upsample_trilinear3d_backward.default)
def upsample_linear_backward(grad, output_size, input_size, align_corners, *scales):
    return _transpose_of(lambda v: upsample_linear(v, output_size, align_corners, *scales), grad,
                         tuple(input_size))


@register(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _transpose_of(lambda v: avg_pool(v, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                            divisor_override), grad, x.shape)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    return _transpose_of(lambda v: adaptive_avg_pool(v, grad.shape[-2:]), grad, x.shape)


@register(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    return _transpose_of(lambda v: adaptive_avg_pool(v, grad.shape[-3:]), grad, x.shape)


@register(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _scatter_to_indices(grad, x, indices, 3)


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    return _scatter_to_indices(grad, x, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad, x, indices):
    return _scatter_to_indices(grad, x, indices, 3)


def _scatter_to_indices(grad, x, indices, spatial: int):
    """Each output's gradient goes to the input element its index names (flat within one plane)."""
    lead = x.shape[:-spatial]
    planes = int(np.prod(lead)) if lead else 1
    flat_grad = upcast(grad).reshape(planes, -1)
    flat_idx = indices.reshape(planes, -1)
    out = jnp.zeros((planes, int(np.prod(x.shape[-spatial:]))), flat_grad.dtype)
    out = out.at[jnp.arange(planes)[:, None], flat_idx].add(flat_grad)
    return out.reshape(x.shape).astype(grad.dtype)


# --- antialiased resize (interpolate(..., antialias=True)): a separable weight matrix per axis ---------
def _aa_filter(interp_size):
    if interp_size == 2:  # triangle
        return lambda t: np.maximum(1.0 - np.abs(t), 0.0)
    a = -0.5  # the bicubic filter of PIL and torch's antialias path (not the -0.75 of plain bicubic)

    def cubic(t):
        t = np.abs(t)
        return np.where(t < 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                        np.where(t < 2, (((t - 5) * t + 8) * t - 4) * a, 0.0))
    return cubic


def _aa_weights(in_size, out_size, align_corners, scale, interp_size, f=np.float32, antialias=True):
    """(out_size, in_size) weights in ``f`` (float64 for float64 inputs, else float32), as torch's CPU
    kernel computes them: each output's window centred at scale * (i + 0.5), the filter stretched by the scale when shrinking, normalised to sum 1.
    ``antialias=False``: the same kernel's weights for uint8 plain bilinear (no stretch; align_corners
    centres at scale * i + 0.5)."""
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        ratio = (1.0 / scale) if (scale is not None and scale > 0) else in_size / out_size
    ratio = f(ratio)
    stretch = antialias and ratio >= 1.0
    support = f((interp_size * 0.5) * ratio if stretch else interp_size * 0.5)
    invscale = f(1.0 / ratio if stretch else 1.0)
    filt = _aa_filter(interp_size)
    w = np.zeros((out_size, in_size), f)
    for i in range(out_size):
        center = ratio * f(i) + f(0.5) if align_corners and not antialias else ratio * f(i + 0.5)
        xmin = max(int(center - support + f(0.5)), 0)
        xsize = min(int(center + support + f(0.5)), in_size) - xmin
        j = np.arange(xsize, dtype=f)
        k = filt((j + xmin - center + f(0.5)) * invscale).astype(f)
        total = k.sum(dtype=f)
        w[i, xmin:xmin + xsize] = k / total if total != 0 else k
    return w


def _aa_resize(x, output_size, align_corners, scales, interp_size):
    y = upcast(x) if is_float(x) else x.astype(jnp.float32)
    for i, axis in enumerate((x.ndim - 2, x.ndim - 1)):
        scale = scales[i] if scales and i < len(scales) else None
        w = jnp.asarray(_aa_weights(x.shape[axis], output_size[i], align_corners, scale, interp_size,
                                    np.float64 if x.dtype == jnp.float64 else np.float32))
        y = jnp.moveaxis(jnp.tensordot(y, w, axes=[[axis], [1]], precision=jax.lax.Precision.HIGHEST), -1, axis)
    if not is_float(x):
        y = jnp.clip(jnp.round(y), jnp.iinfo(x.dtype).min, jnp.iinfo(x.dtype).max)
    return y.astype(x.dtype)


def _uint8_resize(x, output_size, align_corners, scales, interp_size, antialias):
    """uint8 images as torch's CPU kernel resizes them: separable, the width first, each pass with int16
    fixed-point weights, rounded half up and clamped to uint8 between passes (float weights and one final
    rounding were off by one in a fifth of the pixels, by 12 for bicubic antialias)."""
    y = x.astype(jnp.int32)
    for i in (1, 0):
        axis = x.ndim - 2 + i
        if x.shape[axis] == output_size[i]:
            continue
        scale = scales[i] if scales and i < len(scales) else None
        w = _aa_weights(x.shape[axis], output_size[i], align_corners, scale, interp_size, np.float64, antialias)
        bits = next((b for b in range(22) if int(0.5 + w.max() * (1 << (b + 1))) >= 1 << 15), 22)
        wi = jnp.asarray(np.trunc(w * (1 << bits) + np.where(w < 0, -0.5, 0.5)).astype(np.int32))
        y = jnp.moveaxis(jnp.tensordot(y, wi, axes=[[axis], [1]]), -1, axis)
        y = jnp.clip((y + (1 << (bits - 1))) >> bits, 0, 255)
    return y.astype(jnp.uint8)


@register(aten._upsample_bilinear2d_aa.default)
def upsample_bilinear2d_aa(x, output_size, align_corners, *scales):
    if x.dtype == jnp.uint8:
        return _uint8_resize(x, output_size, align_corners, scales, 2, True)
    return _aa_resize(x, output_size, align_corners, scales, 2)


@register(aten._upsample_bicubic2d_aa.default)
def upsample_bicubic2d_aa(x, output_size, align_corners, *scales):
    if x.dtype == jnp.uint8:
        return _uint8_resize(x, output_size, align_corners, scales, 4, True)
    return _aa_resize(x, output_size, align_corners, scales, 4)


@register(aten._upsample_bilinear2d_aa_backward.default)
def upsample_bilinear2d_aa_backward(grad, output_size, input_size, align_corners, *scales):
    return _transpose_of(lambda v: _aa_resize(v, output_size, align_corners, scales, 2), grad, tuple(input_size))


@register(aten._upsample_bicubic2d_aa_backward.default)
def upsample_bicubic2d_aa_backward(grad, output_size, input_size, align_corners, *scales):
    return _transpose_of(lambda v: _aa_resize(v, output_size, align_corners, scales, 4), grad, tuple(input_size))


# --- fractional max pooling: pseudo-random window starts from the given samples (one per plane, axis) ----
def _fractional_starts(sample, in_size, out_size, pool):
    """CPU's interval sequence: int((i + u) * alpha) - int(u * alpha) for i < out - 1, then in - pool."""
    if out_size == 1:
        return jnp.full(sample.shape + (1,), in_size - pool, jnp.int32)
    alpha = jnp.asarray((in_size - pool) / (out_size - 1), sample.dtype)
    i = jnp.arange(out_size - 1, dtype=sample.dtype)
    starts = (jnp.floor((i + sample[..., None]) * alpha) - jnp.floor(sample[..., None] * alpha)).astype(jnp.int32)
    return jnp.concatenate([starts, jnp.full(sample.shape + (1,), in_size - pool, jnp.int32)], axis=-1)


def _fractional_max_pool(x, kernel_size, output_size, samples):
    nd = len(kernel_size)
    batched = x.ndim == nd + 2
    xb = x if batched else x[None]
    samples = samples if batched else samples.reshape((1,) + samples.shape[-2:])
    n, c = xb.shape[:2]
    spatial = xb.shape[2:]
    flat = xb.reshape(n, c, -1)
    # the flat input position of every (output position, window offset) pair, per plane
    pos = jnp.zeros((n, c) + tuple(output_size) + tuple(kernel_size), jnp.int32)
    stride = 1
    for axis in reversed(range(nd)):
        # CPU's sample order: 2d (width, height); 3d (time, height, width)
        which = nd - 1 - axis if nd == 2 else axis
        starts = _fractional_starts(samples[..., which].astype(jnp.promote_types(x.dtype, jnp.float32)),
                                    spatial[axis], output_size[axis], kernel_size[axis])
        coord = starts[..., :, None] + jnp.arange(kernel_size[axis], dtype=jnp.int32)  # (n, c, out, k)
        shape = [n, c] + [1] * (2 * nd)
        shape[2 + axis], shape[2 + nd + axis] = output_size[axis], kernel_size[axis]
        pos = pos + coord.reshape(shape) * stride
        stride *= spatial[axis]
    windows = pos.reshape((n, c) + tuple(output_size) + (-1,))
    vals = jnp.take_along_axis(flat, windows.reshape(n, c, -1), axis=2).reshape(windows.shape)
    # CPU keeps the first maximum, and any NaN replaces it (so the last NaN wins)
    is_nan = jnp.isnan(vals) if is_float(vals) else jnp.zeros(vals.shape, bool)
    k = vals.shape[-1]
    last_nan = k - 1 - jnp.argmax(is_nan[..., ::-1], axis=-1)
    pick = jnp.where(is_nan.any(-1), last_nan, jnp.argmax(vals, axis=-1))
    out = jnp.take_along_axis(vals, pick[..., None], -1)[..., 0]
    index = jnp.take_along_axis(windows, pick[..., None], -1)[..., 0].astype(jnp.int64)
    return (out, index) if batched else (out[0], index[0])


@register(aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default)
def fractional_max_pool(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, kernel_size, output_size, random_samples)


@register(aten.fractional_max_pool2d_backward.default)
def fractional_max_pool2d_backward(grad, x, kernel_size, output_size, indices):
    return _scatter_to_indices(grad, x, indices, 2)


@register(aten.fractional_max_pool3d_backward.default)
def fractional_max_pool3d_backward(grad, x, kernel_size, output_size, indices):
    return _scatter_to_indices(grad, x, indices, 3)

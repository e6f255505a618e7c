"""Matmul family, attention, normalisations, convolution, pooling, upsampling, losses.

These map to single XLA operations where it matters for speed (dot_general, conv_general_dilated,
one fused attention expression) instead of torch's decompositions.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .registry import aten, register
from ._util import is_low_precision, matmul, precision_of, upcast


# --- matmul family ----------------------------------------------------------------------------
@register(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default,
          aten.vdot.default, matmul=True)
def mm(a, b, precision=None):
    return matmul(a, b, precision)


@register(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, matmul=True)
def addmm(bias, a, b, beta=1, alpha=1, precision=None):
    if is_low_precision(a) or is_low_precision(b):
        # bf16: product and bias add in fp32, rounded once (torch's CPU/CUDA epilogue)
        prod = jnp.matmul(a, b, precision=precision_of(precision), preferred_element_type=jnp.float32)
        bias = upcast(bias)
    else:
        prod = matmul(a, b, precision)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return prod + (bias if beta == 1 else bias * beta)


@register(aten.addbmm.default, matmul=True)
def addbmm(bias, a, b, beta=1, alpha=1, precision=None):
    low = is_low_precision(a)
    prod = jnp.sum(jnp.matmul(a, b, precision=precision_of(precision),
                              preferred_element_type=jnp.float32 if low else None), axis=0)
    return beta * upcast(bias) + alpha * prod if beta != 0 else alpha * prod


@register(aten._addmm_activation.default, matmul=True)
def addmm_activation(bias, a, b, beta=1, alpha=1, use_gelu=False, precision=None):
    y = addmm(bias, a, b, beta, alpha, precision)
    return jax.nn.gelu(y, approximate=True) if use_gelu else jnp.maximum(y, 0)


@register(aten.linear.default, matmul=True)
def linear(x, weight, bias=None, precision=None):
    y = matmul(x, weight.T, precision)
    return y if bias is None else y + bias


@register(aten.outer.default)
def outer(a, b):
    return jnp.outer(a, b)


@register(aten.einsum.default, matmul=True)
def einsum(equation, operands, path=None, precision=None):
    prefer = jnp.float32 if any(is_low_precision(o) for o in operands) else None
    out = jnp.einsum(equation, *operands, precision=precision_of(precision), preferred_element_type=prefer)
    return out.astype(jnp.result_type(*operands)) if prefer is not None else out


# --- attention ----------------------------------------------------------------------------------
def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
              precision=None):
    """softmax(q k^T * scale + mask) v, with fp32 softmax; GQA by repeating kv heads."""
    if dropout_p not in (0, 0.0):
        raise NotImplementedError("tpu: scaled_dot_product_attention with dropout_p > 0 is not supported")
    e = q.shape[-1]
    scale = 1.0 / math.sqrt(e) if scale is None else scale
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = jnp.repeat(k, rep, axis=-3)
        v = jnp.repeat(v, rep, axis=-3)
    prec = precision_of(precision)
    scores = jnp.einsum("...qd,...kd->...qk", q, k, precision=prec, preferred_element_type=jnp.float32)
    scores = scores * scale
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        causal = jnp.tril(jnp.ones((lq, lk), jnp.bool_))
        scores = jnp.where(causal, scores, -jnp.inf)
    if attn_mask is not None:
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            scores = scores + attn_mask.astype(jnp.float32)
    probs = jax.nn.softmax(scores, axis=-1)
    # rows that are fully masked give NaN in torch's math path as well; keep torch's behaviour
    out = jnp.einsum("...qk,...kd->...qd", probs.astype(v.dtype) if is_low_precision(v) else probs, v,
                     precision=prec, preferred_element_type=jnp.float32)
    return out.astype(q.dtype), scores, probs


@register(aten.scaled_dot_product_attention.default, matmul=True)
def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, precision=None):
    return attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, precision)[0]


@register(aten._scaled_dot_product_fused_attention_overrideable.default, matmul=True)
def sdpa_overrideable(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                      scale=None, precision=None):
    out, scores, _ = attention(q, k, v, attn_bias, dropout_p, is_causal, scale, precision=precision)
    lse = jax.nn.logsumexp(scores, axis=-1)
    empty = jnp.zeros((0,), jnp.int64)
    return (out, lse, empty, empty, 0, 0, jnp.zeros((), jnp.int64), jnp.zeros((), jnp.int64),
            jnp.zeros((0,), q.dtype))


@register(aten._scaled_dot_product_fused_attention_overrideable_backward.default, matmul=True)
def sdpa_overrideable_backward(grad_out, q, k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                               cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset,
                               scale=None, precision=None):
    def fwd(q_, k_, v_, b_):
        return attention(q_, k_, v_, b_, dropout_p, is_causal, scale, precision=precision)[0]

    bias = attn_bias if attn_bias is not None else jnp.zeros((), q.dtype)
    _, pull = jax.vjp(fwd, q, k, v, bias)
    gq, gk, gv, gb = pull(grad_out)
    if attn_bias is None:
        gb = None
    else:
        gb = jnp.broadcast_to(gb, attn_bias.shape) if gb.shape != attn_bias.shape else gb
    return gq, gk, gv, gb


@register(aten._scaled_dot_product_attention_math.default, matmul=True)
def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, scale=None,
              enable_gqa=False, precision=None):
    out, _, probs = attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, precision)
    return out, probs.astype(q.dtype)


# --- softmax --------------------------------------------------------------------------------------
@register(aten._softmax.default)
def softmax(x, dim, half_to_float=False):
    y = jax.nn.softmax(upcast(x), axis=dim if x.ndim else None)
    return y if half_to_float else y.astype(x.dtype)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float=False):
    y = jax.nn.log_softmax(upcast(x), axis=dim if x.ndim else None)
    return y if half_to_float else y.astype(x.dtype)


@register(aten._softmax_backward_data.default)
def softmax_backward(grad, out, dim, input_dtype):
    g, o = upcast(grad), upcast(out)
    return o * (g - jnp.sum(g * o, axis=dim, keepdims=True))


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(grad, out, dim, input_dtype):
    g, o = upcast(grad), upcast(out)
    return g - jnp.exp(o) * jnp.sum(g, axis=dim, keepdims=True)


@register(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    y = upcast(x)
    finite_row = jnp.any(y != -jnp.inf, axis=dim, keepdims=True)
    out = jnp.where(finite_row, jax.nn.softmax(y, axis=dim), 0.0)
    return out


# --- normalisation ------------------------------------------------------------------------------
@register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    y = upcast(x)
    mean = jnp.mean(y, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=axes, keepdims=True)
    rstd = jax.lax.rsqrt(var + eps)
    out = (y - mean) * rstd
    if weight is not None:
        out = out * upcast(weight)
    if bias is not None:
        out = out + upcast(bias)
    return out.astype(x.dtype), mean, rstd


@register(aten.layer_norm.default)
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return native_layer_norm(x, normalized_shape, weight, bias, eps)[0]


def _normalized_input_grad(g, xhat, rstd, axes):
    """d loss / d x of xhat = (x - mean(x)) * rstd(x), given g = d loss / d xhat (mean, rstd depend on x)."""
    return rstd * (g - jnp.mean(g, axis=axes, keepdims=True) - xhat * jnp.mean(g * xhat, axis=axes, keepdims=True))


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    # weight/bias gradients by vjp over the saved statistics; the input gradient by formula below
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))

    def fwd_saved(x_, w_, b_):
        y = (upcast(x_) - mean) * rstd
        if w_ is not None:
            y = y * upcast(w_)
        if b_ is not None:
            y = y + upcast(b_)
        return y.astype(x.dtype)

    primals = (x, weight, bias)
    _, pull = jax.vjp(fwd_saved, *primals)
    _, gw, gb = pull(grad)
    # d/dx must also flow through mean and rstd (vjp above treats the saved stats as constants):
    # gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad * weight, xhat = (x - mean) * rstd
    xhat = (upcast(x) - mean) * rstd
    g = upcast(grad) * (upcast(weight) if weight is not None else 1.0)
    gx = _normalized_input_grad(g, xhat, rstd, axes)
    return (gx if output_mask[0] else None,
            gw if output_mask[1] and weight is not None else None,
            gb if output_mask[2] and bias is not None else None)


@register(aten._fused_rms_norm.default)
def fused_rms_norm(x, normalized_shape, weight=None, eps=None):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    y = upcast(x)
    eps = jnp.finfo(y.dtype).eps if eps is None else eps
    rstd = jax.lax.rsqrt(jnp.mean(y * y, axis=axes, keepdims=True) + eps)
    out = y * rstd
    if weight is not None:
        out = out * upcast(weight)
    return out.astype(x.dtype), rstd


@register(aten.rms_norm.default)
def rms_norm(x, normalized_shape, weight=None, eps=None):
    return fused_rms_norm(x, normalized_shape, weight, eps)[0]


@register(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    y = upcast(x).reshape(N, group, -1)
    mean = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(var + eps)
    out = ((y - mean) * rstd).reshape(x.shape)
    bshape = (1, C) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * upcast(weight).reshape(bshape)
    if bias is not None:
        out = out + upcast(bias).reshape(bshape)
    return out.astype(x.dtype), mean.reshape(N, group), rstd.reshape(N, group)


@register(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, N, C, HxW, group, output_mask):
    def fwd_saved(x_, w_):
        y = upcast(x_).reshape(N, group, -1)
        out = ((y - mean[..., None]) * rstd[..., None]).reshape(x.shape)
        bshape = (1, C) + (1,) * (x.ndim - 2)
        if w_ is not None:
            out = out * upcast(w_).reshape(bshape)
        return out.astype(x.dtype)

    _, pull = jax.vjp(fwd_saved, x, weight)
    _, gw = pull(grad)
    # input gradient: mean and rstd depend on x too (treating them as constants is wrong)
    bshape = (1, C) + (1,) * (x.ndim - 2)
    g = upcast(grad) if weight is None else upcast(grad) * upcast(weight).reshape(bshape)
    g = g.reshape(N, group, -1)
    xhat = (upcast(x).reshape(N, group, -1) - mean[..., None]) * rstd[..., None]
    gx = _normalized_input_grad(g, xhat, rstd[..., None], -1)
    gx = gx.reshape(x.shape).astype(x.dtype)
    gb = jnp.sum(upcast(grad), axis=(0,) + tuple(range(2, x.ndim))) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] and weight is not None else None, gb)


@register(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    y = upcast(x)
    rstd = jax.lax.rsqrt(upcast(running_var) + eps)
    out = (y - upcast(running_mean).reshape(bshape)) * rstd.reshape(bshape)
    if weight is not None:
        out = out * upcast(weight).reshape(bshape)
    if bias is not None:
        out = out + upcast(bias).reshape(bshape)
    return out.astype(x.dtype), jnp.zeros((0,), x.dtype), jnp.zeros((0,), x.dtype)


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
    prec = precision_of(precision)
    if not transposed:
        out = jax.lax.conv_general_dilated(
            x, weight, window_strides=stride, padding=[(p, p) for p in padding],
            rhs_dilation=dilation, dimension_numbers=dn, feature_group_count=groups,
            precision=prec, preferred_element_type=prefer)
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
        out = jax.lax.conv_general_dilated(
            x, w, window_strides=[1] * nd, padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
            dimension_numbers=dn, feature_group_count=groups, precision=prec, preferred_element_type=prefer)
    if prefer is not None:
        out = out.astype(x.dtype)
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


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


@register(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def max_pool_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    nd = 2 if len(x.shape) in (3, 4) and len(kernel_size) <= 2 else 3
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation, nd)
    spatial = x.shape[2:]
    pads = [_ceil_pad(spatial[i], k[i], s[i], p[i], d[i], ceil_mode)[1] for i in range(nd)]
    neg = jnp.array(-jnp.inf, x.dtype) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.iinfo(x.dtype).min
    xp = jnp.pad(x, [(0, 0), (0, 0)] + pads, constant_values=neg)
    # indices into the unpadded flattened spatial plane
    idx = jnp.arange(math.prod(spatial), dtype=jnp.int64).reshape(spatial)
    idxp = jnp.pad(idx, pads, constant_values=-1)
    idxp = jnp.broadcast_to(idxp, xp.shape)
    window = (1, 1) + tuple(k)
    strides = (1, 1) + tuple(s)
    dil = (1, 1) + tuple(d)

    def select(a, b):
        va, ia = a
        vb, ib = b
        take_b = (vb > va) | jnp.isnan(vb) if jnp.issubdtype(va.dtype, jnp.inexact) else vb > va
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

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


def _linear_weights(in_size, out_size, align_corners, scale):
    o = jnp.arange(out_size, dtype=jnp.float32)
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
    y = upcast(x)
    for i in range(nd):
        axis = x.ndim - nd + i
        scale = scales[i] if scales else None
        i0, i1, w1 = _linear_weights(x.shape[axis], output_size[i], align_corners, scale)
        shape = [1] * y.ndim
        shape[axis] = output_size[i]
        w1 = w1.reshape(shape)
        y = jnp.take(y, i0, axis=axis) * (1 - w1) + jnp.take(y, i1, axis=axis) * w1
    return y.astype(x.dtype)


# --- embedding / losses ---------------------------------------------------------------------------
@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0)


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    flat_idx = indices.reshape(-1)
    g = grad.reshape(flat_idx.shape[0], -1)
    if padding_idx is not None and padding_idx >= 0:
        g = jnp.where((flat_idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), jnp.int32).at[flat_idx].add(1)
        g = g / counts[flat_idx][:, None]
    return jnp.zeros((num_weights, g.shape[1]), upcast(grad).dtype).at[flat_idx].add(upcast(g)).astype(grad.dtype)


def _reduce_loss(loss, reduction):
    if reduction == 0:
        return loss
    if reduction == 1:
        return jnp.mean(loss)
    return jnp.sum(loss)


@register(aten.mse_loss.default)
def mse_loss(x, target, reduction=1):
    return _reduce_loss(jnp.square(x - target), reduction)


@register(aten.mse_loss_backward.default)
def mse_loss_backward(grad, x, target, reduction):
    scale = 2.0 / x.size if reduction == 1 else 2.0
    return grad * scale * (x - target)


@register(aten.l1_loss.default)
def l1_loss(x, target, reduction=1):
    return _reduce_loss(jnp.abs(x - target), reduction)


@register(aten.smooth_l1_loss.default)
def smooth_l1_loss(x, target, reduction=1, beta=1.0):
    d = jnp.abs(x - target)
    loss = jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta) if beta > 0 else d
    return _reduce_loss(loss, reduction)


@register(aten.nll_loss_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    if x.ndim == 1 and reduction == 0:  # unbatched: a 0-d loss
        loss, total = nll_loss_forward(x[None], target[None], weight, reduction, ignore_index)
        return loss[0], total
    if x.ndim == 1:
        x = x[None]
        target = target[None]
    c = x.shape[1]
    w = jnp.ones((c,), x.dtype) if weight is None else weight
    valid = target != ignore_index
    t = jnp.where(valid, target, 0)
    picked = jnp.take_along_axis(x, t[:, None], axis=1)[:, 0]
    wt = jnp.where(valid, w[t], 0)
    loss = -picked * wt
    total = jnp.sum(wt)
    if reduction == 0:
        return loss, total
    if reduction == 1:
        return jnp.sum(loss) / total, total
    return jnp.sum(loss), total


@register(aten.nll_loss_backward.default)
def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    def fwd(x_):
        return nll_loss_forward(x_, target, weight, reduction, ignore_index)[0]

    _, pull = jax.vjp(fwd, x)
    return pull(grad)[0]


@register(aten.binary_cross_entropy_with_logits.default)
def bce_with_logits(x, target, weight=None, pos_weight=None, reduction=1):
    log_sig = jax.nn.log_sigmoid(x)
    log_one_minus = jax.nn.log_sigmoid(-x)
    if pos_weight is not None:
        loss = -(pos_weight * target * log_sig + (1 - target) * log_one_minus)
    else:
        loss = -(target * log_sig + (1 - target) * log_one_minus)
    if weight is not None:
        loss = loss * weight
    return _reduce_loss(loss, reduction)



@register(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm, norm_type):
    """Rows of weight that indices reach are rescaled to norm <= max_norm (torch adds 1e-7)."""
    w = upcast(weight)
    norms = jnp.sum(jnp.abs(w) ** norm_type, axis=-1) ** (1.0 / norm_type)
    hit = jnp.zeros((weight.shape[0],), jnp.bool_).at[indices.reshape(-1)].set(True)
    scale = jnp.where(hit & (norms > max_norm), max_norm / (norms + 1e-7), 1.0)
    return (w * scale[:, None]).astype(weight.dtype)

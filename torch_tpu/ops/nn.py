"""Matmul family, softmax, normalisations, embedding, losses (convolution and pooling: spatial.py;
attention: attention.py).

These map to single XLA operations where it matters for speed (dot_general, conv_general_dilated)
instead of torch's decompositions.

Why one module: 48 lowerings of a few lines each; the families split out already (spatial.py, attention.py) had
helpers of their own, these share the matmul and reduction helpers.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import elementary
from .activations import gelu_of
from .checks import index_in_range, require
from .registry import aten, register
from ._util import dot_general_for, is_low_precision, is_value, jdtype, matmul, precision_of, upcast


# --- matmul family ----------------------------------------------------------------------------
@register(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default, matmul=True)
def mm(a, b, precision=None):
    return matmul(a, b, precision)


@register(aten.vdot.default, matmul=True)
def vdot(a, b, precision=None):  # conjugates its first argument (complex vdot returned dot's value)
    return matmul(jnp.conj(a) if jnp.iscomplexobj(a) else a, b, precision)


def _int_scalars(a, alpha, beta):
    """torch's integer kernels convert alpha and beta to the integer type first (truncated: 0.6 -> 0)."""
    if not jnp.issubdtype(a.dtype, jnp.integer):
        return alpha, beta
    conv = lambda v: int(v) if type(v) in (int, float, bool) else jnp.asarray(v).astype(a.dtype)  # noqa: E731
    return conv(alpha), conv(beta)


@register(aten._scaled_mm.default)
def scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """torch's CPU emulation of fp8 GEMM: both operands scaled in float32, a float32 product, the bias
    added, the result divided by ``scale_result`` when the output is float8; cast (saturating) to the
    output dtype by ``conform``. Scales are singletons or row/column-wise ([M, 1] and [1, N])."""
    f32 = jnp.float32
    out = jnp.matmul(a.astype(f32) * scale_a.astype(f32), b.astype(f32) * scale_b.astype(f32),
                     precision=jax.lax.Precision.HIGHEST)
    if bias is not None:
        out = out + bias.astype(f32)
    fp8_out = jnp.dtype(jdtype(out_dtype) if out_dtype is not None else a.dtype) in (
        jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))
    if scale_result is not None and fp8_out:
        out = out * (1.0 / scale_result.astype(f32))
    return out


@register(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, matmul=True, static=("beta",))
def addmm(bias, a, b, beta=1, alpha=1, precision=None):
    alpha, beta = _int_scalars(a, alpha, beta)
    if is_low_precision(a) or is_low_precision(b):
        # bf16: product and bias add in fp32, rounded once (torch's CPU/CUDA epilogue)
        prod = jnp.matmul(a, b, precision=precision_of(precision, a, b), preferred_element_type=jnp.float32)
        bias = upcast(bias)
    else:
        prod = matmul(a, b, precision)
    if not is_value(alpha, 1):
        prod = prod * alpha
    if is_value(beta, 0):  # torch ignores the bias, NaN and inf included
        return prod
    return prod + (bias if is_value(beta, 1) else bias * beta)


@register(aten.addbmm.default, matmul=True, static=("beta",))
def addbmm(bias, a, b, beta=1, alpha=1, precision=None):
    alpha, beta = _int_scalars(a, alpha, beta)
    if is_low_precision(a):
        prod = jnp.sum(jnp.matmul(a, b, precision=precision_of(precision, a, b),
                                  preferred_element_type=jnp.float32), axis=0)
    else:
        prod = jnp.sum(matmul(a, b, precision), axis=0)
    return alpha * prod if is_value(beta, 0) else beta * upcast(bias) + alpha * prod


@register(aten._addmm_activation.default, matmul=True)
def addmm_activation(bias, a, b, beta=1, alpha=1, use_gelu=False, precision=None):
    y = addmm(bias, a, b, beta, alpha, precision)
    return gelu_of(y, True) if use_gelu else jnp.maximum(y, 0)


@register(aten.linear.default, matmul=True)
def linear(x, weight, bias=None, precision=None):
    """torch's addmm path (the one eager.whole_ops sends here): the bias added to the float32 product of half
    inputs and the sum rounded once."""
    if bias is None:
        return matmul(x, weight.T, precision)
    return addmm(bias, x, weight.T, precision=precision)


@register(aten.outer.default)
def outer(a, b):
    return jnp.outer(a, b)


@register(aten.einsum.default, matmul=True)
def einsum(equation, operands, path=None, precision=None):
    prefer = jnp.float32 if any(is_low_precision(o) for o in operands) else None
    out = jnp.einsum(equation, *operands, precision=precision_of(precision, *operands), preferred_element_type=prefer,
                     _dot_general=dot_general_for(*operands))
    return out.astype(jnp.result_type(*operands)) if prefer is not None else out


# --- softmax --------------------------------------------------------------------------------------
@register(aten._softmax.default)
def softmax(x, dim, half_to_float=False):
    y = jax.nn.softmax(upcast(x), axis=dim if x.ndim else None)
    return y if half_to_float else y.astype(x.dtype)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float=False):
    y = elementary.log_softmax(upcast(x), axis=dim if x.ndim else None)
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


def _rms_norm(x, normalized_shape, weight, eps):
    """(normalised x in x's dtype, rstd, the eps used: by default the compute dtype's epsilon)."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    y = upcast(x)
    eps = jnp.finfo(y.dtype).eps if eps is None else eps
    rstd = jax.lax.rsqrt(jnp.mean(y * y, axis=axes, keepdims=True) + eps)
    out = y * rstd
    if weight is not None:
        out = out * upcast(weight)
    return out.astype(x.dtype), rstd, eps


@register(aten._fused_rms_norm.default)
def fused_rms_norm(x, normalized_shape, weight=None, eps=None):
    return _rms_norm(x, normalized_shape, weight, eps)[:2]


@register(aten.rms_norm.default)
def rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch's composite as one op (eager.whole_ops): computed in float32 for half inputs, the weight
    multiplied before the cast back to the input's dtype, eps by default the compute dtype's epsilon.
    Noted for a rotary embedding after it, which can take the norm into its TPU kernel."""
    from . import position_embeddings

    out, _, eps = _rms_norm(x, normalized_shape, weight, eps)
    position_embeddings.note_rms_norm(out, x, normalized_shape, weight, eps)
    return out


@register(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    y = upcast(x).reshape(N, group, (C // group) * HxW)  # explicit: N may be 0
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
        y = upcast(x_).reshape(N, group, (C // group) * HxW)
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
    g = g.reshape(N, group, (C // group) * HxW)
    xhat = (upcast(x).reshape(N, group, (C // group) * HxW) - mean[..., None]) * rstd[..., None]
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


# --- embedding / losses ---------------------------------------------------------------------------
@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    require(index_in_range(indices, weight.shape[0], False), "index out of range in self")
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


@register(aten.multilabel_margin_loss_forward.default)
def multilabel_margin_loss_forward(x, target, reduction):
    """torch's kernel (its Python decomposition is wrong): a sample's targets are the classes listed before
    its first -1; the loss sums max(0, 1 - (x[target] - x[other])) over targets and non-target classes,
    over the number of classes. A 0-d input is one class (its target 0-d too)."""
    if x.ndim == 0:
        loss, is_target = multilabel_margin_loss_forward(x.reshape(1), target.reshape(1), reduction)
        return loss.reshape(()), is_target.reshape(target.shape)
    c = x.shape[-1]
    require(index_in_range(target, c, True), f"multilabel_margin_loss: target out of range (classes: {c})")
    listed = jnp.cumprod(target != -1, axis=-1).astype(bool)  # before the first -1
    t = jnp.clip(target, 0, c - 1)
    classes = jnp.arange(c)
    is_target = jnp.any(listed[..., :, None] & (t[..., :, None] == classes), axis=-2)
    y = upcast(x)
    xt = jnp.take_along_axis(y, t, axis=-1)  # [..., k]
    margin = jnp.maximum(0.0, 1.0 - (xt[..., :, None] - y[..., None, :]))  # [..., k, class]
    margin = jnp.where(listed[..., :, None] & ~is_target[..., None, :], margin, 0.0)
    loss = (jnp.sum(margin, axis=(-2, -1)) / c).astype(x.dtype)
    return _reduce_loss(loss, reduction), is_target.astype(x.dtype)


@register(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    _, pull = jax.vjp(lambda v: multilabel_margin_loss_forward(v, target, reduction)[0], upcast(x))
    return pull(upcast(grad).reshape(jnp.shape(grad)))[0].astype(x.dtype)


@register(aten.multi_margin_loss.default)
def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1):
    """torch's kernel: a sample's loss sums ``w[y] * max(0, margin - x[y] + x[j]) ** p`` over the classes
    j != y, over the number of classes (a margin of exactly 0 contributes no gradient, as on CPU). A 0-d
    input is one class."""
    if x.ndim == 0:
        x = x.reshape(1)
    c = x.shape[-1]
    require(index_in_range(target, c, False), f"multi_margin_loss: target out of range (classes: {c})")
    y = upcast(x).reshape(-1, c)
    t = jnp.clip(target.reshape(-1), 0, c - 1)
    z = margin - jnp.take_along_axis(y, t[:, None], axis=1) + y
    z = jnp.where((z > 0) & (jnp.arange(c) != t[:, None]), z, 0.0)
    z = z * z if p == 2 else z
    if weight is not None:
        z = z * upcast(weight)[t][:, None]
    # (an unbatched input's unreduced loss has the target's shape: () or (1,))
    loss = (jnp.sum(z, axis=1) / c).reshape(target.shape if x.ndim == 1 else x.shape[:-1]).astype(x.dtype)
    return _reduce_loss(loss, reduction)


@register(aten.multi_margin_loss_backward.default)
def multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=1):
    # (the cotangent takes the loss's shape: an unbatched loss's is the target's)
    loss, pull = jax.vjp(lambda v: multi_margin_loss(v, target, p, margin, weight, reduction), upcast(x))
    return pull(upcast(grad).reshape(jnp.shape(loss)).astype(loss.dtype))[0].astype(x.dtype)


@register(aten.binary_cross_entropy.default)
def binary_cross_entropy(x, target, weight=None, reduction=1):
    require((x >= 0) & (x <= 1), "binary_cross_entropy: all elements of input should be between 0 and 1")
    require((target >= 0) & (target <= 1), "binary_cross_entropy: all elements of target should be between 0 and 1")
    p, y = upcast(x), upcast(target)
    loss = -(y * jnp.maximum(elementary.log(p), -100.0) + (1 - y) * jnp.maximum(elementary.log1p(-p), -100.0))
    if weight is not None:
        loss = loss * upcast(weight)
    return _reduce_loss(loss, reduction).astype(x.dtype)


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
    require(~valid | index_in_range(target, c, False), f"Target out of bounds (classes: {c})")
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
    log_sig = elementary.log_sigmoid(x)
    log_one_minus = elementary.log_sigmoid(-x)
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


def _weight_norm(v, g, dim):
    """w = v * g / ||v|| (the norm over every dim but ``dim``; over all of v for dim = -1)."""
    axes = tuple(a for a in range(v.ndim) if dim == -1 or a != dim % v.ndim)
    norm = jnp.sqrt(jnp.sum(jnp.square(v), axis=axes, keepdims=True))
    return v * (g / norm)


@register(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    # autograd of the forward formula, in float32 for half types (as torch's kernel accumulates)
    _, pull = jax.vjp(lambda v, g: _weight_norm(v, g, dim), upcast(saved_v), upcast(saved_g))
    grad_v, grad_g = pull(upcast(grad_w))
    return grad_v.astype(saved_v.dtype), grad_g.astype(saved_g.dtype)


@register(aten._embedding_bag_forward_only.default, aten._embedding_bag.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of rows: mode 0 sum (times per_sample_weights), 1 mean, 2 max; an empty bag and the rows at
    ``padding_idx`` count nothing (an empty bag gives zeros). Returns (output, offset2bag, bag_size,
    max_indices) as CPU's kernel: bag_size is 0 in sum mode, max_indices the row chosen in max mode."""
    n, dim = indices.shape[0], weight.shape[1]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    require(index_in_range(indices, weight.shape[0], False), "embedding_bag: index out of range in self")
    pos = jnp.arange(n)
    bag_of = (jnp.searchsorted(offsets[:bags], pos, side="right") - 1).astype(jnp.int64)
    end = offsets[bags] if include_last_offset else n
    valid = (pos < end) & (bag_of >= 0)
    if padding_idx is not None and padding_idx >= 0:
        valid = valid & (indices != padding_idx)
    seg = jnp.where(valid, bag_of, bags)  # invalid rows go to an extra segment, dropped below
    rows = upcast(weight)[jnp.clip(indices, 0, weight.shape[0] - 1)]
    if per_sample_weights is not None:
        rows = rows * upcast(per_sample_weights)[:, None]
    count = jax.ops.segment_sum(valid.astype(jnp.int64), seg, bags + 1)[:bags]
    max_indices = jnp.zeros((0,), jnp.int64)
    if mode == 2:
        best = jax.ops.segment_max(rows, seg, bags + 1)[:bags]
        hit = valid[:, None] & (rows == best[jnp.clip(seg, 0, bags - 1)])
        first = jax.ops.segment_min(jnp.where(hit, pos[:, None], n), seg, bags + 1)[:bags]
        max_indices = jnp.where(count[:, None] > 0, indices[jnp.clip(first, 0, n - 1)], 0).astype(jnp.int64)
        out = jnp.where(count[:, None] > 0, best, 0.0)
    else:
        out = jax.ops.segment_sum(rows, seg, bags + 1)[:bags]
        if mode == 1:
            out = out / jnp.maximum(count, 1)[:, None].astype(out.dtype)
    bag_size = count if mode != 0 else jnp.zeros((bags,), jnp.int64)
    bag_size = jnp.pad(bag_size, (0, offsets.shape[0] - bags))  # the meta kernel's length
    return out.astype(weight.dtype).reshape(bags, dim), bag_of, bag_size, max_indices


@register(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                           padding_idx=-1):
    """The dense weight gradient of ``embedding_bag`` above (its offset2bag: each index's bag; bag_size:
    the bag's row count in mean and max mode; maximum_indices: the row chosen in max mode)."""
    dim = grad.shape[1]
    g = upcast(grad)
    out = jnp.zeros((num_weights, dim), g.dtype)
    if mode == 2:
        hit = (bag_size[: grad.shape[0], None] > 0)
        cols = jnp.broadcast_to(jnp.arange(dim), maximum_indices.shape)
        return out.at[maximum_indices, cols].add(jnp.where(hit, g, 0.0)).astype(grad.dtype)
    valid = indices != padding_idx if padding_idx is not None and padding_idx >= 0 else jnp.ones(indices.shape, bool)
    rows = g[offset2bag]
    if mode == 1:
        rows = rows / jnp.maximum(bag_size[offset2bag], 1)[:, None].astype(g.dtype)
    if per_sample_weights is not None:
        rows = rows * upcast(per_sample_weights)[:, None]
    if scale_grad_by_freq:
        freq = jnp.zeros((num_weights,), g.dtype).at[indices].add(valid.astype(g.dtype))
        rows = rows / jnp.maximum(freq[indices], 1)[:, None]
    return out.at[indices].add(jnp.where(valid[:, None], rows, 0.0)).astype(grad.dtype)



@register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """per_sample_weights' gradient (sum mode only, as on CPU): each index's bag gradient dotted with its
    row; zero at ``padding_idx``."""
    if mode != 0:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    dots = jnp.sum(upcast(grad)[offset2bag] * upcast(weight)[jnp.clip(indices, 0, weight.shape[0] - 1)], axis=1)
    if padding_idx is not None and padding_idx >= 0:
        dots = jnp.where(indices != padding_idx, dots, 0.0)
    return dots.astype(grad.dtype)

def _norm_last(d, p):
    if p == 0:
        return jnp.sum(d != 0, axis=-1).astype(d.dtype)
    if p == float("inf"):
        return jnp.max(d, axis=-1, initial=0.0)
    if p == 1:
        return jnp.sum(d, axis=-1)
    if p == 2:  # a zero distance has a zero gradient (CPU's backward), not sqrt's NaN
        sq = jnp.sum(d * d, axis=-1)
        return jnp.where(sq > 0, jnp.sqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)
    s = jnp.sum(jnp.where(d > 0, jnp.where(d > 0, d, 1.0) ** p, 0.0), axis=-1)  # 0 ** p' is 0 on CPU (p < 1)
    return jnp.where(s > 0, jnp.where(s > 0, s, 1.0) ** (1.0 / p), 0.0)


def _pdist(x, p):
    n = x.shape[0]
    i, j = np.triu_indices(n, 1)  # row-major pairs i < j, torch's order
    return _norm_last(jnp.abs(upcast(x)[i] - upcast(x)[j]), p).astype(x.dtype)


@register(aten._pdist_forward.default)
def pdist_forward(x, p=2.0):
    """F.pdist: the p-norm distance of every pair of rows i < j (row-major)."""
    return _pdist(x, p)


@register(aten._pdist_backward.default)
def pdist_backward(grad, x, p, pdist):
    _, pull = jax.vjp(lambda v: _pdist(v, p), x)
    return pull(grad)[0]


def _cdist(x1, x2, p):
    d = jnp.abs(upcast(x1)[..., :, None, :] - upcast(x2)[..., None, :, :])
    return _norm_last(d, p).astype(x1.dtype)


@register(aten._cdist_forward.default)
def cdist_forward(x1, x2, p=2.0, compute_mode=None):
    """torch.cdist: the p-norm distance of every row of x1 to every row of x2 (batched)."""
    return _cdist(x1, x2, p)


@register(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    _, pull = jax.vjp(lambda v: _cdist(v, x2, p), x1)
    return pull(grad)[0]


def _rrelu(x, lower, upper, training, rng_key):
    if not training:  # CPU: leaky_relu with the mean slope
        return jnp.where(x > 0, x, x * ((lower + upper) / 2)).astype(x.dtype), None
    slopes = jax.random.uniform(rng_key, x.shape, jnp.float32, lower, upper).astype(x.dtype)
    noise = jnp.where(x <= 0, slopes, jnp.ones_like(x))
    return x * noise, noise


@register(aten.rrelu_with_noise.default, random=True)
def rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, rng_key):
    out, new_noise = _rrelu(x, lower, upper, training, rng_key)
    return out, (noise if new_noise is None else new_noise.astype(noise.dtype),)


@register(aten.rrelu_with_noise_functional.default, random=True)
def rrelu_with_noise_functional(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, rng_key):
    out, new_noise = _rrelu(x, lower, upper, training, rng_key)
    return out, (noise if new_noise is None else new_noise.astype(noise.dtype))


@register(aten.rrelu_with_noise_.default, random=True)
def rrelu_with_noise_(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, rng_key):
    out, new_noise = _rrelu(x, lower, upper, training, rng_key)  # both written: self, then noise
    return out, (noise if new_noise is None else new_noise.astype(noise.dtype))

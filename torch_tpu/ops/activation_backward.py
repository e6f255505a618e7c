"""Backwards of the common activations (autograd on the tpu): closed forms where they are short, JAX's
VJP of the forward lowering otherwise (the same formula the forward computes)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ._util import upcast
from .activations import gelu, mish, silu, softplus
from .registry import aten, register


def _pointwise_vjp(f, grad, x):
    """The VJP of the pointwise ``f`` at ``x``, with ``grad`` and ``x`` broadcast against each other
    first, as torch's kernels broadcast them (functorch's batching rules pass a batched gradient with an
    unbatched input: ``jacfwd`` of ``softplus`` gave grad [16, 4, 4], x [4, 4])."""
    shape = jnp.broadcast_shapes(jnp.shape(grad), jnp.shape(x))
    dtype = jnp.result_type(grad, x)
    _, pull = jax.vjp(f, jnp.broadcast_to(x, shape).astype(dtype))
    return pull(jnp.broadcast_to(grad, shape).astype(dtype))[0]


@register(aten.sigmoid_backward.default)
def sigmoid_backward(grad, out):
    return grad * out * (1 - out)


@register(aten.tanh_backward.default)
def tanh_backward(grad, out):
    return grad * (1 - out * out)


@register(aten.gelu_backward.default)
def gelu_backward(grad, x, approximate="none"):
    return _pointwise_vjp(lambda v: gelu(v, approximate), grad, x)


@register(aten.silu_backward.default)
def silu_backward(grad, x):
    return _pointwise_vjp(silu, grad, x)


@register(aten.softplus_backward.default)
def softplus_backward(grad, x, beta, threshold):
    return _pointwise_vjp(lambda v: softplus(v, beta, threshold), grad, x)


@register(aten.elu_backward.default)
def elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    x = self_or_result
    if is_result:
        return jnp.where(x > 0, grad * scale, grad * (x + alpha * scale) * input_scale)
    return jnp.where(x > 0, grad * scale, grad * alpha * scale * input_scale * jnp.exp(x * input_scale))


@register(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad, x, negative_slope, self_is_result):
    return jnp.where(x > 0, grad, grad * negative_slope)


@register(aten.hardtanh_backward.default)
def hardtanh_backward(grad, x, min_val, max_val):
    return jnp.where((x > min_val) & (x < max_val), grad, 0)


@register(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def shrink_backward(grad, x, lambd):  # both CPU kernels: 0 where -lambd <= x <= lambd (had no lowering)
    return jnp.where((x >= -lambd) & (x <= lambd), jnp.zeros((), grad.dtype), grad)


@register(aten.mish_backward.default)
def mish_backward(grad, x):
    return _pointwise_vjp(mish, grad, x)


@register(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(grad, x, buffer):
    return grad * jax.nn.sigmoid(-upcast(x)).astype(grad.dtype)

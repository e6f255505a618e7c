"""Activation functions (pointwise; their backward formulas are in activation_backward.py)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .registry import aten, register
from ._util import upcast
from . import elementary


@register(aten.relu.default)
def relu(x):
    return jnp.maximum(x, jnp.zeros((), x.dtype))


def gelu_of(y, tanh_approximation: bool):
    """torch's gelu of a float array: erf form, or its tanh approximation (with the precise tanh). For a
    bfloat16 result on a TPU, x * sigmoid(2u), equal to 0.5 x (1 + tanh(u)): XLA:TPU's tanh is ~1e-4 off, and
    1 + tanh(u) cancels in the negative tail (4.8e-5 off CPU torch there, measured on the chip)."""
    if tanh_approximation and elementary.precise(y):
        return 0.5 * y * (1 + elementary.tanh(_gelu_inner(y)))
    if tanh_approximation and elementary.coarse_for_bfloat16(y):
        return y * jax.nn.sigmoid(2 * _gelu_inner(y))
    return jax.nn.gelu(y, approximate=tanh_approximation)


def _gelu_inner(y):
    """u = sqrt(2 / pi) (y + 0.044715 y^3), the tanh approximation's argument."""
    return jnp.asarray(0.7978845608028654, y.dtype) * (y + jnp.asarray(0.044715, y.dtype) * y * y * y)


@register(aten.gelu.default)
def gelu(x, approximate="none"):
    y = upcast(x)
    return gelu_of(y, approximate == "tanh").astype(x.dtype)


@register(aten.silu.default)
def silu(x):
    y = upcast(x)
    return (y * jax.nn.sigmoid(y)).astype(x.dtype)


@register(aten.mish.default)
def mish(x):
    y = upcast(x)
    return (y * elementary.tanh(elementary.softplus(y))).astype(x.dtype)


@register(aten.softplus.default)
def softplus(x, beta=1, threshold=20):
    y = upcast(x)
    bx = y * beta
    return jnp.where(bx > threshold, y, elementary.log1p(jnp.exp(bx)) / beta).astype(x.dtype)


@register(aten.elu.default)
def elu(x, alpha=1, scale=1, input_scale=1):
    y = upcast(x)
    return jnp.where(y > 0, y * scale, alpha * scale * jnp.expm1(y * input_scale)).astype(x.dtype)


@register(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    # half types multiply in float32, as CPU's opmath (a slope past half's range times 0 is 0, not nan)
    return jnp.where(x > 0, x, (upcast(x) * negative_slope).astype(x.dtype))


@register(aten.hardtanh.default)
def hardtanh(x, min_val=-1, max_val=1):
    return jnp.clip(x, min_val, max_val)


@register(aten.hardsigmoid.default)
def hardsigmoid(x):
    return jnp.clip(x / 6 + 0.5, 0, 1)


@register(aten.hardswish.default)
def hardswish(x):
    return x * jnp.clip(x / 6 + 0.5, 0, 1)


@register(aten.glu.default)
def glu(x, dim=-1):
    a, b = jnp.split(x, 2, axis=dim)
    return a * jax.nn.sigmoid(b)


@register(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x):
    y = upcast(x)
    # the buffer is only used by torch's CPU backward; its shape follows the meta kernel
    return elementary.log_sigmoid(y).astype(x.dtype), jnp.zeros_like(x)


@register(aten.prelu.default, aten._prelu_kernel.default)
def prelu(x, weight):
    w = weight.reshape((-1,) + (1,) * max(x.ndim - 2, 0)) if x.ndim >= 2 and weight.size > 1 else weight
    return jnp.where(x > 0, x, w * x)

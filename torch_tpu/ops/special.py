"""Special functions (polygamma, Bessel i0e/i1/i1e), the backward of replication padding, nan_to_num and
threshold (NaN-exact forms).

torch's autograd formulas reach these: digamma' is polygamma(1, x), i0' is i1 (through torch's
decomposition into ``prims.bessel_i1``), and replication padding's backward sums the gradient of every
repeated edge element back into it (the transpose of the forward ``jnp.pad(mode="edge")``, by vjp).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .registry import aten, prims, register
from .shape import _pad_mode
from ._util import is_float, to_float, upcast

_PRIMS = torch.ops.prims


def _float(fn):
    def lower(x):
        return fn(upcast(to_float(jnp.asarray(x))))

    return lower


@register(aten.polygamma.default)
def polygamma(n, x):
    x = upcast(to_float(jnp.asarray(x)))
    if n == 0:  # digamma(±0) is ∓inf on CPU (JAX: NaN)
        return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), jax.scipy.special.digamma(x))
    direct = jax.scipy.special.polygamma(n, x)  # JAX's series holds for x > 0 only
    # x < 0 by reflection: psi_n(x) = (-1)^n psi_n(1 - x) - d^n/dx^n [pi cot(pi x)]
    d = lambda t: jnp.pi * jnp.cos(jnp.pi * t) / jnp.sin(jnp.pi * t)  # noqa: E731
    for _ in range(n):
        d = jax.grad(d)
    flat = x.reshape(-1)
    cot_n = jax.vmap(d)(flat).reshape(x.shape) if flat.size else jnp.zeros_like(x)
    reflected = (-1.0) ** n * jax.scipy.special.polygamma(n, 1 - x) - cot_n
    return jnp.where(x < 0, reflected, direct)


for _ops, _fn in (((aten.special_i0e, _PRIMS.bessel_i0e), jax.scipy.special.i0e),
                  ((aten.special_i1, _PRIMS.bessel_i1), jax.scipy.special.i1),
                  ((aten.special_i1e, _PRIMS.bessel_i1e), jax.scipy.special.i1e)):
    register(*(op.default for op in _ops))(_float(_fn))

_EDGE = _pad_mode("edge")


@register(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
          aten.replication_pad3d_backward.default)
def replication_pad_backward(grad, x, padding):
    _, vjp = jax.vjp(lambda v: _EDGE(v, padding), jnp.zeros(x.shape, grad.dtype))
    return vjp(grad)[0]


@register(aten.nan_to_num.default)
def nan_to_num(x, nan=None, posinf=None, neginf=None):
    if not is_float(x):
        return x
    info = jnp.finfo(x.dtype)  # each replacement sees the input only (nan=inf stays inf, unlike jnp.nan_to_num)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    y = jnp.where(x == jnp.inf, jnp.asarray(big, x.dtype), jnp.where(x == -jnp.inf, jnp.asarray(small, x.dtype), x))
    return jnp.where(jnp.isnan(x), jnp.asarray(0.0 if nan is None else nan, x.dtype), y)


@register(aten.threshold.default)
def threshold(x, threshold, value):
    return jnp.where(x <= threshold, value, x)  # torch's test: NaN is kept


@register(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    return jnp.where(x <= threshold, jnp.zeros((), grad.dtype), grad)


@register(prims.gcd.default, aten.gcd.default)
def gcd(x, y):
    return jnp.gcd(x, y)


@register(aten.logaddexp.default)
def logaddexp(x, y):  # a lowering (not torch's decomposition) so that integer inputs are refused as on CPU
    return jnp.logaddexp(upcast(x), upcast(y))


@register(aten.logaddexp2.default)
def logaddexp2(x, y):
    return jnp.logaddexp2(upcast(x), upcast(y))


@register(aten.logit.default)
def logit(x, eps=None):
    x = to_float(x)
    if eps is not None:  # CPU's x < lo ? lo : (x > hi ? hi : x): for eps > 0.5 not a clip
        x = jnp.where(x < eps, jnp.asarray(eps, x.dtype), jnp.where(x > 1 - eps, jnp.asarray(1 - eps, x.dtype), x))
    return jnp.log(x / (1 - x))

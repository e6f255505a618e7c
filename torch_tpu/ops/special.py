"""Special functions (polygamma, Bessel i0e/i1/i1e), the backward of replication padding, nan_to_num and
threshold (NaN-exact forms).

torch's autograd formulas reach these: digamma' is polygamma(1, x), i0' is i1 (through torch's
decomposition into ``prims.bessel_i1``), and replication padding's backward sums the gradient of every
repeated edge element back into it (the transpose of the forward ``jnp.pad(mode="edge")``, by vjp).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from ..runtime import platform
from . import elementary, precise_f32
from .registry import aten, prims, register
from .shape import _pad_mode
from ._util import complex_logaddexp, copysign, is_float, to_float, upcast

_PRIMS = torch.ops.prims


def _float(fn):
    def lower(x):
        return fn(upcast(to_float(jnp.asarray(x))))

    return lower


@register(aten.polygamma.default)
def polygamma(n, x):
    x = upcast(to_float(jnp.asarray(x)))
    if n == 0:  # digamma(±0) is ∓inf on CPU (JAX: NaN)
        return jnp.where(x == 0, copysign(jnp.inf, -x), jax.scipy.special.digamma(x))
    direct = jax.scipy.special.polygamma(n, x)  # JAX's series holds for x > 0 only
    # x < 0 by reflection: psi_n(x) = (-1)^n psi_n(1 - x) - d^n/dx^n [pi cot(pi x)]
    d = lambda t: jnp.pi * jnp.cos(jnp.pi * t) / jnp.sin(jnp.pi * t)  # noqa: E731
    for _ in range(n):
        d = jax.grad(d)
    flat = x.reshape(-1)
    cot_n = jax.vmap(d)(flat).reshape(x.shape) if flat.size else jnp.zeros_like(x)
    reflected = (-1.0) ** n * jax.scipy.special.polygamma(n, 1 - x) - cot_n
    out = jnp.where(x < 0, reflected, direct)
    if n >= 2:  # CPU: (-1)^(n+1) n! zeta(n+1, x), and zeta is +inf at the poles x = 0, -1, -2, ...
        pole = (x <= 0) & (x == jnp.floor(x))
        out = jnp.where(pole, jnp.asarray((-1.0) ** (n + 1) * jnp.inf, out.dtype), out)
    return out


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
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(y):
        return complex_logaddexp(x, y)
    return elementary.logaddexp(upcast(x), upcast(y))



@register(aten.logaddexp2.default)
def logaddexp2(x, y):
    return elementary.logaddexp2(upcast(x), upcast(y))


@register(aten.logit.default)
def logit(x, eps=None):
    x = to_float(x)
    if eps is not None:  # CPU's x < lo ? lo : (x > hi ? hi : x): for eps > 0.5 not a clip
        x = jnp.where(x < eps, jnp.asarray(eps, x.dtype), jnp.where(x > 1 - eps, jnp.asarray(1 - eps, x.dtype), x))
    return elementary.log(x / (1 - x))


def _in_float64_for_float32(fn):
    """JAX's float32 forms lose range torch keeps (erfcx(9.2) is 0, ndtri of a subnormal is -inf): compute
    float32 in float64 and round once."""
    def lower(x):
        x = upcast(to_float(jnp.asarray(x)))
        return fn(x.astype(jnp.float64) if x.dtype == jnp.float32 else x).astype(x.dtype)

    return lower


register(aten.special_ndtri.default, _PRIMS.ndtri.default)(_in_float64_for_float32(jax.scipy.special.ndtri))
register(aten.special_erfcx.default, _PRIMS.erfcx.default)(_in_float64_for_float32(jax.scipy.special.erfcx))


@register(aten.special_log_ndtr.default)
def log_ndtr(x):
    """log of the normal CDF in JAX's three float32 segments (log1p(-ndtr(-x)) above 5, log(ndtr(x)) down to
    -10, the asymptotic series below), with the op table's log and log1p: XLA:TPU's float32 log made it
    9.6e-5 off at 0.67 on the chip. Float64 is JAX's own."""
    x = upcast(to_float(jnp.asarray(x)))
    if x.dtype != jnp.float32:
        return jax.scipy.special.log_ndtr(x)
    ndtr = jax.scipy.special.ndtr
    lower, upper = jnp.float32(-10), jnp.float32(5)
    above = elementary.log1p(-ndtr(-jnp.maximum(x, upper)))
    middle = elementary.log(ndtr(jnp.clip(x, lower, upper)))
    far = jnp.minimum(x, lower)
    square = far * far
    # 1 - 1/x^2 + 3/x^4 - 15/x^6: the series' first terms, as JAX takes them
    series = 1 - 1 / square + 3 / (square * square) - 15 / (square * square * square)
    below = (-0.5 * square - elementary.log(-far) - jnp.float32(0.5 * math.log(2 * math.pi))
             + elementary.log(series))
    return jnp.where(x > upper, above, jnp.where(x > lower, middle, below))


register(aten.special_ndtr.default)(_float(jax.scipy.special.ndtr))
register(aten.special_modified_bessel_i0.default)(_float(jax.scipy.special.i0))
register(aten.special_modified_bessel_i1.default)(_float(jax.scipy.special.i1))


@register(aten.special_spherical_bessel_j0.default, _PRIMS.spherical_bessel_j0.default)
def spherical_bessel_j0(x):
    x = upcast(to_float(jnp.asarray(x)))
    small = jnp.abs(x) < 0.5  # the series: sin(x)/x loses digits near 0
    x2 = x * x
    series = 1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110 * (1 - x2 / 156)))))
    safe = jnp.where(small, jnp.ones_like(x), x)
    return jnp.where(jnp.isinf(x), jnp.zeros_like(x), jnp.where(small, series, jnp.sin(safe) / safe))


def _two_float(x, y):
    x, y = upcast(to_float(jnp.asarray(x))), upcast(to_float(jnp.asarray(y)))
    dt = jnp.result_type(x, y)
    return x.astype(dt), y.astype(dt)


@register(aten.igamma.default, _PRIMS.igamma.default)
def igamma(a, x):
    a, x = _two_float(a, x)
    return _at_infinite_a(a, x, 0.0, jax.scipy.special.gammainc(a, x))


def _at_infinite_a(a, x, finite_x_value, y):
    # CPU: P(inf, x) is 0 and Q(inf, x) 1 for a finite x, NaN for x = inf (JAX: NaN, and 1 / 0 at x = inf)
    y = jnp.where(jnp.isposinf(a) & jnp.isfinite(x), jnp.full_like(a, finite_x_value), y)
    return jnp.where(jnp.isposinf(a) & jnp.isposinf(x), jnp.full_like(a, jnp.nan), y)


@register(aten.igammac.default, _PRIMS.igammac.default)
def igammac(a, x):
    a, x = _two_float(a, x)
    return _at_infinite_a(a, x, 1.0, jax.scipy.special.gammaincc(a, x))


@register(aten.special_zeta, _PRIMS.zeta.default)
def zeta(x, q):
    x, q = _two_float(x, q)
    # zeta(inf, q) = q ** -inf on CPU: 1 at q == 1, inf below, NaN above (JAX: NaN everywhere)
    at_inf = jnp.where(q == 1, jnp.ones_like(q), jnp.where(q < 1, jnp.full_like(q, jnp.inf), jnp.full_like(q, jnp.nan)))
    y = jnp.where(jnp.isposinf(x), at_inf, jax.scipy.special.zeta(x, q))
    # CPU's (Cephes') domain tests, in its order: x == 1 -> inf, x < 1 -> NaN, q a non-positive integer -> inf
    y = jnp.where((q <= 0) & (q == jnp.floor(q)), jnp.full_like(y, jnp.inf), y)
    y = jnp.where(x < 1, jnp.full_like(y, jnp.nan), y)
    return jnp.where(x == 1, jnp.full_like(y, jnp.inf), y)


@register(aten.frexp.Tensor, _PRIMS.frexp.default)
def frexp(x):
    if x.dtype == jnp.float64 and platform.target() == "tpu":
        return _frexp_float64_by_words(x)
    mantissa, exponent = jnp.frexp(x)
    return mantissa, exponent.astype(jnp.int32)


def _frexp_float64_by_words(x):
    """jnp.frexp of float64 without shifting the float's 64 bits, which XLA:TPU does not compile (the lowering
    check refuses it): the exponent from the high 32-bit word of its bits, the mantissa x times 2**-e in nine
    exact power-of-two factors (each a normal float32). Zeros, infinities and NaN give (x, 0), as jnp.frexp and
    CPU torch; so do subnormals, which a TPU holds as zeros (its float64 has float32's exponent range)."""
    high_word = jax.lax.bitcast_convert_type(x, jnp.uint32)[..., 1]
    e = ((high_word >> 20) & 0x7FF).astype(jnp.int32) - 1022
    special = ~jnp.isfinite(x) | (jnp.abs(x) < jnp.finfo(jnp.float64).tiny)
    e = jnp.where(special, 0, e)
    mantissa = x
    step = e // 9  # |step| <= 120 and |e - 8 step| <= 126 for e in [-1074, 1024]
    for part in [step] * 8 + [e - 8 * step]:
        mantissa = mantissa * precise_f32._pow2(-part).astype(jnp.float64)
    return jnp.where(special, x, mantissa), e

"""float32 exp, logarithms and tanh to within a few ulps, for XLA backends whose own are coarser (XLA:TPU).

XLA:TPU computes float32 ``log`` and ``tanh`` with approximations that differ from CPU torch (glibc/SLEEF,
correctly rounded or within 1 ulp) by more than float32's tolerance on some inputs, and every op built from
them inherits it (log1p, log2, log10, acosh, asinh, atanh, logaddexp, logsigmoid, mish, ...). The functions
here compute the same values from operations TPUs do exactly (integer bit manipulation, +, *, exp) and short
polynomials, so they agree with CPU torch to a few ulps on every platform. The lowerings use them for
float32 where the target platform is a TPU (``use_precise``); elsewhere XLA's own functions are as good.

Only JAX is imported here: the TPU lane's probe loads this file alone, on a host without torch.

Why one module: one family of float32 functions built from the same range reductions and polynomial helpers.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

_F32 = np.float32
_LN2_HI = _F32(0.693145751953125)          # ln 2 in its first 16 bits: k * _LN2_HI is exact for |k| < 256
_LN2_LO = _F32(1.4286068203094172e-06)     # ln 2 - _LN2_HI
_INV_LN2 = _F32(1.4426950408889634)
_LOG10_2_HI = _F32(0.30102539062500000)    # log10(2) in 16 bits
_LOG10_2_LO = _F32(4.6050389811952113e-06)
_INV_LN10 = _F32(0.43429448190325176)
_SQRT2 = _F32(1.4142135623730951)


def _bits(x):
    return jax.lax.bitcast_convert_type(x, jnp.int32)


def _from_bits(b):
    return jax.lax.bitcast_convert_type(b, jnp.float32)


def _split(x):
    """For a normal x > 0: (m, e) with x = m * 2**e exactly, m in [sqrt(1/2), sqrt(2)). (XLA on CPU and
    TPU treats subnormal operands as zero, so they never get here: their log is -inf, as jnp's.)"""
    b = _bits(x)
    e = (b >> 23) - 127
    m = _from_bits((b & 0x007FFFFF) | 0x3F800000)  # [1, 2)
    high = m > _SQRT2
    return jnp.where(high, m * _F32(0.5), m), e + high.astype(jnp.int32)


def _log_reduced(m):
    """log(m) for m in [sqrt(1/2), sqrt(2)): 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.1716, as
    f - f**2/2 + s (f**2/2 + R(s**2)) (the low-order terms kept apart to keep the rounding small)."""
    f = m - _F32(1.0)  # exact (Sterbenz)
    s = f / (_F32(2.0) + f)
    z = s * s
    # R = z (2/3 + z (2/5 + z (2/7 + z (2/9 + z (2/11 + z 2/13))))): the atanh series; its first term
    # left out of the sum is below 2**-40 relative here
    r = _F32(2 / 13)
    for c in (2 / 11, 2 / 9, 2 / 7, 2 / 5, 2 / 3):
        r = r * z + _F32(c)
    r = r * z
    hfsq = _F32(0.5) * f * f
    return f - (hfsq - s * (hfsq + r))


def _log_special(x, finite_value):
    """``finite_value`` for finite x > 0; -inf at 0, NaN below 0 and for NaN, inf at inf."""
    out = jnp.where(x == 0, -jnp.inf, finite_value)
    out = jnp.where(x < 0, jnp.nan, out)
    out = jnp.where(jnp.isposinf(x), jnp.inf, out)
    return jnp.where(jnp.isnan(x), x, out)


def _safe_positive(x):
    """x where it is finite and > 0, else 1 (the special values are chosen after)."""
    return jnp.where((x > 0) & jnp.isfinite(x), x, _F32(1.0))


def log(x):
    xs = _safe_positive(x)
    m, e = _split(xs)
    k = e.astype(jnp.float32)
    return _log_special(x, k * _LN2_HI + (_log_reduced(m) + k * _LN2_LO))


def log2(x):
    xs = _safe_positive(x)
    m, e = _split(xs)
    return _log_special(x, e.astype(jnp.float32) + _log_reduced(m) * _INV_LN2)  # exact at powers of 2


def log10(x):
    xs = _safe_positive(x)
    m, e = _split(xs)
    k = e.astype(jnp.float32)
    return _log_special(x, k * _LOG10_2_HI + (k * _LOG10_2_LO + _log_reduced(m) * _INV_LN10))


def log1p(x):
    """log(1 + x) as log(u) * x / (u - 1) with u = 1 + x rounded: the quotient corrects u's rounding."""
    u = _F32(1.0) + x
    # the barrier keeps XLA from folding (1 + x) - 1 into x, which would undo the correction
    d = jax.lax.optimization_barrier(u) - _F32(1.0)
    safe_d = jnp.where(d == 0, _F32(1.0), d)
    # past 2**24 the correction is below float32's rounding, and XLA:TPU divides by multiplying with the
    # reciprocal, which is subnormal (flushed to 0) for d near the top of the range (log1p(3e38) gave 0)
    corrected = jnp.where(jnp.abs(x) < _F32(2.0 ** 24), log(u) * (x / safe_d), log(u))
    out = jnp.where(d == 0, x, corrected)
    out = jnp.where(jnp.isposinf(x), jnp.inf, out)
    out = jnp.where(x == -1, -jnp.inf, out)
    return jnp.where(jnp.isnan(x) | (x < -1), jnp.where(jnp.isnan(x), x, jnp.nan), out)


# --- exp, expm1, exp2 ---------------------------------------------------------------------------------
# XLA:TPU's float32 exp is off by tens of ulps even for small arguments (68 ulps in tanh built on it, 1.6e-3
# in a timestep embedding's sin(t * exp(-c i)) at t ~ 1000) and its expm1 by ~1700 ulps near 0 (measured on
# the chip, bench/probes/tpu_probe.py). These reduce x = k ln2 + r exactly (Cody-Waite, as log does) and take
# exp(r) - 1 from its Taylor polynomial on |r| <= ln2/2 (the first term left out is below 0.1 ulp).
_EXP_MAX = _F32(88.8)     # past it exp(x) overflows float32 (the largest is exp(88.72...))
_EXP_MIN = _F32(-104.0)   # below it exp(x) is under float32's smallest subnormal
_EXPM1_TAYLOR = (1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040)


def _pow2(k):
    """2**k exactly, for int32 k in [-126, 127]."""
    return _from_bits((k + 127) << 23)


def _scale(v, k):
    """v * 2**k for int32 k in [-151, 129]: two factors, each a normal float32."""
    half = k >> 1
    return v * _pow2(half) * _pow2(k - half)


def _expm1_reduced(r):
    """exp(r) - 1 for |r| <= ~0.35, as r + r**2 (1/2 + r/6 + ...)."""
    q = _F32(_EXPM1_TAYLOR[-1])
    for c in reversed(_EXPM1_TAYLOR[:-1]):
        q = q * r + _F32(c)
    return r + r * r * q


def _exp_parts(x):
    """(k, p) with exp(x) = 2**k (1 + p), x clamped to [_EXP_MIN, _EXP_MAX] (NaN stays NaN in p)."""
    xc = jnp.clip(x, _EXP_MIN, _EXP_MAX)
    k = jnp.round(xc * _INV_LN2)
    r = (xc - k * _LN2_HI) - k * _LN2_LO  # k has at most 8 bits: both products exact
    return jnp.where(jnp.isnan(k), _F32(0.0), k).astype(jnp.int32), _expm1_reduced(r)


def exp(x):
    k, p = _exp_parts(x)
    return jnp.where(jnp.isnan(x), x, _scale(_F32(1.0) + p, k))


def exp2(x):
    """2**x = 2**k 2**f with k = round(x), f = x - k exact in [-1/2, 1/2]."""
    xc = jnp.clip(x, _F32(-151.0), _F32(129.0))
    k = jnp.round(xc)
    f = xc - k
    p = _expm1_reduced(f * _LN2_HI + f * _LN2_LO)
    k = jnp.where(jnp.isnan(k), _F32(0.0), k).astype(jnp.int32)
    return jnp.where(jnp.isnan(x), x, _scale(_F32(1.0) + p, k))


def expm1(x):
    """exp(x) - 1: p itself for k = 0; 2**k p + (2**k - 1) for 0 < |k| <= 24 (2**k - 1 exact, one rounding);
    exp(x) - 1 beyond, where the subtraction rounds once or not at all."""
    k, p = _exp_parts(x)
    kc = jnp.clip(k, -24, 24)
    middle = _scale(p, kc) + (_pow2(kc) - _F32(1.0))
    far = _scale(_F32(1.0) + p, k) - _F32(1.0)
    out = jnp.where(k == 0, p, jnp.where(jnp.abs(k) <= 24, middle, far))
    return jnp.where(jnp.isnan(x) | (x == 0), x, out)  # (-0.0 stays -0.0)


_HYPERBOLIC_SPLIT = _F32(88.0)  # past it exp(a) overflows before sinh(a) and cosh(a) do (at 89.4)


def _exp_halves(a):
    """exp(a) / 2 as (exp(a / 2) / 2) exp(a / 2): finite up to a = 89.4, two roundings more than exp."""
    w = exp(_F32(0.5) * a)
    return (_F32(0.5) * w) * w


def sinh(x):
    """(e - 1/e) / 2 as (m + m / (m + 1)) / 2 with m = expm1(|x|): no cancellation near 0."""
    a = jnp.abs(x)
    m = expm1(jnp.minimum(a, _HYPERBOLIC_SPLIT))
    out = jnp.where(a <= _HYPERBOLIC_SPLIT, _F32(0.5) * (m + m / (m + _F32(1.0))), _exp_halves(a))
    return jnp.where(jnp.isnan(x) | (x == 0), x, jnp.copysign(out, x))  # (-0.0 stays -0.0)


def cosh(x):
    a = jnp.abs(x)
    e = exp(jnp.minimum(a, _HYPERBOLIC_SPLIT))
    return jnp.where(a <= _HYPERBOLIC_SPLIT, _F32(0.5) * e + _F32(0.5) / e, _exp_halves(a))


_TANH_SERIES = (-1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075, -929569 / 638512875)
_TANH_SMALL = _F32(0.25)


def tanh(x):
    """tanh from exp(-2|x|) for |x| >= 0.25 (no cancellation there), its odd series below."""
    a = jnp.abs(x)
    z = a * a
    p = _F32(_TANH_SERIES[-1])
    for c in reversed(_TANH_SERIES[:-1]):
        p = p * z + _F32(c)
    small = a + a * z * p
    em = expm1(_F32(-2.0) * jnp.minimum(a, _F32(20.0)))  # exp(-2a) - 1, without 1 - exp(-2a)'s cancellation
    large = -em / (_F32(2.0) + em)
    t = jnp.where(a < _TANH_SMALL, small, large)
    return jnp.where(jnp.isnan(x), x, jnp.copysign(t, x))  # -0.0 stays -0.0


def atanh(x):
    a = jnp.abs(x)
    return jnp.copysign(_F32(0.5) * log1p(_F32(2.0) * a / (_F32(1.0) - a)), x)  # |x| > 1: NaN, as torch


_BIG = _F32(4096.0)  # beyond it, asinh(a) and acosh(a) are log(2a) to float32 precision


def asinh(x):
    a = jnp.abs(x)
    moderate = log1p(a + a * a / (_F32(1.0) + jnp.sqrt(_F32(1.0) + jnp.minimum(a, _BIG) ** 2)))
    big = log(a) + (_LN2_HI + _LN2_LO)
    out = jnp.where(a < _BIG, moderate, big)
    return jnp.where(jnp.isnan(x), x, jnp.copysign(out, x))


def acosh(x):
    t = jnp.minimum(x, _BIG) - _F32(1.0)
    moderate = log1p(t + jnp.sqrt(_F32(2.0) * t + t * t))
    big = log(x) + (_LN2_HI + _LN2_LO)
    out = jnp.where(x < _BIG, moderate, big)
    return jnp.where(x < 1, jnp.nan, jnp.where(jnp.isnan(x), x, out))


def logaddexp(a, b):
    hi = jnp.maximum(a, b)
    d = -jnp.abs(a - b)
    out = hi + log1p(exp(jnp.where(jnp.isnan(d), _F32(0.0), d)))
    out = jnp.where(a == b, a + (_LN2_HI + _LN2_LO), out)  # also ±inf == ±inf: no inf - inf
    out = jnp.where(jnp.isinf(hi) & (hi > 0), hi, out)
    return jnp.where(jnp.isnan(a) | jnp.isnan(b), jnp.nan, out)


def logaddexp2(a, b):
    hi = jnp.maximum(a, b)
    d = -jnp.abs(a - b)
    out = hi + log1p(exp2(jnp.where(jnp.isnan(d), _F32(0.0), d))) * _INV_LN2
    out = jnp.where(a == b, a + _F32(1.0), out)
    out = jnp.where(jnp.isinf(hi) & (hi > 0), hi, out)
    return jnp.where(jnp.isnan(a) | jnp.isnan(b), jnp.nan, out)


def softplus(x):
    """log(1 + exp(x)), without overflow."""
    return jnp.maximum(x, _F32(0.0)) + log1p(exp(-jnp.abs(x)))


def log_sigmoid(x):
    return jnp.minimum(x, _F32(0.0)) - log1p(exp(-jnp.abs(x)))


_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
_HALF_LOG_2PI = _F32(0.91893853320467274)
_LOG_PI = _F32(1.1447298858494002)


def _lanczos_sum(z):
    """A(z) of the Lanczos approximation (g = 7, 9 terms): Gamma(z + 1) = sqrt(2 pi) t**(z + 1/2) e**-t A(z)."""
    a = _F32(_LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], start=1):
        a = a + _F32(c) / (z + _F32(i))
    return a


def _lgamma_right(x):
    """lgamma for x >= 0.5 (log t as log(g + 1/2) + log1p(z / (g + 1/2)): no rounding of t itself)."""
    z = x - _F32(1.0)
    t = z + _F32(_LANCZOS_G + 0.5)
    log_t = _F32(np.log(_LANCZOS_G + 0.5)) + log1p(z / _F32(_LANCZOS_G + 0.5))
    return _HALF_LOG_2PI + (z + _F32(0.5)) * log_t - t + log(_lanczos_sum(z))


def _sin_pi(x):
    """sin(pi x), with x reduced to [-1/2, 1/2] first (exact), so it is 0 at integers."""
    r = x - jnp.round(x)
    sign = jnp.where(jnp.mod(jnp.round(x), 2) == 0, _F32(1.0), _F32(-1.0))
    return sign * jnp.sin(_F32(np.pi) * r)


def lgamma(x):
    left = x < _F32(0.5)
    xr = jnp.where(left, _F32(1.0) - x, x)
    right = _lgamma_right(jnp.where(jnp.isfinite(xr), xr, _F32(1.0)))
    s = jnp.abs(_sin_pi(jnp.where(left & jnp.isfinite(x), x, _F32(0.5))))
    reflected = _LOG_PI - log(s) - right
    out = jnp.where(left, reflected, right)
    out = jnp.where((x == 1) | (x == 2), _F32(0.0), out)  # exactly, as CPU torch (Lanczos: 5e-7)
    out = jnp.where(left & (x == jnp.floor(x)), jnp.inf, out)  # poles at 0, -1, -2 ...
    out = jnp.where(jnp.isinf(x), jnp.inf, out)
    return jnp.where(jnp.isnan(x), x, out)


def digamma(x):
    """psi(x): reflection below 1/2, the recurrence up to x >= 6, then the asymptotic series."""
    left = x < _F32(0.5)
    xr = jnp.where(left, _F32(1.0) - x, x)
    xr = jnp.where(jnp.isfinite(xr), xr, _F32(6.0))
    acc = jnp.zeros_like(xr)
    for _ in range(6):
        small = xr < _F32(6.0)
        acc = acc - jnp.where(small, _F32(1.0) / xr, _F32(0.0))
        xr = jnp.where(small, xr + _F32(1.0), xr)
    inv = _F32(1.0) / xr
    inv2 = inv * inv
    series = inv2 * (_F32(1 / 12) - inv2 * (_F32(1 / 120) - inv2 * (_F32(1 / 252) - inv2 * (
        _F32(1 / 240) - inv2 * _F32(1 / 132)))))
    right = acc + log(xr) - _F32(0.5) * inv - series
    r = x - jnp.round(x)
    cot = jnp.cos(_F32(np.pi) * r) / jnp.sin(_F32(np.pi) * r)  # cot(pi x), its period 1
    out = jnp.where(left, right - _F32(np.pi) * cot, right)
    out = jnp.where(x == 0, jnp.copysign(jnp.inf, -x), out)  # digamma(+-0) = -+inf, as CPU torch
    out = jnp.where((x < 0) & (x == jnp.floor(x)), jnp.nan, out)
    out = jnp.where(jnp.isposinf(x), jnp.inf, jnp.where(jnp.isneginf(x), jnp.nan, out))
    return jnp.where(jnp.isnan(x), x, out)


_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def erfinv(x):
    """Giles' single-precision erfinv (the form XLA uses), with the precise log."""
    w = -log((_F32(1.0) - x) * (_F32(1.0) + x))
    central = w < _F32(5.0)
    wc = jnp.where(central, w - _F32(2.5), jnp.sqrt(jnp.where(central, _F32(5.0), w)) - _F32(3.0))
    p_c = _F32(_ERFINV_CENTRAL[0])
    for c in _ERFINV_CENTRAL[1:]:
        p_c = p_c * wc + _F32(c)
    p_t = _F32(_ERFINV_TAIL[0])
    for c in _ERFINV_TAIL[1:]:
        p_t = p_t * wc + _F32(c)
    out = jnp.where(central, p_c, p_t) * x
    out = jnp.where(jnp.abs(x) == 1, jnp.copysign(jnp.inf, x), out)
    return jnp.where(jnp.abs(x) > 1, jnp.nan, out)


def _differentiable(fn, *partials):
    """``fn`` with its derivative given: ``partials[i](*args, out)`` is d out / d args[i]. JAX's own
    differentiation of these functions is wrong: the exponent taken from the bits (``_split``) has no
    derivative, so d log(x) / dx came out as 1 / (m x) for the mantissa m alone (0.71 off at some x), and the
    gradients of everything built on log (softplus, mish, log_sigmoid, logaddexp, lgamma, ...) with it, on a
    TPU, where the lowerings use these (softplus_backward is the VJP of softplus)."""
    differentiable = jax.custom_jvp(fn)

    @differentiable.defjvp
    def jvp(primals, tangents):
        out = differentiable(*primals)  # (itself, so that the partials built on it differentiate again)
        return out, sum(p(*primals, out) * t for p, t in zip(partials, tangents))

    functools.update_wrapper(differentiable, fn)
    return differentiable


def _sigmoid(x):
    return _F32(1.0) / (_F32(1.0) + exp(-x))


def _difference(a, b):
    """a - b, 0 where both are the same infinity (logaddexp's derivative there is 1/2 each, as JAX's)."""
    d = a - b
    return jnp.where(jnp.isnan(d) & (a == b), _F32(0.0), d)


_LN2 = _F32(0.6931471805599453)
_SQRT_PI_2 = _F32(0.886226925452758)  # sqrt(pi) / 2


FUNCTIONS = {
    "exp": _differentiable(exp, lambda x, y: y),
    "exp2": _differentiable(exp2, lambda x, y: y * _LN2),
    "expm1": _differentiable(expm1, lambda x, y: y + _F32(1.0)),
    "log": _differentiable(log, lambda x, y: _F32(1.0) / x),
    "log2": _differentiable(log2, lambda x, y: _INV_LN2 / x),
    "log10": _differentiable(log10, lambda x, y: _INV_LN10 / x),
    "log1p": _differentiable(log1p, lambda x, y: _F32(1.0) / (_F32(1.0) + x)),
    "tanh": _differentiable(tanh, lambda x, y: _F32(1.0) - y * y),
    "sinh": _differentiable(sinh, lambda x, y: FUNCTIONS["cosh"](x)),
    "cosh": _differentiable(cosh, lambda x, y: FUNCTIONS["sinh"](x)),
    "atanh": _differentiable(atanh, lambda x, y: _F32(1.0) / ((_F32(1.0) - x) * (_F32(1.0) + x))),
    "asinh": _differentiable(asinh, lambda x, y: jax.lax.rsqrt(x * x + _F32(1.0))),
    "acosh": _differentiable(acosh, lambda x, y: jax.lax.rsqrt(x - _F32(1.0)) * jax.lax.rsqrt(x + _F32(1.0))),
    "logaddexp": _differentiable(logaddexp, lambda a, b, y: _sigmoid(_difference(a, b)),
                                 lambda a, b, y: _sigmoid(_difference(b, a))),
    "logaddexp2": _differentiable(logaddexp2, lambda a, b, y: _sigmoid(_difference(a, b) * _LN2),
                                  lambda a, b, y: _sigmoid(_difference(b, a) * _LN2)),
    "softplus": _differentiable(softplus, lambda x, y: _sigmoid(x)),
    "log_sigmoid": _differentiable(log_sigmoid, lambda x, y: _sigmoid(-x)),
    "lgamma": _differentiable(lgamma, lambda x, y: FUNCTIONS["digamma"](x)),
    "digamma": _differentiable(digamma, lambda x, y: jax.scipy.special.polygamma(1, x)),
    "erfinv": _differentiable(erfinv, lambda x, y: _SQRT_PI_2 * FUNCTIONS["exp"](y * y)),
}

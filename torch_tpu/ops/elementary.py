"""The logarithms, tanh and what is built from them, as every lowering calls them: XLA's own, or the float32
versions of ``precise_f32`` where the target platform's are coarser than CPU torch's; and division, atan2, hypot,
sinh and expm1 in forms that give CPU's special values where the target's do not (the end of this module).

Measured on a TPU v5e (``bench/probes/tpu_probe.py``, ``bench/results/tpu/probe.json``): XLA:TPU's float32 ``log``
is off by up to ~4000 ulps (1.2e-4 absolute near 0.75), ``tanh`` by ~1400, and everything computed from them
inherits it (log1p, log2, log10, acosh, asinh, atanh, logaddexp, softplus, log_sigmoid, mish, log_softmax,
logsumexp, cross entropy ...): beyond float32's tolerance of CPU torch. The precise versions stay within 5
ulps of float64 there (tanh and softplus within ~80, from XLA:TPU's exp), and cost about the same as XLA's
on large arrays (memory-bound; log1p 1.7x, acosh 2x in isolation).

``TORCH_TPU_F32_MATH``: ``auto`` (default) uses them for float32 when the program is built for a TPU (also
while ``TORCH_TPU_CHECK_LOWERING=tpu`` traces a program for a TPU on another platform), ``precise``
everywhere (how CI tests them on the CPU), ``native`` never (XLA's own, faster where log-heavy float32 code
is the bottleneck). lgamma, digamma and erfinv are built on log in XLA too, and follow the same rule.
float32 ``exp``/``exp2``/``expm1`` reduce their argument exactly first (XLA:TPU's exp is tens of ulps off
even near 0, its expm1 ~1700; tanh, sinh, cosh, softplus and logaddexp use these: XLA:TPU's sinh was 2e-6 off
CPU at 7, ``bench/results/tpu/regression_probe.json``). sin/cos/tan are XLA's own everywhere:
within 3/3/6 ulps of float64 up to 65000 radians on the chip.
An op whose floating results are all bfloat16 (``calling.invoke`` says so with
``results_in_bfloat16``) computes its float32 internals with XLA's own functions: their error (at most
~1e-4 relative on the chip) vanishes in the rounding to bfloat16's 8 bits, and the precise ones cost vector-unit
time that XLA:TPU may spend many times over: a bfloat16 FLUX.1-width feed-forward's tanh-GELU, fused into the
next matmul's operand, made that matmul 2.8x slower on the chip, and the compiled transformer 1.11x. float16
keeps them (its 11 bits see XLA:TPU's log error near 1). float64 and complex values always use XLA's.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import jax
import jax.numpy as jnp

from .. import config
from ..runtime import platform
from . import precise_f32
from ._util import copysign, promoted, signbit


_OP_RESULTS = threading.local()  # .bfloat16: the lowering traced on this thread rounds its results to bf16


@contextlib.contextmanager
def results_in_bfloat16(bfloat16: bool):
    """While a lowering traces: whether every floating result of its op is bfloat16."""
    before = getattr(_OP_RESULTS, "bfloat16", False)
    _OP_RESULTS.bfloat16 = bfloat16
    try:
        yield
    finally:
        _OP_RESULTS.bfloat16 = before


def _coarse_target(xs) -> bool:
    """Whether float32 values ``xs`` meet functions coarser than CPU torch's unless the precise ones stand in."""
    mode = config.settings().f32_math
    if mode == "native" or any(jnp.result_type(x) != jnp.float32 for x in xs):
        return False
    return mode == "precise" or platform.target() == "tpu"


def precise(*xs) -> bool:
    """Whether float32 values ``xs`` take the precise functions in the program being built."""
    return not getattr(_OP_RESULTS, "bfloat16", False) and _coarse_target(xs)


def coarse_for_bfloat16(*xs) -> bool:
    """Whether float32 values ``xs`` of an op with bfloat16 results take the target's coarse functions (the
    bfloat16 rule above): a formula that cancels (1 + tanh(u) in a GELU's negative tail) must not amplify
    their error there."""
    return getattr(_OP_RESULTS, "bfloat16", False) and _coarse_target(xs)


def _for_tpu() -> bool:
    return platform.target() == "tpu"


def _with_arguments_sign(fn):
    """``fn`` (a real function with its argument's sign everywhere: sinh, expm1) given the argument's sign on a
    TPU, where XLA's are +0.0 at -0.0 (CPU: -0.0). Complex values are left as they are."""
    def call(x):
        r = fn(x)
        return copysign(r, x) if _for_tpu() and not jnp.iscomplexobj(r) else r

    call.__name__, call.__doc__ = fn.__name__, fn.__doc__
    return call


def _pick(native, name):
    fn = precise_f32.FUNCTIONS[name]

    def call(*xs):
        return fn(*xs) if precise(*xs) else native(*xs)

    call.__name__ = name
    call.__doc__ = f"{name}: XLA's, or precise_f32.{name} for float32 where the target is a TPU."
    return call


exp = _pick(jnp.exp, "exp")
exp2 = _pick(jnp.exp2, "exp2")
expm1 = _with_arguments_sign(_pick(jnp.expm1, "expm1"))
log = _pick(jnp.log, "log")
log1p = _pick(jnp.log1p, "log1p")
log2 = _pick(jnp.log2, "log2")
log10 = _pick(jnp.log10, "log10")
tanh = _pick(jnp.tanh, "tanh")
arctanh = _pick(jnp.arctanh, "atanh")
arcsinh = _pick(jnp.arcsinh, "asinh")
arccosh = _pick(jnp.arccosh, "acosh")
logaddexp = _pick(jnp.logaddexp, "logaddexp")
logaddexp2 = _pick(jnp.logaddexp2, "logaddexp2")
softplus = _pick(jax.nn.softplus, "softplus")
log_sigmoid = _pick(jax.nn.log_sigmoid, "log_sigmoid")
lgamma = _pick(jax.scipy.special.gammaln, "lgamma")
erfinv = _pick(jax.scipy.special.erfinv, "erfinv")
digamma = _pick(lambda x: jnp.where(x == 0, copysign(jnp.inf, -x), jax.scipy.special.digamma(x)), "digamma")


def logsumexp(x, axis=None, keepdims=False):
    if not precise(x):
        return jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)
    m = jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)  # (an empty axis: -inf, as jax.nn's)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    out = log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else jnp.squeeze(out, axis=axis)


def log_softmax(x, axis=-1):
    if not precise(x):
        return jax.nn.log_softmax(x, axis=axis)
    shifted = x - jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf))
    return shifted - log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


# XLA:TPU's results at special values where they are not CPU's, in every floating dtype (bench/probes/tpu_semantics_probe.py
# on a v5e: bench/results/tpu/tpu_semantics_probe.json). The forms below give CPU's results there; they are used
# where the program is built for a TPU, as XLA's own results elsewhere are CPU's already. (Subnormal operands and
# results are zero on a TPU: a difference of the hardware, not corrected.)
_HUGE, _UNHUGE = 2.0 ** 64, 2.0 ** -64


def true_divide(x, y):
    """x / y of floating operands. A TPU divides by multiplying with the divisor's reciprocal, which is flushed to
    zero for |y| past 2**126: 3e38 / 3e38 was 0 and inf / 3e38 NaN there (floor_divide of them off by one;
    bench/results/tpu/regression_probe.json). For a TPU both operands are divided by 4 where |y| is past 2**126,
    which is exact but where x / 4 falls below float32's normal range, and then the quotient by such a y is
    below it too (zero, as a TPU holds it)."""
    if not _for_tpu() or (type(y) in (int, float) and abs(y) < 2.0 ** 126):
        return jnp.true_divide(x, y)
    dt = jnp.result_type(x, y)
    if not jnp.issubdtype(dt, jnp.floating) or jnp.finfo(dt).maxexp < 128:
        return jnp.true_divide(x, y)
    scale = jnp.where(jnp.abs(y) > 2.0 ** 126, 0.25, 1.0).astype(dt)  # (one division, of the operands scaled)
    return jnp.true_divide(x * scale, y * scale)


def truncated_quotient(x, y):
    """trunc(x / y) of floating operands as CPU torch computes it: the quotient rounded correctly, then truncated.
    XLA:CPU divides by a broadcast scalar as a product with its reciprocal (an ulp off in 12% of ``x / 0.3``), which
    truncation turned into an off-by-one (3 / 0.3 on one side of 10): there the divisor goes through an optimization
    barrier, so the division stays one. On a TPU every division is a reciprocal's product (within 2 ulps): there
    the truncated quotient comes from the exact remainder instead (``_rounded_up_quotient``)."""
    x, y = promoted(x, y)
    if not _for_tpu():
        return jnp.trunc(x / jax.lax.optimization_barrier(y))
    q = jnp.trunc(true_divide(x, y))
    if jnp.finfo(x.dtype).bits > 32:
        return q
    return _rounded_up_quotient(x, y, q)


def _rounded_up_quotient(x, y, approximate):
    """trunc(x / y) for float32-or-narrower x and y on a TPU, where |x / y| < 2**20: n = trunc of the exact
    quotient, from the exact remainder r (n y = x - r exactly), and n + 1 where the exact quotient n + r / y
    rounds up to n + 1 in float32 (y - r at most half the spacing below n + 1 times y, a tie to the even one).
    Elsewhere (non-finite operands, a zero divisor, larger quotients) ``approximate``."""
    dt = x.dtype
    x32, y32 = x.astype(jnp.float32), y.astype(jnp.float32)
    r = _exact_rem(x32, y32)
    a, b = jnp.abs(r), jnp.abs(y32)
    n = jnp.round(true_divide(jnp.abs(x32 - r), b))  # an integer below 2**20: the division's 2 ulps round away
    m = n + 1
    # the spacing of float32 just below m (a power of two: half its spacing above)
    m_bits = precise_f32._bits(m)
    spacing_above = precise_f32._from_bits((m_bits & _EXPONENT_BITS) - (23 << 23))
    power_of_two = (m_bits & _MANTISSA_BITS) == 0
    half_below = jnp.where(power_of_two, spacing_above * 0.25, spacing_above * 0.5) * b
    gap = b - a  # exact where it matters (a >= b / 2)
    up = (gap < half_below) | ((gap == half_below) & ((m_bits & 1) == 0))
    magnitude = jnp.where(up, m, n)
    exact = magnitude * jnp.where(signbit(x32) != signbit(y32), -1.0, 1.0).astype(jnp.float32)
    usable = (jnp.isfinite(x32) & jnp.isfinite(y32) & (b >= jnp.finfo(jnp.float32).tiny)
              & (jnp.abs(approximate.astype(jnp.float32)) < 2.0 ** 20))
    return jnp.where(usable, exact.astype(dt), approximate)


def rem(x, y):
    """XLA's remainder of floating operands of one dtype (C's fmod for finite x and y). On a TPU XLA's is
    ``x - trunc(x / y) * y`` in float32, which rounds: fmod(993, 0.7) was 6e-5 off, and quotients past 2**24 lost
    every digit (bench/results/tpu/regression_probe.json). There float32 and narrower are computed exactly here
    (``_exact_rem``); float64, emulated on a TPU and inexact anyway, keeps XLA's."""
    dt = jnp.result_type(x, y)
    if not _for_tpu() or jnp.finfo(dt).bits > 32:
        return jax.lax.rem(x, y)
    r = _exact_rem(jnp.asarray(x).astype(jnp.float32), jnp.asarray(y).astype(jnp.float32))
    return r.astype(dt)


_EXPONENT_BITS, _MANTISSA_BITS = 0x7F800000, 0x007FFFFF


def _exact_rem(x, y):
    """fmod of float32 operands from operations that round nothing: from r = |x|, subtract the largest
    power-of-two multiple of |y| that is not above r (|y|'s mantissa under r's exponent, halved if that
    exceeds r) until r < |y|. Each subtraction is exact (Sterbenz: t <= r < 2t) and lowers r's exponent, so
    the loop runs at most the operands' exponent difference plus one times (25 for quotients below 2**24).
    Lanes of a non-finite operand or a zero divisor give NaN, as fmod; an infinite y is the caller's. A subnormal
    divisor is a zero one, as a TPU reads it (and the loop would not end where XLA:CPU flushes it to zero)."""
    a, b = jnp.abs(x), jnp.abs(y)
    finite = jnp.isfinite(a) & jnp.isfinite(b) & (b >= jnp.finfo(jnp.float32).tiny)
    a = jnp.where(finite, a, jnp.float32(0))
    b = jnp.where(finite, b, jnp.float32(1))
    mantissa = precise_f32._bits(b) & _MANTISSA_BITS

    def step(r):
        t = precise_f32._from_bits((precise_f32._bits(r) & _EXPONENT_BITS) | mantissa)
        t = jnp.where(t > r, t * jnp.float32(0.5), t)
        return jnp.where(r >= b, r - t, r)

    r = jax.lax.while_loop(lambda r: jnp.any(r >= b), step, a)
    return jnp.where(finite, copysign(r, x), jnp.float32(jnp.nan))


def _scaled_down(*xs):
    """``xs`` (one dtype) times 2**-64 where the largest magnitude among them is finite and past 2**64, and that
    factor's inverse: XLA:TPU's atan2 and hypot divide one operand by the other inside, where a quotient of
    huge values flushes to zero (atan2(3e38, -3e38) was pi, CPU 3pi/4; hypot(3e38, 3e38) 3e38, CPU inf)."""
    m = functools.reduce(jnp.maximum, [jnp.abs(x) for x in xs])
    big = jnp.isfinite(m) & (m > _HUGE)
    down = jnp.where(big, _UNHUGE, 1.0).astype(m.dtype)
    return [x * down for x in xs], jnp.where(big, _HUGE, 1.0).astype(m.dtype)


def _with_huge_operands_scaled(fn, rescale: bool):
    """``fn(a, b)`` (atan2, hypot) of float operands past 2**64 scaled down first on a TPU (``_scaled_down``); the
    result scaled back up where ``fn`` is homogeneous (hypot), not where it is scale-free (atan2). float16
    never reaches 2**64."""
    def call(a, b):
        dt = jnp.result_type(a, b)
        if not _for_tpu() or not jnp.issubdtype(dt, jnp.floating) or jnp.finfo(dt).maxexp < 128:
            return fn(a, b)
        (a, b), up = _scaled_down(*promoted(a, b))
        return fn(a, b) * up if rescale else fn(a, b)

    call.__name__ = fn.__name__
    return call


arctan2 = _with_huge_operands_scaled(jnp.arctan2, rescale=False)
hypot = _with_huge_operands_scaled(jnp.hypot, rescale=True)


sinh = _with_arguments_sign(_pick(jnp.sinh, "sinh"))
cosh = _pick(jnp.cosh, "cosh")

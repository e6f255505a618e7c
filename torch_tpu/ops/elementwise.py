"""Pointwise ops: arithmetic, comparisons, math functions (activations: activations.py).

Why one module: 34 lowerings of a few lines each that share torch's promotion and special-value rules (the helpers
below).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..runtime import dtypes
from . import elementary
from .checks import require
from .registry import aten, prims, register
from ._util import (_weak, copysign, ints_as_default_float, is_float, is_low_precision, is_value, jdtype, no_pred,
                    promoted, signbit, to_float, torch_operands, upcast, zero_dim_opmath,
                    zero_dim_scalar, as_number)


def _up(x):
    """Arrays in bf16/fp16 compute in fp32 (torch's opmath); Python scalars stay as they are."""
    return upcast(x) if hasattr(x, "dtype") else x


_BOOL = jnp.dtype(jnp.bool_)


def _both_bool(x, y) -> bool:
    """Both operands are booleans (``jnp.result_type(v) == bool`` of each, without computing it)."""
    return all(type(v) is bool or getattr(v, "dtype", None) == _BOOL for v in (x, y))


def _plus_scaled(x, y, alpha):
    """``x + alpha * y``. A float16 result is computed in float32 and rounded once, as torch's opmath does
    (CUDA, and CPUs without AVX512-FP16): left to XLA:CPU the product was rounded to float16 first on some
    machines, one ulp off where it is not exact (1.0004e-3 - 3 * 1.0004e-3). bfloat16 keeps XLA's form, which
    is CPU torch's there."""
    if alpha is None or is_value(alpha, 1):
        return _sum(x, _times_unit(x, y, 1))
    dtype = jnp.result_type(x, y)
    if dtype != jnp.float16:
        return x + y * alpha

    def wide(v):
        return v.astype(jnp.float32) if getattr(v, "dtype", None) == dtype else v

    return (wide(x) + wide(y) * alpha).astype(dtype)


def _times_unit(x, y, sign: int):
    """``sign * y`` as CPU torch computes ``alpha * y`` for the default alpha. For a complex result its kernel
    multiplies by alpha = +-1 + 0j even then: the real part is +-c - 0 * d, the imaginary part +-d + 0 * c, so a
    zero's sign (and an infinity's NaN) follows the complex product, not ``y``'s own value (``z + (-0 - 0j)``
    gives +0 where -0 + -0 is -0). A real result is ``y`` or ``-y``."""
    dtype = jnp.result_type(x, y)
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        return y if sign == 1 else -y
    if type(y) in _STATIC_NUMBERS:  # a compiled or fused graph's constant: the product in Python (IEEE, as C)
        c, d = complex(y).real, complex(y).imag
        return complex(sign * c - d * 0.0, sign * d + c * 0.0)
    y = jnp.asarray(y).astype(dtype)
    c, d = jnp.real(y), jnp.imag(y)
    return jax.lax.complex(sign * c - d * 0, sign * d + c * 0)


_STATIC_NUMBERS = (int, float, complex, bool)


def _sum(x, p):
    """``x + p`` where a complex sum's static operand (a graph's constant) has a zero part: XLA folds ``v + 0``
    into ``v``, which keeps -0.0 where IEEE gives +0.0, so a +0.0 part is added in a form it does not fold
    (``_plus_zero``); a -0.0 part adds nothing in IEEE either."""
    static, traced = (p, x) if type(p) in _STATIC_NUMBERS else (x, p) if type(x) in _STATIC_NUMBERS else (None, None)
    if static is None or not jnp.issubdtype(jnp.result_type(traced, static), jnp.complexfloating):
        return x + p
    static = complex(static)

    def part(v, c):
        if c != 0:
            return v + c
        return _plus_zero(v) if math.copysign(1.0, c) > 0 else v

    dtype = jnp.result_type(traced, static)
    traced = jnp.asarray(traced).astype(dtype)
    return jax.lax.complex(part(jnp.real(traced), static.real), part(jnp.imag(traced), static.imag))


def _static_zero_added(x, y, alpha, sign: float) -> bool:
    """Is ``alpha * y`` a static Python zero of sign ``sign`` (a compiled graph's constant), added to a
    real floating ``x``? XLA folds ``x + 0`` (and ``x - (-0.0)``) into ``x``, which keeps -0.0 where IEEE
    and CPU give 0.0 (``x * 0 + 0.0`` of a negative x). A traced Scalar (eager's) is not folded."""
    if type(y) not in (int, float, bool) or (alpha is not None and type(alpha) not in (int, float, bool)):
        return False
    v = y * (1 if alpha is None else alpha)
    return v == 0 and math.copysign(1.0, v) == sign and jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _plus_zero(x):
    """``x + 0.0`` as IEEE computes it (-0.0 becomes 0.0), in a form XLA does not fold."""
    return jnp.where(x == 0, jnp.zeros_like(x), x)


@register(aten.add.Tensor, aten.add.Scalar)
def add(x, y, alpha=1):
    if _both_bool(x, y):
        return jnp.logical_or(x, y)
    if _static_zero_added(x, y, alpha, 1.0):  # (a static False is the constant 0 too)
        return _plus_zero(x)
    if not (alpha is None or is_value(alpha, 1)) and zero_dim_scalar(x, y):  # (CPU: the 0-dim as a number)
        return _plus_scaled(x, as_number(y), alpha)
    x, y = torch_operands(x, y)
    return _plus_scaled(x, y, alpha)


def _minus(x, y, alpha):
    """torch's sub: x + (-alpha) * y, alpha negated as its own type (an int 0 stays 0, so -0.0 - 0 * y
    keeps its sign, where x - 0 * y would not)."""
    if not (alpha is None or is_value(alpha, 1)) and zero_dim_scalar(x, y):
        return _plus_scaled(x, as_number(y), -alpha)
    x, y = torch_operands(x, y)
    if alpha is None or is_value(alpha, 1):
        complex_result = jnp.issubdtype(jnp.result_type(x, y), jnp.complexfloating)
        return _sum(x, _times_unit(x, y, -1)) if complex_result else x - y
    return _plus_scaled(x, y, -alpha)


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(x, y, alpha=1):
    if _static_zero_added(x, y, alpha, -1.0):  # x - (-0.0) is x + 0.0
        return _plus_zero(x)
    return _minus(x, y, alpha)


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(x, y, alpha=1):
    return _minus(y, x, alpha)


def _number(v) -> bool:
    """A Python number operand (static, or a dynamic Scalar: weakly typed)."""
    return type(v) in (int, float) or (_weak(v) and getattr(v, "ndim", 0) == 0 and not jnp.iscomplexobj(v))


def _opmath_by_number(x, y, fn):
    """fn(x, y) of a float16/bfloat16 tensor x and a Python number y as CPU's (and CUDA's) mul/div
    kernels compute it: in float32 with the number's float32 value, rounded once (the number was rounded
    to the half type first: bf16 x * 1.0039 was x * 1.0, float16 x / 70000 was x / inf), else None."""
    if hasattr(x, "dtype") and is_low_precision(x) and _number(y):
        return fn(upcast(x), y).astype(x.dtype)
    return None


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(x, y):
    if _both_bool(x, y):
        return jnp.logical_and(x, y)
    by_number = _opmath_by_number(x, y, jnp.multiply)
    if by_number is None:
        by_number = _opmath_by_number(y, x, jnp.multiply)
    if by_number is not None:
        return by_number
    wide = zero_dim_opmath(x, y)
    if wide is not None:
        return (wide[0] * wide[1]).astype(x.dtype)
    x, y = no_pred(*torch_operands(x, y))
    return x * y


def _complex_div(x, y, dt):
    """torch's (and numpy's) complex division, in real arithmetic: Smith's scaling, and a division by
    0+0j giving complex inf/nan (a/|c|, b/|d|). XLA's own complex divide folds a division by a constant
    zero to nan+nanj while it computes inf+infj at run time: this form is the same in every program."""
    x = jnp.asarray(x).astype(dt)
    y = jnp.asarray(y).astype(dt)
    a, b, c, d = jnp.real(x), jnp.imag(x), jnp.real(y), jnp.imag(y)
    abs_c, abs_d = jnp.abs(c), jnp.abs(d)
    c_big = abs_c >= abs_d
    zero = c_big & (abs_c == 0) & (abs_d == 0)
    safe_c = jnp.where(c_big & ~zero, c, 1)
    safe_d = jnp.where(~c_big, d, 1)
    rat1 = d / safe_c
    scl1 = 1 / (safe_c + d * rat1)
    rat2 = c / safe_d
    scl2 = 1 / (safe_d + c * rat2)
    re = jnp.where(zero, a / abs_c, jnp.where(c_big, (a + b * rat1) * scl1, (a * rat2 + b) * scl2))
    im = jnp.where(zero, b / abs_d, jnp.where(c_big, (b - a * rat1) * scl1, (b * rat2 - a) * scl2))
    return jax.lax.complex(re, im)


@register(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def div(x, y):
    wide = zero_dim_opmath(x, y)
    if wide is not None:
        return elementary.true_divide(*wide).astype(x.dtype)
    # integers divide as floats converted from their own values (int8 / torch.tensor(1000) divides by 1000, not
    # by 1000 as an int8): a 0-dim operand narrows only beside a floating one
    x, y = torch_operands(x, y) if is_float(x) or is_float(y) else ints_as_default_float(x, y)
    dt = jnp.result_type(x, y)
    if jnp.issubdtype(dt, jnp.complexfloating):
        return _complex_div(x, y, dt)
    by_number = _opmath_by_number(x, y, elementary.true_divide)
    if by_number is not None:
        return by_number
    x, y = no_pred(x, y)
    if not is_float(x) and not is_float(y):  # integer and bool division is float division (x / 0 is inf/nan)
        x = to_float(x)
        y = float(y) if type(y) in (bool, int) else to_float(y)
    return elementary.true_divide(x, y)


def _integer_divisor(x, y) -> None:
    """Integer division, remainder and fmod by zero: torch raises ZeroDivisionError (a device-side check
    for tensors and for Scalars, which are program inputs); the divisor as the operation's dtype
    (2**40 is 0 as a uint8)."""
    if not (is_float(x) or is_float(y) or jnp.iscomplexobj(x) or jnp.iscomplexobj(y)):
        require(jnp.asarray(y).astype(jnp.result_type(x, y)) != 0, "ZeroDivisionError")


def _ints_as_float_operand(x, y):
    """An integer/bool tensor divided with a floating tensor as that tensor's dtype first, as torch converts
    operands to the result's dtype (an int64 past float16's range is inf, so int64 // half(2) is nan, where
    converting it to float32 for the computation gave a finite quotient that overflowed to inf)."""
    def strong_float(v):
        return hasattr(v, "dtype") and is_float(v) and not _weak(v) and not jnp.iscomplexobj(v)

    def integral(v):
        return hasattr(v, "dtype") and not is_float(v) and not jnp.iscomplexobj(v)

    if strong_float(y) and integral(x):
        x = to_float(x).astype(y.dtype)
    elif strong_float(x) and integral(y):
        y = to_float(y).astype(x.dtype)
    return x, y


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(x, y, rounding_mode=None):
    if rounding_mode is None:
        return div(x, y)
    wide = zero_dim_opmath(x, y)
    if wide is not None and rounding_mode == "trunc":
        return elementary.truncated_quotient(*wide)
    if wide is not None:
        return _floor_divide_floating(*wide)
    x, y = _ints_as_float_operand(*torch_operands(x, y))
    _integer_divisor(x, y)
    if rounding_mode == "trunc":
        if is_float(x) or is_float(y):
            # (a bool operand through to_float: XLA folded False / 0.0 of a converted bool to 0, not nan)
            x, y = (to_float(v) if hasattr(v, "dtype") and not is_float(v) else v for v in (x, y))
            return elementary.truncated_quotient(_up(x), _up(y))
        # both integral: in their result dtype (uint8 // -1 divides by 255, as torch converts the scalar)
        dt = jnp.result_type(x, y)
        x_, y_ = jnp.asarray(x).astype(dt), jnp.asarray(y).astype(dt)
        q = jnp.floor_divide(x_, y_)
        rem = x_ - q * y_
        return jnp.where((rem != 0) & ((x_ < 0) != (y_ < 0)), q + 1, q)
    return floor_divide(x, y)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(x, y):
    wide = zero_dim_opmath(x, y)
    if wide is not None:
        return _floor_divide_floating(*wide)
    x, y = _ints_as_float_operand(*torch_operands(x, y))
    if is_float(x) or is_float(y):
        # bf16/fp16: divide in fp32 and round once (as torch's CPU/CUDA kernels)
        return _floor_divide_floating(_up(x), _up(y))
    _integer_divisor(x, y)
    return jnp.floor_divide(x, y)


def _floor_divide_floating(x, y):
    """torch's div_floor_floating: the quotient of x - fmod(x, y) (exact), so infinities, NaNs and the
    sign of a zero quotient come out as on CPU (floor(x / y) gives -0.0 for -2.5 // inf, torch -1)."""
    # integer/bool operands as float32 (through uint8: XLA rewrites a converted bool into a select);
    # the dtype before asarray, so a Python float stays weak (float32 with a float32 x)
    x, y = (to_float(a) if hasattr(a, "dtype") and not is_float(a) else a for a in (x, y))
    x, y = promoted(x, y)
    mod = _float_rem(x, y)
    q = elementary.true_divide(x - mod, y)
    q = jnp.where(_sign_not_divisors(mod, y), q - 1, q)
    fq = jnp.floor(q)
    fq = jnp.where(q - fq > 0.5, fq + 1, fq)
    quotient = elementary.true_divide(x, y)  # (the sign of a zero result, and the result of a zero divisor)
    fq = jnp.where(q == 0, copysign(jnp.zeros_like(q), quotient), fq)
    return jnp.where(y == 0, quotient, fq)


def _float_rem(x, y):
    """C's fmod of floating operands as every platform computes it: the sign of x (a zero remainder too), and
    x itself for a finite x over an infinite y. XLA:TPU's remainder gives NaN for x over +-inf and +0.0 for
    -0.0 over y (bench/results/tpu/tpu_semantics_probe.json). XLA:CPU's is C's already: there this adds a select
    and a copysign to a memory-bound op, and every platform builds the same program."""
    r = elementary.rem(x, y)
    r = jnp.where(jnp.isinf(y) & jnp.isfinite(x), x, r)
    return copysign(r, x)


def _sign_not_divisors(mod, y):
    """Where a nonzero fmod's sign is not the divisor's: python-style remainder and floor division move by y."""
    return (mod != 0) & ((mod < 0) != (y < 0))


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(x, y):
    x, y = torch_operands(x, y)
    _integer_divisor(x, y)
    if not (is_float(x) or is_float(y)):
        return jnp.remainder(x, y)
    x, y = promoted(x, y)
    mod = _float_rem(x, y)
    return jnp.where(_sign_not_divisors(mod, y), mod + y, mod)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(x, y):
    x, y = torch_operands(x, y)
    _integer_divisor(x, y)
    if not (is_float(x) or is_float(y)):
        return jnp.fmod(x, y)
    return _float_rem(*promoted(x, y))


# the exponent's value picks the computation (x * x for 2: exact and cheap, where a traced exponent would
# give XLA's general pow, several times slower: RMSNorm's pow(2) at Flux size): these exponents are
# static, keyed by value; any other is a traced input, so a changing exponent compiles nothing (0.5
# too: a schedule passing 0.5 among other values must not compile; its sqrt is selected in-program)
def _pow_static(y) -> bool:
    return type(y) is bool or (type(y) is int and 0 <= y <= 64) or (type(y) is float and y in (1.0, 2.0))


def _scalar_kind(y):
    """The Python type a Scalar exponent had: a number, or a weakly typed traced one (None: a tensor)."""
    if type(y) in (bool, int, float, complex):
        return type(y)
    if getattr(y, "weak_type", False) or getattr(getattr(y, "aval", None), "weak_type", False):
        dt = jnp.result_type(y)
        return (bool if dt == jnp.bool_ else int if jnp.issubdtype(dt, jnp.integer)
                else float if jnp.issubdtype(dt, jnp.floating) else complex)
    return None


def _pow_result_type(x, kind):
    """torch's result dtype of ``tensor ** scalar``: the shortcuts below must compute in it (uint8 ** 2.0
    is float32 ** 2, not a wrapped uint8 product)."""
    xd = jnp.result_type(x)
    if kind is bool:
        return xd
    if kind is int:
        return jnp.int64 if xd == jnp.bool_ else xd
    if kind is float:
        return xd if jnp.issubdtype(xd, jnp.inexact) else jnp.float32
    return xd if jnp.issubdtype(xd, jnp.complexfloating) else jnp.complex64


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, static=("exponent",),
          static_when=_pow_static)
def pow_(x, y):
    """x*x for 2, integer_pow for small ints (static exponents), else XLA's pow in torch's result dtype."""
    x, y = torch_operands(x, y)
    x_int = not is_float(x) and not jnp.iscomplexobj(x)
    y_int = not is_float(y) and not jnp.iscomplexobj(y)
    kind = _scalar_kind(y) if hasattr(x, "dtype") else None
    if kind is None:
        if x_int and y_int:
            return _integer_power(jnp.asarray(x), jnp.asarray(y))
        return _complex_safe_power(x, y)
    dt = _pow_result_type(x, kind)
    if dt == jnp.bool_:  # bool ** bool: x ** True is x, x ** False is True
        return x | jnp.logical_not(y)
    x = (x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x).astype(dt)
    if type(y) in (int, float):
        if y == 2:
            return x * x
        if y == 1:
            return x
        if type(y) is int and 0 <= y <= 64:
            return jax.lax.integer_pow(x, y)
    if kind is int and not jnp.issubdtype(dt, jnp.inexact):
        return _integer_power(x, jnp.asarray(y, dt))
    if kind is complex:
        return _complex_safe_power(x, y)
    y = jnp.asarray(y, dt)
    if is_float(x) and dt != jnp.float16:  # a traced exponent: torch's sqrt/rsqrt forms for +-0.5
        # (sqrt(-0.0) is -0.0 and sqrt(-inf) NaN, where pow gives 0.0 and inf; CPU's float16 kernel calls
        # std::pow for every exponent: (-inf) ** 0.5 is inf there)
        return jnp.where(y == 0.5, jnp.sqrt(x), jnp.where(y == -0.5, jax.lax.rsqrt(x), jnp.power(x, y)))
    return _complex_safe_power(x, y)


def _complex_safe_power(x, y):
    """jnp.power, and for a complex result at a zero base with an exponent of positive real part the 0
    that C++'s std::pow (torch's CPU kernel) gives, where exp(y * log(0)) is NaN."""
    out = jnp.power(x, y)
    if not jnp.iscomplexobj(out):
        return out
    return jnp.where((jnp.asarray(x) == 0) & (jnp.real(jnp.asarray(y)) > 0), jnp.zeros_like(out), out)


def _integer_power(x, y):
    """torch's integer power: a negative exponent gives 1 for 1, +-1 for -1, and 0 otherwise."""
    x, y = jnp.broadcast_arrays(x, y)
    dt = jnp.result_type(x, y)
    x, y = x.astype(dt), y.astype(dt)
    positive = _square_and_multiply(x, jnp.maximum(y, 0))
    odd = (y % 2) != 0
    negative = jnp.where(x == 1, 1, jnp.where(x == -1, jnp.where(odd, -1, 1), 0)).astype(dt)
    return jnp.where(y < 0, negative, positive)


def _square_and_multiply(x, y):
    """x ** y for integer arrays with any non-negative y (jnp.power of a traced integer exponent looks
    at its low bits only), wrapping like torch's integer multiply."""
    def step(_, carry):
        result, base, e = carry
        result = jnp.where((e & 1) != 0, result * base, result)
        return result, base * base, e >> 1

    bits = 8 * jnp.dtype(x.dtype).itemsize
    result, _, _ = jax.lax.fori_loop(0, bits, step, (jnp.ones_like(x), x, y))
    return result


@register(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar, aten.float_power.Scalar)
def float_power(x, y):
    x = jnp.asarray(x)
    cdt = jnp.complex128 if jnp.iscomplexobj(x) or jnp.iscomplexobj(y) else jnp.float64
    return jnp.power(x.astype(cdt), jnp.asarray(y).astype(cdt))


def _cmp(fn, common=True):
    """A binary op in its operands' common dtype by torch's rule; atan2/copysign compute ints as floats."""
    return (lambda x, y: fn(*torch_operands(x, y))) if common else (lambda x, y: fn(x, y))


register(aten.eq.Tensor, aten.eq.Scalar)(_cmp(jnp.equal))
register(aten.ne.Tensor, aten.ne.Scalar)(_cmp(jnp.not_equal))
register(aten.lt.Tensor, aten.lt.Scalar)(_cmp(jnp.less))
register(aten.le.Tensor, aten.le.Scalar)(_cmp(jnp.less_equal))
register(aten.gt.Tensor, aten.gt.Scalar)(_cmp(jnp.greater))
register(aten.ge.Tensor, aten.ge.Scalar)(_cmp(jnp.greater_equal))
register(aten.maximum.default)(_cmp(jnp.maximum))
register(aten.minimum.default)(_cmp(jnp.minimum))
register(aten.fmax.default)(_cmp(jnp.fmax))
register(aten.fmin.default)(_cmp(jnp.fmin))
register(aten.atan2.default)(_cmp(lambda x, y: elementary.arctan2(*torch_operands(to_float(x), to_float(y))), False))
register(aten.hypot.default)(_cmp(elementary.hypot))
register(aten.copysign.Tensor, aten.copysign.Scalar)(_cmp(lambda x, y: copysign(to_float(x), y), False))
register(aten.nextafter.default)(_cmp(jnp.nextafter))
register(aten.logical_and.default)(_cmp(lambda x, y: jnp.logical_and(x != 0, y != 0)))
register(aten.logical_or.default)(_cmp(lambda x, y: jnp.logical_or(x != 0, y != 0)))
register(aten.logical_xor.default)(_cmp(lambda x, y: jnp.logical_xor(x != 0, y != 0)))
# (Scalar_Tensor: ``torch.bitwise_and(300, t)``, a Python number first; torch decomposes it to prims)
register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor)(_cmp(jnp.bitwise_and))
register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor)(_cmp(jnp.bitwise_or))
register(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor)(_cmp(jnp.bitwise_xor))
register(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor,
         aten.__lshift__.Scalar, aten.__lshift__.Tensor)(_cmp(jnp.left_shift))
register(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
         aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Scalar, aten.__rshift__.Tensor)(_cmp(jnp.right_shift))


@register(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def xlogy(x, y):
    # a Python number as the result's dtype first, as CPU's wrapped number (xlogy(half, 70000) is inf there)
    if _number(y) and hasattr(x, "dtype"):
        y = jnp.asarray(y, x.dtype if is_float(x) else jnp.float32)
    if _number(x) and hasattr(y, "dtype"):
        x = jnp.asarray(x, y.dtype if is_float(y) else jnp.float32)
    x, y = torch_operands(to_float(jnp.asarray(x)), to_float(jnp.asarray(y)))
    dt = jnp.result_type(x, y)  # (the log of a float16 y was taken in float16 for a float64 x)
    x, y = x.astype(dt), y.astype(dt)
    return jnp.where(x == 0, jnp.where(jnp.isnan(y), jnp.nan, 0.0), x * elementary.log(y))


@register(aten.heaviside.default)
def heaviside(x, values):
    """values where x is 0, else 1 for x > 0 and 0 below (NaN too). A lowering of its own so the dtype
    checks of parity/refusals.py run (torch's decomposition computed float32 against int16 values, which CPU
    refuses)."""
    x, values = jnp.broadcast_arrays(x, values)
    return jnp.where(x == 0, values, (x > 0).astype(values.dtype))


@register(aten.bitwise_not.default)
def bitwise_not(x):
    return jnp.logical_not(x) if x.dtype == jnp.bool_ else jnp.bitwise_not(x)


@register(aten.logical_not.default)
def logical_not(x):
    return jnp.logical_not(x != 0)


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(cond, x, y):
    return jnp.where(cond, *ints_as_default_float(x, y))


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    """torch's order and ties: ``x < min ? min : x``, then ``x > max ? max : x`` (a tie keeps x, so
    the sign of a zero is x's); a NaN in x or in a bound gives NaN."""
    x, min, max = torch_operands(jnp.asarray(x), min, max)
    dt = jnp.result_type(*[v for v in (x, min, max) if v is not None])
    x = x.astype(dt)
    for bound, beyond in ((min, jnp.less), (max, jnp.greater)):
        if bound is None:
            continue
        bound = jnp.asarray(bound).astype(dt)
        x = jnp.where(beyond(x, bound), bound, x)
        if jnp.issubdtype(dt, jnp.inexact):
            x = jnp.where(jnp.isnan(bound), bound, x)
    return x


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return clamp(x, min=min)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return clamp(x, max=max)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(x, end, weight):
    x, end, weight = (_up(v) for v in torch_operands(x, end, weight))
    # torch's formula: weight < 0.5 ? x + w*(end-x) : end - (end-x)*(1-w)
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * (end - x), end - (end - x) * (1 - weight))


@register(aten.addcmul.default)
def addcmul(x, t1, t2, value=1):
    dt = jnp.result_type(x, t1, t2)
    if not jnp.issubdtype(dt, jnp.inexact) and dt != jnp.bool_:  # torch casts value to the integer dtype
        value = jnp.asarray(value).astype(dt)
    return _up(x) + value * _up(t1) * _up(t2)


@register(aten.addcdiv.default)
def addcdiv(x, t1, t2, value=1):
    return _up(x) + value * (_up(t1) / _up(t2))


# --- unary math ---------------------------------------------------------------------------------
def _float_unary(fn):
    def lower(x):
        x = jnp.asarray(x)
        return fn(upcast(to_float(x)))  # bf16/fp16 in fp32, rounded once by the executor

    return lower


_FLOAT_UNARY = {
    aten.exp: elementary.exp, aten.exp2: elementary.exp2, aten.expm1: elementary.expm1, aten.log: elementary.log,
    aten.log2: elementary.log2, aten.log10: elementary.log10, aten.log1p: elementary.log1p, aten.sqrt: jnp.sqrt,
    aten.rsqrt: jax.lax.rsqrt, aten.sin: jnp.sin, aten.cos: jnp.cos, aten.tan: jnp.tan,
    aten.asin: jnp.arcsin, aten.acos: jnp.arccos, aten.atan: jnp.arctan, aten.sinh: elementary.sinh,
    aten.cosh: elementary.cosh, aten.tanh: elementary.tanh, aten.asinh: elementary.arcsinh, aten.acosh: elementary.arccosh,
    aten.atanh: elementary.arctanh, aten.sigmoid: jax.nn.sigmoid, aten.erf: jax.scipy.special.erf,
    aten.erfc: jax.scipy.special.erfc, aten.erfinv: elementary.erfinv,
    aten.reciprocal: jnp.reciprocal, aten.lgamma: elementary.lgamma,
    aten.digamma: elementary.digamma,  # digamma(±0) is ∓inf on CPU (JAX: NaN)
    aten.i0: jax.scipy.special.i0,
    aten.sinc: jnp.sinc, aten.deg2rad: jnp.deg2rad, aten.rad2deg: jnp.rad2deg,
}
for _op, _fn in _FLOAT_UNARY.items():
    register(_op.default)(_float_unary(_fn))


def _same_unary(fn):
    def lower(x):
        return fn(x)

    return lower


register(aten.neg.default)(_same_unary(jnp.negative))
register(aten.abs.default)(_same_unary(jnp.abs))


def _sign(x):
    """torch's (0 < x) - (x < 0): +0.0 for NaN and -0.0 (jnp.sign keeps both)."""
    if x.dtype == jnp.bool_:
        return x
    if not is_float(x) or jnp.iscomplexobj(x):
        return jnp.sign(x)
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


register(aten.sign.default)(_same_unary(_sign))
register(aten.sgn.default)(_same_unary(lambda x: _sign(x) if not jnp.iscomplexobj(x) else
                                       jnp.where(x == 0, 0, x / jnp.abs(x))))
register(aten.square.default)(_same_unary(lambda x: x * x))
register(aten.floor.default)(_same_unary(lambda x: jnp.floor(x) if is_float(x) else x))
register(aten.ceil.default)(_same_unary(lambda x: jnp.ceil(x) if is_float(x) else x))
register(aten.trunc.default)(_same_unary(lambda x: jnp.trunc(x) if is_float(x) else x))
register(aten.frac.default)(_same_unary(lambda x: x - jnp.trunc(x)))
register(aten.signbit.default)(_same_unary(signbit))
register(aten.isnan.default)(_same_unary(jnp.isnan))
register(aten.isinf.default)(_same_unary(jnp.isinf))
register(aten.isfinite.default)(_same_unary(jnp.isfinite))
register(aten.isposinf.default)(_same_unary(jnp.isposinf))
register(aten.isneginf.default)(_same_unary(jnp.isneginf))
register(aten.conj_physical.default)(_same_unary(jnp.conj))
register(aten.real.default)(_same_unary(jnp.real))
register(aten.imag.default)(_same_unary(jnp.imag))
register(aten.angle.default)(_same_unary(lambda x: jnp.angle(x) if jnp.iscomplexobj(x) else  # angle(-0.0) is 0
                                         jnp.where(x < 0, jnp.pi, 0.0) if not is_float(x) else
                                         jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0.0).astype(x.dtype))))


@register(aten.round.default)
def round_(x):
    return jnp.round(x) if is_float(x) else x


@register(aten.round.decimals)
def round_decimals(x, decimals=0):
    """CPU's kernel: in float32 for float16/bfloat16 (x * 1000 of a half overflowed, and was rounded to the
    half), divided by 10 ** -decimals for negative decimals (multiplying by 0.1, inexact, rounded 25 to 30)."""
    y = upcast(x)
    # the scale behind a barrier: XLA turns a division by a constant into a product with its reciprocal
    # (one ulp off CPU's quotient)
    scale = 10.0 ** abs(decimals) if abs(decimals) <= 308 else float("inf")  # (CPU: std::pow, inf past double)
    scale = scale if scale <= float(jnp.finfo(y.dtype).max) else float("inf")
    scale = jax.lax.optimization_barrier(jnp.asarray(scale, y.dtype))
    if decimals < 0:
        return (jnp.round(y / scale) * scale).astype(x.dtype)
    return (jnp.round(y * scale) / scale).astype(x.dtype)


# --- dtype / fill -------------------------------------------------------------------------------
@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    return jnp.full(x.shape, value, x.dtype)


@register(aten.zero.default)
def zero(x):
    return jnp.zeros(x.shape, x.dtype)


@register(aten.clone.default)
def clone(x, memory_format=None):
    return x


@register(aten.alias_copy.default, aten.lift_fresh_copy.default, aten.detach_copy.default)
def identity_copy(x):
    return x


# the math-bit views (x.conj(), its .imag's negation) as values: what a compiled graph's ``_conj`` computes
register(aten._conj_copy.default, aten._conj_physical.default)(_same_unary(jnp.conj))
register(aten._neg_view_copy.default)(_same_unary(jnp.negative))


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    return jnp.where(mask, jnp.asarray(value).astype(x.dtype), x)


@register(aten.full_like.default)
def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.full(x.shape, fill_value, jdtype(dtype) or x.dtype)


@register(aten.zeros_like.default)
def zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(x.shape, jdtype(dtype) or x.dtype)


@register(aten.ones_like.default)
def ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.ones(x.shape, jdtype(dtype) or x.dtype)


@register(aten._to_copy.default)
def to_copy(x, dtype=None, **kwargs):
    return x if dtype is None else dtypes.astype(x, jdtype(dtype))


@register(prims.convert_element_type.default)
def convert_element_type(x, dtype):
    # AOTAutograd's pass that turns unspecialised Python floats back into tensor ops emits this prim
    return dtypes.astype(x, jdtype(dtype))

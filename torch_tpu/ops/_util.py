"""Small helpers shared by lowerings."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ..runtime import dtypes, platform


def jdtype(torch_dtype):
    return None if torch_dtype is None else dtypes.to_jax_dtype(torch_dtype)


def is_value(v, number) -> bool:
    """``v`` is the Python number ``number`` (False for a traced Scalar, whatever its value)."""
    return type(v) in (int, float, bool) and v == number


def is_float(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def is_low_precision(x) -> bool:
    """bf16, fp16 and the float8 types: torch computes with them in float32 (float8 matmul too)."""
    dt = jnp.result_type(x)
    return jnp.issubdtype(dt, jnp.floating) and dt.itemsize <= 2


def upcast(x):
    """Compute in float32 for bf16/fp16 inputs (as torch's CPU and CUDA kernels do)."""
    return x.astype(jnp.float32) if is_low_precision(x) else x


def no_pred(*xs):
    """Bool arrays among ``xs`` converted to the operands' common dtype through uint8: XLA's simplifier
    rewrites ``convert(bool) * y`` into ``select(bool, y, 0)``, which is wrong when y is inf or NaN
    (False * inf is NaN in torch); a converted uint8 is not rewritten."""
    if not any(hasattr(x, "dtype") and x.dtype == jnp.bool_ for x in xs):
        return xs
    common = jnp.result_type(*xs)
    if common == jnp.bool_:
        return xs
    return tuple(x.astype(jnp.uint8).astype(common) if hasattr(x, "dtype") and x.dtype == jnp.bool_ else x
                 for x in xs)


_SAME_WIDTH_INT = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64, 1: jnp.int8}


def signbit(x):
    """Whether ``x``'s sign bit is set (-0.0 and a negative NaN included), as a comparison of its bits read as
    a signed integer. jnp.signbit shifts those bits instead, and XLA:TPU does not compile a shift of a float64's
    bits ("shift-right-arithmetic with different element types: s32 and u32"; its 64-bit integers are pairs
    of 32-bit words): this form compiles there for every float dtype
    (bench/results/tpu/tpu_signbit_probe.json)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x < 0
    return jax.lax.bitcast_convert_type(x, _SAME_WIDTH_INT[x.dtype.itemsize]) < 0


def copysign(x, y):
    """|x| with ``y``'s sign bit (``signbit``'s form: a float64 ``y`` compiles on a TPU too). Complex operands are
    refused as jnp.copysign refuses them (CPU torch has no complex copysign either)."""
    x, y = promoted(x, y)
    if jnp.iscomplexobj(x):
        raise TypeError(f"copysign does not accept dtype {x.dtype}")
    return jnp.where(signbit(y), -jnp.abs(x), jnp.abs(x))


def _category(dt) -> int:
    if dt == jnp.bool_:
        return 0
    if jnp.issubdtype(dt, jnp.integer):
        return 1
    return 2 if jnp.issubdtype(dt, jnp.floating) else 3


def _weak(x) -> bool:
    """A weakly typed value: a Python number, traced or not (a dynamic Scalar)."""
    return bool(getattr(x, "weak_type", False) or getattr(getattr(x, "aval", None), "weak_type", False))


def _inexact_number(v) -> bool:
    """A Python float or complex, static or traced (a weakly typed dynamic Scalar)."""
    if type(v) in (float, complex):
        return True
    return _weak(v) and jnp.issubdtype(jnp.result_type(v), jnp.inexact)


def ints_as_default_float(*xs):
    """``xs`` with its integer and bool tensors in torch's default dtype (its complex counterpart with a complex
    number) where a Python float or complex meets only integer and bool tensors: torch computes
    ``int_tensor * 0.1`` in float32 with 0.1 rounded to float32. JAX, with 64-bit types on, takes the number
    as float64 there: the program computed in float64 (emulated on a TPU) and rounded, one ulp off CPU in a
    fifth of ``int * 0.1`` and wrong by much more in ``fmod(int, 0.7)``."""
    if not any(_inexact_number(v) for v in xs):
        return xs
    tensors = [v for v in xs if hasattr(v, "dtype") and not _weak(v)]
    if not tensors or any(jnp.issubdtype(v.dtype, jnp.inexact) for v in tensors):
        return xs
    dt = dtypes.to_jax_dtype(torch.get_default_dtype())
    if any(jnp.iscomplexobj(v) for v in xs if _inexact_number(v)):
        dt = jnp.result_type(dt, jnp.complex64)
    return tuple((v.astype(jnp.uint8) if v.dtype == jnp.bool_ else v).astype(dt)
                 if any(v is t for t in tensors) else v for v in xs)


def torch_operands(*xs):
    """``xs`` with torch's operand promotion where it differs from JAX's: a 0-dim tensor does not
    widen the dimensioned operands of its own category (or of a higher one), it is cast to their
    dtype first, as torch's kernels do (an int8 tensor against a 0-dim int64 tensor holding 1000
    computes in int8, the 1000 becoming -24; a float16 tensor against a float64 0-dim threshold
    compares in float16). Python numbers (weakly typed) and None pass through, a float one with integer
    tensors as ``ints_as_default_float`` says. For every elementwise op of two or more tensors whose CPU
    kernel casts its operands to their common dtype (arithmetic, comparisons, min/max, clamp, division,
    pow, atan2, xlogy, lerp: float32 times a float64 0-dim tensor computed in float64 and rounded was one
    ulp off in a fifth of the elements; a uint64 tensor with a 0-dim int64 one is not float64); for a
    complex 0-dim operand with floating tensors see ``_complex_zero_dim``; CPU's mul and division of
    float16/bfloat16 tensors take a 0-dim divisor at float32 instead (``zero_dim_opmath``)."""
    xs = ints_as_default_float(*xs)
    arrays = [x for x in xs if hasattr(x, "ndim") and hasattr(x, "dtype") and not _weak(x)]
    dimmed = [x for x in arrays if x.ndim > 0]
    zero = [x for x in arrays if x.ndim == 0]
    if not dimmed or not zero:
        return xs
    common = jnp.result_type(*dimmed)
    cat = _category(common)
    if cat == 2 and any(_category(z.dtype) == 3 for z in zero):
        return _complex_zero_dim(xs, zero, common)
    if cat == 0 or any(_category(z.dtype) > cat for z in zero):
        return xs  # a 0-dim operand of a higher category takes part in the promotion: JAX's rule holds
    return tuple(x.astype(common) if any(x is z for z in zero) and x.dtype != common
                 and _category(x.dtype) > 0 else x for x in xs)


def _complex_zero_dim(xs, zero, common):
    """A complex 0-dim operand with floating tensors: torch computes in the complex type of the tensors'
    precision (float32 with a complex128 0-dim is complex64; float16's complex32, which JAX lacks, as
    complex64 of the parts rounded to float16; bfloat16 has no complex type: complex64 of the parts as they
    are), where JAX takes complex128."""
    half = common == jnp.float16
    target = jnp.result_type(jnp.float32 if half else common, jnp.complex64)

    def cast(z):
        if half:
            z = jax.lax.complex(jnp.real(z).astype(common).astype(jnp.float32),
                                jnp.imag(z).astype(common).astype(jnp.float32))
        return z.astype(target)

    return tuple(cast(x) if any(x is z for z in zero) and _category(x.dtype) == 3 else x for x in xs)


def zero_dim_opmath(x, y):
    """``(x, y)`` as float32 operands where CPU torch's mul and division kernels take a 0-dim tensor ``y``
    beside a float16/bfloat16 tensor ``x`` at its own value in float32 (as a Python number), computing
    in float32 and rounding once: ``x / torch.tensor(0.1)`` divides by 0.1 as float32, not by 0.1 rounded
    to float16 (one quotient in ten of ``x // 0.1`` differed). Only ``y`` in second place: a 0-dim first
    operand is rounded to the tensor's dtype as by every other op (``torch_operands``). None otherwise."""
    if zero_dim_scalar(x, y):
        return x.astype(jnp.float32), y.astype(jnp.float32)
    return None


def zero_dim_scalar(x, y) -> bool:
    """``y`` is a 0-dim tensor (not of a higher category) beside a float16/bfloat16 tensor ``x``: where CPU
    torch's kernels read it as a scalar at its own value, as a Python number (``zero_dim_opmath``,
    ``as_number``)."""
    return (getattr(y, "ndim", None) == 0 and getattr(x, "ndim", 0) > 0 and is_low_precision(x) and not _weak(y)
            and _category(y.dtype) < 3)


def as_number(y):
    """A 0-dim array as a Python number of its value is traced: weakly typed (CPU's add and sub with an
    ``alpha`` take a 0-dim tensor so beside a float16/bfloat16 tensor)."""
    from jax._src.lax import lax as _lax

    return _lax._convert_element_type(y, y.dtype, weak_type=True)


def to_float(x):
    """Integer/bool inputs of float-valued ops compute in the default float dtype."""
    if is_float(x):
        return x
    x = jnp.asarray(x)
    return (x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x).astype(jnp.float32)


def norm_dim(dim, ndim: int):
    if dim is None:
        return None
    if ndim == 0:  # torch accepts dim 0/-1 on 0-d tensors; there is no axis to reduce
        return ()
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return None
        return tuple(d % max(ndim, 1) for d in dim)
    return dim % max(ndim, 1)


def dims_tuple(dim, ndim: int):
    d = norm_dim(dim, ndim)
    if ndim == 0:
        return ()
    if d is None:
        return tuple(range(ndim))
    return d if isinstance(d, tuple) else (d,)


def precision_of(precision, *operands):
    """torch.set_float32_matmul_precision -> XLA dot precision. The setting is about float32 products, as in
    torch: a product of half operands (``operands``, all bf16/fp16) runs at HIGHEST whatever it says. bfloat16
    products are then exact in float32; XLA:TPU's DEFAULT would first round float16 operands to bfloat16 (3
    mantissa bits fewer: 2.3e-3 relative error on the chip), and it runs float16 at HIGHEST as at HIGH (three
    bfloat16 passes, 1.0e-5 relative error, measured)."""
    if precision in (None, "highest") or (operands and all(_half_or_not_float(o) for o in operands)):
        return jax.lax.Precision.HIGHEST
    if precision == "high":
        return jax.lax.Precision.HIGH
    return jax.lax.Precision.DEFAULT


def _half_or_not_float(x) -> bool:
    return is_low_precision(x) or not jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def exact_integer_products(*operands) -> bool:
    """Whether a product of ``operands`` (a matmul, an einsum, a convolution) is built from multiplies and
    sums instead of XLA's dot or convolution: 64-bit integers in a program built for a TPU, where XLA cannot
    compile either ("While rewriting computation to not contain X64 element types ... not implemented", on
    a v5e) while it compiles 64-bit integer multiplies and sums. The result is the same integers, wrapping
    on overflow as torch's CPU kernels do."""
    return platform.target() == "tpu" and any(
        jnp.issubdtype(jnp.result_type(o), jnp.integer) and jnp.result_type(o).itemsize == 8 for o in operands)


def integer_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **_):
    """``lax.dot_general`` of integers as a broadcast multiply summed over the contracted dimensions (XLA fuses
    the multiply into the sum: the product of every pair is not stored). Its results are laid out as
    dot_general's: batch dimensions, then lhs's free ones, then rhs's."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    nb, nl, nr = len(lb), len(lf), len(rf)
    left = jnp.transpose(lhs, list(lb) + lf + list(lc))
    right = jnp.transpose(rhs, list(rb) + rf + list(rc))
    left = left.reshape(left.shape[:nb + nl] + (1,) * nr + left.shape[nb + nl:])
    right = right.reshape(right.shape[:nb] + (1,) * nl + right.shape[nb:])
    dtype = preferred_element_type or jnp.result_type(lhs, rhs)
    return jnp.sum(left * right, axis=tuple(range(nb + nl + nr, left.ndim)), dtype=dtype)


def dot_general_for(*operands):
    """The ``dot_general`` a product of ``operands`` is built from (jnp.einsum's ``_dot_general``):
    ``integer_dot_general`` where ``exact_integer_products``, else XLA's."""
    return integer_dot_general if exact_integer_products(*operands) else jax.lax.dot_general


def matmul(a, b, precision=None):
    """Matrix product with fp32 accumulation for low-precision inputs."""
    prec = precision_of(precision, a, b)
    if exact_integer_products(a, b):
        # torch.matmul's operand ranks: a vector is a row on the left, a column on the right, dropped after
        left, right = (a[None] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b)
        out = jnp.einsum("...mk,...kn->...mn", left, right, _dot_general=integer_dot_general)
        if b.ndim == 1:
            out = out[..., 0]
        if a.ndim == 1:
            out = out[..., 0] if b.ndim == 1 else out[..., 0, :]
        return out
    if is_low_precision(a) or is_low_precision(b):
        out = jnp.matmul(a, b, precision=prec, preferred_element_type=jnp.float32)
        return dtypes.astype(out, jnp.result_type(a, b))
    return jnp.matmul(a, b, precision=prec)


def promoted(x, y):
    """Both operands as their result dtype (a Python number weakly typed) and broadcast: what jnp's binary
    functions do before they call lax."""
    dt = jnp.result_type(x, y)
    return jnp.broadcast_arrays(jnp.asarray(x, dt), jnp.asarray(y, dt))


def complex_logaddexp(x, y):
    """torch's CPU formula (LogAddExp.h): log1p(exp(min - max)) + max, min/max by real part, so the
    imaginary part is not wrapped into (-pi, pi] (jnp.logaddexp's principal log differed by 2 pi)."""
    x, y = promoted(x, y)
    x_lower = jnp.real(x) < jnp.real(y)  # torch: (x < y) ? (x, y) : (y, x)
    lo, hi = jnp.where(x_lower, x, y), jnp.where(x_lower, y, x)
    lo_r, hi_r = jnp.real(lo), jnp.real(hi)
    nan = jnp.asarray(complex(float("nan"), float("nan")), x.dtype)
    general = jnp.log1p(jnp.exp(lo - hi)) + hi
    inf_same = (~jnp.isfinite(lo_r)) & (lo_r == hi_r)
    out = jnp.where(inf_same, jnp.where(lo_r < 0, lo, jnp.log(jnp.exp(lo) + jnp.exp(hi))), general)
    out = jnp.where(jnp.isnan(hi_r) | jnp.isnan(jnp.imag(hi)), hi, out)
    return jnp.where(jnp.isnan(lo_r) | jnp.isnan(jnp.imag(lo)), nan, out)

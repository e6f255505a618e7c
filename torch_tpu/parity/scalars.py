"""Python numbers CPU kernels store in or compute with a tensor's dtype: past its range they raise
(c10's ``checked_convert``), where the lowerings would compute with inf. A dynamic Scalar is a program
input, so these checks run on every call (``validates_each_call``; ``per_call_check`` builds an entry's)."""
from __future__ import annotations

import torch

from ..ops.registry import aten
from .validators import each_call, validates_each_call
# Ops that store a Scalar into a tensor of a given dtype: torch refuses a value that does not fit
# (c10::checked_convert). The value is a dynamic program input, so this runs on every call.
FILL_VALUE_ARGUMENT = {
    aten.full.default: "fill_value", aten.full_like.default: "fill_value", aten.fill.Scalar: "value",
    aten.masked_fill.Scalar: "value", aten.index_fill.int_Scalar: "value",
}
_C_NAMES = {torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int",
            torch.int64: "int64_t"}


_FLOAT_NAMES = {torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float",
                torch.float64: "double", torch.complex64: "c10::complex<float>",
                torch.complex128: "c10::complex<double>"}


_LARGEST: dict = {}  # floating dtype -> its largest finite value (torch.finfo is slow for every call)


def check_fits(value, dtype: torch.dtype) -> None:
    """Raise torch's error when ``value`` cannot be stored in ``dtype`` without overflow (c10's
    ``overflows``: a finite value past a floating dtype's largest, 70000 as float16 or 1e40 as float32,
    included; infinities and NaN fit a floating dtype)."""
    if type(value) is bool or dtype == torch.bool:
        return
    if type(value) is complex and not dtype.is_complex:
        if value.imag != 0:
            name = {torch.float32: "float"}.get(dtype, _C_NAMES.get(dtype, "double"))
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
        value = value.real
    if dtype in _FLOAT_NAMES:
        largest = _LARGEST.get(dtype) or _LARGEST.setdefault(dtype, torch.finfo(dtype).max)
        parts = (value.real, value.imag) if type(value) is complex else (value,)
        if any(p == p and abs(p) != float("inf") and abs(p) > largest for p in parts):
            raise RuntimeError(f"value cannot be converted to type {_FLOAT_NAMES[dtype]} without overflow")
        return
    if dtype not in _C_NAMES:
        return
    info = torch.iinfo(dtype)
    if type(value) is float:
        ok = value == value and abs(value) != float("inf") and info.min - 1 < value < info.max + 1
    else:
        ok = info.min <= value <= info.max
    if not ok and dtype == torch.uint8 and type(value) is int and -256 < value < 0:
        ok = True  # c10 lets a negative integer wrap into an unsigned type
    if not ok:
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES[dtype]} without overflow")


def per_call_check(func, target_func, out_meta):
    """The checks of dynamic Scalars' values, run on every call (None when there are none): a stored
    Scalar (full, fill_, masked_fill ...) must fit the output dtype, and the op's own per-call validators
    (``validates_each_call``). ``out_meta``: the result's meta or fake tensor."""
    if not isinstance(out_meta, torch.Tensor):
        return None
    dtype = out_meta.dtype
    each = each_call(target_func, dtype)
    name = FILL_VALUE_ARGUMENT.get(target_func)
    if name is None:
        return each
    position = [a.name for a in func._schema.arguments].index(name)

    # CPU fills one float16/bfloat16 element without the range check (its scalar_fill path: a 0-dim
    # torch.full(70000.0) is inf, where two elements raise); masked_fill and index_fill check. (The count
    # from the call's arguments: an entry loaded from disk knows its result's dtype, not its shape.)
    low_fill = dtype in (torch.float16, torch.bfloat16) and target_func in (
        aten.full.default, aten.full_like.default, aten.fill.Scalar)

    def check(args, kwargs):
        value = kwargs[name] if name in kwargs else args[position] if position < len(args) else None
        if type(value) not in (int, float, complex):
            pass
        elif low_fill and type(value) is not complex and _one_element(target_func, args, kwargs):
            pass
        else:
            check_fits(value, dtype)
        if each is not None:
            each(args, kwargs)

    return check


def _one_element(target_func, args, kwargs) -> bool:
    """Whether a full/full_like/fill call makes one element."""
    first = args[0] if args else kwargs.get("size", kwargs.get("self"))
    if target_func is aten.full.default:
        return all(int(n) == 1 for n in first)
    return isinstance(first, torch.Tensor) and first.numel() == 1


@validates_each_call(aten.pow.Tensor_Scalar)
def _integer_power(dtype, x, exponent):
    if not (x.dtype.is_floating_point or x.dtype.is_complex) and type(exponent) is int and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if type(exponent) is int:
        check_fits(exponent, dtype)
    elif type(exponent) is float and dtype in (torch.float16, torch.bfloat16):
        check_fits(exponent, dtype)  # (CPU's half kernels take the exponent as the dtype: 70000 raises)


@validates_each_call(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor,
                     aten.rsub.Scalar)
def _alpha_fits(dtype, x, other, alpha=1, **_):
    # (a float alpha past float16's range: CPU raises, the lowering would give inf; 1, the default, fits every dtype)
    if type(alpha) in (int, float) and alpha != 1:
        check_fits(alpha, dtype)


@validates_each_call(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _bounds_fit(dtype, x, *bounds, **named):
    for b in (*bounds, *named.values()):
        if type(b) in (int, float):  # (clamp(min=1e40) of float32: CPU raises, the lowering would clamp to inf)
            check_fits(b, dtype)


# Scalars CPU kernels convert to the tensor's dtype (checked): past its range they raise, the lowerings
# would compute with inf (threshold's and scatter's values, hardtanh's bounds)
@validates_each_call(aten.threshold.default)
def _threshold_fits(dtype, x, threshold, value):
    for v in (threshold, value):
        if type(v) in (int, float, complex):
            check_fits(v, dtype)


@validates_each_call(aten.hardtanh.default)
def _hardtanh_fits(dtype, x, min_val=-1, max_val=1):
    if dtype == torch.uint8 and any(type(v) in (int, float) and v < 0 for v in (min_val, max_val)):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    for v in (min_val, max_val):
        if type(v) in (int, float, complex):
            check_fits(v, dtype)


@validates_each_call(aten.scatter.value)
def _scatter_value_fits(dtype, x, dim, index, value, **_):
    if type(value) in (int, float, complex):
        check_fits(value, dtype)


# ... or to the dtype they compute in (float32 for float16/bfloat16): addcmul's value, lerp's weight
def _opmath(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@validates_each_call(aten.addcmul.default, aten.addcdiv.default)
def _addc_value_fits(dtype, x, t1, t2, value=1):
    if type(value) not in (int, float, complex):
        return
    if dtype.is_floating_point or dtype.is_complex:
        check_fits(value, _opmath(dtype))
    elif dtype != torch.bool:
        check_fits(value, dtype)


# activations' parameters: CPU converts them to the type it computes in (float for float16/bfloat16), or to
# the dtype itself (hardshrink's lambda); past its range they raise, the lowerings would compute with inf.
# (celu, hardshrink and softshrink are decomposed: parity.decomposition_check runs these checks with the
# input's dtype)
_ACTIVATION_PARAMETERS = {aten.leaky_relu.default: ("negative_slope",), aten.elu.default: ("alpha", "scale", "input_scale"),
                          aten.celu.default: ("alpha",), aten.softplus.default: ("beta", "threshold"),
                          aten.rrelu_with_noise.default: ("lower", "upper"),
                          aten.rrelu_with_noise_functional.default: ("lower", "upper")}


def _parameters_fit(func, names):
    position = {a.name: i for i, a in enumerate(func._schema.arguments)}

    def check(dtype, *args, **kwargs):
        if not dtype.is_floating_point:
            return
        for name in names:
            k = position[name]
            v = kwargs[name] if name in kwargs else args[k] if k < len(args) else None
            if type(v) in (int, float):
                check_fits(v, _opmath(dtype))

    return check


for _op, _names in _ACTIVATION_PARAMETERS.items():
    validates_each_call(_op)(_parameters_fit(_op, _names))


@validates_each_call(aten.celu.default)
def _celu_alpha(dtype, x, alpha=1.0):
    if type(alpha) in (int, float) and alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")


@validates_each_call(aten.hardshrink.default)
def _hardshrink_lambda(dtype, x, lambd=0.5):
    if type(lambd) in (int, float) and dtype.is_floating_point:
        check_fits(lambd, dtype)


@validates_each_call(aten.softshrink.default)
def _softshrink_lambda(dtype, x, lambd=0.5):
    if type(lambd) in (int, float) and dtype.is_floating_point:
        largest = torch.finfo(dtype).max
        if not 0 <= lambd <= largest:
            name = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
                    torch.bfloat16: "BFloat16"}[dtype]
            raise RuntimeError(f"lambda must be in range [0, {largest:g}] for input dtype {name}, but found "
                               f"lambd={lambd:g}")


@validates_each_call(aten.lerp.Scalar)
def _lerp_weight_fits(dtype, x, end, weight):
    if type(weight) in (int, float, complex):
        check_fits(weight, _opmath(dtype))

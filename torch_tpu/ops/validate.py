"""Argument checks that torch's CPU kernels make but its meta kernels do not.

A validator runs on the host when an op's entry is built, once per program key, with the call's own
arguments (tensors, Python values); it raises torch's error for the same input. Register with
``@validates(aten.op.overload, ...)`` (several validators of one op all run); in-place and out= forms use
their functional overload's. Checks of a dynamic Scalar's value (``alpha=300`` on uint8) must run on every
call: register them with ``@validates_each_call`` (they also get the result's dtype).
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from . import dim_checks, registry
from .registry import aten

VALIDATORS: dict = {}


EACH_CALL: dict = {}


def validates(*ops) -> Callable:
    def deco(fn):
        for op in ops:
            VALIDATORS.setdefault(op, []).append(fn)
        return fn

    return deco


def validates_each_call(*ops) -> Callable:
    """``fn(result_dtype, *args, **kwargs)``, run on every call (the values it reads are program inputs)."""
    def deco(fn):
        for op in ops:
            EACH_CALL.setdefault(op, []).append(fn)
        return fn

    return deco


def _own(func, kwargs) -> dict:
    """``kwargs`` without what ``func`` (a functional overload) does not take: an out= form's ``out``."""
    names = {a.name for a in func._schema.arguments}
    return {k: v for k, v in kwargs.items() if k in names} if any(k not in names for k in kwargs) else kwargs


def run(func, args, kwargs) -> None:
    """Every validator of ``func``; an in-place or out= overload without validators of its own (one a
    decomposition runs: ``celu_``) gets its functional overload's, as a lowered one does."""
    if func not in VALIDATORS and registry.mutated_arguments(func):
        func = registry.functional_variant(func) or func
    _limited_unsigned_promotion(func, args, kwargs)
    dim_checks.check(func, args, kwargs)
    own = _out_dtype(func, args, kwargs, _own(func, kwargs))
    for check in VALIDATORS.get(func, ()):
        check(*args, **own)


def checked_decompositions(table: dict) -> dict:
    """A compiled graph's decomposition table whose decompositions of validated ops run the validators
    first: a decomposed call (``hardshrink``, ``upsample_nearest2d.vec``, ``celu``) leaves no node of its
    own for ``check_graph_call``, so a compiled program computed what eager refuses."""
    def validated(op) -> bool:
        if op in VALIDATORS:
            return True
        return bool(registry.mutated_arguments(op)) and registry.functional_variant(op) in VALIDATORS

    return {op: _checked(op, fn) if isinstance(op, torch._ops.OpOverload) and validated(op) else fn
            for op, fn in table.items()}


def _checked(op, fn):
    def decomposition(*args, **kwargs):
        run(op, args, kwargs)
        return fn(*args, **kwargs)

    return decomposition


_ABOVE_TABLE = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)


@contextlib.contextmanager
def python_kernels_validated():
    """While AOTAutograd traces a compiled graph: the validated ops torch decomposes by Python kernels
    at the Autograd key (``hardshrink``, ``upsample_nearest2d``, ``multi_margin_loss``), before the
    decomposition table is consulted, run their validators first (restored on exit)."""
    saved = []
    for op in list(VALIDATORS):
        if not isinstance(op, torch._ops.OpOverload):
            continue
        kernels = getattr(op, "py_kernels", None)  # (torch's OpOverload internals: skipped if they moved)
        for key in _ABOVE_TABLE if isinstance(kernels, dict) else ():
            fn = kernels.get(key)
            if fn is not None:
                saved.append((op, key, fn))
                kernels[key] = _checked(op, fn)
                _clear_dispatch_cache(op)
    try:
        yield
    finally:
        for op, key, fn in saved:
            op.py_kernels[key] = fn
            _clear_dispatch_cache(op)


def _clear_dispatch_cache(op) -> None:
    cache = getattr(op, "_dispatch_cache", None)
    if cache is not None:
        cache.clear()


def _out_dtype(func, args, kwargs, own) -> dict:
    """An out= call of an op with a ``dtype=`` argument left None computes in its out tensor's dtype
    (``cumsum(bool_x, 0, out=bool_y)`` runs the bool kernel, which CPU does not have): ``dtype=`` is it."""
    out = kwargs.get("out")
    if not isinstance(out, torch.Tensor) or own.get("dtype") is not None:
        return own
    names = [a.name for a in func._schema.arguments]
    if "dtype" not in names or names.index("dtype") < len(args):
        return own
    return {**own, "dtype": out.dtype}


_LIMITED_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def _limited_unsigned_promotion(func, args, kwargs) -> None:
    """torch refuses to promote uint16/32/64 with another dtype (``u16 * int64_tensor``); meta kernels
    promote anyway (the result was uint16). The same refusal for a pointwise op's self and other."""
    if not args or torch.Tag.pointwise not in func.tags:
        return
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args), **kwargs)
    x, other = given.get("self"), given.get("other")  # (where's condition is not promoted)
    if isinstance(x, torch.Tensor) and isinstance(other, torch.Tensor) and other.dtype != x.dtype and (
            x.dtype in _LIMITED_UNSIGNED or other.dtype in _LIMITED_UNSIGNED):
        torch.result_type(x, other)  # torch's own error


def each_call(func, dtype):
    """The per-call check of ``func`` (the functional overload) with result dtype ``dtype``, or None."""
    fns = EACH_CALL.get(func)
    if not fns:
        return None
    names = frozenset(a.name for a in func._schema.arguments)

    def check(args, kwargs):
        own = kwargs if names.issuperset(kwargs) else {k: v for k, v in kwargs.items() if k in names}
        for fn in fns:
            fn(dtype, *args, **own)

    return check


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


def check_graph_call(func, target_func, args, kwargs, out_meta) -> None:
    """Every check eager mode makes of one call, for a call in a compiled graph (``args``: the nodes'
    fake values and the graph's constant Scalars), so a compiled program refuses what eager refuses."""
    run(target_func, args, kwargs)
    check = per_call_check(func, target_func, out_meta)
    if check is not None:
        check(args, kwargs)


def corrected_meta(func, args, kwargs, meta_out):
    """torch's meta kernel's result where it disagrees with the CPU kernel: ``bool_tensor ** True`` is
    bool on CPU (the meta kernel says int64); an unbatched multilabel_margin_loss without reduction is
    0-d (the meta kernel says (1,)), an unbatched multi_margin_loss's has the target's shape; ``2 ** x`` is contiguous on CPU (the meta kernel keeps x's layout);
    the ops of ``_cpu_memory_format`` lay their results out channels_last on CPU (the meta kernel: contiguous)."""
    if func is aten.pow.Tensor_Scalar and isinstance(meta_out, torch.Tensor) and meta_out.dtype != torch.bool:
        x = args[0]
        y = args[1] if len(args) > 1 else kwargs.get("exponent")
        if isinstance(x, torch.Tensor) and x.dtype == torch.bool and type(y) is bool:
            return torch.empty(meta_out.shape, dtype=torch.bool, device="meta")
    if func is aten.pow.Scalar and isinstance(meta_out, torch.Tensor) and not meta_out.is_contiguous():
        # ``2 ** x``: CPU's kernel lays the result out contiguously whatever x's strides (the meta kernel
        # follows x's: ``(2 ** x.t()).view(-1)`` failed on the tpu only)
        return torch.empty(meta_out.shape, dtype=meta_out.dtype, device="meta")
    fmt = _cpu_memory_format(func, args)
    if fmt is not None and isinstance(meta_out, torch.Tensor) and meta_out.is_contiguous():
        return torch.empty(meta_out.shape, dtype=meta_out.dtype, device="meta", memory_format=fmt)
    if func is aten.multilabel_margin_loss_forward.default and args[0].dim() <= 1 and \
            (args[2] if len(args) > 2 else kwargs.get("reduction")) == 0:
        return torch.empty((), dtype=meta_out[0].dtype, device="meta"), meta_out[1]  # meta says (1,)
    if func is aten.multi_margin_loss.default and args[0].dim() <= 1 and \
            (args[5] if len(args) > 5 else kwargs.get("reduction", 1)) == 0:
        return torch.empty(args[1].shape, dtype=meta_out.dtype, device="meta")  # the target's shape, as on CPU
    return meta_out


_KEEPS_FORMAT = (aten.reflection_pad2d.default, aten.replication_pad2d.default, aten.reflection_pad3d.default,
                 aten.replication_pad3d.default)


def _cpu_memory_format(func, args):
    """The channels_last format CPU torch gives the result of ``func`` where its meta kernel returns a
    contiguous one, else None: a 2-d convolution (transposed too) whose input or weight is channels_last
    (CPU's mkldnn and slow kernels both), a reflection/replication pad or a roll along dims of a
    channels_last input. (A conv of a channels_last model returned contiguous results: ``.stride()``
    and ``is_contiguous`` differed from CPU, and ``y.permute(0, 2, 3, 1).view(...)`` raised.)"""
    from torch._prims_common import suggest_memory_format

    if func is aten.convolution.default:
        x, w = args[0], args[1]
        if isinstance(x, torch.Tensor) and x.dim() == 4 and torch.channels_last in (
                suggest_memory_format(x), suggest_memory_format(w)):
            return torch.channels_last
        return None
    if func in _KEEPS_FORMAT or (func is aten.roll.default and len(args) > 2 and len(args[2]) > 0):
        fmt = suggest_memory_format(args[0])
        return None if fmt is torch.contiguous_format else fmt
    return None


def _is_bool(v) -> bool:
    return type(v) is bool or (isinstance(v, torch.Tensor) and v.dtype == torch.bool)


@validates(aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar)
def _sub(x, other, alpha=1, **_):
    if _is_bool(x) and _is_bool(other):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(x) or _is_bool(other):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    _alpha(x, other, alpha)


@validates(aten.add.Tensor, aten.add.Scalar)
def _alpha(x, other, alpha=1, **_):
    """torch's alpha_check: alpha's kind must fit the result's dtype."""
    dtype = torch.result_type(x, other) if isinstance(other, torch.Tensor) or isinstance(x, torch.Tensor) \
        else None
    if dtype is None or isinstance(alpha, torch.Tensor):
        return
    if dtype != torch.bool and type(alpha) is bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not (dtype.is_floating_point or dtype.is_complex) and type(alpha) in (float, complex):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if not dtype.is_complex and type(alpha) is complex:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


@validates(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_min.Tensor,
           aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp(x, *bounds, **named):
    def meta(v):
        return torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v

    out = torch.clamp(meta(x), *[meta(b) for b in bounds], **{k: meta(v) for k, v in named.items()})
    if out.is_complex():  # the CPU kernel's check (on a float input CPU torch drops the imaginary part
        raise NotImplementedError("clamp is not supported for complex types")  # while meta says complex)


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


_TYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
               torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
               torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
               torch.complex128: "ComplexDouble", torch.uint16: "UInt16", torch.uint32: "UInt32",
               torch.uint64: "UInt64", **{getattr(torch, n): n.capitalize() for n in (
                   "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")}}
_CPP_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
              torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int",
              torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char",
              torch.bool: "bool", torch.complex64: "c10::complex<float>", torch.complex128: "c10::complex<double>"}


@validates(aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.addbmm.default,
           aten.addmv.default, aten.mv.default, aten.linear.default)
def _matmul_dtypes(*args, **kwargs):
    dts = [a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if len(set(dts)) > 1:
        a, b = dts[0], next(d for d in dts if d != dts[0])
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{_CPP_NAMES.get(a, a)} != {_CPP_NAMES.get(b, b)}")


@validates(aten.cat.default)
def _cat_zero_dim(tensors, dim=0):
    """CPU's message (torch's meta kernel raised an IndexError from inside its shape code)."""
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")


@validates(aten.dot.default, aten.vdot.default)
def _dot_dtypes(x, y):
    if x.dtype != y.dtype:
        def name(d):
            return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.int64: "Long",
                    torch.int32: "Int"}.get(d, str(d).replace("torch.", "").capitalize())

        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {name(x.dtype)} and "
                           f"{name(y.dtype)}")


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
    # (a float alpha past float16's range: CPU raises, the tpu gave inf; 1, the default, fits every dtype)
    if type(alpha) in (int, float) and alpha != 1:
        check_fits(alpha, dtype)


@validates_each_call(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _bounds_fit(dtype, x, *bounds, **named):
    for b in (*bounds, *named.values()):
        if type(b) in (int, float):  # (clamp(min=1e40) of float32: CPU raises, the tpu clamped to inf)
            check_fits(b, dtype)


# Scalars CPU kernels convert to the tensor's dtype (checked): past its range they raise, the tpu computed
# with inf (threshold's and scatter's values, hardtanh's bounds)
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
# the dtype itself (hardshrink's lambda); past its range they raise, the tpu computed with inf. (celu,
# hardshrink and softshrink are decomposed: fallbacks.python_entry runs these checks with the input's dtype)
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


# Scalar-bounded clamp, fmod, remainder, floor division and pow of a Scalar base have no bool CPU kernel
_BOOL_KERNELS = {aten.clamp_min.default: "clamp_min_scalar_cpu", aten.clamp_max.default: "clamp_max_scalar_cpu",
                 aten.fmod.Tensor: "fmod_cpu", aten.fmod.Scalar: "fmod_cpu", aten.remainder.Tensor: "remainder_cpu",
                 aten.remainder.Scalar: "remainder_cpu", aten.remainder.Scalar_Tensor: "remainder_cpu",
                 aten.floor_divide.default: "div_floor_cpu", aten.floor_divide.Scalar: "div_floor_cpu",
                 aten.pow.Scalar: "pow", aten.pow.Tensor_Tensor: "pow"}


def _refuse_bool(func):
    def check(*args, **kwargs):
        values = [a for a in (*args, *kwargs.values())
                  if isinstance(a, torch.Tensor) or type(a) in (bool, int, float, complex)]
        if len(values) < 2 or torch.result_type(values[0], values[1]) != torch.bool:
            return
        name = _BOOL_KERNELS.get(func)
        if func is aten.clamp.default:  # torch.clamp with one bound runs that bound's kernel
            lo = args[1] if len(args) > 1 else kwargs.get("min")
            hi = args[2] if len(args) > 2 else kwargs.get("max")
            name = "clamp_scalar_cpu" if lo is not None and hi is not None else \
                "clamp_min_scalar_cpu" if lo is not None else "clamp_max_scalar_cpu"
        raise NotImplementedError(f'"{name}" not implemented for \'Bool\'')

    return check


for _op in (*_BOOL_KERNELS, aten.clamp.default):
    validates(_op)(_refuse_bool(_op))


@validates(getattr(aten.random, "from"), aten.random.to, getattr(aten.random_, "from"), aten.random_.to)
def _random_bounds(x, *bounds, **_):
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds[:2]
    if high is not None and low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if x.dtype.is_complex:
        raise RuntimeError("check_random_bounds handles only integral, floating-point and boolean types")
    if x.dtype.is_floating_point and x.dtype.itemsize == 1:
        raise NotImplementedError(f"\"random_update_from_to\" not implemented for '{_TYPE_NAMES[x.dtype]}'")
    # CPU's check_from_to_in_range: from and to - 1 must fit the dtype (random_(0, 300) of int8 drew
    # values past 127 and wrapped them; CPU raises)
    info = torch.finfo(x.dtype) if x.dtype.is_floating_point else torch.iinfo(x.dtype) \
        if x.dtype != torch.bool else None
    lo, hi = (0, 1) if info is None else (info.min, info.max)
    for what, v in (("from", low), ("to - 1", None if high is None else high - 1)):
        if v is not None and not lo <= v <= hi:
            raise RuntimeError(f"{what} is out of bounds for {_CPP_NAMES.get(x.dtype, x.dtype)}")


@validates(aten.multinomial.default)
def _multinomial(probs, num_samples, replacement=False, **_):
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > probs.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")


@validates(aten.median.dim, aten.nanmedian.dim)
def _median_dim(x, dim, keepdim=False):
    if x.dim() and x.shape[dim % x.dim()] == 0:
        raise IndexError(f"median(): Expected reduction dim {dim % x.dim()} to have non-zero size.")


@validates(aten.mode.default)
def _mode(x, dim=-1, keepdim=False):
    if x.dim() and x.shape[dim % x.dim()] == 0:
        raise IndexError(f"mode(): Expected reduction dim {dim % x.dim()} to have non-zero size.")


@validates(aten.median.default, aten.nanmedian.default)
def _median_all(x):
    if x.numel() == 0 and not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError("median() input tensor cannot be empty")

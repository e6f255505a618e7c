"""Arguments and dtypes torch's CPU kernels refuse but its meta kernels accept: the same refusal here.

Validators (``validators.validates``) run on the host once per program key with the call's arguments;
only static arguments (dims, dtypes, ``float`` parameters such as uniform_'s bounds) and input
dtypes/shapes are checked here. Values on the device (probabilities, class indices, divisors) are
checked inside the lowerings with ``checks.require``.

Why one module: a table of validators, one refusal each in a few lines, read as a list.
"""
from __future__ import annotations

import math

import torch

from ..ops.registry import aten
from ..runtime.dtypes import CPP_NAMES, TYPE_NAMES
from .arguments import random_bounds
from .validators import validates, validates_each_call

# --- complex inputs: ordering and rounding are not defined ------------------------------------------
_CPU_KERNEL = {"lt": "lt_cpu", "le": "le_cpu", "gt": "gt_cpu", "ge": "ge_cpu", "max": "max_all", "min": "min_all",
               "amax": "max_values_cpu", "amin": "min_values_cpu", "cummax": "cummax_cpu", "cummin": "cummin_cpu",
               "aminmax": "aminmax_cpu", "median": "median_cpu", "nanmedian": "median_cpu",
               "kthvalue": "kthvalue_cpu", "atan2": "atan2_cpu", "round": "round_vml_cpu", "erf": "erf_vml_cpu",
               "remainder": "remainder_cpu", "fmod": "fmod_cpu", "floor_divide": "div_floor_cpu",
               "xlogy": "xlogy_cpu"}
_OWN_MESSAGE = {
    "maximum": "maximum not implemented for complex tensors.",
    "minimum": "minimum not implemented for complex tensors.",
    "fmax": "fmax not implemented for complex tensors.",
    "fmin": "fmin not implemented for complex tensors.",
    "sort": "Sort does not support complex dtypes on CPU",
    "argsort": "Sort does not support complex dtypes on CPU",
    "msort": "Sort does not support complex dtypes on CPU",
    "topk": "topk does not support complex dtypes on CPU",
    "heaviside": "heaviside is not yet implemented for complex tensors.",
    "argmax": "argmax(): does not support complex input",
    "argmin": "argmin(): does not support complex input",
    "sign": "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.",
    "floor": "floor is not supported for complex inputs",
    "ceil": "ceil is not supported for complex inputs",
    "trunc": "trunc is not supported for complex inputs",
    "hardtanh": "clamp is not supported for complex types",
    "relu": "clamp is not supported for complex types",
}
# torch raises RuntimeError for these, NotImplementedError for the dispatch-macro ones
_RUNTIME = {"maximum", "minimum", "fmax", "fmin", "sort", "argsort", "msort", "topk", "heaviside", "argmax",
            "argmin"}


def _complex_name(dtype) -> str:
    return {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
            torch.complex32: "ComplexHalf"}.get(dtype, str(dtype))


def _refuse_complex(name):
    def check(*args, **kwargs):
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor) and a.is_complex():
                if name in _OWN_MESSAGE:
                    msg = _OWN_MESSAGE[name]
                else:
                    msg = f'"{_CPU_KERNEL[name]}" not implemented for \'{_complex_name(a.dtype)}\''
                if name in ("max", "min") and len(args) > 1:  # max.dim / max.other
                    raise RuntimeError(f"{name}(): does not support complex input" if not isinstance(
                        args[1], torch.Tensor) else f"{name}imum not implemented for complex tensors.")
                raise (RuntimeError if name in _RUNTIME else NotImplementedError)(msg)
        # ``float_tensor < (1 + 0j)``: a complex Python number makes the computation complex
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        numbers = [a for a in (*args, *kwargs.values()) if type(a) is complex]
        if tensors and numbers and name in _CPU_KERNEL and name not in ("max", "min"):
            dtype = torch.result_type(tensors[0], numbers[0])
            if dtype.is_complex:
                raise NotImplementedError(f'"{_CPU_KERNEL[name]}" not implemented for \'{_complex_name(dtype)}\'')

    return check


def _functional_overloads(name):
    packet = getattr(aten, name, None)
    if packet is None:
        return []
    out = []
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        if not any(a.is_out for a in ov._schema.arguments) and any(
                str(a.type).startswith("Tensor") for a in ov._schema.arguments):
            out.append(ov)
    return out


for _name in (*_CPU_KERNEL, *_OWN_MESSAGE):
    validates(*_functional_overloads(_name))(_refuse_complex(_name))


# --- random ops: bounds and probabilities given as numbers ----------------------------------------


@validates(aten.randint_like.default, aten.randint_like.low_dtype)
def _randint_like(x, *bounds, **_):
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds[:2]
    if isinstance(high, torch.Tensor) or isinstance(low, torch.Tensor):
        return
    random_bounds(x, low, high)


@validates(aten.uniform_.default, aten.uniform.default)
def _uniform(x, *bounds, **named):
    low = bounds[0] if len(bounds) > 0 else named.get("from", 0.0)
    high = bounds[1] if len(bounds) > 1 else named.get("to", 1.0)
    name = CPP_NAMES.get(x.dtype, str(x.dtype))
    for what, v in (("from", low), ("to", high)):
        if not math.isfinite(v) or (x.dtype.is_floating_point and abs(v) > torch.finfo(x.dtype).max):
            raise RuntimeError(f"{what} is out of bounds for {name}")
    if low > high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low} > to={high}")


@validates(aten.bernoulli.p, aten.bernoulli_.float)
def _bernoulli_p(x, p=0.5, **_):
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")


# --- dtypes that must match -----------------------------------------------------------------------


@validates(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(x, indices, values, accumulate=False):
    if isinstance(values, torch.Tensor) and values.dtype != x.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{TYPE_NAMES.get(x.dtype, x.dtype)} for the destination and "
                           f"{TYPE_NAMES.get(values.dtype, values.dtype)} for the source.")


@validates(aten.index.Tensor, aten.index_put.default)
def _index_into_an_empty_dim(x, indices, *_, **__):
    """An integer index into a dim of size 0, where the result has elements: CPU's IndexError (the lowering's
    gather cannot even be built for it). An empty result is no error, as on CPU (``zeros(0, 3)[:, [5]]``)."""
    tensors = [(d, i) for d, i in enumerate(indices) if isinstance(i, torch.Tensor) and i.dtype != torch.bool]
    if not any(d < x.dim() and x.shape[d] == 0 for d, _ in tensors):
        return
    if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
        return  # (a mask's dims count differently; the mask check speaks for it)
    indexed = {d for d, _ in tensors}
    rest = [s for d, s in enumerate(x.shape) if d not in indexed]
    count = torch.broadcast_shapes(*[i.shape for _, i in tensors]).numel()
    if count and all(rest):
        raise IndexError("index is out of bounds for dimension with size 0")


@validates(aten.masked_select.default)
def _masked_select(x, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    torch.empty(x.shape, device="meta") + torch.empty(mask.shape, device="meta")  # torch's broadcast error


# --- floating-point-only reductions (their meta kernels accept integers) ---------------------------
def _refuse_integral(what):
    def check(x, *_, **__):
        if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
            raise RuntimeError(f"{what} only support floating point and complex dtypes")

    return check


for _name, _what in (("var", "std and var"), ("std", "std and var"), ("var_mean", "var_mean"),
                     ("std_mean", "std_mean")):
    validates(*_functional_overloads(_name))(_refuse_integral(_what))


# --- *_scatter ops: src must have the shape of the view it fills (torch's meta kernels broadcast) ---
def _view_scatter(view_op):
    def check(x, src, *args, **kwargs):
        view = view_op(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta"), *args, **kwargs)
        if tuple(src.shape) != tuple(view.shape):
            raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                               f"{list(src.shape)}, slice size = {list(view.shape)}")
    return check


validates(aten.diagonal_scatter.default)(_view_scatter(aten.diagonal.default))
validates(aten.select_scatter.default)(_view_scatter(aten.select.int))
validates(aten.slice_scatter.default)(_view_scatter(aten.slice.Tensor))


# --- softmax of integers, loss parameters, transposed convolution's output padding ------------------
def _softmax_integral(name):
    """CPU softmax kernels exist for floating dtypes only (``F.softmax(ints, dtype=...)`` converts first)."""
    def check(x, dim, half_to_float=False):
        if x.numel() and not (x.is_floating_point() or x.is_complex()):
            last = x.dim() == 0 or dim % x.dim() == x.dim() - 1
            raise NotImplementedError(f'"{name}{"_lastdim" if last else ""}_kernel_impl" not implemented for '
                                      f"'{TYPE_NAMES.get(x.dtype, x.dtype)}'")

    return check


validates(aten._softmax.default)(_softmax_integral("softmax"))
validates(aten._log_softmax.default)(_softmax_integral("log_softmax"))


@validates(aten.smooth_l1_loss.default)
def _smooth_l1_beta(x, target, reduction=1, beta=1.0):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")


@validates(aten.convolution.default)
def _conv_params(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's check_shape_forward: negative padding was computed (as a crop), zero strides/dilations/groups
    failed with a ZeroDivisionError or an XLA error."""
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if transposed and any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")


@validates(aten.convolution.default)
def _output_padding(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not transposed:
        return
    nd = len(output_padding)
    names = ("depth", "height", "width")[3 - max(nd, 2):]
    pad2 = lambda v, fill: ([fill] * (len(names) - nd)) + list(v)  # noqa: E731 - conv1d runs as 2-d on CPU
    op, st, dl = pad2(output_padding, 0), pad2(stride, 1), pad2(dilation, 1)
    if any(o >= s and o >= d for o, s, d in zip(op, st, dl)):
        got = " ".join([f"output_padding_{n}: {v}" for n, v in zip(names, op)] +
                       [f"stride_{n}: {v}" for n, v in zip(names, st)] +
                       [f"dilation_{n}: {v}" for n, v in zip(names, dl)])
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got {got}")


@validates(aten.histc.default)
def _histc_integral(x, *_, **__):
    """CPU's histc has floating kernels only (the tpu counted integers)."""
    if not x.is_floating_point():
        raise NotImplementedError(f'"histogram_cpu" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')


@validates(aten.threshold.default)
def _threshold_dtypes(x, *_, **__):
    if x.dtype == torch.bool or x.is_complex():
        raise NotImplementedError(f'"threshold_cpu" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')


@validates(aten.addcmul.default)
def _addcmul_bool(x, t1, t2, **_):
    if x.dtype == t1.dtype == t2.dtype == torch.bool:
        raise NotImplementedError("\"addcmul_cpu_out\" not implemented for 'Bool'")


_BOOL_PRODUCT_KERNEL = {aten.mm.default: "addmm_impl_cpu_", aten.addmm.default: "addmm_impl_cpu_",
                        aten.addbmm.default: "addmm_impl_cpu_", aten.linear.default: "addmm_impl_cpu_",
                        aten.bmm.default: "bmm", aten.baddbmm.default: "baddbmm", aten.mv.default: "addmv_impl_cpu",
                        aten.addmv.default: "addmv_impl_cpu", aten.dot.default: "dot", aten.vdot.default: "dot"}


def _refuse_bool_product(kernel):
    def refuse(*args, **kwargs):
        """Matrix products of bools have no CPU (or CUDA) kernel; the lowerings would compute them."""
        if any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args[:3]):
            raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')
    return refuse


for _op, _kernel in _BOOL_PRODUCT_KERNEL.items():
    validates(_op)(_refuse_bool_product(_kernel))


@validates(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode_bool(x, other, rounding_mode=None):
    """A rounding division of bools (bool result) has no CPU kernel (the tpu divided, or asserted a zero)."""
    if rounding_mode is not None and torch.result_type(x, other) == torch.bool:
        name = "div_trunc_cpu" if rounding_mode == "trunc" else "div_floor_cpu"
        raise NotImplementedError(f'"{name}" not implemented for \'Bool\'')


@validates(aten.heaviside.default)
def _heaviside_dtypes(x, values):
    if isinstance(values, torch.Tensor) and values.dtype != x.dtype and not (x.is_complex() or values.is_complex()):
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


@validates(aten._unique2.default, aten._unique.default, aten.unique_dim.default, aten.unique_consecutive.default)
def _unique_complex(x, *args, **kwargs):
    """CPU has no complex unique (the tpu sorted complex values)."""
    if x.is_complex():
        name = "unique_dim" if args and type(args[0]) is int else "unique"  # (unique_dim(x, dim, ...))
        raise NotImplementedError(f'"{name}" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')


@validates(*_functional_overloads("nansum"))
def _nansum_complex(x, *_, dtype=None, **__):
    if x.is_complex():
        raise RuntimeError("nansum on CPU does not support complex inputs")
    if dtype is not None and dtype.is_complex:  # (a real input summed into a complex dtype: no CPU kernel)
        raise NotImplementedError(f'"nansum_cpu" not implemented for \'{TYPE_NAMES.get(dtype, dtype)}\'')


def _refuse_empty(name):
    def check(x, *_, **__):
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               f"Specify the reduction dim with the 'dim' argument.")

    return check


validates(aten.max.default)(_refuse_empty("max"))
validates(aten.min.default)(_refuse_empty("min"))


# --- unary kernels CPU has no bool (or integer) version of --------------------------------------------
_NO_BOOL = {"abs": "abs_cpu", "ceil": "ceil_vml_cpu", "floor": "floor_vml_cpu", "round": "round_vml_cpu",
            "trunc": "trunc_vml_cpu", "frac": "frac_cpu"}


def _refuse_unary(name, kernel):
    def check(x, *_, **__):
        if not isinstance(x, torch.Tensor):
            return
        if x.dtype == torch.bool and name == "relu":
            raise RuntimeError("Boolean inputs not supported for relu")
        if name == "round" and "decimals" in __ and not (x.is_floating_point() or x.is_complex()):
            # round(decimals=) has no integer kernel on CPU (plain round of integers is the identity)
            kernel_name = "round_vml_cpu" if __["decimals"] == 0 else "round_cpu"
            raise NotImplementedError(f'"{kernel_name}" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')
        if x.dtype == torch.bool or (name == "frac" and not (x.is_floating_point() or x.is_complex())):
            if kernel is not None:
                raise NotImplementedError(f'"{kernel}" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')

    return check


for _name, _kernel in (*_NO_BOOL.items(), ("relu", None)):
    validates(*_functional_overloads(_name))(_refuse_unary(_name, _kernel))


# --- binary kernels CPU has for floating dtypes only (or not for bool) --------------------------------
_FLOAT_ONLY = {"hypot": "hypot_cpu", "nextafter": "nextafter_cpu", "logaddexp": "logaddexp_cpu",
               "logaddexp2": "logaddexp2_cpu", "lerp": "lerp_kernel_scalar"}
_NO_BOOL_BINARY = {"bitwise_left_shift": "lshift_cpu", "bitwise_right_shift": "rshift_cpu",
                   "__lshift__": "lshift_cpu", "__rshift__": "rshift_cpu"}


def _refuse_dtype(name, kernel, integers: bool):
    def check(*args, **kwargs):
        values = [a for a in (*args, *kwargs.values())
                  if isinstance(a, torch.Tensor) or type(a) in (bool, int, float)]
        tensors = [a for a in values if isinstance(a, torch.Tensor)]
        if not tensors:
            return
        dtype = torch.result_type(values[0], values[1]) if len(values) > 1 else tensors[0].dtype
        if name == "lerp":  # lerp's kernel is chosen by self's dtype (the weight may be a float Scalar)
            dtype = tensors[0].dtype
        refused = dtype == torch.bool or (integers and not (dtype.is_floating_point or dtype.is_complex))
        if refused:
            if name == "lerp" and len(tensors) > 2:
                kernel_name = "lerp_kernel_tensor"
            else:
                kernel_name = kernel
            raise NotImplementedError(f'"{kernel_name}" not implemented for \'{TYPE_NAMES.get(dtype, dtype)}\'')

    return check


for _name, _kernel in _FLOAT_ONLY.items():
    validates(*_functional_overloads(_name))(_refuse_dtype(_name, _kernel, True))
for _name, _kernel in _NO_BOOL_BINARY.items():
    validates(*_functional_overloads(_name))(_refuse_dtype(_name, _kernel, False))

# bit operations CPU has for integral and bool dtypes only (XLA refused the rest with a JAX TypeError)
_INTEGRAL_BINARY = {"bitwise_and": "bitwise_and_cpu", "bitwise_or": "bitwise_or_cpu",
                    "bitwise_xor": "bitwise_xor_cpu", **_NO_BOOL_BINARY}


def _refuse_inexact(kernel):
    def check(*args, **kwargs):
        values = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) or type(a) in (bool, int, float)]
        if len(values) == 2 and any(isinstance(v, torch.Tensor) for v in values):
            dtype = torch.result_type(values[0], values[1])
            if dtype.is_floating_point or dtype.is_complex:
                raise NotImplementedError(f'"{kernel}" not implemented for \'{TYPE_NAMES.get(dtype, dtype)}\'')

    return check


for _name, _kernel in _INTEGRAL_BINARY.items():
    validates(*_functional_overloads(_name))(_refuse_inexact(_kernel))


# --- kernels CPU has for some dtypes only (special functions, LAPACK, samplers) ---------------------------
_HALF = (torch.float16, torch.bfloat16)
_INTEGRAL = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
_FLOAT_DOUBLE = (torch.float32, torch.float64)
_LAPACK_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _only(*dtypes):
    return lambda dt: dt in dtypes


def _not(*dtypes):
    return lambda dt: dt not in dtypes


_KERNEL_DTYPES = {  # op: (CPU kernel's name, the dtypes it takes)
    "special_ndtri": ("ndtri_cpu", _not(*_HALF)), "special_erfcx": ("erfcx_cpu", _not(*_HALF)),
    "special_log_ndtr": ("log_ndtr_cpu", _not(*_HALF)),
    "special_modified_bessel_i0": ("modified_bessel_i0_cpu", _not(*_HALF)),
    "special_modified_bessel_i1": ("modified_bessel_i1_cpu", _not(*_HALF)),
    "special_spherical_bessel_j0": ("spherical_bessel_j0_cpu", _not(*_HALF)),
    "special_zeta": ("zeta_cpu", _not(*_HALF)),
    "igamma": ("igamma_cpu", _not(*_INTEGRAL)), "igammac": ("igammac_cpu", _not(*_INTEGRAL)),
    "cholesky": ("cholesky_cpu", _only(*_LAPACK_DTYPES)), "geqrf": ("geqrf_cpu", _only(*_LAPACK_DTYPES)), "ormqr": ("ormqr_cpu", _only(*_LAPACK_DTYPES)),
    "linalg_householder_product": ("orgqr_cpu", _only(*_LAPACK_DTYPES)),
    "_standard_gamma": ("gamma_cpu", _only(*_FLOAT_DOUBLE)), "_sample_dirichlet": ("dirichlet", _only(*_FLOAT_DOUBLE)),
    "poisson": ("poisson_cpu", _only(*_FLOAT_DOUBLE, *_HALF)), "binomial": ("binomial_cpu", _only(*_FLOAT_DOUBLE)),
    # resampling (F.interpolate): floating dtypes and uint8 (linear 1-d/3-d and area: no uint8, antialias: no half)
    **dict.fromkeys(("upsample_nearest1d", "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact3d"),
                    ("compute_indices_weights_nearest", _only(*_FLOAT_DOUBLE, *_HALF, torch.uint8))),
    **{n: (f"{n.lstrip('_').replace('_exact', '')}_channels_last", _only(*_FLOAT_DOUBLE, *_HALF, torch.uint8))
       for n in ("upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_bilinear2d")},
    **dict.fromkeys(("upsample_linear1d", "upsample_trilinear3d"), ("compute_indices_weights_linear", _only(*_FLOAT_DOUBLE, *_HALF))),
    **dict.fromkeys(("_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa"),
                    ("compute_index_ranges_weights", _only(*_FLOAT_DOUBLE, torch.uint8))),
    "_adaptive_avg_pool3d": ("adaptive_avg_pool3d_cpu", _only(*_FLOAT_DOUBLE, *_HALF)),
}


def _refuse_kernel_dtypes(kernel, takes):
    def check(*args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        for a in tensors:
            if not takes(a.dtype):
                raise NotImplementedError(f'"{kernel}" not implemented for \'{TYPE_NAMES.get(a.dtype, a.dtype)}\'')
        if kernel == "binomial_cpu" and len(tensors) > 1 and tensors[1].dtype != tensors[0].dtype:
            raise RuntimeError(f"Found dtype {TYPE_NAMES.get(tensors[1].dtype, tensors[1].dtype)} but expected "
                               f"{TYPE_NAMES.get(tensors[0].dtype, tensors[0].dtype)}")

    return check


for _name, (_kernel, _takes) in _KERNEL_DTYPES.items():
    validates(*_functional_overloads(_name))(_refuse_kernel_dtypes(_kernel, _takes))


validates_each_call(aten.upsample_bicubic2d.default)(  # decomposed: checked on each call
    lambda _, *a, **k: _refuse_kernel_dtypes("compute_indices_weights_cubic", _only(*_FLOAT_DOUBLE, *_HALF, torch.uint8))(*a))


@validates(*_functional_overloads("_adaptive_avg_pool2d"))
def _adaptive_avg_pool2d_dtype(x, *_, **__):  # CPU's kernel by the input's suggested memory format
    cl = x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    _refuse_kernel_dtypes(f"adaptive_avg_pool2d{'_channels_last' * cl}", _only(*_FLOAT_DOUBLE, *_HALF))(x)


def _multi_margin_dtypes(kernel, x, weight):
    """CPU's kernels take float and double inputs only, and a weight of the input's dtype."""
    if x.dtype not in _FLOAT_DOUBLE:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{TYPE_NAMES.get(x.dtype, x.dtype)}\'')
    if isinstance(weight, torch.Tensor) and weight.dtype != x.dtype:
        raise RuntimeError(f"expected scalar type {TYPE_NAMES.get(x.dtype)} but found "
                           f"{TYPE_NAMES.get(weight.dtype, weight.dtype)}")


@validates(*_functional_overloads("multi_margin_loss"))
def _multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1, **_):
    _multi_margin_dtypes("multi_margin_loss_cpu_kernel", self, weight)


@validates(*_functional_overloads("multi_margin_loss_backward"))
def _multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=1, **_):
    _multi_margin_dtypes("multi_margin_loss_backward_cpu_kernel", self, weight)


# --- bool inputs CPU kernels refuse (meta kernels accept) ---------------------------------------------
_BOOL_REFUSED = {
    "argmax": (RuntimeError, "argmax(): does not support bool input"),
    "argmin": (RuntimeError, "argmin(): does not support bool input"),
    "topk": (RuntimeError, "topk does not support bool dtypes on CPU"),
    "median": (NotImplementedError, "\"median_cpu\" not implemented for 'Bool'"),
    "nanmedian": (NotImplementedError, "\"median_cpu\" not implemented for 'Bool'"),
    "kthvalue": (NotImplementedError, "\"kthvalue_cpu\" not implemented for 'Bool'"),
}


def _refuse_bool(name):
    error, message = _BOOL_REFUSED[name]

    def check(x, *_, **__):
        if isinstance(x, torch.Tensor) and x.dtype == torch.bool:
            raise error(message)

    return check


for _name in _BOOL_REFUSED:
    validates(*_functional_overloads(_name))(_refuse_bool(_name))


# --- argument dtypes CPU kernels check and meta kernels do not -----------------------------------------
@validates(aten.masked_scatter.default)
def _masked_scatter_mask(x, mask, source):
    if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:  # (the meta kernel accepts uint8)
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{TYPE_NAMES.get(mask.dtype, mask.dtype)}")


@validates(aten.complex.default, aten.polar.default)
def _complex_parts(a, b):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype \
            and a.is_floating_point() and b.is_floating_point():
        raise RuntimeError(f"Expected object of scalar type {TYPE_NAMES.get(a.dtype, a.dtype)} but got scalar "
                           f"type {TYPE_NAMES.get(b.dtype, b.dtype)} for second argument")


def _index_func_shapes(func):
    def check(x, dim, index, source, *_, **__):
        _index_source_shape(func, x, dim, index, source)
    return check


def _index_source_shape(func, x, dim, index, source):
    """torch's index_func_meta_impl checks: a wrongly shaped source was broadcast into the result."""
    d = dim % x.dim() if x.dim() else 0
    if not (d == 0 or d < source.dim()):
        raise RuntimeError(f"{func}_(): Indexing dim {dim} is out of bounds of the source tensor with dim "
                           f"{source.dim()}")
    n = 1 if source.dim() == 0 else source.shape[d]
    if index.numel() != n:
        raise RuntimeError(f"{func}_(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                           f"({n}), for dim: {dim}")
    xs, ss = list(x.shape), list(source.shape)
    if source.dim() and x.dim():
        del xs[d], ss[d]
    if xs != ss:
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}")


@validates(aten.index_copy.default)
def _index_copy_dims(x, dim, index, source):
    """A source of another dimensionality than self (neither a scalar): CPU's IndexError (the meta kernel's is a
    RuntimeError)."""
    if x.dim() and source.dim() and x.dim() != source.dim():
        raise IndexError(f"index_copy_(): When source and destination are not scalars, their dimensionality must "
                         f"match. Source dimensionality ({source.dim()}), destination dimensionality ({x.dim()})")


validates(aten.index_add.default)(_index_func_shapes("index_add"))
validates(aten.index_reduce.default)(_index_func_shapes("index_reduce"))


@validates(aten.multinomial.default)
def _multinomial_dtype(probs, *_, **__):
    if not probs.is_floating_point():  # (an int64 tensor was sampled from)
        raise RuntimeError("multinomial only supports floating-point dtypes for input, got: "
                           f"{TYPE_NAMES.get(probs.dtype, probs.dtype)}")


@validates(aten.scatter_reduce.two)
def _scatter_reduce_bool(x, dim, index, src, reduce, include_self=True):
    if x.dtype == torch.bool and reduce == "mean":
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")


@validates(aten.index_reduce.default)
def _index_reduce_bool(x, dim, index, source, reduce, include_self=True):
    if x.dtype == torch.bool and not include_self:
        raise NotImplementedError("\"index_reduce_func_exclude_input_init\" not implemented for 'Bool'")
    if x.dtype == torch.bool and reduce == "mean":
        raise NotImplementedError("\"div_floor_cpu\" not implemented for 'Bool'")

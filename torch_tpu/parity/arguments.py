"""Arguments CPU torch refuses where torch's meta kernels and the lowerings take them: subtraction of
bools, an alpha of the wrong kind, mixed matmul dtypes, bool inputs of kernels without a bool instance,
random bounds outside the dtype, empty reduction dims, a reduction's ``dim=[]``, factory dtypes without a
CPU kernel (``arange``/``linspace`` of bool)."""
from __future__ import annotations

import torch

from ..ops.registry import aten
from ..runtime.dtypes import CPP_NAMES, TYPE_NAMES
from .validators import LIMITED_UNSIGNED, validates


@validates(aten.logsumexp.default, aten.logsumexp.out)
def _logsumexp_of_no_dims(x, dim, keepdim=False, *_, **__):
    """``logsumexp(x, dim=[])``: the CPU kernel reduces every dim into a kept-dims maximum it cannot add to
    its result, and raises; the meta kernel says (1, 1), which the lowering would return."""
    if isinstance(dim, (list, tuple)) and len(dim) == 0 and not keepdim and x.dim() > 0:
        raise RuntimeError(f"logsumexp(dim=[]): output with shape [] doesn't match the broadcast shape "
                           f"{[1] * x.dim()}")


def _float8(dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def _refuse_factory(kernel, refused):
    def check(*_, dtype=None, **__):
        if dtype is not None and refused(dtype):
            raise NotImplementedError(f'"{kernel}" not implemented for \'{TYPE_NAMES.get(dtype, dtype)}\'')
    return check


# CPU has no bool, complex, uint16/32/64 or float8 arange, no bool, uint16/32/64 or float8 linspace/logspace
validates(aten.arange.default, aten.arange.start, aten.arange.start_step)(_refuse_factory(
    "arange_cpu", lambda d: d in (torch.bool, *LIMITED_UNSIGNED) or d.is_complex or _float8(d)))
for _name in ("linspace", "logspace"):
    validates(*[getattr(getattr(aten, _name), o) for o in getattr(aten, _name).overloads() if "out" not in o])(
        _refuse_factory(f"{_name}_cpu", lambda d: d in (torch.bool, *LIMITED_UNSIGNED) or _float8(d)))


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
    if all(b is None for b in bounds + tuple(named.values())):
        # ``x.clamp()``: CPU's RuntimeError (torch's reference raises a ValueError)
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")

    def meta(v):
        return torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v

    out = torch.clamp(meta(x), *[meta(b) for b in bounds], **{k: meta(v) for k, v in named.items()})
    if out.is_complex():  # the CPU kernel's check (on a float input CPU torch drops the imaginary part
        raise NotImplementedError("clamp is not supported for complex types")  # while meta says complex)


@validates(aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.addbmm.default,
           aten.addmv.default, aten.mv.default, aten.linear.default)
def _matmul_dtypes(*args, **kwargs):
    dts = [a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if len(set(dts)) > 1:
        a, b = dts[0], next(d for d in dts if d != dts[0])
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{CPP_NAMES.get(a, a)} != {CPP_NAMES.get(b, b)}")


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
def random_bounds(x, *bounds, **_):
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds[:2]
    if high is not None and low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if x.dtype.is_complex:
        raise RuntimeError("check_random_bounds handles only integral, floating-point and boolean types")
    if x.dtype.is_floating_point and x.dtype.itemsize == 1:
        raise NotImplementedError(f"\"random_update_from_to\" not implemented for '{TYPE_NAMES[x.dtype]}'")
    # CPU's check_from_to_in_range: from and to - 1 must fit the dtype (random_(0, 300) of int8 drew
    # values past 127 and wrapped them; CPU raises)
    info = torch.finfo(x.dtype) if x.dtype.is_floating_point else torch.iinfo(x.dtype) \
        if x.dtype != torch.bool else None
    lo, hi = (0, 1) if info is None else (info.min, info.max)
    for what, v in (("from", low), ("to - 1", None if high is None else high - 1)):
        if v is not None and not lo <= v <= hi:
            raise RuntimeError(f"{what} is out of bounds for {CPP_NAMES.get(x.dtype, x.dtype)}")


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


def _empty_dim(name: str, x, dim, as_given: bool = False) -> None:
    """CPU's reductions without an identity (max, argmax, kthvalue ...) over a dim of size 0: an IndexError
    naming it (``as_given``: as the call wrote it, as amax/amin do; else wrapped), where torch's meta kernels
    raise a RuntimeError or nothing at all."""
    if x.dim() and x.shape[dim % x.dim()] == 0:
        raise IndexError(f"{name}: Expected reduction dim {dim if as_given else dim % x.dim()} to have non-zero size.")


def _dim_reduction(name):
    def check(x, dim, keepdim=False):
        _empty_dim(f"{name}()", x, dim)
    return check


validates(aten.min.dim)(_dim_reduction("min"))
validates(aten.max.dim)(_dim_reduction("max"))


@validates(aten.kthvalue.default)
def _kthvalue(x, k, dim=-1, keepdim=False):
    _empty_dim("kthvalue()", x, dim)


def _arg_reduction(name):
    def check(x, dim=None, keepdim=False):
        if dim is not None:
            _empty_dim(f"{name}()", x, dim)
        elif x.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    return check


validates(aten.argmax.default)(_arg_reduction("argmax"))
validates(aten.argmin.default)(_arg_reduction("argmin"))


def _extremum(name):
    def check(x, dim=(), keepdim=False):
        dims = [dim] if type(dim) is int else list(dim or ())
        if not dims and x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                               f"reduction dim with the 'dim' argument.")
        for d in dims:
            _empty_dim(f"{name}()", x, d, as_given=True)
    return check


validates(aten.amax.default)(_extremum("amax"))
validates(aten.amin.default)(_extremum("amin"))


@validates(aten.aminmax.default)
def _aminmax(x, *, dim=None, keepdim=False):
    if dim is not None:
        _empty_dim("aminmax", x, dim)
    elif x.numel() == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                           "identity.")


@validates(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def _nll_loss_weight(x, target, weight, reduction, ignore_index):
    """A class weight of another length than the classes: CPU's RuntimeError (torch's decomposition asserts)."""
    classes = x.shape[-1] if x.dim() <= 2 else x.shape[1]
    if weight is not None and weight.numel() != classes:
        if x.dim() == 4:
            raise RuntimeError("weight tensor should be defined either for all or no classes")
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got "
                           f"weight tensor of shape: {list(weight.shape)}")


@validates(aten._scaled_mm.default)
def _scaled_mm_inputs(a, b, scale_a, scale_b, *_, **__):
    """CPU's _scaled_mm takes float8 matrices only: any other is no scaling recipe it knows (a ValueError, where
    the meta kernel raises a RuntimeError)."""
    def name(t):
        return TYPE_NAMES.get(t.dtype, str(t.dtype))

    if not (_float8(a.dtype) and _float8(b.dtype)):
        raise ValueError(
            "Invalid scaling configuration.\n- For TensorWise scaling, a and b should be float8, scales should be "
            "float and singletons.\n- For RowWise scaling, a and b should be float8, scales should be float, "
            f"scale_a should be ({a.shape[0]}, 1) and scale_b should be (1, {b.shape[1]}), and both should be "
            f"contiguous.\nGot mat_a.dtype()={name(a)}, mat_b.dtype()={name(b)}")


def _upsample_overloads():
    names = ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
             "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
             "upsample_bicubic2d", "upsample_trilinear3d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa")
    return [getattr(getattr(aten, n), o) for n in names if hasattr(aten, n)
            for o in getattr(aten, n).overloads() if "out" not in o and "backward" not in o]


@validates(*_upsample_overloads())
def _upsample_empty(x, *_, **__):
    """An input without channels or with an empty spatial dim: CPU's kernels refuse it (the meta kernels return
    an empty result)."""
    if x.dim() > 1 and x.shape[1] == 0:
        raise RuntimeError(f"Non-empty {x.dim()}D data tensor expected but got a tensor with sizes {list(x.shape)}")
    spatial = x.shape[2:]
    if 0 in spatial:
        names = "DHW"[3 - len(spatial):] if len(spatial) <= 3 else ""
        sizes = ", ".join(f"{n}: {s}" for n, s in zip(names, spatial))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({sizes})")


@validates(aten.mode.default)
def _mode(x, dim=-1, keepdim=False):
    if x.dim() and x.shape[dim % x.dim()] == 0:
        raise IndexError(f"mode(): Expected reduction dim {dim % x.dim()} to have non-zero size.")


@validates(aten.median.default, aten.nanmedian.default)
def _median_all(x):
    if x.numel() == 0 and not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError("median() input tensor cannot be empty")

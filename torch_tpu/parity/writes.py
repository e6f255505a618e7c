"""What CPU kernels refuse of the tensor an op writes, which torch's meta kernels and decompositions do not
check: an in-place result of another shape than ``self`` or of a dtype ``self`` cannot hold
(``int_tensor.mul_(1.5)``); an out= tensor of another dtype than the result's where the CPU kernel demands
the result's own (most CPU kernels cast the result into a wider out= tensor: ``torch.add(a, b,
out=wider)``; the ones below refuse)."""
from __future__ import annotations

import torch

from ..ops.registry import aten
from ..runtime.dtypes import CPP_NAMES, TYPE_NAMES

# out= forms whose CPU kernels demand the result's own dtype (no cast into another out= dtype)
_EXACT_OUT = {aten.complex.out: "complex", aten.polar.out: "complex", aten.aminmax.out: "structured"}
# (found by running every OpInfo with an out= form on CPU with a wider out= dtype: these raised, the tpu
# cast the result into out=)
_EXACT_OUT.update(dict.fromkeys((
    aten._linalg_eigh.eigenvalues, aten._linalg_slogdet.sign, aten._linalg_solve_ex.result, aten.amax.out,
    aten.amin.out, aten.avg_pool3d.out, aten.conj_physical.out, aten.diag_embed.out, aten.frexp.Tensor_out,
    aten.gelu.out, aten.hardshrink.out, aten.heaviside.out, aten.histc.out, aten.histogram.bin_ct_out,
    aten.histogram.bins_tensor_out, aten.index_add.out, aten.index_copy.out, aten.linalg_cross.out,
    aten.linalg_lu.out, aten.linalg_lu_factor_ex.out, aten.linalg_lu_solve.out, aten.linalg_qr.out,
    aten.lu_unpack.out, aten.nan_to_num.out, aten.neg.out, aten.ormqr.out, aten.renorm.out,
    aten.round.decimals_out, aten.round.out, aten.scatter_reduce.two_out, aten.slice_scatter.out,
    aten.softmax.int_out, aten._softmax.out, aten._log_softmax.out, aten.log_softmax.int_out, aten.softplus.out,
    aten.softshrink.out, aten.sort.values, aten.sort.values_stable, aten.take.out, aten.tril.out, aten.triu.out,
    aten.unfold_copy.out, aten.topk.values, aten.kthvalue.values, aten.max.dim_max, aten.min.dim_min,
    aten.mm.out, aten.bmm.out, aten.addmm.out, aten.baddbmm.out, aten.mv.out, aten.dot.out, aten.vdot.out),
    "structured"))
# (the same sweep with half/float32/float64/int64 inputs into every other float out= dtype)
_EXACT_OUT.update(dict.fromkeys((
    aten.index_select.out, aten.cummax.out, aten.cummin.out, aten.logcumsumexp.out, aten.log_sigmoid.out,
    aten.log_sigmoid_forward.output, aten.mode.values, aten.median.dim_values, aten.nanmedian.dim_values,
    aten.native_batch_norm.out, aten.clamp.out, aten.nll_loss.out,
    aten.nll_loss_forward.output, aten.searchsorted.Tensor_out, aten.searchsorted.Scalar_out,
    aten.bucketize.Tensor_out), "structured"))


def demands_exact_out(func) -> bool:
    return func in _EXACT_OUT


def check_exact_out(func, target_func, meta_args, meta_kwargs) -> None:
    kind = _EXACT_OUT.get(func)
    if kind is None:
        return
    outs = [v for k, v in meta_kwargs.items() if k not in {a.name for a in target_func._schema.arguments}]
    try:
        result = target_func(*meta_args, **{k: v for k, v in meta_kwargs.items()
                                            if k in {a.name for a in target_func._schema.arguments}})
    except Exception:  # noqa: BLE001 - the out= meta kernel reports bad arguments itself
        return
    results = result if isinstance(result, (tuple, list)) else (result,)
    for r, out in zip(results, outs):
        if isinstance(out, torch.Tensor) and isinstance(r, torch.Tensor) and r.dtype != out.dtype:
            if kind == "complex":
                raise RuntimeError(f"Expected object of scalar type {TYPE_NAMES.get(r.dtype, r.dtype)} but got "
                                   f"scalar type {TYPE_NAMES.get(out.dtype, out.dtype)} for argument 'out'")
            raise RuntimeError(f"Expected out tensor to have dtype {CPP_NAMES.get(r.dtype, r.dtype)}, but got "
                               f"{CPP_NAMES.get(out.dtype, out.dtype)} instead")


# out= forms whose CPU kernels refuse inputs they cannot cast into out= with a TypeError of their own (torch's
# out= wrapper, which the tpu runs, raises a RuntimeError): the op's name in CPU's message
_CAST_OUT_TYPE_ERROR = {aten.cat.out: "torch.cat()"}


def _refuse_cat_out_cast(func, meta_args, out) -> None:
    """``torch.cat(float_tensors, out=int_tensor)``: CPU's TypeError."""
    tensors = meta_args[0] if meta_args else None
    if not tensors or not isinstance(out, torch.Tensor):
        return
    result = tensors[0].dtype
    for t in tensors[1:]:
        result = torch.promote_types(result, t.dtype)
    if not torch.can_cast(result, out.dtype):
        raise TypeError(f"{_CAST_OUT_TYPE_ERROR[func]}: input types can't be cast to the desired output type "
                        f"{TYPE_NAMES.get(out.dtype, out.dtype)}")


def check_inplace_result(func, target_func, meta_args, meta_kwargs) -> None:
    """An in-place op stores its result into ``self``: torch refuses a result dtype that cannot be cast to
    ``self``'s (``int_tensor.mul_(float_tensor)``), which meta kernels do not check. ``target_func``: the
    functional overload; the arguments are meta tensors (called before the in-place meta kernel)."""
    check_exact_out(func, target_func, meta_args, meta_kwargs)
    if func in _CAST_OUT_TYPE_ERROR:
        _refuse_cat_out_cast(func, meta_args, meta_kwargs.get("out"))
    if target_func is func or not func._schema.name.endswith("_") or not meta_args:
        return
    self_meta = meta_args[0]
    try:
        result_meta = target_func(*meta_args, **meta_kwargs)
    except Exception:  # noqa: BLE001 - the in-place meta kernel reports bad arguments itself
        return
    if isinstance(result_meta, (tuple, list)):
        result_meta = result_meta[0] if result_meta else None
    if not isinstance(result_meta, torch.Tensor) or not isinstance(self_meta, torch.Tensor):
        return
    if tuple(result_meta.shape) != tuple(self_meta.shape) and func not in _RESIZES_SELF \
            and torch.Tag.inplace_view not in func.tags:  # (squeeze_, resize_as_ ... change self's shape)
        # ``x.clamp_max_(y)`` with x [5, 1] and y [5]: CPU refuses a result of another shape than self
        # (the functional result was written back over self)
        refuse_inplace_shape(result_meta.shape, self_meta.shape)
    refuse_inplace_cast(result_meta.dtype, self_meta.dtype)


def refuse_inplace_shape(result_shape, self_shape) -> None:
    """torch's refusal of an in-place op whose result broadcasts past ``self``'s shape."""
    if tuple(result_shape) != tuple(self_shape):
        raise RuntimeError(f"output with shape {list(self_shape)} doesn't match the broadcast shape "
                           f"{list(result_shape)}")


# in-place ops whose CPU kernels resize self to the result (no broadcast-shape check)
_RESIZES_SELF = {aten.addbmm_.default}


def refuse_inplace_cast(result_dtype: torch.dtype, self_dtype: torch.dtype) -> None:
    """torch's refusal of an in-place op whose result dtype cannot be cast to ``self``'s."""
    if result_dtype != self_dtype and not torch.can_cast(result_dtype, self_dtype):
        raise RuntimeError(f"result type {TYPE_NAMES.get(result_dtype, result_dtype)} can't be cast to "
                           f"the desired output type {TYPE_NAMES.get(self_dtype, self_dtype)}")

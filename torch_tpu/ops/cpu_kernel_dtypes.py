"""The dtypes torch's CPU kernels have no instance for, aten op by aten op.

A CPU kernel without an instance for a dtype raises ``NotImplementedError: "<kernel>" not implemented for
'<Type>'`` (``logsigmoid`` of int64, ``gelu`` of bool, ``softmax`` of complex64); an XLA lowering would
compute something instead (``logsigmoid`` of int64 gave zeros). ``REFUSED`` below is recorded from torch
itself by ``scripts/record_cpu_kernel_dtypes.py``: per overload, the dtypes its kernel dispatches on
(``dispatch_keys``) that CPU refused. A key is recorded only when the refusal names its very dtype, so
a call CPU computes by promotion (``pow(bool_tensor, 2.5)`` in float) has another key.
"""
from __future__ import annotations

import torch


def _category(dtype) -> int:  # numbers promote a tensor only across: bool < int < float < complex
    return 0 if dtype == torch.bool else 3 if dtype.is_complex else 2 if dtype.is_floating_point else 1


def _promote_number(dtype, number):
    kind = _number_kind(number)
    if kind <= _category(dtype):
        return dtype
    if kind == 1:
        return torch.int64
    if kind == 2:
        return torch.get_default_dtype()
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _name(dtype) -> str:
    return str(dtype).split(".")[1]


def _number_kind(number) -> int:
    return 1 if isinstance(number, int) else 2 if isinstance(number, float) else 3


def dispatch_keys(func, args, kwargs) -> dict[str, torch.dtype]:
    """What ``func``'s CPU kernel may dispatch on for these arguments, as {key: the key's dtype}. With a
    ``dtype=`` argument, ``dtype:<name>``. Else ``self:<name>`` (its first tensor's, as kernels whose
    numbers are parameters: ``hardshrink(x, 0.5)``), ``promoted:<name>`` (the promoted dtype of its
    tensors and numbers, as elementwise kernels) when that differs, and ``exact:`` (every tensor's dtype
    and the types of the numbers that promote them) for when the rule cannot be told apart:
    ``bincount(float)`` is refused for its input, not for a float ``weights``. Each key ends with the
    call's string and bool arguments, which choose kernels too (``scatter_reduce``'s "mean" has none
    for bool, its "sum" has)."""
    given = {a.name: a.default_value for a in func._schema.arguments if a.has_default_value()}
    given.update(zip((a.name for a in func._schema.arguments), args), **kwargs)
    modes = "".join(f"|{v}" for v in given.values() if isinstance(v, (str, bool)))
    if isinstance(given.get("dtype"), torch.dtype):
        return {f"dtype:{_name(given['dtype'])}{modes}": given["dtype"]}
    tensors, numbers = [], []
    for v in given.values():
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, torch.Tensor):
                tensors.append(t.dtype)
            elif isinstance(t, (int, float, complex)) and not isinstance(t, bool) and not isinstance(v, (list, tuple)):
                numbers.append(t)
    if not tensors:
        return {}
    promoted = tensors[0]
    for d in tensors[1:]:
        promoted = torch.promote_types(promoted, d)
    promoting = [n for n in numbers if _number_kind(n) > _category(promoted)]
    exact = ",".join(map(_name, tensors)) + "".join(f";{type(n).__name__}" for n in promoting)
    for n in promoting:
        promoted = _promote_number(promoted, n)
    keys = {f"self:{_name(tensors[0])}{modes}": tensors[0], f"exact:{exact}{modes}": promoted}
    if promoted != tensors[0]:
        keys[f"promoted:{_name(promoted)}{modes}"] = promoted
    return keys


def recorded_key(func, args, kwargs, refused: torch.dtype) -> str | None:
    """The key to record for a CPU refusal of ``refused``: ``promoted:`` or ``self:`` where they differ
    and one names it; ``self:`` for one tensor and no Scalar argument (no number can promote it);
    else ``exact:``."""
    keys = dispatch_keys(func, args, kwargs)
    by_kind = {k.split(":")[0]: (k, d) for k, d in keys.items()}
    if "dtype" in by_kind:
        return by_kind["dtype"][0] if by_kind["dtype"][1] == refused else None
    if "promoted" in by_kind:
        return next((k for k, d in (by_kind["promoted"], by_kind["self"]) if d == refused), None)
    if by_kind["self"][1] != refused:
        return None
    tensors = sum(1 for a in func._schema.arguments if "Tensor" in str(a.type))
    scalars = any("Scalar" in str(a.type) for a in func._schema.arguments)
    return by_kind["self"][0] if tensors == 1 and not scalars else by_kind["exact"][0]


def refused_kernel(func, args, kwargs) -> tuple[str, torch.dtype] | None:
    """(CPU kernel's name, the refused dtype) when CPU torch refuses this call's dtype, else None."""
    table = REFUSED.get(str(func))
    if table:
        for key, dtype in dispatch_keys(func, args, kwargs).items():
            if key in table:
                return table[key], dtype
    return None


def _type_name(dtype) -> str:
    from .validate import _TYPE_NAMES

    return _TYPE_NAMES.get(dtype, str(dtype))


def register() -> None:
    """A validator per recorded overload (overloads this torch does not have are skipped): it raises CPU's
    error for a refused call."""
    from .validate import validates

    for name in REFUSED:
        _, packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is None:
            continue

        def check(*args, _op=op, **kwargs):
            refused = refused_kernel(_op, args, kwargs)
            if refused is not None:
                raise NotImplementedError(f"\"{refused[0]}\" not implemented for '{_type_name(refused[1])}' ({_op})")

        validates(op)(check)


# --- generated by scripts/record_cpu_kernel_dtypes.py: do not edit below this line
# (torch 2.13.0)
REFUSED = {
    'aten._adaptive_avg_pool2d.default': {'self:bool': 'adaptive_avg_pool2d', 'self:complex128': 'adaptive_avg_pool2d', 'self:complex64': 'adaptive_avg_pool2d', 'self:int16': 'adaptive_avg_pool2d', 'self:int32': 'adaptive_avg_pool2d', 'self:int64': 'adaptive_avg_pool2d', 'self:int8': 'adaptive_avg_pool2d', 'self:uint8': 'adaptive_avg_pool2d'},
    'aten._adaptive_avg_pool3d.default': {'self:bool': 'adaptive_avg_pool3d_cpu', 'self:complex128': 'adaptive_avg_pool3d_cpu', 'self:complex64': 'adaptive_avg_pool3d_cpu', 'self:int16': 'adaptive_avg_pool3d_cpu', 'self:int32': 'adaptive_avg_pool3d_cpu', 'self:int64': 'adaptive_avg_pool3d_cpu', 'self:int8': 'adaptive_avg_pool3d_cpu', 'self:uint8': 'adaptive_avg_pool3d_cpu'},
    'aten._batch_norm_with_update.default': {'exact:complex128,complex128,complex128,complex128,complex128': 'batch_norm', 'exact:complex64,complex64,complex64,complex64,complex64': 'batch_norm', 'self:bool': 'batch_norm', 'self:int16': 'batch_norm', 'self:int32': 'batch_norm', 'self:int64': 'batch_norm', 'self:int8': 'batch_norm', 'self:uint8': 'batch_norm'},
    'aten._cdist_forward.default': {'exact:bfloat16,bfloat16': 'cdist', 'exact:float16,float16': 'cdist'},
    'aten._ctc_loss.Tensor': {'exact:bfloat16,int64,int64,int64|True': 'ctc_loss_cpu', 'exact:complex128,int64,int64,int64|True': 'ctc_loss_cpu', 'exact:complex64,int64,int64,int64|True': 'ctc_loss_cpu', 'exact:float16,int64,int64,int64|True': 'ctc_loss_cpu', 'exact:int64,int64,int64,int64|True': 'ctc_loss_cpu', 'self:bool|True': 'ctc_loss_cpu', 'self:int16|True': 'ctc_loss_cpu', 'self:int32|True': 'ctc_loss_cpu', 'self:int8|True': 'ctc_loss_cpu', 'self:uint8|True': 'ctc_loss_cpu'},
    'aten._ctc_loss.default': {'exact:bfloat16,int64|False': 'ctc_loss_cpu', 'exact:bfloat16,int64|True': 'ctc_loss_cpu', 'exact:complex128,int64|False': 'ctc_loss_cpu', 'exact:complex128,int64|True': 'ctc_loss_cpu', 'exact:complex64,int64|False': 'ctc_loss_cpu', 'exact:complex64,int64|True': 'ctc_loss_cpu', 'exact:float16,int64|False': 'ctc_loss_cpu', 'exact:float16,int64|True': 'ctc_loss_cpu', 'exact:int64,int64|False': 'ctc_loss_cpu', 'exact:int64,int64|True': 'ctc_loss_cpu', 'self:bool|False': 'ctc_loss_cpu', 'self:bool|True': 'ctc_loss_cpu', 'self:int16|False': 'ctc_loss_cpu', 'self:int16|True': 'ctc_loss_cpu', 'self:int32|False': 'ctc_loss_cpu', 'self:int32|True': 'ctc_loss_cpu', 'self:int8|False': 'ctc_loss_cpu', 'self:int8|True': 'ctc_loss_cpu', 'self:uint8|False': 'ctc_loss_cpu', 'self:uint8|True': 'ctc_loss_cpu'},
    'aten._histogramdd_bin_edges.default': {'exact:bfloat16|False': 'histogramdd', 'exact:bfloat16|True': 'histogramdd', 'exact:bool|False': 'histogramdd', 'exact:bool|True': 'histogramdd', 'exact:complex128|False': 'histogramdd', 'exact:complex128|True': 'histogramdd', 'exact:complex64|False': 'histogramdd', 'exact:complex64|True': 'histogramdd', 'exact:float16|False': 'histogramdd', 'exact:float16|True': 'histogramdd', 'exact:int16|False': 'histogramdd', 'exact:int16|True': 'histogramdd', 'exact:int32|False': 'histogramdd', 'exact:int32|True': 'histogramdd', 'exact:int64|False': 'histogramdd', 'exact:int64|True': 'histogramdd', 'exact:int8|False': 'histogramdd', 'exact:int8|True': 'histogramdd', 'exact:uint8|False': 'histogramdd', 'exact:uint8|True': 'histogramdd'},
    'aten._histogramdd_from_bin_tensors.default': {'exact:bool,bool,bool,bool,bool,bool|False': 'histogram_cpu', 'exact:complex128,complex128,complex128,complex128,complex128,complex128|False': 'histogram_cpu', 'exact:complex64,complex64,complex64,complex64,complex64,complex64|False': 'histogram_cpu', 'exact:int16,int16,int16,int16,int16,int16|False': 'histogram_cpu', 'exact:int32,int32,int32,int32,int32,int32|False': 'histogram_cpu', 'exact:int64,int64,int64,int64,int64,int64|False': 'histogram_cpu', 'exact:int8,int8,int8,int8,int8,int8|False': 'histogram_cpu', 'exact:uint8,uint8,uint8,uint8,uint8,uint8|False': 'histogram_cpu'},
    'aten._linalg_det.default': {'self:bfloat16': 'lu_cpu', 'self:float16': 'lu_cpu'},
    'aten._linalg_eigh.default': {'self:bfloat16|U|True': 'linalg_eigh_cpu', 'self:bool|U|True': 'linalg_eigh_cpu', 'self:float16|U|True': 'linalg_eigh_cpu', 'self:int16|U|True': 'linalg_eigh_cpu', 'self:int32|U|True': 'linalg_eigh_cpu', 'self:int64|U|True': 'linalg_eigh_cpu', 'self:int8|U|True': 'linalg_eigh_cpu', 'self:uint8|U|True': 'linalg_eigh_cpu'},
    'aten._linalg_solve_ex.default': {'exact:bfloat16,bfloat16|True|False': 'lu_cpu', 'exact:float16,float16|True|False': 'lu_cpu'},
    'aten._linalg_svd.default': {'self:bfloat16|False|True': 'linalg_svd_cpu', 'self:float16|False|True': 'linalg_svd_cpu'},
    'aten._log_softmax.default': {'self:bool|False': 'log_softmax_kernel_impl', 'self:complex128|False': 'log_softmax_kernel_impl', 'self:complex64|False': 'log_softmax_kernel_impl', 'self:int16|False': 'log_softmax_kernel_impl', 'self:int32|False': 'log_softmax_kernel_impl', 'self:int64|False': 'log_softmax_kernel_impl', 'self:int8|False': 'log_softmax_kernel_impl', 'self:uint8|False': 'log_softmax_kernel_impl'},
    'aten._native_batch_norm_legit.default': {'exact:complex128,complex128,complex128,complex128,complex128|False': 'batch_norm', 'exact:complex128,complex128,complex128,complex128,complex128|True': 'batch_norm', 'exact:complex64,complex64,complex64,complex64,complex64|False': 'batch_norm', 'exact:complex64,complex64,complex64,complex64,complex64|True': 'batch_norm', 'self:bool|False': 'batch_norm', 'self:bool|True': 'batch_norm', 'self:int16|False': 'batch_norm', 'self:int16|True': 'batch_norm', 'self:int32|False': 'batch_norm', 'self:int32|True': 'batch_norm', 'self:int64|False': 'batch_norm', 'self:int64|True': 'batch_norm', 'self:int8|False': 'batch_norm', 'self:int8|True': 'batch_norm', 'self:uint8|False': 'batch_norm', 'self:uint8|True': 'batch_norm'},
    'aten._pdist_forward.default': {'self:bfloat16': 'pdist', 'self:float16': 'pdist'},
    'aten._prelu_kernel.default': {'exact:bool,bool': 'prelu_cpu', 'exact:complex128,complex128': 'prelu_cpu', 'exact:complex64,complex64': 'prelu_cpu', 'exact:int16,int16': 'prelu_cpu', 'exact:int32,int32': 'prelu_cpu', 'exact:int64,int64': 'prelu_cpu', 'exact:int8,int8': 'prelu_cpu', 'exact:uint8,uint8': 'prelu_cpu'},
    'aten._safe_softmax.default': {'self:complex128': 'softmax_lastdim_kernel_impl', 'self:complex64': 'softmax_lastdim_kernel_impl'},
    'aten._softmax.default': {'self:bool|False': 'softmax_kernel_impl', 'self:complex128|False': 'softmax_kernel_impl', 'self:complex64|False': 'softmax_kernel_impl', 'self:int16|False': 'softmax_kernel_impl', 'self:int32|False': 'softmax_kernel_impl', 'self:int64|False': 'softmax_kernel_impl', 'self:int8|False': 'softmax_kernel_impl', 'self:uint8|False': 'softmax_kernel_impl'},
    'aten._softmax_backward_data.default': {'exact:complex128,complex128': 'softmax_backward_lastdim_kernel_impl', 'exact:complex64,complex64': 'softmax_backward_lastdim_kernel_impl', 'exact:int16,int16': 'softmax_backward_lastdim_kernel_impl', 'exact:int32,int32': 'softmax_backward_lastdim_kernel_impl', 'exact:int64,int64': 'softmax_backward_lastdim_kernel_impl', 'exact:int8,int8': 'softmax_backward_lastdim_kernel_impl', 'exact:uint8,uint8': 'softmax_backward_lastdim_kernel_impl', 'self:bool': 'softmax_backward_lastdim_kernel_impl'},
    'aten._sparse_mm_reduce_impl.default': {'exact:bool,bool|amax': 'spmm_reduce_kernel', 'exact:bool,bool|mean': 'spmm_reduce_kernel', 'exact:bool,bool|sum': 'spmm_reduce_kernel', 'exact:complex128,complex128|amax': 'spmm_reduce_kernel', 'exact:complex128,complex128|mean': 'spmm_reduce_kernel', 'exact:complex128,complex128|sum': 'spmm_reduce_kernel', 'exact:complex64,complex64|amax': 'spmm_reduce_kernel', 'exact:complex64,complex64|mean': 'spmm_reduce_kernel', 'exact:complex64,complex64|sum': 'spmm_reduce_kernel', 'exact:int16,int16|amax': 'spmm_reduce_kernel', 'exact:int16,int16|mean': 'spmm_reduce_kernel', 'exact:int16,int16|sum': 'spmm_reduce_kernel', 'exact:int32,int32|amax': 'spmm_reduce_kernel', 'exact:int32,int32|mean': 'spmm_reduce_kernel', 'exact:int32,int32|sum': 'spmm_reduce_kernel', 'exact:int64,int64|amax': 'spmm_reduce_kernel', 'exact:int64,int64|mean': 'spmm_reduce_kernel', 'exact:int64,int64|sum': 'spmm_reduce_kernel', 'exact:int8,int8|amax': 'spmm_reduce_kernel', 'exact:int8,int8|mean': 'spmm_reduce_kernel', 'exact:int8,int8|sum': 'spmm_reduce_kernel', 'exact:uint8,uint8|amax': 'spmm_reduce_kernel', 'exact:uint8,uint8|mean': 'spmm_reduce_kernel', 'exact:uint8,uint8|sum': 'spmm_reduce_kernel'},
    'aten._trilinear.default': {'self:bool': 'bmm'},
    'aten._unique2.default': {'self:complex128|False|False|False': 'unique', 'self:complex64|False|False|False': 'unique'},
    'aten._upsample_bilinear2d_aa.default': {'self:bfloat16|False': 'compute_index_ranges_weights', 'self:bool|False': 'compute_index_ranges_weights', 'self:complex128|False': 'compute_index_ranges_weights', 'self:complex64|False': 'compute_index_ranges_weights', 'self:float16|False': 'compute_index_ranges_weights', 'self:int16|False': 'compute_index_ranges_weights', 'self:int32|False': 'compute_index_ranges_weights', 'self:int64|False': 'compute_index_ranges_weights', 'self:int8|False': 'compute_index_ranges_weights'},
    'aten._upsample_nearest_exact1d.default': {'self:bool': 'compute_indices_weights_nearest', 'self:complex128': 'compute_indices_weights_nearest', 'self:complex64': 'compute_indices_weights_nearest', 'self:int16': 'compute_indices_weights_nearest', 'self:int32': 'compute_indices_weights_nearest', 'self:int64': 'compute_indices_weights_nearest', 'self:int8': 'compute_indices_weights_nearest'},
    'aten.abs.default': {'self:bool': 'abs_cpu'},
    'aten.adaptive_max_pool2d.default': {'self:bool': 'adaptive_max_pool2d', 'self:complex128': 'adaptive_max_pool2d', 'self:complex64': 'adaptive_max_pool2d', 'self:int16': 'adaptive_max_pool2d', 'self:int32': 'adaptive_max_pool2d', 'self:int64': 'adaptive_max_pool2d', 'self:int8': 'adaptive_max_pool2d', 'self:uint8': 'adaptive_max_pool2d'},
    'aten.adaptive_max_pool3d.default': {'self:bool': 'adaptive_max_pool3d_cpu', 'self:complex128': 'adaptive_max_pool3d_cpu', 'self:complex64': 'adaptive_max_pool3d_cpu', 'self:int16': 'adaptive_max_pool3d_cpu', 'self:int32': 'adaptive_max_pool3d_cpu', 'self:int64': 'adaptive_max_pool3d_cpu', 'self:int8': 'adaptive_max_pool3d_cpu', 'self:uint8': 'adaptive_max_pool3d_cpu'},
    'aten.addbmm.default': {'self:bool': 'addmm_impl_cpu_'},
    'aten.addcmul.default': {'self:bool': 'addcmul_cpu_out'},
    'aten.addmm.default': {'self:bool': 'addmm_impl_cpu_'},
    'aten.addmv.default': {'self:bool': 'addmv_impl_cpu'},
    'aten.amax.default': {'self:complex128|False': 'max_values_cpu', 'self:complex128|True': 'max_values_cpu', 'self:complex64|False': 'max_values_cpu', 'self:complex64|True': 'max_values_cpu'},
    'aten.amin.default': {'self:complex128|False': 'min_values_cpu', 'self:complex128|True': 'min_values_cpu', 'self:complex64|False': 'min_values_cpu', 'self:complex64|True': 'min_values_cpu'},
    'aten.aminmax.default': {'self:complex128|False': 'aminmax_cpu', 'self:complex128|True': 'aminmax_cpu', 'self:complex64|False': 'aminmax_cpu', 'self:complex64|True': 'aminmax_cpu'},
    'aten.atan2.default': {'exact:complex128,complex128': 'atan2_cpu', 'exact:complex64,complex64': 'atan2_cpu'},
    'aten.avg_pool2d.default': {'self:bool|False|True': 'avg_pool2d', 'self:bool|True|False': 'avg_pool2d', 'self:bool|True|True': 'avg_pool2d', 'self:complex128|False|True': 'avg_pool2d', 'self:complex128|True|False': 'avg_pool2d', 'self:complex128|True|True': 'avg_pool2d', 'self:complex64|False|True': 'avg_pool2d', 'self:complex64|True|False': 'avg_pool2d', 'self:complex64|True|True': 'avg_pool2d', 'self:int16|False|True': 'avg_pool2d', 'self:int16|True|False': 'avg_pool2d', 'self:int16|True|True': 'avg_pool2d', 'self:int32|False|True': 'avg_pool2d', 'self:int32|True|False': 'avg_pool2d', 'self:int32|True|True': 'avg_pool2d', 'self:int8|False|True': 'avg_pool2d', 'self:int8|True|False': 'avg_pool2d', 'self:int8|True|True': 'avg_pool2d', 'self:uint8|False|True': 'avg_pool2d', 'self:uint8|True|False': 'avg_pool2d', 'self:uint8|True|True': 'avg_pool2d'},
    'aten.avg_pool3d.default': {'self:bfloat16|False|True': 'avg_pool3d_out_frame', 'self:bfloat16|True|False': 'avg_pool3d_out_frame', 'self:bfloat16|True|True': 'avg_pool3d_out_frame', 'self:bool|False|True': 'avg_pool3d_out_frame', 'self:bool|True|False': 'avg_pool3d_out_frame', 'self:bool|True|True': 'avg_pool3d_out_frame', 'self:complex128|False|True': 'avg_pool3d_out_frame', 'self:complex128|True|False': 'avg_pool3d_out_frame', 'self:complex128|True|True': 'avg_pool3d_out_frame', 'self:complex64|False|True': 'avg_pool3d_out_frame', 'self:complex64|True|False': 'avg_pool3d_out_frame', 'self:complex64|True|True': 'avg_pool3d_out_frame', 'self:float16|False|True': 'avg_pool3d_out_frame', 'self:float16|True|False': 'avg_pool3d_out_frame', 'self:float16|True|True': 'avg_pool3d_out_frame', 'self:int16|False|True': 'avg_pool3d_out_frame', 'self:int16|True|False': 'avg_pool3d_out_frame', 'self:int16|True|True': 'avg_pool3d_out_frame', 'self:int32|False|True': 'avg_pool3d_out_frame', 'self:int32|True|False': 'avg_pool3d_out_frame', 'self:int32|True|True': 'avg_pool3d_out_frame', 'self:int8|False|True': 'avg_pool3d_out_frame', 'self:int8|True|False': 'avg_pool3d_out_frame', 'self:int8|True|True': 'avg_pool3d_out_frame', 'self:uint8|False|True': 'avg_pool3d_out_frame', 'self:uint8|True|False': 'avg_pool3d_out_frame', 'self:uint8|True|True': 'avg_pool3d_out_frame'},
    'aten.baddbmm.default': {'self:bool': 'baddbmm'},
    'aten.binary_cross_entropy.default': {'exact:complex128,complex128': 'binary_cross_entropy', 'exact:complex64,complex64': 'binary_cross_entropy', 'exact:int16,int16': 'binary_cross_entropy', 'exact:int32,int32': 'binary_cross_entropy', 'exact:int64,int64': 'binary_cross_entropy', 'exact:int8,int8': 'binary_cross_entropy', 'exact:uint8,uint8': 'binary_cross_entropy', 'self:bool': 'binary_cross_entropy'},
    'aten.binary_cross_entropy_with_logits.default': {'exact:complex128,complex128': 'log_sigmoid_cpu', 'exact:complex64,complex64': 'log_sigmoid_cpu', 'exact:int16,int16': 'log_sigmoid_cpu', 'exact:int32,int32': 'log_sigmoid_cpu', 'exact:int64,int64': 'log_sigmoid_cpu', 'exact:int8,int8': 'log_sigmoid_cpu', 'exact:uint8,uint8': 'log_sigmoid_cpu', 'self:bool': 'log_sigmoid_cpu'},
    'aten.bincount.default': {'exact:bfloat16': 'bincount_cpu', 'exact:complex128': 'bincount_cpu', 'exact:complex64': 'bincount_cpu', 'exact:float16': 'bincount_cpu', 'exact:float32': 'bincount_cpu', 'exact:float64': 'bincount_cpu', 'self:bool': 'bincount_cpu'},
    'aten.bitwise_and.Tensor': {'exact:bfloat16,bfloat16': 'bitwise_and_cpu', 'exact:complex128,complex128': 'bitwise_and_cpu', 'exact:complex64,complex64': 'bitwise_and_cpu', 'exact:float16,float16': 'bitwise_and_cpu', 'exact:float32,float32': 'bitwise_and_cpu', 'exact:float64,float64': 'bitwise_and_cpu'},
    'aten.bitwise_left_shift.Tensor': {'exact:bfloat16,bfloat16': 'lshift_cpu', 'exact:bool,bool': 'lshift_cpu', 'exact:complex128,complex128': 'lshift_cpu', 'exact:complex64,complex64': 'lshift_cpu', 'exact:float16,float16': 'lshift_cpu', 'exact:float32,float32': 'lshift_cpu', 'exact:float64,float64': 'lshift_cpu'},
    'aten.bitwise_not.default': {'self:bfloat16': 'bitwise_not_cpu', 'self:complex128': 'bitwise_not_cpu', 'self:complex64': 'bitwise_not_cpu', 'self:float16': 'bitwise_not_cpu', 'self:float32': 'bitwise_not_cpu', 'self:float64': 'bitwise_not_cpu'},
    'aten.bitwise_or.Tensor': {'exact:bfloat16,bfloat16': 'bitwise_or_cpu', 'exact:complex128,complex128': 'bitwise_or_cpu', 'exact:complex64,complex64': 'bitwise_or_cpu', 'exact:float16,float16': 'bitwise_or_cpu', 'exact:float32,float32': 'bitwise_or_cpu', 'exact:float64,float64': 'bitwise_or_cpu'},
    'aten.bitwise_right_shift.Tensor': {'exact:bfloat16,bfloat16': 'rshift_cpu', 'exact:bool,bool': 'rshift_cpu', 'exact:complex128,complex128': 'rshift_cpu', 'exact:complex64,complex64': 'rshift_cpu', 'exact:float16,float16': 'rshift_cpu', 'exact:float32,float32': 'rshift_cpu', 'exact:float64,float64': 'rshift_cpu'},
    'aten.bitwise_xor.Tensor': {'exact:bfloat16,bfloat16': 'bitwise_xor_cpu', 'exact:complex128,complex128': 'bitwise_xor_cpu', 'exact:complex64,complex64': 'bitwise_xor_cpu', 'exact:float16,float16': 'bitwise_xor_cpu', 'exact:float32,float32': 'bitwise_xor_cpu', 'exact:float64,float64': 'bitwise_xor_cpu'},
    'aten.bmm.default': {'exact:bool,bool': 'addmm_impl_cpu_'},
    'aten.bucketize.Tensor': {'exact:bool,bool|False|False': 'searchsorted_out_cpu', 'exact:bool,bool|False|True': 'searchsorted_out_cpu', 'exact:bool,bool|True|False': 'searchsorted_out_cpu', 'exact:complex128,complex128|False|False': 'searchsorted_out_cpu', 'exact:complex128,complex128|False|True': 'searchsorted_out_cpu', 'exact:complex128,complex128|True|False': 'searchsorted_out_cpu', 'exact:complex64,complex64|False|False': 'searchsorted_out_cpu', 'exact:complex64,complex64|False|True': 'searchsorted_out_cpu', 'exact:complex64,complex64|True|False': 'searchsorted_out_cpu'},
    'aten.ceil.default': {'self:bool': 'ceil_vml_cpu'},
    'aten.celu.default': {'self:bool': 'elu_cpu', 'self:complex128': 'elu_cpu', 'self:complex64': 'elu_cpu', 'self:int16': 'elu_cpu', 'self:int32': 'elu_cpu', 'self:int64': 'elu_cpu', 'self:int8': 'elu_cpu', 'self:uint8': 'elu_cpu'},
    'aten.cholesky.default': {'self:bfloat16|False': 'cholesky_cpu', 'self:bfloat16|True': 'cholesky_cpu', 'self:bool|False': 'cholesky_cpu', 'self:bool|True': 'cholesky_cpu', 'self:float16|False': 'cholesky_cpu', 'self:float16|True': 'cholesky_cpu', 'self:int16|False': 'cholesky_cpu', 'self:int16|True': 'cholesky_cpu', 'self:int32|False': 'cholesky_cpu', 'self:int32|True': 'cholesky_cpu', 'self:int64|False': 'cholesky_cpu', 'self:int64|True': 'cholesky_cpu', 'self:int8|False': 'cholesky_cpu', 'self:int8|True': 'cholesky_cpu', 'self:uint8|False': 'cholesky_cpu', 'self:uint8|True': 'cholesky_cpu'},
    'aten.cholesky_inverse.default': {'self:bfloat16|False': 'cholesky_inverse_out_cpu', 'self:bfloat16|True': 'cholesky_inverse_out_cpu', 'self:bool|False': 'cholesky_inverse_out_cpu', 'self:bool|True': 'cholesky_inverse_out_cpu', 'self:float16|False': 'cholesky_inverse_out_cpu', 'self:float16|True': 'cholesky_inverse_out_cpu', 'self:int16|False': 'cholesky_inverse_out_cpu', 'self:int16|True': 'cholesky_inverse_out_cpu', 'self:int32|False': 'cholesky_inverse_out_cpu', 'self:int32|True': 'cholesky_inverse_out_cpu', 'self:int64|False': 'cholesky_inverse_out_cpu', 'self:int64|True': 'cholesky_inverse_out_cpu', 'self:int8|False': 'cholesky_inverse_out_cpu', 'self:int8|True': 'cholesky_inverse_out_cpu', 'self:uint8|False': 'cholesky_inverse_out_cpu', 'self:uint8|True': 'cholesky_inverse_out_cpu'},
    'aten.cholesky_solve.default': {'exact:bfloat16,bfloat16|False': 'cholesky_solve_cpu', 'exact:bfloat16,bfloat16|True': 'cholesky_solve_cpu', 'exact:bool,bool|False': 'cholesky_solve_cpu', 'exact:bool,bool|True': 'cholesky_solve_cpu', 'exact:float16,float16|False': 'cholesky_solve_cpu', 'exact:float16,float16|True': 'cholesky_solve_cpu', 'exact:int16,int16|False': 'cholesky_solve_cpu', 'exact:int16,int16|True': 'cholesky_solve_cpu', 'exact:int32,int32|False': 'cholesky_solve_cpu', 'exact:int32,int32|True': 'cholesky_solve_cpu', 'exact:int64,int64|False': 'cholesky_solve_cpu', 'exact:int64,int64|True': 'cholesky_solve_cpu', 'exact:int8,int8|False': 'cholesky_solve_cpu', 'exact:int8,int8|True': 'cholesky_solve_cpu', 'exact:uint8,uint8|False': 'cholesky_solve_cpu', 'exact:uint8,uint8|True': 'cholesky_solve_cpu'},
    'aten.clamp.Tensor': {'exact:bool,bool,bool': 'clamp_cpu'},
    'aten.clamp_max.Tensor': {'exact:complex128,complex128': 'minimum_cpu', 'exact:complex64,complex64': 'minimum_cpu'},
    'aten.clamp_min.Tensor': {'exact:complex128,complex128': 'maximum_cpu', 'exact:complex64,complex64': 'maximum_cpu'},
    'aten.convolution.default': {'exact:int16,int16,int16|False': 'slow_conv_dilated<>', 'exact:int16,int16,int16|True': 'slow_conv_transpose3d_out_cpu', 'exact:int32,int32,int32|False': 'slow_conv_dilated<>', 'exact:int32,int32,int32|True': 'slow_conv_transpose3d_out_cpu', 'exact:int8,int8,int8|False': 'slow_conv_dilated<>', 'exact:int8,int8,int8|True': 'slow_conv_transpose3d_out_cpu', 'exact:uint8,uint8,uint8|False': 'slow_conv_dilated<>', 'exact:uint8,uint8,uint8|True': 'slow_conv_transpose3d_out_cpu', 'self:bool|False': 'compute_columns3d', 'self:bool|True': 'slow_conv_transpose3d_out_cpu'},
    'aten.copysign.Tensor': {'exact:complex128,complex128': 'copysign_cpu', 'exact:complex64,complex64': 'copysign_cpu'},
    'aten.cummax.default': {'self:complex128': 'cummax_cpu', 'self:complex64': 'cummax_cpu'},
    'aten.cummin.default': {'self:complex128': 'cummin_cpu', 'self:complex64': 'cummin_cpu'},
    'aten.cumprod.default': {'dtype:bool': 'cumprod_out_cpu'},
    'aten.cumsum.default': {'dtype:bool': 'cumsum_out_cpu'},
    'aten.digamma.default': {'self:complex128': 'digamma', 'self:complex64': 'digamma'},
    'aten.div.Tensor_mode': {'exact:bool,bool|floor': 'div_floor_cpu', 'exact:bool,bool|trunc': 'div_trunc_cpu', 'exact:complex128,complex128|floor': 'div_floor_cpu', 'exact:complex128,complex128|trunc': 'div_trunc_cpu', 'exact:complex64,complex64|floor': 'div_floor_cpu', 'exact:complex64,complex64|trunc': 'div_trunc_cpu'},
    'aten.dot.default': {'exact:bool,bool': 'dot'},
    'aten.elu.default': {'self:bool': 'elu_cpu', 'self:complex128': 'elu_cpu', 'self:complex64': 'elu_cpu', 'self:int16': 'elu_cpu', 'self:int32': 'elu_cpu', 'self:int64': 'elu_cpu', 'self:int8': 'elu_cpu', 'self:uint8': 'elu_cpu'},
    'aten.erf.default': {'self:complex128': 'erf_vml_cpu', 'self:complex64': 'erf_vml_cpu'},
    'aten.erfc.default': {'self:complex128': 'erfc_vml_cpu', 'self:complex64': 'erfc_vml_cpu'},
    'aten.erfinv.default': {'self:complex128': 'erfinv_vml_cpu', 'self:complex64': 'erfinv_vml_cpu'},
    'aten.floor.default': {'self:bool': 'floor_vml_cpu'},
    'aten.floor_divide.default': {'exact:bool,bool': 'div_floor_cpu', 'exact:complex128,complex128': 'div_floor_cpu', 'exact:complex64,complex64': 'div_floor_cpu'},
    'aten.fmod.Tensor': {'exact:bool,bool': 'fmod_cpu', 'exact:complex128,complex128': 'fmod_cpu', 'exact:complex64,complex64': 'fmod_cpu'},
    'aten.frac.default': {'self:bool': 'frac_cpu', 'self:complex128': 'frac_cpu', 'self:complex64': 'frac_cpu', 'self:int16': 'frac_cpu', 'self:int32': 'frac_cpu', 'self:int64': 'frac_cpu', 'self:int8': 'frac_cpu', 'self:uint8': 'frac_cpu'},
    'aten.fractional_max_pool2d.default': {'exact:complex128,complex128': 'fractional_max_pool2d_out_frame', 'exact:complex64,complex64': 'fractional_max_pool2d_out_frame'},
    'aten.fractional_max_pool3d.default': {'exact:complex128,complex128': 'fractional_max_pool3d_out_frame', 'exact:complex64,complex64': 'fractional_max_pool3d_out_frame'},
    'aten.gcd.default': {'exact:bfloat16,bfloat16': 'gcd_cpu', 'exact:bool,bool': 'gcd_cpu', 'exact:complex128,complex128': 'gcd_cpu', 'exact:complex64,complex64': 'gcd_cpu', 'exact:float16,float16': 'gcd_cpu', 'exact:float32,float32': 'gcd_cpu', 'exact:float64,float64': 'gcd_cpu'},
    'aten.ge.Tensor': {'exact:complex128,complex128': 'ge_cpu', 'exact:complex64,complex64': 'ge_cpu'},
    'aten.gelu.default': {'self:bool|none': 'GeluKernelImpl', 'self:bool|tanh': 'GeluKernelImpl', 'self:complex128|none': 'GeluKernelImpl', 'self:complex128|tanh': 'GeluKernelImpl', 'self:complex64|none': 'GeluKernelImpl', 'self:complex64|tanh': 'GeluKernelImpl', 'self:int16|none': 'GeluKernelImpl', 'self:int16|tanh': 'GeluKernelImpl', 'self:int32|none': 'GeluKernelImpl', 'self:int32|tanh': 'GeluKernelImpl', 'self:int64|none': 'GeluKernelImpl', 'self:int64|tanh': 'GeluKernelImpl', 'self:int8|none': 'GeluKernelImpl', 'self:int8|tanh': 'GeluKernelImpl', 'self:uint8|none': 'GeluKernelImpl', 'self:uint8|tanh': 'GeluKernelImpl'},
    'aten.geqrf.default': {'self:bfloat16': 'geqrf_cpu', 'self:bool': 'geqrf_cpu', 'self:float16': 'geqrf_cpu', 'self:int16': 'geqrf_cpu', 'self:int32': 'geqrf_cpu', 'self:int64': 'geqrf_cpu', 'self:int8': 'geqrf_cpu', 'self:uint8': 'geqrf_cpu'},
    'aten.glu.default': {'self:bool': 'glu_cpu', 'self:complex128': 'glu_cpu', 'self:complex64': 'glu_cpu', 'self:int16': 'glu_cpu', 'self:int32': 'glu_cpu', 'self:int64': 'glu_cpu', 'self:int8': 'glu_cpu', 'self:uint8': 'glu_cpu'},
    'aten.grid_sampler_2d.default': {'exact:complex128,complex128|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:complex128,complex128|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:complex64,complex64|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:complex64,complex64|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int16,int16|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int16,int16|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int32,int32|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int32,int32|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int64,int64|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int64,int64|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int8,int8|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:int8,int8|True': 'grid_sampler_2d_cpu_kernel_impl', 'exact:uint8,uint8|False': 'grid_sampler_2d_cpu_kernel_impl', 'exact:uint8,uint8|True': 'grid_sampler_2d_cpu_kernel_impl', 'self:bool|False': 'grid_sampler_2d_cpu_kernel_impl', 'self:bool|True': 'grid_sampler_2d_cpu_kernel_impl'},
    'aten.grid_sampler_3d.default': {'exact:complex128,complex128|False': 'grid_sampler3d_cpu', 'exact:complex64,complex64|False': 'grid_sampler3d_cpu', 'exact:int16,int16|False': 'grid_sampler3d_cpu', 'exact:int32,int32|False': 'grid_sampler3d_cpu', 'exact:int64,int64|False': 'grid_sampler3d_cpu', 'exact:int8,int8|False': 'grid_sampler3d_cpu', 'exact:uint8,uint8|False': 'grid_sampler3d_cpu', 'self:bool|False': 'grid_sampler3d_cpu'},
    'aten.gt.Tensor': {'exact:complex128,complex128': 'gt_cpu', 'exact:complex64,complex64': 'gt_cpu'},
    'aten.hardshrink.default': {'self:bool': 'hardshrink_cpu', 'self:complex128': 'hardshrink_cpu', 'self:complex64': 'hardshrink_cpu', 'self:int16': 'hardshrink_cpu', 'self:int32': 'hardshrink_cpu', 'self:int64': 'hardshrink_cpu', 'self:int8': 'hardshrink_cpu', 'self:uint8': 'hardshrink_cpu'},
    'aten.hardsigmoid.default': {'self:bool': 'hardsigmoid_cpu', 'self:complex128': 'hardsigmoid_cpu', 'self:complex64': 'hardsigmoid_cpu', 'self:int16': 'hardsigmoid_cpu', 'self:int32': 'hardsigmoid_cpu', 'self:int64': 'hardsigmoid_cpu', 'self:int8': 'hardsigmoid_cpu', 'self:uint8': 'hardsigmoid_cpu'},
    'aten.hardswish.default': {'self:bool': 'hardswish_cpu', 'self:complex128': 'hardswish_cpu', 'self:complex64': 'hardswish_cpu', 'self:int16': 'hardswish_cpu', 'self:int32': 'hardswish_cpu', 'self:int64': 'hardswish_cpu', 'self:int8': 'hardswish_cpu', 'self:uint8': 'hardswish_cpu'},
    'aten.hash_tensor.default': {'self:complex128|False': 'xor_sum_cpu', 'self:complex128|True': 'xor_sum_cpu', 'self:complex64|False': 'xor_sum_cpu', 'self:complex64|True': 'xor_sum_cpu'},
    'aten.histc.default': {'self:bool': 'linspace_cpu', 'self:complex128': 'histogram_cpu', 'self:complex64': 'histogram_cpu', 'self:int16': 'histogram_cpu', 'self:int32': 'histogram_cpu', 'self:int64': 'histogram_cpu', 'self:int8': 'histogram_cpu', 'self:uint8': 'histogram_cpu'},
    'aten.histogram.bin_ct': {'exact:bfloat16|False': 'histogramdd', 'exact:bfloat16|True': 'histogramdd', 'exact:complex128|False': 'histogramdd', 'exact:complex128|True': 'histogramdd', 'exact:complex64|False': 'histogramdd', 'exact:complex64|True': 'histogramdd', 'exact:float16|False': 'histogramdd', 'exact:float16|True': 'histogramdd', 'exact:int16|False': 'histogramdd', 'exact:int16|True': 'histogramdd', 'exact:int32|False': 'histogramdd', 'exact:int32|True': 'histogramdd', 'exact:int64|False': 'histogramdd', 'exact:int64|True': 'histogramdd', 'exact:int8|False': 'histogramdd', 'exact:int8|True': 'histogramdd', 'exact:uint8|False': 'histogramdd', 'exact:uint8|True': 'histogramdd', 'self:bool|False': 'histogramdd', 'self:bool|True': 'histogramdd'},
    'aten.histogram.bins_tensor': {'exact:bool,bool|False': 'histogram_cpu', 'exact:complex128,complex128|False': 'histogram_cpu', 'exact:complex64,complex64|False': 'histogram_cpu', 'exact:int16,int16|False': 'histogram_cpu', 'exact:int32,int32|False': 'histogram_cpu', 'exact:int64,int64|False': 'histogram_cpu', 'exact:int8,int8|False': 'histogram_cpu', 'exact:uint8,uint8|False': 'histogram_cpu'},
    'aten.huber_loss.default': {'exact:complex128,complex128': 'huber_cpu', 'exact:complex64,complex64': 'huber_cpu', 'self:bool': 'huber_cpu', 'self:int16': 'huber_cpu', 'self:int32': 'huber_cpu', 'self:int64': 'huber_cpu', 'self:int8': 'huber_cpu', 'self:uint8': 'huber_cpu'},
    'aten.hypot.default': {'exact:bool,bool': 'hypot_cpu', 'exact:complex128,complex128': 'hypot_cpu', 'exact:complex64,complex64': 'hypot_cpu', 'exact:int16,int16': 'hypot_cpu', 'exact:int32,int32': 'hypot_cpu', 'exact:int64,int64': 'hypot_cpu', 'exact:int8,int8': 'hypot_cpu', 'exact:uint8,uint8': 'hypot_cpu'},
    'aten.i0.default': {'self:complex128': 'i0_vml_cpu', 'self:complex64': 'i0_vml_cpu'},
    'aten.igamma.default': {'exact:bool,bool': 'igamma_cpu', 'exact:complex128,complex128': 'igamma_cpu', 'exact:complex64,complex64': 'igamma_cpu', 'exact:int16,int16': 'igamma_cpu', 'exact:int32,int32': 'igamma_cpu', 'exact:int64,int64': 'igamma_cpu', 'exact:int8,int8': 'igamma_cpu', 'exact:uint8,uint8': 'igamma_cpu'},
    'aten.igammac.default': {'exact:bool,bool': 'igammac_cpu', 'exact:complex128,complex128': 'igammac_cpu', 'exact:complex64,complex64': 'igammac_cpu', 'exact:int16,int16': 'igammac_cpu', 'exact:int32,int32': 'igammac_cpu', 'exact:int64,int64': 'igammac_cpu', 'exact:int8,int8': 'igammac_cpu', 'exact:uint8,uint8': 'igammac_cpu'},
    'aten.im2col.default': {'self:int16': 'im2col_out_cpu', 'self:int32': 'im2col_out_cpu', 'self:int64': 'im2col_out_cpu', 'self:int8': 'im2col_out_cpu', 'self:uint8': 'im2col_out_cpu'},
    'aten.kthvalue.default': {'self:bool|False': 'kthvalue_cpu', 'self:complex128|False': 'kthvalue_cpu', 'self:complex64|False': 'kthvalue_cpu'},
    'aten.lcm.default': {'exact:bfloat16,bfloat16': 'lcm_cpu', 'exact:bool,bool': 'lcm_cpu', 'exact:complex128,complex128': 'lcm_cpu', 'exact:complex64,complex64': 'lcm_cpu', 'exact:float16,float16': 'lcm_cpu', 'exact:float32,float32': 'lcm_cpu', 'exact:float64,float64': 'lcm_cpu'},
    'aten.le.Scalar': {'self:complex128': 'le_cpu', 'self:complex64': 'le_cpu'},
    'aten.le.Tensor': {'exact:complex128,complex128': 'le_cpu', 'exact:complex64,complex64': 'le_cpu'},
    'aten.leaky_relu.default': {'self:bool': 'leaky_relu_cpu', 'self:complex128': 'leaky_relu_cpu', 'self:complex64': 'leaky_relu_cpu', 'self:int16': 'leaky_relu_cpu', 'self:int32': 'leaky_relu_cpu', 'self:int64': 'leaky_relu_cpu', 'self:int8': 'leaky_relu_cpu', 'self:uint8': 'leaky_relu_cpu'},
    'aten.lerp.Scalar': {'self:bool': 'lerp_kernel_scalar', 'self:int16': 'lerp_kernel_scalar', 'self:int32': 'lerp_kernel_scalar', 'self:int64': 'lerp_kernel_scalar', 'self:int8': 'lerp_kernel_scalar', 'self:uint8': 'lerp_kernel_scalar'},
    'aten.lgamma.default': {'self:complex128': 'lgamma_vml_cpu', 'self:complex64': 'lgamma_vml_cpu'},
    'aten.linalg_cholesky_ex.default': {'self:bfloat16|False|False': 'cholesky_cpu', 'self:bfloat16|True|False': 'cholesky_cpu', 'self:float16|False|False': 'cholesky_cpu', 'self:float16|True|False': 'cholesky_cpu'},
    'aten.linalg_cross.default': {'self:bool': 'cross'},
    'aten.linalg_eig.default': {'self:bfloat16': 'linalg_eig_out_cpu', 'self:float16': 'linalg_eig_out_cpu'},
    'aten.linalg_householder_product.default': {'exact:bfloat16,bfloat16': 'orgqr_cpu', 'exact:bool,bool': 'orgqr_cpu', 'exact:float16,float16': 'orgqr_cpu', 'exact:int16,int16': 'orgqr_cpu', 'exact:int32,int32': 'orgqr_cpu', 'exact:int64,int64': 'orgqr_cpu', 'exact:int8,int8': 'orgqr_cpu', 'exact:uint8,uint8': 'orgqr_cpu'},
    'aten.linalg_ldl_factor_ex.default': {'self:bfloat16|False|False': 'ldl_factor_kernel_cpu', 'self:float16|False|False': 'ldl_factor_kernel_cpu'},
    'aten.linalg_ldl_solve.default': {'exact:bfloat16,int32,bfloat16|False': 'ldl_solve_kernel_cpu', 'exact:float16,int32,float16|False': 'ldl_solve_kernel_cpu'},
    'aten.linalg_lu.default': {'self:bfloat16|True': 'lu_cpu', 'self:bool|True': 'lu_cpu', 'self:float16|True': 'lu_cpu', 'self:int16|True': 'lu_cpu', 'self:int32|True': 'lu_cpu', 'self:int64|True': 'lu_cpu', 'self:int8|True': 'lu_cpu', 'self:uint8|True': 'lu_cpu'},
    'aten.linalg_lu_factor_ex.default': {'self:bfloat16|True|False': 'lu_cpu', 'self:bool|True|False': 'lu_cpu', 'self:float16|True|False': 'lu_cpu', 'self:int16|True|False': 'lu_cpu', 'self:int32|True|False': 'lu_cpu', 'self:int64|True|False': 'lu_cpu', 'self:int8|True|False': 'lu_cpu', 'self:uint8|True|False': 'lu_cpu'},
    'aten.linalg_lu_solve.default': {'exact:bfloat16,int32,bfloat16|False|True': 'linalg.lu_solve_cpu', 'exact:bfloat16,int32,bfloat16|True|False': 'linalg.lu_solve_cpu', 'exact:bfloat16,int32,bfloat16|True|True': 'linalg.lu_solve_cpu', 'exact:float16,int32,float16|False|True': 'linalg.lu_solve_cpu', 'exact:float16,int32,float16|True|False': 'linalg.lu_solve_cpu', 'exact:float16,int32,float16|True|True': 'linalg.lu_solve_cpu'},
    'aten.linalg_qr.default': {'self:bfloat16|reduced': 'geqrf_cpu', 'self:float16|reduced': 'geqrf_cpu'},
    'aten.linalg_solve_triangular.default': {'exact:bfloat16,bfloat16|True|False|True': 'triangular_solve_cpu', 'exact:bfloat16,bfloat16|True|True|False': 'triangular_solve_cpu', 'exact:bfloat16,bfloat16|True|True|True': 'triangular_solve_cpu', 'exact:bool,bool|True|False|True': 'triangular_solve_cpu', 'exact:bool,bool|True|True|False': 'triangular_solve_cpu', 'exact:bool,bool|True|True|True': 'triangular_solve_cpu', 'exact:float16,float16|True|False|True': 'triangular_solve_cpu', 'exact:float16,float16|True|True|False': 'triangular_solve_cpu', 'exact:float16,float16|True|True|True': 'triangular_solve_cpu', 'exact:int16,int16|True|False|True': 'triangular_solve_cpu', 'exact:int16,int16|True|True|False': 'triangular_solve_cpu', 'exact:int16,int16|True|True|True': 'triangular_solve_cpu', 'exact:int32,int32|True|False|True': 'triangular_solve_cpu', 'exact:int32,int32|True|True|False': 'triangular_solve_cpu', 'exact:int32,int32|True|True|True': 'triangular_solve_cpu', 'exact:int64,int64|True|False|True': 'triangular_solve_cpu', 'exact:int64,int64|True|True|False': 'triangular_solve_cpu', 'exact:int64,int64|True|True|True': 'triangular_solve_cpu', 'exact:int8,int8|True|False|True': 'triangular_solve_cpu', 'exact:int8,int8|True|True|False': 'triangular_solve_cpu', 'exact:int8,int8|True|True|True': 'triangular_solve_cpu', 'exact:uint8,uint8|True|False|True': 'triangular_solve_cpu', 'exact:uint8,uint8|True|True|False': 'triangular_solve_cpu', 'exact:uint8,uint8|True|True|True': 'triangular_solve_cpu'},
    'aten.log_sigmoid_forward.default': {'self:bool': 'log_sigmoid_cpu', 'self:complex128': 'log_sigmoid_cpu', 'self:complex64': 'log_sigmoid_cpu', 'self:int16': 'log_sigmoid_cpu', 'self:int32': 'log_sigmoid_cpu', 'self:int64': 'log_sigmoid_cpu', 'self:int8': 'log_sigmoid_cpu', 'self:uint8': 'log_sigmoid_cpu'},
    'aten.logaddexp.default': {'exact:bool,bool': 'logaddexp_cpu', 'exact:int16,int16': 'logaddexp_cpu', 'exact:int32,int32': 'logaddexp_cpu', 'exact:int64,int64': 'logaddexp_cpu', 'exact:int8,int8': 'logaddexp_cpu', 'exact:uint8,uint8': 'logaddexp_cpu'},
    'aten.logaddexp2.default': {'exact:bool,bool': 'logaddexp2_cpu', 'exact:complex128,complex128': 'logaddexp2_cpu', 'exact:complex64,complex64': 'logaddexp2_cpu', 'exact:int16,int16': 'logaddexp2_cpu', 'exact:int32,int32': 'logaddexp2_cpu', 'exact:int64,int64': 'logaddexp2_cpu', 'exact:int8,int8': 'logaddexp2_cpu', 'exact:uint8,uint8': 'logaddexp2_cpu'},
    'aten.logcumsumexp.default': {'self:bool': 'logcumsumexp_out_cpu', 'self:int16': 'logcumsumexp_out_cpu', 'self:int32': 'logcumsumexp_out_cpu', 'self:int64': 'logcumsumexp_out_cpu', 'self:int8': 'logcumsumexp_out_cpu', 'self:uint8': 'logcumsumexp_out_cpu'},
    'aten.logit.default': {'self:complex128': 'logit_cpu', 'self:complex64': 'logit_cpu'},
    'aten.lt.Scalar': {'self:complex128': 'lt_cpu', 'self:complex64': 'lt_cpu'},
    'aten.lt.Tensor': {'exact:complex128,complex128': 'lt_cpu', 'exact:complex64,complex64': 'lt_cpu'},
    'aten.max.default': {'self:complex128': 'max_all', 'self:complex64': 'max_all'},
    'aten.max_pool2d_with_indices.default': {'self:bool|True': 'max_pool2d', 'self:complex128|True': 'max_pool2d', 'self:complex64|True': 'max_pool2d'},
    'aten.max_pool2d_with_indices_backward.default': {'exact:int64,int64,int64|True': 'max_pool2d_backward', 'self:int16|True': 'max_pool2d_backward', 'self:int32|True': 'max_pool2d_backward', 'self:int8|True': 'max_pool2d_backward', 'self:uint8|True': 'max_pool2d_backward'},
    'aten.max_pool3d_with_indices.default': {'self:bool|True': 'max_pool3d', 'self:complex128|True': 'max_pool3d', 'self:complex64|True': 'max_pool3d'},
    'aten.max_unpool2d.default': {'exact:complex128,int64': 'max_unpool2d', 'exact:complex64,int64': 'max_unpool2d', 'exact:int64,int64': 'max_unpool2d', 'self:bool': 'max_unpool2d', 'self:int16': 'max_unpool2d', 'self:int32': 'max_unpool2d', 'self:int8': 'max_unpool2d', 'self:uint8': 'max_unpool2d'},
    'aten.max_unpool3d.default': {'exact:complex128,int64': 'max_unpool3d', 'exact:complex64,int64': 'max_unpool3d', 'exact:int64,int64': 'max_unpool3d', 'self:bool': 'max_unpool3d', 'self:int16': 'max_unpool3d', 'self:int32': 'max_unpool3d', 'self:int8': 'max_unpool3d', 'self:uint8': 'max_unpool3d'},
    'aten.median.default': {'self:bool': 'median_cpu', 'self:complex128': 'median_cpu', 'self:complex64': 'median_cpu'},
    'aten.median.dim': {'self:bool|False': 'median_out', 'self:bool|True': 'median_out', 'self:complex128|False': 'median_out', 'self:complex128|True': 'median_out', 'self:complex64|False': 'median_out', 'self:complex64|True': 'median_out'},
    'aten.min.default': {'self:complex128': 'min_all', 'self:complex64': 'min_all'},
    'aten.mish.default': {'self:bool': 'mish_cpu', 'self:complex128': 'mish_cpu', 'self:complex64': 'mish_cpu', 'self:int16': 'mish_cpu', 'self:int32': 'mish_cpu', 'self:int64': 'mish_cpu', 'self:int8': 'mish_cpu', 'self:uint8': 'mish_cpu'},
    'aten.mm.default': {'exact:bool,bool': 'addmm_impl_cpu_'},
    'aten.mode.default': {'self:complex128|False': 'mode_cpu', 'self:complex128|True': 'mode_cpu', 'self:complex64|False': 'mode_cpu', 'self:complex64|True': 'mode_cpu'},
    'aten.mse_loss.default': {'exact:complex128,complex128': 'mse_cpu', 'exact:complex64,complex64': 'mse_cpu', 'exact:int16,int16': 'mse_cpu', 'exact:int32,int32': 'mse_cpu', 'exact:int64,int64': 'mse_cpu', 'exact:int8,int8': 'mse_cpu', 'exact:uint8,uint8': 'mse_cpu', 'self:bool': 'mse_cpu'},
    'aten.multi_margin_loss.default': {'exact:bfloat16,int64': 'multi_margin_loss_cpu_kernel', 'exact:complex128,int64': 'multi_margin_loss_cpu_kernel', 'exact:complex64,int64': 'multi_margin_loss_cpu_kernel', 'exact:float16,int64': 'multi_margin_loss_cpu_kernel', 'self:bool': 'multi_margin_loss_cpu_kernel', 'self:int16': 'multi_margin_loss_cpu_kernel', 'self:int32': 'multi_margin_loss_cpu_kernel', 'self:int64': 'multi_margin_loss_cpu_kernel', 'self:int8': 'multi_margin_loss_cpu_kernel', 'self:uint8': 'multi_margin_loss_cpu_kernel'},
    'aten.multilabel_margin_loss_forward.default': {'exact:bfloat16,int64': 'multilabel_margin_loss_forward_out_frame', 'exact:complex128,int64': 'multilabel_margin_loss_forward_out_frame', 'exact:complex64,int64': 'multilabel_margin_loss_forward_out_frame', 'exact:float16,int64': 'multilabel_margin_loss_forward_out_frame', 'exact:int64,int64': 'multilabel_margin_loss_forward_out_frame', 'self:bool': 'multilabel_margin_loss_forward_out_frame', 'self:int16': 'multilabel_margin_loss_forward_out_frame', 'self:int32': 'multilabel_margin_loss_forward_out_frame', 'self:int8': 'multilabel_margin_loss_forward_out_frame', 'self:uint8': 'multilabel_margin_loss_forward_out_frame'},
    'aten.mv.default': {'exact:bool,bool': 'addmv_impl_cpu'},
    'aten.mvlgamma.default': {'self:complex128': 'arange_cpu', 'self:complex64': 'arange_cpu'},
    'aten.nanmedian.default': {'self:bool': 'median_cpu', 'self:complex128': 'median_cpu', 'self:complex64': 'median_cpu'},
    'aten.nanmedian.dim': {'self:bool|False': 'median_out', 'self:bool|True': 'median_out', 'self:complex128|False': 'median_out', 'self:complex128|True': 'median_out', 'self:complex64|False': 'median_out', 'self:complex64|True': 'median_out'},
    'aten.native_batch_norm.default': {'exact:complex128,complex128,complex128,complex128,complex128|False': 'batch_norm', 'exact:complex128,complex128,complex128,complex128,complex128|True': 'batch_norm', 'exact:complex64,complex64,complex64,complex64,complex64|False': 'batch_norm', 'exact:complex64,complex64,complex64,complex64,complex64|True': 'batch_norm', 'self:bool|False': 'batch_norm', 'self:bool|True': 'batch_norm', 'self:int16|False': 'batch_norm', 'self:int16|True': 'batch_norm', 'self:int32|False': 'batch_norm', 'self:int32|True': 'batch_norm', 'self:int64|False': 'batch_norm', 'self:int64|True': 'batch_norm', 'self:int8|False': 'batch_norm', 'self:int8|True': 'batch_norm', 'self:uint8|False': 'batch_norm', 'self:uint8|True': 'batch_norm'},
    'aten.native_group_norm.default': {'exact:complex128,complex128,complex128': 'GroupNormKernelImpl', 'exact:complex64,complex64,complex64': 'GroupNormKernelImpl', 'self:bool': 'GroupNormKernelImpl', 'self:int16': 'GroupNormKernelImpl', 'self:int32': 'GroupNormKernelImpl', 'self:int64': 'GroupNormKernelImpl', 'self:int8': 'GroupNormKernelImpl', 'self:uint8': 'GroupNormKernelImpl'},
    'aten.native_layer_norm.default': {'exact:complex128,complex128': 'LayerNormKernelImpl', 'exact:complex128,complex128,complex128': 'LayerNormKernelImpl', 'exact:complex64,complex64': 'LayerNormKernelImpl', 'exact:complex64,complex64,complex64': 'LayerNormKernelImpl', 'self:bool': 'LayerNormKernelImpl', 'self:int16': 'LayerNormKernelImpl', 'self:int32': 'LayerNormKernelImpl', 'self:int64': 'LayerNormKernelImpl', 'self:int8': 'LayerNormKernelImpl', 'self:uint8': 'LayerNormKernelImpl'},
    'aten.nextafter.default': {'exact:bool,bool': 'nextafter_cpu', 'exact:complex128,complex128': 'nextafter_cpu', 'exact:complex64,complex64': 'nextafter_cpu', 'exact:int16,int16': 'nextafter_cpu', 'exact:int32,int32': 'nextafter_cpu', 'exact:int64,int64': 'nextafter_cpu', 'exact:int8,int8': 'nextafter_cpu', 'exact:uint8,uint8': 'nextafter_cpu'},
    'aten.nll_loss_forward.default': {'exact:complex128,int64': 'nll_loss_out_frame', 'exact:complex128,int64,complex128': 'nll_loss_out_frame', 'exact:complex64,int64': 'nll_loss_out_frame', 'exact:complex64,int64,complex64': 'nll_loss_out_frame', 'exact:int64,int64': 'nll_loss_out_frame', 'exact:int64,int64,int64': 'nll_loss_out_frame', 'self:bool': 'nll_loss_out_frame', 'self:int16': 'nll_loss_out_frame', 'self:int32': 'nll_loss_out_frame', 'self:int8': 'nll_loss_out_frame', 'self:uint8': 'nll_loss_out_frame'},
    'aten.ormqr.default': {'exact:bfloat16,bfloat16,bfloat16|False|True': 'ormqr_cpu', 'exact:bfloat16,bfloat16,bfloat16|True|False': 'ormqr_cpu', 'exact:bfloat16,bfloat16,bfloat16|True|True': 'ormqr_cpu', 'exact:bool,bool,bool|False|True': 'ormqr_cpu', 'exact:bool,bool,bool|True|False': 'ormqr_cpu', 'exact:bool,bool,bool|True|True': 'ormqr_cpu', 'exact:float16,float16,float16|False|True': 'ormqr_cpu', 'exact:float16,float16,float16|True|False': 'ormqr_cpu', 'exact:float16,float16,float16|True|True': 'ormqr_cpu', 'exact:int16,int16,int16|False|True': 'ormqr_cpu', 'exact:int16,int16,int16|True|False': 'ormqr_cpu', 'exact:int16,int16,int16|True|True': 'ormqr_cpu', 'exact:int32,int32,int32|False|True': 'ormqr_cpu', 'exact:int32,int32,int32|True|False': 'ormqr_cpu', 'exact:int32,int32,int32|True|True': 'ormqr_cpu', 'exact:int64,int64,int64|False|True': 'ormqr_cpu', 'exact:int64,int64,int64|True|False': 'ormqr_cpu', 'exact:int64,int64,int64|True|True': 'ormqr_cpu', 'exact:int8,int8,int8|False|True': 'ormqr_cpu', 'exact:int8,int8,int8|True|False': 'ormqr_cpu', 'exact:int8,int8,int8|True|True': 'ormqr_cpu', 'exact:uint8,uint8,uint8|False|True': 'ormqr_cpu', 'exact:uint8,uint8,uint8|True|False': 'ormqr_cpu', 'exact:uint8,uint8,uint8|True|True': 'ormqr_cpu'},
    'aten.polar.default': {'exact:float16,float16': 'polar_cpu'},
    'aten.polygamma.default': {'self:complex128': 'polygamma', 'self:complex64': 'polygamma'},
    'aten.pow.Tensor_Tensor': {'exact:bool,bool': 'pow'},
    'aten.rand.default': {'dtype:bool|False': 'check_uniform_bounds', 'dtype:int16|False': 'check_uniform_bounds', 'dtype:int32|False': 'check_uniform_bounds', 'dtype:int64|False': 'check_uniform_bounds', 'dtype:int8|False': 'check_uniform_bounds', 'dtype:uint8|False': 'check_uniform_bounds'},
    'aten.reflection_pad1d.default': {'self:bool': 'reflection_pad1d'},
    'aten.remainder.Tensor': {'exact:bool,bool': 'remainder_cpu', 'exact:complex128,complex128': 'remainder_cpu', 'exact:complex64,complex64': 'remainder_cpu'},
    'aten.replication_pad1d.default': {'self:bool': 'replication_pad1d'},
    'aten.replication_pad2d.default': {'self:bool': 'replication_pad2d'},
    'aten.round.decimals': {'self:bool': 'round_cpu', 'self:complex128': 'round_cpu', 'self:complex64': 'round_cpu', 'self:int16': 'round_cpu', 'self:int32': 'round_cpu', 'self:int64': 'round_cpu', 'self:int8': 'round_cpu', 'self:uint8': 'round_cpu'},
    'aten.round.default': {'self:bool': 'round_vml_cpu', 'self:complex128': 'round_vml_cpu', 'self:complex64': 'round_vml_cpu'},
    'aten.rrelu_with_noise.default': {'exact:complex128,complex128|True': 'rrelu_with_noise_out_cpu', 'exact:complex64,complex64|True': 'rrelu_with_noise_out_cpu', 'exact:float16,float16|True': 'rrelu_with_noise_out_cpu', 'self:bool|True': 'rrelu_with_noise_out_cpu', 'self:int16|True': 'rrelu_with_noise_out_cpu', 'self:int32|True': 'rrelu_with_noise_out_cpu', 'self:int64|True': 'rrelu_with_noise_out_cpu', 'self:int8|True': 'rrelu_with_noise_out_cpu', 'self:uint8|True': 'rrelu_with_noise_out_cpu'},
    'aten.scatter_reduce.two': {'exact:complex128,int64,complex128|False|amax': 'scatter_gather_tensor_cpu_reduce_amax', 'exact:complex128,int64,complex128|False|amin': 'scatter_gather_tensor_cpu_reduce_amin', 'exact:complex128,int64,complex128|True|amax': 'scatter_gather_tensor_cpu_reduce_amax', 'exact:complex128,int64,complex128|True|amin': 'scatter_gather_tensor_cpu_reduce_amin', 'exact:complex64,int64,complex64|False|amax': 'scatter_gather_tensor_cpu_reduce_amax', 'exact:complex64,int64,complex64|False|amin': 'scatter_gather_tensor_cpu_reduce_amin', 'exact:complex64,int64,complex64|True|amax': 'scatter_gather_tensor_cpu_reduce_amax', 'exact:complex64,int64,complex64|True|amin': 'scatter_gather_tensor_cpu_reduce_amin', 'self:bool|False|mean': 'scatter_gather_tensor_cpu_reduce_mean', 'self:bool|True|mean': 'scatter_gather_tensor_cpu_reduce_mean'},
    'aten.segment_reduce.default': {'exact:int64,int64|False|max': '_segment_reduce_cpu', 'exact:int64,int64|False|mean': '_segment_reduce_cpu', 'promoted:complex128|False|max': '_segment_reduce_cpu', 'promoted:complex128|False|mean': '_segment_reduce_cpu', 'promoted:complex64|False|max': '_segment_reduce_cpu', 'promoted:complex64|False|mean': '_segment_reduce_cpu'},
    'aten.silu.default': {'self:bool': 'silu_cpu', 'self:int16': 'silu_cpu', 'self:int32': 'silu_cpu', 'self:int64': 'silu_cpu', 'self:int8': 'silu_cpu', 'self:uint8': 'silu_cpu'},
    'aten.smooth_l1_loss.default': {'exact:complex128,complex128': 'smooth_l1_cpu', 'exact:complex64,complex64': 'smooth_l1_cpu', 'self:bool': 'smooth_l1_cpu', 'self:int16': 'smooth_l1_cpu', 'self:int32': 'smooth_l1_cpu', 'self:int64': 'smooth_l1_cpu', 'self:int8': 'smooth_l1_cpu', 'self:uint8': 'smooth_l1_cpu'},
    'aten.softplus.default': {'self:bool': 'softplus_cpu', 'self:complex128': 'softplus_cpu', 'self:complex64': 'softplus_cpu', 'self:int16': 'softplus_cpu', 'self:int32': 'softplus_cpu', 'self:int64': 'softplus_cpu', 'self:int8': 'softplus_cpu', 'self:uint8': 'softplus_cpu'},
    'aten.softshrink.default': {'self:bool': 'softshrink_check', 'self:complex128': 'softshrink_check', 'self:complex64': 'softshrink_check', 'self:int16': 'softshrink_check', 'self:int32': 'softshrink_check', 'self:int64': 'softshrink_check', 'self:int8': 'softshrink_check', 'self:uint8': 'softshrink_check'},
    'aten.special_airy_ai.default': {'self:bfloat16': 'airy_ai_cpu', 'self:complex128': 'airy_ai_cpu', 'self:complex64': 'airy_ai_cpu', 'self:float16': 'airy_ai_cpu'},
    'aten.special_bessel_j0.default': {'self:bfloat16': 'bessel_j0_cpu', 'self:complex128': 'bessel_j0_cpu', 'self:complex64': 'bessel_j0_cpu', 'self:float16': 'bessel_j0_cpu'},
    'aten.special_bessel_j1.default': {'self:bfloat16': 'bessel_j1_cpu', 'self:complex128': 'bessel_j1_cpu', 'self:complex64': 'bessel_j1_cpu', 'self:float16': 'bessel_j1_cpu'},
    'aten.special_bessel_y0.default': {'self:bfloat16': 'bessel_y0_cpu', 'self:complex128': 'bessel_y0_cpu', 'self:complex64': 'bessel_y0_cpu', 'self:float16': 'bessel_y0_cpu'},
    'aten.special_bessel_y1.default': {'self:bfloat16': 'bessel_y1_cpu', 'self:complex128': 'bessel_y1_cpu', 'self:complex64': 'bessel_y1_cpu', 'self:float16': 'bessel_y1_cpu'},
    'aten.special_chebyshev_polynomial_t.default': {'exact:bfloat16,bfloat16': 'chebyshev_polynomial_t_cpu', 'exact:complex128,complex128': 'chebyshev_polynomial_t_cpu', 'exact:complex64,complex64': 'chebyshev_polynomial_t_cpu', 'exact:float16,float16': 'chebyshev_polynomial_t_cpu'},
    'aten.special_chebyshev_polynomial_u.default': {'exact:bfloat16,bfloat16': 'chebyshev_polynomial_u_cpu', 'exact:complex128,complex128': 'chebyshev_polynomial_u_cpu', 'exact:complex64,complex64': 'chebyshev_polynomial_u_cpu', 'exact:float16,float16': 'chebyshev_polynomial_u_cpu'},
    'aten.special_chebyshev_polynomial_v.default': {'exact:bfloat16,bfloat16': 'chebyshev_polynomial_v_cpu', 'exact:complex128,complex128': 'chebyshev_polynomial_v_cpu', 'exact:complex64,complex64': 'chebyshev_polynomial_v_cpu', 'exact:float16,float16': 'chebyshev_polynomial_v_cpu'},
    'aten.special_chebyshev_polynomial_w.default': {'exact:bfloat16,bfloat16': 'chebyshev_polynomial_w_cpu', 'exact:complex128,complex128': 'chebyshev_polynomial_w_cpu', 'exact:complex64,complex64': 'chebyshev_polynomial_w_cpu', 'exact:float16,float16': 'chebyshev_polynomial_w_cpu'},
    'aten.special_entr.default': {'self:complex128': 'entr_cpu', 'self:complex64': 'entr_cpu'},
    'aten.special_erfcx.default': {'self:bfloat16': 'erfcx_cpu', 'self:complex128': 'erfcx_cpu', 'self:complex64': 'erfcx_cpu', 'self:float16': 'erfcx_cpu'},
    'aten.special_hermite_polynomial_h.default': {'exact:bfloat16,bfloat16': 'hermite_polynomial_h_cpu', 'exact:complex128,complex128': 'hermite_polynomial_h_cpu', 'exact:complex64,complex64': 'hermite_polynomial_h_cpu', 'exact:float16,float16': 'hermite_polynomial_h_cpu'},
    'aten.special_hermite_polynomial_he.default': {'exact:bfloat16,bfloat16': 'hermite_polynomial_he_cpu', 'exact:complex128,complex128': 'hermite_polynomial_he_cpu', 'exact:complex64,complex64': 'hermite_polynomial_he_cpu', 'exact:float16,float16': 'hermite_polynomial_he_cpu'},
    'aten.special_i0e.default': {'self:complex128': 'i0e_cpu', 'self:complex64': 'i0e_cpu'},
    'aten.special_i1.default': {'self:complex128': 'i1_cpu', 'self:complex64': 'i1_cpu'},
    'aten.special_i1e.default': {'self:complex128': 'i1e_cpu', 'self:complex64': 'i1e_cpu'},
    'aten.special_laguerre_polynomial_l.default': {'exact:bfloat16,bfloat16': 'laguerre_polynomial_l_cpu', 'exact:complex128,complex128': 'laguerre_polynomial_l_cpu', 'exact:complex64,complex64': 'laguerre_polynomial_l_cpu', 'exact:float16,float16': 'laguerre_polynomial_l_cpu'},
    'aten.special_legendre_polynomial_p.default': {'exact:bfloat16,bfloat16': 'legendre_polynomial_p_cpu', 'exact:complex128,complex128': 'legendre_polynomial_p_cpu', 'exact:complex64,complex64': 'legendre_polynomial_p_cpu', 'exact:float16,float16': 'legendre_polynomial_p_cpu'},
    'aten.special_log_ndtr.default': {'self:bfloat16': 'log_ndtr_cpu', 'self:complex128': 'log_ndtr_cpu', 'self:complex64': 'log_ndtr_cpu', 'self:float16': 'log_ndtr_cpu'},
    'aten.special_modified_bessel_i0.default': {'self:bfloat16': 'modified_bessel_i0_cpu', 'self:complex128': 'modified_bessel_i0_cpu', 'self:complex64': 'modified_bessel_i0_cpu', 'self:float16': 'modified_bessel_i0_cpu'},
    'aten.special_modified_bessel_i1.default': {'self:bfloat16': 'modified_bessel_i1_cpu', 'self:complex128': 'modified_bessel_i1_cpu', 'self:complex64': 'modified_bessel_i1_cpu', 'self:float16': 'modified_bessel_i1_cpu'},
    'aten.special_modified_bessel_k0.default': {'self:bfloat16': 'modified_bessel_k0_cpu', 'self:complex128': 'modified_bessel_k0_cpu', 'self:complex64': 'modified_bessel_k0_cpu', 'self:float16': 'modified_bessel_k0_cpu'},
    'aten.special_modified_bessel_k1.default': {'self:bfloat16': 'modified_bessel_k1_cpu', 'self:complex128': 'modified_bessel_k1_cpu', 'self:complex64': 'modified_bessel_k1_cpu', 'self:float16': 'modified_bessel_k1_cpu'},
    'aten.special_ndtri.default': {'self:bfloat16': 'ndtri_cpu', 'self:complex128': 'ndtri_cpu', 'self:complex64': 'ndtri_cpu', 'self:float16': 'ndtri_cpu'},
    'aten.special_scaled_modified_bessel_k0.default': {'self:bfloat16': 'scaled_modified_bessel_k0_cpu', 'self:complex128': 'scaled_modified_bessel_k0_cpu', 'self:complex64': 'scaled_modified_bessel_k0_cpu', 'self:float16': 'scaled_modified_bessel_k0_cpu'},
    'aten.special_scaled_modified_bessel_k1.default': {'self:bfloat16': 'scaled_modified_bessel_k1_cpu', 'self:complex128': 'scaled_modified_bessel_k1_cpu', 'self:complex64': 'scaled_modified_bessel_k1_cpu', 'self:float16': 'scaled_modified_bessel_k1_cpu'},
    'aten.special_shifted_chebyshev_polynomial_t.default': {'exact:bfloat16,bfloat16': 'shifted_chebyshev_polynomial_t_cpu', 'exact:complex128,complex128': 'shifted_chebyshev_polynomial_t_cpu', 'exact:complex64,complex64': 'shifted_chebyshev_polynomial_t_cpu', 'exact:float16,float16': 'shifted_chebyshev_polynomial_t_cpu'},
    'aten.special_shifted_chebyshev_polynomial_u.default': {'exact:bfloat16,bfloat16': 'shifted_chebyshev_polynomial_u_cpu', 'exact:complex128,complex128': 'shifted_chebyshev_polynomial_u_cpu', 'exact:complex64,complex64': 'shifted_chebyshev_polynomial_u_cpu', 'exact:float16,float16': 'shifted_chebyshev_polynomial_u_cpu'},
    'aten.special_shifted_chebyshev_polynomial_v.default': {'exact:bfloat16,bfloat16': 'shifted_chebyshev_polynomial_v_cpu', 'exact:complex128,complex128': 'shifted_chebyshev_polynomial_v_cpu', 'exact:complex64,complex64': 'shifted_chebyshev_polynomial_v_cpu', 'exact:float16,float16': 'shifted_chebyshev_polynomial_v_cpu'},
    'aten.special_shifted_chebyshev_polynomial_w.default': {'exact:bfloat16,bfloat16': 'shifted_chebyshev_polynomial_w_cpu', 'exact:complex128,complex128': 'shifted_chebyshev_polynomial_w_cpu', 'exact:complex64,complex64': 'shifted_chebyshev_polynomial_w_cpu', 'exact:float16,float16': 'shifted_chebyshev_polynomial_w_cpu'},
    'aten.special_spherical_bessel_j0.default': {'self:bfloat16': 'spherical_bessel_j0_cpu', 'self:complex128': 'spherical_bessel_j0_cpu', 'self:complex64': 'spherical_bessel_j0_cpu', 'self:float16': 'spherical_bessel_j0_cpu'},
    'aten.special_xlog1py.default': {'exact:complex128,complex128': 'xlog1py_cpu', 'exact:complex64,complex64': 'xlog1py_cpu'},
    'aten.special_zeta.default': {'exact:bfloat16,bfloat16': 'zeta_cpu', 'exact:complex128,complex128': 'zeta_cpu', 'exact:complex64,complex64': 'zeta_cpu', 'exact:float16,float16': 'zeta_cpu'},
    'aten.threshold.default': {'self:bool': 'threshold_cpu', 'self:complex128': 'threshold_cpu', 'self:complex64': 'threshold_cpu'},
    'aten.trace.default': {'self:bool': 'trace'},
    'aten.triangular_solve.default': {'exact:bfloat16,bfloat16|True|False|False': 'triangular_solve_cpu', 'exact:bool,bool|True|False|False': 'triangular_solve_cpu', 'exact:float16,float16|True|False|False': 'triangular_solve_cpu', 'exact:int16,int16|True|False|False': 'triangular_solve_cpu', 'exact:int32,int32|True|False|False': 'triangular_solve_cpu', 'exact:int64,int64|True|False|False': 'triangular_solve_cpu', 'exact:int8,int8|True|False|False': 'triangular_solve_cpu', 'exact:uint8,uint8|True|False|False': 'triangular_solve_cpu'},
    'aten.trunc.default': {'self:bool': 'trunc_vml_cpu'},
    'aten.unique_consecutive.default': {'self:complex128|False|False': 'unique', 'self:complex64|False|False': 'unique'},
    'aten.upsample_bicubic2d.default': {'self:bool|True': 'compute_indices_weights_cubic', 'self:complex128|True': 'compute_indices_weights_cubic', 'self:complex64|True': 'compute_indices_weights_cubic', 'self:int16|True': 'compute_indices_weights_cubic', 'self:int32|True': 'compute_indices_weights_cubic', 'self:int64|True': 'compute_indices_weights_cubic', 'self:int8|True': 'compute_indices_weights_cubic'},
    'aten.upsample_bilinear2d.default': {'self:bool|True': 'upsample_bilinear2d_channels_last', 'self:complex128|True': 'upsample_bilinear2d_channels_last', 'self:complex64|True': 'upsample_bilinear2d_channels_last', 'self:int16|True': 'upsample_bilinear2d_channels_last', 'self:int32|True': 'upsample_bilinear2d_channels_last', 'self:int64|True': 'upsample_bilinear2d_channels_last', 'self:int8|True': 'upsample_bilinear2d_channels_last'},
    'aten.upsample_linear1d.default': {'self:bool|True': 'compute_indices_weights_linear', 'self:complex128|True': 'compute_indices_weights_linear', 'self:complex64|True': 'compute_indices_weights_linear', 'self:int16|True': 'compute_indices_weights_linear', 'self:int32|True': 'compute_indices_weights_linear', 'self:int64|True': 'compute_indices_weights_linear', 'self:int8|True': 'compute_indices_weights_linear', 'self:uint8|True': 'compute_indices_weights_linear'},
    'aten.upsample_nearest1d.default': {'self:bool': 'compute_indices_weights_nearest', 'self:complex128': 'compute_indices_weights_nearest', 'self:complex64': 'compute_indices_weights_nearest', 'self:int16': 'compute_indices_weights_nearest', 'self:int32': 'compute_indices_weights_nearest', 'self:int64': 'compute_indices_weights_nearest', 'self:int8': 'compute_indices_weights_nearest'},
    'aten.upsample_trilinear3d.default': {'self:bool|True': 'compute_indices_weights_linear', 'self:complex128|True': 'compute_indices_weights_linear', 'self:complex64|True': 'compute_indices_weights_linear', 'self:int16|True': 'compute_indices_weights_linear', 'self:int32|True': 'compute_indices_weights_linear', 'self:int64|True': 'compute_indices_weights_linear', 'self:int8|True': 'compute_indices_weights_linear', 'self:uint8|True': 'compute_indices_weights_linear'},
    'aten.vdot.default': {'exact:bool,bool': 'dot'},
    'aten.xlogy.Tensor': {'exact:complex128,complex128': 'xlogy_cpu', 'exact:complex64,complex64': 'xlogy_cpu'},
}

"""``__torch_dispatch__`` of the tpu tensor: routes each aten call.

Views and data movement (copy_, _to_copy, .item()) are handled here, once, for every executor;
everything else goes to the current executor (strict eager today), which runs the op table.
"""
from __future__ import annotations

import torch

from .. import counters as stats
from .._tensor import TpuTensor, value_of, write, wrap, TpuStorage
from .. import strided
from ..runtime import dtypes, platform
from . import strict

aten = torch.ops.aten
_counters = stats.counters


def _device_is_tpu(device) -> bool:
    if device is None:
        return False
    return torch.device(device).type == "tpu"


# ---------------------------------------------------------------------------------------------
# Views: torch's meta kernels compute size/stride/offset; the new tensor shares the storage.
# ---------------------------------------------------------------------------------------------
_VIEW_META: dict = {}


def _hashable(x):
    if type(x) in (list, tuple):
        return tuple(_hashable(e) for e in x)
    return x


def _meta_view_input(x: TpuTensor):
    storage = x._tpu_storage
    numel = storage.nbytes // max(x.dtype.itemsize, 1)
    if storage.dtype.is_complex and not x.dtype.is_complex:
        numel = storage.nbytes // x.dtype.itemsize
    base = torch.empty(numel, dtype=x.dtype, device="meta")
    return base.as_strided(x.shape, x.stride(), x.storage_offset())


def run_view(func, args, kwargs):
    x = args[0]
    if not isinstance(x, TpuTensor):
        raise strict.device_mismatch(func, x)
    rest = args[1:]
    key = (func, x._tpu_storage.shape, x._tpu_storage.dtype, tuple(x.shape), x.stride(),
           x.storage_offset(), x.dtype, _hashable(rest), _hashable(tuple(sorted(kwargs.items()))))
    metas = _VIEW_META.get(key)
    if metas is None:
        out = func(_meta_view_input(x), *rest, **kwargs)
        single = isinstance(out, torch.Tensor)
        outs = [out] if single else list(out)
        metas = (single, [(tuple(o.shape), o.stride(), o.storage_offset(), o.dtype) for o in outs])
        _VIEW_META[key] = metas
    single, specs = metas
    storage = x._tpu_storage
    views = [TpuTensor(storage, size, stride, offset, dtype) for size, stride, offset, dtype in specs]
    return views[0] if single else views


# ---------------------------------------------------------------------------------------------
# Data movement.
# ---------------------------------------------------------------------------------------------
def _convert(array, src_shape, dst_shape, dst_dtype: torch.dtype):
    """Cast and broadcast a device array (a small cached program)."""
    from .. import compile_cache

    want = dtypes.to_jax_dtype(dst_dtype)
    if tuple(array.shape) == tuple(dst_shape) and array.dtype == want:
        return array
    key = ("convert", tuple(array.shape), array.dtype, tuple(dst_shape), want)
    prog = compile_cache.lookup(key)
    if prog is None:
        jnp = platform.jax().numpy

        def fn(a):
            if jnp.issubdtype(a.dtype, jnp.complexfloating) and not jnp.issubdtype(want, jnp.complexfloating):
                a = jnp.real(a)
            return jnp.broadcast_to(a.astype(want), tuple(dst_shape))

        prog = compile_cache.compile_program(key, fn, (array,))
    _counters["executions"] += 1
    return prog(array)


def _copy_into(dst: TpuTensor, src: torch.Tensor):
    if dst.shape != src.shape:
        try:
            torch.broadcast_shapes(src.shape, dst.shape)
            if torch.broadcast_shapes(src.shape, dst.shape) != dst.shape:
                raise RuntimeError
        except RuntimeError:
            raise RuntimeError(
                f"The size of tensor a ({tuple(dst.shape)}) must match the size of tensor b "
                f"({tuple(src.shape)}) (copy_ into a tpu tensor)") from None
    strided.check_writable(dst)
    if isinstance(src, TpuTensor):
        arr = value_of(src)
    else:
        arr = dtypes.host_to_device(src, platform.jax_device(dst._tpu_storage.device_index))
    write(dst, _convert(arr, src.shape, dst.shape, dst.dtype))
    return dst


def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, TpuTensor):
        return _copy_into(dst, src)
    # CPU destination, tpu source
    host = dtypes.device_to_host(value_of(src), src.dtype)
    dst.copy_(host)
    return dst


def _copy_from(func, args, kwargs):
    src, dst = args[0], args[1]
    return _copy_(func, (dst, src), {})


def _to_copy(func, args, kwargs):
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    device = kwargs.get("device")
    if device is not None and not _device_is_tpu(device):
        host = dtypes.device_to_host(value_of(x), x.dtype)
        if dtype != x.dtype:
            host = host.to(dtype)
        if torch.device(device).type != "cpu":
            host = host.to(device)
        return host
    if not isinstance(x, TpuTensor):  # CPU tensor -> tpu (some paths call _to_copy directly)
        arr = dtypes.host_to_device(x, platform.jax_device())
        return wrap(_convert(arr, x.shape, x.shape, dtype), dtype)
    arr = _convert(value_of(x), x.shape, x.shape, dtype)
    if arr is value_of(x):  # _to_copy must not alias: arrays are immutable, a new storage suffices
        pass
    return TpuTensor(TpuStorage(arr, arr.shape, dtype), arr.shape, dtype=dtype)


def _local_scalar_dense(func, args, kwargs):
    x = args[0]
    return dtypes.device_to_host(value_of(x), x.dtype).item()


def _equal(func, args, kwargs):
    a, b = args
    if a.shape != b.shape:
        return False
    return bool(torch.eq(a, b).all().item())


def _resize_(func, args, kwargs):
    x, size = args[0], tuple(args[1])
    if tuple(x.shape) == size:
        return x
    raise RuntimeError(
        f"tpu: cannot resize a tensor of shape {tuple(x.shape)} to {size} in place "
        "(tpu tensors have fixed sizes; allocate a new tensor, or pass an out= tensor of the right shape)")


def _is_pinned(func, args, kwargs):
    return False


def _set_source_tensor(func, args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(src, TpuTensor):
        raise strict.device_mismatch(func, src)
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise RuntimeError("tpu: set_() needs a source of the same shape and dtype")
    dst._tpu_storage = src._tpu_storage
    dst._tpu_full = src._tpu_full
    dst._tpu_cache = None
    dst._tpu_cache_version = -1
    return dst


def _fused_sdp_choice(func, args, kwargs):
    # one fused attention op of our own (aten._scaled_dot_product_fused_attention_overrideable)
    return int(torch._C._SDPBackend.OVERRIDEABLE)


def _empty_like(func, args, kwargs):
    from .. import _tensor

    x = args[0]
    return _tensor.empty(x.shape, kwargs.get("dtype") or x.dtype)


def _new_empty(func, args, kwargs):
    from .. import _tensor

    x, size = args[0], args[1]
    return _tensor.empty(size, kwargs.get("dtype") or x.dtype)


_SPECIAL = {
    aten._fused_sdp_choice.default: _fused_sdp_choice,
    aten.empty_like.default: _empty_like,
    aten.new_empty.default: _new_empty,
    aten.new_empty_strided.default: _new_empty,
    aten.copy_.default: _copy_,
    aten._copy_from.default: _copy_from,
    aten._copy_from_and_resize.default: _copy_from,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.equal.default: _equal,
    aten.resize_.default: _resize_,
    aten.is_pinned.default: _is_pinned,
    aten.set_.source_Tensor: _set_source_tensor,
}


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    special = _SPECIAL.get(func)
    if special is not None:
        return special(func, args, kwargs)
    if func.is_view:
        return run_view(func, args, kwargs)
    return strict.run_op(func, args, kwargs)


def install() -> None:
    TpuTensor.__torch_dispatch__ = classmethod(torch_dispatch)

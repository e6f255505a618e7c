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
from .launch import launch

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
    if torch.is_inference_mode_enabled() and not x.is_inference():
        # a view of a normal tensor stays a normal tensor (autograd sets its version counter)
        with torch.inference_mode(False):
            views = [TpuTensor(storage, size, stride, offset, dtype) for size, stride, offset, dtype in specs]
    else:
        views = [TpuTensor(storage, size, stride, offset, dtype) for size, stride, offset, dtype in specs]
    return views[0] if single else views


# ---------------------------------------------------------------------------------------------
# Data movement.
# ---------------------------------------------------------------------------------------------
def _convert(array, src_shape, dst_shape, dst_dtype: torch.dtype):
    """Cast and broadcast a device array (a small cached program)."""
    want = dtypes.to_jax_dtype(dst_dtype)
    if tuple(array.shape) == tuple(dst_shape) and array.dtype == want:
        return array
    key = ("convert", tuple(array.shape), array.dtype, tuple(dst_shape), want)
    fn = _CONVERT_FNS.get(key)
    if fn is None:
        jnp = platform.jax().numpy

        def fn(a):
            if jnp.issubdtype(a.dtype, jnp.complexfloating) and not jnp.issubdtype(want, jnp.complexfloating):
                a = jnp.real(a)
            return jnp.broadcast_to(a.astype(want), tuple(dst_shape))

        _CONVERT_FNS[key] = fn
    return launch(key, fn, (array,), (tuple(dst_shape), want), "copy")


_CONVERT_FNS: dict = {}


def _copy_into(dst: TpuTensor, src: torch.Tensor):
    if dst.shape != src.shape:
        try:
            fits = torch.broadcast_shapes(src.shape, dst.shape) == dst.shape
        except RuntimeError:
            fits = False
        if not fits:
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
    dtype = kwargs.get("dtype") or x.dtype
    stride = None
    if not x.is_contiguous() or kwargs.get("memory_format") not in (None, torch.preserve_format):
        # torch's layout rule (preserve_format keeps dense strides, channels_last ...) via meta
        mx = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        stride = torch.empty_like(mx, memory_format=kwargs.get("memory_format") or torch.preserve_format).stride()
    return _tensor.empty(x.shape, dtype, stride=stride)


def _new_empty(func, args, kwargs):
    from .. import _tensor

    x, size = args[0], args[1]
    stride = args[2] if func is aten.new_empty_strided.default and len(args) > 2 else None
    return _tensor.empty(size, kwargs.get("dtype") or x.dtype, stride=stride)


# ---------------------------------------------------------------------------------------------
# Boolean-mask indexing: a mask's positions depend on its values, so XLA cannot trace it. A single
# leading mask with a broadcastable value is a static select (torch.where); otherwise the mask
# becomes long indices through nonzero (a data-dependent op, which waits for the mask).
# ---------------------------------------------------------------------------------------------
def _is_mask(i) -> bool:
    return isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)


def _long_indices(indices):
    out = []
    for i in indices:
        if _is_mask(i):
            if not isinstance(i, TpuTensor):
                i = i.to("tpu")
            out.extend(i.bool().nonzero().unbind(1))
        else:
            out.append(i)
    return out


def _index_bool(func, args, kwargs):
    x, indices = args[0], args[1]
    if not any(_is_mask(i) for i in indices):
        return strict.run_op(func, args, kwargs)
    return strict.run_op(func, (x, _long_indices(indices), *args[2:]), kwargs)


def _index_put_bool(func, args, kwargs):
    x, indices, values = args[0], args[1], args[2]
    if not any(_is_mask(i) for i in indices):
        return strict.run_op(func, args, kwargs)
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    mask = indices[0]
    k = mask.dim() if _is_mask(mask) else -1
    inplace = func is not aten.index_put.default
    if (len(indices) == 1 and k > 0 and tuple(mask.shape) == tuple(x.shape[:k])
            and values.dim() <= x.dim() - k and isinstance(x, TpuTensor)):
        m = mask.bool().reshape(tuple(mask.shape) + (1,) * (x.dim() - k))
        if not isinstance(m, TpuTensor):
            m = m.to("tpu")
        v = values.to(x.dtype)
        if not isinstance(v, TpuTensor) and v.dim() > 0:
            v = v.to("tpu")
        new = torch.where(m, x + v if accumulate else v, x)
        if inplace:
            return _copy_into(x, new)
        return new
    return strict.run_op(func, (x, _long_indices(indices), *args[2:]), kwargs)


def _as_strided_(func, args, kwargs):
    """In-place metadata change (squeeze_, unsqueeze_, transpose_, t_ land here): set the
    wrapper's own sizes/strides with torch's kernel, then refresh what the payload cached."""
    from .. import _tensor

    x = args[0]
    torch.ops.aten.as_strided_.default._op_dk(
        torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional, *args, **kwargs)
    _tensor.refresh_layout(x)
    return x


def _like(func, args, kwargs):
    # zeros_like & co. of a non-contiguous tensor keep its layout: torch's composite kernel
    # (empty_like + fill) does that; the contiguous case runs the op table.
    x = args[0]
    if isinstance(x, TpuTensor) and not x.is_contiguous() and \
            kwargs.get("memory_format") in (None, torch.preserve_format):
        return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
    return strict.run_op(func, args, kwargs)


def _clone(func, args, kwargs):
    # clone keeps a non-contiguous dense layout (preserve_format), as on CPU
    x = args[0]
    if isinstance(x, TpuTensor) and not x.is_contiguous() and \
            kwargs.get("memory_format") in (None, torch.preserve_format):
        return _copy_into(_empty_like(None, (x,), {}), x)
    return strict.run_op(func, args, kwargs)


def _has_compatible_shallow_copy_type(func, args, kwargs):
    # reached under inference_mode by nn.Module.to(): only two tpu tensors can share a TensorImpl type
    a, b = args
    return isinstance(a, TpuTensor) and isinstance(b, TpuTensor)


_SPECIAL = {
    aten._has_compatible_shallow_copy_type.default: _has_compatible_shallow_copy_type,
    aten.clone.default: _clone,
    aten.zeros_like.default: _like,
    aten.ones_like.default: _like,
    aten.full_like.default: _like,
    aten.rand_like.default: _like,
    aten.randn_like.default: _like,
    aten.index.Tensor: _index_bool,
    aten.index_put.default: _index_put_bool,
    aten.index_put_.default: _index_put_bool,
    aten._index_put_impl_.default: _index_put_bool,
    aten.as_strided_.default: _as_strided_,
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
    if len(types) > 1 or types[0] is not TpuTensor:
        # another tensor subclass takes part (AsyncCollectiveTensor, DTensor ...): let it unwrap first
        if any(not issubclass(t, TpuTensor) for t in types):
            return NotImplemented
    route = _ROUTES.get(id(func))  # id: OpOverload.__hash__ is Python code, too slow for every op
    if route is None:
        route = _ROUTES[id(func)] = _route(func)
    return route(func, args, kwargs or {})


def _route(func):
    """How an op is handled: a special handler, a view, a maybe-view composite, or the executor."""
    special = _SPECIAL.get(func)
    if special is not None:
        return special
    if func.is_view:
        # CompositeImplicit "maybe-view" ops (to, reshape ...) may copy: let torch decide.
        if strict._has_composite_implicit(func):
            return lambda f, args, kwargs: f.decompose(*args, **kwargs)
        return run_view
    return strict.run_op


_ROUTES: dict = {}


def add_special(handlers: dict) -> None:
    """Register more special handlers (collectives); forgets cached routes."""
    _SPECIAL.update(handlers)
    _ROUTES.clear()


def install() -> None:
    TpuTensor.__torch_dispatch__ = classmethod(torch_dispatch)

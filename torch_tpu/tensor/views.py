"""View ops: torch's meta kernels compute the view's size, stride and offset; the new tensor shares
its base's storage, so writes through either are seen by both. No device work happens here."""
from __future__ import annotations

import torch

from ..errors import device_mismatch
from ..runtime import caches
from .tensor import TpuTensor

_VIEW_META: dict = caches.register("view metadata", {})


def _hashable(x):
    if type(x) in (list, tuple):
        return tuple(_hashable(e) for e in x)
    return x


def _meta_view_input(x: TpuTensor):
    storage = x._tpu_storage
    numel = storage.nbytes // max(x.dtype.itemsize, 1)
    base = torch.empty(numel, dtype=x.dtype, device="meta")
    return base.as_strided(x.shape, x.stride(), x.storage_offset())


def run_view(func, args, kwargs):
    x = args[0]
    if not isinstance(x, TpuTensor):
        raise device_mismatch(func, x)
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

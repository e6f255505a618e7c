"""View ops: torch's meta kernels compute the view's size, stride and offset; the new tensor shares
its base's storage, so writes through either are seen by both. No device work happens here."""
from __future__ import annotations

import torch

from ..errors import device_mismatch
from ..runtime import caches, program_cache
from .tensor import TpuTensor, is_full, new_view

_VIEW_META: dict = caches.register("view metadata", caches.Bounded(program_cache.max_programs))

# Set once a tensor with a math bit (conj or neg, from ``x.conj()`` / ``x.imag`` of a conjugate view)
# exists: until then the router checks no argument for the bits (the hot path stays as it was).
MATH_BITS_SEEN = [False]


_SEQUENCES = (list, tuple)


def _hashable(x):
    if type(x) in _SEQUENCES:
        return tuple([_hashable(e) for e in x])
    return x


def _hashable_args(args: tuple) -> tuple:
    """``_hashable(args)`` of a tuple: the tuple itself unless it holds a list (a view's sizes)."""
    for e in args:
        if type(e) in _SEQUENCES:
            if len(args) == 1:  # (``x.view(sizes)``, ``x.permute(dims)``: no comprehension)
                return (_hashable(e),)
            return tuple([_hashable(e) for e in args])
    return args


def _meta_view_input(x: TpuTensor):
    storage = x._tpu_storage
    numel = storage.nbytes // max(x.dtype.itemsize, 1)
    base = torch.empty(numel, dtype=x.dtype, device="meta")
    out = base.as_strided(x.shape, x.stride(), x.storage_offset())
    if x.is_conj():
        torch._C._set_conj(out, True)
    if x.is_neg():
        torch._C._set_neg(out, True)
    return out


def run_view(func, args, kwargs):
    x = args[0]
    if not isinstance(x, TpuTensor):
        raise device_mismatch(func, x)
    rest = args[1:]
    storage = x._tpu_storage
    # the math bits (conj, neg) are part of the key: torch's meta kernels keep them on views, toggle
    # them (_conj, _neg_view) or refuse them (view_as_real of a conjugate view). Until a tensor with one
    # exists (MATH_BITS_SEEN) no tensor has one: the key holds what reading them would give.
    if MATH_BITS_SEEN[0]:
        conj, neg = x.is_conj(), x.is_neg()
    else:
        conj = neg = False
    # id(func): OpOverload.__hash__ is Python code (op_path's keys and the router's routes use the id too);
    # the entry holds func, so the id stays its own while the entry lives
    key = (id(func), storage.shape, storage.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.dtype,
           conj, neg, _hashable_args(rest), _hashable(tuple(sorted(kwargs.items()))) if kwargs else ())
    metas = _VIEW_META.get(key)
    if metas is None:
        out = func(_meta_view_input(x), *rest, **kwargs)
        single = isinstance(out, torch.Tensor)
        outs = [out] if single else list(out)
        # each view's spec ends with whether it is all of its storage (``TpuTensor._tpu_full``): the key
        # holds the storage's shape and dtype, so that is known once per key
        metas = (single, [(tuple(o.shape), o.stride(), o.storage_offset(), o.dtype, o.is_conj(), o.is_neg(),
                           is_full(storage, tuple(o.shape), o.stride(), o.storage_offset(), o.dtype))
                          for o in outs], func)
        if func is torch.ops.aten.as_strided.default:
            for spec in metas[1]:
                check_in_storage(x._tpu_storage.nbytes, *spec[:4])
        _VIEW_META[key] = metas
    single, specs, _ = metas
    if not storage.nbytes:  # freed by untyped_storage().resize_(0): CPU's view kernels check the bounds
        for spec in specs:
            check_in_storage(0, *spec[:4])
    inference = _inference_mode_enabled()
    if inference == x.is_inference():  # (a normal tensor outside inference_mode: the hot path)
        if single:
            size, stride, offset, dtype, conj, neg, full = specs[0]
            v = new_view(storage, size, stride, offset, dtype, full)
            if conj or neg:
                _set_math_bits(v, conj, neg)
            return v
        return [_view(storage, *spec) for spec in specs]
    if inference:
        # a view of a normal tensor stays a normal tensor (autograd sets its version counter)
        with torch.inference_mode(False):
            views = [_view(storage, *spec) for spec in specs]
    else:
        # a view of an inference tensor is one too, wherever it is made: torch refuses to write it, to
        # save it for backward or to make it require grad outside inference_mode (a view made outside was
        # a normal tensor, so ``v = y[1:]; v.add_(1)`` wrote the inference tensor y without an error)
        with torch.inference_mode(True):
            views = [_view(storage, *spec) for spec in specs]
    return views[0] if single else views


_inference_mode_enabled = torch.is_inference_mode_enabled


def check_in_storage(storage_nbytes: int, size, stride, offset: int, dtype) -> None:
    """torch's bounds check of a strided view of a storage (``as_strided`` past the end of the
    storage); meta storages skip it, so a tpu view would read past its storage."""
    if any(s == 0 for s in size):
        return
    need = (1 + offset + sum((s - 1) * st for s, st in zip(size, stride))) * dtype.itemsize
    if need > storage_nbytes:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and itemsize "
            f"{dtype.itemsize} requiring a storage size of {need} are out of bounds for storage of size "
            f"{storage_nbytes}")


def _view(storage, size, stride, offset, dtype, conj, neg, full):
    v = new_view(storage, size, stride, offset, dtype, full)
    if conj or neg:
        _set_math_bits(v, conj, neg)
    return v


def _set_math_bits(v, conj: bool, neg: bool) -> None:
    MATH_BITS_SEEN[0] = True
    torch._C._set_conj(v, conj)
    torch._C._set_neg(v, neg)


def without_math_bits(x: TpuTensor) -> TpuTensor:
    """The same view of the same storage with no conj/neg bit: what the storage holds."""
    return TpuTensor(x._tpu_storage, tuple(x.shape), x.stride(), x.storage_offset(), x.dtype)

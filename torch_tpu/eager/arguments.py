"""Walking an op's arguments: its structural key and its dynamic (array) inputs, in one pass; and the
argument templates that put traced arrays back in their places."""
from __future__ import annotations

import torch

from ..engine import launchers
from ..engine.fused import LazyArray
from ..errors import device_mismatch
from ..runtime import dtypes, platform
from ..tensor.tensor import TpuTensor, value_of


class Slot:
    """Placeholder for a dynamic array input in an argument template."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def _walk(func, x, sig, arrays, allow_cpu):
    if isinstance(x, TpuTensor):
        sig.append((x.shape, x.dtype))
        arr = value_of(x)
        if type(arr) is LazyArray:
            arr = launchers.current.take(arr)
        arrays.append(arr)
    elif isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise RuntimeError(f"{func}: cannot mix meta and tpu tensors")
        if x.dim() != 0 and not allow_cpu:
            raise device_mismatch(func, x)
        sig.append(("cpu", x.shape, x.dtype))
        arrays.append(dtypes.host_to_device(x, platform.jax_device()))
    elif type(x) in (list, tuple):
        sig.append((type(x), len(x)))
        for e in x:
            _walk(func, e, sig, arrays, allow_cpu)
    elif isinstance(x, torch.Generator):
        raise RuntimeError(
            f"{func}: expected a 'tpu' device type for generator but found '{x.device.type}'. "
            "Create random tensors on the CPU with that generator and move them, as diffusers does.")
    else:
        sig.append(x)


# index ops accept CPU index tensors (like CUDA)
_CPU_INDEX_OPS = {id(op) for op in (torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default,
                                    torch.ops.aten.index_put_.default, torch.ops.aten._index_put_impl_.default)}


def key_and_inputs(func, args, kwargs):
    """(structural key, dynamic arrays) of a call. Hot path: plain tpu tensors are inlined."""
    sig = [id(func)]  # id: OpOverload.__hash__ is Python code
    arrays = []
    allow_cpu = id(func) in _CPU_INDEX_OPS
    for a in args:
        if type(a) is TpuTensor and a._tpu_full:
            storage = a._tpu_storage
            arr = storage.array
            if arr is None:
                arr = storage.value()
            elif type(arr) is LazyArray:
                arr = storage.array = launchers.current.take(arr)
            sig.append((arr.shape, a.dtype))
            arrays.append(arr)
        else:
            _walk(func, a, sig, arrays, allow_cpu)
    if kwargs:
        for k, v in kwargs.items():
            sig.append(k)
            _walk(func, v, sig, arrays, allow_cpu)
    return tuple(sig), arrays


def template(x, counter):
    """``x`` with every tensor replaced by a Slot numbered in walk order (``counter[0]`` counts)."""
    if isinstance(x, torch.Tensor):
        s = Slot(counter[0])
        counter[0] += 1
        return s
    if type(x) in (list, tuple):
        return type(x)(template(e, counter) for e in x)
    return x


def fill(x, arrays):
    """A template with its Slots replaced by ``arrays``."""
    if isinstance(x, Slot):
        return arrays[x.index]
    if type(x) in (list, tuple):
        return type(x)(fill(e, arrays) for e in x)
    return x


def to_meta(x):
    """Arguments for torch's meta kernel: tensors as meta tensors, the tpu device as meta."""
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("meta")
    if type(x) in (list, tuple):
        return type(x)(to_meta(e) for e in x)
    return x

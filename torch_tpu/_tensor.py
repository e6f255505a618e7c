"""The tpu tensor: a torch wrapper subclass whose data lives in an XLA buffer.

Aliasing model (the same one torch's own devices use): every tensor is a strided view of a
*storage*. A storage holds one immutable JAX array in its base's logical shape; mutating any view
replaces that array (a functional scatter) and bumps the storage's version, so the base and every
other view see the change the next time they are read. Views remember their torch metadata
(size, stride, storage offset), computed by torch's own meta kernels, and read their value lazily
with a small cached program (see ``strided.py``).
"""
from __future__ import annotations

import math

import torch

from .runtime import dtypes, platform

_DEVICE: torch.device | None = None


def device_for(index: int = 0) -> torch.device:
    global _DEVICE
    if index == 0:
        if _DEVICE is None:
            _DEVICE = torch.device("tpu", 0)
        return _DEVICE
    return torch.device("tpu", index)


class _MemoryCounter:
    """Bytes held by live storages of this process (for platforms whose PJRT reports none)."""

    in_use = 0
    peak = 0


class TpuStorage:
    """A mutable holder of one immutable device array (the base's data)."""

    __slots__ = ("array", "shape", "dtype", "version", "nbytes", "device_index", "__weakref__")

    def __init__(self, array, shape, dtype: torch.dtype, device_index: int = 0):
        self.array = array  # jax.Array, or None: not yet written (reads as zeros)
        self.shape = tuple(shape)
        self.dtype = dtype
        self.version = 0
        self.device_index = device_index
        self.nbytes = math.prod(self.shape) * dtype.itemsize
        _MemoryCounter.in_use += self.nbytes
        if _MemoryCounter.in_use > _MemoryCounter.peak:
            _MemoryCounter.peak = _MemoryCounter.in_use

    def __del__(self):
        _MemoryCounter.in_use -= self.nbytes

    def value(self):
        arr = self.array
        if arr is None:
            jnp = platform.jax().numpy
            with platform.jax().default_device(platform.jax_device(self.device_index)):
                arr = jnp.zeros(self.shape, dtypes.to_jax_dtype(self.dtype))
            self.array = arr
        return arr

    def set(self, array) -> None:
        self.array = array
        self.version += 1


def _contiguous_strides(shape) -> tuple:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


class TpuTensor(torch.Tensor):
    """A tensor on the "tpu" device. Users never construct it directly."""

    _tpu_storage: TpuStorage
    _tpu_full: bool

    @staticmethod
    def __new__(cls, storage: TpuStorage, size, stride=None, offset: int = 0, dtype=None,
                requires_grad: bool = False):
        dtype = storage.dtype if dtype is None else dtype
        device = device_for(storage.device_index)
        if stride is None:
            t = torch.Tensor._make_wrapper_subclass(
                cls, size, dtype=dtype, device=device, requires_grad=requires_grad)
            full = dtype == storage.dtype and tuple(size) == storage.shape
        else:
            t = torch.Tensor._make_wrapper_subclass(
                cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=device,
                requires_grad=requires_grad)
            full = (dtype == storage.dtype and offset == 0 and tuple(size) == storage.shape
                    and (math.prod(storage.shape) <= 1 or tuple(stride) == _contiguous_strides(size)))
        t._tpu_storage = storage
        t._tpu_full = full
        t._tpu_cache = None
        t._tpu_cache_version = -1
        return t

    # Dispatch is installed by torch_tpu.executors.dispatch (keeps this module free of op logic).
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None):
        try:
            body = repr(self.detach().cpu())
        except Exception as exc:  # never let repr raise while debugging
            return f"<tpu tensor {tuple(self.shape)} {self.dtype}: value unavailable ({exc})>"
        if body.startswith("tensor("):
            body = body[: -1] if body.endswith(")") else body
            return f"{body}, device='{self.device}')"
        return body

    # ``p.data = w`` must also move the payload, which lives on the Python object.
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, TpuTensor):
            raise RuntimeError(
                f"cannot assign a {new.device} tensor to .data of a {self.device} tensor; "
                f"move it first with .to('{self.device}')")
        torch._C.TensorBase.data.__set__(self, new)
        self._tpu_storage = new._tpu_storage
        self._tpu_full = new._tpu_full
        self._tpu_cache = new._tpu_cache
        self._tpu_cache_version = new._tpu_cache_version

    def __reduce_ex__(self, proto):
        # torch.save / pickling: store the CPU value and come back on the tpu device.
        return (_rebuild_from_cpu, (self.detach().cpu(), self.requires_grad))

    def __tensor_flatten__(self):  # used by torch.compile (issue 5); kept minimal here
        return [], None

    def numpy(self, *, force: bool = False):
        raise TypeError(
            "can't convert tpu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
            "to host memory first.")


def _rebuild_from_cpu(cpu_tensor: torch.Tensor, requires_grad: bool):
    t = cpu_tensor.to("tpu")
    if requires_grad:
        t.requires_grad_(True)
    return t


def value_of(t: TpuTensor):
    """The device array holding t's logical value (computing a view's value if needed)."""
    storage = t._tpu_storage
    if t._tpu_full:
        arr = storage.array
        return arr if arr is not None else storage.value()
    if t._tpu_cache_version == storage.version:
        return t._tpu_cache
    from . import strided

    arr = strided.read(storage, t)
    t._tpu_cache = arr
    t._tpu_cache_version = storage.version
    return arr


def write(t: TpuTensor, array) -> None:
    """Make ``array`` (t's shape and dtype) the new value of t, and so of its base and other views."""
    storage = t._tpu_storage
    if t._tpu_full:
        storage.set(array)
        return
    from . import strided

    storage.set(strided.write(storage, t, array))
    t._tpu_cache = array
    t._tpu_cache_version = storage.version


def wrap(array, dtype: torch.dtype | None = None, device_index: int = 0) -> TpuTensor:
    """A new tensor owning a fresh storage that holds ``array``."""
    if dtype is None:
        dtype = dtypes.to_torch_dtype(array.dtype)
    return TpuTensor(TpuStorage(array, array.shape, dtype, device_index), array.shape, dtype=dtype)


def empty(size, dtype: torch.dtype, device_index: int = 0, stride=None) -> TpuTensor:
    """A new tensor whose storage is written later (reads as zeros if never written)."""
    size = tuple(size)
    storage = TpuStorage(None, size, dtype, device_index)
    return TpuTensor(storage, size, dtype=dtype)


def memory_in_use() -> int:
    return _MemoryCounter.in_use


def memory_peak() -> int:
    return _MemoryCounter.peak


def reset_memory_peak() -> None:
    _MemoryCounter.peak = _MemoryCounter.in_use


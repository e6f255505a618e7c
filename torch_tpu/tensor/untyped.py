"""``tensor.untyped_storage()`` and ``tensor.data_ptr()`` for tpu tensors.

A tpu storage has no host-addressable memory (its value is an XLA buffer, replaced on every write), but
libraries identify storages by pointer: safetensors, transformers and diffusers find shared (tied)
tensors by ``untyped_storage().data_ptr()`` and ``nbytes()``, and view overlaps by ``tensor.data_ptr()``.
torch's own storage object of a Python wrapper subclass refuses ``data_ptr()`` ("invalid python
storage"), and its ``clone()``/``cpu()`` crash or fail.

Here each ``TpuStorage`` gets, on first request, an *address*: a stable, non-zero integer in a private
range (never reused in the process, never overlapping another storage's bytes, outside any host
mapping, like a device pointer), and ``untyped_storage()`` returns a ``TpuUntypedStorage``: a
``torch.UntypedStorage`` of the right ``nbytes`` (backed by a meta storage: no memory) whose
``device``, ``data_ptr``, ``cpu``, ``clone``, ``copy_``, ``tolist`` and pickling act on the tpu
storage, and whose other mutations raise a clear error instead of silently touching the meta stand-in.
Every view of one storage returns the same object while one of them holds it (as torch does).
"""
from __future__ import annotations

import itertools
import math
import threading
import weakref

import torch

from ..engine.deferred_errors import readable_array
from ..runtime import dtypes, memory, platform
from .tensor import TpuStorage, TpuTensor, _dynamo_tracing

# addresses start above the 57-bit user address space (non-canonical on x86-64 and aarch64: never a
# host pointer) and only grow, so no two storages of this process ever share or overlap an address
_BASE = 1 << 57
_ALIGN = 512
_LOCK = threading.Lock()
_next = [_BASE]


def address(storage: TpuStorage) -> int:
    """The storage's stable, unique, non-zero address (assigned on first request)."""
    try:
        return storage._ptr
    except AttributeError:
        pass
    with _LOCK:
        try:
            return storage._ptr
        except AttributeError:
            ptr = _next[0]
            size = max(math.prod(storage.shape) * storage.dtype.itemsize, 1)  # also while freed (resize_(0))
            _next[0] = ptr + (size + _ALIGN - 1) // _ALIGN * _ALIGN
            storage._ptr = ptr
            return ptr


def _unsupported(name: str):
    def method(self, *args, **kwargs):
        raise RuntimeError(
            f"UntypedStorage.{name}() is not supported for a tpu storage (its bytes live in an XLA "
            f"buffer, not host memory); copy it to the CPU first with .cpu(), or work on the tensor")

    method.__name__ = name
    return method


class TpuUntypedStorage(torch.UntypedStorage):
    """The untyped storage of tpu tensors (see the module docstring). Not constructible directly."""

    def __new__(cls, *args, **kwargs):
        raise RuntimeError(
            "a tpu UntypedStorage cannot be allocated directly; create a tensor on the tpu device "
            "(torch.empty(n, dtype=torch.uint8, device='tpu')) and use its untyped_storage()")

    @classmethod
    def _of(cls, storage: TpuStorage) -> "TpuUntypedStorage":
        ref = getattr(storage, "_py", None)
        known = ref() if ref is not None else None
        if known is not None:
            return known
        obj = _C_STORAGE_NEW(cls, storage.nbytes, device="meta")
        obj._tpu = storage
        storage._py = weakref.ref(obj)
        return obj

    # --- identity ---------------------------------------------------------------------------
    @property
    def device(self):
        return torch.device("tpu", self._tpu.device_index)

    @property
    def is_cuda(self):
        return False

    @property
    def is_tpu(self):
        return True

    def get_device(self) -> int:
        return self._tpu.device_index

    def data_ptr(self) -> int:
        return address(self._tpu)

    def _data_ptr(self) -> int:
        return address(self._tpu)

    def untyped(self):
        return self

    def is_pinned(self, device=None) -> bool:
        return False

    def is_shared(self) -> bool:
        return False

    # --- values ---------------------------------------------------------------------------------
    def _host_tensor(self) -> torch.Tensor:
        storage = self._tpu
        if not storage.nbytes:  # also freed (resize_(0)): no bytes, as CPU's
            return torch.empty(0, dtype=storage.dtype)
        return dtypes.device_to_host(readable_array(storage.value()), storage.dtype).reshape(-1)

    def cpu(self):
        """A CPU copy of the bytes (a new ``torch.UntypedStorage``)."""
        return self._host_tensor().untyped_storage()

    def clone(self):
        """A new tpu storage with the same bytes (device arrays are immutable: nothing is copied)."""
        storage = self._tpu
        new = TpuStorage(storage.array, storage.shape, storage.dtype, storage.device_index)
        return TpuUntypedStorage._of(new)  # it owns the new TpuStorage, which refers back weakly

    def to(self, *, device, non_blocking: bool = False):
        device = torch.device(device)
        if device.type == "cpu":
            return self.cpu()
        if device.type == "tpu" and (device.index or 0) == self._tpu.device_index:
            return self
        raise RuntimeError(f"a tpu storage can be moved to the CPU only (got {device})")

    def copy_(self, src, non_blocking=None):
        """Replace the bytes with those of ``src`` (a CPU or tpu storage of the same nbytes)."""
        storage = self._tpu
        if src.nbytes() != self.nbytes():
            raise RuntimeError(f"size does not match, self was {self.nbytes()} bytes but src was "
                               f"{src.nbytes()} bytes")
        if isinstance(src, TpuUntypedStorage):
            if src._tpu is storage:
                return self
            if src._tpu.dtype == storage.dtype and src._tpu.shape == storage.shape:
                storage.set(src._tpu.value())
                return self
            src = src.cpu()
        elif isinstance(src, torch.TypedStorage):
            src = src.untyped()
        if src.device.type != "cpu":
            src = src.cpu()
        host = torch.empty(0, dtype=torch.uint8).set_(src).view(storage.dtype).reshape(storage.shape)
        storage.set(dtypes.host_to_device(host, platform.jax_device(storage.device_index)))
        return self

    def tolist(self):
        return self.cpu().tolist()

    def __getitem__(self, idx):
        return self.cpu()[idx]

    def __iter__(self):
        return iter(self.cpu())

    def __repr__(self):
        return str(self.cpu()).replace("(device=cpu)", f"(device={self.device})")

    __str__ = __repr__

    def __reduce__(self):
        return (_rebuild, (self._host_tensor().view(torch.uint8).numpy().tobytes(), self._tpu.device_index))

    def __deepcopy__(self, memo):
        known = memo.get(id(self))
        if known is None:
            known = memo[id(self)] = self.clone()
        return known

    def __copy__(self):
        return self.clone()

    def resize_(self, size):
        """Free the bytes (``resize_(0)``) and re-allocate them at the storage's size (FSDP's
        ``free_storage``/``alloc_storage`` of a flat parameter or an all-gather buffer); the tensors and
        views of the storage keep their geometry. Re-allocated bytes read as zeros (CPU: uninitialised).
        Other sizes are refused (a tpu storage holds one array in its base's shape)."""
        storage = self._tpu
        nbytes, full = int(size), math.prod(storage.shape) * storage.dtype.itemsize
        if nbytes == storage.nbytes:
            return self
        if nbytes != 0 and (nbytes != full or storage.nbytes):
            raise RuntimeError(
                f"UntypedStorage.resize_({nbytes}) of a tpu storage of {storage.nbytes} bytes: a tpu storage can "
                f"only be freed (resize_(0)) and re-allocated at its size ({full} bytes); allocate a new tensor "
                "for another size")
        memory.resized(storage.nbytes, nbytes)
        storage.nbytes = nbytes
        storage.array = None  # dropped; re-allocated: reads as zeros
        storage.reshaped = None
        storage.version += 1  # views' cached values are stale
        _C_STORAGE_RESIZE(self, nbytes)  # the meta stand-in's nbytes()
        return self

    # the meta stand-in must never be written through torch's C methods: each of these raises
    fill_ = _unsupported("fill_")
    __setitem__ = _unsupported("__setitem__")
    def share_memory_(self, *args, **kwargs):
        """A no-op, as torch's for every storage but the CPU's (only CPU memory moves to POSIX shared
        memory): ``module.share_memory()`` of a tpu model raised."""
        return self

    _share_memory_ = share_memory_

    _share_fd_cpu_ = _unsupported("_share_fd_cpu_")
    _share_filename_cpu_ = _unsupported("_share_filename_cpu_")
    _share_cuda_ = _unsupported("_share_cuda_")
    pin_memory = _unsupported("pin_memory")
    _write_file = _unsupported("_write_file")
    byteswap = _unsupported("byteswap")
    _byteswap = _unsupported("_byteswap")
    _set_from_file = _unsupported("_set_from_file")
    _set_cdata = _unsupported("_set_cdata")
    _to = _unsupported("_to")
    cuda = _unsupported("cuda")
    mps = _unsupported("mps")
    hpu = _unsupported("hpu")


def _rebuild(data: bytes, device_index: int) -> TpuUntypedStorage:
    host = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    array = dtypes.host_to_device(host, platform.jax_device(device_index))
    return TpuUntypedStorage._of(TpuStorage(array, (len(data),), torch.uint8, device_index))


def _is_tpu(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "tpu"
    return isinstance(device, str) and device.split(":", 1)[0] == "tpu"


def _storage_new(cls, *args, device=None, **kwargs):
    """``torch.UntypedStorage(n, device="tpu")`` (torch would call a null allocator and crash): a
    tpu storage of n bytes reading as zeros, or of the given sequence's bytes."""
    if device is None or not _is_tpu(device):
        if device is not None:
            kwargs["device"] = device
        return _C_STORAGE_NEW(cls, *args, **kwargs)
    index = torch.device(device).index or 0
    if kwargs or len(args) != 1:
        raise RuntimeError(f"torch.UntypedStorage(..., device={device!r}): only a size or a sequence "
                           "of bytes is supported for a tpu storage")
    if isinstance(args[0], int):
        return TpuUntypedStorage._of(TpuStorage(None, (args[0],), torch.uint8, index))
    host = torch.empty(0, dtype=torch.uint8).set_(_C_STORAGE_NEW(torch.UntypedStorage, args[0]))
    array = dtypes.host_to_device(host, platform.jax_device(index))
    return TpuUntypedStorage._of(TpuStorage(array, tuple(host.shape), torch.uint8, index))


_C_STORAGE_NEW = torch._C.StorageBase.__new__
_C_STORAGE_RESIZE = torch._C.StorageBase.resize_
_ORIGINAL_UNTYPED_STORAGE = torch.Tensor.untyped_storage


def untyped_storage(self: TpuTensor):
    if _dynamo_tracing():  # dynamo describes the fake's storage: keep torch's own object there
        return _ORIGINAL_UNTYPED_STORAGE(self)
    storage = self._tpu_storage
    held = self.__dict__.get("_tpu_untyped")
    if held is not None and held._tpu is storage:
        return held
    obj = TpuUntypedStorage._of(storage)
    self.__dict__["_tpu_untyped"] = obj  # the tensor keeps it alive, so its views find the same one
    return obj


def data_ptr(self: TpuTensor) -> int:
    """The storage's address plus the view's byte offset (an identity, not a host pointer)."""
    return address(self._tpu_storage) + self.storage_offset() * self.element_size()


def install() -> None:
    TpuTensor.untyped_storage = untyped_storage
    TpuTensor.data_ptr = data_ptr
    if torch.UntypedStorage.__dict__.get("__new__") is None:
        torch.UntypedStorage.__new__ = _storage_new

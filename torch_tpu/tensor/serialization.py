"""Saving and loading tpu tensors: ``torch.save``/``torch.load``/pickle, and ``map_location="tpu"``.

A tpu tensor pickles as (its storage's value as one CPU tensor, offset, size, stride, dtype,
requires_grad, is-a-Parameter). Views of one storage hand the pickler the same CPU tensor object, so
it is written once and every view comes back as a view of one new storage: sharing, strides and
``nn.Parameter`` survive the round trip, and ``map_location`` chooses the device as usual.

CPU checkpoints loaded with ``map_location="tpu"``: a tpu tensor has no byte-addressable storage, so
the deserializer keeps the bytes on the CPU and marks the storage; the tensor rebuild then makes each
tensor a view (size, stride, offset) of one tpu storage per saved storage, so views keep sharing.
"""
from __future__ import annotations

import re
import threading
import weakref

import torch

from ..engine.deferred_errors import readable_array
from ..runtime import dtypes, platform
from .tensor import TpuStorage, TpuTensor

# storage -> (version, weak ref to its CPU copy): while one torch.save runs, the pickler's memo keeps
# the copy alive, so every view of the storage reduces to the same object (written once)
_HOST_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# the storages a legacy-format torch.load (this thread's) rebuilt before their bytes were read
_LEGACY = threading.local()
# id of a CPU copy being loaded -> the storage rebuilt from it (views of one storage share it again);
# an entry leaves when its CPU copy dies (tensors compare by value, so no WeakKeyDictionary)
_LOADED: dict = {}


def _storage_loaded_from(host, device_index: int) -> TpuStorage:
    key = id(host)
    known = _LOADED.get(key)
    if known is not None and known[0]() is host:
        return known[1]
    pending = getattr(_LEGACY, "pending", None)
    if pending is not None and getattr(host.untyped_storage(), "_torch_load_uninitialized", False):
        # torch.save(_use_new_zipfile_serialization=False) files hold the bytes after the pickle: torch
        # reads them into ``host`` once every tensor is rebuilt, so the upload waits for that (it copied
        # uninitialised memory: every value loaded was garbage)
        storage = TpuStorage(None, tuple(host.shape), host.dtype, device_index)
        pending.append((storage, host))
    else:
        array = dtypes.host_to_device(host, platform.jax_device(device_index))
        storage = TpuStorage(array, tuple(host.shape), host.dtype, device_index)
    _LOADED[key] = (weakref.ref(host, lambda _, key=key: _LOADED.pop(key, None)), storage)
    return storage


def _host_copy(storage: TpuStorage) -> torch.Tensor:
    known = _HOST_COPIES.get(storage)
    if known is not None and known[0] == storage.version:
        host = known[1]()
        if host is not None:
            return host
    host = dtypes.device_to_host(readable_array(storage.value()), storage.dtype).reshape(storage.shape)
    _HOST_COPIES[storage] = (storage.version, weakref.ref(host))
    return host


def _python_state(t) -> dict:
    """The Python attributes a tensor carries (``p.tag = ...``), which torch pickles with it; not the
    backend's own (``_tpu_*``) nor the Parameter flag."""
    return {k: v for k, v in t.__dict__.items() if not k.startswith("_tpu_") and k != "_is_param"}


def _reduce_ex(self, proto):
    args = (_host_copy(self._tpu_storage), self.storage_offset(), tuple(self.shape), tuple(self.stride()),
            self.dtype, self.requires_grad, bool(getattr(self, "_is_param", False)), str(self.device))
    state = _python_state(self)
    return (rebuild_tpu_tensor, args + (state,) if state else args)


def rebuild_tpu_tensor(host, offset, size, stride, dtype, requires_grad, is_param, device, state=None):
    """Unpickling: the view (size, stride, offset, dtype) of ``host``, on the restore location, with the
    Python attributes it had (``state``; torch keeps them too: they were lost)."""
    tensor = _rebuild(host, offset, size, stride, dtype, requires_grad, is_param, device)
    for k, v in (state or {}).items():
        setattr(tensor, k, v)
    return tensor


def _rebuild(host, offset, size, stride, dtype, requires_grad, is_param, device):
    target = _restore_location(host, device)
    if isinstance(host, TpuTensor):  # map_location="tpu" already moved the saved CPU copy (see install)
        storage = host._tpu_storage
        tensor = TpuTensor(storage, size, stride, offset, dtype)
    elif target.type == "tpu":
        tensor = TpuTensor(_storage_loaded_from(host, target.index or 0), size, stride, offset, dtype)
    else:
        tensor = host.reshape(-1).view(dtype).as_strided(size, stride, offset).to(target)
    if is_param:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def _restore_location(host, device: str) -> torch.device:
    """Where ``torch.load``'s map_location puts a tensor saved on ``device``. A callable map_location
    (``lambda storage, loc: storage``) is called as torch calls it for CPU checkpoints, with the saved
    values' storage: the device of what it returns, or ``device`` when it returns None (torch's own
    helper refuses callables for wrapper tensors)."""
    map_location = torch.serialization._serialization_tls.map_location
    if map_location is None or isinstance(map_location, (dict, str, torch.device)):
        return torch.device(torch._utils._get_restore_location(device))
    if isinstance(host, TpuTensor):
        return host.device
    result = map_location(host.untyped_storage(), device)
    if result is None:
        return torch.device(device)
    where = getattr(result, "device", None)
    if where is None:
        raise RuntimeError(f"torch.load: map_location returned {type(result).__name__}, expected a storage "
                           "or None")
    return torch.device(where)


def _view_of_loaded_storage(storage, offset, size, stride, device) -> TpuTensor:
    """A tensor of a CPU checkpoint loaded with map_location="tpu": a view of one tpu storage holding the
    whole saved storage, so tensors saved as views of one storage still share it (and keep their
    strides and offset), as they do when loaded on the CPU."""
    untyped = storage._untyped_storage
    flats = untyped.__dict__.setdefault("_tpu_flat", {})
    host = flats.get(storage.dtype)
    if host is None:  # kept on the storage object: _storage_loaded_from finds its device copy by identity
        host = flats[storage.dtype] = torch.empty(0, dtype=storage.dtype).set_(storage)
    tpu_storage = _storage_loaded_from(host, device.index or 0)
    return TpuTensor(tpu_storage, tuple(size), tuple(stride), int(offset), storage.dtype)


_PATTERN = re.compile(r"^tpu(:[0-9]+)?$")


def _tag(obj):
    return None  # tpu tensors never reach torch.save's storage path


def _deserialize(obj, location):
    if isinstance(location, str) and _PATTERN.match(location):
        if obj.device.type != "cpu":
            obj = obj.cpu()
        obj._tpu_restore_device = location
        return obj
    return None


def _legacy_load_then_upload(original):
    def _legacy_load(*args, **kwargs):
        outer = getattr(_LEGACY, "pending", None)
        _LEGACY.pending = pending = []
        try:
            result = original(*args, **kwargs)
        finally:
            _LEGACY.pending = outer
        for storage, host in pending:  # the bytes are read now
            storage.set(dtypes.host_to_device(host, platform.jax_device(storage.device_index)))
        return result

    return _legacy_load


def install() -> None:
    import torch._utils as tu

    original = tu._rebuild_tensor
    if getattr(original, "_tpu_patched", False):
        return

    def _rebuild_tensor(storage, storage_offset, size, stride):
        device = getattr(storage._untyped_storage, "_tpu_restore_device", None)
        if device is None:
            return original(storage, storage_offset, size, stride)
        return _view_of_loaded_storage(storage, storage_offset, size, stride, torch.device(device))

    _rebuild_tensor._tpu_patched = True
    tu._rebuild_tensor = _rebuild_tensor
    torch.serialization._legacy_load = _legacy_load_then_upload(torch.serialization._legacy_load)
    torch.serialization.register_package(19, _tag, _deserialize)
    torch.serialization.add_safe_globals([rebuild_tpu_tensor])  # torch.load(weights_only=True)
    TpuTensor.__reduce_ex__ = _reduce_ex

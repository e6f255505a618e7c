"""torch.load(..., map_location="tpu") for checkpoints whose storages are on the CPU (or anywhere).

A tpu tensor has no byte-addressable storage, so a storage cannot be restored "onto the tpu" the
way CUDA does it. Instead the deserializer keeps the bytes on the CPU and marks the storage; the
tensor rebuild then moves the finished CPU tensor to the device. (tpu tensors themselves pickle
through ``torch._utils._rebuild_device_tensor_from_cpu_tensor``, see ``TpuTensor.__reduce_ex__``.)
"""
from __future__ import annotations

import re

import torch

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


def install() -> None:
    import torch._utils as tu

    original = tu._rebuild_tensor
    if getattr(original, "_tpu_patched", False):
        return

    def _rebuild_tensor(storage, storage_offset, size, stride):
        t = original(storage, storage_offset, size, stride)
        device = getattr(storage._untyped_storage, "_tpu_restore_device", None)
        if device is not None:
            t = t.to(device)
        return t

    _rebuild_tensor._tpu_patched = True
    tu._rebuild_tensor = _rebuild_tensor
    torch.serialization.register_package(19, _tag, _deserialize)

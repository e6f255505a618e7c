"""``cpu_tensor.pin_memory()`` and ``is_pinned()`` while "tpu" is the accelerator.

Pinning a CPU tensor asks PrivateUse1's hooks for a pinned-memory allocator, which Python hooks cannot
provide: ``x.pin_memory()`` and ``DataLoader(pin_memory=True)`` raised "register PrivateUse1HooksInterface",
even in CPU-only code. PJRT stages host->device copies itself, so page-locked memory gains a tpu upload
nothing: pinning for the tpu is a copy in ordinary memory, which ``is_pinned()`` then reports as pinned, so
code that pins once and checks (diffusers' group offloading with streams checks every weight at every onload)
does not copy it again. Pinning for another device keeps torch's kernels. ``torch.empty(..., pin_memory=True)``
asks the C++ hook itself before any kernel runs, and keeps torch's error.
"""
from __future__ import annotations

import weakref

import torch

from ..runtime import dynamo_frames

_LIB = None
_PINNED: dict = {}  # data pointer -> bytes, of the host memory pin_memory made for the tpu (while its tensor lives)
_COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd


def _for_tpu(device) -> bool:
    return device is None or torch.device(device).type == "tpu"


def _pinned(t: torch.Tensor) -> bool:
    storage = t.untyped_storage()
    return storage.nbytes() > 0 and _PINNED.get(storage.data_ptr()) == storage.nbytes()


def pin_memory(self, device=None):
    if not _for_tpu(device):
        return torch.ops.aten._pin_memory.default._op_dk(_COMPOSITE, self, device)
    out = self.clone()
    storage = out.untyped_storage()
    if storage.nbytes():
        ptr = storage.data_ptr()
        _PINNED[ptr] = storage.nbytes()
        weakref.finalize(out, _PINNED.pop, ptr, None)
    return out


def is_pinned(self, device=None):
    if not _for_tpu(device):
        return torch.ops.aten.is_pinned.default._op_dk(_COMPOSITE, self, device)
    return _pinned(self)


def install() -> None:
    global _LIB
    _LIB = torch.library.Library("aten", "IMPL")
    _LIB.impl("_pin_memory", dynamo_frames.keep_out(pin_memory), "CPU")
    _LIB.impl("is_pinned", dynamo_frames.keep_out(is_pinned), "CPU")

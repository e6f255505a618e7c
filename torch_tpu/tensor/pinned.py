"""``pin_memory`` of host tensors while tpu is the current accelerator.

Once the tpu device is registered, torch treats it as the accelerator: ``DataLoader(pin_memory=True)``
and ``tensor.pin_memory()`` ask it for a pinned host allocator, which only C++ backend hooks can provide,
and fail with NotImplementedError ("register PrivateUse1HooksInterface"); before, a CPU-only torch just
skipped pinning. PJRT copies from ordinary host memory (it stages transfers itself), so pinning for the
tpu device is a host copy: ``pin_memory()`` returns a copy with the same strides, as CUDA's does (a later
write to the source does not reach it), and ``is_pinned()`` stays False (no page-locked memory).
"""
from __future__ import annotations

import torch

_ORIGINAL = None


def _for_tpu(device) -> bool:
    if device is None:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "tpu"
    return torch.device(device).type == "tpu"


def _pin_memory(self, device=None):
    if self.device.type == "cpu" and _for_tpu(device):
        if self.layout != torch.strided:
            return self.clone()
        copy = torch.empty_strided(self.size(), self.stride(), dtype=self.dtype) \
            if _dense(self) else torch.empty_like(self, memory_format=torch.contiguous_format)
        return copy.copy_(self)
    return _ORIGINAL(self, device) if device is not None else _ORIGINAL(self)


def _dense(t) -> bool:
    """Strides that cover exactly numel elements without overlap (a permutation of a contiguous layout)."""
    dims = sorted((s, n) for s, n in zip(t.stride(), t.size()) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def install() -> None:
    global _ORIGINAL
    if _ORIGINAL is None:
        _ORIGINAL = torch.Tensor.pin_memory
        torch.Tensor.pin_memory = _pin_memory

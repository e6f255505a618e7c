"""``torch.compile(model)`` with the default backend (inductor) on tpu tensors.

Inductor has no code generator for the tpu device: left alone it compiles a tpu graph into CPU-style
code whose extern kernel calls fail at run time with a confusing device error. A graph whose tensor
inputs are all on tpu is compiled with backend "tpu" instead (the only backend that can run it), as
``torch.compile(model)`` with no backend works on every other device; inductor's own settings (``mode``,
``options``) do not apply there, which is said once. A graph mixing tpu and other tensors raises an
error naming the fix. Graphs without tpu tensors reach inductor unchanged.

Installed at registration by wrapping ``torch._TorchCompileInductorWrapper.__call__`` (the object
``torch.compile`` builds for backend "inductor"); nothing of dynamo or inductor is imported here.
"""
from __future__ import annotations

import warnings

import torch

_ORIGINAL = None
_WARNED = [False]


def _devices(inputs) -> set:
    """Device types of the graph's tensor inputs (CPU scalars, 0-dim, mix with any device in torch)."""
    found = set()
    for x in inputs:
        if isinstance(x, torch.Tensor) and not (x.device.type == "cpu" and x.dim() == 0):
            found.add(x.device.type)
    return found


def _inductor_on_tpu(self, model_, inputs_, *args, **kwargs):
    devices = _devices(inputs_)
    if "tpu" not in devices:
        return _ORIGINAL(self, model_, inputs_, *args, **kwargs)
    if devices != {"tpu"}:
        others = ", ".join(sorted(devices - {"tpu"}))
        raise RuntimeError(
            f"torch.compile: this graph has inputs on tpu and on {others}; inductor (the default backend) "
            f"cannot compile for the tpu device. Move the module and every input to 'tpu' and use "
            f"torch.compile(model, backend='tpu')")
    if (self.config or kwargs.get("config_patches")) and not _WARNED[0]:
        _WARNED[0] = True
        warnings.warn("torch.compile: inductor has no tpu code generator, so tpu graphs are compiled with "
                      "backend='tpu'; inductor's mode/options do not apply to them", stacklevel=2)
    from .backend import tpu_backend

    return tpu_backend(model_, inputs_)


def install() -> None:
    global _ORIGINAL
    cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if cls is None or _ORIGINAL is not None:
        return
    _ORIGINAL = cls.__call__
    cls.__call__ = _inductor_on_tpu

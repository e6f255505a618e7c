"""``module.to("tpu")`` (and ``.cpu()``, ``.to_empty()``) keeps tied parameters tied.

``nn.Module._apply`` keeps a parameter's identity only where the moved tensor can take the old one's
place (``param.data = moved``: same TensorImpl type, as CPU <-> CUDA). A tpu tensor is a Python wrapper
subclass, so moving between the CPU and the tpu builds a new ``Parameter`` for every slot that holds one,
and a parameter held by two modules (an embedding tied to the output projection, a shared block) became
two independent parameters: training updated each with half the gradient, silently. This wraps the
outermost ``_apply`` call: the slots that held one parameter before the move hold one parameter after it
(the first slot's new one; its ``.grad`` came along), as on CUDA.
"""
from __future__ import annotations

import threading

import torch

_ORIGINAL = None
_STATE = threading.local()


def _shared_slots(module: torch.nn.Module) -> dict[int, list]:
    """id(parameter) -> [(module, name, parameter)] for every parameter held in more than one slot."""
    slots: dict[int, list] = {}
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                slots.setdefault(id(p), []).append((m, name, p))
    return {k: v for k, v in slots.items() if len(v) > 1}


def _apply(self, fn, recurse=True):
    if not recurse or getattr(_STATE, "inside", False):
        return _ORIGINAL(self, fn, recurse)
    shared = _shared_slots(self)
    if not shared:
        return _ORIGINAL(self, fn, recurse)
    _STATE.inside = True
    try:
        out = _ORIGINAL(self, fn, recurse)
    finally:
        _STATE.inside = False
    for slots in shared.values():
        kept = None
        for m, name, old in slots:
            new = m._parameters.get(name)
            if new is old:  # converted in place (param.data = ..., or swapped): still one parameter
                continue
            if kept is None:
                kept = new
            elif new is not kept:
                m._parameters[name] = kept
    return out


def install() -> None:
    global _ORIGINAL
    if _ORIGINAL is None:
        _ORIGINAL = torch.nn.Module._apply
        torch.nn.Module._apply = _apply

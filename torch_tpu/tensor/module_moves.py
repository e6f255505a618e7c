"""``module.to("tpu")`` (and ``.cpu()``, ``.to_empty()``) keeps each parameter's identity, tied ones tied.

``nn.Module._apply`` keeps a parameter's identity only where the moved tensor can take the old one's
place (``param.data = moved``: same TensorImpl type, as CPU <-> CUDA). A tpu tensor is a Python wrapper
subclass, so moving between the CPU and the tpu built a new ``Parameter`` for every slot that holds one:
a parameter held by two modules (an embedding tied to the output projection, a shared block) became two
independent parameters (training updated each with half the gradient), and an optimizer built before the
move (or a hook on a parameter) kept the old CPU parameter, so training changed nothing, silently. This
wraps the outermost ``_apply`` call: each moved parameter's new value is swapped into the old Python
object (``torch.utils.swap_tensors``, the path torch takes for wrapper subclasses; its ``.grad`` comes
along), so the module, the optimizer and every other holder see the moved parameter, as on CUDA. Where
the swap is refused (another reference to the old tensor's data: a view of it alive), the slots that held
one parameter still hold one new parameter. A tensor torch's ``_apply`` reaches through several slots (a
tied weight) moves to the other device once (``_Once``): it was uploaded, or read back, once per slot.
"""
from __future__ import annotations

import threading

import torch

from ..engine import module_graphs
from .tensor import TpuTensor

_ORIGINAL = None
_STATE = threading.local()


def _swap_in(old, new) -> bool:
    """Make the Python object ``old`` hold ``new``'s tensor (and gradient)."""
    grad, attrs = old.grad, dict(old.__dict__)
    old.grad = None  # the old gradient's reference would block the swap; the new one moves with new
    try:
        torch.utils.swap_tensors(old, new)
    except Exception:  # noqa: BLE001  (refused: references to the old data remain)
        old.grad = grad
        return False
    for k, v in attrs.items():  # the user's attributes stay (swap_tensors exchanged the __dict__s)
        if not k.startswith("_tpu_"):
            old.__dict__.setdefault(k, v)
    return True


def _slots(module: torch.nn.Module) -> dict[int, list]:
    """id(parameter) -> [(module, name, parameter)] for every slot holding a parameter."""
    slots: dict[int, list] = {}
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                slots.setdefault(id(p), []).append((m, name, p))
    return slots


class _Once:
    """``fn`` of one outermost ``_apply``, applied once per tensor object when it moves the tensor to another
    device (a conversion on one device, which may work in place, runs as often as torch calls it)."""

    def __init__(self, fn):
        self.fn, self.moved = fn, {}

    def __call__(self, t):
        done = self.moved.get(id(t))
        if done is not None and done[0] is t:
            return done[1]
        out = self.fn(t)
        if isinstance(t, torch.Tensor) and isinstance(out, torch.Tensor) and out.device.type != t.device.type:
            self.moved[id(t)] = (t, out)  # (t kept: its id stays its own while this call runs)
        return out


def _apply(self, fn, recurse=True):
    # (inside a function torch.compile traces, dynamo follows torch's own code: it could not trace the
    # swap, and a module built and moved inside a compiled function has no earlier holders to keep)
    if not recurse or getattr(_STATE, "inside", False) or torch.compiler.is_compiling() or \
            torch.__future__.get_overwrite_module_params_on_conversion():  # new parameters asked for
        return _ORIGINAL(self, fn, recurse)
    shared = _slots(self)
    _STATE.inside = True
    try:
        out = _ORIGINAL(self, _Once(fn), recurse)
    finally:
        _STATE.inside = False
    for slots in shared.values():
        kept = None
        for m, name, old in slots:
            new = m._parameters.get(name)
            if new is old:  # converted in place (param.data = ..., or swapped): still one parameter
                continue
            if kept is None:
                kept = old if _swap_in(old, new) else new
            m._parameters[name] = kept
    if any(type(p) is TpuTensor for p in self.parameters()):
        module_graphs.blocks_found(self)  # its repeated blocks replay their recorded calls (eager/module_replay)
    return out


def install() -> None:
    global _ORIGINAL
    if _ORIGINAL is None:
        _ORIGINAL = torch.nn.Module._apply
        torch.nn.Module._apply = _apply

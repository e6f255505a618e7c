"""``t.data = other`` where one of the two is a tpu tensor and the other is not, as it works between the CPU
and CUDA (diffusers' group offloading, accelerate's hooks and users' ``p.data = p.data.to("tpu")`` do it).

torch implements ``.data =`` as ``set_data``: the tensor's C++ object takes the other's storage, which
needs the two to be the same kind of TensorImpl (CPU and CUDA are; a tpu tensor is a Python wrapper
subclass, so torch raised "incompatible tensor type"). Across that line the Python object itself has to
change: ``swap`` gives it a tensor of the other kind that shares ``other``'s data (a Parameter stays a
Parameter, its ``requires_grad``, Python attributes and ``.grad``, moved along, stay), the way
``torch.utils.swap_tensors`` does; its identity is kept, so modules, optimizers and dicts keyed by the
parameter see the move. A tensor some C++ object still holds (a view of it, an autograd graph that
saved it) cannot be swapped: the holder would keep the old data, so that is a clear error instead.
Weak references to the tensor (torch.compile's guards) do not matter: they follow the Python object.

The property is installed on ``torch.Tensor`` (``install``) for tensors of other devices, whose own setter
stays torch's; a tpu tensor's is its class's (``TpuTensor.data``: the payload moves with the metadata), which
calls ``swap`` for a tensor of another device.
"""
from __future__ import annotations

import torch

from ..runtime import dynamo_frames
from .tensor import TpuTensor, set_cross_device_data

_BASE_DATA = torch._C.TensorBase.data
_PARAMETER_CLASS = "_tpu_parameter_class"  # a Parameter subclass a CPU parameter had, restored when it leaves


def _set(t, new) -> None:
    """``torch.Tensor.data``'s setter for every tensor but the tpu's (``TpuTensor.data``, which sends a CPU
    ``new`` to ``swap``)."""
    if isinstance(new, TpuTensor) and not isinstance(t, TpuTensor):
        swap(t, new)
    else:
        _BASE_DATA.__set__(t, new)  # torch's own setter (and its errors)


def _is_parameter(t) -> bool:
    return isinstance(t, torch.nn.Parameter)


def _replacement(t, new):
    """A tensor of ``new``'s kind sharing its data, shaped as ``t`` should be after ``t.data = new``."""
    requires_grad = t.requires_grad
    if not _is_parameter(t):
        out = new.detach()
        return out.requires_grad_(True) if requires_grad else out
    if isinstance(new, TpuTensor):
        return torch.nn.Parameter(new, requires_grad=requires_grad)  # (a tpu parameter is a TpuTensor)
    cls = t.__dict__.get(_PARAMETER_CLASS, torch.nn.Parameter)
    # torch's own constructor of a subclass instance without its __init__ (GGUFParameter(data, quant_type)
    # takes more arguments); the attributes come along with the __dict__
    return torch.Tensor._make_subclass(cls, new.detach(), requires_grad)


def _refusal(t, new, reason: str) -> RuntimeError:
    return RuntimeError(
        f"tpu: cannot make this {t.device} tensor ({tuple(t.shape)}, {t.dtype}) hold the {new.device} tensor's "
        f"data in place (t.data = other across devices replaces the tensor object's contents, as the tpu "
        f"tensor is another kind of tensor than the CPU's): {reason}")


def _check_use_count(t, new) -> None:
    """As torch.utils.swap_tensors: no C++ holder of ``t`` but the Python object and, for a leaf that
    requires grad, its gradient accumulator (which is poisoned, as torch does)."""
    count = t._use_count()
    if count == 1:
        return
    if count == 2 and t.is_leaf and t.requires_grad:
        node = torch.autograd.graph.get_gradient_edge(t).node
        if t._use_count() == 2:
            node.register_prehook(_poisoned_accumulator)
            return
    raise _refusal(t, new, "something else holds the tensor (a view of it, or an autograd graph that saved it), "
                           "and would keep the old data. Let those go first (run backward, or del the views), or "
                           "move the module with module.to(...)")


def _poisoned_accumulator(grad_outputs):
    raise RuntimeError(
        "a parameter's .data was moved between the tpu and another device after a forward that used it, so "
        "this backward would accumulate into the old tensor: move it before the forward or after the backward")


def swap(t, new) -> None:
    """``t.data = new`` for ``t`` and ``new`` on either side of the tpu line (see the module)."""
    if t.grad_fn is not None:
        raise _refusal(t, new, "it is the result of an autograd operation (not a leaf); assign to a leaf "
                               "tensor's .data, or detach it first")
    grad = t.grad
    if grad is not None and (grad.shape != new.shape or grad.dtype != new.dtype):
        raise _refusal(t, new, f"its .grad ({tuple(grad.shape)}, {grad.dtype}) cannot move with it to data of "
                               f"{tuple(new.shape)}, {new.dtype}; set .grad = None first")
    replacement = _replacement(t, new)
    if grad is not None:
        t.grad = None
    try:
        _check_use_count(t, new)
    except RuntimeError:
        if grad is not None:
            t.grad = grad
        raise
    old_class, old_dict = type(t), t.__dict__
    new_dict = replacement.__dict__
    for k, v in old_dict.items():  # the user's (and libraries') attributes stay; the payload is the new one's
        if not k.startswith("_tpu_") and k != "_is_param":
            new_dict.setdefault(k, v)
    if _is_parameter(t) and isinstance(new, TpuTensor) and old_class not in (torch.nn.Parameter, TpuTensor):
        new_dict[_PARAMETER_CLASS] = old_class  # (GGUFParameter ...: restored when it leaves the tpu)
    elif not isinstance(new, TpuTensor):
        new_dict.pop(_PARAMETER_CLASS, None)
    t.__class__, replacement.__class__ = type(replacement), old_class
    t.__dict__, replacement.__dict__ = new_dict, old_dict
    torch._C._swap_tensor_impl(t, replacement)
    if grad is not None:
        t.grad = grad.to(new.device)


def install() -> None:
    torch.Tensor.data = property(_BASE_DATA.__get__, _set, doc=_BASE_DATA.__doc__)
    set_cross_device_data(swap)
    # torch.compile tracing ``p.data = w`` of a tpu tensor (diffusers' layerwise casting hook calls
    # ``module.to(dtype)`` inside the compiled forward) inlined the tpu tensor's setter with fake tensors, which
    # took a fake for a tensor of another device: it breaks the graph there and runs the setter as plain Python
    setter = TpuTensor.data.fset
    setter._torchdynamo_disable = True  # (what torch._dynamo.skip marks: dynamo does not inline it)
    dynamo_frames.keep_out(setter)

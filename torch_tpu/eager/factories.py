"""PrivateUse1 kernels for factory ops (they have no tensor argument, so __torch_dispatch__ never
sees them). Allocation is lazy; value-producing factories run through the op table."""
from __future__ import annotations

import torch

from ..tensor import kernels
from ..tensor.tensor import empty

# The op path (with the op table's checks) is imported by the kernels that use it, at the first
# device use: this module loads at ``import torch``.

aten = torch.ops.aten


def _device_index(device) -> int:
    if device is None:
        return 0
    device = torch.device(device)
    return 0 if device.index is None else device.index


def _check_device(device) -> None:
    index = _device_index(device)
    if index != 0:
        raise RuntimeError(
            f"tpu:{index}: torch_tpu binds one device per process (tpu:0); run one process per device")


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_device(device)
    return kernels.deterministic_fill(empty(size, dtype or torch.get_default_dtype()))


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return kernels.deterministic_fill(empty(size, dtype or torch.get_default_dtype(), stride=stride))


def _through_op_table(op):
    def kernel(*args, **kwargs):
        from .op_path import run_op

        _check_device(kwargs.get("device"))
        return run_op(op, args, kwargs)

    return kernel


def _copy_from(src, dst, non_blocking=False):
    # torch.tensor(data, device="tpu") copies with the Python dispatch key excluded, so the copy
    # arrives here instead of __torch_dispatch__.
    return kernels.copy_(None, (dst, src), {})


def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    # autograd's "known zero" gradient (sgn and friends); a plain tensor of zeros here
    from .op_path import run_op

    _check_device(device)
    return run_op(aten.full.default, (list(size), False), {"dtype": dtype or torch.get_default_dtype()})


KERNELS = {
    "_efficientzerotensor": efficient_zero_tensor,
    "empty.memory_format": empty_memory_format,
    "empty_strided": empty_strided,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from,
}
for _name in ("arange", "arange.start", "arange.start_step", "linspace", "logspace", "eye", "eye.m",
              "randperm", "randperm.generator", "tril_indices", "triu_indices", "kaiser_window", "kaiser_window.periodic",
              "kaiser_window.beta"):
    _packet, _, _ov = _name.partition(".")
    KERNELS[_name] = _through_op_table(getattr(getattr(aten, _packet), _ov or "default"))

"""Arguments CPU torch refuses where torch's meta kernels and the lowerings take them: a reduction's
``dim=[]``, factory dtypes without a CPU kernel (``arange``/``linspace`` of bool)."""
from __future__ import annotations

import torch

from .registry import aten
from .validate import _LIMITED_UNSIGNED, _TYPE_NAMES, validates


@validates(aten.logsumexp.default, aten.logsumexp.out)
def _logsumexp_of_no_dims(x, dim, keepdim=False, *_, **__):
    """``logsumexp(x, dim=[])``: the CPU kernel reduces every dim into a kept-dims maximum it cannot add to
    its result, and raises; the meta kernel says (1, 1) and the tpu returned that shape."""
    if isinstance(dim, (list, tuple)) and len(dim) == 0 and not keepdim and x.dim() > 0:
        raise RuntimeError(f"logsumexp(dim=[]): output with shape [] doesn't match the broadcast shape "
                           f"{[1] * x.dim()}")


def _float8(dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def _refuse_factory(kernel, refused):
    def check(*_, dtype=None, **__):
        if dtype is not None and refused(dtype):
            raise NotImplementedError(f'"{kernel}" not implemented for \'{_TYPE_NAMES.get(dtype, dtype)}\'')
    return check


# CPU has no bool, complex, uint16/32/64 or float8 arange, no bool, uint16/32/64 or float8 linspace/logspace
validates(aten.arange.default, aten.arange.start, aten.arange.start_step)(_refuse_factory(
    "arange_cpu", lambda d: d in (torch.bool, *_LIMITED_UNSIGNED) or d.is_complex or _float8(d)))
for _name in ("linspace", "logspace"):
    validates(*[getattr(getattr(aten, _name), o) for o in getattr(aten, _name).overloads() if "out" not in o])(
        _refuse_factory(f"{_name}_cpu", lambda d: d in (torch.bool, *_LIMITED_UNSIGNED) or _float8(d)))

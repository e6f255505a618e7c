"""Reductions CPU torch refuses for their ``dim`` argument, where torch's meta kernel and the lowering
compute a result of another shape."""
from __future__ import annotations

from .registry import aten
from .validate import validates


@validates(aten.logsumexp.default, aten.logsumexp.out)
def _logsumexp_of_no_dims(x, dim, keepdim=False, *_, **__):
    """``logsumexp(x, dim=[])``: the CPU kernel reduces every dim into a kept-dims maximum it cannot add to
    its result, and raises; the meta kernel says (1, 1) and the tpu returned that shape."""
    if isinstance(dim, (list, tuple)) and len(dim) == 0 and not keepdim and x.dim() > 0:
        raise RuntimeError(f"logsumexp(dim=[]): output with shape [] doesn't match the broadcast shape "
                           f"{[1] * x.dim()}")

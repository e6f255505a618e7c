"""The range check of an op's ``dim`` argument, for ops whose meta kernel skips it.

CPU kernels wrap ``dim`` against the input's rank (``-n <= dim < n``, a 0-d input counting as rank 1)
and raise IndexError outside it; the meta kernels of ``sort``, ``cummax``/``cummin``, ``_softmax`` and
``index_select`` on a 0-d input do not, and the lowerings wrapped the dim themselves (``sort(x, 5)``
sorted dim 1). One generic check, at every entry build, for every op with an integer ``dim`` of its
``self``/``input`` tensor.
"""
from __future__ import annotations

import functools

import torch

# dim counts the output's dims (one more than the input's: unsqueeze) or the inputs' broadcast dims
# (linalg_cross of a 1-d self and a batch of vectors)
_OTHER_DIMS = frozenset({"unsqueeze", "unsqueeze_", "unsqueeze_copy", "linalg_cross"})


@functools.lru_cache(maxsize=None)
def _dim_position(func) -> int | None:
    """Where ``func`` takes an integer ``dim`` of its first (``self``/``input``) tensor argument, or None."""
    schema = func._schema
    args = schema.arguments
    if not args or args[0].name not in ("self", "input") or str(args[0].type) != "Tensor":
        return None
    if schema.name.split("::")[-1] in _OTHER_DIMS:
        return None
    for k, a in enumerate(args):
        if a.name == "dim" and str(a.type) in ("int", "int?", "SymInt"):
            return k
    return None


def check(func, args, kwargs) -> None:
    at = _dim_position(func)
    if at is None:
        return
    dim = kwargs["dim"] if "dim" in kwargs else args[at] if at < len(args) else None
    x = args[0] if args else kwargs.get("self", kwargs.get("input"))
    if dim is None or not isinstance(x, torch.Tensor) or isinstance(dim, torch.SymInt):
        return
    n = max(x.dim(), 1)
    if not -n <= dim < n:
        raise IndexError(f"{func}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                         f"{dim})")

"""The error for aten ops a compiled graph holds and the op table does not lower: it says, op by op,
whether strict eager runs them (and how: torch's decomposition, a composite kernel, the CPU fallback) or
cannot either."""
from __future__ import annotations

import torch

from ..eager import fallbacks


def error(missing: list) -> NotImplementedError:
    """``missing``: the graph's ops without a lowering (OpOverloads, or descriptions of wrapped calls)."""
    said: dict = {}
    for op in missing:
        name = str(op)
        if name in said:
            continue
        route = fallbacks.eager_route(op) if isinstance(op, torch._ops.OpOverload) else None
        said[name] = (f"{name}: strict eager has no lowering for it either" if route is None else
                      f"{name}: strict eager runs it {route[0]}, which a compiled program cannot; run it "
                      "outside the compiled function (torch.compiler.disable, or a graph break there)")
    return NotImplementedError("torch.compile(backend='tpu'): no tpu lowering for aten op(s) "
                               + ", ".join(sorted(said)) + ". " + ". ".join(said[n] for n in sorted(said)))

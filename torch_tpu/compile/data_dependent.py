"""The error for a graph holding an op whose output shape depends on its input's values (``x[mask]``,
``nonzero``, ``masked_select``, ``unique``). Under ``fullgraph=True`` dynamo traces such an op with an
unbacked size (``u0``) instead of breaking the graph there, and an XLA program has static shapes: the error
names the op and the user's line, and the ways out that work (without fullgraph=True dynamo breaks the
graph before the op and runs it eagerly)."""
from __future__ import annotations

import torch


def refuse(gm: torch.fx.GraphModule) -> None:
    """Raises when a node of ``gm`` makes a value of data-dependent shape (the first such node)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        tensors = [v for v in (val if isinstance(val, (list, tuple)) else (val,)) if isinstance(v, torch.Tensor)]
        try:  # (a tensor's sizes only: ``.item()``'s unbacked number is another error's)
            sizes = set().union(*(free_unbacked_symbols(tuple(t.shape)) for t in tensors)) if tensors else ()
        except Exception:  # noqa: BLE001 - a value free_unbacked_symbols does not walk
            continue
        if sizes:
            raise NotImplementedError(_message(node, sorted(str(s) for s in sizes)))


def _message(node, sizes: list) -> str:
    where = _user_line(node)
    return (f"torch.compile(backend='tpu'): {node.target}{where} returns a tensor whose shape depends on the "
            f"input's values ({', '.join(sizes)} elements), and an XLA program has static shapes, so a "
            "fullgraph=True graph cannot hold it. Ways out: compile without fullgraph=True (dynamo then breaks "
            "the graph before it and runs it eagerly); run that code eagerly (outside torch.compile, or in a "
            "function of yours under torch.compiler.disable); or keep the shape static: torch.where(mask, x, 0) "
            "in place of x[mask] (x[mask].sum() is torch.where(mask, x, 0).sum()), x.masked_fill(~mask, value)")


def _user_line(node) -> str:
    """' at file:line (`code`)' from the node's stack trace (the innermost frame, the user's code)."""
    lines = (node.meta.get("stack_trace") or "").rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        text = lines[i].strip()
        if text.startswith("File "):
            parts = text.split('"')
            place = parts[1] if len(parts) > 2 else "?"
            number = text.partition(", line ")[2].partition(",")[0]
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f" at {place}:{number}" + (f" (`{code}`)" if code else "")
    return ""

"""Compiled mode's static shapes: a graph whose inputs are symbolic is refused with ``StaticShapeError`` when
dynamism was asked for (``dynamic=True``, ``mark_dynamic``), and compiled per concrete shape when only
dynamo's automatic dynamic shapes made it so.
"""
from __future__ import annotations

import torch


class StaticShapeError(RuntimeError):
    pass


_STATIC_MSG = (
    "torch.compile(backend='tpu') requires static shapes: compile with dynamic=False "
    "(a new input shape then compiles once and seen shapes reuse their program). {what}")


def is_symbolic(v) -> bool:
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not isinstance(getattr(v.node, "maybe_as_int", lambda: None)(), int)
    if isinstance(v, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in v.shape) or any(
            isinstance(s, torch.SymInt) for s in v.stride())
    return False


def has_symbolic_placeholders(gm: torch.fx.GraphModule) -> bool:
    """A placeholder whose traced value is symbolic while the example inputs are not (after a shape
    change, dynamo traced ``y`` of (3, 4) with sizes it shares with no size input): also compiled per
    shape (it was refused as "dynamic" although no dynamism was asked for)."""
    return any(node.op == "placeholder" and is_symbolic(node.meta.get("example_value", node.meta.get("val")))
               for node in gm.graph.nodes)


def check_static(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        if is_symbolic(val):
            what = (f"Input {node.target!r} has a dynamic dimension {tuple(val.shape)}"
                    if isinstance(val, torch.Tensor) else f"Input {node.target!r} is a symbolic size")
            raise StaticShapeError(_STATIC_MSG.format(what=what + " (dynamic=True, mark_dynamic, or "
                                                       "automatic dynamic shapes after a shape change)."))


def refuse_requested_dynamism(example_inputs, options) -> None:
    import torch._dynamo.config as dynamo_config

    # dynamic=True patches this flag while dynamo traces (torch.compile -> _optimize)
    if options.get("dynamic") or not dynamo_config.assume_static_by_default:
        raise StaticShapeError(_STATIC_MSG.format(what="dynamic=True was requested."))
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            continue
        for attr, how in (("_dynamo_dynamic_indices", "marked dynamic (torch._dynamo.mark_dynamic)"),
                          ("_dynamo_unbacked_indices", "marked unbacked (torch._dynamo.mark_unbacked)")):
            dims = getattr(x, attr, None)
            if dims:
                raise StaticShapeError(_STATIC_MSG.format(
                    what=f"Graph input {i} {tuple(x.shape)} has dimension(s) {sorted(dims)} {how}."))

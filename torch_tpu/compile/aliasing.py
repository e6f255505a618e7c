"""Graph inputs that share one tpu storage, in a graph that writes in place: that call runs eagerly.

The compiled program is built for inputs that do not overlap (each is its own program input); a write to
one input would not be seen through another input that views the same storage. Dynamo does not tell
tpu views apart from independent tensors (their fakes have separate meta stand-ins), and AOTAutograd's
runtime finds aliasing through ``untyped_storage()``, which a tpu tensor does not share with its views.
So the backend checks it: when a graph may write in place and two of its tpu inputs share a storage at
call time, the call runs dynamo's torch-level graph eagerly on the tpu tensors (torch's own aliasing
semantics, autograd included), with a warning. Graphs without in-place writes pay nothing.
"""
from __future__ import annotations

import operator
import warnings

import torch

from ..tensor.tensor import TpuTensor

_INPLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                      operator.ixor, operator.ilshift, operator.irshift, operator.imatmul}


def _inplace_name(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__")


def may_write_in_place(gm: torch.fx.GraphModule) -> bool:
    """Conservative: True when any node of dynamo's graph could write to a tensor it did not create."""
    return any(node_may_write(node) for node in gm.graph.nodes)


def node_may_write(node: torch.fx.Node) -> bool:
    if node.op == "call_module":
        return True
    if node.op == "call_method":
        return _inplace_name(node.target)
    if node.op == "call_function":
        target = node.target
        if target in _INPLACE_OPERATORS or "out" in node.kwargs or node.kwargs.get("inplace") is True:
            return True
        if isinstance(target, torch._ops.OpOverload):
            return target._schema.is_mutable
        if isinstance(target, torch._ops.OpOverloadPacket):
            return any(getattr(target, ov)._schema.is_mutable for ov in target.overloads())
        return _inplace_name(getattr(target, "__name__", ""))
    return False


def guard(compiled, gm: torch.fx.GraphModule):
    """``compiled`` itself, or a callable that runs ``gm`` eagerly for calls with overlapping tpu inputs."""
    if not may_write_in_place(gm):
        return compiled
    warned = []

    def run(*args):
        count = 0
        storages = set()
        for a in args:
            if isinstance(a, TpuTensor):
                count += 1
                storages.add(id(a._tpu_storage))
        if len(storages) == count:
            return compiled(*args)
        if not warned:
            warned.append(True)
            warnings.warn(
                "torch.compile(backend='tpu'): graph inputs share one tpu storage (views of one tensor) "
                "and the graph writes in place; this call runs eagerly so each write is seen through "
                "the other views", stacklevel=2)
        return gm(*args)

    return run

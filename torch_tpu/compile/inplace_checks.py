"""In-place calls AOTAutograd's functionalisation gets wrong, refused on dynamo's torch-level graph as eager
refuses them: a result dtype the written tensor cannot hold, a write into an expanded view, a result of another
shape than the written tensor's.
"""
from __future__ import annotations

import operator

import torch

from .static_shapes import is_symbolic


_INPLACE_OPERATORS = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.iand: operator.and_, operator.ior: operator.or_,
    operator.ixor: operator.xor, operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}


# in-place methods that change metadata or autograd state, not values
_METADATA_INPLACE = {"requires_grad_", "detach_", "share_memory_", "resize_", "resize_as_", "set_", "as_strided_",
                     "squeeze_", "unsqueeze_", "transpose_", "t_", "swapdims_", "swapaxes_", "retain_grad_"}


# in-place methods whose CPU kernels resize self to their result (no broadcast-shape check)
_RESIZING_INPLACE = {"addbmm_"}


def check_inplace_calls(gm: torch.fx.GraphModule) -> None:
    """In-place calls AOTAutograd's functionalisation gets wrong, checked on dynamo's graph (the
    torch-level calls, with their example values), so the compiled program refuses what eager refuses:
    ``int_tensor.mul_(1.5)`` / ``int_tensor *= 1.5`` (eager refuses a result dtype that cannot be cast to
    self's; functionalised into ``mul`` + ``copy_``, it cast silently), and writes into an expanded view
    (``x[:1].expand(3, 6).add_(1)``: eager refuses; ``fill_`` came back as garbage)."""
    from .. import parity

    def meta(a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("example_value", a.meta.get("val"))
            if isinstance(v, torch.Tensor) and not is_symbolic(v):
                return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(meta(e) for e in a)
        return a

    for node in gm.graph.nodes:
        if node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_") \
                and not node.target.startswith("_"):
            fn = getattr(torch.Tensor, node.target[:-1], None)
        elif node.op == "call_function" and node.target in _INPLACE_OPERATORS:
            fn = _INPLACE_OPERATORS[node.target]
        else:
            continue
        if not node.args or "out" in node.kwargs:
            continue
        args = [meta(a) for a in node.args]
        if not isinstance(args[0], torch.Tensor) or args[0].device.type != "meta":
            continue
        if node.target not in _METADATA_INPLACE and any(
                st == 0 and sz > 1 for sz, st in zip(args[0].shape, args[0].stride())):
            # eager CPU refuses most such writes with this message; AOTAutograd computes the ones it
            # allows (fill_, zero_) wrong (the expanded view's write comes back as garbage)
            name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a single "
                f"memory location. Please clone() the tensor before performing the operation. "
                f"(torch.compile(backend='tpu'): {name} writes an expanded view of size "
                f"{tuple(args[0].shape)}, stride {tuple(args[0].stride())})")
        if fn is None:
            continue
        try:
            result = fn(*args, **{k: meta(v) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 - not a plain functional counterpart; eager reports its own errors
            continue
        if isinstance(result, torch.Tensor):
            if node.target not in _METADATA_INPLACE and node.target not in _RESIZING_INPLACE:
                # ``(x * 2).clamp_max_(y)``, x [5, 1], y [5]: torch's fake kernel resized the intermediate
                # to the broadcast result (its example value reads [5, 5] now; functionalised, the graph
                # returned [5, 5]); eager refuses. Its producer, run again, gives the shape it had.
                parity.refuse_inplace_shape(result.shape, _produced_shape(node.args[0], meta, args[0].shape))
            parity.refuse_inplace_cast(result.dtype, args[0].dtype)


def _produced_shape(node, meta, recorded):
    """The shape ``node``'s own call gives on meta tensors (its example value may have been resized by
    a later in-place call during dynamo's fake run), or ``recorded`` when it cannot be run again."""
    if not isinstance(node, torch.fx.Node) or node.op not in ("call_function", "call_method"):
        return recorded
    fn = getattr(torch.Tensor, node.target, None) if node.op == "call_method" else node.target
    if fn is None or (node.op == "call_method" and node.target.endswith("_")):
        return recorded
    try:
        out = fn(*[meta(a) for a in node.args], **{k: meta(v) for k, v in node.kwargs.items()})
    except Exception:  # noqa: BLE001 - not runnable on meta tensors: keep what dynamo recorded
        return recorded
    return tuple(out.shape) if isinstance(out, torch.Tensor) and out.device.type == "meta" else recorded

"""Graph outputs that alias an input or another output: the runner hands them back as views of that
tensor (``lowering._runner``)."""
from __future__ import annotations

import torch

from ..tensor.tensor import TpuTensor


class TensorMeta:
    """What ``alias_of`` reads of a traced value (shape, strides, offset, dtype), as plain values: kept with a
    compiled graph's runner across processes (``lowering.GraphProgram``)."""

    __slots__ = ("shape", "_stride", "_offset", "dtype")

    def __init__(self, shape, stride, offset, dtype):
        self.shape, self._stride, self._offset, self.dtype = torch.Size(shape), tuple(stride), offset, dtype

    @classmethod
    def of(cls, value):
        if not isinstance(value, torch.Tensor):
            return value
        return cls(tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)

    def stride(self):
        return self._stride

    def storage_offset(self):
        return self._offset

    def __reduce__(self):
        return TensorMeta, (tuple(self.shape), self._stride, self._offset, self.dtype)


def output_aliases(gm, out_node, written=frozenset()) -> dict:
    """{output position: (source, position, view)} for the graph outputs that alias an input or another
    output: the same node returned twice, an input returned unchanged (a forward saving an input for
    backward, a backward passing a gradient through), or a chain of view ops of either (``alias(exp)``
    saved for backward beside the result ``exp``; ``w.grad = buf.view(...)`` beside ``buf``). ``source``
    is "in" or "out", ``view`` the output's fake value (None: the tensor itself). The runner returns such an
    output as that tensor or a view of it, as eager and torch's own backends give: an in-place change of a
    result or of a saved input then fails autograd's version check (backward used a stale copy silently),
    and a write through one alias reaches the other (``w.grad += g`` left ``buf`` at zero). Inputs the
    graph writes (``written``: their old value may be what is saved) keep a fresh output."""
    outs = list(out_node.args[0])
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    first = {}
    for k, o in enumerate(outs):
        if isinstance(o, torch.fx.Node):
            first.setdefault(o, k)
    found = {}
    for k, o in enumerate(outs):
        if not isinstance(o, torch.fx.Node) or not isinstance(o.meta.get("val"), torch.Tensor):
            continue
        if first[o] != k:
            found[k] = ("out", first[o], None)
            continue
        if o in placeholders:
            if placeholders[o] not in written:
                found[k] = ("in", placeholders[o], None)
            continue
        src = o
        while (src.op == "call_function" and isinstance(src.target, torch._ops.OpOverload) and src.target.is_view
               and src.args and isinstance(src.args[0], torch.fx.Node)
               and isinstance(src.args[0].meta.get("val"), torch.Tensor)):
            src = src.args[0]
            if src in placeholders:
                if placeholders[src] not in written:
                    found[k] = ("in", placeholders[src], o.meta["val"])
                break
            if first.get(src, k) < k:
                found[k] = ("out", first[src], o.meta["val"])
                break
    return found


def alias_of(base, base_val, view_val):
    """``base`` (a runtime tensor) viewed as ``view_val`` (a fake view of ``base_val``), or None when the
    runtime tensor is not laid out as its fake value (then the output stays a fresh tensor)."""
    if not isinstance(base, TpuTensor):
        return None
    if view_val is None:
        return base
    if (base_val is None or tuple(base.shape) != tuple(base_val.shape) or base.stride() != base_val.stride()
            or base.storage_offset() != base_val.storage_offset() or base.dtype != view_val.dtype):
        return None
    return base.as_strided(tuple(view_val.shape), view_val.stride(), view_val.storage_offset())


def with_host_outputs(run, n_outputs: int, views: list, host: list):
    """``run`` (a graph's runner), its outputs made views of another output (``views``: (output, base,
    size, stride, offset)), hidden bases after ``n_outputs`` dropped and the outputs torch puts on the CPU
    (``host``) copied there."""
    if not host and not views:
        return run

    def run_with_host_outputs(args):
        outs = run(args)
        for k, b, size, stride, offset in views:
            base = outs[b]
            if base is not None and outs[k] is not None and base.is_contiguous():
                outs[k] = base.as_strided(size, stride, base.storage_offset() + offset)
        del outs[n_outputs:]  # the hidden bases
        for i in host:
            if outs[i] is not None:
                outs[i] = outs[i].cpu()
        return outs

    run_with_host_outputs._boxed_call = True
    return run_with_host_outputs

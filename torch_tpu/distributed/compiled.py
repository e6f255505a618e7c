"""Functional collectives (``_c10d_functional.*``) inside ``torch.compile(backend="tpu")`` graphs.

DTensor and tensor-parallel plans trace to aten graphs holding ``_c10d_functional.all_reduce`` and friends,
each followed by ``wait_tensor``. ``compile/lowering.py`` asks ``lowering_for(node)`` for these nodes: the
collective becomes the same ``xla_ops`` function eager mode runs, and the whole graph one SPMD program
over the group's mesh (``runtime/spmd.py``), so the graph has no break and no host copy.
"""
from __future__ import annotations

import torch

from . import xla_ops

_F = torch.ops._c10d_functional
_FA = torch.ops._c10d_functional_autograd


def _transport(group_name, what: str):
    import torch.distributed as dist

    from ..runtime import multiprocess
    from .xla_transport import XlaTransport

    pg = group_name if isinstance(group_name, dist.ProcessGroup) else \
        torch._C._distributed_c10d._resolve_process_group(group_name)
    transport = getattr(pg, "transport", None)
    if not isinstance(transport, XlaTransport):
        why = multiprocess.why_inactive() if not multiprocess.active() else \
            f"the group's backend is {pg.name() if hasattr(pg, 'name') else type(pg).__name__}, not tpu_dist"
        raise RuntimeError(f"torch.compile(backend='tpu'): {what} on group {group_name!r} needs a tpu_dist "
                           f"group on JAX's distributed runtime ({why}); run it eagerly instead")
    return transport


def _out_shape(node):
    return tuple(node.meta["val"].shape)


def _reduce_op(name, node, inp=None) -> str:
    op = str(name).lower()
    inp = node.args[0] if inp is None else inp
    val = inp.meta.get("val") if isinstance(inp, torch.fx.Node) else None
    from ..runtime import dtypes

    dtype = dtypes.to_jax_dtype(val.dtype) if isinstance(val, torch.Tensor) else None
    if dtype is None or not xla_ops.supports_reduce(op, dtype):
        raise NotImplementedError(f"torch.compile(backend='tpu'): {node.target} with reduce op {name!r} on "
                                  f"{getattr(val, 'dtype', '?')} has no XLA lowering")
    return op


def _reduce_op_each(name, node) -> str:
    """The reduce op of a coalesced collective, checked against every input's dtype."""
    for inp in node.args[0]:
        op = _reduce_op(name, node, inp)
    return op


def _all_reduce(node):
    _, op, group = node.args[:3]
    t = _transport(group, str(node.target))
    fn = xla_ops.all_reduce(_reduce_op(op, node), t.size)
    return (lambda args, kwargs: fn(args[0])), t.device_ids


def _all_reduce_coalesced(node):
    _, op, group = node.args[:3]
    t = _transport(group, str(node.target))
    fn = xla_ops.all_reduce(_reduce_op_each(op, node), t.size)
    return (lambda args, kwargs: [fn(x) for x in args[0]]), t.device_ids


def _all_gather(node):
    _, _, group = node.args[:3]
    t = _transport(group, str(node.target))
    fn = xla_ops.all_gather(t.size, _out_shape(node))
    return (lambda args, kwargs: fn(args[0])), t.device_ids


def _all_gather_coalesced(node):
    _, _, group = node.args[:3]
    t = _transport(group, str(node.target))
    fns = [xla_ops.all_gather(t.size, tuple(v.shape)) for v in node.meta["val"]]
    return (lambda args, kwargs: [f(x) for f, x in zip(fns, args[0])]), t.device_ids


def _reduce_scatter(node):
    _, op, _, group = node.args[:4]
    t = _transport(group, str(node.target))
    fn = xla_ops.reduce_scatter(_reduce_op(op, node), t.size, _out_shape(node))
    return (lambda args, kwargs: fn(args[0])), t.device_ids


def _reduce_scatter_coalesced(node):
    _, op, _, group = node.args[:4]
    t = _transport(group, str(node.target))
    name = _reduce_op_each(op, node)
    fns = [xla_ops.reduce_scatter(name, t.size, tuple(v.shape)) for v in node.meta["val"]]
    return (lambda args, kwargs: [f(x) for f, x in zip(fns, args[0])]), t.device_ids


def _all_to_all_single(node):
    x, out_splits, in_splits, group = node.args[:4]
    t = _transport(group, str(node.target))
    rows = _out_shape(node)[0] if _out_shape(node) else 0
    even = [rows // t.size] * t.size
    for splits in (out_splits, in_splits):
        if splits and [int(s) for s in splits] != even:
            raise NotImplementedError(f"torch.compile(backend='tpu'): {node.target} with uneven splits "
                                      f"{list(splits)} (XLA:CPU has no ragged all-to-all); run it eagerly")
    fn = xla_ops.all_to_all(t.size, _out_shape(node))
    return (lambda args, kwargs: fn(args[0])), t.device_ids


def _broadcast(node):
    _, src, group = node.args[:3]
    t = _transport(group, str(node.target))
    fn = xla_ops.broadcast(int(src))
    return (lambda args, kwargs: fn(args[0])), t.device_ids


def _wait_tensor(node):
    return (lambda args, kwargs: args[0]), None


_TABLE = {
    "all_reduce": _all_reduce,
    "all_reduce_coalesced": _all_reduce_coalesced,
    "all_gather_into_tensor": _all_gather,
    "all_gather_into_tensor_coalesced": _all_gather_coalesced,
    "reduce_scatter_tensor": _reduce_scatter,
    "reduce_scatter_tensor_coalesced": _reduce_scatter_coalesced,
    "all_to_all_single": _all_to_all_single,
    "broadcast": _broadcast,
    "wait_tensor": _wait_tensor,
}
NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")


def lowering_for(node):
    """(fn(args, kwargs) over jax arrays, mesh device ids or None) for a functional-collective node."""
    func = node.target
    build = _TABLE.get(func._schema.name.split("::")[-1]) if func.namespace in NAMESPACES else None
    if build is None:
        raise NotImplementedError(f"torch.compile(backend='tpu'): no lowering for {func} in a compiled graph "
                                  "(functional collectives: " + ", ".join(sorted(_TABLE)) + ")")
    return build(node)

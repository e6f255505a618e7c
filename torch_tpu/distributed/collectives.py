"""Functional collectives (what DTensor and torch.compile use) on tpu tensors.

They reach ``TpuTensor.__torch_dispatch__``; each is issued through the group's transport (an XLA
program ordered on the device, or a host-staged gloo call), so ``wait_tensor`` has nothing to wait for.
"""
from __future__ import annotations

import torch

_C = torch._C._distributed_c10d
_F = torch.ops._c10d_functional
_FA = torch.ops._c10d_functional_autograd

_REDUCE_OPS = {
    "sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX",
    "band": "BAND", "bor": "BOR", "bxor": "BXOR",
}


def _group(group_name):
    import torch.distributed as dist

    if isinstance(group_name, dist.ProcessGroup):
        return group_name
    return torch._C._distributed_c10d._resolve_process_group(group_name)


def _transport(pg):
    from . import process_group

    transport = getattr(pg, "transport", None)
    if transport is None:  # a plain cpu group (e.g. gloo) given tpu tensors: stage through it
        transport = process_group.HostStaged(pg, pg.size())
    return transport


def _reduce_op(name: str):
    import torch.distributed as dist

    key = _REDUCE_OPS.get(str(name).lower())
    if key is None:
        raise RuntimeError(f"tpu_dist: reduce op {name!r} is not supported (supported: {sorted(_REDUCE_OPS)})")
    return getattr(dist.ReduceOp, key)


def _new_like(x, shape=None):
    from ..tensor.tensor import empty

    return empty(tuple(x.shape) if shape is None else tuple(shape), x.dtype)


def _all_reduce_into(out, reduce_op, group_name):
    import torch.distributed as dist

    opts = dist.AllreduceOptions()
    opts.reduceOp = _reduce_op(reduce_op)
    _transport(_group(group_name)).run("allreduce", ([out], opts))
    return out


def all_reduce(func, args, kwargs):
    x, reduce_op, group_name = args
    return _all_reduce_into(x.clone(), reduce_op, group_name)


def all_reduce_(func, args, kwargs):
    x, reduce_op, group_name = args
    return _all_reduce_into(x, reduce_op, group_name)


def all_reduce_coalesced(func, args, kwargs):
    xs, reduce_op, group_name = args
    return [_all_reduce_into(x.clone(), reduce_op, group_name) for x in xs]


def all_reduce_coalesced_(func, args, kwargs):
    xs, reduce_op, group_name = args
    for x in xs:
        _all_reduce_into(x, reduce_op, group_name)
    return xs


def _gather_into(x, group_size, group_name, out=None):
    pg = _group(group_name)
    if out is None:
        out = _new_like(x, (x.shape[0] * group_size, *x.shape[1:]) if x.dim() else (group_size,))
    _transport(pg).run("_allgather_base", (out, x.contiguous(), _C.AllgatherOptions()))
    return out


def all_gather_into_tensor(func, args, kwargs):
    x, group_size, group_name = args[:3]
    return _gather_into(x, group_size, group_name)


def all_gather_into_tensor_out(func, args, kwargs):
    x, group_size, group_name = args[:3]
    return _gather_into(x, group_size, group_name, kwargs["out"])


def all_gather_into_tensor_coalesced(func, args, kwargs):
    xs, group_size, group_name = args
    return [_gather_into(x, group_size, group_name) for x in xs]


def _reduce_scatter(x, reduce_op, group_size, group_name):
    import torch.distributed as dist

    if x.shape[0] % group_size:
        raise RuntimeError(
            f"_c10d_functional.reduce_scatter_tensor: dim 0 of input {tuple(x.shape)} is not divisible "
            f"by the group size {group_size}")
    out = _new_like(x, (x.shape[0] // group_size, *x.shape[1:]))
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = _reduce_op(reduce_op)
    _transport(_group(group_name)).run("_reduce_scatter_base", (out, x.contiguous(), opts))
    return out


def reduce_scatter_tensor(func, args, kwargs):
    x, reduce_op, group_size, group_name = args
    return _reduce_scatter(x, reduce_op, group_size, group_name)


def reduce_scatter_tensor_coalesced(func, args, kwargs):
    xs, reduce_op, group_size, group_name = args
    return [_reduce_scatter(x, reduce_op, group_size, group_name) for x in xs]


def all_to_all_single(func, args, kwargs):
    import torch.distributed as dist

    x, output_split_sizes, input_split_sizes, group_name = args
    pg = _group(group_name)
    out_rows = sum(output_split_sizes) if output_split_sizes else x.shape[0]
    out = _new_like(x, (out_rows, *x.shape[1:]))
    _transport(pg).run("alltoall_base", (out, x.contiguous(), list(output_split_sizes or []),
                                         list(input_split_sizes or []), dist.AllToAllOptions()))
    return out


def _broadcast_into(out, src, group_name):
    import torch.distributed as dist

    pg = _group(group_name)
    opts = dist.BroadcastOptions()
    opts.rootRank = src  # as torch's own kernel: src is passed through as the group rank
    _transport(pg).run("broadcast", ([out], opts))
    return out


def broadcast(func, args, kwargs):
    x, src, group_name = args
    return _broadcast_into(x.clone(), src, group_name)


def broadcast_(func, args, kwargs):
    x, src, group_name = args
    return _broadcast_into(x, src, group_name)


def wait_tensor(func, args, kwargs):
    return args[0]


# c10d ops: what a C++ process group (e.g. gloo) dispatches when handed tpu tensors. The group and
# the reduce op arrive boxed (ScriptObject); the op returns its outputs and a boxed Work.
_C10D = torch.ops.c10d


def _pg(obj):
    import torch.distributed as dist

    return dist.ProcessGroup.unbox(obj) if isinstance(obj, torch.ScriptObject) else obj


def _op(obj):
    import torch.distributed as dist

    return dist.ReduceOp.RedOpType(obj.op()) if isinstance(obj, torch.ScriptObject) else obj


def _opts(cls, **fields):
    opts = getattr(_C, cls)()
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


def _c10d(method, build, result):
    """A handler: build(args) -> (pg, method args); result(args, work) -> the op's return value."""
    def handler(func, args, kwargs):
        pg, margs = build(args)
        work = _transport(_pg(pg)).run(method, margs)
        return result(args, work.boxed())
    return handler


def _c10d_handlers() -> dict:
    return {
        _C10D.allreduce_.default: _c10d(
            "allreduce", lambda a: (a[1], (a[0], _opts("AllreduceOptions", reduceOp=_op(a[2])))),
            lambda a, w: (a[0], w)),
        _C10D.allgather_.default: _c10d(
            "allgather", lambda a: (a[2], (a[0], a[1], _opts("AllgatherOptions"))), lambda a, w: (a[0], w)),
        _C10D._allgather_base_.default: _c10d(
            "_allgather_base", lambda a: (a[2], (a[0], a[1], _opts("AllgatherOptions"))), lambda a, w: (a[0], w)),
        _C10D.reduce_scatter_.default: _c10d(
            "reduce_scatter", lambda a: (a[2], (a[0], a[1], _opts("ReduceScatterOptions", reduceOp=_op(a[3])))),
            lambda a, w: (a[0], w)),
        _C10D._reduce_scatter_base_.default: _c10d(
            "_reduce_scatter_base",
            lambda a: (a[2], (a[0], a[1], _opts("ReduceScatterOptions", reduceOp=_op(a[3])))),
            lambda a, w: (a[0], w)),
        _C10D.broadcast_.default: _c10d(
            "broadcast", lambda a: (a[1], (a[0], _opts("BroadcastOptions", rootRank=a[2], rootTensor=a[3]))),
            lambda a, w: (a[0], w)),
        _C10D.alltoall_base_.default: _c10d(
            "alltoall_base", lambda a: (a[2], (a[0], a[1], list(a[3]), list(a[4]), _opts("AllToAllOptions"))),
            lambda a, w: w),
        _C10D.alltoall_.default: _c10d(
            "alltoall", lambda a: (a[2], (a[0], a[1], _opts("AllToAllOptions"))), lambda a, w: (a[0], w)),
        _C10D.send.default: _c10d("send", lambda a: (a[1], (a[0], a[2], a[3])), lambda a, w: w),
        _C10D.recv_.default: _c10d("recv", lambda a: (a[1], (a[0], a[2], a[3])), lambda a, w: w),
        _C10D.reduce_.default: _c10d(
            "reduce", lambda a: (a[1], (a[0], _opts("ReduceOptions", reduceOp=_op(a[2]), rootRank=a[3],
                                                     rootTensor=a[4]))),
            lambda a, w: w),
        _C10D.gather_.default: _c10d(
            "gather", lambda a: (a[2], (a[0], a[1], _opts("GatherOptions", rootRank=a[3]))), lambda a, w: w),
        _C10D.scatter_.default: _c10d(
            "scatter", lambda a: (a[2], (a[0], a[1], _opts("ScatterOptions", rootRank=a[3]))),
            lambda a, w: (a[0], w)),
    }


def handlers() -> dict:
    table = {
        _F.all_reduce.default: all_reduce,
        _F.all_reduce_.default: all_reduce_,
        _F.all_reduce_coalesced.default: all_reduce_coalesced,
        _F.all_gather_into_tensor.default: all_gather_into_tensor,
        _F.all_gather_into_tensor_out.default: all_gather_into_tensor_out,
        _F.all_gather_into_tensor_coalesced.default: all_gather_into_tensor_coalesced,
        _F.reduce_scatter_tensor.default: reduce_scatter_tensor,
        _F.reduce_scatter_tensor_coalesced.default: reduce_scatter_tensor_coalesced,
        _F.all_to_all_single.default: all_to_all_single,
        _F.broadcast.default: broadcast,
        _F.broadcast_.default: broadcast_,
        _F.wait_tensor.default: wait_tensor,
        _FA.all_gather_into_tensor.default: all_gather_into_tensor,
        _FA.reduce_scatter_tensor.default: reduce_scatter_tensor,
        _FA.all_to_all_single.default: all_to_all_single,
    }
    if hasattr(_F, "all_reduce_coalesced_"):
        table[_F.all_reduce_coalesced_.default] = all_reduce_coalesced_
    table.update(_c10d_handlers())
    return table

"""Collectives of a tpu_dist group as XLA programs over the mesh of its members' devices.

``XlaTransport.run(method, args)`` serves the same c10d method calls as ``HostStaged.run``. Each
collective becomes one SPMD program (``engine.launchers.collective``): strict eager runs it at once
(asynchronously, like any op), fused eager records it into the pending graph like any op (no flush, no
host copy), and the result is written back into the (possibly strided) output tensors. What XLA cannot
do here (CPU tensors, uneven all_to_all, scatter, point-to-point, unsupported reductions) goes through
the host-staged gloo path, counted in ``torch_tpu.stats()["dist_host_fallbacks"]``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..engine import fused, launchers
from ..runtime import counters, dtypes, multiprocess
from ..tensor.tensor import value_of, write
from . import xla_ops

_counters = counters.counters
ReduceOp = dist.ReduceOp
_OP_NAMES = {ReduceOp.SUM: "sum", ReduceOp.AVG: "avg", ReduceOp.PRODUCT: "product", ReduceOp.MIN: "min",
             ReduceOp.MAX: "max", ReduceOp.BAND: "band", ReduceOp.BOR: "bor", ReduceOp.BXOR: "bxor"}


def op_name(op) -> str | None:
    """'sum', 'avg', ... for a ReduceOp (or its RedOpType); None for ops without an XLA form."""
    for known, name in _OP_NAMES.items():
        try:
            if op == known:
                return name
        except Exception:
            pass
    return None


def _is_tpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _tensors(e)


class _Unsupported(Exception):
    """This call has no XLA form: stage it through the host."""


def _aval(t):
    return tuple(t.shape), dtypes.to_jax_dtype(t.dtype)


def _describe(t) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


class DeviceWork(dist._Work):
    """A collective issued on the device. Later programs on this device run after it (XLA runs one
    device's programs in issue order, like a CUDA stream), so ``wait`` has nothing to block on; reading a
    result (``.cpu()``, ``.item()``) or ``torch.tpu.synchronize()`` waits for the device."""

    def __init__(self, outputs=()):
        super().__init__()
        self._outputs = list(outputs)

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        """True once the device computed the outputs (never flushes: a fused graph not yet run is not)."""
        for t in self._outputs:
            arr = t._tpu_storage.array
            if isinstance(arr, fused.LazyArray):
                if arr.error is not None:
                    continue  # finished, with the failure its wait/read raises
                arr = arr.concrete  # set once its graph ran
            if arr is None or not arr.is_ready():
                return False
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def synchronize(self):
        pass

    def result(self):
        return self._outputs

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


class XlaTransport:
    """``run(method, args)`` for one process group: XLA programs over its members' devices."""

    def __init__(self, host, global_ranks, device_ids: tuple, group_rank: int, name: str = ""):
        self.host = host                  # HostStaged: the fallback
        self.host_pg = host.host_pg
        self.size = len(device_ids)
        self.ranks = tuple(global_ranks)
        self.device_ids = tuple(device_ids)
        self.group_rank = group_rank
        self.seq = 0
        # the debug check's keys: this group (its name and incarnation), not its devices, which other
        # groups over the same devices (a DeviceMesh dimension, a new_group) share with their own counts
        self.check_key = f"{name or '-'.join(map(str, self.device_ids))}"

    # -- plumbing --------------------------------------------------------------------------------
    def run(self, method: str, args: tuple):
        handler = getattr(self, "_m_" + method.lstrip("_"), None)
        tensors = list(_tensors(args))
        if handler is not None and tensors and all(_is_tpu(t) for t in tensors):
            try:
                outputs = handler(*args)
            except _Unsupported:
                pass
            else:
                return DeviceWork(outputs)
        if any(_is_tpu(t) for t in tensors):
            _counters["dist_host_fallbacks"] += 1
        return self.host.run(method, args)

    def collective(self, kind: str, params: tuple, fn, inputs: list, out_avals: list):
        """One SPMD program ``fn`` over the group's mesh; inputs are tpu tensors. Returns arrays."""
        arrays = [value_of(t) for t in inputs]
        in_sig = tuple(_aval(t) for t in inputs)
        what = f"{kind}{'(' + ', '.join(map(str, params)) + ')' if params else ''} " \
               f"{' '.join(_describe(t) for t in inputs)} on ranks {list(self.ranks)}"
        self.seq += 1
        if dist.get_debug_level() == dist.DebugLevel.DETAIL:
            multiprocess.check_same_collective(self.check_key, self.seq, self.ranks, what)
        multiprocess.note_issued(f"#{self.seq} {what}")
        key = ("collective", kind, params, self.device_ids, in_sig)
        _counters["dist_xla_collectives"] += 1
        return launchers.collective(key, fn, arrays, out_avals, self.device_ids, what=what)

    def _reduce_op(self, opts, dtype) -> str:
        name = op_name(opts.reduceOp)
        if name is None or not xla_ops.supports_reduce(name, dtypes.to_jax_dtype(dtype)):
            raise _Unsupported
        return name

    # -- c10d methods (the same names and arguments as ProcessGroup's) -----------------------------
    def _m_allreduce(self, tensors, opts):
        ops = [self._reduce_op(opts, t.dtype) for t in tensors]  # all checked before any is issued
        for t, op in zip(tensors, ops):
            (out,) = self.collective("all_reduce", (op,), xla_ops.all_reduce(op, self.size), [t], [_aval(t)])
            write(t, out)
        return tensors

    def _m_allreduce_coalesced(self, tensors, opts):
        return self._m_allreduce(tensors, opts)

    def _m_allgather_base(self, output, input, opts):
        if output.numel() != input.numel() * self.size or output.dtype != input.dtype:
            raise _Unsupported  # let the host path raise torch's own error
        shape = tuple(output.shape)
        (out,) = self.collective("all_gather", (shape,), xla_ops.all_gather(self.size, shape), [input],
                                 [_aval(output)])
        write(output, out)
        return [output]

    def _m_allgather(self, output_lists, inputs, opts):
        done = []
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self.size or any(o.shape != inp.shape or o.dtype != inp.dtype for o in outs):
                raise _Unsupported
        for outs, inp in zip(output_lists, inputs):
            results = self.collective("all_gather_list", (), xla_ops.all_gather_list(self.size), [inp],
                                      [_aval(o) for o in outs])
            for o, r in zip(outs, results):
                write(o, r)
            done.extend(outs)
        return done

    def _m_allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        if any(o.numel() != i.numel() * self.size or o.dtype != i.dtype for o, i in zip(outputs, inputs)):
            raise _Unsupported
        for out, inp in zip(outputs, inputs):
            self._m_allgather_base(out, inp, opts)
        return list(outputs)

    def _m_reduce_scatter_base(self, output, input, opts):
        op = self._reduce_op(opts, input.dtype)
        if input.numel() != output.numel() * self.size or input.dtype != output.dtype:
            raise _Unsupported
        shape = tuple(output.shape)
        (out,) = self.collective("reduce_scatter", (op, shape), xla_ops.reduce_scatter(op, self.size, shape),
                                 [input], [_aval(output)])
        write(output, out)
        return [output]

    def _m_reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        for out, inp in zip(outputs, inputs):
            self._reduce_op(opts, inp.dtype)
            if inp.numel() != out.numel() * self.size or inp.dtype != out.dtype:
                raise _Unsupported
        for out, inp in zip(outputs, inputs):
            self._m_reduce_scatter_base(out, inp, opts)
        return list(outputs)

    def _m_reduce_scatter(self, outputs, input_lists, opts):
        for out, ins in zip(outputs, input_lists):
            self._reduce_op(opts, out.dtype)
            if len(ins) != self.size or any(i.shape != out.shape or i.dtype != out.dtype for i in ins):
                raise _Unsupported
        for out, ins in zip(outputs, input_lists):
            op = self._reduce_op(opts, out.dtype)
            (r,) = self.collective("reduce_scatter_list", (op,), xla_ops.reduce_scatter_list(op, self.size),
                                   list(ins), [_aval(out)])
            write(out, r)
        return list(outputs)

    def _m_broadcast(self, tensors, opts):
        src = opts.rootRank
        for t in tensors:
            (out,) = self.collective("broadcast", (src,), xla_ops.broadcast(src), [t], [_aval(t)])
            write(t, out)
        return tensors

    def _m_reduce(self, tensors, opts):
        root = opts.rootRank
        ops = [self._reduce_op(opts, t.dtype) for t in tensors]
        for t, op in zip(tensors, ops):
            (out,) = self.collective("all_reduce", (op,), xla_ops.all_reduce(op, self.size), [t], [_aval(t)])
            if self.group_rank == root:
                write(t, out)
        return tensors

    def _m_alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        rows = input.shape[0] if input.dim() else 0
        even = [rows // self.size] * self.size
        if (rows % self.size or output.shape != input.shape or output.dtype != input.dtype
                or (input_split_sizes and list(input_split_sizes) != even)
                or (output_split_sizes and list(output_split_sizes) != even)):
            raise _Unsupported  # uneven splits: XLA:CPU has no ragged all-to-all
        shape = tuple(output.shape)
        (out,) = self.collective("all_to_all", (shape,), xla_ops.all_to_all(self.size, shape), [input],
                                 [_aval(output)])
        write(output, out)
        return [output]

    def _m_alltoall(self, output_tensors, input_tensors, opts):
        first = input_tensors[0]
        if len(input_tensors) != self.size or len(output_tensors) != self.size or any(
                t.shape != first.shape or t.dtype != first.dtype for t in [*input_tensors, *output_tensors]):
            raise _Unsupported
        results = self.collective("all_to_all_list", (), xla_ops.all_to_all_list(self.size),
                                  list(input_tensors), [_aval(o) for o in output_tensors])
        for o, r in zip(output_tensors, results):
            write(o, r)
        return list(output_tensors)

    def _m_gather(self, output_lists, inputs, opts):
        root = opts.rootRank
        for i, inp in enumerate(inputs):
            outs = output_lists[i] if self.group_rank == root else []
            if self.group_rank == root and (len(outs) != self.size or any(
                    o.shape != inp.shape or o.dtype != inp.dtype for o in outs)):
                raise _Unsupported
        for i, inp in enumerate(inputs):
            outs = output_lists[i] if self.group_rank == root else []
            results = self.collective("all_gather_list", (), xla_ops.all_gather_list(self.size), [inp],
                                      [_aval(inp)] * self.size)
            for o, r in zip(outs, results):
                write(o, r)
        return []

    def barrier(self):
        """Every member reaches this point and the device finished what it was given before."""
        t = torch.zeros(1, dtype=torch.int32, device="tpu")
        (out,) = self.collective("barrier", (), xla_ops.all_reduce("sum", self.size), [t], [_aval(t)])
        try:
            fused.materialize(out).block_until_ready()
        except Exception as exc:
            err = multiprocess.collective_error(exc, f"barrier on ranks {list(self.ranks)}")
            if err is exc:
                raise
            raise err from exc

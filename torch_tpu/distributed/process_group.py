"""The "tpu_dist" process group: a ``dist.ProcessGroup`` whose collectives run through a transport.

torch's C++ ``Backend`` cannot be subclassed from Python, so the creator returns a ``ProcessGroup``
subclass; ``dist.*`` calls its methods directly, and each calls ``transport.run(method, args)``. The
transport is ``xla_transport.XlaTransport`` (collectives as XLA programs over the members' devices) when
this process joined JAX's distributed runtime (``runtime/multiprocess.py``), else ``HostStaged``: stage
tpu tensors to the host, run the same collective on a gloo group, write the results back in place.
``XlaTransport`` falls back to ``HostStaged`` for what it cannot do.

Why one module: one ``dist.ProcessGroup`` subclass whose methods are torch's collective API; the transports live
apart.
"""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

_C = torch._C._distributed_c10d

from .constants import BACKEND_NAME, default_timeout_s

ReduceOp = dist.ReduceOp

# c10d method -> the torch.distributed call users wrote (what an error names)
PUBLIC_NAMES = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced", "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor", "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced":
    "reduce_scatter_tensor_coalesced", "broadcast": "broadcast", "reduce": "reduce",
    "alltoall_base": "all_to_all_single", "alltoall": "all_to_all", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "recv_anysource": "recv",
}
_BITWISE = ("BAND", "BOR", "BXOR")


def _desc(t) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


def _check_reduce_op(fail, opts, tensors) -> None:
    """Reduce op x dtype pairs torch's backends refuse (gloo: bitwise ops on floating point, an average
    of bools); refused here, on this rank, with the op and dtype named."""
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return
    name = next((n for n in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", *_BITWISE)
                 if _same_op(op, getattr(ReduceOp, n))), None)
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if name in _BITWISE and (t.is_floating_point() or t.is_complex()):
            fail(f"ReduceOp.{name} needs an integral or bool tensor, got {_desc(t)}")
        if name == "AVG" and t.dtype == torch.bool:
            fail(f"ReduceOp.AVG of a bool tensor {_desc(t)} is not defined (use MAX or MIN)")


def _same_op(a, b) -> bool:
    try:
        return a == b
    except Exception:
        return False


def _check_sizes(method: str, args: tuple, world: int) -> None:
    """This rank's own argument errors, raised here before any peer is involved (gloo and XLA would
    report them as a failed collective, which reads like a peer's fault)."""
    def numel(t):
        return t.numel() if isinstance(t, torch.Tensor) else None

    def fail(what):
        raise ValueError(f"tpu_dist: {PUBLIC_NAMES.get(method, method)}: {what} (world size {world}); "
                         "no collective was started")

    for pos in _OUTPUTS.get(method, ()):  # torch refuses in-place writes into self-overlapping memory
        for t in _flat_tensors(args[pos]) if pos < len(args) else ():
            if t.numel() > 1 and torch._debug_has_internal_overlap(t) == 1:
                fail(f"the output {_desc(t)} (strides {tuple(t.stride())}) has elements that share memory, "
                     "e.g. an expanded tensor; clone() it first")

    def same_dtype(out, inp):
        if isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and out.dtype != inp.dtype:
            fail(f"the output {_desc(out)} and the input {_desc(inp)} differ in dtype")

    def one_per_rank(tensors, kind, other, other_kind):
        """A list form's tensors: one per rank, each of the single tensor's dtype and shape."""
        if len(tensors) != world:
            fail(f"{len(tensors)} {kind} tensors given, one per rank needed")
        for t in tensors:
            same_dtype(*((t, other) if kind == "output" else (other, t)))
            if tuple(t.shape) != tuple(other.shape):
                fail(f"an {kind} tensor {_desc(t)} differs from the {other_kind} {_desc(other)}")

    if method in ("allreduce", "allreduce_coalesced", "reduce"):
        _check_reduce_op(fail, args[1], args[0])
    elif method == "_allgather_base":
        out, inp = args[0], args[1]
        same_dtype(out, inp)
        if numel(out) != world * numel(inp):
            fail(f"the output {_desc(out)} must hold world size x the input {_desc(inp)} elements")
    elif method == "_reduce_scatter_base":
        out, inp = args[0], args[1]
        same_dtype(out, inp)
        _check_reduce_op(fail, args[2], [inp])
        if numel(inp) != world * numel(out):
            fail(f"the input {_desc(inp)} must hold world size x the output {_desc(out)} elements")
    elif method == "reduce_scatter":
        for out, ins in zip(args[0], args[1]):
            _check_reduce_op(fail, args[2], [out])
            one_per_rank(ins, "input", out, "output")
    elif method == "allgather":
        for outs, inp in zip(args[0], args[1]):
            one_per_rank(outs, "output", inp, "input")
    elif method == "alltoall_base":
        out, inp, out_splits, in_splits = args[:4]
        same_dtype(out, inp)
        for what, t, splits in (("output", out, out_splits), ("input", inp, in_splits)):
            rows = t.shape[0] if t.dim() else 1
            if splits:
                if len(splits) != world:
                    fail(f"{len(splits)} {what} split sizes {list(splits)} given, one per rank needed")
                if sum(splits) != rows or any(s < 0 for s in splits):
                    fail(f"the {what} split sizes {list(splits)} do not add up to dim 0 of the {what} {_desc(t)}")
            elif rows % world:
                fail(f"dim 0 of the {what} {_desc(t)} is not divisible by the world size, and no split sizes "
                     "were given")
        if out.dim() and inp.dim() and tuple(out.shape[1:]) != tuple(inp.shape[1:]):
            fail(f"the output {_desc(out)} and the input {_desc(inp)} differ past dim 0")


# method name -> positions of the arguments the collective writes (copied back to the device)
_OUTPUTS = {
    "allreduce": (0,),
    "allreduce_coalesced": (0,),
    "allgather": (0,),
    "_allgather_base": (0,),
    "allgather_into_tensor_coalesced": (0,),
    "allgather_coalesced": (0,),
    "reduce_scatter": (0,),
    "_reduce_scatter_base": (0,),
    "reduce_scatter_tensor_coalesced": (0,),
    "broadcast": (0,),
    "reduce": (0,),
    "alltoall_base": (0,),
    "alltoall": (0,),
    "gather": (0,),
    "scatter": (0,),
    "send": (),
    "recv": (0,),
    "recv_anysource": (0,),
}


def _is_tpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _stage(x, staged: list):
    """x with every tpu tensor replaced by a host copy; records (tpu, host) pairs in ``staged``."""
    if isinstance(x, torch.Tensor):
        if _is_tpu(x):
            host = _to_host(x)
            staged.append((x, host))
            return host
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_stage(e, staged) for e in x)
    return x


def _to_host(x):
    # below autograd (we may be inside __torch_dispatch__): read the device array directly
    from ..tensor.kernels import to_host

    return to_host(x).contiguous()


def _from_host(dst, host) -> None:
    from ..tensor.kernels import copy_into

    copy_into(dst, host)


def _completed_work(result=None):
    fut = torch.futures.Future()
    fut.set_result(result if result is not None else [])
    return torch._C._distributed_c10d._create_work_from_future(fut)


def _reduce_op_of(args):
    for a in args:
        op = getattr(a, "reduceOp", None)
        if op is not None:
            return a, op
    return None, None


class HostStaged:
    """Runs a collective on host copies of the tensors through a CPU process group (gloo).

    The seam: a device-native implementation provides the same ``run(method, args)`` and nothing else
    in the backend changes.
    """

    def __init__(self, host_pg, size: int):
        self.host_pg = host_pg
        self.size = size

    def run(self, method: str, args: tuple):
        outputs = _OUTPUTS[method]
        staged_out: list = []
        host_args = []
        staged_bytes = 0
        for i, a in enumerate(args):
            pairs: list = []
            host_args.append(_stage(a, pairs))
            staged_bytes += sum(host.numel() * host.element_size() for _, host in pairs)
            if i in outputs:
                staged_out.extend(pairs)
        # gloo averages floating-point tensors itself; integers: sum, then divide every output
        opts, op = _reduce_op_of(host_args)
        divide = op is not None and op == ReduceOp.AVG and any(
            not (t.is_floating_point() or t.is_complex())
            for i in outputs for t in _flat_tensors(host_args[i]))
        if divide:
            opts.reduceOp = ReduceOp.SUM
        if method in _POINT_TO_POINT:  # isend/irecv must not block: both peers may send first
            try:
                work = getattr(self.host_pg, method)(*host_args)
            except RuntimeError as exc:
                raise self._failed(method, exc) from exc
            return _HostP2PWork(self, method, work, staged_out, host_args, staged_bytes)
        try:
            work = getattr(self.host_pg, method)(*host_args)
            work.wait()
        except RuntimeError as exc:
            raise self._failed(method, exc) from exc
        finally:
            if divide:
                opts.reduceOp = ReduceOp.AVG
        if divide:
            for i in outputs:
                for t in _flat_tensors(host_args[i]):
                    t.copy_(_average(t, self.size))
        _copy_back(staged_out, staged_bytes)
        return _completed_work()

    def _failed(self, method, exc):
        return RuntimeError(
            f"tpu_dist: {PUBLIC_NAMES.get(method, method)} failed on rank {self.host_pg.rank()} of {self.size} "
            f"(a peer process exited, raised, or did not join within the timeout): {exc}")


_POINT_TO_POINT = ("send", "recv", "recv_anysource")


def _copy_back(staged_out, staged_bytes) -> None:
    for dev, host in staged_out:
        staged_bytes += host.numel() * host.element_size()
        _from_host(dev, host)
    if staged_bytes:
        from ..runtime import counters

        counters.counters["dist_host_bytes"] += staged_bytes


class _HostP2PWork(dist._Work):
    """A gloo send/recv in flight on host copies: ``wait`` waits for it, then writes a received tensor
    back to the device (a blocking send would deadlock two ranks that both send before receiving)."""

    def __init__(self, staged, method, work, staged_out, host_args, staged_bytes):
        super().__init__()
        self._staged, self._method, self._work = staged, method, work
        self._staged_out, self._keep, self._bytes = staged_out, host_args, staged_bytes
        self._done = False

    def wait(self, timeout=None):
        if not self._done:
            try:
                self._work.wait() if timeout is None else self._work.wait(timeout)
            except RuntimeError as exc:
                raise self._staged._failed(self._method, exc) from exc
            self._done = True
            _copy_back(self._staged_out, self._bytes)
            self._keep = None
        return True

    def is_completed(self):
        return self._done or self._work.is_completed()

    def is_success(self):
        return self._work.is_success() if not self._done else True

    def exception(self):
        return None

    def synchronize(self):
        self.wait()

    def result(self):
        return [t for t, _ in self._staged_out]

    def _source_rank(self):  # irecv from any source: which rank sent
        return self._work._source_rank()

    def get_future(self):
        self.wait()
        fut = torch.futures.Future()
        fut.set_result(self.result())
        return fut


def _flat_tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _flat_tensors(e)


def _average(total, size: int):
    if total.is_floating_point() or total.is_complex():
        return total / size
    return torch.div(total, size, rounding_mode="trunc")  # as NCCL's integer average


class TpuProcessGroup(dist.ProcessGroup):
    """A process group over tpu (and cpu) tensors, one process per device."""

    def __init__(self, rank: int, size: int, transport: HostStaged, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self.transport = transport
        self.timeout = timeout
        self._tpu_group_name = None

    # DeviceMesh / functional collectives look the group up by name.
    def _set_group_name(self, name: str) -> None:
        self._tpu_group_name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        if self._tpu_group_name is None:
            raise RuntimeError("tpu_dist: process group name not set")
        return self._tpu_group_name

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return self.getBackendName()

    def _run(self, method, *args):
        _check_sizes(method, args, self.size())
        return self.transport.run(method, args)

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if opts is None or isinstance(opts, ReduceOp) or isinstance(opts, ReduceOp.RedOpType):
            op = opts if opts is not None else ReduceOp.SUM
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
        return self._run("allreduce", tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._run("allreduce_coalesced", tensors, opts or dist.AllreduceCoalescedOptions())

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._run("allgather", output_tensors, input_tensors, opts or _C.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        return self._run("_allgather_base", output, input, opts or _C.AllgatherOptions())

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for out, inp in zip(outputs, inputs):  # gloo has no coalesced form: one by one
            self._run("_allgather_base", out, inp, opts or _C.AllgatherOptions())
        return _completed_work()

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self._run("allgather_coalesced", output_lists, inputs, opts or _C.AllgatherOptions())

    def all_gather_single(self, output, input, opts=None):
        return self._run("_allgather_base", output, input, opts or _C.AllgatherOptions())

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", output, input, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        return self.alltoall_base(output, input, output_split_sizes or [], input_split_sizes or [], opts)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        return self._run("reduce_scatter", output_tensors, input_lists, opts or dist.ReduceScatterOptions())

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", output, input, opts or dist.ReduceScatterOptions())

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for out, inp in zip(outputs, inputs):
            self._run("_reduce_scatter_base", out, inp, opts or dist.ReduceScatterOptions())
        return _completed_work()

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if opts is None or isinstance(opts, int):
            root = opts or 0
            opts = dist.BroadcastOptions()
            opts.rootRank = root
        return self._run("broadcast", tensors, opts)

    def reduce(self, tensors, opts=None):
        return self._run("reduce", tensors, opts or dist.ReduceOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._run("alltoall_base", output, input, list(output_split_sizes), list(input_split_sizes),
                         opts or dist.AllToAllOptions())

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._run("alltoall", output_tensors, input_tensors, opts or dist.AllToAllOptions())

    def gather(self, output_lists, input_tensors, opts=None):
        return self._run("gather", output_lists, input_tensors, opts or dist.GatherOptions())

    def scatter(self, output_tensors, input_lists, opts=None):
        return self._run("scatter", output_tensors, input_lists, opts or dist.ScatterOptions())

    def send(self, tensors, dst, tag=0):
        return self._run("send", tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._run("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._run("recv_anysource", tensors, tag)

    def barrier(self, opts=None):
        barrier = getattr(self.transport, "barrier", None)
        if barrier is not None:  # a tiny collective program: also orders this device's earlier work
            barrier()
            return _completed_work()
        try:
            self.transport.host_pg.barrier(opts or dist.BarrierOptions()).wait()
        except RuntimeError as exc:
            raise RuntimeError(
                f"tpu_dist: barrier failed on rank {self.rank()} of {self.size()} "
                f"(a peer process exited, raised, or did not join within the timeout): {exc}") from exc
        return _completed_work()

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self.transport.host_pg.monitored_barrier(timeout or self.timeout, wait_all_ranks)

    def shutdown(self):
        pass

    def abort(self):
        pass


def _bind_local_device() -> None:
    """On a multi-device platform, this process uses the device its local rank names (torch index 0)."""
    from .. import config

    local_rank = os.environ.get("LOCAL_RANK")  # torchrun's, not ours: config does not own it
    if local_rank is None or config.settings().device_index is not None:
        return
    os.environ["TORCH_TPU_DEVICE_INDEX"] = local_rank  # config.settings() sees the change
    from ..runtime import platform

    if platform.devices.cache_info().currsize:  # devices were listed before the group existed
        if len(platform.devices()) > 1:
            import warnings

            warnings.warn(
                f"tpu_dist: this process used the device before init_process_group; it now binds "
                f"device {local_rank} (LOCAL_RANK). Set TORCH_TPU_DEVICE_INDEX before first use, or call "
                "init_process_group first, so that no tensor lives on another rank's device.")
        platform.devices.cache_clear()


_INCARNATIONS: dict = {}


def create_process_group(opts, backend_options):
    """The creator registered with ``dist.Backend.register_backend`` (extended API)."""
    timeout = opts.timeout
    default = datetime.timedelta(minutes=30)  # torch's default for non-NCCL groups: nobody asked for it
    if timeout is None or timeout == default:
        timeout = datetime.timedelta(seconds=default_timeout_s())
    _bind_local_device()
    from ..runtime import multiprocess, platform

    device = platform.jax_device()  # this process's device is now chosen (DeviceMesh then leaves it alone)
    # A group created again under the same name (destroy_process_group, then init_process_group) may get
    # the same store: torch's TCPStore server is shared within a process while any old reference lives, so
    # the first incarnation's gloo addresses are still there and a fresh gloo group would connect to them
    # and hang. Every member creates a group as often as the others: count the incarnations per group.
    ident = (opts.group_id, tuple(opts.global_ranks_in_group or range(opts.group_size)))
    _INCARNATIONS[ident] = incarnation = _INCARNATIONS.get(ident, 0) + 1
    store = dist.PrefixStore(f"tpu_dist_gloo/{incarnation}", opts.store)
    host_pg = dist.ProcessGroupGloo(store, opts.group_rank, opts.group_size, timeout)
    transport = HostStaged(host_pg, opts.group_size)
    if multiprocess.active():
        from ..runtime import collective_order
        from .xla_transport import XlaTransport

        root = opts.store  # the job's store without this group's prefix: every group's programs share it
        while isinstance(root, dist.PrefixStore):
            root = root.underlying_store
        collective_order.use_store(root)

        ranks = list(opts.global_ranks_in_group or range(opts.group_size))
        transport = XlaTransport(transport, ranks, multiprocess.device_ids(ranks, device.id), opts.group_rank,
                                 name=f"{opts.group_id}.{incarnation}")
        # the first collective over a device set also sets up XLA's communicator for it: do it now,
        # while every member is creating the group anyway
        transport.barrier()
    return TpuProcessGroup(opts.group_rank, opts.group_size, transport, timeout)

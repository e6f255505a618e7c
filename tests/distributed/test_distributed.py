"""tpu_dist: real 2-process jobs on the CPU platform (each process one XLA CPU device).

Each scenario below runs in 2 child processes (plain subprocesses with torchrun's environment, or
torchrun itself through ``python -m torch.tpu.distributed``); the children check their results
against CPU torch (gloo on CPU tensors, or a single-process CPU computation) computed in the same job
and exit non-zero on a mismatch.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests.harness import REPO, hangs, jobs
from tests.harness.jobs import job_env  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

HERE = os.path.abspath(__file__)


# ---------------------------------------------------------------------------------------------
# Scenarios (run inside the children).
# ---------------------------------------------------------------------------------------------
def _inputs(rank, shape, dtype, torch):
    g = torch.Generator().manual_seed(1234 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(1, 7, shape, generator=g, dtype=dtype)


def _check(name, got, want, atol=1e-5, rtol=1e-5):
    import torch

    got = got.cpu() if isinstance(got, torch.Tensor) else got
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def scenario_collectives(out_dir):
    """Every c10d collective on tpu tensors == the same collective through gloo on CPU tensors."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="tpu_dist")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "tpu_dist"
    cpu_group = dist.new_group(backend="gloo")
    R = dist.ReduceOp

    def both(fn):
        """fn(device, group) -> list of tensors; compare tpu/tpu_dist against cpu/gloo."""
        return fn("tpu", None), fn("cpu", cpu_group)

    cases = [(torch.float32, [R.SUM, R.MAX, R.MIN, R.PRODUCT, R.AVG]),
             (torch.bfloat16, [R.SUM, R.MAX]),
             (torch.int64, [R.SUM, R.MAX, R.MIN, R.PRODUCT, R.BAND, R.BOR, R.BXOR])]
    for dtype, ops in cases:
        for op in ops:
            def f(dev, group):
                t = _inputs(rank, (5, 3), dtype, torch).to(dev)
                if op == R.AVG and dev == "cpu":  # gloo has no AVG: the reference is SUM / world
                    dist.all_reduce(t, op=R.SUM, group=group)
                    return [t / world]
                dist.all_reduce(t, op=op, group=group)
                return [t]
            (a,), (b,) = both(f)
            _check(f"all_reduce {op} {dtype}", a, b, atol=1e-2 if dtype == torch.bfloat16 else 1e-5)

    # in place into a non-contiguous view: the base sees the result
    base = _inputs(rank, (4, 6), torch.float32, torch)
    tb = base.to("tpu")
    view = tb[:, 1::2]
    dist.all_reduce(view)
    ref = base.clone()
    rv = ref[:, 1::2].contiguous()
    dist.all_reduce(rv, group=cpu_group)
    ref[:, 1::2] = rv
    _check("all_reduce into a strided view", tb, ref)

    def all_gather(dev, group):
        outs = [torch.empty(3, 2, device=dev) for _ in range(world)]
        dist.all_gather(outs, _inputs(rank, (3, 2), torch.float32, torch).to(dev), group=group)
        return outs

    for i, (a, b) in enumerate(zip(*both(all_gather))):
        _check(f"all_gather[{i}]", a, b)

    def all_gather_into(dev, group):
        out = torch.empty(world * 3, 2, dtype=torch.int64, device=dev)
        dist.all_gather_into_tensor(out, _inputs(rank, (3, 2), torch.int64, torch).to(dev), group=group)
        return [out]

    _check("all_gather_into_tensor", *[x[0] for x in both(all_gather_into)])

    def reduce_scatter(dev, group):
        out = torch.empty(3, device=dev)
        ins = [(_inputs(rank, (3,), torch.float32, torch) + i).to(dev) for i in range(world)]
        dist.reduce_scatter(out, ins, group=group)
        return [out]

    def reduce_scatter_tensor(dev, group):
        out = torch.empty(2, 4, device=dev)
        dist.reduce_scatter_tensor(out, _inputs(rank, (2 * world, 4), torch.float32, torch).to(dev), group=group)
        return [out]

    _check("reduce_scatter", *[x[0] for x in both(reduce_scatter)])
    _check("reduce_scatter_tensor", *[x[0] for x in both(reduce_scatter_tensor)])

    def broadcast(dev, group):
        t = _inputs(rank, (4,), torch.float32, torch).to(dev)
        dist.broadcast(t, src=1, group=group)
        return [t]

    _check("broadcast", *[x[0] for x in both(broadcast)])

    def reduce(dev, group):
        t = _inputs(rank, (4,), torch.float32, torch).to(dev)
        dist.reduce(t, dst=0, group=group)
        return [t]

    if rank == 0:
        _check("reduce (dst)", *[x[0] for x in both(reduce)])
    else:
        both(reduce)

    def all_to_all_single(dev, group):
        inp = _inputs(rank, (world * 2, 3), torch.float32, torch).to(dev)
        out = torch.empty_like(inp)
        dist.all_to_all_single(out, inp, group=group)
        # uneven splits
        in_splits = [1, 3] if rank == 0 else [2, 2]
        out_splits = [1, 2] if rank == 0 else [3, 2]
        inp2 = _inputs(rank, (4, 2), torch.float32, torch).to(dev)
        out2 = torch.empty(sum(out_splits), 2, device=dev)
        dist.all_to_all_single(out2, inp2, out_splits, in_splits, group=group)
        return [out, out2]

    for i, (a, b) in enumerate(zip(*both(all_to_all_single))):
        _check(f"all_to_all_single[{i}]", a, b)

    def all_to_all(dev, group):
        ins = [(_inputs(rank, (2,), torch.float32, torch) + 10 * i).to(dev) for i in range(world)]
        outs = [torch.empty(2, device=dev) for _ in range(world)]
        dist.all_to_all(outs, ins, group=group)
        return outs

    for i, (a, b) in enumerate(zip(*both(all_to_all))):
        _check(f"all_to_all[{i}]", a, b)

    def gather(dev, group):
        t = _inputs(rank, (3,), torch.float32, torch).to(dev)
        outs = [torch.empty(3, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(t, outs, dst=0, group=group)
        return outs or []

    for i, (a, b) in enumerate(zip(*both(gather))):
        _check(f"gather[{i}]", a, b)

    def scatter(dev, group):
        out = torch.empty(3, device=dev)
        ins = [(_inputs(0, (3,), torch.float32, torch) * (i + 1)).to(dev) for i in range(world)] if rank == 0 else None
        dist.scatter(out, ins, src=0, group=group)
        return [out]

    _check("scatter", *[x[0] for x in both(scatter)])

    # point to point, both directions
    payload = _inputs(7, (2, 3), torch.float32, torch)
    if rank == 0:
        dist.send(payload.to("tpu"), dst=1)
        back = torch.empty(2, 3, device="tpu")
        dist.recv(back, src=1)
        _check("send/recv round trip", back, payload * 2)
    else:
        got = torch.empty(2, 3, device="tpu")
        dist.recv(got, src=0)
        _check("recv", got, payload)
        dist.send(got * 2, dst=0)

    # a plain gloo group handed tpu tensors: the c10d ops reach __torch_dispatch__ and are staged too
    x = _inputs(rank, (2, 3), torch.float32, torch)
    t = x.to("tpu")
    dist.all_reduce(t, op=R.MAX, group=cpu_group)
    ref = x.clone()
    dist.all_reduce(ref, op=R.MAX, group=cpu_group)
    _check("gloo group, tpu tensor: all_reduce", t, ref)
    out = torch.empty(2 * world, 3, device="tpu")
    dist.all_gather_into_tensor(out, x.to("tpu"), group=cpu_group)
    ref = torch.empty(2 * world, 3)
    dist.all_gather_into_tensor(ref, x, group=cpu_group)
    _check("gloo group, tpu tensor: all_gather_into_tensor", out, ref)

    # async_op returns a Work that waits
    t = torch.ones(3, device="tpu")
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    _check("async all_reduce", t, torch.full((3,), float(world)))
    dist.barrier()
    _xla_checks(rank, world, cpu_group)
    _dtensor_checks()
    dist.destroy_process_group()


def _xla_checks(rank, world, cpu_group):
    """The device-native path: which collectives ran as XLA programs, views written back, AVG on CPU
    tensors, object collectives, fused mode (no flush per collective), compiled mode, mismatch reports."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import torch_tpu
    from torch_tpu import EagerMode
    from torch_tpu.runtime import multiprocess

    R = dist.ReduceOp
    assert multiprocess.active(), multiprocess.why_inactive()

    # tpu_dist on CPU tensors: AVG is an average (it was a sum), like gloo's
    c = torch.tensor([1.0 + 2 * rank, -4.0])
    dist.all_reduce(c, op=R.AVG)
    ref = torch.tensor([1.0 + 2 * rank, -4.0])
    dist.all_reduce(ref, op=R.AVG, group=cpu_group)
    _check("AVG on CPU tensors through tpu_dist", c, ref)

    torch_tpu.reset_stats()
    # integer AVG truncates (NCCL's); bool reductions; bitwise ops, all on the device
    xs = [_inputs(r, (6,), torch.int64, torch) * (1 if r else -1) for r in range(world)]
    t = xs[rank].to("tpu")
    dist.all_reduce(t, op=R.AVG)
    _check("int64 AVG", t, torch.div(sum(xs), world, rounding_mode="trunc"))
    bs = [torch.tensor([True, False, rank == 0, False]) for _ in range(world)]
    bs = [torch.tensor([True, False, r == 0, False]) for r in range(world)]
    for op, want in ((R.SUM, torch.stack(bs).any(0)), (R.MIN, torch.stack(bs).all(0)),
                     (R.MAX, torch.stack(bs).any(0))):
        t = bs[rank].to("tpu")
        dist.all_reduce(t, op=op)
        _check(f"bool all_reduce {op}", t, want)
    # results written back into non-contiguous views
    base = _inputs(rank, (6, 4), torch.float32, torch)
    tb = base.to("tpu")
    dist.broadcast(tb.t()[1:3], src=1)  # a transposed slice
    src1 = _inputs(1, (6, 4), torch.float32, torch)
    want = base.clone()
    want.t()[1:3] = src1.t()[1:3]
    _check("broadcast into a transposed view", tb, want)
    big = torch.zeros(3, 2 * world + 2, device="tpu")
    x = _inputs(rank, (3, 2), torch.float32, torch)
    dist.all_gather_into_tensor(big.t()[1:1 + 2 * world], x.t().contiguous().to("tpu"))
    want = torch.zeros(3, 2 * world + 2)
    want[:, 1:1 + 2 * world] = torch.cat([_inputs(r, (3, 2), torch.float32, torch).t() for r in range(world)]).t()
    _check("all_gather_into_tensor into a strided view", big, want)
    inp = _inputs(rank, (4, 2 * world), torch.float32, torch)
    out = torch.empty(2, 4, device="tpu")
    dist.reduce_scatter_tensor(out, inp.to("tpu").t())  # non-contiguous input
    want = sum(_inputs(r, (4, 2 * world), torch.float32, torch) for r in range(world)).t()[2 * rank:2 * rank + 2]
    _check("reduce_scatter_tensor of a transposed input", out, want)
    # 0-d tensors
    t = torch.tensor(float(rank + 1), device="tpu")
    dist.all_reduce(t, op=R.MAX)
    _check("0-d all_reduce", t, torch.tensor(float(world)))
    out = torch.empty(world, device="tpu")
    dist.all_gather_into_tensor(out, torch.tensor(float(rank) - 0.5, device="tpu"))
    _check("0-d all_gather_into_tensor", out, torch.arange(world, dtype=torch.float32) - 0.5)
    stats = torch_tpu.stats()
    assert stats["dist_host_fallbacks"] == 0 and stats["dist_host_bytes"] == 0, stats
    assert stats["dist_xla_collectives"] == 9, stats

    # a size-1 subgroup (a DeviceMesh dim of size 1) and the world in one run
    own = [dist.new_group([r], backend="tpu_dist") for r in range(world)][rank]
    t = torch.full((2,), float(rank + 1), device="tpu")
    dist.all_reduce(t, group=own)
    _check("size-1 subgroup", t, torch.full((2,), float(rank + 1)))

    # what XLA cannot do is staged through the host, and counted
    x = _inputs(rank, (4, 2), torch.float32, torch)
    in_splits, out_splits = ([1, 3], [1, 2]) if rank == 0 else ([2, 2], [3, 2])
    a = torch.empty(sum(out_splits), 2, device="tpu")
    dist.all_to_all_single(a, x.to("tpu"), out_splits, in_splits)
    b = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(b, x, out_splits, in_splits, group=cpu_group)
    _check("uneven all_to_all (host-staged)", a, b)
    stats = torch_tpu.stats()
    assert stats["dist_host_fallbacks"] == 1 and stats["dist_host_bytes"] > 0, stats

    # object collectives (torch builds them from tensor collectives)
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * (rank + 3)})
    assert objs == [{"rank": r, "text": "x" * (r + 3)} for r in range(world)], objs
    box = [{"from": rank}] if rank == 1 else [None]
    dist.broadcast_object_list(box, src=1)
    assert box == [{"from": 1}], box

    # async handles: later ops are ordered after the collective on the device
    t = torch.ones(1000, device="tpu")
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    assert work.wait()
    torch.tpu.synchronize()
    assert work.is_completed()
    _check("async all_reduce, then an op", (t * 2).sum(), torch.tensor(2000.0 * world))
    assert fut.wait()[0] is t

    # fused eager: a tensor-parallel loop (row-parallel matmul + all_reduce + gelu, 10 steps) runs as ONE
    # program: no flush per collective, nothing through the host but the final read
    torch.manual_seed(0)
    D = 32
    x_full = torch.randn(8, D)
    ws = [torch.randn(D, D) * 0.2 for _ in range(10)]
    k = D // world
    cols = slice(rank * k, (rank + 1) * k)
    want = x_full
    for w in ws:
        want = torch.nn.functional.gelu(want @ w)
    x, wl = x_full.to("tpu"), [w[cols].to("tpu") for w in ws]
    for variant in ("dist.all_reduce", "funcol.all_reduce"):
        with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
            torch_tpu.sync()
            torch_tpu.reset_stats()
            h = x
            for w in wl:
                y = h[:, cols] @ w
                if variant == "dist.all_reduce":
                    dist.all_reduce(y)
                else:
                    y = funcol.all_reduce(y, "sum", dist.group.WORLD)
                h = torch.nn.functional.gelu(y)
            before = torch_tpu.stats()
            got = h.cpu()
            after = torch_tpu.stats()
        _check(f"fused TP loop with {variant}", got, want, atol=1e-4)
        assert before["flushes"] == 0 and after["flushes"] <= 2, (before, after)
        assert after["host_to_device_bytes"] == 0 and after["dist_host_bytes"] == 0, after
        assert after["device_to_host_bytes"] == got.numel() * 4, after
        assert after["dist_xla_collectives"] == 10, after
    # fused eager, collectives over two groups: a switch of group flushes, results stay right
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        t = torch.full((3,), float(rank + 1), device="tpu")
        dist.all_reduce(t)
        dist.all_reduce(t, group=own)
        dist.all_reduce(t, op=R.MAX)
        got = t.cpu()
    _check("fused, two groups", got, torch.full((3,), float(sum(range(1, world + 1)))))

    # compiled: functional collectives lower into the graph's one program (no graph break, no eager
    # collective), DTensor included
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = DeviceMesh("tpu", list(range(world)))

    def f(x, w):
        y = funcol.all_reduce(x @ w, "sum", mesh)
        return torch.nn.functional.gelu(y) + funcol.all_gather_tensor(y, 0, mesh)[:y.shape[0]] \
            + funcol.reduce_scatter_tensor(torch.cat([y] * world), "avg", 0, mesh)

    xs = [_inputs(r, (4, 6), torch.float32, torch) for r in range(world)]
    w = _inputs(9, (6, 5), torch.float32, torch)
    s = sum(x @ w for x in xs)
    torch_tpu.reset_stats()
    got = torch.compile(f, backend="tpu")(xs[rank].to("tpu"), w.to("tpu"))
    _check("compiled functional collectives", got, torch.nn.functional.gelu(s) + s + s, atol=1e-4)
    stats = torch_tpu.stats()
    assert stats["graph_compiles"] == 1 and stats["dist_xla_collectives"] == 0, stats

    torch.manual_seed(0)
    A, B = torch.randn(8, 6), torch.randn(6, 4)
    dA = distribute_tensor(A.to("tpu"), mesh, [Shard(1)])
    dB = distribute_tensor(B.to("tpu"), mesh, [Shard(0)])
    torch_tpu.reset_stats()
    mm = torch.compile(lambda a, b: (a @ b).redistribute(mesh, [Replicate()]).to_local(), backend="tpu")
    _check("compiled DTensor matmul (Partial -> Replicate)", mm(dA, dB), A @ B, atol=1e-5)
    stats = torch_tpu.stats()
    assert stats["graph_compiles"] == 1 and stats["dist_xla_collectives"] == 0, stats

    # a mismatched collective is reported as such (TORCH_DISTRIBUTED_DEBUG=DETAIL checks each one)
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        dist.all_reduce(torch.ones(4 + 4 * rank, device="tpu"))
    except RuntimeError as exc:
        msg = str(exc)
        assert "mismatched collective" in msg and "rank 0 runs all_reduce(sum) float32[4]" in msg \
            and "rank 1 runs all_reduce(sum) float32[8]" in msg, msg
    else:
        raise AssertionError("a mismatched all_reduce was not reported")
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t)  # the ranks are still in step
    _check("all_reduce after a reported mismatch", t, torch.full((2,), float(world)))
    dist.set_debug_level(dist.DebugLevel.OFF)


def _dtensor_checks():
    """DeviceMesh("tpu"), functional collectives, DTensor redistribution and sharded matmuls."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    rank, world = dist.get_rank(), dist.get_world_size()
    alias = dist.new_group(backend="tpu")  # the alias
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t, group=alias)
    _check("all_reduce on a group of the 'tpu' alias", t, torch.full((2,), float(world)))
    from torch_tpu.runtime import platform

    # the job forces 2 XLA CPU devices per process: each rank binds the one its LOCAL_RANK names, as tpu:0
    assert len(platform.jax().local_devices()) == world
    assert torch.tpu.device_count() == 1, torch.tpu.device_count()
    assert platform.jax_device() == platform.jax().local_devices()[rank], platform.jax_device()
    torch.tpu.set_device(rank)  # what torchrun scripts do: LOCAL_RANK names this process's device
    mesh = DeviceMesh("tpu", list(range(world)))
    assert mesh.device_type == "tpu" and mesh.size() == world
    mesh2 = init_device_mesh("tpu", (world,), mesh_dim_names=("tp",))
    assert mesh2["tp"].size() == world
    mesh3 = init_device_mesh("tpu", (1, world), mesh_dim_names=("dp", "tp"))
    x = torch.full((2,), float(rank + 1), device="tpu")
    _check("2-D mesh, tp dim", funcol.all_reduce(x, "sum", mesh3["tp"]), torch.full((2,), float(sum(range(1, world + 1)))))
    _check("2-D mesh, dp dim", funcol.all_reduce(x, "sum", mesh3["dp"]), torch.full((2,), float(rank + 1)))

    # functional collectives (what DTensor calls) against CPU math over every rank's input
    xs = [_inputs(r, (4, 3), torch.float32, torch) for r in range(world)]
    x = xs[rank].to("tpu")
    _check("funcol.all_reduce", funcol.all_reduce(x, "sum", mesh), sum(xs))
    _check("funcol.all_reduce max", funcol.all_reduce(x, "max", mesh), torch.stack(xs).amax(0))
    _check("funcol.all_gather_tensor", funcol.all_gather_tensor(x, 0, mesh), torch.cat(xs))
    _check("funcol.reduce_scatter_tensor", funcol.reduce_scatter_tensor(x, "sum", 0, mesh),
           sum(xs).chunk(world)[rank])
    _check("funcol.broadcast", funcol.broadcast(x, 1, mesh), xs[1])
    a2a = funcol.all_to_all_single(x, None, None, mesh)
    _check("funcol.all_to_all_single", a2a, torch.cat([xs[r].chunk(world)[rank] for r in range(world)]))

    torch.manual_seed(0)  # same on every rank
    A, B = torch.randn(8, 6), torch.randn(6, 4)
    want = A @ B
    for mesh_ in (mesh, mesh2):
        dA = distribute_tensor(A.to("tpu"), mesh_, [Shard(0)])
        assert dA.to_local().shape == (8 // world, 6), dA.to_local().shape
        assert dA.to_local().device.type == "tpu"
        dB = distribute_tensor(B.to("tpu"), mesh_, [Replicate()])
        _check("Shard(0) @ Replicate", (dA @ dB).full_tensor(), want)
        # colwise x rowwise: Shard(1) @ Shard(0) gives a Partial sum
        C = distribute_tensor(A.to("tpu"), mesh_, [Shard(1)]) @ distribute_tensor(B.to("tpu"), mesh_, [Shard(0)])
        assert isinstance(C.placements[0], Partial), C.placements
        _check("Partial -> Replicate", C.redistribute(mesh_, [Replicate()]).to_local(), want, atol=1e-5)
        _check("Partial -> Shard(0)", C.redistribute(mesh_, [Shard(0)]).to_local(), want.chunk(world)[rank],
               atol=1e-5)
        _check("Shard(0) -> Shard(1)", dA.redistribute(mesh_, [Shard(1)]).to_local(), A.chunk(world, 1)[rank])
        _check("Replicate -> Shard(1)", dB.redistribute(mesh_, [Shard(1)]).to_local(), B.chunk(world, 1)[rank])

    # tensor-parallel MLP through torch's parallelize_module == the same MLP in one CPU process
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 6))
    inp = torch.randn(3, 6)
    want = mlp(inp).detach()
    tp = parallelize_module(mlp.to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    assert tp[0].weight.to_local().shape == (8 // world, 6)
    _check("ColwiseParallel/RowwiseParallel MLP", tp(inp.to("tpu")).detach(), want, atol=1e-5)

    # clear errors: a mesh bigger than the world, a mesh on a device type the group does not serve
    try:
        init_device_mesh("tpu", (world * 2,))
    except RuntimeError as exc:
        assert "world size" in str(exc) or "bigger" in str(exc), exc
    else:
        raise AssertionError("a mesh bigger than the world was accepted")


def scenario_fail_raise(out_dir):
    """Rank 1 dies of an exception before a collective: rank 0 must fail with a clear error, not hang."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="tpu_dist")
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)  # both alive
    t.cpu()
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    try:
        dist.all_reduce(t)
        t.cpu()  # collectives are ordered on the device: a failure surfaces when a result is read
    except RuntimeError as exc:
        open(os.path.join(out_dir, "rank0.json"), "w").write(json.dumps({"error": str(exc)}))
        raise SystemExit(0)
    raise AssertionError("all_reduce with a dead peer returned")


def scenario_fail_hang(out_dir):
    """Rank 1 stays alive but never joins: rank 0 must time out (TORCH_TPU_DIST_TIMEOUT)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="tpu_dist")
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)
    t.cpu()
    waiting = os.path.join(out_dir, "rank1-waiting")
    if dist.get_rank() == 1:
        open(waiting, "w").close()  # (before rank 0's collective can time out: rank 0 waits for this file)
        time.sleep(float(os.environ["TORCH_TPU_DIST_TIMEOUT"]) + 8)
        os.remove(waiting)
        os._exit(0)
    while not os.path.exists(waiting):
        time.sleep(0.05)
    try:
        dist.all_reduce(t)
        torch.tpu.synchronize()
    except RuntimeError as exc:
        # the peer had not come back yet: the collective ended by its timeout, not by the peer's exit
        peer_still_waiting = os.path.exists(waiting)
        (open(os.path.join(out_dir, "rank0.json"), "w")
         .write(json.dumps({"error": str(exc), "peer_still_waiting": peer_still_waiting})))
        os._exit(0)  # do not wait for the stuck peer at exit
    raise AssertionError("all_reduce with a stuck peer returned")


def scenario_collective_order(out_dir):
    """Ranks that cut their fused graphs differently (one reads a value mid-loop, one keeps other values
    alive), one with warm caches and a compile thread, the other cold and compiling on its own thread, a
    compiled collective launched while a fused one is pending: every collective pairs with its peer's
    (before, gloo aborted the process: "Received data size doesn't match expected size"). Last, ranks whose
    code runs different collectives: a Python error naming both sides on each rank, never an abort."""
    import os

    rank = int(os.environ["RANK"])
    if rank == 1:
        os.environ["TORCH_TPU_COMPILE_THREADS"] = "0"  # compiles on the calling thread; rank 0 on a pool
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    import torch_tpu

    dist.init_process_group(backend="tpu_dist")
    world = dist.get_world_size()
    xs_all = [_inputs(r, (64, 32), torch.float32, torch) for r in range(world)]
    ws_all = [_inputs(10 + r, (32, 96), torch.float32, torch) for r in range(world)]
    want_y = sum(x @ w for x, w in zip(xs_all, ws_all))
    report = {}

    def tp_loop(cut_at=None, keep=False):
        """The issue's loop: a row-sharded matmul, all_reduce, accumulate; in fused mode."""
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            xs, ws = xs_all[rank].to("tpu"), ws_all[rank].to("tpu")
            acc, kept = torch.zeros(64, 96, device="tpu"), []
            for i in range(6):
                y = xs @ ws
                dist.all_reduce(y)
                acc = acc + y * 0.1
                if i == cut_at:
                    torch_tpu.sync()  # this rank's graph is cut here, the other's is not
                if keep:
                    kept.append(y)  # other live values: another program for the same graph
            return acc.cpu()

    _check("fused loop, rank 0 cut mid-loop", tp_loop(cut_at=2 if rank == 0 else None, keep=rank == 1),
           want_y * 0.6, atol=1e-3, rtol=1e-4)
    if rank == 1:
        torch_tpu.reset_caches()  # cold again; rank 0 keeps its programs (warm)
    _check("fused loop, one rank warm, one cold", tp_loop(cut_at=4 if rank == 1 else None), want_y * 0.6,
           atol=1e-3, rtol=1e-4)
    big = torch.ones(2 ** 20, device="tpu")  # strict, after the fused graphs (the second step)
    dist.all_reduce(big)
    _check("strict all_reduce after fused graphs", big[:4], torch.full((4,), float(world)))

    # a fused collective still pending when a compiled collective launches: issued first, launched first
    double = torch.compile(lambda t: fc.all_reduce(t * 2, "sum", dist.group.WORLD), backend="tpu", dynamic=False)
    double(torch.ones(4, device="tpu")).cpu()  # compiled (a read: nothing pending after it)
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        a = torch.full((4,), float(rank + 1), device="tpu")
        dist.all_reduce(a)
        if rank == 0:
            torch_tpu.sync()
        b = double(torch.full((4,), float(10 * (rank + 1)), device="tpu"))
        _check("fused collective before a compiled one", a, torch.full((4,), float(sum(range(1, world + 1)))))
        _check("compiled collective after a fused one", b,
               torch.full((4,), float(20 * sum(range(1, world + 1)))))
    report["ordered"] = True

    # different collectives on the ranks: a Python error on each, naming both sides (gloo aborted before)
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        try:
            x = torch.ones(4 if rank == 0 else 8, device="tpu")
            dist.all_reduce(x)
            x.cpu()
            report["mismatch"] = "no error"
        except RuntimeError as exc:
            report["mismatch"] = str(exc)
    open(os.path.join(out_dir, f"rank{rank}.json"), "w").write(json.dumps(report))


def scenario_pipeline_tp(out_dir):
    """The seed's tensor-parallel example on tiny Flux2 and Flux pipelines; rank 0 compares each image
    with the same pipeline unsharded in one process (CPU torch)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    from torch_tpu.integrations import tensor_parallel as tp_pipelines
    from torch_tpu.testing import tiny_pipelines

    root = os.environ["TINY_ROOT"]
    dist.init_process_group(backend="tpu_dist")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = DeviceMesh("tpu", list(range(world)))
    report = {}
    if rank == 0:  # build once, before the other ranks read it
        for kind in ("flux2", "flux"):
            tiny_pipelines.build_pipeline_dir(kind, "tiny", root=root)
    dist.barrier()
    for kind in ("flux2", "flux"):
        path = str(tiny_pipelines.build_pipeline_dir(kind, "tiny", root=root))
        t0 = time.time()
        pipe = tp_pipelines.load_tp_pipeline(kind, path, mesh, torch.float32)
        t_load = time.time() - t0
        # sharded weights (a rowwise layer's bias is a Replicate DTensor: whole on every rank)
        params = list(pipe.transformer.parameters())
        sharded = [p for p in params if isinstance(p, DTensor) and any(isinstance(pl, Shard) for pl in p.placements)]
        assert sharded, f"{kind}: no transformer parameter was sharded"
        assert all(p.to_local().device.type == "tpu" for p in sharded)
        local = sum(p.to_local().numel() for p in sharded)
        full = sum(p.numel() for p in sharded)
        everything_local = sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in params)
        t0 = time.time()
        image = tp_pipelines.generate(pipe)
        entry = {"sharded_local": local, "sharded_full": full, "all_local": everything_local,
                 "all_full": sum(p.numel() for p in params), "load_s": t_load, "generate_s": time.time() - t0}
        if kind == "flux2":
            te = [p for p in pipe.text_encoder.parameters() if isinstance(p, DTensor)]
            entry["text_encoder_dtensors"] = len(te)
            assert te, "the text encoder was not sharded"
            # the tensor-parallel transformer compiled: its collectives lower into the program, no graph break
            import torch._dynamo

            torch._dynamo.utils.counters.clear()
            pipe.transformer = torch.compile(pipe.transformer, backend="tpu", dynamic=False)
            t0 = time.time()
            compiled = tp_pipelines.generate(pipe)
            entry["compiled_generate_s"] = time.time() - t0
            breaks = dict(torch._dynamo.utils.counters["graph_break"])
            assert not breaks, f"graph breaks in the compiled TP transformer: {breaks}"
            np.testing.assert_allclose(compiled, image, atol=1e-4, err_msg="compiled TP image vs eager TP image")
        if rank == 0:
            ref = tiny_pipelines.load_pipeline(kind, "tiny", torch.float32, root=root)
            want = tp_pipelines.generate(ref)
            np.testing.assert_allclose(image, want, atol=2e-3, err_msg=f"{kind}: TP image vs single-process image")
            entry["max_diff"] = float(np.abs(image - want).max())
        report[kind] = entry
    dist.destroy_process_group()
    if rank == 0:
        open(os.path.join(out_dir, "rank0.json"), "w").write(json.dumps(report))


# ---------------------------------------------------------------------------------------------
# Launching.
# ---------------------------------------------------------------------------------------------
def _spawn(scenario, out_dir, env, **kw):
    return jobs.spawn(HERE, scenario, out_dir, env, **kw)


def test_collectives_under_torchrun_via_launcher(job_env, tmp_path):
    # `python -m torch.tpu.distributed [--nproc-per-node N] script` = the launcher's env + torchrun.
    # One job checks every collective, both paths, fused and compiled modes, DTensor; 2 XLA CPU devices
    # per process, so each rank must bind the one its LOCAL_RANK names.
    env = dict(job_env, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = hangs.run([sys.executable, "-m", "torch.tpu.distributed", "--nproc-per-node", "2", HERE,
                           "collectives", str(tmp_path)], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]


def test_singlehost_wrapper_prints_exportable_env(job_env):
    # the documented form: eval $(python -m ...singlehost_wrapper | sed 's/^/export /')
    wrapper = f"{sys.executable} -m torch_tpu._internal.distributed.launchers.singlehost_wrapper"
    shell = hangs.run(
        ["bash", "-c", f"set -e; out=$({wrapper}); echo \"$out\"; echo ---; "
                       f"eval $(echo \"$out\" | sed 's/^/export /'); "
                       "echo $MASTER_ADDR $MASTER_PORT $PET_NPROC_PER_NODE $NPROC_PER_NODE $TORCH_TPU_PLATFORM"],
        env=job_env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0, shell.stderr[-3000:]
    printed, exported = shell.stdout.split("---\n")
    lines = printed.strip().splitlines()
    assert all("=" in line and " " not in line and "#" not in line for line in lines), lines
    addr, port, pet_nproc, nproc, plat = exported.split()
    import torch

    assert addr == "127.0.0.1" and int(port) > 0
    from torch_tpu.runtime import platform

    assert int(nproc) == int(pet_nproc) == platform.device_count()  # the host's devices (a process uses one)
    assert plat == "cpu"


def test_dead_peer_fails_fast(job_env, tmp_path):
    # a timeout far past the job's hang detection: rank 0 fails because its peer died, not by the timeout (a
    # rank 0 left waiting for it stops using CPU and is taken for hung)
    results = _spawn("fail_raise", tmp_path, job_env, extra={"TORCH_TPU_DIST_TIMEOUT": "3600"})
    # a process that died of an exception, or whose collective failed, exits 1 at once (JAX's shutdown
    # barrier would wait for the dead peer, then abort)
    assert results[1][0] == 1, results[1][1][-4000:]
    assert "rank 1 fails on purpose" in results[1][1]
    assert results[0][0] == 1, results[0][1][-4000:]
    info = json.loads((tmp_path / "rank0.json").read_text())
    assert "tpu_dist:" in info["error"] and "rank 0 of 2" in info["error"], info
    assert "all_reduce(sum) float32[4] on ranks [0, 1]" in info["error"], info


def test_stuck_peer_times_out(job_env, tmp_path):
    results = _spawn("fail_hang", tmp_path, job_env, extra={"TORCH_TPU_DIST_TIMEOUT": "8"}, timeout=120,
                     rank0_only=True)
    assert results[0][0] == 0, results[0][1][-4000:]
    info = json.loads((tmp_path / "rank0.json").read_text())
    assert "tpu_dist:" in info["error"] and "all_reduce(sum) float32[4]" in info["error"], info
    assert "TORCH_TPU_DIST_TIMEOUT=8s" in info["error"], info
    assert info["peer_still_waiting"], info  # ended by the timeout, while the peer was still away


def test_collectives_pair_up_whatever_each_rank_cuts_caches_or_compiles(job_env, tmp_path):
    results = _spawn("collective_order", tmp_path, job_env, extra={"TORCH_TPU_DIST_TIMEOUT": "30"}, timeout=240)
    reports = []
    for rank, (rc, out, _) in enumerate(results):
        # the mismatch at the end leaves each rank with a failed collective: status 1, never an abort
        assert rc == 1 and "EnforceNotMet" not in out, f"rank {rank} exited with {rc}:\n{out[-6000:]}"
        path = tmp_path / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} did not finish:\n{out[-6000:]}"
        reports.append(json.loads(path.read_text()))
    assert all(r["ordered"] for r in reports)
    named = [r["mismatch"] for r in reports if "run different collectives" in r["mismatch"]]
    assert named, reports  # the rank that compared later names both sides
    assert "all_reduce(sum) float32[4] on rank 0" in named[0] and "all_reduce(sum) float32[8] on rank 1" in \
        named[0], named
    assert all(r["mismatch"].startswith("tpu_dist:") for r in reports), reports  # the other: its collective failed


def test_a_program_runs_its_collectives_one_by_one_in_call_order():
    """XLA combines independent all-reduces of one program and orders independent collectives as it likes:
    two ranks whose programs differ then pair other collectives. spmd.in_order chains them (one process,
    two CPU devices: the compiled program's collectives, in schedule order, are the calls, none merged)."""
    code = """
import jax, re
from torch_tpu.runtime import spmd
from torch_tpu.distributed import xla_ops
calls = [xla_ops.all_reduce("sum", 2), xla_ops.all_gather(2, (8, 3)), xla_ops.all_reduce("sum", 2),
         xla_ops.all_reduce("max", 2), xla_ops.all_gather(2, (8, 3))]
def body(*xs):
    return tuple(f(x) for f, x in zip(calls, xs))
ids = tuple(d.id for d in jax.devices()[:2])
x = jax.numpy.ones((4, 3))
runner = spmd.compile_program(("test", "order"), body, (x,) * 5, ids)
text = runner.prog.lower(*[spmd._abstract_global(x, ids)] * 5).compile().as_text()
kinds = re.findall(r"= [^ ]+ (all-reduce|all-gather)\\(", text)
print(kinds)
assert kinds == ["all-reduce", "all-gather", "all-reduce", "all-reduce", "all-gather"], kinds
assert len(runner.collectives) == 5, runner.collectives
print("OK")
"""
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = hangs.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_runtime_only_for_multi_process_jobs(monkeypatch):
    from torch_tpu.runtime import multiprocess

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert multiprocess.environment() is None
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc-per-node 1: a plain single-process run
    assert multiprocess.environment() is None
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("MASTER_PORT", "29500")
    env = multiprocess.environment()
    assert env["rank"] == 3 and env["world"] == 4 and env["local_rank"] == 1, env
    from torch_tpu import config

    assert multiprocess._coordinator_address(env, config.settings(), 5.0) == "10.0.0.7:29501"
    monkeypatch.setenv("TORCH_TPU_COORDINATOR_ADDRESS", "host:1234")
    assert multiprocess._coordinator_address(env, config.settings(), 5.0) == "host:1234"
    assert multiprocess._local_device_ids(env) == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # the launcher left one GPU visible
    assert multiprocess._local_device_ids(env) == [0]


def test_opt_out_keeps_a_worker_off_the_runtime(job_env):
    # TORCH_TPU_DIST_XLA=0: a worker of a 2-process job uses its device without waiting for peers
    code = ("import torch\n"
            "from torch_tpu.runtime import multiprocess\n"
            "x = torch.ones(3, device='tpu') * 2\n"
            "assert x.cpu().tolist() == [2.0, 2.0, 2.0]\n"
            "assert not multiprocess.active() and multiprocess.why_inactive() == 'TORCH_TPU_DIST_XLA=0'\n"
            "print('ok')\n")
    env = dict(job_env, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(jobs.free_port()), TORCH_TPU_DIST_XLA="0")
    proc = hangs.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_tensor_parallel_pipelines(job_env, tmp_path):
    jobs.assert_ok(_spawn("pipeline_tp", tmp_path, job_env, timeout=300))
    report = json.loads((tmp_path / "rank0.json").read_text())
    for kind in ("flux2", "flux"):
        info = report[kind]
        assert info["sharded_local"] * 2 == info["sharded_full"], (kind, info)
        assert info["all_local"] < info["all_full"], (kind, info)
    print(report)


if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    globals()[f"scenario_{name}"](out)

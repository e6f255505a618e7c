"""A sweep of tpu_dist and tensor parallelism on it: views, dtypes x reduce ops, async work in strict
and fused eager, point-to-point, object collectives, subgroups, re-initialisation, DTensor and
parallelize_module.

One 2-process job (``harness/jobs.py``, as ``test_distributed.py``) runs ~310 cases per rank: each compared with
CPU torch computed in the same job (gloo on CPU tensors or a gloo cpu mesh, or CPU math over every rank's
inputs, which every rank rebuilds from the seeds), each outcome recorded in a JSON log per rank; a case
that must fail must raise a Python exception naming the collective and the dtype, and the ranks must still
be in step afterwards. The job initialises the default group three times (tpu_dist; again after
destroy_process_group; then "cpu:gloo,tpu:tpu_dist" for the DTensor part). The tests read the logs, one
test per case family. HOSTILE_ONLY=views,dtypes,... (the scenario's families) narrows a run by hand.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time

import pytest

from tests.harness import jobs
from tests.harness.jobs import job_env  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

HERE = os.path.abspath(__file__)

DTYPES = ("bool", "uint8", "int8", "int32", "float16", "bfloat16", "float64", "complex64")
OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


# ---------------------------------------------------------------------------------------------
# In the children.
# ---------------------------------------------------------------------------------------------
def _make(seed, shape, dtype):
    import torch

    g = torch.Generator().manual_seed(1000 + seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) + 0.5).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g, dtype=dtype)


def _ref_reduce(xs, op):
    """CPU math: the elementwise reduction of every rank's tensor, in the tensors' dtype."""
    import torch

    fold = {"SUM": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum,
            "BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}
    if op == "AVG":
        total = functools.reduce(torch.add, xs)
        if total.is_floating_point() or total.is_complex():
            return (functools.reduce(torch.add, [x.double() if not x.is_complex() else x.cdouble() for x in xs])
                    / len(xs)).to(xs[0].dtype)
        return torch.div(total, len(xs), rounding_mode="trunc")
    return functools.reduce(fold[op], xs)


def _tol(dtype):
    import torch

    return {torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)


def _check(name, got, want, atol=None):
    import torch

    got = got.cpu() if isinstance(got, torch.Tensor) else got
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    tol = _tol(want.dtype) if atol is None else atol
    torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True, msg=lambda m: f"{name}: {m}")


class _Log:
    """Runs cases; records (name, outcome, detail). outcome: ok | wrong | error | unclear-error."""

    def __init__(self, out_dir, rank, tag):
        self.path = os.path.join(out_dir, f"{tag}-rank{rank}.json")
        self.rank = rank
        self.entries = []

    def run(self, name, fn):
        self.t0 = time.time()
        try:
            fn()
        except AssertionError as exc:
            self.entries.append([name, "wrong", str(exc)[:1500]])
        except Exception as exc:  # noqa: BLE001 - recorded, the test decides
            self.entries.append([name, "error", f"{type(exc).__name__}: {str(exc)[:1500]}"])
        else:
            self.entries.append([name, "ok", ""])
        self.save()

    def refused(self, name, fn, *words):
        """fn must raise an exception whose message names every word (case-insensitive)."""
        self.t0 = time.time()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {exc}"
            missing = [w for w in words if w.lower() not in msg.lower()]
            self.entries.append([name, "unclear-error" if missing else "ok",
                                 (f"missing {missing}: " if missing else "") + msg[:1500]])
        else:
            self.entries.append([name, "wrong", "no error raised"])
        self.save()

    def save(self):
        if self.entries and len(self.entries[-1]) == 3:
            self.entries[-1].append(round(time.time() - self.t0, 3))
        with open(self.path, "w") as f:
            json.dump(self.entries, f)


def _in_step(log, tag):
    """The ranks still run the same collectives after a case (a tiny all_reduce comes out right)."""
    import torch
    import torch.distributed as dist

    def f():
        t = torch.ones(1, device="tpu")
        dist.all_reduce(t)
        _check(f"in step after {tag}", t, torch.full((1,), float(dist.get_world_size())))
    log.run(f"in step after {tag}", f)


def scenario_sweep(out_dir):
    import torch
    import torch.distributed as dist

    import torch_tpu  # noqa: F401

    dist.init_process_group(backend="tpu_dist")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    log = _Log(out_dir, rank, "sweep")
    only = os.environ.get("HOSTILE_ONLY", "views,dtypes,async,p2p,dtensor").split(",")  # to bisect by hand
    if "views" in only:
        _views(log, rank, world, gloo)
    if "dtypes" in only:
        _dtypes(log, rank, world, gloo)
    if "async" in only:
        _async(log, rank, world, gloo)
    if "p2p" in only:
        _p2p_objects_groups(log, rank, world, gloo)
    import faulthandler

    faulthandler.dump_traceback_later(25)  # a rank stuck in re-initialisation says where
    dist.destroy_process_group()
    _reinit(log, rank, world)
    faulthandler.cancel_dump_traceback_later()
    log.save()
    if "dtensor" in only:
        scenario_dtensor(out_dir)  # init_process_group a third time, with two backends


def _views(log, rank, world, gloo):
    import torch
    import torch.distributed as dist

    f32 = torch.float32
    xs = [_make(r, (6, 8), f32) for r in range(world)]
    total = _ref_reduce(xs, "SUM")

    # all_reduce into views: the base and every other view (made before) see the result
    views = {
        "transposed": lambda b: b.t(),
        "strided slice": lambda b: b[:, 1::3],
        "storage offset": lambda b: b[2:],
        "transposed strided offset": lambda b: b.t()[1:7:2],
        "0-d select": lambda b: b[3, 5],
        "empty": lambda b: b[2:2],
        "diagonal": lambda b: b.diagonal(),
        "as_strided": lambda b: b.as_strided((3, 3), (9, 2), 1),
    }
    for vname, make_view in views.items():
        def case(make_view=make_view, vname=vname):
            base = xs[rank].to("tpu")
            other = base.t()[::2]      # another view, made before
            row = base[3]
            v = make_view(base)
            dist.all_reduce(v)
            want = xs[rank].clone()
            make_view(want).copy_(make_view(total))
            _check(f"all_reduce into {vname}: base", base, want)
            _check(f"all_reduce into {vname}: other view", other, want.t()[::2])
            _check(f"all_reduce into {vname}: row", row, want[3])
            _check(f"all_reduce into {vname}: the view", v, make_view(want))
        log.run(f"views/all_reduce into {vname}", case)

    # fused eager: the same into a view of a tensor with pending values
    def fused_view():
        base = xs[rank].to("tpu")
        with torch.tpu.set_eager_mode(torch_tpu_mode("fuse")):
            b = base * 2
            v = b.t()[1:7:2]
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            b.add_(1)
            got = b.cpu()
        want = xs[rank] * 2
        want.t()[1:7:2] = torch.stack([x * 2 for x in xs]).amax(0).t()[1:7:2]
        _check("fused all_reduce into a view of pending values", got, want + 1)
    log.run("views/fused all_reduce max into a view of pending values", fused_view)

    # all_gather_into_tensor: non-contiguous input and output views
    def ag(out_kind, in_kind):
        def case():
            inp_full = xs[rank].to("tpu")
            inp = {"contig": inp_full[:3].contiguous(), "transposed": inp_full[:, :3].t(),
                   "strided": inp_full[::2, ::3], "offset": inp_full[3:]}[in_kind]
            n = inp.numel()
            big = torch.zeros(3, world * n + 4, device="tpu")
            out = {"contig": big[0, 2:2 + world * n], "strided": big[:, 2:2 + world * n].t()[:, 1]}[out_kind]
            dist.all_gather_into_tensor(out, inp)
            want_in = [{"contig": x[:3].contiguous(), "transposed": x[:, :3].t(), "strided": x[::2, ::3],
                        "offset": x[3:]}[in_kind] for x in xs]
            _check(f"all_gather_into_tensor {in_kind} -> {out_kind}", out,
                   torch.cat([w.reshape(-1) for w in want_in]))
            wbig = torch.zeros(3, world * n + 4)
            {"contig": wbig[0, 2:2 + world * n], "strided": wbig[:, 2:2 + world * n].t()[:, 1]}[out_kind].copy_(torch.cat([w.reshape(-1) for w in want_in]))
            _check(f"all_gather_into_tensor {in_kind} -> {out_kind}: base", big, wbig)
        return case
    for ik, ok in (("contig", "strided"), ("transposed", "strided"), ("strided", "contig"), ("offset", "strided")):
        log.run(f"views/all_gather_into_tensor {ik} -> {ok}", ag(ok, ik))

    # all_gather_into_tensor with a 2-D output holding world x input (dim 0 stacking, transposed out)
    def ag_2d():
        inp = xs[rank][:2, :3].to("tpu")
        out_base = torch.zeros(3, 2 * world, device="tpu")
        dist.all_gather_into_tensor(out_base.t(), inp.t())  # output (2 * world, 3): a transposed view
        # the gathered elements fill the output view in its logical (row-major) order
        want = torch.cat([x[:2, :3].t().reshape(-1) for x in xs]).reshape(2 * world, 3).t()
        _check("all_gather_into_tensor into a transposed 2-D output", out_base, want.contiguous())
    log.run("views/all_gather_into_tensor transposed 2-D output", ag_2d)

    # reduce_scatter_tensor: non-contiguous input, strided output, every op for float32
    for opn in ("SUM", "AVG", "MIN"):
        def rs(opn=opn):
            inp = xs[rank].to("tpu").t()  # (8, 6), non-contiguous
            holder = torch.zeros(world, 8 // world * 6 + 1, device="tpu")
            out2 = holder[1, 1:].view(8 // world, 6)
            dist.reduce_scatter_tensor(out2, inp, op=getattr(dist.ReduceOp, opn))
            want = _ref_reduce([x.t() for x in xs], opn).chunk(world)[rank]
            _check(f"reduce_scatter_tensor {opn} (transposed in, offset out)", out2, want, atol=1e-4)
            wh = torch.zeros(world, 8 // world * 6 + 1)
            wh[1, 1:] = want.reshape(-1)
            _check(f"reduce_scatter_tensor {opn}: holder", holder, wh, atol=1e-4)
        log.run(f"views/reduce_scatter_tensor {opn} transposed input, offset output", rs)

    # list forms with outputs/inputs that are views of ONE base: each write must keep the others
    def ag_list():
        big = torch.zeros(4, world, 3, device="tpu")
        outs = list(big[1:4].permute(1, 0, 2))  # world views (3, 3), strided, sharing storage
        inp = xs[rank][:3, :3].to("tpu")
        dist.all_gather(outs, inp)
        want = torch.zeros(4, world, 3)
        for r in range(world):
            want[1:4, r] = xs[r][:3, :3]
        _check("all_gather list into views of one base", big, want)
    log.run("views/all_gather list into views of one base", ag_list)

    def rs_list():
        src = xs[rank].to("tpu")
        ins = list(src.t()[: 2 * world].chunk(world))  # (2, 6) transposed views
        holder = torch.full((6, 2), -1.0, device="tpu")
        out = holder.t()
        dist.reduce_scatter(out, ins)
        want = _ref_reduce([x.t()[: 2 * world] for x in xs], "SUM").chunk(world)[rank]
        _check("reduce_scatter list, view inputs and output", holder, want.t())
    log.run("views/reduce_scatter list, view inputs, transposed output", rs_list)

    # all_to_all_single: even / uneven / zero splits, views in and out
    def a2a(in_splits_of, name):
        def case():
            insp = in_splits_of(rank)
            outsp = [in_splits_of(r)[rank] for r in range(world)]
            rows_in = sum(insp)
            srcs = [_make(50 + r, (3, sum(in_splits_of(r))), f32).t() for r in range(world)]  # (rows, 3)
            inp = _make(50 + rank, (3, rows_in), f32).to("tpu").t()  # a transposed view
            holder = torch.full((3, sum(outsp) + 2), -7.0, device="tpu")
            out = holder[:, 1:1 + sum(outsp)].t()
            dist.all_to_all_single(out, inp, outsp if name != "even (no splits)" else None,
                                   insp if name != "even (no splits)" else None)
            pieces = []
            for r in range(world):
                spl = in_splits_of(r)
                start = sum(spl[:rank])
                pieces.append(srcs[r][start:start + spl[rank]])
            want = torch.full((3, sum(outsp) + 2), -7.0)
            want[:, 1:1 + sum(outsp)] = torch.cat(pieces).t()
            _check(f"all_to_all_single {name}", holder, want)
        return case
    for name, sp in [("even (no splits)", lambda r: [2, 2]), ("even explicit", lambda r: [2, 2]),
                     ("uneven", lambda r: [1, 3] if r == 0 else [2, 2]),
                     ("zero splits", lambda r: [0, 4] if r == 0 else [3, 0]),
                     ("all zero", lambda r: [0, 0])]:
        log.run(f"views/all_to_all_single {name}, views in and out", a2a(sp, name))

    # broadcast from rank 1 into views; gather / scatter with view outputs, root 1
    for vname in ("0-d select", "empty", "transposed strided offset"):
        def bc(make_view=views[vname], vname=vname):
            base = xs[rank].to("tpu")
            dist.broadcast(make_view(base), src=1)
            want = xs[rank].clone()
            make_view(want).copy_(make_view(xs[1]))
            _check(f"broadcast from 1 into {vname}", base, want)
        log.run(f"views/broadcast from rank 1 into {vname}", bc)

    def gather_views():
        inp = xs[rank].to("tpu")[:, 1::2]  # (6, 4) strided
        big = torch.zeros(world, 4, 6, device="tpu")
        outs = [big[r].t() for r in range(world)] if rank == 1 else None
        dist.gather(inp, outs, dst=1)
        if rank == 1:
            want = torch.stack([x[:, 1::2].t() for x in xs])
            _check("gather to 1 into transposed views", big, want)
        else:
            _check("gather: a non-root output untouched", big, torch.zeros(world, 4, 6))
    log.run("views/gather to rank 1, strided input, transposed outputs", gather_views)

    def scatter_views():
        holder = torch.zeros(5, 4, device="tpu")
        out = holder[1:4, ::2]  # (3, 2) strided
        ins = [xs[1][r:r + 3, ::4].to("tpu") for r in range(world)] if rank == 1 else None
        dist.scatter(out, ins, src=1)
        want = torch.zeros(5, 4)
        want[1:4, ::2] = xs[1][rank:rank + 3, ::4]
        _check("scatter from 1 into a strided view", holder, want)
    log.run("views/scatter from rank 1, strided inputs, strided output", scatter_views)

    # size errors are this rank's own: a clear error, no collective started, ranks still in step
    log.refused("views/all_gather_into_tensor wrong output size",
                lambda: dist.all_gather_into_tensor(torch.empty(5, device="tpu"), torch.ones(3, device="tpu")),
                "all_gather_into_tensor", "[5]", "[3]")
    log.refused("views/all_gather_into_tensor dtype mismatch",
                lambda: dist.all_gather_into_tensor(torch.empty(3 * world, dtype=torch.float64, device="tpu"),
                                                    torch.ones(3, device="tpu")),
                "all_gather", "float64", "float32")
    log.refused("views/reduce_scatter_tensor dtype mismatch",
                lambda: dist.reduce_scatter_tensor(torch.empty(3, dtype=torch.int32, device="tpu"),
                                                   torch.ones(3 * world, device="tpu")),
                "reduce_scatter", "int32", "float32")
    log.refused("views/all_to_all_single splits not summing to the rows",
                lambda: dist.all_to_all_single(torch.empty(4, device="tpu"), torch.ones(4, device="tpu"),
                                               [2, 2], [1, 1]),
                "all_to_all_single", "split", "[1, 1]")
    _in_step(log, "size errors")


def torch_tpu_mode(name):
    from torch_tpu import EagerMode

    return {"fuse": EagerMode.DEFER_AND_FUSE, "strict": EagerMode.DEFER_NEVER}[name]


def _dtypes(log, rank, world, gloo):
    """Every dtype x every ReduceOp through all_reduce and reduce_scatter_tensor, plus the dtype-only
    collectives (broadcast, all_gather(_into_tensor), all_to_all_single), against gloo or CPU math.

    Per dtype, the collectives are issued in fused eager mode (one graph, one program: the whole grid
    costs a few compiles); SUM and MAX also in strict mode. Argument errors are raised at the call."""
    import torch
    import torch.distributed as dist

    for dname in DTYPES:
        dtype = getattr(torch, dname)
        xs = [_make(10 + r, (4, 3), dtype) for r in range(world)]
        rs_ins = [torch.cat([x, ~x]) if dname == "bool" else torch.cat([x, x.flip(0)]) for x in xs]
        wants, refused = {}, {}
        for opn in OPS:
            op = getattr(dist.ReduceOp, opn)
            ref = xs[rank].clone()
            try:  # what gloo (CPU tensors) does with it
                dist.all_reduce(ref, op=op, group=gloo)
            except Exception:  # noqa: BLE001
                if opn == "AVG" and not (dtype.is_floating_point or dtype.is_complex) and dtype != torch.bool:
                    ref = _ref_reduce(xs, "AVG")  # tpu_dist's integer average truncates, as NCCL's
                else:
                    ref = None
            if ref is None:
                refused[opn] = op
                continue
            if opn != "AVG":
                _check(f"gloo all_reduce {opn} {dname} == CPU math", ref, _ref_reduce(xs, opn))
            wants[f"all_reduce {opn}"] = ref
            if not dtype.is_complex:  # torch's reduce_scatter_tensor of complex: SUM/AVG only, below
                wants[f"reduce_scatter_tensor {opn}"] = _ref_reduce(rs_ins, opn).chunk(world)[rank]
        if dtype.is_complex:
            for opn in ("SUM", "AVG"):
                wants[f"reduce_scatter_tensor {opn}"] = _ref_reduce(rs_ins, opn).chunk(world)[rank]
        wants["broadcast from 1"] = xs[1]
        wants["all_gather_into_tensor"] = torch.cat(xs)
        for r in range(world):
            wants[f"all_gather[{r}]"] = xs[r]
        wants["all_to_all_single"] = torch.cat([x.chunk(world)[rank] for x in xs])

        def issue(names):
            got = {}
            for name in names:
                kind, _, opn = name.partition(" ")
                op = getattr(dist.ReduceOp, opn) if opn in OPS else None
                if kind == "all_reduce":
                    got[name] = xs[rank].to("tpu")
                    dist.all_reduce(got[name], op=op)
                elif kind == "reduce_scatter_tensor":
                    got[name] = torch.empty(4 * 2 // world, 3, dtype=dtype, device="tpu")
                    dist.reduce_scatter_tensor(got[name], rs_ins[rank].to("tpu"), op=op)
                elif kind == "broadcast":
                    got[name] = xs[rank].to("tpu")
                    dist.broadcast(got[name], src=1)
                elif kind == "all_gather_into_tensor":
                    got[name] = torch.empty(4 * world, 3, dtype=dtype, device="tpu")
                    dist.all_gather_into_tensor(got[name], xs[rank].to("tpu"))
                elif name == "all_gather[0]":
                    outs = [torch.empty(4, 3, dtype=dtype, device="tpu") for _ in range(world)]
                    dist.all_gather(outs, xs[rank].to("tpu"))
                    got.update({f"all_gather[{r}]": outs[r] for r in range(world)})
                elif kind == "all_to_all_single":
                    got[name] = torch.empty(4, 3, dtype=dtype, device="tpu")
                    dist.all_to_all_single(got[name], xs[rank].to("tpu"))
            return {k: v.cpu() for k, v in got.items()}

        results = {}

        def fused_grid(dname=dname, wants=wants, results=results):
            with torch.tpu.set_eager_mode(torch_tpu_mode("fuse")):
                results.update(issue([n for n in wants if not n.startswith("all_gather[") or n.endswith("[0]")]))
        log.run(f"dtypes/{dname}: issue the grid in fused mode", fused_grid)
        for name, want in wants.items():
            if name in results:
                log.run(f"dtypes/fused {name} {dname}", lambda name=name, want=want: _check(
                    f"fused {name} {dname}", results[name], want))
        strict_names = [n for n in ("all_reduce SUM", "all_reduce MAX", "reduce_scatter_tensor SUM") if n in wants]
        strict_names = strict_names if dname in ("bool", "int8", "bfloat16", "complex64") else strict_names[:1]

        def strict(dname=dname, wants=wants, strict_names=strict_names):
            got = issue(strict_names)
            for name in strict_names:
                _check(f"strict {name} {dname}", got[name], wants[name])
        log.run(f"dtypes/strict all_reduce SUM, MAX, reduce_scatter_tensor SUM {dname}", strict)

        def uneven(dtype=dtype, dname=dname, xs=xs):
            insp = [1, 3] if rank == 0 else [3, 1]
            out = torch.empty(4, 3, dtype=dtype, device="tpu")
            dist.all_to_all_single(out, xs[rank].to("tpu"), insp, insp)
            want = torch.cat([xs[0][:1], xs[1][:3]]) if rank == 0 else torch.cat([xs[0][1:], xs[1][3:]])
            _check(f"uneven all_to_all_single {dname}", out, want)
        log.run(f"dtypes/uneven all_to_all_single (host-staged) {dname}", uneven)

        for opn, op in refused.items():
            name = f"dtypes/all_reduce {opn} {dname} refused"
            # torch itself refuses complex tensors for ops other than SUM/AVG ("on complex tensors")
            log.refused(name, lambda op=op: dist.all_reduce(xs[rank].to("tpu"), op=op) or torch.tpu.synchronize(),
                        "complex" if dtype.is_complex else dname, opn, "all_reduce")
            if not dtype.is_complex:
                log.refused(f"dtypes/reduce_scatter_tensor {opn} {dname} refused",
                            lambda op=op: dist.reduce_scatter_tensor(
                                torch.empty(4, 3, dtype=dtype, device="tpu"), rs_ins[rank].to("tpu"), op=op),
                            dname, opn, "reduce_scatter_tensor")
        _in_step(log, f"dtypes {dname}")


def _async(log, rank, world, gloo):
    import torch
    import torch.distributed as dist

    xs = [_make(20 + r, (64,), torch.float32) for r in range(world)]
    total = _ref_reduce(xs, "SUM")

    for mode in ("strict", "fuse"):
        def before_after(mode=mode):
            with torch.tpu.set_eager_mode(torch_tpu_mode(mode)):
                t = xs[rank].to("tpu") * 1.0
                w = dist.all_reduce(t, async_op=True)
                y = t * 2           # used before wait: ordered after the collective
                t.add_(1)           # mutated before wait
                assert w.wait()
                z = t * 3           # after wait
                t.mul_(2)
                got = (y.cpu(), z.cpu(), t.cpu())
            _check(f"{mode}: read before wait", got[0], total * 2)
            _check(f"{mode}: read after wait", got[1], (total + 1) * 3)
            _check(f"{mode}: mutated around wait", got[2], (total + 1) * 2)
        log.run(f"async/{mode}: use and mutate before and after wait", before_after)

        def outstanding(mode=mode):
            with torch.tpu.set_eager_mode(torch_tpu_mode(mode)):
                a = xs[rank].to("tpu")
                b = xs[rank].to("tpu")[::2]
                c = torch.empty(64 * world, device="tpu")
                d = torch.empty(32, device="tpu")
                e = xs[rank].to("tpu")
                works = [dist.all_reduce(a, op=dist.ReduceOp.MAX, async_op=True),
                         dist.all_reduce(b, async_op=True),
                         dist.all_gather_into_tensor(c, xs[rank].to("tpu"), async_op=True),
                         dist.reduce_scatter_tensor(d, xs[rank].to("tpu"), async_op=True),
                         dist.broadcast(e, src=1, async_op=True)]
                for w in reversed(works):
                    w.wait()
                got = [t.cpu() for t in (a, b, c, d, e)]
            torch.tpu.synchronize()
            assert all(w.is_completed() for w in works), [w.is_completed() for w in works]
            _check("outstanding max", got[0], torch.stack(xs).amax(0))
            _check("outstanding strided sum", got[1], total[::2])
            _check("outstanding all_gather", got[2], torch.cat(xs))
            _check("outstanding reduce_scatter", got[3], total.chunk(world)[rank])
            _check("outstanding broadcast", got[4], xs[1])
        log.run(f"async/{mode}: five outstanding works waited in reverse", outstanding)

        def futures(mode=mode):
            with torch.tpu.set_eager_mode(torch_tpu_mode(mode)):
                t = xs[rank].to("tpu")
                w = dist.all_reduce(t, async_op=True)
                fut = w.get_future().then(lambda f: f.value()[0] * 2)
                got = fut.wait()
                _check(f"{mode}: future.then", got, total * 2)
        log.run(f"async/{mode}: get_future().then", futures)

        def uneven_async(mode=mode):
            with torch.tpu.set_eager_mode(torch_tpu_mode(mode)):
                src = xs[rank][:4].to("tpu") * 2  # pending values in fused mode
                insp = [1, 3] if rank == 0 else [2, 2]
                outsp = [1, 2] if rank == 0 else [3, 2]
                out = torch.empty(sum(outsp), device="tpu")
                w = dist.all_to_all_single(out, src, outsp, insp, async_op=True)
                w.wait()
                got = out.cpu()
            pieces = [(xs[0][:4] * 2)[:1], (xs[1][:4] * 2)[:2]] if rank == 0 else \
                [(xs[0][:4] * 2)[1:4], (xs[1][:4] * 2)[2:4]]
            _check(f"{mode}: async uneven all_to_all_single of pending values", got, torch.cat(pieces))
        log.run(f"async/{mode}: uneven all_to_all_single (host-staged) of pending values", uneven_async)

    def fused_not_completed():
        with torch.tpu.set_eager_mode(torch_tpu_mode("fuse")):
            t = xs[rank].to("tpu") + 0
            w = dist.all_reduce(t, async_op=True)
            early = w.is_completed()
            v = t.cpu()
        torch.tpu.synchronize()
        assert w.is_completed()
        _check("fused is_completed", v, total)
        assert early is False, "is_completed() was True before the fused graph ran"
    log.run("async/fuse: is_completed false before the flush, true after", fused_not_completed)

    def fused_reader_before():
        with torch.tpu.set_eager_mode(torch_tpu_mode("fuse")):
            t = xs[rank].to("tpu") * 1.0
            y = t + 1                     # pending, reads t before the collective
            w = dist.all_reduce(t, async_op=True)
            z = t + 1                     # reads the result
            del t                         # the output dropped before wait
            w.wait()
            got = (y.cpu(), z.cpu())
        _check("fused: a read recorded before the collective", got[0], xs[rank] + 1)
        _check("fused: a read recorded after the collective", got[1], total + 1)
    log.run("async/fuse: reads recorded before/after, output dropped before wait", fused_reader_before)

    def expanded():
        # an output whose elements share memory: torch refuses in-place writes into such tensors (gloo
        # writes one element several times); tpu_dist refuses it before any collective starts
        t = torch.ones(1, device="tpu").expand(4)
        try:
            dist.all_reduce(t)
        except ValueError as exc:
            assert "all_reduce" in str(exc) and "share memory" in str(exc) and "float32[4]" in str(exc), exc
        else:
            raise AssertionError("all_reduce into an expanded tensor was accepted")
    log.run("async/strict: all_reduce into an expanded (self-overlapping) tensor", expanded)

    def wait_timeout():
        import datetime

        t = xs[rank].to("tpu")
        w = dist.all_reduce(t, async_op=True)
        assert w.wait(timeout=datetime.timedelta(seconds=5))
        _check("wait(timeout)", t, total)
    log.run("async/strict: wait(timeout=...)", wait_timeout)

    def barrier_pending():
        with torch.tpu.set_eager_mode(torch_tpu_mode("fuse")):
            t = xs[rank].to("tpu") * 3
            dist.barrier()
            dist.all_reduce(t)
            dist.barrier()
            got = t.cpu()
        _check("barrier with pending values", got, total * 3)
    log.run("async/fuse: barrier with pending values", barrier_pending)

    def grad_tensor():
        t = xs[rank].to("tpu").requires_grad_()
        y = t * 2
        dist.all_reduce(y)   # in place on a non-leaf: c10d ops are not recorded by autograd
        _check("all_reduce of a non-leaf", y.detach(), total * 2)
    log.run("async/all_reduce of a tensor in an autograd graph", grad_tensor)


def _p2p_objects_groups(log, rank, world, gloo):
    import torch
    import torch.distributed as dist

    peer = 1 - rank

    def p2p():
        a = _make(30 + rank, (4, 6), torch.float32)
        holder = torch.zeros(6, 5, device="tpu")
        recv_view = holder[1:5, ::2][:, :3]           # (4, 3) strided view
        send_view = a.to("tpu")[:, 1::2]               # (4, 3) strided
        if rank == 0:
            dist.send(send_view, dst=1)
            dist.recv(recv_view, src=1)
        else:
            dist.recv(recv_view, src=0)
            dist.send(send_view, dst=0)
        want = torch.zeros(6, 5)
        want[1:5, ::2][:, :3] = _make(30 + peer, (4, 6), torch.float32)[:, 1::2]
        _check("send/recv strided views", holder, want)
    log.run("p2p/send and recv strided views both ways", p2p)

    for nbytes in (64, 4 << 20):
        def exchange(nbytes=nbytes):
            n = nbytes // 4
            mine = torch.arange(n, dtype=torch.float32) + 1000 * rank
            out = torch.empty(n, device="tpu")
            s = dist.isend(mine.to("tpu"), dst=peer)   # both ranks send first, then receive
            r = dist.irecv(out, src=peer)
            s.wait()
            r.wait()
            _check(f"isend/irecv exchange {nbytes} bytes", out, torch.arange(n, dtype=torch.float32) + 1000 * peer)
        log.run(f"p2p/isend then irecv on both ranks, {nbytes} bytes", exchange)

    def batch():
        mine = _make(40 + rank, (3, 3), torch.bfloat16)
        out = torch.empty(3, 3, dtype=torch.bfloat16, device="tpu")
        ops = [dist.P2POp(dist.isend, mine.to("tpu").t(), peer), dist.P2POp(dist.irecv, out, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        _check("batch_isend_irecv bf16 transposed", out, _make(40 + peer, (3, 3), torch.bfloat16).t().contiguous())
    log.run("p2p/batch_isend_irecv bfloat16, transposed send", batch)

    def any_source():
        if rank == 1:
            dist.send(torch.full((3,), 7.0, device="tpu"), dst=0)
        else:
            got = torch.zeros(3, device="tpu")
            sender = dist.recv(got, src=None)
            assert sender == 1, sender
            _check("recv from any source", got, torch.full((3,), 7.0))
        # (dist.monitored_barrier: torch itself refuses every backend but gloo, ours included)
    log.run("p2p/recv from any source", any_source)

    def objects():
        objs = [None] * world
        big = "y" * (200_000 if rank == 1 else 1)
        dist.all_gather_object(objs, {"r": rank, "s": big})
        assert [o["r"] for o in objs] == list(range(world)) and len(objs[1]["s"]) == 200_000, [
            (o["r"], len(o["s"])) for o in objs]
        box = [rank, {"k": rank}] if rank == 1 else [None, None]
        dist.broadcast_object_list(box, src=1)
        assert box == [1, {"k": 1}], box
        got = [None]
        dist.scatter_object_list(got, [{"to": r} for r in range(world)] if rank == 1 else None, src=1)
        assert got == [{"to": rank}], got
        g = [None] * world if rank == 0 else None
        dist.gather_object(("from", rank), g, dst=0)
        if rank == 0:
            assert g == [("from", r) for r in range(world)], g
    log.run("objects/all_gather_object uneven sizes, broadcast/scatter/gather objects", objects)

    def object_with_tensor():
        objs = [None] * world
        dist.all_gather_object(objs, {"t": torch.full((2,), float(rank)).to("tpu")})
        for r in range(world):
            _check(f"all_gather_object tensor from {r}", objs[r]["t"], torch.full((2,), float(r)))
    log.run("objects/all_gather_object holding a tpu tensor", object_with_tensor)

    # subgroups
    def subgroups():
        only1 = dist.new_group([1], backend="tpu_dist")   # every rank calls new_group
        both = dist.new_group([1, 0], backend="tpu_dist")
        t = torch.full((3,), float(rank + 1), device="tpu")
        dist.barrier(group=only1)                         # a non-member's barrier: a no-op
        res = dist.all_reduce(t, group=only1)             # rank 0 is not a member: a no-op
        assert res is None
        _check("subgroup [1]", t, torch.full((3,), float(rank + 1)))
        u = torch.full((2,), float(rank), device="tpu")
        dist.broadcast(u, group_src=1, group=both) if hasattr(dist, "get_group_rank") else None
        _check("group [1, 0] broadcast from group rank 1", u, torch.full((2,), float(dist.get_global_rank(both, 1))))
        out = torch.empty(2 * world, device="tpu")
        dist.all_gather_into_tensor(out, torch.full((2,), float(rank), device="tpu"), group=both)
        order = [dist.get_global_rank(both, g) for g in range(world)]
        _check("group [1, 0] all_gather order", out, torch.tensor([float(r) for r in order for _ in range(2)]))
    log.run("groups/new_group([1]) with a non-member calling, new_group([1, 0])", subgroups)

    def mesh_reversed():
        import torch.distributed._functional_collectives as funcol
        from torch.distributed.device_mesh import DeviceMesh

        mesh = DeviceMesh("tpu", [1, 0])
        cpu_mesh = DeviceMesh("cpu", [1, 0])  # gloo: the reference (torch orders a group by global rank)
        x = torch.full((2,), float(rank), device="tpu")
        _check("mesh [1, 0] all_gather order", funcol.all_gather_tensor(x, 0, mesh),
               funcol.all_gather_tensor(x.cpu(), 0, cpu_mesh))
        _check("mesh [1, 0] broadcast from mesh rank 0", funcol.broadcast(x, 0, mesh),
               funcol.broadcast(x.cpu(), 0, cpu_mesh))
        _check("mesh [1, 0] local rank", torch.tensor(mesh.get_local_rank()), torch.tensor(cpu_mesh.get_local_rank()))
    log.run("groups/DeviceMesh [1, 0]: all_gather order, broadcast root", mesh_reversed)

    def detail_two_groups():
        # TORCH_DISTRIBUTED_DEBUG=DETAIL checks each collective through keys per group: two groups over
        # the same devices (the world and new_group([1, 0])) crashed with ALREADY_EXISTS
        g = dist.new_group([1, 0], backend="tpu_dist")
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        try:
            for grp in (None, g, None, g):
                t = torch.full((2,), float(rank + 1), device="tpu")
                dist.all_reduce(t, group=grp)
                _check("DETAIL all_reduce", t, torch.full((2,), float(sum(range(1, world + 1)))))
        finally:
            dist.set_debug_level(dist.DebugLevel.OFF)
    log.run("groups/TORCH_DISTRIBUTED_DEBUG=DETAIL with two groups over the same devices", detail_two_groups)

    def non_member_send():
        only0 = dist.new_group([0], backend="tpu_dist")
        t = torch.ones(2, device="tpu")
        if rank == 1:
            dist.all_gather_into_tensor(torch.empty(2, device="tpu"), t, group=only0)  # non-member: no-op
        else:
            out = torch.empty(2, device="tpu")
            dist.all_gather_into_tensor(out, t, group=only0)
            _check("size-1 group all_gather", out, torch.ones(2))
    log.run("groups/size-1 group, non-member calls a collective", non_member_send)
    _in_step(log, "groups")


def _reinit(log, rank, world):
    import torch
    import torch.distributed as dist

    def again():
        dist.init_process_group(backend="tpu_dist")
        xs = [_make(60 + r, (5,), torch.float32) for r in range(world)]
        t = xs[rank].to("tpu")
        dist.set_debug_level(dist.DebugLevel.DETAIL)  # the check's keys of the first incarnation are taken
        try:
            dist.all_reduce(t)
        finally:
            dist.set_debug_level(dist.DebugLevel.OFF)
        _check("all_reduce after re-init", t, _ref_reduce(xs, "SUM"))
        out = torch.empty(5 * world, device="tpu")
        dist.all_gather_into_tensor(out, xs[rank].to("tpu"))
        _check("all_gather after re-init", out, torch.cat(xs))
    log.run("reinit/destroy_process_group then init_process_group again", again)
    if dist.is_initialized():
        dist.destroy_process_group()


def _same_as_cpu(name, fn, atol=1e-5):
    """fn(device, mesh) on the tpu mesh (tpu_dist) == on the cpu mesh (gloo), in the same job; where torch
    refuses the case on the cpu mesh, the tpu mesh must refuse it too."""
    outcomes = []
    for dev in ("tpu", "cpu"):
        try:
            outcomes.append((True, fn(dev)))
        except Exception as exc:  # noqa: BLE001
            outcomes.append((False, exc))
    (ok_t, got), (ok_c, want) = outcomes
    if not ok_c:
        assert not ok_t, f"{name}: CPU/gloo refuses it ({type(want).__name__}: {want}) but tpu returned a value"
        return
    if not ok_t:
        raise got
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want), (name, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        _check(f"{name}[{i}]", g.detach(), w.detach(), atol=atol)


def scenario_dtensor(out_dir):
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    dist.init_process_group(backend="cpu:gloo,tpu:tpu_dist")  # cpu meshes: gloo, the reference
    rank, world = dist.get_rank(), dist.get_world_size()
    log = _Log(out_dir, rank, "dtensor")
    meshes = {"tpu": init_device_mesh("tpu", (world,)), "cpu": init_device_mesh("cpu", (world,))}

    def full(x):
        return x.full_tensor() if isinstance(x, DTensor) else x

    torch.manual_seed(0)
    placements = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}
    for shape in [(5, 7), (3, 1)]:  # uneven; fewer columns than ranks (test_distributed.py: even ones)
        A = torch.randn(shape)
        for a, pa in placements.items():
            for b, pb in placements.items():
                if shape == (3, 1) and a == b:
                    continue
                def case(A=A, pa=pa, pb=pb, a=a, b=b, shape=shape):
                    def fn(dev):
                        d = distribute_tensor(A.to(dev), meshes[dev], [pa])
                        r = d.redistribute(meshes[dev], [pb])
                        return [d.to_local(), d.full_tensor(), r.to_local(), r.full_tensor()]
                    _same_as_cpu(f"{shape} {a} -> {b}", fn)
                    d = distribute_tensor(A.to("tpu"), meshes["tpu"], [pa])
                    _check(f"{shape} {a} full_tensor == A", d.full_tensor(), A)
                log.run(f"dtensor/{shape} distribute {a} -> redistribute {b}", case)

    A, B = torch.randn(6, 8), torch.randn(8, 4)
    ops = {
        "matmul S0 @ R": (lambda a, b: a @ b, [Shard(0)], [Replicate()]),
        "matmul R @ S1": (lambda a, b: a @ b, [Replicate()], [Shard(1)]),
        "matmul S1 @ S0 (partial)": (lambda a, b: a @ b, [Shard(1)], [Shard(0)]),
        "sum over sharded dim 1": (lambda a, b: a.sum(1), [Shard(1)], None),
        "sum all": (lambda a, b: a.sum(), [Shard(1)], None),
        "mean over sharded dim": (lambda a, b: a.mean(1), [Shard(1)], None),
        "softmax over the sharded dim": (lambda a, b: torch.softmax(a, 1), [Shard(1)], None),
        "view (6,8)->(3,16) of S0 (torch refuses)": (lambda a, b: a.view(3, 16), [Shard(0)], None),
        "view (6,8)->(2,3,8) of S0": (lambda a, b: a.view(2, 3, 8), [Shard(0)], None),
        "reshape (6,8)->(48,) of S1": (lambda a, b: a.reshape(48), [Shard(1)], None),
        "add Replicate to S0": (lambda a, b: a + (a.redistribute(a.device_mesh, [Replicate()])
                                                  if isinstance(a, DTensor) else a), [Shard(0)], None),
        "gelu then sum": (lambda a, b: torch.nn.functional.gelu(a).sum(0), [Shard(1)], None),
        "bf16 matmul S1 @ S0": (lambda a, b: (a.bfloat16() @ b.bfloat16()).float(), [Shard(1)], [Shard(0)]),
        "layer_norm over a sharded dim": (lambda a, b: torch.nn.functional.layer_norm(a, (8,)), [Shard(1)], None),
        "in-place mul_ of S1": (lambda a, b: a.mul_(3), [Shard(1)], None),
        "index a sharded dim": (lambda a, b: a[:, 2], [Shard(1)], None),
        "cat along the sharded dim": (lambda a, b: torch.cat([a, a], 1), [Shard(1)], None),
    }
    for name, (fn, pa, pb) in ops.items():
        def case(fn=fn, pa=pa, pb=pb, name=name):
            def run(dev):
                da = distribute_tensor(A.to(dev), meshes[dev], pa)
                db = distribute_tensor(B.to(dev), meshes[dev], pb) if pb else None
                out = fn(da, db)
                return [out.to_local(), full(out)]
            _same_as_cpu(f"DTensor {name}", run, atol=3e-2 if "bf16" in name else 1e-5)
            if "refuses" not in name:  # and the global value is the plain CPU computation's
                da = distribute_tensor(A.to("tpu"), meshes["tpu"], pa)
                db = distribute_tensor(B.to("tpu"), meshes["tpu"], pb) if pb else None
                _check(f"DTensor {name} == CPU math", full(fn(da, db)), fn(A.clone(), B),
                       atol=3e-2 if "bf16" in name else 1e-5)
        log.run(f"dtensor/op {name}", case)

    # Partial placements of each reduce op, redistributed
    for op in ("sum", "avg", "max", "min"):
        def partial(op=op):
            xs = [_make(70 + r, (4, 3), torch.float32) for r in range(world)]

            def run(dev):
                d = DTensor.from_local(xs[rank].to(dev), meshes[dev], [Partial(op)])
                e = DTensor.from_local(xs[rank].to(dev), meshes[dev], [Partial(op)])
                return [d.redistribute(meshes[dev], [Replicate()]).to_local(),
                        e.redistribute(meshes[dev], [Shard(0)]).to_local()]
            _same_as_cpu(f"Partial({op})", run)
            d = DTensor.from_local(xs[rank].to("tpu"), meshes["tpu"], [Partial(op)])
            _check(f"Partial({op}) == CPU math", d.full_tensor(), _ref_reduce(xs, op.upper()))
        log.run(f"dtensor/Partial({op}) -> Replicate, Shard(0)", partial)

    # functional collectives (what DTensor and compiled graphs call) on odd inputs, vs the cpu mesh
    import torch.distributed._functional_collectives as funcol

    xs = [_make(80 + r, (4, 6), torch.float32) for r in range(world)]
    fc_cases = {
        "all_reduce of a 0-d tensor": lambda x, m: funcol.all_reduce(x[1, 2], "max", m),
        "all_reduce of a transposed view": lambda x, m: funcol.all_reduce(x.t(), "sum", m),
        "all_reduce bf16 avg": lambda x, m: funcol.all_reduce(x.bfloat16(), "avg", m).float(),
        "all_gather_tensor dim 1 of a transposed view": lambda x, m: funcol.all_gather_tensor(x.t(), 1, m),
        "reduce_scatter_tensor dim 1, max": lambda x, m: funcol.reduce_scatter_tensor(x, "max", 1, m),
        "reduce_scatter_tensor of a strided view": lambda x, m: funcol.reduce_scatter_tensor(x[:, ::3], "sum", 0, m),
        "all_to_all_single uneven": lambda x, m: funcol.all_to_all_single(
            x, [1, 3] if rank == 0 else [3, 1], [1, 3] if rank == 0 else [3, 1], m),
        "all_to_all_single_autograd": lambda x, m: funcol.all_to_all_single_autograd(x, None, None, m),
        "broadcast of a bool 0-d": lambda x, m: funcol.broadcast(x[0, 0] > 0, 1, m),
        "all_reduce_coalesced": lambda x, m: funcol.all_reduce_coalesced([x, x[0]], "sum", m),
        "all_gather_into_tensor_coalesced": lambda x, m: funcol.all_gather_into_tensor_coalesced([x, x[:, 0]], m),
    }
    for name, fn in fc_cases.items():
        def fc(fn=fn, name=name):
            _same_as_cpu(f"funcol {name}", lambda dev: fn(xs[rank].to(dev), meshes[dev]),
                         atol=3e-2 if "bf16" in name else 1e-5)
        log.run(f"funcol/{name}", fc)

    def compiled_uneven():
        f = torch.compile(lambda x: funcol.all_to_all_single(x * 2, [1, 3] if rank == 0 else [3, 1],
                                                             [1, 3] if rank == 0 else [3, 1], meshes["tpu"]),
                          backend="tpu")
        try:
            got = f(xs[rank].to("tpu"))
        except Exception as exc:  # noqa: BLE001
            assert "all_to_all" in str(exc) and "uneven" in str(exc), exc
            return
        want = funcol.all_to_all_single(xs[rank] * 2, [1, 3] if rank == 0 else [3, 1],
                                        [1, 3] if rank == 0 else [3, 1], meshes["cpu"])
        _check("compiled uneven all_to_all_single", got, want)
    log.run("funcol/compiled all_to_all_single with uneven splits", compiled_uneven)

    def compiled_coalesced():
        def f(x, m):
            a, b = funcol.all_reduce_coalesced([x * 2, x[0] + 1], "max", m)
            c, d = funcol.reduce_scatter_tensor_coalesced([x, x * 3], "sum", [0, 0], m)
            return [a, b, c, d]
        got = torch.compile(lambda x: f(x, meshes["tpu"]), backend="tpu")(xs[rank].to("tpu"))
        want = f(xs[rank], meshes["cpu"])
        for i, (g, w) in enumerate(zip(got, want)):
            _check(f"compiled coalesced [{i}]", g, w)
    log.run("funcol/compiled all_reduce_coalesced, reduce_scatter_tensor_coalesced", compiled_coalesced)

    # tensor-parallel MLPs: forward and backward == the same MLP in one CPU process
    for mode, bias in (("strict", True), ("fuse", False)):
        def mlp_case(mode=mode, bias=bias):
            torch.manual_seed(3)
            ref = torch.nn.Sequential(torch.nn.Linear(6, 8, bias=bias), torch.nn.GELU(),
                                      torch.nn.Linear(8, 6, bias=bias), torch.nn.ReLU(),
                                      torch.nn.Linear(6, 4, bias=bias), torch.nn.Tanh(),
                                      torch.nn.Linear(4, 6, bias=bias))
            model = copy.deepcopy(ref).to("tpu")
            inp = torch.randn(5, 6)
            out_ref = ref(inp)
            out_ref.square().mean().backward()
            tp = parallelize_module(model, meshes["tpu"], {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                                           "4": ColwiseParallel(), "6": RowwiseParallel()})
            with torch.tpu.set_eager_mode(torch_tpu_mode(mode)):
                out = tp(inp.to("tpu"))
                out.square().mean().backward()
                got_out = out.detach().cpu()
                grads = {n: full(p.grad).cpu() for n, p in tp.named_parameters()}
            _check(f"TP MLP forward ({mode}, bias={bias})", got_out, out_ref.detach(), atol=1e-5)
            for n, p in ref.named_parameters():
                _check(f"TP MLP grad {n} ({mode}, bias={bias})", grads[n], p.grad, atol=1e-5)
        log.run(f"tp/MLP colwise/rowwise x2 forward+backward {mode} bias={bias}", mlp_case)

    def tp_sgd_steps():
        torch.manual_seed(4)
        ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 6))
        tp = parallelize_module(copy.deepcopy(ref).to("tpu"), meshes["tpu"],
                                {"0": ColwiseParallel(), "2": RowwiseParallel()})
        o1 = torch.optim.SGD(ref.parameters(), lr=0.1)
        o2 = torch.optim.SGD(tp.parameters(), lr=0.1)
        for x in [torch.randn(4, 6) for _ in range(3)]:
            o1.zero_grad()
            ref(x).square().sum().backward()
            o1.step()
            o2.zero_grad()
            tp(x.to("tpu")).square().sum().backward()
            o2.step()
        for (n, p), q in zip(ref.named_parameters(), tp.parameters()):
            _check(f"TP SGD param {n}", full(q), p.detach(), atol=1e-5)
    log.run("tp/MLP 3 SGD steps", tp_sgd_steps)

    def tp_vs_gloo(name, build, plan, x_of):
        def case():
            def run(dev):
                torch.manual_seed(5)
                model = build().to(dev)
                tp = parallelize_module(model, meshes[dev], plan())
                out = tp(x_of(dev))
                full(out).square().sum().backward()
                return [full(out)] + [full(p.grad) for p in tp.parameters()]
            _same_as_cpu(name, run)
        log.run(name, case)

    tp_vs_gloo("tp/MLP hidden 7 over 2 ranks (uneven shards) vs gloo",
               lambda: torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)),
               lambda: {"0": ColwiseParallel(), "2": RowwiseParallel()},
               lambda dev: torch.randn(2, 5, generator=torch.Generator().manual_seed(1)).to(dev))
    tp_vs_gloo("tp/SequenceParallel LayerNorm + Colwise/Rowwise(Shard(1)) vs gloo",
               lambda: torch.nn.Sequential(torch.nn.LayerNorm(6), torch.nn.Linear(6, 8), torch.nn.GELU(),
                                           torch.nn.Linear(8, 6)),
               lambda: {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
                        "3": RowwiseParallel(output_layouts=Shard(1))},
               lambda dev: torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(2 + rank)).to(dev))
    tp_vs_gloo("tp/Colwise with Shard(-1) output (use_local_output=False) vs gloo",
               lambda: torch.nn.Sequential(torch.nn.Linear(6, 8)),
               lambda: {"0": ColwiseParallel(use_local_output=False)},
               lambda dev: torch.randn(3, 6, generator=torch.Generator().manual_seed(3)).to(dev))
    dist.destroy_process_group()
    log.save()


# ---------------------------------------------------------------------------------------------
# The tests (in the pytest process).
# ---------------------------------------------------------------------------------------------
def _job(name, tmp_path_factory, env, timeout):
    out = tmp_path_factory.mktemp(name)
    t0 = time.time()
    results = jobs.spawn(HERE, name, out, env, timeout=timeout, extra={"TORCH_TPU_DIST_TIMEOUT": "30"})
    logs = []
    for rank in range(2):
        entries = []
        for tag in ("sweep", "dtensor"):
            path = out / f"{tag}-rank{rank}.json"
            entries += json.loads(path.read_text()) if path.exists() else []
        logs.append(entries)
    return {"results": results, "logs": logs, "seconds": time.time() - t0}


@pytest.fixture(scope="module")
def sweep(job_env, tmp_path_factory):
    """One 2-process job runs every family (each spawned job costs seconds of start-up)."""
    return _job("sweep", tmp_path_factory, job_env, 300)


def _family(job, prefix):
    jobs.assert_ok(job["results"])  # no rank crashed, hung or exited non-zero
    bad, seen = [], 0
    for rank, entries in enumerate(job["logs"]):
        for name, outcome, detail, _secs in entries:
            if not name.startswith(prefix) and not name.startswith("in step"):
                continue
            seen += 1
            if outcome != "ok":
                bad.append(f"rank {rank}: {name}: {outcome}: {detail}")
    assert seen, f"no case of {prefix!r} ran"
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("prefix", ["views/", "dtypes/", "async/", "p2p/", "objects/", "groups/", "reinit/",
                                    "dtensor/", "funcol/", "tp/"])
def test_sweep(sweep, prefix):
    _family(sweep, prefix)


if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    globals()[f"scenario_{name}"](out)

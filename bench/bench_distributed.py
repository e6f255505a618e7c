"""tpu_dist on 2 processes: all_reduce bandwidth of the XLA path (collectives as XLA programs over the
group's devices), the host-staged path (tpu tensors copied to the host, gloo, copied back) and gloo on
plain CPU tensors, in the same processes; a tensor-parallel Flux transformer step (strict and fused eager)
beside one process; and the fused TP loop's flushes and host bytes.

    python bench/bench_distributed.py [--sizes-mib 1 4 16 64] [--kind flux] [--size small] [--steps 3]

Writes bench/results/distributed.json. Bandwidth is algorithm bandwidth (tensor bytes / seconds per
all_reduce, median). The three all_reduce variants are interleaved, one call of each per repetition, so
load from other jobs hits them alike. The TP step is the transformer's forward inside a pipeline call
(one denoising step, warm), measured with the step callback; "one process" runs the same pipeline
unsharded after the 2-process job ends, so it has the machine to itself.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))


def _step_seconds(pipe, size: int, steps: int) -> float:
    import torch

    times, last = [], [None]

    def on_step(p, i, t, kw):
        torch.tpu.synchronize()
        now = time.perf_counter()
        if last[0] is not None:
            times.append(now - last[0])
        last[0] = now
        return kw

    with torch.no_grad():  # (inference_mode: view of a buffer fails, see the report)
        for _ in range(2):  # the first call compiles
            times.clear()
            last[0] = None
            pipe(prompt="a photo of a cat", height=size, width=size, num_inference_steps=steps,
                 generator=torch.Generator("cpu").manual_seed(0), output_type="np", callback_on_step_end=on_step)
    return statistics.median(times)


def _all_reduce_bandwidth(args, dist, torch, gloo) -> list:
    pg = dist.group.WORLD
    staged = getattr(pg.transport, "host", pg.transport)  # HostStaged: what tpu_dist was before
    rows = []
    for mib in args.sizes_mib:
        n = mib * (1 << 20) // 4
        tpu = torch.ones(n, device="tpu")
        tpu_staged = torch.ones(n, device="tpu")
        cpu = torch.ones(n)

        def xla_step():
            dist.all_reduce(tpu)
            torch.tpu.synchronize()

        def staged_step():
            opts = dist.AllreduceOptions()
            opts.reduceOp = dist.ReduceOp.SUM
            staged.run("allreduce", ([tpu_staged], opts))
            torch.tpu.synchronize()

        def gloo_step():
            dist.all_reduce(cpu, group=gloo)

        steps = {"xla": xla_step, "staged": staged_step, "gloo_cpu": gloo_step}
        times = {k: [] for k in steps}
        for fn in steps.values():  # warm-up: compiles, connects
            fn()
        for _ in range(args.repeat):
            for name, fn in steps.items():
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        nbytes = n * 4
        rows.append({"mib": mib, **{f"{k}_s": v for k, v in med.items()},
                     **{f"{k}_gbps": nbytes / v / 1e9 for k, v in med.items()},
                     "xla_over_gloo_cpu_time": med["xla"] / med["gloo_cpu"],
                     "xla_over_staged_time": med["xla"] / med["staged"]})
    return rows


def _fused_tp_loop(dist, torch) -> dict:
    """Row-parallel matmul + all_reduce + gelu, 10 steps, in fused eager: flushes and host bytes."""
    import torch_tpu
    from torch_tpu import EagerMode

    rank, world = dist.get_rank(), dist.get_world_size()
    d = 256
    x = torch.randn(64, d).to("tpu")
    ws = [(torch.randn(d // world, d) * 0.05).to("tpu") for _ in range(10)]
    cols = slice(rank * (d // world), (rank + 1) * (d // world))

    def loop():
        h = x
        for w in ws:
            y = h[:, cols] @ w
            dist.all_reduce(y)
            h = torch.nn.functional.gelu(y)
        return h.sum().item()

    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        loop()  # compiles
        torch_tpu.reset_stats()
        t0 = time.perf_counter()
        loop()
        seconds = time.perf_counter() - t0
        stats = torch_tpu.stats()
    return {"steps": 10, "seconds": seconds, "flushes": stats["flushes"],
            "host_to_device_bytes": stats["host_to_device_bytes"],
            "device_to_host_bytes": stats["device_to_host_bytes"],
            "dist_host_bytes": stats["dist_host_bytes"], "dist_xla_collectives": stats["dist_xla_collectives"]}


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    from torch_tpu import EagerMode
    from torch_tpu.runtime import multiprocess

    dist.init_process_group(backend="tpu_dist")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    result = {"world_size": world, "transport": type(dist.group.WORLD.transport).__name__,
              "xla_runtime": multiprocess.active() or multiprocess.why_inactive()}
    result["all_reduce"] = _all_reduce_bandwidth(args, dist, torch, gloo)
    result["fused_tp_loop"] = _fused_tp_loop(dist, torch)

    # tensor-parallel transformer step
    from torch.distributed.device_mesh import DeviceMesh

    from torch_tpu.integrations import tensor_parallel as tp_pipelines
    from torch_tpu.testing import tiny_pipelines

    if rank == 0:
        tiny_pipelines.build_pipeline_dir(args.kind, args.size, root=args.root)
    dist.barrier()
    path = str(tiny_pipelines.build_pipeline_dir(args.kind, args.size, root=args.root))
    mesh = DeviceMesh("tpu", list(range(world)))
    pipe = tp_pipelines.load_tp_pipeline(args.kind, path, mesh, torch.float32)
    resolution = {"tiny": 64, "small": 256, "medium": 256}[args.size]
    result["tp_step_s"] = _step_seconds(pipe, resolution, args.steps)
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        result["tp_step_fused_s"] = _step_seconds(pipe, resolution, args.steps)
    dist.destroy_process_group()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)


def single(args) -> dict:
    import torch

    from torch_tpu.testing import tiny_pipelines

    pipe = tiny_pipelines.load_pipeline(args.kind, args.size, torch.float32, root=args.root).to("tpu")
    resolution = {"tiny": 64, "small": 256, "medium": 256}[args.size]
    return {"single_step_s": _step_seconds(pipe, resolution, args.steps)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--kind", default="flux", choices=["flux", "flux2"])
    parser.add_argument("--size", default="small", choices=["tiny", "small", "medium"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--root", default=os.environ.get("TORCH_TPU_TINY_PIPELINES_DIR")
                        or os.path.join(tempfile.gettempdir(), "torch_tpu_bench_pipelines"))
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = os.path.join(tempfile.mkdtemp(), "rank0.json")
    forwarded = ["--sizes-mib", *map(str, args.sizes_mib), "--repeat", str(args.repeat), "--kind", args.kind,
                 "--size", args.size, "--steps", str(args.steps), "--root", args.root, "--out", out]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, HF_HUB_OFFLINE="1")
        procs.append(subprocess.Popen([sys.executable, HERE, "--worker", *forwarded], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    with open(out) as f:
        result = json.load(f)
    result.update(single(args))
    result["tp_over_single_step_time"] = result["tp_step_s"] / result["single_step_s"]
    result["tp_fused_over_single_step_time"] = result["tp_step_fused_s"] / result["single_step_s"]
    result["config"] = {"kind": args.kind, "size": args.size, "steps": args.steps, "repeat": args.repeat}
    from _common import write

    write("distributed", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

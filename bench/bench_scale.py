"""One FluxTransformer2DModel call at width 512, each execution mode against CPU torch in the same process.

Model: diffusers FluxTransformer2DModel, fp32, random weights, batch 1, width 512 (8 heads x 64,
axes_dims_rope (16, 24, 24)), in_channels 64, joint_attention_dim 128, pooled_projection_dim 64,
no guidance embedding; 1024 image tokens + 64 text tokens. Depth D means D double-stream blocks
(``num_layers``) and 2*D single-stream blocks (``num_single_layers``): depth 4 is the 4 + 8 model of
the speed issue.

Modes (one fresh process each, so compile caches and eager caches never mix):
  strict    strict eager (EagerMode.DEFER_NEVER): one cached program per aten op
  fused     fused eager (EagerMode.DEFER_AND_FUSE): the call is recorded and flushed as one program
  compiled  torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)
  regional  m.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)

Timing: after warm-up calls, ``--reps`` rounds each time one tpu call, then ``torch.tpu.synchronize()``
(which waits for everything launched, the dropped result included), and one CPU torch call of an
identical copy of the model, interleaved, so both see the same machine load. CPU torch runs with as
many threads as XLA:CPU uses (the CPUs this process may run on; ``--threads`` overrides). Per round the
JSON keeps wall time and process CPU time (all threads) of both, the medians, ratio = median(tpu) /
median(cpu) (wall), cpu_time_ratio (the same over process CPU time: less sensitive to other processes
on a shared machine), the load average, programs per call and the max abs error against CPU torch.
``--one-thread`` also times CPU torch on one thread each round (OpenMP threads suffer most from load:
on a loaded machine 2-thread CPU torch can be 3x slower than 1-thread).
``--runs N`` repeats every (depth, mode) worker N times, interleaving modes; the summary is the median
ratio over runs.

    python bench/bench_scale.py [--modes strict,fused,compiled,regional] [--depths 1,4,8] [--reps 5] [--runs 3]
    python bench/bench_scale.py --one strict --depth 4      # one measurement, prints JSON (the worker)

Writes bench/results/scale.json (or --out).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODES = ("strict", "fused", "compiled", "regional")
IMAGE_TOKENS = 1024
TEXT_TOKENS = 64


def build_model(depth: int):
    import torch
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=64, out_channels=None, num_layers=depth, num_single_layers=2 * depth,
        attention_head_dim=64, num_attention_heads=8, joint_attention_dim=128, pooled_projection_dim=64,
        guidance_embeds=False, axes_dims_rope=(16, 24, 24))
    return model.eval()


def make_inputs():
    import torch

    g = torch.Generator("cpu").manual_seed(0)
    side = int(IMAGE_TOKENS ** 0.5)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return dict(
        hidden_states=torch.randn(1, IMAGE_TOKENS, 64, generator=g),
        encoder_hidden_states=torch.randn(1, TEXT_TOKENS, 128, generator=g),
        pooled_projections=torch.randn(1, 64, generator=g),
        timestep=torch.full((1,), 0.5),
        img_ids=img_ids.reshape(-1, 3),
        txt_ids=torch.zeros(TEXT_TOKENS, 3),
        return_dict=False,
    )


def _to(d, device):
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in d.items()}


def xla_cpu_threads() -> int:
    """Threads XLA:CPU runs a program on: one per CPU this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def measure(mode: str, depth: int, reps: int, warmup: int, threads: int = 0, one_thread: bool = False) -> dict:
    import torch

    import torch_tpu

    torch.set_num_threads(threads or xla_cpu_threads())
    cpu_model = build_model(depth)
    inputs = make_inputs()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    tin = _to(inputs, "tpu")
    sync = torch.tpu.synchronize
    if mode == "compiled":
        run_model = torch.compile(tpu_model, backend="tpu", fullgraph=True, dynamic=False)
    elif mode == "regional":
        tpu_model.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
        run_model = tpu_model
    else:
        run_model = tpu_model
    if mode == "fused":
        torch.tpu.eager_mode = torch_tpu.EagerMode.DEFER_AND_FUSE

    out = {"mode": mode, "depth": depth, "double_blocks": depth, "single_blocks": 2 * depth,
           "image_tokens": IMAGE_TOKENS, "text_tokens": TEXT_TOKENS, "width": cpu_model.inner_dim,
           "parameters": sum(p.numel() for p in cpu_model.parameters()),
           "torch_threads": torch.get_num_threads(), "xla_cpu_threads": xla_cpu_threads(),
           "load_before": os.getloadavg()}
    with torch.no_grad():
        ref = cpu_model(**inputs)[0]
        t0 = time.perf_counter()
        got = run_model(**tin)[0]
        sync()
        out["first_call_s"] = time.perf_counter() - t0
        out["max_abs_err_vs_cpu"] = float((got.cpu() - ref).abs().max())
        out["max_abs_ref"] = float(ref.abs().max())
        del got
        for _ in range(warmup):
            run_model(**tin)
            sync()
            cpu_model(**inputs)
        torch_tpu.reset_stats()
        tpu_s, cpu_s, tpu_cpu_s, cpu_cpu_s, cpu1_s, cpu1_cpu_s = [], [], [], [], [], []
        for _ in range(reps):
            c0, t0 = time.process_time(), time.perf_counter()
            run_model(**tin)  # result dropped: synchronize waits for it all the same
            sync()
            tpu_s.append(time.perf_counter() - t0)
            tpu_cpu_s.append(time.process_time() - c0)
            c0, t0 = time.process_time(), time.perf_counter()
            cpu_model(**inputs)
            cpu_s.append(time.perf_counter() - t0)
            cpu_cpu_s.append(time.process_time() - c0)
            if one_thread:  # CPU torch on one thread as well (OpenMP threads suffer most from load)
                torch.set_num_threads(1)
                c0, t0 = time.process_time(), time.perf_counter()
                cpu_model(**inputs)
                cpu1_s.append(time.perf_counter() - t0)
                cpu1_cpu_s.append(time.process_time() - c0)
                torch.set_num_threads(out["torch_threads"])
        s = torch_tpu.stats()
    med = statistics.median
    out.update(tpu_s=tpu_s, cpu_s=cpu_s, tpu_cpu_time_s=tpu_cpu_s, cpu_cpu_time_s=cpu_cpu_s,
               tpu_median_s=med(tpu_s), cpu_median_s=med(cpu_s))
    out["ratio"] = out["tpu_median_s"] / out["cpu_median_s"]
    out["ratio_of_rounds_median"] = med(a / b for a, b in zip(tpu_s, cpu_s))
    out["cpu_time_ratio"] = med(tpu_cpu_s) / med(cpu_cpu_s)
    if cpu1_s:
        out["cpu_one_thread_s"] = cpu1_s
        out["cpu_one_thread_cpu_time_s"] = cpu1_cpu_s
        out["ratio_vs_one_thread"] = med(tpu_s) / med(cpu1_s)
        # CPU seconds of the tpu call (all XLA threads) / CPU seconds of single-threaded CPU torch: the
        # work each does, the comparison least disturbed by other processes on a loaded machine
        out["cpu_time_ratio_vs_one_thread"] = med(tpu_cpu_s) / med(cpu1_cpu_s)
    out["programs_per_call"] = s["executions"] / reps
    out["compiles_while_timed"] = s["compiles"]
    out["load_after"] = os.getloadavg()
    return out


def run_worker(mode: str, depth: int, reps: int, warmup: int, timeout: float, threads: int,
               one_thread: bool = False) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", mode, "--depth", str(depth),
           "--reps", str(reps), "--warmup", str(warmup), "--threads", str(threads)] + \
        (["--one-thread"] if one_thread else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "depth": depth, "error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"mode": mode, "depth": depth, "error": (proc.stderr or proc.stdout)[-3000:]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--depths", default="1,4,8")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1, help="workers per (depth, mode); summary = median")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--one", choices=MODES, help="worker: measure one mode in this process, print JSON")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads for CPU torch (0: as many as XLA:CPU uses)")
    ap.add_argument("--one-thread", action="store_true",
                    help="also time CPU torch on one thread each round (ratio_vs_one_thread)")
    ap.add_argument("--out", default="scale")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.depth, args.reps, args.warmup, args.threads, args.one_thread)))
        return

    from _common import write

    results = []
    for depth in [int(d) for d in args.depths.split(",")]:
        for run in range(args.runs):
            for mode in args.modes.split(","):
                r = run_worker(mode, depth, args.reps, args.warmup, args.timeout, args.threads, args.one_thread)
                r["run"] = run
                results.append(r)
                if "error" in r:
                    print(f"depth {depth} {mode:9s} ERROR {r['error'][-300:]}", flush=True)
                else:
                    print(f"depth {depth} {mode:9s} run {run} tpu {r['tpu_median_s'] * 1e3:8.1f} ms  cpu "
                          f"{r['cpu_median_s'] * 1e3:8.1f} ms  ratio {r['ratio']:.2f}  cpu-time ratio "
                          f"{r['cpu_time_ratio']:.2f}  programs/call {r['programs_per_call']:.0f}  "
                          f"err {r['max_abs_err_vs_cpu']:.1e}  load {r['load_before'][0]:.1f}"
                          + (f"  vs 1 thread {r['ratio_vs_one_thread']:.2f} (cpu time "
                             f"{r['cpu_time_ratio_vs_one_thread']:.2f})" if "ratio_vs_one_thread" in r else ""),
                          flush=True)
    tables = {"ratios": "ratio", "cpu_time_ratios": "cpu_time_ratio", "ratios_vs_one_thread": "ratio_vs_one_thread",
              "cpu_time_ratios_vs_one_thread": "cpu_time_ratio_vs_one_thread"}
    summaries = {name: {} for name in tables}
    for r in results:
        for name, field in tables.items():
            if field in r:
                summaries[name].setdefault(f"depth{r['depth']}_{r['mode']}", []).append(r[field])
    summaries = {name: {k: round(statistics.median(v), 3) for k, v in table.items()}
                 for name, table in summaries.items()}
    for k, v in summaries["ratios"].items():
        print(f"{k:20s} ratio {v:.2f}  cpu-time ratio {summaries['cpu_time_ratios'][k]:.2f}"
              + (f"  vs 1 thread {summaries['ratios_vs_one_thread'][k]:.2f} (cpu time "
                 f"{summaries['cpu_time_ratios_vs_one_thread'][k]:.2f})"
                 if k in summaries["ratios_vs_one_thread"] else ""))
    write(args.out, {"what": "tpu / CPU torch time of one warm FluxTransformer2DModel call (width 512, "
                             "1024+64 tokens, fp32), interleaved in one process per mode; medians over runs",
                     "targets": {"strict": 1.5, "fused": 1.0, "compiled": 1.0, "regional": 1.1},
                     **summaries, "results": results})


if __name__ == "__main__":
    main()

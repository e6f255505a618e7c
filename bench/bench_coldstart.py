"""Time to first image per mode: a fresh process on an empty cache, fresh processes on the cache it filled
(warm), and the steady call; compile seconds per denoising step; how fused compile time grows with depth.

    python bench/bench_coldstart.py [--pipeline demo|tiny] [--modes strict,fused,compile] [--warm-runs 2]
    python bench/bench_coldstart.py --depth-only [--width 512] [--tokens 1024]

The pipeline is the demo model shipped in the package (``--pipeline demo``, default: its own call, 64x64,
20 steps; what ``python -m torch_tpu generate`` runs) or the tiny offline Flux pipeline (``tiny``: 4 steps).
Modes: strict eager, fused eager, compile (the transformer under ``torch.compile(backend="tpu")``, the
rest strict, as ``generate --mode compile``) and compile_blocks (diffusers' regional compilation,
``compile_repeated_blocks(backend="tpu")``: the rest of the transformer strict). Every measurement runs in a fresh process with its own cache
folder (TORCH_TPU_CACHE_DIR): "cold" is an empty cache, "warm" the cache the cold process filled. Per
process: the first image's time from the interpreter's start (import, load, move, first call), the first
call's wall and CPU seconds, the distinct programs it built or loaded (compiled, loaded from disk, compile
and load seconds; the XLA compilations that took longest, by program: ``xla_compiles``), and the steady call (the fastest of the next calls). A warm process should compile
nothing (``warm_compiled_nothing``) and its first call stay within 2x of its steady call
(``warm_first_over_steady_wall``). Strict and fused mode also run a cold process compiling every program on the calling thread
(``TORCH_TPU_COMPILE_THREADS=0``; ``--no-reference`` skips it): ``empty_first_background_over_caller_wall``
is what compiling on the compile threads gained. Runs on any platform (TPU, GPU, CPU). Writes
bench/results/coldstart.json (or --out), after every mode (``complete`` says whether every part ran).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("strict", "fused", "compile", "compile_blocks")


# -------------------------------------------------------------------------------------------------
# Child processes
# -------------------------------------------------------------------------------------------------
def _load(args):
    """(pipeline, call arguments) of ``--pipeline``."""
    if args.pipeline == "demo":
        from torch_tpu.demo import shipped

        call = dict(shipped.generation_kwargs(), prompt=shipped.DEFAULT_PROMPT)
        if args.steps:
            call["num_inference_steps"] = args.steps
        return shipped.load_pipeline(), call
    from torch_tpu.testing import tiny_pipelines

    call = dict(prompt="a photo of a cat", height=args.resolution, width=args.resolution,
                num_inference_steps=args.steps or 4, guidance_scale=3.5)
    return tiny_pipelines.load_pipeline("flux", args.size), call


def _timed_loads() -> list:
    """(seconds, bytes, on the main thread, end) of every executable this process deserialises from the disk
    cache: where a warm process's time goes on a platform whose executables load slowly, and whether the
    loads ahead (prefetch) were done before the first call began."""
    import threading

    from jax.experimental import serialize_executable

    loads = []
    load = serialize_executable.deserialize_and_load

    def timed(serialized, *a, **kw):
        t0 = time.perf_counter()
        out = load(serialized, *a, **kw)
        end = time.perf_counter()
        loads.append((end - t0, len(serialized), threading.current_thread() is threading.main_thread(), end))
        return out

    serialize_executable.deserialize_and_load = timed
    return loads


def _loads_summary(loads: list, call_start: float) -> dict:
    """``during_call``: the loads that ended after the first call began (the call may have waited for them)."""
    seconds = sorted(s for s, *_ in loads)
    late = [(s, end) for s, _, _, end in loads if end > call_start]
    return {"count": len(loads), "seconds": sum(seconds), "main_thread_seconds": sum(s for s, _, m, _ in loads if m),
            "median_s": statistics.median(seconds) if seconds else None, "max_s": seconds[-1] if seconds else None,
            "mib": sum(b for _, b, _, _ in loads) / 2 ** 20,
            "during_call": {"count": len(late), "seconds": sum(s for s, _ in late),
                            "last_end_after_call_start_s": max((e for _, e in late), default=call_start) - call_start}}


def _timed_compiles() -> list:
    """(program name, wall seconds, thread) of every XLA compilation in this process: which programs a cold
    first call waits for (compile threads run several at once; XLA compiles on threads of its own, so the
    calling thread's CPU time says nothing)."""
    import re
    import threading

    from jax._src import stages

    found = []
    compile_ = stages.Lowered.compile

    def timed(self, *a, **kw):
        w0 = time.perf_counter()
        out = compile_(self, *a, **kw)
        wall = time.perf_counter() - w0
        text = self.as_text()
        head = re.search(r"module @(\S+)", text[:400])
        # the program's parameters and results: which call of an op a slow compile was
        sig = re.search(r"func\.func public @main\((.*?)\) -> \(?(.*?)\)? \{", text)
        sig = f"({sig.group(1)}) -> {sig.group(2)}" if sig else "?"
        while "{" in sig:  # attributes (shardings, layouts), innermost first: they can nest
            sig, n = re.subn(r"\s*\{[^{}]*\}", "", sig)
            if not n:
                break
        sig = sig[:300]
        found.append((head.group(1) if head else "?", wall, threading.current_thread().name, sig, w0))
        return out

    stages.Lowered.compile = timed
    return found


def _compiles_summary(compiles: list, since: float, top: int = 16) -> dict:
    """``every``: [program, wall seconds, signature, start in seconds from ``since``] in the order the
    compiles finished: the timeline says whether the compile threads or the calling thread was the bottleneck."""
    slowest = sorted(compiles, key=lambda c: -c[1])[:top]
    return {"count": len(compiles), "wall_s": sum(c[1] for c in compiles),
            "slowest": [{"program": n, "wall_s": round(w, 3), "thread": t, "signature": g}
                        for n, w, t, g, _ in slowest],
            "every": [[n, round(w, 3), g, round(s - since, 3)] for n, w, _, g, s in compiles]}


def _child_pipeline(args) -> dict:
    t_start = time.perf_counter()
    import torch

    import torch_tpu

    loads = _timed_loads()
    compiles = _timed_compiles()
    if args.no_prefetch:  # the warm process loads each program when it first needs it
        from torch_tpu.runtime import prefetch

        prefetch.start_early = lambda: None
    t_imported = time.perf_counter()
    pipe, call_kwargs = _load(args)
    pipe.set_progress_bar_config(disable=True)
    t_loaded = time.perf_counter()
    torch_tpu.reset_stats()  # from here: the move's programs (and the disk cache read ahead) count too
    pipe.to("tpu")
    torch.tpu.synchronize()
    t_moved = time.perf_counter()
    if args.mode == "compile":
        pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    elif args.mode == "compile_blocks":  # regional: dynamo traces each repeated block class once
        pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    mode = torch_tpu.EagerMode.DEFER_AND_FUSE if args.mode == "fused" else torch_tpu.EagerMode.DEFER_NEVER

    def call(reset: bool):
        marks = []

        def on_step_end(p, i, t, kwargs):  # no sync here: it would change the fused graphs
            marks.append(torch_tpu.stats()["compile_seconds"])
            return kwargs

        if reset:
            torch_tpu.reset_stats()
        before = torch_tpu.stats()["compile_seconds"]
        w0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            pipe(**call_kwargs, output_type="np", generator=torch.Generator("cpu").manual_seed(0),
                 callback_on_step_end=on_step_end)
        torch.tpu.synchronize()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        st = torch_tpu.stats()
        per_step = [b - a for a, b in zip([before] + marks, marks)]
        return {"wall_s": wall, "cpu_s": cpu, "compile_seconds_per_step": per_step,
                "programs": st["cache_misses"], "compiles": st["compiles"],
                "compile_seconds": st["compile_seconds"], "cache_loads": st["cache_loads"],
                "cache_load_seconds": st["cache_load_seconds"], "cache_prefetched": st["cache_prefetched"],
                "op_loads": st["op_loads"], "graph_compiles": st["graph_compiles"], "flushes": st["flushes"],
                "executions": st["executions"], "queued_ops": st["queued_ops"]}

    with torch.tpu.set_eager_mode(mode):
        t_call = time.perf_counter()
        first = call(reset=False)  # counted from before the move
        first["first_image_epoch"] = time.time()
        first["stages_s"] = {"import": t_imported - t_start, "load": t_loaded - t_imported, "move": t_moved - t_loaded}
        first["executable_loads"] = _loads_summary(loads, t_call)
        first["xla_compiles"] = _compiles_summary(compiles, since=t_moved)
        steady = [call(reset=True) for _ in range(args.steady_calls)]
    from torch_tpu.runtime import compile_pool

    sys.path.insert(0, HERE)
    from _common import environment

    return {"platform": torch_tpu.platform(), "environment": environment(), "cpu_count": os.cpu_count(),
            "compile_threads": compile_pool.threads(),
            "first": first,
            "steady": min(steady, key=lambda r: r["wall_s"]), "steady_cpu_s": min(r["cpu_s"] for r in steady)}


def _child_depth(args) -> dict:
    """Fused-mode compile seconds of one Flux transformer call of the given depth."""
    import torch
    from diffusers import FluxTransformer2DModel

    import torch_tpu

    torch.manual_seed(0)
    heads = args.width // 64
    model = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=args.depth,
                                   num_single_layers=args.depth, attention_head_dim=64,
                                   num_attention_heads=heads, joint_attention_dim=64,
                                   pooled_projection_dim=32, guidance_embeds=True,
                                   axes_dims_rope=(8, 28, 28)).eval().to("tpu")
    side = int(round(args.tokens ** 0.5))
    text = 16
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    inputs = dict(hidden_states=torch.randn(1, side * side, 16), encoder_hidden_states=torch.randn(1, text, 64),
                  pooled_projections=torch.randn(1, 32), timestep=torch.tensor([0.5]),
                  img_ids=img_ids.reshape(-1, 3), txt_ids=torch.zeros(text, 3), guidance=torch.tensor([3.5]))
    inputs = {k: v.to("tpu") for k, v in inputs.items()}
    torch.tpu.synchronize()
    compiles = _count_compile_cpu()
    torch_tpu.reset_stats()
    with torch.no_grad(), torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        w0 = time.perf_counter()
        out = model(**inputs, return_dict=False)[0]
        out.cpu()
        wall = time.perf_counter() - w0
        stats = torch_tpu.stats()
        w1 = time.perf_counter()
        model(**inputs, return_dict=False)[0].cpu()
        steady = time.perf_counter() - w1
    sys.path.insert(0, HERE)
    from _common import environment

    return {"environment": environment(), "depth": args.depth, "compile_seconds": stats["compile_seconds"],
            "compiles": stats["compiles"],
            "compile_cpu_seconds": sum(c for c, _ in compiles), "per_program_cpu_s": sorted(compiles),
            "first_wall_s": wall, "steady_wall_s": steady}


def _count_compile_cpu() -> list:
    """Process CPU seconds of each XLA compilation (steadier than wall seconds on a shared machine)."""
    from jax._src import stages

    found = []
    compile_ = stages.Lowered.compile

    def timed(self, *a, **kw):
        c0 = time.process_time()
        out = compile_(self, *a, **kw)
        found.append((time.process_time() - c0, len(self.as_text())))
        return out

    stages.Lowered.compile = timed
    return found


_CHIP_BUSY = ("TPU is already in use", "libtpu multi-process lockfile")


def _run_child(kind: str, cache: str, extra: list, **env_extra) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, HF_HUB_OFFLINE="1", **env_extra)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind] + extra
    spawned = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    busy = 0
    while out.returncode != 0 and any(m in out.stderr for m in _CHIP_BUSY) and busy < 3:
        # seen on the TPU host: a child could not open the chip right after the previous child exited
        # (libtpu's lock still held for a moment: "TPU is already in use", or "Internal error when accessing
        # libtpu multi-process lockfile"). Wait and run it again; the result says how often.
        busy += 1
        time.sleep(10)
        spawned = time.time()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"child {cmd} failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if busy:
        result["retried_after_tpu_busy"] = busy
    first = result.get("first")
    if first is not None:  # from the interpreter's start: import, load, move to the device, first call
        first["first_image_s"] = first.pop("first_image_epoch") - spawned
    return result


# -------------------------------------------------------------------------------------------------
# The benchmark
# -------------------------------------------------------------------------------------------------
def _summary(cold: dict, warm: list) -> dict:
    """The figures of the issue's table for one mode (cold process, warm processes, steady call)."""
    def row(first: dict) -> dict:
        return {k: first[k] for k in ("first_image_s", "wall_s", "programs", "compiles", "compile_seconds",
                                      "cache_loads", "cache_load_seconds")}
    return {"cold_first_process": row(cold["first"]),
            "warm_first_process": row(min((w["first"] for w in warm), key=lambda f: f["first_image_s"])),
            "steady_call_s": min(w["steady"]["wall_s"] for w in [cold, *warm]),
            "warm_compiled_nothing": all(w["first"]["compiles"] == 0 for w in warm)}


def _pipeline_results(args, root: str, save, env: dict) -> dict:
    """Every mode's figures; ``save(results)`` after each mode (a run cut short keeps the modes it measured)."""
    results = {}
    extra = ["--pipeline", args.pipeline, "--size", args.size, "--resolution", str(args.resolution),
             "--steps", str(args.steps), "--steady-calls", str(args.steady_calls)]
    for mode in args.modes:
        cache = os.path.join(root, mode)
        cold = _run_child("pipeline", cache, extra + ["--mode", mode])
        env.update(cold.pop("environment", {}))
        warm = [_run_child("pipeline", cache, extra + ["--mode", mode]) for _ in range(args.warm_runs)]
        if args.warm_no_prefetch:
            unfetched = _run_child("pipeline", cache, extra + ["--mode", mode, "--no-prefetch"])["first"]
        steps = cold["first"]["compile_seconds_per_step"]
        more = {"cpu_count": cold.get("cpu_count"), "compile_threads": cold.get("compile_threads")}
        if mode in ("strict", "fused") and not args.no_reference:
            # the reference run side by side: every program compiled on the calling thread (strict ops and
            # fused graphs otherwise compile on compile threads while the program goes on). Its per-step
            # compile seconds say which step built what (in the background, a compile ends later)
            sync = _run_child("pipeline", os.path.join(root, f"{mode}-sync"), extra + ["--mode", mode],
                              TORCH_TPU_COMPILE_THREADS="0")
            steps = sync["first"]["compile_seconds_per_step"]
            more.update({"empty_cache_first_call_compiling_on_the_caller": sync["first"],
                         "empty_first_background_over_caller_wall": cold["first"]["wall_s"] / sync["first"]["wall_s"],
                         "empty_first_image_background_over_caller":
                             cold["first"]["first_image_s"] / sync["first"]["first_image_s"]})
        if args.warm_no_prefetch:
            more["warm_first_call_without_prefetch"] = unfetched
        after = sum(steps[1:])
        r_wall = [w["first"]["wall_s"] / w["steady"]["wall_s"] for w in warm]
        r_cpu = [w["first"]["cpu_s"] / w["steady_cpu_s"] for w in warm]
        results[mode] = {
            "summary": _summary(cold, warm),
            "empty_cache_first_call": cold["first"],
            "warm_cache_first_call": [w["first"] for w in warm],
            "steady_call": [w["steady"] for w in warm],
            "compile_seconds_per_step_cold": steps,
            "compile_after_step1_over_step1": (after / steps[0]) if steps and steps[0] else None,
            "warm_first_over_steady_wall": statistics.median(r_wall) if r_wall else None,
            "warm_first_over_steady_cpu": statistics.median(r_cpu) if r_cpu else None,
            "empty_first_over_steady_wall": cold["first"]["wall_s"] / cold["steady"]["wall_s"],
            **more,
        }
        print(mode, json.dumps({k: v for k, v in results[mode].items()
                                if k not in ("warm_cache_first_call", "steady_call", "empty_cache_first_call")},
                               indent=1), flush=True)
        save(results)
    _print_table(results)
    return results


def _print_table(results: dict) -> None:
    print("| mode | first process, cold cache | same, compiling on the caller | programs (compiled, s) | "
          "first process, warm cache | loaded from disk | warm first call / steady | steady call |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in results.items():
        s, cold, warm = r["summary"], r["summary"]["cold_first_process"], r["summary"]["warm_first_process"]
        ref = r.get("empty_cache_first_call_compiling_on_the_caller")
        ref = f"{ref['first_image_s']:.1f} s" if ref else "-"
        print(f"| {mode} | {cold['first_image_s']:.1f} s | {ref} | {cold['programs']} ({cold['compiles']}, "
              f"{cold['compile_seconds']:.1f} s) | {warm['first_image_s']:.1f} s | {warm['cache_loads']} "
              f"(compiled {warm['compiles']}) | {r['warm_first_over_steady_wall']:.2f}x | "
              f"{s['steady_call_s']:.3f} s |")


def _depth_results(args, root: str, env: dict) -> dict:
    runs = {}
    for depth in (1, 4):
        extra = ["--depth", str(depth), "--width", str(args.width), "--tokens", str(args.tokens)]
        runs[depth] = _run_child("depth", os.path.join(root, f"depth{depth}"), extra)
        env.update(runs[depth].pop("environment", {}))
        print("depth", depth, runs[depth], flush=True)
    return {"width": args.width, "tokens": args.tokens, "runs": runs,
            "compile_seconds_depth4_over_depth1": runs[4]["compile_seconds"] / runs[1]["compile_seconds"],
            "compile_cpu_seconds_depth4_over_depth1": runs[4]["compile_cpu_seconds"] / runs[1]["compile_cpu_seconds"]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", default=None)
    p.add_argument("--mode", default="strict", choices=MODES)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to measure")
    p.add_argument("--pipeline", default="demo", choices=("demo", "tiny"))
    p.add_argument("--size", default="tiny", help="size of the tiny pipeline (--pipeline tiny)")
    p.add_argument("--resolution", type=int, default=64, help="--pipeline tiny only (the demo's is its own)")
    p.add_argument("--steps", type=int, default=0, help="denoising steps (0: the pipeline's: demo 20, tiny 4)")
    p.add_argument("--steady-calls", type=int, default=2)
    p.add_argument("--warm-runs", type=int, default=2)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--depth-only", action="store_true")
    p.add_argument("--no-depth", action="store_true")
    p.add_argument("--out", default=None, help="the JSON's path (default bench/results/coldstart.json)")
    p.add_argument("--warm-no-prefetch", action="store_true",
                   help="one more warm process per mode, loading each program only when it needs it")
    p.add_argument("--no-prefetch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-reference", action="store_true",
                   help="skip the cold runs compiling on the calling thread (TORCH_TPU_COMPILE_THREADS=0)")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if not set(args.modes) <= set(MODES):
        p.error(f"--modes: choose from {', '.join(MODES)}")
    if args.child:
        result = {"pipeline": _child_pipeline, "depth": _child_depth}[args.child](args)
        print(json.dumps(result))
        return

    sys.path.insert(0, HERE)
    from _common import write

    payload = {"pipeline": "demo" if args.pipeline == "demo" else f"flux-{args.size}",
               "resolution": 64 if args.pipeline == "demo" else args.resolution, "steps": args.steps or None,
               "targets": {"warm_first_over_steady": {"strict": 2, "fused": 2, "compile": 2, "compile_blocks": 2},
                           "first_image_s": {"cold": 15, "warm": 5},
                           "fused_compile_after_step1_over_step1": 0.10,
                           "fused_compile_depth4_over_depth1": 1.3}}
    # the environment as the first child saw it: this process never opens the device (a TPU opened here
    # would be held for the whole run, and every later child would find the chip taken)
    env = {}

    def save(modes: dict) -> None:
        write("coldstart", {**payload, "modes": modes, "complete": False}, path=args.out, quiet=True, env=env)

    with tempfile.TemporaryDirectory(prefix="torch_tpu-coldstart-") as root:
        if not args.depth_only:
            payload["modes"] = _pipeline_results(args, root, save, env)
        if not args.no_depth:
            payload["depth"] = _depth_results(args, root, env)
    write("coldstart", {**payload, "complete": True}, path=args.out, env=env)


if __name__ == "__main__":
    main()

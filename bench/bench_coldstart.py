"""Time to first image per mode: a fresh process on an empty cache, fresh processes on the cache it filled
(warm), and the steady call; compile seconds per denoising step; how fused compile time grows with depth.

    python bench/bench_coldstart.py [--pipeline demo|tiny] [--modes strict,fused,compile] [--warm-runs 2]
    python bench/bench_coldstart.py --depth-only [--width 512] [--tokens 1024]
    python bench/bench_coldstart.py --transformer-only [--heads 24 --image-tokens 4096 --text-tokens 512]

``--transformer`` (or ``--transformer-only``): a FLUX-shaped transformer alone (``bench_model_width.py``'s model,
random bf16 weights; default 2 double + 4 single blocks, 2 heads, 256 + 64 tokens; FLUX.1's width with ``--heads
24``) per mode: ``compile`` and ``compile_blocks``, each a cold process (empty cache) and warm ones (the cache it
filled: a warm process reads the traced module, ``compile/warm_start.py``), their first call beside the steady
call, and where the first call's time went (``phases``: dynamo's own timers, torch_tpu's lowering with XLA's
compile inside, a kept module's load, the program's first run); ``jax_floor``, JAX's own jit of the same model
(``torch_tpu.extract_jax``), and ``torchax``, torchax's jit of it where torchax imports (0.0.13 does not on
torch 2.13: the reason is reported), as the floor of the cold first call (``cold_first_over_floor_first``).

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


# -------------------------------------------------------------------------------------------------
# A FLUX-shaped transformer alone: compiled, regional, and the floor (JAX's jit of the same model)
# -------------------------------------------------------------------------------------------------
TRANSFORMER_MODES = ("compile", "compile_blocks", "jax_floor", "torchax")


def _width_args(args):
    import argparse as _argparse

    return _argparse.Namespace(kind="flux", layers=args.layers, single_layers=args.single_layers, heads=args.heads,
                               image_tokens=args.image_tokens, text_tokens=args.text_tokens)


def _phases() -> dict:
    """Seconds of each phase of torch.compile's first call, as torch and torch_tpu time them: dynamo's own
    timers (bytecode tracing, AOTAutograd, guards ...) and, wrapped here, torch_tpu's graph lowering (its
    plan, JAX's tracing and lowering of the program, XLA's compile inside) and a kept module's load."""
    import functools

    from torch_tpu.compile import lowering

    seconds = {"lowering_and_xla": 0.0, "module_entry_load": 0.0, "program_load_by_key": 0.0}

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[name] += time.perf_counter() - t0
        return wrapper

    original = lowering.graph_compiler
    lowering.graph_compiler = lambda kind: timed("lowering_and_xla", original(kind))
    try:  # (a torch_tpu without warm starts: these stay 0)
        from torch_tpu.compile import warm_start

        warm_start._load = timed("module_entry_load", warm_start._load)
        lowering.GraphProgram.load = timed("program_load_by_key", lowering.GraphProgram.load)
    except (ImportError, AttributeError):
        pass
    return seconds


def _dynamo_seconds() -> dict:
    from torch._dynamo.utils import compilation_time_metrics

    return {k: round(sum(v), 4) for k, v in compilation_time_metrics.items() if sum(v) > 0.001}


def _child_transformer(args) -> dict:
    """One process: the transformer's first call (cold or warm, by the cache folder) and its steady call."""
    t_start = time.perf_counter()
    import torch

    if args.mode != "torchax":  # (torchax takes the PrivateUse1 device itself: torch_tpu is not loaded there)
        import torch_tpu

    sys.path.insert(0, HERE)
    import bench_model_width as width

    wargs = _width_args(args)
    compiles = _timed_compiles()
    t_imported = time.perf_counter()
    model = width._model(wargs)
    inputs = width._inputs(wargs)
    t_built = time.perf_counter()
    if args.mode in ("jax_floor", "torchax"):
        result = (_floor_jax if args.mode == "jax_floor" else _floor_torchax)(model, inputs)
    else:
        model = model.to("tpu")
        kw = width._on("tpu", inputs)
        torch.tpu.synchronize()
        seconds = _phases()
        if args.mode == "compile":
            model.compile(backend="tpu", fullgraph=True, dynamic=False)
        else:
            model.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
        torch_tpu.reset_stats()

        def call():
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model(**kw)[0]
            dispatched = time.perf_counter() - t0
            torch.tpu.synchronize()
            return time.perf_counter() - t0, dispatched, out

        first, first_dispatch, _ = call()
        st = torch_tpu.stats()
        phases = {**{k: round(v, 4) for k, v in seconds.items()}, "dynamo_timers": _dynamo_seconds(),
                  "first_dispatch_s": round(first_dispatch, 4),
                  "first_device_wait_s": round(first - first_dispatch, 4),
                  "xla_compile_s": round(st["compile_seconds"], 4), "xla_compiles": st["compiles"],
                  "programs_loaded_from_disk": st["cache_loads"],
                  "module_captures": st.get("module_captures", 0), "module_loads": st.get("module_loads", 0),
                  "graph_compiles": st["graph_compiles"]}
        steady = [call()[0] for _ in range(args.steady_calls)]
        result = {"first_call_s": first, "steady_call_s": min(steady), "phases": phases,
                  "xla_compiles": _compiles_summary(compiles, since=t_built, top=4)}
    result["stages_s"] = {"import": t_imported - t_start, "build": t_built - t_imported}
    if args.mode != "torchax":
        from _common import environment

        result["environment"] = environment()
    return result


def _floor_jax(model, inputs) -> dict:
    """JAX's own jit of the same model (``torch_tpu.extract_jax``: the model as a pure JAX function): its
    first call (JAX traces the function, lowers and compiles) and its steady call. The trace through
    torch's ops (extract_jax's aten graph, made once per signature) is timed apart."""
    import jax

    import torch
    import torch_tpu

    model = model.to("tpu")
    kw = {k: (torch_tpu.to_jax(v.to("tpu")) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    arrays = {k: v for k, v in kw.items() if not isinstance(v, bool)}
    t0 = time.perf_counter()
    params, fn = torch_tpu.extract_jax(model)
    extract_s = time.perf_counter() - t0

    @jax.jit
    def step(params, arrays):
        return fn(params, **arrays, return_dict=False)[0]

    t0 = time.perf_counter()
    jax.block_until_ready(step(params, arrays))
    first = time.perf_counter() - t0
    steady = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(step(params, arrays))
        steady.append(time.perf_counter() - t0)
    return {"first_call_s": first, "steady_call_s": min(steady), "extract_s": extract_s,
            "note": "jax.jit of torch_tpu.extract_jax(model); the first call includes extract_jax's trace of "
                    "the module into an aten graph (made at the first call of fn)"}


def _floor_torchax(model, inputs) -> dict:
    """torchax's ``jax.jit`` of the same diffusers model, where torchax imports (0.0.13 does not on torch
    2.13: it names removed named-tensor overloads); the reason otherwise."""
    try:  # (the child runs with TORCH_DEVICE_BACKEND_AUTOLOAD=0: torchax renames PrivateUse1 itself)
        import jax
        import torchax
        import torchax.interop
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the floor is then JAX's jit (jax_floor)
        return {"skipped": f"torchax does not import here: {type(exc).__name__}: {exc}"[:400]}
    import torch

    class Tensors(torch.nn.Module):  # (return_dict stays out of the traced keywords; a tensor comes back)
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return self.inner(**kw, return_dict=False)[0]

    env = torchax.default_env()
    with env:
        jmodel = torchax.interop.JittableModule(Tensors(model).to("jax"))
        kw = {k: v.to("jax") for k, v in inputs.items() if isinstance(v, torch.Tensor)}

        def call():
            out = jmodel(**kw)
            jax.block_until_ready(out.jax() if hasattr(out, "jax") else out)

        t0 = time.perf_counter()
        call()
        first = time.perf_counter() - t0
        steady = []
        for _ in range(3):
            t0 = time.perf_counter()
            call()
            steady.append(time.perf_counter() - t0)
    return {"first_call_s": first, "steady_call_s": min(steady)}


def _transformer_results(args, root: str, env: dict) -> dict:
    """Per mode: a cold process (empty cache), warm processes (the cache it filled), their first calls beside
    the steady call; the floor's first call beside compiled mode's."""
    extra = ["--layers", str(args.layers), "--single-layers", str(args.single_layers), "--heads", str(args.heads),
             "--image-tokens", str(args.image_tokens), "--text-tokens", str(args.text_tokens),
             "--steady-calls", str(args.steady_calls)]
    results = {}
    for mode in args.transformer_modes:
        cache = os.path.join(root, "transformer-" + mode)
        peer = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"} if mode == "torchax" else {}
        try:
            cold = _run_child("transformer", cache, extra + ["--mode", mode], **peer)
        except RuntimeError as exc:
            results[mode] = {"failed": str(exc)[-2000:]}
            continue
        if mode != "torchax":
            env.update(cold.pop("environment", {}))
        if "skipped" in cold or mode in ("jax_floor", "torchax"):
            results[mode] = {"cold": cold}
            continue
        warm = [_run_child("transformer", cache, extra + ["--mode", mode]) for _ in range(args.warm_runs)]
        for w in warm:
            w.pop("environment", None)
        best = min(warm, key=lambda w: w["first_call_s"]) if warm else None
        steady = min(r["steady_call_s"] for r in [cold, *warm])
        results[mode] = {
            "cold": cold, "warm": warm, "steady_call_s": steady,
            "cold_first_call_s": cold["first_call_s"],
            "warm_first_call_s": best["first_call_s"] if best else None,
            "warm_first_over_steady": best["first_call_s"] / steady if best else None,
            "cold_first_over_steady": cold["first_call_s"] / steady,
            "warm_traced_nothing": all(w["phases"]["module_captures"] == 0 and w["phases"]["xla_compiles"] == 0
                                       for w in warm)}
        print(mode, json.dumps({k: v for k, v in results[mode].items() if k not in ("cold", "warm")}), flush=True)
    floor = results.get("torchax", {}).get("cold", {})
    if "first_call_s" not in floor:
        floor = results.get("jax_floor", {}).get("cold", {})
    if "first_call_s" in floor:
        for mode in ("compile", "compile_blocks"):
            if "cold_first_call_s" in results.get(mode, {}):
                results[mode]["cold_first_over_floor_first"] = results[mode]["cold_first_call_s"] / floor["first_call_s"]
    return results


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
    p.add_argument("--mode", default="strict", choices=MODES + TRANSFORMER_MODES[2:])
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
    p.add_argument("--transformer", action="store_true",
                   help="also the FLUX-shaped transformer alone: compiled and regional first calls (cold, warm), "
                        "steady call, and the floor (JAX's jit of the same model; torchax's where it imports)")
    p.add_argument("--transformer-only", action="store_true", help="the transformer alone, no pipeline")
    p.add_argument("--transformer-modes", default=",".join(TRANSFORMER_MODES))
    p.add_argument("--layers", type=int, default=2, help="transformer: double blocks")
    p.add_argument("--single-layers", type=int, default=4, help="transformer: single blocks")
    p.add_argument("--heads", type=int, default=2, help="transformer: heads of 128 (FLUX.1: 24)")
    p.add_argument("--image-tokens", type=int, default=256, help="transformer (FLUX.1 at 1024x1024: 4096)")
    p.add_argument("--text-tokens", type=int, default=64, help="transformer (FLUX.1: 512)")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    args.transformer_modes = [m for m in args.transformer_modes.split(",") if m]
    if args.child == "transformer":
        if args.mode not in TRANSFORMER_MODES:
            p.error(f"--mode: choose from {', '.join(TRANSFORMER_MODES)}")
    elif not set(args.modes) <= set(MODES):
        p.error(f"--modes: choose from {', '.join(MODES)}")
    if not set(args.transformer_modes) <= set(TRANSFORMER_MODES):
        p.error(f"--transformer-modes: choose from {', '.join(TRANSFORMER_MODES)}")
    if args.child:
        result = {"pipeline": _child_pipeline, "depth": _child_depth, "transformer": _child_transformer}[args.child](args)
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
        if args.transformer or args.transformer_only:
            payload["transformer"] = {"layers": args.layers, "single_layers": args.single_layers,
                                      "heads": args.heads, "image_tokens": args.image_tokens,
                                      "text_tokens": args.text_tokens,
                                      "modes": _transformer_results(args, root, env)}
            save(payload.get("modes", {}))
        if not args.depth_only and not args.transformer_only:
            payload["modes"] = _pipeline_results(args, root, save, env)
        if not args.no_depth and not args.transformer_only:
            payload["depth"] = _depth_results(args, root, env)
    write("coldstart", {**payload, "complete": True}, path=args.out, env=env)


if __name__ == "__main__":
    main()

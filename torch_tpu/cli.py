"""``python -m torch_tpu``: generate an image with a diffusers pipeline, show the platform, point to benchmarks.

    python -m torch_tpu info
    python -m torch_tpu generate --kind flux --steps 2 --height 64 --width 64 --output out.png
    python -m torch_tpu generate --model black-forest-labs/FLUX.1-schnell --dtype bfloat16 --offload
    python -m torch_tpu bench

Without ``--model`` the pipeline is a tiny/small/medium offline pipeline with random weights
(``torch_tpu.testing.tiny_pipelines``), built on first use and cached.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_MODES = {
    "eager": "DEFER_NEVER",
    "debug": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
    "fused": "DEFER_AND_FUSE",
    "compile": "DEFER_NEVER",  # the transformer is compiled; everything else runs in strict eager
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_tpu", description="torch_tpu command line")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="platform, devices, memory and versions")
    sub.add_parser("bench", help="where the benchmarks are")

    g = sub.add_parser("generate", help="generate an image with a diffusers pipeline")
    g.add_argument("--model", default=None,
                   help="a local pipeline folder or a Hub id (default: the offline tiny pipeline of --kind)")
    g.add_argument("--kind", choices=("flux", "sd3", "flux2"), default="flux",
                   help="kind of the default offline pipeline")
    g.add_argument("--size", choices=("tiny", "small", "medium"), default="tiny",
                   help="size of the default offline pipeline")
    g.add_argument("--prompt", default="a golden retriever surfing a wave, photorealistic")
    g.add_argument("--height", type=int, default=None)
    g.add_argument("--width", type=int, default=None)
    g.add_argument("--steps", type=int, default=4)
    g.add_argument("--guidance", type=float, default=None, help="guidance scale (default: the pipeline's)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    g.add_argument("--mode", choices=("eager", "debug", "fused", "compile"), default="eager",
                   help="eager = strict eager (DEFER_NEVER); debug = DEFER_NEVER_AND_LAUNCH_BLOCKING; "
                        "fused = DEFER_AND_FUSE; compile = torch.compile(backend='tpu') of the "
                        "transformer (its repeated blocks with --offload)")
    g.add_argument("--offload", action="store_true", help="pipe.enable_model_cpu_offload()")
    g.add_argument("--output", default="output.png")
    g.add_argument("--device", choices=("tpu", "cpu"), default="tpu", help="cpu: run on CPU torch to compare")
    return p


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "jax", "jaxlib", "diffusers", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    import torch_tpu

    out["torch_tpu"] = torch_tpu.__version__
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def cmd_info(args) -> int:
    import torch
    import torch_tpu
    from .runtime import platform

    print(f"platform: {torch_tpu.platform()}")
    n = torch.tpu.device_count()
    print(f"devices: {n} (this process uses tpu:0)")
    for i, dev in enumerate(platform.devices()):
        print(f"  [{i}] {dev}  name: {platform.device_name(i)}")
    free, total = torch.tpu.mem_get_info()
    print(f"memory: total {_mib(total)}, free {_mib(free)}, allocated {_mib(torch.tpu.memory_allocated())}")
    print(f"eager mode: {torch.tpu.eager_mode.name}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()))
    return 0


def cmd_bench(args) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"Benchmarks live in bench/ of the torch_tpu source tree ({os.path.join(here, 'bench')}); "
          "run them from there. For a single timed image use `python -m torch_tpu generate`.")
    return 0


class _Timer:
    """Stage times with a device sync at every boundary, so asynchronous work is counted where it ran."""

    def __init__(self, sync):
        self.sync = sync
        self.stages: list[tuple[str, float]] = []

    def wrap(self, name, fn):
        def timed(*a, **kw):
            self.sync()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            self.sync()
            self.stages.append((name, time.perf_counter() - t0))
            self.mark = time.perf_counter()
            return out
        return timed


def cmd_generate(args) -> int:
    if args.device == "cpu" and args.offload:
        print("torch_tpu generate: --offload needs --device tpu", file=sys.stderr)
        return 2

    import torch
    import torch_tpu

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    on_tpu = args.device == "tpu"
    if on_tpu:
        torch.tpu.eager_mode = getattr(torch_tpu.EagerMode, _MODES[args.mode])
        sync = torch.tpu.synchronize
    else:
        def sync():
            pass

    print(f"platform: {torch_tpu.platform()}  device: "
          + (f"tpu:0 ({torch.tpu.get_device_name()})" if on_tpu else "cpu (CPU torch)"))
    print(f"mode: {args.mode}" + (f" ({_MODES[args.mode]})" if on_tpu else "") + f"  dtype: {args.dtype}"
          + ("  offload: model cpu offload" if args.offload else ""))

    from diffusers import DiffusionPipeline

    t_total = time.perf_counter()
    t0 = time.perf_counter()
    height, width = args.height, args.width
    if args.model is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built offline: never reach for the Hub
        from .testing import tiny_pipelines

        path = tiny_pipelines.build_pipeline_dir(args.kind, args.size)
        print(f"model: offline {args.size} {args.kind} pipeline (random weights) at {path}")
        pipe = DiffusionPipeline.from_pretrained(str(path), dtype=dtype, local_files_only=True)
        default_res = tiny_pipelines.SIZE_SPECS[args.size]["default_image"]
        height = height or default_res
        width = width or default_res
    else:
        print(f"model: {args.model}")
        pipe = DiffusionPipeline.from_pretrained(args.model, dtype=dtype)
    print(f"pipeline: {type(pipe).__name__}")
    timer = _Timer(sync)
    timer.stages.append(("load", time.perf_counter() - t0))

    if on_tpu:
        torch.tpu.reset_peak_memory_stats()
    torch_tpu.reset_stats()
    t0 = time.perf_counter()
    if args.offload:
        pipe.enable_model_cpu_offload()  # finds the "tpu" device through torch.accelerator
    elif on_tpu:
        pipe.to("tpu")
    sync()
    timer.stages.append(("move to device" if not args.offload else "move to device (offload hooks)",
                         time.perf_counter() - t0))
    if args.mode == "compile" and on_tpu:
        # static shapes: the first call compiles (its time shows in the first step), later calls reuse
        if args.offload:  # offload hooks cannot be traced: compile only the repeated blocks (the seed's recipe)
            pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
        else:
            pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)

    pipe.encode_prompt = timer.wrap("text encoding", pipe.encode_prompt)
    pipe.vae.decode = timer.wrap("vae decode", pipe.vae.decode)
    step_times: list[float] = []

    def on_step_end(p, i, t, kwargs):
        sync()
        now = time.perf_counter()
        step_times.append(now - timer.mark)
        timer.mark = now
        return kwargs

    call = dict(prompt=args.prompt, num_inference_steps=args.steps, height=height, width=width,
                generator=torch.Generator("cpu").manual_seed(args.seed), callback_on_step_end=on_step_end)
    if args.guidance is not None:
        call["guidance_scale"] = args.guidance
    timer.mark = time.perf_counter()
    t_call = time.perf_counter()
    image = pipe(**call).images[0]
    sync()
    call_s = time.perf_counter() - t_call
    image.save(args.output)

    print("--- time per stage (s) ---")
    for name, s in timer.stages:
        if name == "vae decode":
            continue
        print(f"{name:<32s}{s:9.3f}")
    for i, s in enumerate(step_times):
        note = "  (includes latent preparation)" if i == 0 else ""
        print(f"{'denoising step ' + str(i + 1):<32s}{s:9.3f}{note}")
    for name, s in timer.stages:
        if name == "vae decode":
            print(f"{name:<32s}{s:9.3f}")
    print(f"{'pipeline call':<32s}{call_s:9.3f}")
    print(f"{'total':<32s}{time.perf_counter() - t_total:9.3f}")
    if on_tpu:
        print(f"peak device memory: {_mib(torch.tpu.max_memory_allocated())}")
        st = torch_tpu.stats()
        keys = ("compiles", "compile_seconds", "cache_loads", "cache_load_seconds", "cache_rejects",
                "graph_compiles", "cache_hits", "cache_misses", "executions", "flushes", "cpu_fallbacks")
        print("torch_tpu stats: " + ", ".join(
            f"{k}={st[k]:.2f}" if isinstance(st.get(k), float) else f"{k}={st.get(k)}" for k in keys if k in st))
        print(_compile_summary(st, call_s))
    print(f"saved: {args.output} ({image.size[0]}x{image.size[1]})")
    return 0


def _compile_summary(st: dict, call_s: float) -> str:
    """'compiled N programs, loaded M from cache (dir)', and on a cold run why it was slow."""
    from .runtime import disk_cache

    folder = disk_cache.folder()
    where = folder if folder else "disk cache off: TORCH_TPU_CACHE_DIR is empty"
    line = (f"compiled {st['compiles']} programs ({st['compile_seconds']:.1f} s), "
            f"loaded {st['cache_loads']} from cache ({where})")
    if st["cache_rejects"]:
        line += f"; ignored {st['cache_rejects']} bad cache entries (rebuilt)"
    if st["compiles"] and st["compile_seconds"] > 0.25 * call_s:
        share = min(st["compile_seconds"] / call_s, 1.0) if call_s else 1.0
        if st["cache_loads"] == 0:
            why = (f"\nthis was a cold run: {share:.0%} of the pipeline call was XLA compilation of programs "
                   "this machine had not seen; ")
            why += ("they are now on disk, so the next run with the same model, sizes and settings loads them "
                    "instead" if folder else "set TORCH_TPU_CACHE_DIR to keep them for the next run")
        else:
            why = (f"\n{share:.0%} of the pipeline call was XLA compilation of programs not in the cache yet "
                   "(new shapes or settings); the next run loads them")
        line += why
    return line


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return {"info": cmd_info, "bench": cmd_bench, "generate": cmd_generate}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

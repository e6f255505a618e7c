"""One call of each tiny and small offline pipeline on tpu (strict eager) beside CPU torch, in one run.

    python bench/bench_pipelines.py [--sizes tiny small] [--kinds flux sd3 flux2] [--steps 4]

Writes bench/results/pipelines.json with wall time per call and per denoising step (warm call,
after one warm-up call that compiles), plus the cold first call on tpu.
"""
from __future__ import annotations

import argparse
import time

import torch

from _common import write
from torch_tpu.testing import tiny_pipelines

RESOLUTION = {"tiny": 64, "small": 256, "medium": 256}


def _run(pipe, device, size, steps):
    step_times = []
    last = [None]

    def on_step(p, i, t, kw):
        if device == "tpu":
            torch.tpu.synchronize()
        now = time.perf_counter()
        if last[0] is not None:
            step_times.append(now - last[0])
        last[0] = now
        return kw

    kwargs = dict(prompt="a photo of a cat", height=RESOLUTION[size], width=RESOLUTION[size],
                  num_inference_steps=steps, generator=torch.Generator("cpu").manual_seed(0),
                  output_type="np", callback_on_step_end=on_step)
    if type(pipe).__name__ == "StableDiffusion3Pipeline":
        kwargs["guidance_scale"] = 4.5
    t0 = time.perf_counter()
    with torch.inference_mode():
        pipe(**kwargs)
    if device == "tpu":
        torch.tpu.synchronize()
    total = time.perf_counter() - t0
    per_step = sum(step_times) / len(step_times) if step_times else float("nan")
    return total, per_step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    parser.add_argument("--kinds", nargs="+", default=list(tiny_pipelines.KINDS))
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    import torch_tpu

    results = {}
    for size in args.sizes:
        for kind in args.kinds:
            pipe = tiny_pipelines.load_pipeline(kind, size)
            cpu_total, cpu_step = _run(pipe, "cpu", size, args.steps)
            cpu_total, cpu_step = _run(pipe, "cpu", size, args.steps)
            pipe.to("tpu")
            torch_tpu.reset_stats()
            cold_total, _ = _run(pipe, "tpu", size, args.steps)
            compiles = torch_tpu.stats()["compiles"]
            warm_total, warm_step = _run(pipe, "tpu", size, args.steps)
            name = f"{kind}-{size}"
            results[name] = {
                "resolution": RESOLUTION[size], "steps": args.steps,
                "cpu_call_s": cpu_total, "cpu_step_s": cpu_step,
                "tpu_cold_call_s": cold_total, "tpu_cold_compiles": compiles,
                "tpu_warm_call_s": warm_total, "tpu_warm_step_s": warm_step,
                "ratio_tpu_step_over_cpu_step": warm_step / cpu_step,
            }
            print(f"{name:14s} cpu {cpu_total:7.3f} s ({cpu_step*1e3:7.1f} ms/step)   tpu warm {warm_total:7.3f} s "
                  f"({warm_step*1e3:7.1f} ms/step)   tpu cold {cold_total:7.2f} s, {compiles} compiles")
            del pipe
    write("pipelines", {"results": results})


if __name__ == "__main__":
    main()

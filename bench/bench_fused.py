"""Fused eager vs strict eager vs CPU torch on the small offline Flux pipeline, in one run.

    python bench/bench_fused.py [--size small] [--resolution 256] [--steps 4]

For each mode: the cold first call (with its compile count and compile seconds) and the warm
second call, both synchronised. Writes bench/results/fused.json.
"""
from __future__ import annotations

import argparse
import time

import torch

import torch_tpu
from _common import write
from torch_tpu import EagerMode
from torch_tpu.testing import tiny_pipelines


def _call(pipe, args, device):
    kwargs = dict(prompt="a photo of a cat", height=args.resolution, width=args.resolution,
                  num_inference_steps=args.steps, guidance_scale=3.5,
                  generator=torch.Generator("cpu").manual_seed(0), output_type="np")
    torch_tpu.reset_stats()
    t0 = time.perf_counter()
    with torch.no_grad():
        image = pipe(**kwargs).images
    if device == "tpu":
        torch.tpu.synchronize()
    seconds = time.perf_counter() - t0
    stats = torch_tpu.stats()
    return image, {"seconds": seconds, "compiles": stats["compiles"], "compile_seconds": stats["compile_seconds"],
                   "flushes": stats["flushes"], "executions": stats["executions"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="small")
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    pipe = tiny_pipelines.load_pipeline("flux", args.size)
    pipe.set_progress_bar_config(disable=True)
    results = {}
    _call(pipe, args, "cpu")
    ref, results["cpu_torch"] = _call(pipe, args, "cpu")
    pipe.to("tpu")
    for name, mode in (("strict_eager", EagerMode.DEFER_NEVER), ("fused_eager", EagerMode.DEFER_AND_FUSE)):
        with torch.tpu.set_eager_mode(mode):
            _, cold = _call(pipe, args, "tpu")
            image, warm = _call(pipe, args, "tpu")
        results[name] = {"cold": cold, "warm": warm, "max_abs_diff_vs_cpu": float(abs(image - ref).max())}
    strict, fused, cpu = (results["strict_eager"]["warm"]["seconds"], results["fused_eager"]["warm"]["seconds"],
                          results["cpu_torch"]["seconds"])
    ratios = {"fused_over_strict": fused / strict, "fused_over_cpu": fused / cpu, "strict_over_cpu": strict / cpu}
    for name, r in results.items():
        print(name, r)
    print(ratios)
    write("fused", {"pipeline": f"flux-{args.size}", "resolution": args.resolution, "steps": args.steps,
                    "results": results, "ratios": ratios, "target_fused_over_strict": 0.5})


if __name__ == "__main__":
    main()

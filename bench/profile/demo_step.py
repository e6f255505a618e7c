"""Where a denoising step of the README's main job goes, per eager mode: the shipped demo model's pipeline called
warm, its steady step time, the programs launched and ops recorded per step, and a cProfile of one call (the
functions with the most own time per step).

    python bench/profile/demo_step.py --out DIR [--modes strict,fused] [--steps 20]   # DIR/demo_step.json

Written for the TPU host (a launch costs ~120 us there, ``bench/results/tpu/launch_overlap.json``), runs anywhere.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from pathlib import Path

import torch

import torch_tpu
from torch_tpu.demo.model import build_pipeline, generation_kwargs

MODES = {"strict": "DEFER_NEVER", "fused": "DEFER_AND_FUSE"}


def _call(pipe, steps, kw, marks=None):
    def on_step(p, i, t, k):
        if marks is not None:
            torch.tpu.synchronize()
            marks.append(time.perf_counter())
        return k

    image = pipe(prompt="a red circle", num_inference_steps=steps, callback_on_step_end=on_step,
                 output_type="np", **kw).images
    torch.tpu.synchronize()
    return image


def _top(profile, steps, n=30):
    stats = pstats.Stats(profile)
    rows = []
    for (path, line, name), (cc, nc, own, cum, _) in stats.stats.items():
        rows.append({"function": f"{Path(path).name}:{line}:{name}", "calls_per_step": round(nc / steps, 2),
                     "own_us_per_step": round(own / steps * 1e6, 1), "cum_us_per_step": round(cum / steps * 1e6, 1)})
    rows.sort(key=lambda r: -r["own_us_per_step"])
    return rows[:n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", default="strict,fused")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    kw = generation_kwargs()
    kw.pop("num_inference_steps")
    pipe = build_pipeline().to("tpu")
    result = {"device": torch.tpu.get_device_name(0) if hasattr(torch.tpu, "get_device_name") else None,
              "steps": args.steps, "modes": {}}
    for mode in args.modes.split(","):
        with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, MODES[mode])):
            _call(pipe, args.steps, kw)  # compiles
            _call(pipe, args.steps, kw)
            marks = []
            _call(pipe, args.steps, kw, marks)
            synced = sorted(b - a for a, b in zip(marks, marks[1:]))
            calls = []
            for _ in range(3):
                t0 = time.perf_counter()
                _call(pipe, args.steps, kw)
                calls.append(time.perf_counter() - t0)
            before = dict(torch_tpu.stats())
            profile = cProfile.Profile()
            profile.enable()
            _call(pipe, args.steps, kw)
            profile.disable()
            after = torch_tpu.stats()
            result["modes"][mode] = {
                "call_s": round(min(calls), 4),
                "step_ms_synchronized_median": round(synced[len(synced) // 2] * 1e3, 2),
                "per_step": {k: round((after[k] - before[k]) / args.steps, 1) for k in before
                             if isinstance(before[k], (int, float)) and after[k] != before[k]},
                "profile_top_own": _top(profile, args.steps),
            }
            print(mode, {k: v for k, v in result["modes"][mode].items() if k != "profile_top_own"}, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_step.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

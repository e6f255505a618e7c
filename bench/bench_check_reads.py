"""What keeping the lineage of pending device-side checks costs the README's main job, and what reading the
checks early saves: the demo pipeline's warm call in strict eager mode, with the early reads on and off,
interleaved in one process (``engine/deferred_errors.read_ready``: every 32nd launch reads the pending checks
if the device has computed them all; off, the text encoders' embedding checks stay pending and every launch
of the denoising loop and the VAE keeps their lineage until the image is read).

    python bench/bench_check_reads.py [--reps 5] [--steps 20] [--out F.json]   # default bench/results/check_reads.json
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default=None)
    return p


def main() -> int:
    args = parser().parse_args()
    import torch

    import torch_tpu
    from torch_tpu.demo.model import build_pipeline, generation_kwargs
    from torch_tpu.engine import poisoned

    kw = generation_kwargs()
    kw.pop("num_inference_steps")
    pipe = build_pipeline().to("tpu")
    pipe.set_progress_bar_config(disable=True)
    marked = [0]
    mark = poisoned._mark

    def counting_mark(outputs, bits):
        marked[0] += 1
        return mark(outputs, bits)

    def call():
        t0 = time.perf_counter()
        pipe(prompt="a red circle", num_inference_steps=args.steps, output_type="np", **kw)
        torch.tpu.synchronize()
        return time.perf_counter() - t0

    reader = poisoned._POLL[0]
    result = {}
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER):
        call()
        call()
        times = {"early_reads": [], "no_early_reads": []}
        marks = {}
        poisoned._mark = counting_mark
        try:
            for _ in range(args.reps):
                for name in times:
                    poisoned._POLL[0] = reader if name == "early_reads" else None
                    marked[0] = 0
                    times[name].append(call())
                    marks[name] = marked[0]
        finally:
            poisoned._POLL[0] = reader
            poisoned._mark = mark
    for name, ts in times.items():
        result[name] = {"call_s_median": statistics.median(ts), "call_s": ts, "marked_launches_per_call": marks[name]}
    result["no_early_reads_over_early_reads"] = (result["no_early_reads"]["call_s_median"]
                                                 / result["early_reads"]["call_s_median"])
    payload = {"platform": torch_tpu.platform(), "steps": args.steps, "reps": args.reps, "results": result}
    write("check_reads", payload, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

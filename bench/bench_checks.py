"""What the device-side checks cost (TORCH_TPU_CHECKS=1, the default, vs 0), measured side by side.

    python bench/bench_checks.py [--size tiny|small] [--rounds 5]

Two workloads, each run alternately with checks on and off in one process (rounds interleaved, medians):
- ``gather_loop``: 200 embedding lookups + index_select per call (index ops only: the worst case);
- ``flux_<size>``: one call of the offline Flux pipeline (4 steps) in strict eager.
Writes bench/results/checks.json with the ratio on/off for each, and what one call launches and reads with
checks on and off (counted: wall time on a shared 2-core machine is noisier than a 3% target).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_tpu
from _common import write
from torch_tpu.testing import tiny_pipelines


def _set_checks(on: bool) -> None:
    import os

    os.environ["TORCH_TPU_CHECKS"] = "1" if on else "0"
    torch_tpu.reset_caches()  # programs are built with or without their checks


def _gather_loop():
    table = torch.randn(1000, 64, device="tpu")
    idx = torch.randint(0, 1000, (32,), device="tpu")
    rows = torch.randint(0, 32, (8,), device="tpu")

    def call():
        out = None
        for _ in range(200):
            out = torch.nn.functional.embedding(idx, table).index_select(0, rows)
        return out.sum().item()

    return call


def _flux(size: str):
    pipe = tiny_pipelines.load_pipeline("flux", size).to("tpu")
    res = {"tiny": 64, "small": 256}[size]

    def call():
        with torch.inference_mode():
            pipe("a red circle", height=res, width=res, num_inference_steps=4, output_type="np",
                 generator=torch.Generator("cpu").manual_seed(0))
        torch.tpu.synchronize()

    return call


# What the checks add, counted (steadier than wall time on a shared machine): programs launched, checked
# launches, host reads of check codes, bytes read to the host.
_WORK = ("executions", "device_checks_run", "device_check_reads", "device_to_host_bytes")


def _measure(call, rounds: int) -> dict:
    times = {True: [], False: []}
    work = {}
    for on in (True, False):  # warm-up compiles, both variants; then what one call launches and reads
        _set_checks(on)
        call()
        before = torch_tpu.stats()
        call()
        after = torch_tpu.stats()
        work["on" if on else "off"] = {k: after[k] - before[k] for k in _WORK}
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            _set_checks(on)
            call()  # rebuild entries (from the compile caches)
            t0 = time.perf_counter()
            call()
            times[on].append(time.perf_counter() - t0)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"checks_on_s": on, "checks_off_s": off, "ratio_on_over_off": on / off, "per_call": work,
            "samples_on": times[True], "samples_off": times[False]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="tiny", choices=("tiny", "small"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = {"gather_loop": _measure(_gather_loop(), args.rounds),
               f"flux_{args.size}": _measure(_flux(args.size), args.rounds)}
    for name, r in results.items():
        print(f"{name:16s} on {r['checks_on_s']*1e3:8.1f} ms  off {r['checks_off_s']*1e3:8.1f} ms  "
              f"ratio {r['ratio_on_over_off']:.3f}  per call on {r['per_call']['on']}  off {r['per_call']['off']}")
    write("checks", {"results": results})


if __name__ == "__main__":
    main()

"""Where a FLUX.1-width transformer call spends the device's time, op by op, in one execution mode.

    python bench/profile/device_ops.py --mode fused --out DIR      # DIR/device_ops_fused.json

Builds the transformer of ``bench/bench_model_width.py`` (width 3072, 24 heads x 128, 4096 image + 512 text
tokens, bf16; here 1 double + 1 single block by default: the blocks repeat), runs it until its programs are
compiled, then records two calls with JAX's profiler and sums the device's events by name for each line of
the device's planes ("XLA Modules": programs, "XLA Ops": the ops inside them). The totals say which fusions,
copies, slices and transposes a mode spends its time on next to the GEMMs and the attention kernel; the
timeline says how long the device was busy and how long it waited for the host between programs (the
Python tracer off, so the host runs at its own speed).
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: bench_model_width


def _timeline(events, calls: int, top: int) -> dict:
    """The device's programs in time order: how long it was busy, how long it waited between programs
    (waiting on the host to launch the next one), and the longest waits with the program that followed."""
    events = sorted(events, key=lambda e: e.start_ns)
    if not events:
        return {}
    busy = sum(e.duration_ns for e in events)
    span = events[-1].start_ns + events[-1].duration_ns - events[0].start_ns
    gaps = collections.Counter()
    waits = []
    for before, after in zip(events, events[1:]):
        gap = after.start_ns - (before.start_ns + before.duration_ns)
        if gap > 0:
            gaps[after.name[:120]] += gap
            waits.append(gap)
    return {"busy_ms_per_call": busy / 1e6 / calls, "span_ms_per_call": span / 1e6 / calls,
            "idle_ms_per_call": (span - busy) / 1e6 / calls, "programs_per_call": len(events) / calls,
            "waits_over_100us_per_call": sum(1 for w in waits if w > 100_000) / calls,
            "idle_before": [{"program": name, "ms_per_call": ns / 1e6 / calls}
                            for name, ns in gaps.most_common(top)]}


def _summarise(logdir: str, calls: int, top: int) -> dict:
    from jax.profiler import ProfileData

    paths = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))
    if not paths:
        return {"error": "no xplane.pb written"}
    data = ProfileData.from_file(paths[-1])
    out = {}
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            totals, counts = collections.Counter(), collections.Counter()
            for event in line.events:
                totals[event.name] += event.duration_ns
                counts[event.name] += 1
            if not totals:
                continue
            rows = [{"name": name[:160], "ms_per_call": ns / 1e6 / calls, "count_per_call": counts[name] / calls}
                    for name, ns in totals.most_common(top)]
            out[f"{plane.name} | {line.name}"] = {"total_ms_per_call": sum(totals.values()) / 1e6 / calls,
                                                  "events_per_call": sum(counts.values()) / calls, "top": rows}
            if line.name == "XLA Modules":
                out[f"{plane.name} | timeline"] = _timeline(list(line.events), calls, top)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("strict", "fused", "compiled"), required=True)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--single-layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--image-tokens", type=int, default=4096)
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.kind = "flux"  # bench_model_width's FLUX.1-width transformer

    import jax
    import torch

    import bench_model_width as flux
    import torch_tpu

    model = flux._model(args).to("tpu")
    inputs = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in flux._inputs(args).items()}
    mode = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "fused": torch_tpu.EagerMode.DEFER_AND_FUSE,
            "compiled": torch_tpu.EagerMode.DEFER_NEVER}[args.mode]
    fn = torch.compile(model, backend="tpu") if args.mode == "compiled" else model
    calls = 2
    with torch.tpu.set_eager_mode(mode), torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(3):
            fn(**inputs)
            torch_tpu.sync()
        warm_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(**inputs)
        torch_tpu.sync()
        call_ms = (time.perf_counter() - t0) / calls * 1e3
        logdir = tempfile.mkdtemp(prefix="device-ops-")
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # the host at its own speed: the timeline shows where the device waits
        jax.profiler.start_trace(logdir, profiler_options=options)
        for _ in range(calls):
            fn(**inputs)
        torch_tpu.sync()
        jax.profiler.stop_trace()
    result = {"mode": args.mode, "platform": torch_tpu.platform(), "date": time.strftime("%Y-%m-%d"),
              "blocks": [args.layers, args.single_layers], "warm_up_s": warm_s, "call_ms": call_ms,
              "lines": _summarise(logdir, calls, args.top)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"device_ops_{args.mode}.json").write_text(json.dumps(result, indent=1))
    print(args.mode, f"call {call_ms:.1f} ms")
    for line, summary in result["lines"].items():
        if line.endswith("timeline"):
            print(f"  {line}: busy {summary['busy_ms_per_call']:.2f} ms, "
                  f"idle {summary['idle_ms_per_call']:.2f} ms per call")
            for row in summary["idle_before"][:10]:
                print(f"    idle {row['ms_per_call']:8.3f} ms before {row['program'][:100]}")
            continue
        print(f"  {line}: {summary['total_ms_per_call']:.2f} ms/call, {summary['events_per_call']:.0f} events")
        for row in summary["top"][:15]:
            print(f"    {row['ms_per_call']:8.3f} ms x{row['count_per_call']:.0f}  {row['name'][:110]}")


if __name__ == "__main__":
    main()

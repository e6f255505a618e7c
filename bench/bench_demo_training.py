"""Demo training benchmark: steps/s of the demo model's two training stages, tpu device vs CPU torch.

The same functions that ``python -m torch_tpu.demo train`` runs (``train_vae``, ``train_transformer``)
run a few steps on each device in one process; the first ``--warm`` steps of each run (compiles) are left
out of the steady-state rate.  The result is a ratio against CPU torch measured in the same run (before
and after the tpu runs).  Modes: eager (strict), fused, compiled (``compile=True``: loss forward +
backward and the optimizer step under torch.compile(backend="tpu"), the rest strict eager),
compiled_fused (the same with fused eager around the compiled parts), compiled_optimizer (only the
optimizer step compiled, forward and backward in strict eager).

    python bench/bench_demo_training.py --steps 8 --warm 3 [--modes eager,fused,compiled] [--stages vae,transformer] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _common  # noqa: E402

# mode -> (eager mode of everything not compiled, torch.compile of the loss (forward + backward),
# torch.compile of the optimizer step)
_MODES = {"eager": ("DEFER_NEVER", False, False), "fused": ("DEFER_AND_FUSE", False, False),
          "compiled": ("DEFER_NEVER", True, True), "compiled_fused": ("DEFER_AND_FUSE", True, True),
          "compiled_optimizer": ("DEFER_NEVER", False, True)}


def _run_stage(stage: str, device: str, steps: int, warm: int, compile: bool = False,
               compile_update: bool = False) -> dict:
    import torch

    from torch_tpu.demo import model, train

    mcfg = model.DemoConfig()
    pipe = model.build_pipeline(mcfg, seed=0)
    pipe.set_progress_bar_config(disable=True)
    pipe.to(device)
    cfg = train.TrainConfig(vae_steps=steps, transformer_steps=steps, warmup=1, log_every=1,
                            latent_cache=4 * train.TrainConfig.transformer_batch)
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    marks: list[float] = []
    compiles: list[int] = []

    def on_step(i):
        sync()
        marks.append(time.perf_counter())
        if device == "tpu":
            import torch_tpu

            compiles.append(torch_tpu.stats()["compiles"])

    t0 = time.perf_counter()
    if stage == "vae":
        train.train_vae(pipe.vae, cfg, device, progress=False, on_step=on_step, compile=compile,
                        compile_update=compile_update)
    else:
        train.fit_latent_stats(pipe.vae, device, seed=5, n=64)
        train.train_transformer(pipe, mcfg, cfg, device, progress=False, on_step=on_step, compile=compile,
                        compile_update=compile_update)
    steady = (marks[-1] - marks[warm - 1]) / (len(marks) - warm) if len(marks) > warm else float("nan")
    row = {"first_step_s": marks[0] - t0 if marks else float("nan"), "steady_s_per_step": steady,
           "steps_per_s": 1.0 / steady}
    if compiles:
        # compiles after each step: must stay flat once the first steps have built their programs
        row["compiles_per_step"] = [b - a for a, b in zip(compiles, compiles[1:])]
    return row


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--modes", default="eager,fused,compiled")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--stages", default="vae,transformer")
    args = p.parse_args()
    import torch

    import torch_tpu

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    modes = [m for m in args.modes.split(",") if m]
    for stage in [s for s in args.stages.split(",") if s]:
        # CPU torch before and after the tpu runs (a shared machine's load drifts): the reference is
        # their mean seconds per step
        before = _run_stage(stage, "cpu", args.steps, args.warm)
        tpus = []
        for mode in modes:
            eager, compile, compile_update = _MODES[mode]
            with torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, eager)):
                tpus.append(_run_stage(stage, "tpu", args.steps, args.warm, compile, compile_update))
        after = _run_stage(stage, "cpu", args.steps, args.warm)
        s_cpu = (before["steady_s_per_step"] + after["steady_s_per_step"]) / 2
        rows.append({"stage": stage, "device": "cpu", **before, "steady_s_per_step": s_cpu,
                     "steps_per_s": 1.0 / s_cpu, "steady_s_per_step_before_after":
                     [before["steady_s_per_step"], after["steady_s_per_step"]]})
        for mode, tpu in zip(modes, tpus):
            rows.append({"stage": stage, "device": f"tpu/{mode}", **tpu,
                         "ratio_vs_cpu": tpu["steps_per_s"] * s_cpu})
        for r in rows[-1 - len(modes):]:
            print(f"{r['stage']:<12s}{r['device']:<12s}{r['steps_per_s']:8.3f} steps/s"
                  + (f"  ({r['ratio_vs_cpu']:.3f}x CPU torch)" if "ratio_vs_cpu" in r else "")
                  + (f"  compiles/step {r['compiles_per_step']}" if "compiles_per_step" in r else ""), flush=True)
    _common.write("demo_training", {"steps": args.steps, "warm": args.warm, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

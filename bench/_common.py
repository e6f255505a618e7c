"""Shared helpers for the benchmarks: timing side by side and writing JSON."""
from __future__ import annotations

import json
import os
import platform as _host
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def time_call(fn, *, repeat: int = 7, number: int | None = None, target_s: float = 0.2, sync=None) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` blocks (auto-sized to ~target_s each)."""
    sync = sync or (lambda: None)
    fn()
    sync()
    if number is None:
        t0 = time.perf_counter()
        fn()
        sync()
        one = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(target_s / one))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def environment() -> dict:
    import torch

    env = {"python": _host.python_version(), "torch": torch.__version__, "machine": _host.machine(),
           "cpus": os.cpu_count()}
    try:
        import jax

        env["jax"] = jax.__version__
        import torch_tpu

        env["platform"] = torch_tpu.platform()
        env["device_name"] = torch.tpu.get_device_name()
    except Exception as exc:  # the environment report must never fail a benchmark
        env["error"] = repr(exc)
    return env


def write(name: str, payload: dict, path: str | Path | None = None, quiet: bool = False,
          env: dict | None = None) -> Path:
    """``payload`` as ``bench/results/NAME.json`` (or ``path``), with the date and the environment (``env``:
    one a child process reported; a benchmark whose children hold the device must not open it itself: on a
    TPU host one process at a time can, and the next child would find the chip taken)."""
    path = Path(path) if path else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "environment": env if env is not None else environment(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    if not quiet:
        print(f"wrote {path}")
    return path

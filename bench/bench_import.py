"""`import torch` time with and without the torch_tpu autoload (target: at most 1.2x without).

    python bench/bench_import.py [--pairs 20]   # writes bench/results/import.json

The two are measured side by side: each pair runs one fresh interpreter without the backend
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0``) and one with it, in alternating order, so a busy moment of a shared
machine falls on both. Two conditions, each its own set of pairs:

* ``bytecode``: compiled bytecode cached, as for an installed package (a private ``PYTHONPYCACHEPREFIX``,
  filled by one warm-up run of each before timing);
* ``source``: the environment as it is (``PYTHONDONTWRITEBYTECODE=1`` on the project's machines), where
  torch_tpu's modules are compiled from source in every process while torch's come from site-packages'
  bytecode.

The ratio reported per condition is the median of the pairs' ratios, of wall seconds and of the child's
CPU seconds (user + system: the steadier of the two on a machine others use at the same time).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import write

_IMPORT = [sys.executable, "-c", "import torch"]


def _seconds(env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh interpreter importing torch; CPU seconds (user + system) are the
    steadier of the two on a shared machine."""
    t0 = time.perf_counter()
    child = subprocess.Popen(_IMPORT, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"import torch failed (status {child.returncode})")
    return wall, usage.ru_utime + usage.ru_stime


def _summary(without: list, with_backend: list) -> dict:
    ratios = [w / wo for w, wo in zip(with_backend, without)]
    return {"without_backend_s": statistics.median(without), "with_backend_s": statistics.median(with_backend),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def _pairs(base_env: dict, pairs: int) -> dict:
    without_env = dict(base_env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    with_env = dict(base_env, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    _seconds(without_env), _seconds(with_env)  # warm the page cache (and the bytecode cache, if any)
    without, with_backend = [], []
    for i in range(pairs):
        order = ((without, without_env), (with_backend, with_env))
        for samples, env in (order if i % 2 == 0 else order[::-1]):
            samples.append(_seconds(env))
    return {"pairs": pairs, "wall": _summary([s[0] for s in without], [s[0] for s in with_backend]),
            "cpu": _summary([s[1] for s in without], [s[1] for s in with_backend])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20, help="alternating pairs per condition (default 20)")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-import-pyc-") as prefix:
        bytecode_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        bytecode_env["PYTHONPYCACHEPREFIX"] = prefix
        results["bytecode"] = _pairs(bytecode_env, args.pairs)
    results["source"] = _pairs(dict(os.environ), args.pairs)
    for name, r in results.items():
        for clock in ("wall", "cpu"):
            c = r[clock]
            print(f"import torch ({name}, {clock} s): {c['without_backend_s']:.3f} without the backend, "
                  f"{c['with_backend_s']:.3f} with it: {c['ratio']:.2f}x (pairs {c['ratio_min']:.2f}-"
                  f"{c['ratio_max']:.2f}, {r['pairs']} pairs)")
    write("import", {**results, "target_ratio": 1.2})


if __name__ == "__main__":
    main()

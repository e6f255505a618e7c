"""`import torch` time with and without the torch_tpu autoload (target: at most 20% slower).

    python bench/bench_import.py         # writes bench/results/import.json
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from _common import write


def _time_import(autoload: bool, runs: int = 7) -> float:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    # interleave to share the machine's noise fairly
    without = _time_import(False, 1)
    with_backend = _time_import(True, 1)
    without = statistics.median([_time_import(False, 3), without])
    with_backend = statistics.median([_time_import(True, 3), with_backend])
    ratio = with_backend / without
    print(f"import torch: {without:.3f} s without the backend, {with_backend:.3f} s with it ({ratio:.2f}x)")
    write("import", {"import_torch_s_without_backend": without, "import_torch_s_with_backend": with_backend,
                     "ratio": ratio, "target_ratio": 1.2})


if __name__ == "__main__":
    main()

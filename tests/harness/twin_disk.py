"""Twins across processes through the persistent program cache: ``python twin_disk.py ROLE MODE PATTERN``
runs, in one process, call A (ROLE=a) or call B (ROLE=b) of every hand-written twin whose name holds
PATTERN (``twin_cases.all_twins``; ``op_`` for OpInfo twins), in MODE (strict or fused), comparing each
to CPU torch; prints one line per problem and then ``DONE n``. With TORCH_TPU_CACHE_DIR shared, the
second process finds the first one's programs (and op descriptions, graph sets) on disk by key."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401
from tests.harness import twin_cases, twins  # noqa: E402
from tests.harness.modes import _in_mode  # noqa: E402


def main(role, mode, pattern, limit=10 ** 9):
    src = twin_cases.opinfo_twins(int(os.environ.get("OPS", "60"))) if pattern.startswith("op_") \
        else twin_cases.all_twins()
    cases = [t for t in src if any(p in t.name for p in pattern.split(","))][:limit]
    n = 0
    for tw in cases:
        call = tw.a if role == "a" else tw.b
        n += 1
        with _in_mode(mode):
            probs = twins._compare(f"{tw.name} {role} {mode}", twins._call(call[0], call[1], "cpu", mode, {}),
                                   twins._call(call[0], call[1], "tpu", mode, {}), tw.tol)
        for p in probs:
            print("PROBLEM", p, flush=True)
    print("DONE", n, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 10 ** 9)

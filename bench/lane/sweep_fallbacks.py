"""Which OpInfos reach an op without a tpu lowering (not a test): every OpInfo of torch's database whose
name the op table does not lower directly runs its first sample on the tpu with TORCH_TPU_CPU_FALLBACK=1;
the ops counted in ``stats()["cpu_fallback_ops"]`` are printed per OpInfo with whether the result matched
CPU torch. ``tests/eager/test_cpu_fallback.py``'s ``FALLBACK`` is this list: rerun after a torch upgrade or a new
lowering and update it.

    TORCH_TPU_CPU_FALLBACK=1 PYTHONPATH=$PWD python3 bench/lane/sweep_fallbacks.py [--out /tmp/fallbacks.jsonl]

One process, about 20 minutes on 2 CPU cores (each OpInfo compiles its programs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root (bench/lane/): tests.harness


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="also write one JSON line per OpInfo here")
    args = ap.parse_args()
    if os.environ.get("TORCH_TPU_CPU_FALLBACK") != "1":
        sys.exit("set TORCH_TPU_CPU_FALLBACK=1")
    warnings.simplefilter("ignore")
    import torch
    from torch.utils import _pytree as pytree

    from tests.harness.counting import opinfo_db
    import torch_tpu
    import torch_tpu.ops as tpu_ops
    from torch_tpu.ops.registry import LOWERINGS

    tpu_ops.load()
    lowered = {k._schema.name.split("::", 1)[1] for k in LOWERINGS}
    out = open(args.out, "w") if args.out else None
    found = {}
    for op in opinfo_db():
        if (op.aten_name or op.name) in lowered:
            continue
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        dts = [d for d in (torch.float32, torch.int64, torch.bool, torch.complex64)
               if d in op.supported_dtypes("cpu")][:1]
        if not dts:
            continue
        rec = {"name": name, "dtype": str(dts[0])}
        t0 = time.time()
        try:
            sample = next(iter(op.sample_inputs("cpu", dts[0], requires_grad=False)))
            torch.manual_seed(0)
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception as exc:  # not valid on CPU torch either
            rec["cpu_error"] = str(exc)[:200]
        else:
            move = lambda x: x.to("tpu") if isinstance(x, torch.Tensor) else x  # noqa: E731
            before = torch_tpu.stats()["cpu_fallback_ops"]
            try:
                torch.manual_seed(0)
                got = op(pytree.tree_map(move, sample.input), *pytree.tree_map(move, sample.args),
                         **pytree.tree_map(move, sample.kwargs))
                got = pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, got)
                torch.testing.assert_close(got, expected, equal_nan=True, atol=1e-4, rtol=1e-4, check_device=False)
                rec["match"] = True
            except Exception as exc:
                rec["tpu_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            after = torch_tpu.stats()["cpu_fallback_ops"]
            rec["fallbacks"] = sorted(k for k, v in after.items() if v != before.get(k, 0))
            if rec["fallbacks"]:
                found[name] = rec
        rec["seconds"] = round(time.time() - t0, 2)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
    for name, rec in sorted(found.items()):
        print(f"{name:45s} {'ok' if rec.get('match') else rec.get('tpu_error', '')[:60]:20s} {rec['fallbacks']}")


if __name__ == "__main__":
    main()

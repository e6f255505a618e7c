"""``import torch`` (which autoloads torch_tpu) loads what registering the device needs and nothing more:
neither JAX nor the op path (the op table's checks, argument handling, rewrites); they load at the first
device use. Timed side by side in bench/bench_import.py."""
import os
import sys
from tests.harness import hangs

DEFERRED = ("jax", "torch_tpu.eager.op_path", "torch_tpu.eager.rewrites", "torch_tpu.eager.arguments",
            "torch_tpu.parity", "torch_tpu.parity.refusals", "torch_tpu.parity.validators")

_CHILD = f"""
import sys
import torch
deferred = {DEFERRED!r}
print("AT_IMPORT", sorted(m for m in deferred if m in sys.modules))
print("TPU_REGISTERED", "torch_tpu._registration" in sys.modules and hasattr(torch, "tpu"))
x = torch.ones(3, device="tpu")
with torch.autocast("tpu"):
    y = (x[:, None] @ x[None, :]).sum(1)
print("VALUES", y.dtype, y.cpu().tolist())
print("AFTER_USE", sorted(m for m in deferred if m not in sys.modules))
"""


def test_import_torch_defers_jax_and_the_op_path():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    out = hangs.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["TPU_REGISTERED"] == "True"
    assert lines["AT_IMPORT"] == "[]", f"loaded by import torch: {lines['AT_IMPORT']}"
    # autocast's kernels resolve their op at the first call: matmul in bfloat16, sum in float32 (CUDA's policy)
    assert lines["VALUES"] == "torch.float32 [3.0, 3.0, 3.0]", lines["VALUES"]
    assert lines["AFTER_USE"] == "[]", f"still not loaded after the first op: {lines['AFTER_USE']}"

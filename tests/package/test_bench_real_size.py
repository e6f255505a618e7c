"""``bench/bench_real_size.py --tiny``: the real-size benchmark's paths run on the CPU at tiny sizes (the lead runs
the real sizes on the chip: a script that breaks there costs a chip session), write their JSON and image, and read
no weight back from the device."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_run_writes_results_and_images(tmp_path):
    out = tmp_path / "real_size.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    paths = "flux_bf16_group_offload,flux_bf16_model_offload,transfers"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_real_size.py"), "--tiny", "--paths", paths,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "real_size" and set(result["paths"]) == set(paths.split(","))
    for name in paths.split(",")[:2]:
        r = result["paths"][name]
        assert "error" not in r, r["error"]
        assert Path(r["image"]).exists() and r["image_s"] > 0 and len(r["step_s"]) == 2
        assert r["host_to_device_bytes"] > 0 and r["device_to_host_bytes"] == 64 * 64 * 3 * 2  # the bf16 image alone
    t = result["paths"]["transfers"]
    assert "error" not in t and t["float32_d2h_gib_s_torch"] > 0 and t["bfloat16_d2h_gib_s_jax"] > 0

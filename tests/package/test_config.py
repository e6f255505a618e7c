"""Settings: every TORCH_TPU_* variable parsed in one place; a bad value is named, never a crash of
``import torch``."""
import os
import sys

import pytest

from torch_tpu import config
from tests.harness import hangs


@pytest.mark.parametrize("name, value", [
    ("TORCH_TPU_FUSED_MAX_NODES", "abc"), ("TORCH_TPU_FUSED_MAX_NODES", "2.5"),
    ("TORCH_TPU_FUSED_MAX_NODES", ""), ("TORCH_TPU_FUSED_MAX_NODES", "0"),
    ("TORCH_TPU_DEFER_AND_FUSE", "maybe"), ("TORCH_TPU_PLATFORM", "quantum"),
    ("TORCH_TPU_DIST_TIMEOUT", "-3"), ("TORCH_TPU_DEVICE_INDEX", "first"),
    ("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "rotary,flash"),
])
def test_bad_value_names_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(config.ConfigError) as info:
        config.settings()
    assert name in str(info.value) and repr(value) in str(info.value)


def test_values_and_defaults(monkeypatch):
    for var in config.VARIABLES:
        monkeypatch.delenv(var.name, raising=False)
    s = config.settings()
    assert s.fused_max_nodes == 2000 and s.dist_timeout_s == 60.0 and not s.defer_and_fuse
    assert s.platform is None and s.device_index is None and s.cache_dir is None
    assert s.sequence_major_kernels == {"rotary", "attention"}  # programs built for a TPU take both kernels
    monkeypatch.setenv("TORCH_TPU_FUSED_MAX_NODES", " 64 ")
    monkeypatch.setenv("TORCH_TPU_DEFER_AND_FUSE", "true")
    monkeypatch.setenv("TORCH_TPU_PLATFORM", "GPU")
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", "")
    monkeypatch.setenv("TORCH_TPU_SEQUENCE_MAJOR_KERNELS", "None")
    s = config.settings()  # re-read: the environment changed
    assert s.fused_max_nodes == 64 and s.defer_and_fuse and s.platform == "cuda"
    assert s.sequence_major_kernels == frozenset()
    assert config.compile_cache_dir() is None
    assert set(config.in_effect()) == {"TORCH_TPU_FUSED_MAX_NODES", "TORCH_TPU_DEFER_AND_FUSE",
                                       "TORCH_TPU_PLATFORM", "TORCH_TPU_CACHE_DIR", "TORCH_TPU_SEQUENCE_MAJOR_KERNELS"}


def test_every_variable_is_documented():
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    missing = [v.name for v in config.VARIABLES if v.name not in readme]
    assert not missing, f"README has no row for {missing}"


def test_malformed_setting_does_not_break_import_torch():
    code = ("import warnings, torch\n"
            "try:\n"
            "    torch.ones(2, device='tpu')\n"
            "except Exception as e:\n"
            "    print('ERR', type(e).__name__, e)\n")
    out = hangs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TORCH_TPU_FUSED_MAX_NODES="abc"))
    assert out.returncode == 0, out.stderr
    assert "TORCH_TPU_FUSED_MAX_NODES='abc'" in out.stderr  # the warning at import torch
    assert "ERR ConfigError TORCH_TPU_FUSED_MAX_NODES='abc'" in out.stdout, out.stdout


def test_reset_caches_empties_every_cache():
    import torch

    import torch_tpu
    from torch_tpu.runtime import caches

    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    (x.t() * 2)[0].cpu()  # an op entry, a view, a view-read program
    assert sum(caches.sizes().values()) > 0
    torch_tpu.reset_caches()
    assert {k: n for k, n in caches.sizes().items() if n} == {}
    torch.testing.assert_close((x.t() * 2)[0].cpu(), torch.tensor([0.0, 6.0]))  # rebuilt on demand

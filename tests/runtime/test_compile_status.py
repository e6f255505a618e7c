"""The live 'compiling ...' status line (TORCH_TPU_COMPILE_STATUS): a compilation that runs past the
threshold is announced on stderr with its end, a short one says nothing, 0 silences it; the CLI's
runs show it and --quiet hides it (tests/test_cli.py)."""
import time

import torch

import torch_tpu
from torch_tpu.runtime import compile_status


def test_a_long_compilation_is_announced_and_a_short_one_is_not(monkeypatch, capsys):
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.05")
    with compile_status.compiling("a slow program"):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "torch_tpu: compiled a slow program in" in err, err
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "60")
    with compile_status.compiling("a quick program"):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "0")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.05")
    with compile_status.compiling("a silenced program"):
        time.sleep(0.3)
    assert capsys.readouterr().err == ""


def test_a_real_compilation_names_the_program(monkeypatch, capsys, tmp_path):
    """A fused graph compiled by XLA (empty disk cache, threshold 0): its name is on the status line."""
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.000001")
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    torch_tpu.reset_caches()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 3)).to("tpu")
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        model(torch.randn(5, 8).to("tpu") * 1.25).sum().item()
    err = capsys.readouterr().err
    assert "torch_tpu: compiled fused.Sequential in" in err, err

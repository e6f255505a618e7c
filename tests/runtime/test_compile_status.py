"""The live 'compiling ...' status line (TORCH_TPU_COMPILE_STATUS): a compilation that runs past the
threshold is announced on stderr with its end, a short one says nothing, 0 silences it; the CLI's
runs show it and --quiet hides it (tests/cli/test_cli.py)."""
import re
import time

import pytest
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


class _ManySmallOps(torch.nn.Module):
    """Strict eager builds one small program per op and shapes: none takes a second, together they may."""

    def forward(self, x):
        for k in range(12):
            x = torch.sin(x[: 40 - k]) * (k + 2) + torch.cos(x[: 40 - k])
        return x


def _stage_lines(err: str, stage: str) -> tuple:
    running = re.findall(rf"torch_tpu: compiling {stage} with XLA: (\d+) programs so far, ([\d.]+) s", err)
    total = re.findall(rf"torch_tpu: compiled (\d+) programs for {stage} \(([\d.]+) s of XLA compilation\)", err)
    return running, total


def test_a_stage_of_many_small_programs_is_counted_and_named_after_its_module(monkeypatch, capsys, fresh_programs):
    """A cold first call of many small programs, each under the threshold: the stage (the outermost module,
    by its class) gets a running count once its programs add up past the threshold, and its total at the
    end, which counts the programs the call compiled."""
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.05")
    monkeypatch.setattr(compile_status, "_QUIET_S", 3600.0)  # the test says when the stage is over
    model = _ManySmallOps()
    x = torch.randn(40).to("tpu")
    torch.tpu.synchronize()
    before = torch_tpu.stats()["compiles"]
    model(x).cpu()
    compiled = torch_tpu.stats()["compiles"] - before  # (.cpu() waited for them)
    compile_status.close_stages()
    err = capsys.readouterr().err
    running, total = _stage_lines(err, "_ManySmallOps")
    assert running and len(total) == 1, err
    assert int(running[0][0]) >= 2 and float(running[0][1]) >= 0.05
    count = int(total[0][0])
    # the model's programs: all but the read's; at least one per iteration
    assert 12 <= count <= compiled and count >= int(running[-1][0]), (err, compiled)
    model(x).cpu()  # warm: nothing compiles, nothing is said
    compile_status.close_stages()
    assert "programs" not in capsys.readouterr().err


def test_the_stage_of_code_outside_modules_is_its_function(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")

    def prepare_latents():
        return compile_status.stage()

    class Outer(torch.nn.Module):
        def forward(self):
            return Inner()()

    class Inner(torch.nn.Module):
        def forward(self):
            return compile_status.stage()

    assert prepare_latents().endswith("prepare_latents")
    assert Outer()() == "Outer"  # the outermost module
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "0")
    assert compile_status.stage() is None  # (off: no stack is walked)


def test_a_stage_that_went_quiet_is_closed_when_another_begins(monkeypatch, capsys):
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.02")
    monkeypatch.setattr(compile_status, "_QUIET_S", 3600.0)
    for _ in range(3):
        with compile_status.compiling("op", "TextEncoder"):
            time.sleep(0.02)
    with compile_status.compiling("op", "Transformer"):
        pass
    err = capsys.readouterr().err
    assert re.search(r"compiled 3 programs for TextEncoder \(0\.\d s of XLA compilation\)", err), err
    assert "for Transformer" not in err  # one quick program: nothing to say
    compile_status.close_stages()


def test_a_compiled_graph_is_named_after_its_module_or_function(monkeypatch, capsys, fresh_programs):
    """diffusers wraps its transformers' forward in a decorator (``apply_lora_scale``), and every compiled
    transformer graph was named after it, "compiled.wrapper.inference", where fused mode names the module."""
    diffusers_peft = pytest.importorskip("diffusers.utils.peft_utils")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS", "1")
    monkeypatch.setenv("TORCH_TPU_COMPILE_STATUS_AFTER", "0.000001")

    class TinyTransformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        @diffusers_peft.apply_lora_scale("joint_attention_kwargs")
        def forward(self, x, joint_attention_kwargs=None):
            return self.proj(x).relu()

    model = TinyTransformer().to("tpu")
    model.compile(backend="tpu", fullgraph=True, dynamic=False)
    torch._dynamo.reset()
    with torch.no_grad():
        model(torch.randn(2, 4).to("tpu")).cpu()

    def train_step(x):
        return model.proj(x).square().sum()

    torch.compile(train_step, backend="tpu", dynamic=False)(torch.randn(3, 4).to("tpu")).backward()
    err = capsys.readouterr().err
    assert "compiled compiled.TinyTransformer.inference in" in err, err
    assert "compiled compiled.train_step.forward in" in err and "compiled compiled.train_step.backward in" in err
    assert "wrapper" not in err

"""A compiled module's first call in a later process traces nothing (``compile/warm_start.py``), and nothing
stale ever runs: a changed model file, a changed global the forward reads, a parameter of another shape or
dtype, an attribute the forward reads, another setting each make the module traced again. Every result is
compared with CPU torch; counters say whether the call was traced (``module_captures``) or read from disk
(``module_loads``). No timing."""
import copy
import json
import os
import sys

import pytest
import torch

import torch_tpu
from tests.harness import hangs

pytestmark = pytest.mark.slow

_MODEL = '''
import torch

SCALE = {scale}


def helper(x):
    return x * SCALE


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.gain = 1.5

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) * self.gain{block_extra}


class Net(torch.nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(depth)])
        self.out = torch.nn.Linear(width, 4)

    def forward(self, x):
        h = helper(x)
        for block in self.blocks:
            h = block(h) + h
        return self.out(h)
'''

_RUN = r'''
import copy, json, os, sys
import torch, torch_tpu
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netmod
from torch_tpu.runtime import disk_cache


def one(cfg):
    torch.set_float32_matmul_precision(cfg.get("precision", "highest"))
    torch.manual_seed(0)
    width = cfg.get("width", 16)
    net = netmod.Net(width, cfg.get("depth", 2)).to(getattr(torch, cfg.get("dtype", "float32")))
    if "gain" in cfg:
        for block in net.blocks:
            block.gain = cfg["gain"]
    x = torch.randn(3, width).to(net.out.weight.dtype)
    with torch.no_grad():
        ref = copy.deepcopy(net).float()(x.float())
    tnet = copy.deepcopy(net).to("tpu")
    if cfg.get("regional"):  # what diffusers' compile_repeated_blocks does: each block compiled on its own
        for block in tnet.blocks:
            block.compile(backend="tpu", fullgraph=True, dynamic=False)
    else:
        tnet.compile(backend="tpu", fullgraph=True, dynamic=False)
    torch_tpu.reset_stats()
    outs = []
    for _ in range(2):
        with torch.no_grad():
            outs.append(tnet(x.to("tpu")).cpu().float().tolist())
    return {"outs": outs, "ref": ref.tolist(), "stats": torch_tpu.stats()}


# several models, one after the other in this process: each one's counters are its own
results = [one(cfg) for cfg in json.loads(os.environ["NET_CFGS"])]
disk_cache.flush_writes()
print(json.dumps(results))
'''


def _write_model(folder, scale=2.0, block_extra=""):
    (folder / "netmod.py").write_text(_MODEL.format(scale=scale, block_extra=block_extra))


def _runs(folder, cfgs, env_extra=None):
    """One new process computing each model of ``cfgs`` in turn (compared with CPU torch); each one's counters."""
    (folder / "run.py").write_text(_RUN)
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(folder / "cache"), NET_CFGS=json.dumps(cfgs),
               PYTHONDONTWRITEBYTECODE="1", **(env_extra or {}))
    out = hangs.run([sys.executable, str(folder / "run.py")], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    stats = []
    for cfg, result in zip(cfgs, json.loads(out.stdout.strip().splitlines()[-1]), strict=True):
        ref = torch.tensor(result["ref"])
        tol = 2e-2 if cfg.get("dtype") == "bfloat16" else 1e-5
        for got in result["outs"]:
            torch.testing.assert_close(torch.tensor(got), ref, atol=tol * max(1.0, float(ref.abs().max())), rtol=tol,
                                       msg=lambda m, cfg=cfg: f"{cfg}: {m}")
        stats.append(result["stats"])
    return stats


def _run(folder, env_extra=None, **cfg):
    return _runs(folder, [cfg], env_extra)[0]


def _traced(stats, captures=1, what=""):
    assert stats["module_captures"] == captures and stats["module_loads"] == 0, (what, stats)


def _read(stats, loads=1, what=""):
    assert stats["module_loads"] == loads and stats["module_captures"] == 0, (what, str({k: v for k, v in stats.items() if v}))
    assert stats["compiles"] == 0 and stats["graph_compiles"] == 0, (what, stats)  # nothing traced, lowered or built


def test_a_second_process_reads_the_traced_module_and_matches_cpu(tmp_path):
    _write_model(tmp_path)
    ways = {"module": {}, "regional": {"regional": True}}
    for what, stats in zip(ways, _runs(tmp_path, list(ways.values()))):
        _traced(stats, what=what)  # (its second call reuses the capture: one per process)
    for _ in range(2):
        for what, stats in zip(ways, _runs(tmp_path, list(ways.values()))):
            _read(stats, what=what)


def test_a_changed_model_file_is_traced_again(tmp_path):
    _write_model(tmp_path)
    _traced(_run(tmp_path))
    _write_model(tmp_path, block_extra=" - 0.25")  # the forward's own source changed
    _traced(_run(tmp_path))
    _read(_run(tmp_path))


def test_a_changed_global_the_forward_reads_is_traced_again(tmp_path):
    # SCALE is outside every traced function's source: dynamo's guard on the global (one it cannot save)
    # is checked from the value described when the entry was made
    _write_model(tmp_path, scale=2.0)
    _traced(_run(tmp_path))
    _write_model(tmp_path, scale=3.0)
    _traced(_run(tmp_path))


_CHANGES = {"parameter_shape": {"width": 8}, "structure": {"depth": 3}, "parameter_dtype": {"dtype": "bfloat16"},
            "attribute_read": {"gain": 0.5}, "precision": {"precision": "high"}}


def test_a_changed_module_or_setting_is_traced_again(tmp_path):
    # every changed model in one process after the first (a process per change cost 20 processes): each one is
    # traced, none served by the first's entry; a third process reads each one's entry, and the first's (the
    # first's and attribute_read's entries share one disk key: the key's entries the earlier call did not use
    # are tried before a later call is traced, which once traced the unchanged model again)
    _write_model(tmp_path)
    _traced(_run(tmp_path))
    changed = list(_CHANGES.values())
    for what, stats in zip(_CHANGES, _runs(tmp_path, changed)):
        _traced(stats, what=what)
    for what, stats in zip([*_CHANGES, "unchanged"], _runs(tmp_path, [*changed, {}])):
        _read(stats, what=what)


def test_a_changed_torch_tpu_setting_is_traced_again(tmp_path):
    _write_model(tmp_path)
    _traced(_run(tmp_path))
    _traced(_run(tmp_path, env_extra={"TORCH_TPU_CHECKS": "0"}))


def test_a_stale_program_makes_the_entry_unused(tmp_path):
    # the disk cache lost the graph's program: the kept entry is not used, the module is traced again
    _write_model(tmp_path)
    _traced(_run(tmp_path))
    from torch_tpu.runtime import disk_cache

    for f in (tmp_path / "cache").glob("*.ttpc"):
        if b"program-by-module" in f.read_bytes()[:400]:
            f.unlink()
    stats = _run(tmp_path)
    _traced(stats)
    assert stats["compiles"] > 0, stats
    assert disk_cache  # (imported for its file format only)


# -------------------------------------------------------------------------------------------------
# In one process
# -------------------------------------------------------------------------------------------------
class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        return self.lin(x) * _FACTOR[0] + _OFFSET


_FACTOR = [2.0]
_OFFSET = 1.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path / "cache"))
    from torch_tpu.compile import warm_start

    warm_start.reset()
    yield
    warm_start.reset()


def _on_tpu_compiled(net):
    """A copy of ``net`` on the tpu under ``module.compile(backend="tpu", fullgraph=True)`` (warm start's path)."""
    tnet = copy.deepcopy(net).to("tpu")
    tnet.compile(backend="tpu", fullgraph=True, dynamic=False)
    return tnet


def test_a_global_changed_between_calls_is_seen(cache):
    global _OFFSET
    torch.manual_seed(0)
    net = _Scaled()
    x = torch.randn(4, 6)
    tnet = _on_tpu_compiled(net)
    before = torch_tpu.stats()["module_captures"]
    try:
        for offset in (1.0, -3.0, 1.0):
            _OFFSET = offset
            _FACTOR[0] = offset * 2
            with torch.no_grad():
                torch.testing.assert_close(tnet(x.to("tpu")).cpu(), net(x) * 0 + net.lin(x) * _FACTOR[0] + offset)
    finally:
        _OFFSET, _FACTOR[0] = 1.0, 2.0
    assert torch_tpu.stats()["module_captures"] - before == 2  # one per value; the third call reused the first


def test_calls_needing_autograd_compile_as_usual(cache):
    torch.manual_seed(0)
    net = _Scaled()
    x = torch.randn(4, 6)
    tnet = _on_tpu_compiled(net)
    before = torch_tpu.stats()["module_captures"]
    out = tnet(x.to("tpu"))
    out.sum().backward()
    net(x).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), net(x).detach())
    torch.testing.assert_close(tnet.lin.weight.grad.cpu(), net.lin.weight.grad)
    assert torch_tpu.stats()["module_captures"] == before


def test_a_module_of_a_class_defined_in_a_function_compiles_as_usual(cache):
    """torch's package keeps only classes defined at a module's top level (its guards raised TypeError for a
    class defined in a test or a notebook cell's function): such a module compiles as ``torch.compile`` does,
    traced once, and computes CPU torch's values."""
    class Local(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(x).relu() * 2

    torch.manual_seed(0)
    net = Local()
    x = torch.randn(4, 6)
    tnet = _on_tpu_compiled(net)
    torch._dynamo.reset()
    before = torch_tpu.stats()["module_captures"]
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(tnet(x.to("tpu")).cpu(), net(x))
    assert torch_tpu.stats()["module_captures"] == before  # not captured for the disk
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1  # traced once, by dynamo

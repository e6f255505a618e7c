"""The TPU lane (bench/tpu_lane.py) runs benchmark scripts on a machine with little device time to spare: a
script refusing the lane's arguments there loses the whole step (the lane once passed ``--out`` to scripts
that had no such option). The arguments are checked here, where it costs nothing."""
import argparse
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module(name):
    spec = importlib.util.spec_from_file_location(f"bench_script_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LANE = _module("tpu_lane")


@pytest.mark.parametrize("name", sorted(LANE.BENCH_ARGS))
def test_every_script_the_lane_runs_accepts_its_arguments(name, tmp_path):
    out = tmp_path / f"{name}.json"
    args = _module(f"bench_{name}").parser().parse_args(["--out", str(out), *LANE.BENCH_ARGS[name]])
    assert Path(args.out) == out


def test_a_benchmark_json_goes_where_it_is_told(tmp_path):
    common = _module("_common")
    path = common.write("lane_check", {"value": 3}, path=tmp_path / "deep" / "x.json", quiet=True)
    assert path == tmp_path / "deep" / "x.json"
    text = path.read_text()
    assert '"benchmark": "lane_check"' in text and '"value": 3' in text


def _poisoned_empty_like(torch, monkeypatch):
    """``torch.empty_like`` (what ``Module.to_empty`` allocates with) filling floating tensors with NaN: memory
    left uninitialized reads as NaN every time, not only when the heap happens to hold NaN."""
    real = torch.empty_like

    def empty_like(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty_like", empty_like)


def test_the_width_benchmark_models_keep_the_buffers_their_constructor_computed(tmp_path, monkeypatch):
    """bench_model_width built its models with ``to_empty`` and seeded only the parameters: SD3's pos_embed (a
    buffer the constructor computes) was uninitialized memory, NaN in about one run in ten, so strict eager's
    error against CPU torch read NaN (a wrong result blamed on the backend), and the workers' model, loaded from
    the saved file, held the constructor's float32 embedding where the parent's reference held garbage. The
    parent's model and a worker's hold the same tensors: diffusers' pos_embed, in bf16."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("accelerate")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    width = _module("bench_model_width")
    args = argparse.Namespace(kind="sd3", layers=1, single_layers=0, heads=1, image_tokens=16, text_tokens=4)
    expected = diffusers.SD3Transformer2DModel(**width._config(args)).pos_embed.pos_embed.to(torch.bfloat16)
    assert expected.abs().max() > 0.5  # (sines and cosines of the positions)
    _poisoned_empty_like(torch, monkeypatch)

    parent = width._model(args)
    assert torch.equal(parent.pos_embed.pos_embed, expected)
    assert all(not p.isnan().any() for p in parent.parameters())

    args.weights = str(tmp_path / "weights.safetensors")
    safetensors_torch.save_file(parent.state_dict(), args.weights)
    worker = width._load_model(args)
    held = {**dict(parent.named_parameters()), **dict(parent.named_buffers())}
    loaded = {**dict(worker.named_parameters()), **dict(worker.named_buffers())}  # (non-persistent buffers too)
    assert sorted(loaded) == sorted(held)
    for name, t in held.items():
        assert loaded[name].dtype == t.dtype, name
        assert torch.equal(loaded[name], t), name

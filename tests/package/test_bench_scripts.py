"""The TPU lane (bench/lane/tpu_lane.py) runs benchmark scripts on a machine with little device time to spare: a
script refusing the lane's arguments there loses the whole step (the lane once passed ``--out`` to scripts
that had no such option). The arguments are checked here, where it costs nothing; so is bench/README.md, the
page that says which script answers which question."""
import argparse
import importlib.util
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
ROOT = BENCH.parent
# bench/ itself: the user benchmarks; its folders: profilers, the chip lane and sweeps, the chip probes
FOLDERS = {"profile", "lane", "probes", "results"}


def _module(name):
    """The bench script ``bench/NAME.py`` (NAME may be in a folder: ``lane/tpu_lane``) as a module."""
    spec = importlib.util.spec_from_file_location(f"bench_script_{name.replace('/', '_')}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LANE = _module("lane/tpu_lane")


@pytest.mark.parametrize("name", sorted(LANE.BENCH_ARGS))
def test_every_script_the_lane_runs_accepts_its_arguments(name, tmp_path):
    out = tmp_path / f"{name}.json"
    args = _module(f"bench_{name}").parser().parse_args(["--out", str(out), *LANE.BENCH_ARGS[name]])
    assert Path(args.out) == out


def test_every_lane_step_has_its_function_and_its_scripts_exist():
    """A step named in STEPS without its ``step_`` function, or a script moved away from the path the lane runs,
    would fail on the chip only."""
    for name in LANE.STEPS:
        assert callable(getattr(LANE, f"step_{name}", None)), name
    source = (BENCH / "lane" / "tpu_lane.py").read_text()
    named = set(re.findall(r"bench/[\w/]+\.py", source))
    assert named, "the lane names no script"
    for path in sorted(named):
        assert (ROOT / path).is_file(), f"tpu_lane.py runs {path}, which does not exist"
    for name in LANE.BENCH_ARGS:
        assert (BENCH / f"bench_{name}.py").is_file(), name


def test_bench_holds_benchmarks_and_its_readme_lists_every_script():
    """bench/ is what a user runs to measure the product: every script in it and in its folders has its line in
    bench/README.md (which question it answers), and every script the page names exists."""
    readme = (BENCH / "README.md").read_text()
    folders = {p.name for p in BENCH.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders <= FOLDERS, f"bench/ has folders the README does not describe: {sorted(folders - FOLDERS)}"
    scripts = [p.relative_to(BENCH).as_posix() for p in BENCH.glob("*.py")]
    scripts += [p.relative_to(BENCH).as_posix() for folder in FOLDERS - {"results"} for p in (BENCH / folder).glob("*.py")]
    assert "bench_model_width.py" in scripts and "lane/tpu_lane.py" in scripts
    for script in scripts:
        if script == "_common.py":
            assert "`_common.py`" in readme
            continue
        assert re.search(rf"^\| `{re.escape(script)}` \| \S", readme, re.M), f"bench/README.md has no line for {script}"
        if "/" not in script:
            assert script.startswith("bench_"), f"{script}: a user benchmark is named bench_*.py"
    for named in re.findall(r"^\| `([\w/]+\.py)` \|", readme, re.M):
        assert (BENCH / named).is_file(), f"bench/README.md lists {named}, which does not exist"


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


def test_real_size_weights_are_made_whole_tied_and_8_bit_without_a_full_precision_model():
    """bench_real_size builds FLUX.1's transformer and T5-XXL on the chip's host only through its big-model path
    (its ``--tiny`` smoke test takes the small one): a tiny FLUX transformer and T5 through that path must come out
    with every tensor allocated, T5's tied embedding tied, every block's linear weights 8-bit, and run on CPU torch."""
    import torch

    real_size = _module("bench_real_size")
    configs = real_size._flux_configs(True)
    flux = real_size._on_host(lambda: __import__("diffusers").FluxTransformer2DModel(**configs["transformer"]), 3,
                              torch.bfloat16, True, convert=real_size._int8)
    t5 = real_size._t5(dict(configs["t5"], num_layers=3), 2, torch.bfloat16, True, convert=real_size._int8)
    for model in (flux, t5):
        assert all(t.device.type == "cpu" for t in list(model.parameters()) + list(model.buffers()))
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert linears and all(type(m.weight) is not torch.nn.Parameter for m in linears), model
    assert t5.encoder.embed_tokens.weight is t5.shared.weight
    # the blocks alike share their random weights as copies, not as one object
    second, third = t5.encoder.block[1], t5.encoder.block[2]
    assert second is not third and second.layer[0].SelfAttention.q.weight is not third.layer[0].SelfAttention.q.weight
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        out = flux(hidden_states=torch.randn(1, 16, 16, generator=g).bfloat16(),
                   encoder_hidden_states=torch.randn(1, 8, 64, generator=g).bfloat16(),
                   pooled_projections=torch.randn(1, 32, generator=g).bfloat16(), timestep=torch.tensor([0.5]),
                   img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(8, 3), return_dict=False)[0]
        encoded = t5(torch.tensor([[3, 4, 5, 1]])).last_hidden_state
    assert out.shape == (1, 16, 16) and torch.isfinite(out.float()).all()
    assert encoded.shape == (1, 4, 64) and torch.isfinite(encoded.float()).all()

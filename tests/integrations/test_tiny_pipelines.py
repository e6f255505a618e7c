"""Tests for torch_tpu.testing.tiny_pipelines: tiny real diffusers pipelines built offline, run on CPU."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from torch_tpu.testing import tiny_pipelines as tp

RES = 64
STEPS = 2


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-pipelines")


@pytest.fixture(scope="module")
def pipes(root):
    cache = {}

    def get(kind, dtype=torch.float32):
        key = (kind, dtype)
        if key not in cache:
            cache[key] = tp.load_pipeline(kind, "tiny", dtype=dtype, root=root)
        return cache[key]

    return get


def _run(pipe, prompt, **kwargs):
    generator = torch.Generator("cpu").manual_seed(0)
    out = pipe(
        prompt=prompt,
        num_inference_steps=STEPS,
        height=RES,
        width=RES,
        generator=generator,
        output_type="np",
        **kwargs,
    )
    return out.images


def _check_image(image):
    assert isinstance(image, np.ndarray)
    assert image.shape == (1, RES, RES, 3)
    assert np.isfinite(image).all()
    assert image.min() >= 0.0 and image.max() <= 1.0
    assert image.std() > 0.0


def _flux2_system_tokens(pipe):
    """Number of tokens the chat-formatted system message takes before the user prompt starts."""
    from diffusers.pipelines.flux2.pipeline_flux2 import format_input

    ids = pipe.tokenizer.apply_chat_template(
        format_input([""], system_message=pipe.system_message), tokenize=True, return_dict=True
    )["input_ids"][0]
    return len(ids)


def test_api_constants():
    assert tp.KINDS == ("flux", "sd3", "flux2")
    assert tp.SIZES == ("tiny", "small", "medium")
    import diffusers

    assert tp.pipeline_class("flux") is diffusers.FluxPipeline
    assert tp.pipeline_class("sd3") is diffusers.StableDiffusion3Pipeline
    assert tp.pipeline_class("flux2") is diffusers.Flux2Pipeline
    with pytest.raises(ValueError):
        tp.pipeline_class("sdxl")
    with pytest.raises(ValueError):
        tp.build_pipeline_dir("flux", "huge")


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_TPU_TINY_PIPELINES_DIR", str(tmp_path))
    assert tp.default_root() == tmp_path
    monkeypatch.delenv("TORCH_TPU_TINY_PIPELINES_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tp.default_root() == tmp_path / "xdg" / "torch_tpu" / "tiny-pipelines"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(tp.default_root()).endswith(os.path.join(".cache", "torch_tpu", "tiny-pipelines"))


@pytest.mark.parametrize("kind", tp.KINDS)
def test_build_is_cached(kind, root):
    path = tp.build_pipeline_dir(kind, "tiny", root=root)
    assert path == root / f"{kind}-tiny-seed0"
    index = path / "model_index.json"
    assert index.is_file()
    before = (index.stat().st_mtime_ns, path.stat().st_mtime_ns)
    again = tp.build_pipeline_dir(kind, "tiny", root=root)
    assert again == path
    assert (index.stat().st_mtime_ns, path.stat().st_mtime_ns) == before
    assert not [p.name for p in root.iterdir() if ".tmp-" in p.name]  # no leftover temp dirs


def test_deterministic_weights(tmp_path):
    a = tp.build_pipeline_dir("flux", "tiny", root=tmp_path / "a", seed=3)
    b = tp.build_pipeline_dir("flux", "tiny", root=tmp_path / "b", seed=3)
    c = tp.build_pipeline_dir("flux", "tiny", root=tmp_path / "c", seed=4)
    files = sorted(p.relative_to(a) for p in a.rglob("*.safetensors"))
    assert files
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / "transformer/diffusion_pytorch_model.safetensors").read_bytes() != (
        c / "transformer/diffusion_pytorch_model.safetensors"
    ).read_bytes()


def test_tokenizers_reload(pipes):
    flux = pipes("flux")
    assert flux.tokenizer.model_max_length == 77
    assert flux.tokenizer_max_length == 77
    assert flux.tokenizer_2.model_max_length == 512
    sd3 = pipes("sd3")
    assert sd3.tokenizer.model_max_length == 77
    assert sd3.tokenizer_2.model_max_length == 77
    ids = sd3.tokenizer_3("a photo of a cat").input_ids
    assert ids[-1] == sd3.tokenizer_3.eos_token_id and sd3.tokenizer_3.unk_token_id not in ids
    flux2 = pipes("flux2")
    tok = flux2.tokenizer
    assert tok.convert_tokens_to_ids(["[IMG]", "<pad>", "[SYSTEM_PROMPT]", "[INST]"]) == [10, 11, 17, 3]
    assert tok.chat_template


def test_flux(pipes):
    pipe = pipes("flux")
    a = _run(pipe, "a photo of a cat", guidance_scale=3.5)
    b = _run(pipe, "a red car in the city", guidance_scale=3.5)
    c = _run(pipe, "a photo of a cat", guidance_scale=0.0)
    for image in (a, b, c):
        _check_image(image)
    assert not np.allclose(a, b, atol=1e-4)
    assert not np.allclose(a, c, atol=1e-4)  # guidance is embedded (guidance_embeds=True)
    np.testing.assert_array_equal(a, _run(pipe, "a photo of a cat", guidance_scale=3.5))


def test_sd3_cfg(pipes):
    pipe = pipes("sd3")
    kwargs = dict(guidance_scale=4.5, negative_prompt="blurry, low quality")
    a = _run(pipe, "a photo of a cat", **kwargs)
    b = _run(pipe, "a red car in the city", **kwargs)
    _check_image(a)
    _check_image(b)
    assert not np.allclose(a, b, atol=1e-4)


def test_flux2(pipes):
    pipe = pipes("flux2")
    n_sys = _flux2_system_tokens(pipe)
    assert 10 < n_sys < 200
    # Long enough to reach the user prompt: different prompts give different images.
    long_enough = n_sys + 16
    a = _run(pipe, "a photo of a cat", guidance_scale=4.0, max_sequence_length=long_enough)
    b = _run(pipe, "a red car in the city", guidance_scale=4.0, max_sequence_length=long_enough)
    _check_image(a)
    _check_image(b)
    assert not np.allclose(a, b, atol=1e-4)
    # The trap: a max_sequence_length that cuts inside the system message makes all prompts alike.
    too_short = n_sys - 4
    c = _run(pipe, "a photo of a cat", guidance_scale=4.0, max_sequence_length=too_short)
    d = _run(pipe, "a red car in the city", guidance_scale=4.0, max_sequence_length=too_short)
    np.testing.assert_array_equal(c, d)


@pytest.mark.parametrize("kind", tp.KINDS)
def test_bf16_finite(kind, pipes):
    pipe = pipes(kind, torch.bfloat16)
    assert pipe.transformer.dtype == torch.bfloat16
    kwargs = {
        "flux": dict(guidance_scale=3.5),
        "sd3": dict(guidance_scale=4.5, negative_prompt="blurry"),
        "flux2": dict(guidance_scale=4.0, max_sequence_length=128),
    }[kind]
    _check_image(_run(pipe, "a photo of a cat", **kwargs))

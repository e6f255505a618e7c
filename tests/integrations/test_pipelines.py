"""Real diffusers pipelines (tiny, random weights, built offline) on the tpu device in strict eager mode.

Every image made on the tpu device is compared with the image CPU torch makes in the same test from the
same weights and the same CPU generator.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from torch_tpu.testing import tiny_pipelines as tp

pytestmark = [pytest.mark.slow, pytest.mark.check_lowering]  # check_lowering: tests/conftest.py

RES = 64
STEPS = 2
FP32_TOL = 1e-4


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-pipelines")


@pytest.fixture(scope="session")
def pipes(root):
    """get(kind, dtype, device) -> a pipeline, loaded once per (kind, dtype, device)."""
    cache = {}

    def get(kind, dtype=torch.float32, device="cpu"):
        key = (kind, dtype, device)
        if key not in cache:
            pipe = tp.load_pipeline(kind, "tiny", dtype=dtype, root=root)
            pipe.set_progress_bar_config(disable=True)
            if device != "cpu":
                pipe.to(device)
            cache[key] = pipe
        return cache[key]

    return get


def _kwargs(kind):
    kw = dict(prompt="a golden retriever surfing a wave", num_inference_steps=STEPS, height=RES, width=RES)
    if kind == "sd3":
        kw.update(guidance_scale=4.5, negative_prompt="blurry, low quality")
    return kw


def _run(pipe, seed=0, output_type="np", **kw):
    gen = torch.Generator("cpu").manual_seed(seed)
    kw.setdefault("generator", gen)
    return pipe(output_type=output_type, **kw).images


def _to_np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=np.float32)


def _maxdiff(a, b):
    a, b = _to_np(a), _to_np(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max())


@pytest.mark.parametrize("kind", tp.KINDS)
def test_fp32_matches_cpu(pipes, kind, eager_mode):
    kw = _kwargs(kind)
    ref = _run(pipes(kind), **kw)
    out = _run(pipes(kind, device="tpu"), **kw)
    assert out.shape == (1, RES, RES, 3) and np.isfinite(out).all()
    assert ref.std() > 0
    d = _maxdiff(out, ref)
    assert d < FP32_TOL, f"{kind} fp32: max abs diff tpu vs cpu = {d:.3g}"


@pytest.mark.parametrize("kind", tp.KINDS)
def test_bf16_matches_cpu(pipes, kind):
    # bf16 keeps 8 mantissa bits (relative step 2**-8 = 0.4%); after 2 transformer steps and the VAE the
    # rounding of different (equally valid) op orders/fusions shows up as a few 1e-2 in [0, 1] pixels.
    # CPU bf16 itself is that far from fp32, so the fair bound is relative to CPU bf16's own error:
    # the tpu bf16 image may be at most ~1.5x as far from fp32 as CPU bf16 is (plus 0.02 slack), and
    # within 2x that error (plus 0.02) of the CPU bf16 image. A wrong op gives errors of order 0.1-1.
    kw = _kwargs(kind)
    ref32 = _run(pipes(kind), **kw)
    ref16 = _run(pipes(kind, torch.bfloat16), **kw)
    out16 = _run(pipes(kind, torch.bfloat16, "tpu"), **kw)
    cpu_err = _maxdiff(ref16, ref32)
    d_cpu16 = _maxdiff(out16, ref16)
    d_fp32 = _maxdiff(out16, ref32)
    msg = (f"{kind} bf16: max abs diff tpu-bf16 vs cpu-bf16 = {d_cpu16:.3g}, tpu-bf16 vs cpu-fp32 = "
           f"{d_fp32:.3g}, cpu-bf16 vs cpu-fp32 = {cpu_err:.3g}")
    assert d_fp32 <= 1.5 * cpu_err + 0.02, msg
    assert d_cpu16 <= 2 * cpu_err + 0.02, msg
    assert float(np.abs(_to_np(out16) - _to_np(ref16)).mean()) < 0.01, msg


@pytest.mark.parametrize("output_type", ["pil", "pt", "latent"])
def test_output_types(pipes, output_type):
    kw = _kwargs("flux")
    ref = _run(pipes("flux"), output_type=output_type, **kw)
    out = _run(pipes("flux", device="tpu"), output_type=output_type, **kw)
    if output_type == "pil":
        assert out[0].size == (RES, RES)
        # PIL images are uint8: allow one level of rounding difference
        d = _maxdiff(np.asarray(out[0]), np.asarray(ref[0]))
        assert d <= 1, f"pil: max abs diff (uint8 levels) = {d}"
    else:
        assert isinstance(out, torch.Tensor)
        # images come back to the caller on the pipeline's device; latents stay on it
        assert out.shape == ref.shape
        d = _maxdiff(out, ref)
        assert d < FP32_TOL, f"{output_type}: max abs diff tpu vs cpu = {d:.3g}"


def test_batch_generators_callback_flux(pipes):
    """Several prompts x num_images_per_prompt=2, a list of generators, callback_on_step_end,
    max_sequence_length and joint_attention_kwargs={'scale': ...}."""
    prompts = ["a cat", "a dog on the moon"]

    def run(pipe):
        seen = []

        def cb(p, i, t, kwargs):
            seen.append((i, float(t), kwargs["latents"].device.type, tuple(kwargs["latents"].shape)))
            return kwargs

        gens = [torch.Generator("cpu").manual_seed(s) for s in range(4)]
        img = pipe(prompt=prompts, num_images_per_prompt=2, generator=gens, num_inference_steps=STEPS,
                   height=RES, width=RES, max_sequence_length=32, joint_attention_kwargs={"scale": 0.5},
                   callback_on_step_end=cb, callback_on_step_end_tensor_inputs=["latents"],
                   output_type="np").images
        return img, seen

    ref, seen_ref = run(pipes("flux"))
    out, seen = run(pipes("flux", device="tpu"))
    assert out.shape == (4, RES, RES, 3)
    assert [s[:2] for s in seen] == [s[:2] for s in seen_ref] and len(seen) == STEPS
    assert all(s[2] == "tpu" for s in seen) and all(s[3] == seen_ref[0][3] for s in seen)
    # different generators give different images
    assert np.abs(ref[0] - ref[1]).max() > 1e-3
    d = _maxdiff(out, ref)
    assert d < FP32_TOL, f"batched flux: max abs diff tpu vs cpu = {d:.3g}"


@pytest.mark.parametrize("kind", ["flux", "sd3"])
def test_prompt_embeds_passed_in(pipes, kind):
    cpu, dev = pipes(kind), pipes(kind, device="tpu")
    kw = _kwargs(kind)
    ref = _run(cpu, **kw)
    prompt = kw.pop("prompt")
    neg = kw.pop("negative_prompt", None)
    if kind == "flux":
        pe, ppe, _ = dev.encode_prompt(prompt=prompt, prompt_2=None, device=torch.device("tpu"))
        assert pe.device.type == "tpu"
        out = _run(dev, prompt_embeds=pe, pooled_prompt_embeds=ppe, **kw)
    else:
        pe, npe, ppe, nppe = dev.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None,
                                              negative_prompt=neg, device=torch.device("tpu"))
        # joint_attention_kwargs={"scale": ...} is the LoRA scale: without LoRA layers it must change nothing
        out = _run(dev, prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                   negative_pooled_prompt_embeds=nppe, joint_attention_kwargs={"scale": 0.7}, **kw)
    d = _maxdiff(out, ref)
    assert d < FP32_TOL, f"{kind} prompt_embeds: max abs diff tpu vs cpu = {d:.3g}"


def _model_bytes(model):
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def test_model_cpu_offload_picks_tpu(root):
    pipe = tp.load_pipeline("flux", "tiny", dtype=torch.float32, root=root)
    pipe.set_progress_bar_config(disable=True)
    kw = _kwargs("flux")
    ref = _run(pipe, **kw)

    pipe.enable_model_cpu_offload()  # no device: diffusers must find "tpu" through torch.accelerator
    assert pipe._offload_device.type == "tpu"
    import gc

    gc.collect()
    base = torch.tpu.memory_allocated()
    mem = []

    def cb(p, i, t, kwargs):
        torch.tpu.synchronize()
        mem.append(torch.tpu.memory_allocated() - base)
        return kwargs

    out = _run(pipe, callback_on_step_end=cb, **kw)
    d = _maxdiff(out, ref)
    assert d < FP32_TOL, f"model offload: max abs diff tpu vs cpu = {d:.3g}"

    sizes = {n: _model_bytes(m) for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    transformer = sizes["transformer"]
    others = max(v for n, v in sizes.items() if n != "transformer")
    assert len(mem) == STEPS
    for m in mem:
        # transformer + activations (a few latents/embeddings), never the text encoders as well
        assert transformer <= m < transformer + others, (m, sizes)
    gc.collect()
    after = torch.tpu.memory_allocated() - base
    assert after < 4096, f"{after} bytes still on the device after the call (models: {sizes})"
    # every model is back on the CPU
    assert all(p.device.type == "cpu" for m in pipe.components.values() if isinstance(m, torch.nn.Module)
               for p in m.parameters())


def test_sequential_cpu_offload(root):
    pipe = tp.load_pipeline("flux", "tiny", dtype=torch.float32, root=root)
    pipe.set_progress_bar_config(disable=True)
    kw = _kwargs("flux")
    ref = _run(pipe, **kw)
    pipe.enable_sequential_cpu_offload()
    transformer = _model_bytes(pipe.transformer)
    base = torch.tpu.memory_allocated()  # other tests' pipelines may live on the device
    mem = []

    def cb(p, i, t, kwargs):
        mem.append(torch.tpu.memory_allocated() - base)
        return kwargs

    out = _run(pipe, callback_on_step_end=cb, **kw)
    d = _maxdiff(out, ref)
    assert d < FP32_TOL, f"sequential offload: max abs diff tpu vs cpu = {d:.3g}"
    # between steps only activations live on the device: the weights go back after each submodule
    assert mem and max(mem) < transformer, (mem, transformer)


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled", "regional"])
def test_a_second_identical_call_builds_no_program(root, mode, fresh_programs, monkeypatch):
    """A pipeline call at a seen shape reuses every program, in every mode: no program is built or even
    looked up anew (strict ops' casts of values still waiting for their programs were keyed apart from the
    same casts of computed values; fused glue took a number that changed at its step as an input even where
    the program compiled with its first value served the same step), and the image is the same."""
    import torch_tpu

    monkeypatch.setenv("TORCH_TPU_COMPILE_THREADS", "2")  # (programs compile on threads: values wait in line)
    pipe = tp.load_pipeline("flux", "tiny", root=root)
    pipe.set_progress_bar_config(disable=True)
    pipe.to("tpu")
    if mode == "compiled":
        pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    elif mode == "regional":
        pipe.transformer.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    eager = torch_tpu.EagerMode.DEFER_AND_FUSE if mode == "fused" else torch_tpu.EagerMode.DEFER_NEVER

    def call():
        with torch.tpu.set_eager_mode(eager), torch.no_grad():
            image = pipe(prompt="a red cat", height=RES, width=RES, num_inference_steps=3, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(0)).images
        torch.tpu.synchronize()
        return image

    first = call()
    before = torch_tpu.stats()
    second = call()
    after = torch_tpu.stats()
    assert after["compiles"] == before["compiles"], (after["compiles"], before["compiles"])
    assert after["cache_misses"] == before["cache_misses"], (after["cache_misses"], before["cache_misses"])
    assert after["module_captures"] == before["module_captures"]
    np.testing.assert_array_equal(second, first)

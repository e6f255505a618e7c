"""Transformers shaped as the seed's three pipelines', with real attention heads over enough tokens that a TPU
takes the Pallas attention kernel, in bf16, match CPU torch in every mode: strict, fused, compiled and
regional (``compile_repeated_blocks``):

* FLUX.1: heads 128 wide, 1024 image + 512 text tokens, rotary tables (16, 56, 56);
* SD3.5 (regional: its blocks compiled one by one, diffusers names no repeated blocks for SD3): heads 64 wide with RMS query/key norms, 1024 image + 333 text tokens (T5's 256 and CLIP's 77: a joint
  sequence of 1357, no multiple of any block), a second image-only attention in the first block (SD3.5 Medium's
  dual attention), 2D sincos position embedding;
* FLUX.2: heads 128 wide, 1024 image + 512 text tokens, four rotary axes (32 each), SwiGLU feed-forwards and
  shared modulation.

Two heads instead of 24 (FLUX.2: 48) keep it quick on the CPU; the heads' count changes no lowering choice. The file runs with TORCH_TPU_CHECK_LOWERING=tpu (marked
check_lowering), so every program it builds is lowered for a TPU too, the kernel included."""
import copy

import pytest
import torch

import torch_tpu
from tests.harness.compare import assert_low_precision_close

pytestmark = pytest.mark.check_lowering  # every program also lowered for a TPU (tests/conftest.py)

diffusers = pytest.importorskip("diffusers")

IMAGE_TOKENS, TEXT_TOKENS = 1024, 512


def _transformer():
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=128,
        num_attention_heads=2, joint_attention_dim=64, pooled_projection_dim=32, guidance_embeds=False,
        axes_dims_rope=(16, 56, 56)).to(torch.bfloat16).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    side = int(IMAGE_TOKENS ** 0.5)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return dict(hidden_states=torch.randn(1, IMAGE_TOKENS, 64, generator=g).bfloat16(),
                encoder_hidden_states=torch.randn(1, TEXT_TOKENS, 64, generator=g).bfloat16(),
                pooled_projections=torch.randn(1, 32, generator=g).bfloat16(),
                timestep=torch.tensor([0.5]).bfloat16(),
                img_ids=img_ids.reshape(-1, 3), txt_ids=torch.zeros(TEXT_TOKENS, 3), return_dict=False)


def _sd3_transformer():
    torch.manual_seed(0)
    return diffusers.SD3Transformer2DModel(
        sample_size=64, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=64,
        num_attention_heads=2, joint_attention_dim=64, caption_projection_dim=128, pooled_projection_dim=32,
        pos_embed_max_size=96, dual_attention_layers=(0,), qk_norm="rms_norm").to(torch.bfloat16).eval()


def _sd3_inputs():
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(1, 16, 64, 64, generator=g).bfloat16(),
                encoder_hidden_states=torch.randn(1, 333, 64, generator=g).bfloat16(),
                pooled_projections=torch.randn(1, 32, generator=g).bfloat16(),
                timestep=torch.tensor([500.0]).bfloat16(), return_dict=False)


def _flux2_transformer():
    torch.manual_seed(0)
    return diffusers.Flux2Transformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=128,
        num_attention_heads=2, joint_attention_dim=64, timestep_guidance_channels=256,
        axes_dims_rope=(32, 32, 32, 32), guidance_embeds=True).to(torch.bfloat16).eval()


def _flux2_inputs():
    g = torch.Generator().manual_seed(1)
    side = int(IMAGE_TOKENS ** 0.5)
    img_ids = torch.zeros(side, side, 4)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    txt_ids = torch.zeros(TEXT_TOKENS, 4)
    txt_ids[:, 3] = torch.arange(TEXT_TOKENS)
    return dict(hidden_states=torch.randn(1, IMAGE_TOKENS, 64, generator=g).bfloat16(),
                encoder_hidden_states=torch.randn(1, TEXT_TOKENS, 64, generator=g).bfloat16(),
                timestep=torch.tensor([0.5]).bfloat16(), img_ids=img_ids.reshape(-1, 4), txt_ids=txt_ids,
                guidance=torch.tensor([4.0]).bfloat16(), return_dict=False)


MODELS = {"flux": (_transformer, _inputs), "sd3": (_sd3_transformer, _sd3_inputs),
          "flux2": (_flux2_transformer, _flux2_inputs)}


@pytest.fixture(scope="module")
def references():
    done = {}

    def reference(name):
        """The CPU model (bf16), its output, and the same model's output in float32 (CPU's own bf16 error)."""
        if name not in done:
            build, inputs = MODELS[name]
            model = build()
            wide = {k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                    for k, v in inputs().items()}
            with torch.no_grad():
                done[name] = model, model(**inputs())[0], copy.deepcopy(model).float()(**wide)[0]
        return done[name]

    return reference


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled", "regional"])
@pytest.mark.parametrize("name", list(MODELS))
def test_pipeline_shaped_transformer_matches_cpu(references, name, mode):
    cpu_model, expected, expected_fp32 = references(name)
    model = copy.deepcopy(cpu_model).to("tpu")
    kwargs = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in MODELS[name][1]().items()}
    if mode == "compiled":
        model.compile(backend="tpu", fullgraph=True, dynamic=False)
    elif mode == "regional" and model._repeated_blocks:
        model.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    elif mode == "regional":  # diffusers names no repeated blocks for SD3: each block compiled by hand
        for block in model.transformer_blocks:
            block.compile(backend="tpu", fullgraph=True, dynamic=False)
    eager = torch_tpu.EagerMode.DEFER_AND_FUSE if mode == "fused" else torch_tpu.EagerMode.DEFER_NEVER
    with torch.tpu.set_eager_mode(eager), torch.no_grad():
        got = model(**kwargs)[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # bf16 through two blocks: within CPU's own bf16 error (the pipelines' rule)
    assert_low_precision_close(got, expected, expected_fp32, where=f"{name} ({mode})")

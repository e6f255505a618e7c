"""A FLUX.1-shaped transformer with real attention heads (128 wide) over enough tokens that a TPU takes the
Pallas attention kernel (1024 image + 512 text), in bf16, matches CPU torch in every mode: strict, fused,
compiled and regional (``compile_repeated_blocks``). Two heads instead of 24 keep it quick on the CPU; the
heads' count changes no lowering choice. CI runs this file again with TORCH_TPU_CHECK_LOWERING=tpu, so every
program it builds is lowered for a TPU too, the kernel included."""
import copy

import pytest
import torch

import torch_tpu

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


@pytest.fixture(scope="module")
def reference():
    model = _transformer()
    with torch.no_grad():
        return model, model(**_inputs())[0].float()


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled", "regional"])
def test_flux_shaped_transformer_matches_cpu(reference, mode):
    cpu_model, expected = reference
    model = copy.deepcopy(cpu_model).to("tpu")
    kwargs = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in _inputs().items()}
    if mode == "compiled":
        model.compile(backend="tpu", fullgraph=True, dynamic=False)
    elif mode == "regional":
        model.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    eager = torch_tpu.EagerMode.DEFER_AND_FUSE if mode == "fused" else torch_tpu.EagerMode.DEFER_NEVER
    with torch.tpu.set_eager_mode(eager), torch.no_grad():
        got = model(**kwargs)[0].cpu().float()
    # bf16 through two blocks: a few bf16 ulps of the output's scale
    torch.testing.assert_close(got, expected, atol=0.05 * expected.abs().max().item(), rtol=0.05)

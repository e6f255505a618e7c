"""diffusers' transformers in the eager modes run diffusers' own code, recorded and replayed block by block
(torch_tpu/eager/module_replay.py), and stay equal to diffusers on CPU where users reach in: a float16 block's
overflow, an attention kernel patched in place of torch's SDPA, a class-level patch of diffusers' FeedForward or
FluxAttention, made before the first call or after the blocks were recorded. (Hand-written copies of FLUX's
blocks that served these calls before differed from diffusers in each of these cases.)"""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.eager import module_replay

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention import FeedForward  # noqa: E402
from diffusers.models.transformers import transformer_flux  # noqa: E402

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_MODULE_REPLAY", "1")
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode[request.param]):
        yield request.param


def _flux(dtype=torch.float32):
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=24, pooled_projection_dim=12, guidance_embeds=False,
        axes_dims_rope=(4, 4, 8)).to(dtype).eval()


def _flux_inputs(dtype=torch.float32, side=4, text=3):
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return dict(hidden_states=torch.randn(1, side * side, 16, generator=g).to(dtype),
                encoder_hidden_states=torch.randn(1, text, 24, generator=g).to(dtype),
                pooled_projections=torch.randn(1, 12, generator=g).to(dtype),
                timestep=torch.tensor([0.5]).to(dtype), img_ids=img_ids.reshape(-1, 3),
                txt_ids=torch.zeros(text, 3), return_dict=False)


def _on_tpu(kwargs):
    return {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


def _compare(cpu, tpu, kwargs, calls=1):
    with torch.no_grad():
        want = cpu(**kwargs)[0]
        for _ in range(calls):
            got = tpu(**_on_tpu(kwargs))[0]
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    return got


def _models():
    cpu = _flux()
    return cpu, copy.deepcopy(cpu).to("tpu")


def test_flux_blocks_are_replayed_with_cpu_values(mode):
    cpu, tpu = _models()
    kwargs = _flux_inputs()
    before = torch_tpu.stats()
    _compare(cpu, tpu, kwargs, calls=3)
    counts = {k: torch_tpu.stats()[k] - before[k] for k in ("module_recordings", "module_replays")}
    assert counts["module_recordings"] >= 4 and counts["module_replays"] >= 8, counts
    blocks = {name for name, r in module_replay.replayers(tpu) if not r.glue}
    assert blocks == {"transformer_blocks.0", "transformer_blocks.1", "single_transformer_blocks.0",
                      "single_transformer_blocks.1"}, blocks


class _Blocks(torch.nn.Module):
    """Two FLUX double-stream blocks called in a row (as the transformer calls them); their outputs, each."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(
            [transformer_flux.FluxTransformerBlock(dim=32, num_attention_heads=2, attention_head_dim=16)
             for _ in range(2)]).to(dtype).eval()

    def forward(self, x, context, temb):
        outs = []
        for block in self.blocks:
            context, x = block(x, context, temb)
            outs += [context, x]
        return outs


def test_a_float16_block_overflows_where_diffusers_does(mode):
    """diffusers clips a float16 block's text stream to +-65504 and lets its image stream overflow: CPU's image
    stream holds inf, and so does the tpu's (a copy of the block clipped both streams)."""
    cpu = _Blocks(torch.float16)
    with torch.no_grad():
        for block in cpu.blocks:  # an image feed-forward whose output overflows float16
            block.ff.net[2].weight.fill_(5000.0)
    tpu = copy.deepcopy(cpu).to("tpu")
    g = torch.Generator().manual_seed(3)
    x, context, temb = (torch.randn(1, 8, 32, generator=g).half(), torch.randn(1, 3, 32, generator=g).half(),
                        torch.randn(1, 32, generator=g).half())
    with torch.no_grad():
        want = cpu(x, context, temb)
        assert torch.isinf(want[1]).any() and torch.isfinite(want[0]).all()  # (the case this test is about)
        for _ in range(3):
            got = tpu(x.to("tpu"), context.to("tpu"), temb.to("tpu"))
            for a, b in zip(got, want):
                a = a.cpu()
                assert torch.equal(torch.isinf(a), torch.isinf(b)) and torch.equal(a.isnan(), b.isnan())
                finite = torch.isfinite(b)
                torch.testing.assert_close(a[finite].float(), b[finite].float(), atol=2e-2, rtol=2e-2)
    assert torch_tpu.stats()["module_replays"] > 0


def _patched_sdpa(original):
    def attention(query, key, value, *args, **kwargs):  # a user's own kernel in torch's place
        return original(query, key, value, *args, **kwargs) * 0.5 + 0.25
    return attention


def test_a_user_attention_kernel_is_used_before_and_after_the_blocks_were_recorded(mode, monkeypatch):
    cpu, tpu = _models()
    kwargs = _flux_inputs()
    monkeypatch.setattr(F, "scaled_dot_product_attention", _patched_sdpa(F.scaled_dot_product_attention))
    _compare(cpu, tpu, kwargs, calls=2)  # recorded with it, replayed
    monkeypatch.undo()
    _compare(cpu, tpu, kwargs, calls=2)  # torch's own again
    monkeypatch.setattr(F, "scaled_dot_product_attention", _patched_sdpa(F.scaled_dot_product_attention))
    _compare(cpu, tpu, kwargs, calls=2)  # patched after a recording


@pytest.mark.parametrize("cls", [FeedForward, transformer_flux.FluxAttention], ids=lambda c: c.__name__)
def test_a_class_level_patch_of_a_diffusers_module_is_run(mode, monkeypatch, cls):
    cpu, tpu = _models()
    kwargs = _flux_inputs()
    _compare(cpu, tpu, kwargs, calls=2)  # recorded and replayed
    original = cls.forward

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        return tuple(o * 1.5 for o in out) if isinstance(out, tuple) else out * 1.5

    monkeypatch.setattr(cls, "forward", forward)
    _compare(cpu, tpu, kwargs, calls=2)

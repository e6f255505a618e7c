"""Real model components and nn building blocks: forward on tpu equals CPU torch.

Components are built tiny with random weights, offline (torch_tpu.testing.tiny_pipelines for the
diffusers pipeline parts). fp32 must match CPU tightly; bf16 is compared with a tolerance that
reflects bf16 rounding (8 mantissa bits -> ~4e-3 relative per op, accumulated over a few layers).
"""

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_tpu.testing import tiny_pipelines as tp

FP32_ATOL = 1e-4
FP32_RTOL = 1e-4


def to_tpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.to("tpu")
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_tpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_tpu(v) for k, v in obj.items()}
    return obj


def to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def assert_close(actual, expected, atol=FP32_ATOL, rtol=FP32_RTOL):
    actual = to_cpu(actual)
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        assert actual.device.type == "cpu"
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, atol, rtol)
    else:
        assert actual == expected


def check_module(module, *args, atol=FP32_ATOL, rtol=FP32_RTOL, **kwargs):
    """Run `module` on CPU and a deep copy of it on tpu; outputs must match."""
    module = module.eval()
    with torch.no_grad():
        expected = module(*args, **kwargs)
        dev = copy.deepcopy(module).to("tpu")
        for p in dev.parameters():
            assert p.device.type == "tpu"
        actual = dev(*to_tpu(args), **to_tpu(kwargs))
    assert_close(actual, expected, atol, rtol)
    return actual, expected


def check_fn(fn, *args, atol=FP32_ATOL, rtol=FP32_RTOL, **kwargs):
    expected = fn(*args, **kwargs)
    actual = fn(*to_tpu(args), **to_tpu(kwargs))
    assert_close(actual, expected, atol, rtol)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ------------------------------------------------------------------------------------------------
# nn basics
# ------------------------------------------------------------------------------------------------


def test_linear():
    check_module(nn.Linear(8, 5), torch.randn(2, 3, 8))
    check_module(nn.Linear(8, 5, bias=False), torch.randn(4, 8))


@pytest.mark.parametrize(
    "kw",
    [
        dict(stride=1, padding=0),
        dict(stride=2, padding=1),
        dict(stride=1, padding="same", dilation=2),
        dict(stride=2, padding=(1, 2), groups=2),
        dict(stride=1, padding=1, groups=4, padding_mode="reflect"),
    ],
)
def test_conv2d(kw):
    check_module(nn.Conv2d(4, 8, 3, **kw), torch.randn(2, 4, 9, 10))


@pytest.mark.parametrize(
    "kw",
    [dict(stride=1), dict(stride=2, padding=1, output_padding=1), dict(stride=2, groups=2, dilation=2)],
)
def test_conv_transpose2d(kw):
    check_module(nn.ConvTranspose2d(4, 6, 3, **kw), torch.randn(2, 4, 5, 6))


def test_groupnorm():
    check_module(nn.GroupNorm(4, 8), torch.randn(2, 8, 5, 5))
    check_module(nn.GroupNorm(2, 6, affine=False, eps=1e-3), torch.randn(3, 6, 7))


def test_layernorm():
    check_module(nn.LayerNorm(16), torch.randn(2, 3, 16))
    check_module(nn.LayerNorm([3, 16], elementwise_affine=False), torch.randn(2, 3, 16))


def test_rmsnorm():
    check_module(nn.RMSNorm(16), torch.randn(2, 3, 16))
    check_module(nn.RMSNorm(16, eps=1e-6, elementwise_affine=False), torch.randn(4, 16))


def test_embedding():
    emb = nn.Embedding(20, 8, padding_idx=0)
    check_module(emb, torch.tensor([[0, 3, 19], [5, 5, 1]]))


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention(batch_first):
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    q = torch.randn(2, 5, 16) if batch_first else torch.randn(5, 2, 16)
    kv = torch.randn(2, 7, 16) if batch_first else torch.randn(7, 2, 16)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    check_module(mha, q, kv, kv, key_padding_mask=mask)
    # self-attention with a causal float mask, weights not averaged
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    check_module(mha, q, q, q, attn_mask=causal, average_attn_weights=False)


def _qkv(hq=4, hkv=4, lq=6, lk=6, d=8):
    return torch.randn(2, hq, lq, d), torch.randn(2, hkv, lk, d), torch.randn(2, hkv, lk, d)


def test_sdpa_plain_and_causal():
    q, k, v = _qkv()
    check_fn(F.scaled_dot_product_attention, q, k, v)
    check_fn(F.scaled_dot_product_attention, q, k, v, is_causal=True)
    check_fn(F.scaled_dot_product_attention, q, k, v, scale=0.1)
    q2, k2, v2 = _qkv(lq=3, lk=7)
    check_fn(F.scaled_dot_product_attention, q2, k2, v2)


def test_sdpa_bool_mask():
    q, k, v = _qkv(lq=5, lk=7)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    check_fn(F.scaled_dot_product_attention, q, k, v, attn_mask=mask)


def test_sdpa_float_mask():
    q, k, v = _qkv(lq=5, lk=7)
    mask = torch.randn(5, 7)
    check_fn(F.scaled_dot_product_attention, q, k, v, attn_mask=mask)


def test_sdpa_gqa():
    q, k, v = _qkv(hq=8, hkv=2)
    check_fn(F.scaled_dot_product_attention, q, k, v, enable_gqa=True)
    check_fn(F.scaled_dot_product_attention, q, k, v, is_causal=True, enable_gqa=True)


@pytest.mark.parametrize(
    "kw",
    [
        dict(scale_factor=2, mode="nearest"),
        dict(size=(5, 7), mode="nearest"),
        dict(scale_factor=2, mode="nearest-exact"),
        dict(scale_factor=2, mode="bilinear", align_corners=False),
        dict(scale_factor=2, mode="bilinear", align_corners=True),
        dict(size=(3, 5), mode="bilinear", align_corners=False),
        dict(size=(3, 5), mode="bilinear", align_corners=True),
    ],
)
def test_interpolate(kw):
    check_fn(F.interpolate, torch.randn(2, 3, 6, 8), **kw)


def test_pools():
    x = torch.randn(2, 3, 9, 10)
    check_module(nn.AvgPool2d(2), x)
    check_module(nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), x)
    check_module(nn.MaxPool2d(2), x)
    check_module(nn.MaxPool2d(3, stride=2, padding=1), x)
    check_module(nn.AdaptiveAvgPool2d((1, 1)), x)
    check_module(nn.AdaptiveAvgPool2d((4, 3)), x)


def test_dropout_eval_is_identity():
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.GELU(), nn.Dropout2d(0.3))
    check_module(m, torch.randn(2, 4, 3, 8))
    x = torch.randn(2, 4, 5, 5)
    for drop in (nn.Dropout(0.5), nn.Dropout2d(0.3), nn.AlphaDropout(0.2)):
        with torch.no_grad():
            out = drop.eval()(x.to("tpu"))
        torch.testing.assert_close(out.cpu(), x, atol=0, rtol=0)


def test_zero_dim_results_keep_their_shape_on_cpu():
    # a reduced loss is 0-d; copying it to the host must not make it 1-d
    x = torch.randn(6, 5)
    t = torch.tensor([0, 1, 4, 2, 3, 1])
    check_fn(F.cross_entropy, x, t)
    check_fn(torch.sum, x.to(torch.bfloat16))
    assert torch.tensor(2.5).to("tpu").cpu().shape == ()


def test_nn_bf16():
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.SiLU(), nn.Linear(32, 8)).to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    # bf16 has 8 mantissa bits; XLA may fuse/accumulate in a different order than CPU torch.
    actual, _ = check_module(m, x, atol=3e-2, rtol=3e-2)
    assert actual.dtype == torch.bfloat16


# ------------------------------------------------------------------------------------------------
# diffusers pipeline components (tiny, random weights, offline)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipe_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-pipelines")
    return lambda kind: tp.build_pipeline_dir(kind, "tiny", root=root)


def _cast_floats(obj, dtype):
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _cast_floats(v, dtype) for k, v in obj.items()}
    return obj


def _max_err(a, b):
    return (to_cpu(a).float() - b.float()).abs().max().item()


def check_component(module, inputs, out_fn=lambda out: out[0], bf16=True, keep_fp32=()):
    """fp32: tpu equals CPU within FP32_ATOL. bf16: the tpu error against the fp32 CPU reference
    must be of the same size as CPU bf16's own error (both round every op to 8 mantissa bits, but
    in a different order and accumulation width), and never beyond 5% of the output's scale."""
    module = module.eval()
    with torch.no_grad():
        ref = out_fn(module(**inputs))
        dev = copy.deepcopy(module).to("tpu")
        got = out_fn(dev(**to_tpu(inputs)))
        assert got.device.type == "tpu"
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert_close(got, ref)
        if not bf16:
            return
        del dev
        inputs16 = {k: (v if k in keep_fp32 else _cast_floats(v, torch.bfloat16)) for k, v in inputs.items()}
        cpu16 = copy.deepcopy(module).to(torch.bfloat16)
        ref16 = out_fn(cpu16(**inputs16))
        got16 = out_fn(cpu16.to("tpu")(**to_tpu(inputs16)))
    assert got16.dtype == torch.bfloat16 == ref16.dtype
    scale = ref.abs().max().item()
    cpu_err, tpu_err = _max_err(ref16, ref), _max_err(got16, ref)
    assert tpu_err <= 2 * cpu_err + 1e-2 * scale, (tpu_err, cpu_err, scale)
    assert tpu_err <= 5e-2 * scale, (tpu_err, scale)


def test_flux_transformer(pipe_dir):
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel.from_pretrained(pipe_dir("flux"), subfolder="transformer")
    h = w = 4
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1] = torch.arange(h)[:, None]
    img_ids[..., 2] = torch.arange(w)[None, :]
    inputs = dict(
        hidden_states=torch.randn(2, h * w, 16),
        encoder_hidden_states=torch.randn(2, 7, 64),
        pooled_projections=torch.randn(2, 32),
        timestep=torch.tensor([0.9, 0.3]),
        img_ids=img_ids.reshape(-1, 3),
        txt_ids=torch.zeros(7, 3),
        guidance=torch.tensor([3.5, 3.5]),
    )
    check_component(model, inputs, keep_fp32=("img_ids", "txt_ids"))


def test_sd3_transformer(pipe_dir):
    from diffusers import SD3Transformer2DModel

    model = SD3Transformer2DModel.from_pretrained(pipe_dir("sd3"), subfolder="transformer")
    inputs = dict(
        hidden_states=torch.randn(2, 4, 8, 8),
        encoder_hidden_states=torch.randn(2, 9, 64),
        pooled_projections=torch.randn(2, 64),
        timestep=torch.tensor([900.0, 250.0]),
    )
    check_component(model, inputs)


def test_flux2_transformer(pipe_dir):
    from diffusers import Flux2Transformer2DModel

    model = Flux2Transformer2DModel.from_pretrained(pipe_dir("flux2"), subfolder="transformer")
    h = w = 4
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(6))
    inputs = dict(
        hidden_states=torch.randn(2, h * w, 16),
        encoder_hidden_states=torch.randn(2, 6, 48),
        timestep=torch.tensor([0.9, 0.3]),
        img_ids=img_ids[None].expand(2, -1, -1),
        txt_ids=txt_ids[None].expand(2, -1, -1),
        guidance=torch.tensor([4.0, 4.0]),
    )
    check_component(model, inputs)


class _Decode(nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, z):
        return self.vae.decode(z).sample


@pytest.mark.parametrize("kind", ["flux", "sd3"])
def test_autoencoder_kl(pipe_dir, kind):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(pipe_dir(kind), subfolder="vae")
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    # encode: the posterior's moments (mean, log-variance) are deterministic
    check_component(vae.encoder, dict(sample=image), out_fn=lambda out: out, bf16=kind == "flux")
    with torch.no_grad():
        ref = vae.encode(image).latent_dist
        got = copy.deepcopy(vae).to("tpu").encode(image.to("tpu")).latent_dist
    assert_close(got.mean, ref.mean)
    assert_close(got.std, ref.std)
    check_component(_Decode(vae), dict(z=torch.randn(1, 4, 4, 4)), out_fn=lambda out: out, bf16=kind == "flux")


def test_autoencoder_kl_flux2(pipe_dir):
    from diffusers import AutoencoderKLFlux2

    vae = AutoencoderKLFlux2.from_pretrained(pipe_dir("flux2"), subfolder="vae")
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        ref = vae.encode(image).latent_dist
        dev = copy.deepcopy(vae).to("tpu")
        got = dev.encode(image.to("tpu")).latent_dist
        assert_close(got.mean, ref.mean)
        assert_close(got.logvar, ref.logvar)
        z = torch.randn(1, 4, 4, 4)
        assert_close(dev.decode(z.to("tpu")).sample, vae.decode(z).sample)


def _flat_cat(*tensors):
    """Several outputs compared at once (one forward per device and dtype)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def _ids(vocab, batch=2, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=g)


def test_clip_text_model(pipe_dir):
    from transformers import CLIPTextModel

    model = CLIPTextModel.from_pretrained(pipe_dir("flux"), subfolder="text_encoder")
    ids = _ids(model.config.vocab_size)
    check_component(model, dict(input_ids=ids), out_fn=lambda o: _flat_cat(o.last_hidden_state, o.pooler_output))


def test_clip_text_model_with_projection(pipe_dir):
    from transformers import CLIPTextModelWithProjection

    model = CLIPTextModelWithProjection.from_pretrained(pipe_dir("sd3"), subfolder="text_encoder_2")
    ids = _ids(model.config.vocab_size)
    # SD3 reads the penultimate hidden state and the projected pooled embedding
    inputs = dict(input_ids=ids, output_hidden_states=True)
    check_component(model, inputs, out_fn=lambda o: _flat_cat(o.hidden_states[-2], o.text_embeds))


def test_t5_encoder(pipe_dir):
    from transformers import T5EncoderModel

    model = T5EncoderModel.from_pretrained(pipe_dir("flux"), subfolder="text_encoder_2")
    ids = _ids(model.config.vocab_size, length=12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    check_component(model, dict(input_ids=ids, attention_mask=mask), out_fn=lambda o: o.last_hidden_state)


def test_mistral3_text(pipe_dir):
    from transformers import Mistral3ForConditionalGeneration

    model = Mistral3ForConditionalGeneration.from_pretrained(pipe_dir("flux2"), subfolder="text_encoder")
    ids = _ids(model.config.text_config.vocab_size, length=10)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding, as the Flux2 pipeline's tokenizer produces
    inputs = dict(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    # Flux2 reads hidden states of intermediate layers; compare them all, plus the logits.
    check_component(model, inputs, out_fn=lambda o: _flat_cat(*o.hidden_states, o.logits))


@pytest.mark.parametrize("dynamic", [True, False])
def test_flow_match_euler_scheduler(pipe_dir, dynamic):
    from diffusers import FlowMatchEulerDiscreteScheduler

    config = FlowMatchEulerDiscreteScheduler.load_config(pipe_dir("flux"), subfolder="scheduler")
    config["use_dynamic_shifting"] = dynamic
    results = {}
    for device in ("cpu", "tpu"):
        sched = FlowMatchEulerDiscreteScheduler.from_config(config)
        sched.set_timesteps(3, device=device, **({"mu": 0.8} if dynamic else {}))
        torch.manual_seed(1)
        sample = torch.randn(2, 16, 8).to(device)
        outs = [sched.timesteps]
        for t in sched.timesteps:
            out = torch.randn(2, 16, 8).to(device)
            sample = sched.step(out, t, sample).prev_sample
            assert sample.device.type == device
            outs.append(sample)
        results[device] = outs
    assert results["tpu"][0].device.type == "tpu"
    assert_close(results["tpu"], results["cpu"], atol=1e-5, rtol=1e-5)

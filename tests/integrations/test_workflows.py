"""Real diffusers/transformers workflows as call sequences, tpu against CPU torch.

One tiny pipeline (``torch_tpu.testing.tiny_pipelines``, built offline) called again and again with
changing resolution, batch, ``num_images_per_prompt``, guidance, steps, output types, reused prompt
embeddings, callbacks that rewrite the latents, generator lists, VAE slicing/tiling, fused QKV and
attention processors, while the eager mode switches between calls; training sequences on tiny diffusers
models (AdamW with gradient accumulation and clipping, diffusers' ``EMAModel`` with store/copy_to/restore,
gradient checkpointing, frozen subsets, bf16 weights with fp32 master copies, a checkpoint saved mid-run
and continued on a fresh CPU model), in strict, fused and regionally compiled form; CLIP/T5 text encoders
with padding variants and changing lengths, compiled. Every result is compared with the same workflow on
CPU torch (same seed, CPU generators). Cases run in one crash-tolerant child process.

Found here: ``EMAModel.restore`` (``_foreach_copy_`` from CPU copies into tpu parameters) raised a
device mismatch; ``compile_repeated_blocks`` in fused eager failed (dynamo traced fused eager's module
hooks); moving accelerate's sequentially offloaded (meta) weights to the tpu raised numpy's TypeError;
pinning CPU memory (``DataLoader(pin_memory=True)``, ``EMAModel.pin_memory()``) raised "register
PrivateUse1HooksInterface" once "tpu" was the accelerator.
"""
import copy
import io
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.harness.inputs import rand
from tests.harness.isolated import isolated_case_tests
import torch_tpu

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
STRICT, FUSED = torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE
_PIPES = {}


def _pipe(kind, device="cpu"):
    """One pipeline per (kind, device) per worker process (loading costs more than a call)."""
    from torch_tpu.testing import tiny_pipelines as tp

    if (kind, device) not in _PIPES:
        pipe = tp.load_pipeline(kind, "tiny")
        _PIPES[(kind, device)] = pipe.to(device) if device != "cpu" else pipe
    return _PIPES[(kind, device)]


def _np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy()
    if isinstance(x, list) and x and not isinstance(x[0], np.ndarray):  # PIL images
        return np.stack([np.asarray(i, dtype=np.float32) for i in x])
    return np.asarray(x, dtype=np.float32)


def _close(got, exp, what, tol=1e-4):
    got, exp = _np(got), _np(exp)
    assert got.shape == exp.shape, f"[wrong shape] {what}: {got.shape} vs CPU {exp.shape}"
    assert np.isfinite(got).all(), f"[wrong value] {what}: non-finite values"
    d = float(np.abs(got - exp).max()) if got.size else 0.0
    assert d <= tol, f"[wrong value] {what}: max abs diff tpu vs cpu {d:.3g} > {tol}"


def _images(pipe, **kw):
    kw.setdefault("num_inference_steps", 2)
    kw.setdefault("height", 64)
    kw.setdefault("width", 64)
    if "prompt_embeds" not in kw:
        kw.setdefault("prompt", "a cat")
    gen = kw.pop("seeds", None)
    kw["generator"] = ([torch.Generator("cpu").manual_seed(s) for s in gen] if gen
                       else torch.Generator("cpu").manual_seed(0))
    kw.setdefault("output_type", "np")
    out = pipe(**kw)
    return out[0] if isinstance(out, tuple) else out.images


def _both(call, what, tol=1e-4, kind="flux"):
    _close(call(_pipe(kind, "tpu")), call(_pipe(kind)), what, tol)


# ---------------------------------------------------------------------------------------------------
# one pipeline, many calls


def _halve_latents(pipe, i, t, kwargs):
    kwargs["latents"] = kwargs["latents"] * 0.5 + 0.1
    return kwargs


FLUX_CALLS = [  # (eager mode, label, arguments): the mode switches strict -> fused -> strict between calls
    (STRICT, "80x48 pt", dict(height=80, width=48, output_type="pt")),
    (FUSED, "two prompts, generator list, latent", dict(prompt=["a", "a red car"], seeds=[1, 2],
                                                        output_type="latent")),
    (FUSED, "num_images_per_prompt 2, 3 steps, guidance 7", dict(num_images_per_prompt=2, num_inference_steps=3,
                                                                 guidance_scale=7.0)),
    (STRICT, "callback rewrites latents, return_dict False", dict(callback_on_step_end=_halve_latents,
                                                                  callback_on_step_end_tensor_inputs=["latents"],
                                                                  return_dict=False)),
]


def _flux_call_sequence():
    """The same tpu pipeline called with changing arguments while the eager mode switches between calls;
    then moved to the CPU and back, VAE slicing + tiling, fused QKV projections and the VAE's
    AttnProcessor; every image against the CPU pipeline's."""
    from diffusers.models.attention_processor import AttnProcessor

    for mode, what, kw in FLUX_CALLS:
        with torch.tpu.set_eager_mode(mode):
            _both(lambda p: _images(p, **kw), f"{what} ({mode.name})")
    dev = _pipe("flux", "tpu")
    dev.to("cpu")
    dev.to("tpu")
    assert dev.transformer.device.type == "tpu"
    for p in (dev, _pipe("flux")):
        p.vae.enable_slicing()
        p.vae.enable_tiling()
        p.transformer.fuse_qkv_projections()
        p.vae.set_attn_processor(AttnProcessor())
    try:
        with torch.tpu.set_eager_mode(FUSED):
            _both(lambda p: _images(p, num_images_per_prompt=2), "slicing, tiling, fused qkv")
    finally:
        for p in (dev, _pipe("flux")):
            p.vae.disable_slicing()
            p.vae.disable_tiling()
            p.transformer.unfuse_qkv_projections()


def _sd3_embeds_sequence():
    """SD3 with classifier-free guidance: prompt embeddings encoded once (num_images_per_prompt=2) and
    reused at two guidance scales and resolutions, a negative prompt, skip_guidance_layers, in fused eager."""
    def run(p):
        pe, npe, ppe, nppe = p.encode_prompt(prompt="a cat", prompt_2=None, prompt_3=None, negative_prompt="ugly",
                                             device=p.device, num_images_per_prompt=2)
        emb = dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                   negative_pooled_prompt_embeds=nppe)
        a = _images(p, guidance_scale=5.0, **emb)
        b = _images(p, guidance_scale=2.0, height=48, width=48, output_type="pt", **emb)
        c = _images(p, guidance_scale=3.0, negative_prompt="blurry", skip_guidance_layers=[1], num_inference_steps=3,
                    callback_on_step_end=_halve_latents, callback_on_step_end_tensor_inputs=["latents"])
        return np.concatenate([_np(x).reshape(-1) for x in (a, b, c, pe, nppe)])

    with torch.tpu.set_eager_mode(FUSED):
        _both(run, "sd3 embeddings reused", kind="sd3")


def _sequential_offload_then_to():
    """enable_sequential_cpu_offload runs like CPU; then .to("tpu") of its meta weights is refused with
    torch's error for a meta copy (was numpy's TypeError)."""
    from torch_tpu.testing import tiny_pipelines as tp

    pipe = tp.load_pipeline("flux", "tiny")
    pipe.enable_sequential_cpu_offload(device="tpu")
    _close(_images(pipe), _images(_pipe("flux")), "sequential offload")
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!.*offload"):
        pipe.to("tpu")
    meta = torch.nn.Linear(2, 3, device="meta")
    with pytest.raises(NotImplementedError, match=r"Cannot copy out of meta tensor; no data! \(\(3, 2\) torch.float32"):
        meta.to("tpu")
    with pytest.raises(NotImplementedError, match="meta tensor; no data"):
        torch.zeros(3, 2, device="tpu").copy_(meta.weight)


# ---------------------------------------------------------------------------------------------------
# training


def _pinned_loader_ema_offload():
    """A training loop as diffusers' train_text_to_image.py writes it with --offload_ema: batches from a
    DataLoader(pin_memory=True), EMAModel.pin_memory() and the EMA moved to the device for each step and
    back (non_blocking). With "tpu" as the accelerator, pinning raised "register
    PrivateUse1HooksInterface" (in CPU-only code too)."""
    from diffusers.training_utils import EMAModel

    x = torch.arange(12.0).reshape(2, 6).t()
    pinned = x.pin_memory()
    assert pinned.stride() == x.stride() and torch.equal(pinned, x) and pinned.data_ptr() != x.data_ptr()
    data = torch.utils.data.TensorDataset(rand(8, 6), rand(8, 3, seed=2))

    def run(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 3)).to(device)
        ema = EMAModel(m.parameters(), decay=0.7, use_ema_warmup=False, foreach=True)
        ema.to("cpu")
        ema.pin_memory()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-4)
        losses = []
        for xb, yb in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True):
            loss = F.mse_loss(m(xb.to(device, non_blocking=True)), yb.to(device, non_blocking=True))
            loss.backward()
            opt.step()
            opt.zero_grad()
            ema.to(device, non_blocking=True)
            ema.step(m.parameters())
            ema.to("cpu", non_blocking=True)
            losses.append(loss.detach().cpu())
        return [torch.stack(losses), *[p.detach().cpu() for p in ema.shadow_params], *m.parameters()]

    for i, (a, b) in enumerate(zip(run("tpu"), run("cpu"))):
        _close(a, b, f"result {i}")


def _tiny_unet():
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=12, norm_num_groups=4, attention_head_dim=4)


def _unet_batches(n=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 5, 12, generator=g),
             torch.randint(0, 1000, (2,), generator=g), torch.randn(2, 4, 8, 8, generator=g)) for _ in range(n)]


def _unet_loss(m, batch, device):
    x, c, t, y = (v.to(device) for v in batch)
    return F.mse_loss(m(x, t, encoder_hidden_states=c).sample.float(), y)


def _unet_training(device):
    """AdamW (eps 1e-4: with torch's 1e-8, gradients of 1e-9 make the update an amplifier of rounding)
    with gradient accumulation over 2 micro-batches, clipping, gradient checkpointing, frozen norms
    (LoRA-like), diffusers' EMAModel (foreach); a checkpoint (model, optimizer, EMA) saved mid-run and
    loaded into a fresh CPU model that continues beside the original; EMA store -> copy_to -> eval ->
    restore (restore copies CPU-stored tensors into the model's: _foreach_copy_ across devices)."""
    from diffusers.training_utils import EMAModel

    batches = _unet_batches()
    m = _tiny_unet().to(device)
    m.enable_gradient_checkpointing()
    for n, p in m.named_parameters():
        if "norm" in n:
            p.requires_grad_(False)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, eps=1e-4)
    ema = EMAModel(m.parameters(), decay=0.8, use_ema_warmup=True, foreach=True)
    losses = []
    for i, batch in enumerate(batches[:2]):
        loss = _unet_loss(m, batch, device) / 2
        loss.backward()
        losses.append(loss.detach())
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.step(m.parameters())
    buf = io.BytesIO()
    torch.save({"model": m.state_dict(), "opt": opt.state_dict(), "ema": ema.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf, map_location="cpu", weights_only=False)
    fresh = _tiny_unet()
    fresh.load_state_dict(ck["model"])
    fresh.requires_grad_(False)
    for n, p in fresh.named_parameters():
        p.requires_grad_("norm" not in n)
    fopt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01, eps=1e-4)
    fopt.load_state_dict(ck["opt"])
    fema = EMAModel(fresh.parameters(), decay=0.8, use_ema_warmup=True, foreach=True)
    fema.load_state_dict(ck["ema"])
    results = [losses]
    for model, o, e, dev in ((m, opt, ema, device), (fresh, fopt, fema, "cpu")):
        model.train()
        _unet_loss(model, batches[2], dev).backward()
        o.step()
        o.zero_grad()
        e.step(model.parameters())
        e.store(model.parameters())
        e.copy_to(model.parameters())
        model.eval()
        with torch.no_grad():
            ev = _unet_loss(model, batches[3], dev)
        e.restore(model.parameters())
        results.append([ev, list(model.parameters()), e.shadow_params])
    return results


def _unet_training_case():
    cpu, tpu = _unet_training("cpu"), _unet_training("tpu")
    _close(torch.stack([x.cpu() for x in tpu[0]]), torch.stack(cpu[0]), "losses")
    for j, what in ((1, "continued in place"), (2, "continued from the checkpoint on a fresh CPU model")):
        _close(tpu[j][0], cpu[j][0], f"{what}: eval loss with EMA weights")
        for k, label in ((1, "parameters after restore"), (2, "EMA shadow parameters")):
            for i, (a, b) in enumerate(zip(tpu[j][k], cpu[j][k])):
                _close(a, b, f"{what}: {label} {i}")


def _flux_transformer():
    from diffusers import FluxTransformer2DModel

    from torch_tpu.testing import tiny_pipelines as tp

    return FluxTransformer2DModel.from_pretrained(tp.build_pipeline_dir("flux", "tiny"), subfolder="transformer")


def _flux_batches(n, side=4):
    ids = torch.zeros(side, side, 3)
    ids[..., 1] = torch.arange(side)[:, None]
    ids[..., 2] = torch.arange(side)[None, :]
    g = torch.Generator().manual_seed(0)
    return [(dict(hidden_states=torch.randn(2, side * side, 16, generator=g),
                  encoder_hidden_states=torch.randn(2, 7, 64, generator=g),
                  pooled_projections=torch.randn(2, 32, generator=g), timestep=torch.rand(2, generator=g),
                  img_ids=ids.reshape(-1, 3), txt_ids=torch.zeros(7, 3), guidance=torch.full((2,), 3.5)),
             torch.randn(2, side * side, 16, generator=g)) for _ in range(n)]


def _flux_training(model, device, compile_blocks, master_bf16=False):
    m = copy.deepcopy(model).to(device)
    m.train()
    if compile_blocks:
        m.compile_repeated_blocks(backend="tpu", fullgraph=True, dynamic=False)
    if master_bf16:  # bf16 weights, fp32 master copies that the optimizer steps
        m.to(torch.bfloat16)
        master = [p.detach().float().clone().requires_grad_() for p in m.parameters()]
        opt = torch.optim.SGD(master, lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, eps=1e-4)
    losses = []
    for i, (batch, target) in enumerate(_flux_batches(3)):
        batch = {k: v.to(device) for k, v in batch.items()}
        if master_bf16:
            batch = {k: v.bfloat16() if v.is_floating_point() and "ids" not in k else v for k, v in batch.items()}
        m.train(i != 1)  # train / eval switching: the eval step computes a loss without stepping
        if not m.training:
            with torch.no_grad():
                losses.append(F.mse_loss(m(**batch, return_dict=False)[0].float(), target.to(device)).cpu())
            continue
        loss = F.mse_loss(m(**batch, return_dict=False)[0].float(), target.to(device))
        loss.backward()
        losses.append(loss.detach().cpu())
        if master_bf16:
            for p, q in zip(m.parameters(), master):
                q.grad = p.grad.float()
                p.grad = None
        opt.step()
        opt.zero_grad()
        if master_bf16:
            with torch.no_grad():
                for p, q in zip(m.parameters(), master):
                    p.copy_(q)
    return torch.stack(losses), [p.detach().cpu().float() for p in (master if master_bf16 else m.parameters())]


def _flux_training_regional_fused():
    """compile_repeated_blocks(fullgraph=True) training in fused eager (forward, backward, AdamW),
    train/eval switching between steps."""
    model = _flux_transformer()
    exp = _flux_training(model, "cpu", False)
    with torch.tpu.set_eager_mode(FUSED):
        got = _flux_training(model, "tpu", True)
    _close(got[0], exp[0], "losses")
    for i, (a, b) in enumerate(zip(got[1], exp[1])):
        _close(a, b, f"parameter {i}")


def _flux_master_bf16():
    """bf16 weights + fp32 master copies (SGD with momentum: updates proportional to the gradients, so
    bf16 rounding stays small in the parameters); tpu within bf16 rounding of CPU bf16."""
    model = _flux_transformer()
    exp = _flux_training(model, "cpu", False, master_bf16=True)
    got = _flux_training(model, "tpu", False, master_bf16=True)
    _close(got[0], exp[0], "bf16 losses", tol=2e-2)
    d = max(float((a - b).abs().max()) for a, b in zip(got[1], exp[1]))
    moved = max(float((b - p.detach().float()).abs().max()) for b, p in zip(exp[1], model.parameters()))
    assert moved > 1e-3 and d < 0.1 * moved, f"[wrong value] bf16 master weights: tpu vs cpu {d:.3g}, moved {moved:.3g}"


# ---------------------------------------------------------------------------------------------------
# text encoders


def _text_encoders():
    """T5EncoderModel compiled (automatic dynamic shapes) and CLIPTextModel in fused eager, called with
    changing max lengths, batch sizes, padding="longest"/"max_length", with and without the attention
    mask, with output_hidden_states."""
    import torch._dynamo

    pipe = _pipe("flux")
    prompts = ["a cat", "a very long prompt about a red car driving in the city at night", ""]
    calls = [(12, "max_length", True, True, prompts), (5, "longest", False, False, prompts[1:]),
             (33, "max_length", False, True, prompts[:2])]
    torch._dynamo.reset()
    for model, tok, tag in ((pipe.text_encoder_2, pipe.tokenizer_2, "compiled"),
                            (pipe.text_encoder, pipe.tokenizer, "fused")):
        dev = copy.deepcopy(model).to("tpu")
        run = torch.compile(dev, backend="tpu") if tag == "compiled" else dev
        for maxlen, pad, hidden, mask, texts in calls:
            b = tok(texts, padding=pad, max_length=maxlen, truncation=True, return_tensors="pt")

            def enc(m, device):
                kw = dict(input_ids=b.input_ids.to(device), output_hidden_states=hidden)
                if mask:
                    kw["attention_mask"] = b.attention_mask.to(device)
                with torch.no_grad():
                    o = m(**kw)
                outs = [o.last_hidden_state, *(o.hidden_states if hidden else ()),
                        *([o.pooler_output] if getattr(o, "pooler_output", None) is not None else [])]
                return torch.cat([x.flatten().cpu() for x in outs])

            with torch.tpu.set_eager_mode(FUSED if tag == "fused" else STRICT):
                got = enc(run, "tpu")
            _close(got, enc(model, "cpu"), f"{type(model).__name__} {tag} max_length={maxlen} {pad} "
                                           f"hidden={hidden} mask={mask} batch={len(texts)}")


ISOLATED_CASES = {
    "flux_call_sequence": _flux_call_sequence,
    "sd3_embeds_sequence": _sd3_embeds_sequence,
    "sequential_offload_then_to": _sequential_offload_then_to,
    "unet_training_ema_checkpoint": _unet_training_case,
    "pinned_loader_ema_offload": _pinned_loader_ema_offload,
    "flux_training_regional_fused": _flux_training_regional_fused,
    "flux_master_bf16": _flux_master_bf16,
    "text_encoders": _text_encoders,
}


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=240)


@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="torch.empty(..., pin_memory=True) allocates through PrivateUse1's pinned "
                   "allocator in C++, which Python hooks cannot provide: an unclear NotImplementedError remains")
def test_empty_pinned_factory():
    x = torch.empty(3, pin_memory=True)
    assert x.device.type == "cpu"

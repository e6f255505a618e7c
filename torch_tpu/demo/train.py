"""Train the demo model: the VAE, then the transformer (the text encoders stay frozen).

Deterministic: every random draw (initial weights, images, noise, timesteps) comes from seeded CPU
generators and is moved to the training device, so CPU torch and the tpu device see the same numbers.

Stages:

1. VAE: reconstruction MSE in [-1, 1] pixel space plus a small KL term, on fresh random batches.
   Then the latent statistics of the trained encoder set ``shift_factor`` / ``scaling_factor`` (the
   transformer sees latents with mean 0 and std 1, as Flux's do).
2. Transformer: rectified-flow matching as in diffusers' Flux training scripts: latents x0 from the
   frozen VAE (posterior sample), noise n, sigma from a logit-normal shifted by FluxPipeline's
   resolution-dependent shift, x_sigma = (1 - sigma) x0 + sigma n, packed 2x2 into tokens, target n - x0,
   timestep input sigma (the pipeline passes t / 1000 = sigma).  An exponential moving average of the
   weights is what gets saved.

After each stage the whole pipeline is written with ``save_pretrained`` (from the training device).

Why one module: the demo's two training stages and their modes, run as one program.
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from . import model as _model
from . import shapes as _shapes

__all__ = ["COMPILED", "COMPILED_OPTIMIZER", "TrainConfig", "fit_latent_stats", "images_to_tensor", "train", "train_transformer", "train_vae", "encode_latent_cache"]


# stage modes of ``train`` besides the eager modes: torch.compile(backend="tpu") of the loss (forward and
# backward) and of the optimizer step, or of the optimizer step only (the loss in strict eager)
COMPILED = "COMPILED"
COMPILED_OPTIMIZER = "COMPILED_OPTIMIZER"


@dataclasses.dataclass
class TrainConfig:
    seed: int = 0
    vae_steps: int = 800
    vae_batch: int = 16
    vae_lr: float = 2e-3
    kl_weight: float = 1e-4  # on the KL per latent element, against the MSE per pixel
    transformer_steps: int = 7500
    transformer_batch: int = 32
    transformer_lr: float = 1e-3
    latent_cache: int = 16384  # images encoded once before the transformer stage (posterior mean and std)
    warmup: int = 100
    ema_decay: float = 0.999
    log_every: int = 10


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (n, H, W, 3) -> float32 (n, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0).contiguous()


def _lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(total - warmup, 1)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return f


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, dynamic_ncols=True, smoothing=0.1)


class _LossMeter:
    """Averages the loss on the device; reads it back (a sync) only every ``every`` steps."""

    def __init__(self, every: int):
        self.every, self.sum, self.n, self.last = every, None, 0, float("nan")

    def add(self, loss: torch.Tensor) -> float | None:
        d = loss.detach()
        self.sum = d if self.sum is None else self.sum + d
        self.n += 1
        if self.n == self.every:
            self.last = float(self.sum) / self.n
            self.sum, self.n = None, 0
            return self.last
        return None


def vae_loss(vae, x: torch.Tensor, eps: torch.Tensor, kl_weight: float) -> torch.Tensor:
    """Reconstruction MSE of a posterior sample (``eps`` the standard normal draw) plus the weighted KL."""
    post = vae.encode(x).latent_dist
    z = post.mean + post.std * eps
    rec = vae.decode(z).sample
    mse = F.mse_loss(rec, x)
    kl = 0.5 * (post.mean.pow(2) + post.var - 1.0 - post.logvar).mean()
    return mse + kl_weight * kl


def _maybe_compile(fn, compile: bool):
    """``torch.compile(fn, backend="tpu")`` with static shapes, one graph (forward and backward programs)."""
    if not compile:
        return fn
    return torch.compile(fn, backend="tpu", fullgraph=True, dynamic=False)


class _Update:
    """AdamW under the warmup + cosine schedule (``_lr_lambda``), then optionally an EMA of the weights.

    ``update()`` after ``loss.backward()`` does one optimizer step; step ``i`` uses the learning rate
    ``lr * _lr_lambda(warmup, total)(i)`` (what ``LambdaLR`` would give) and the EMA decay
    ``min(ema_decay, (1 + i) / (10 + i))``.

    With ``compile`` the update is ``torch.compile``d (backend "tpu"): the optimizer's step (its state
    updates) and the EMA become XLA programs instead of hundreds of eager ops.  What changes from step
    to step must then be a tensor, not a Python float that dynamo would specialise (a recompile every
    step): the learning rate is a device tensor filled before each step (AdamW with a tensor ``lr``
    needs ``capturable=True``, which also keeps its step counts on the device), the EMA's step count a
    device tensor the program advances.
    """

    def __init__(self, params: list, lr: float, warmup: int, total: int, device: str, compile: bool,
                 ema_decay: float | None = None):
        self.params, self.base_lr, self.lam = params, lr, _lr_lambda(warmup, total)
        self.ema_decay, self.i, self.compile = ema_decay, 0, compile
        self.ema = [p.detach().clone() for p in params] if ema_decay is not None else None
        if compile:
            self.lr = torch.tensor(lr * self.lam(0), device=device)
            self.count = torch.zeros((), device=device)
            self.opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=0.0, foreach=True, capturable=True)
            self._run = torch.compile(self._compiled_step, backend="tpu", dynamic=False)
        else:
            self.opt = torch.optim.AdamW(params, lr=lr * self.lam(0), weight_decay=0.0)

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def __call__(self) -> None:
        lr = self.base_lr * self.lam(self.i)
        if self.compile:
            self.lr.fill_(lr)
            self._run()
        else:
            for g in self.opt.param_groups:
                g["lr"] = lr
            self.opt.step()
            if self.ema is not None:
                _ema_update(self.ema, self.params, min(self.ema_decay, (1.0 + self.i) / (10.0 + self.i)))
        self.i += 1

    def _compiled_step(self) -> None:
        # AdamW.step breaks the graph around its body (torch.optim's no-grad guard): two programs
        self.opt.step()
        if self.ema is not None:
            with torch.no_grad():
                decay = torch.clamp((1.0 + self.count) / (10.0 + self.count), max=self.ema_decay)
                torch._foreach_mul_(self.ema, decay)
                torch._foreach_add_(self.ema, torch._foreach_mul(self.params, 1.0 - decay))
                self.count.add_(1.0)


def train_vae(vae, cfg: TrainConfig, device: str, progress: bool = True,
              on_step: Callable[[int], None] | None = None, compile: bool = False,
              compile_update: bool | None = None) -> dict:
    """Train ``vae`` (already on ``device``) in place; returns timing and loss statistics.

    ``compile``: the loss's forward and backward under torch.compile; ``compile_update``: the optimizer
    step (default: as ``compile``)."""
    vae.train()
    vae.requires_grad_(True)
    update = _Update(list(vae.parameters()), cfg.vae_lr, cfg.warmup, cfg.vae_steps, device,
                     compile if compile_update is None else compile_update)
    data = _shapes.batches(cfg.seed * 1000 + 1, cfg.vae_batch)
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + 2)
    side = vae.config.sample_size // 2 ** (len(vae.config.block_out_channels) - 1)
    latent_shape = (cfg.vae_batch, vae.config.latent_channels, side, side)
    loss_fn = _maybe_compile(vae_loss, compile)
    meter = _LossMeter(cfg.log_every)
    bar = _progress(cfg.vae_steps, "vae", progress)
    t0 = time.perf_counter()
    for step in range(cfg.vae_steps):
        x = images_to_tensor(next(data).images).to(device)
        eps = torch.randn(latent_shape, generator=gen).to(device)
        loss = loss_fn(vae, x, eps, cfg.kl_weight)
        update.zero_grad()
        loss.backward()
        update()
        avg = meter.add(loss)
        if avg is not None:
            bar.set_postfix(loss=f"{avg:.5f}")
        bar.update(1)
        if on_step is not None:
            on_step(step)
    final = float(loss.detach())  # also waits for the device
    seconds = time.perf_counter() - t0
    bar.close()
    vae.eval()
    vae.requires_grad_(False)
    return dict(steps=cfg.vae_steps, seconds=seconds, steps_per_s=cfg.vae_steps / seconds,
                final_loss=final, last_avg_loss=meter.last)


@torch.no_grad()
def fit_latent_stats(vae, device: str, seed: int, n: int = 512, batch: int = 64) -> tuple[float, float]:
    """Set the VAE's shift_factor / scaling_factor so its posterior means have mean 0 and std 1."""
    rng = np.random.Generator(np.random.PCG64(seed))
    chunks = []
    for i in range(0, n, batch):
        x = images_to_tensor(_shapes.sample(rng, min(batch, n - i)).images).to(device)
        chunks.append(vae.encode(x).latent_dist.mean.float().cpu())
    lat = torch.cat(chunks)
    shift = float(lat.mean())
    scale = float(1.0 / lat.std())
    vae.register_to_config(shift_factor=shift, scaling_factor=scale)
    return shift, scale


@torch.no_grad()
def encode_latent_cache(vae, device: str, seed: int, n: int, batch: int = 128):
    """Encode ``n`` fresh data set images: (posterior means, stds, labels), all on ``device``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    means, stds, labels = [], [], []
    for i in range(0, n, batch):
        s = _shapes.sample(rng, min(batch, n - i))
        post = vae.encode(images_to_tensor(s.images).to(device)).latent_dist
        means.append(post.mean)
        stds.append(post.std)
        labels.append(torch.from_numpy(s.labels).to(device))
    return torch.cat(means), torch.cat(stds), torch.cat(labels)


def _ema_update(ema: list[torch.Tensor], params: list[torch.Tensor], decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema, params):
            e.mul_(decay).add_(p.detach(), alpha=1.0 - decay)


def flow_matching_loss(transformer, text, cache, idx, eps, noise, sigma, latent_stats) -> torch.Tensor:
    """Rectified-flow loss of one batch.

    text = (T5 embeddings, pooled CLIP embeddings of the 12 prompts, text ids, image ids);
    cache = (posterior means, stds, labels) of the encoded images; ``idx`` picks the batch, ``eps`` draws
    its latents from the posteriors, ``noise`` and ``sigma`` noise them; latent_stats = (shift, scale).
    """
    from diffusers import FluxPipeline

    prompt_embeds, pooled, text_ids, img_ids = text
    cache_mean, cache_std, cache_labels = cache
    shift_f, scale_f = latent_stats
    b, c, side, _ = noise.shape
    labels = cache_labels[idx]
    x0 = ((cache_mean[idx] + cache_std[idx] * eps) - shift_f) * scale_f
    sig = sigma.view(b, 1, 1, 1)
    noisy = (1.0 - sig) * x0 + sig * noise
    packed = FluxPipeline._pack_latents(noisy, b, c, side, side)
    target = FluxPipeline._pack_latents(noise - x0, b, c, side, side)
    pred = transformer(
        hidden_states=packed,
        timestep=sigma,
        pooled_projections=pooled[labels],
        encoder_hidden_states=prompt_embeds[labels],
        txt_ids=text_ids,
        img_ids=img_ids,
        return_dict=False,
    )[0]
    return F.mse_loss(pred, target)


def train_transformer(pipe, mcfg: _model.DemoConfig, cfg: TrainConfig, device: str,
                      progress: bool = True, on_step: Callable[[int], None] | None = None,
                      compile: bool = False, compile_update: bool | None = None) -> dict:
    """Train ``pipe.transformer`` (pipeline already on ``device``) in place; the EMA weights end up in it.

    ``compile``: the loss's forward and backward under torch.compile; ``compile_update``: the optimizer
    step and the EMA (default: as ``compile``)."""
    from diffusers import FluxPipeline

    vae, transformer = pipe.vae, pipe.transformer
    vae.eval().requires_grad_(False)
    with torch.no_grad():
        prompt_embeds, pooled, text_ids = pipe.encode_prompt(
            prompt=list(_shapes.PROMPTS), prompt_2=None, device=torch.device(device),
            max_sequence_length=mcfg.max_sequence_length)
    shift_f, scale_f = float(vae.config.shift_factor), float(vae.config.scaling_factor)
    b = cfg.transformer_batch
    side = mcfg.image_size // mcfg.vae_scale_factor  # latent grid
    c = mcfg.latent_channels
    img_ids = FluxPipeline._prepare_latent_image_ids(b, side // 2, side // 2, torch.device(device), torch.float32)
    s = _model.time_shift(pipe.scheduler, _model.latent_tokens(mcfg))

    # The VAE encoder costs more than the transformer step: encode a fixed set of images once, keep
    # each posterior (mean, std) and draw a fresh latent from it at every use, as Flux trainers that
    # cache latents do.
    t_cache = time.perf_counter()
    cache_mean, cache_std, cache_labels = encode_latent_cache(vae, device, cfg.seed * 1000 + 3, cfg.latent_cache)
    float(cache_mean[0, 0, 0, 0])  # wait for the device
    cache_seconds = time.perf_counter() - t_cache
    n_cache = cache_labels.shape[0]

    transformer.train()
    transformer.requires_grad_(True)
    params = [p for p in transformer.parameters()]
    update = _Update(params, cfg.transformer_lr, cfg.warmup, cfg.transformer_steps, device,
                     compile if compile_update is None else compile_update,
                     ema_decay=cfg.ema_decay)
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + 4)
    text = (prompt_embeds, pooled, text_ids, img_ids)
    cache = (cache_mean, cache_std, cache_labels)
    loss_fn = _maybe_compile(flow_matching_loss, compile)
    meter = _LossMeter(cfg.log_every)
    bar = _progress(cfg.transformer_steps, "transformer", progress)
    t0 = time.perf_counter()
    for step in range(cfg.transformer_steps):
        idx = torch.randint(n_cache, (b,), generator=gen).to(device)
        eps = torch.randn((b, c, side, side), generator=gen).to(device)
        noise = torch.randn((b, c, side, side), generator=gen).to(device)
        u = torch.sigmoid(torch.randn((b,), generator=gen))
        sigma = (s * u / (1.0 + (s - 1.0) * u)).to(device)
        loss = loss_fn(transformer, text, cache, idx, eps, noise, sigma, (shift_f, scale_f))
        update.zero_grad()
        loss.backward()
        update()
        avg = meter.add(loss)
        if avg is not None:
            bar.set_postfix(loss=f"{avg:.4f}")
        bar.update(1)
        if on_step is not None:
            on_step(step)
    final = float(loss.detach())
    seconds = time.perf_counter() - t0
    bar.close()
    with torch.no_grad():
        for p, e in zip(params, update.ema):
            p.copy_(e)
    transformer.eval()
    transformer.requires_grad_(False)
    return dict(steps=cfg.transformer_steps, seconds=seconds, steps_per_s=cfg.transformer_steps / seconds,
                final_loss=final, last_avg_loss=meter.last, latent_cache_seconds=cache_seconds)


def _save(pipe, out: pathlib.Path, info: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(out), safe_serialization=True)
    (out / "torch_tpu_demo.json").write_text(json.dumps(info, indent=2, default=str) + "\n")


def train(out: str, device: str = "cpu", mcfg: _model.DemoConfig = _model.DemoConfig(),
          cfg: TrainConfig = TrainConfig(), stages: tuple[str, ...] = ("vae", "transformer"),
          resume: str | None = None, progress: bool = True, modes: dict[str, str] | None = None) -> dict:
    """Build the pipeline, train ``stages`` on ``device``, save it to ``out``.

    ``modes`` (tpu only): how each stage runs, by name: an eager mode ("DEFER_NEVER", "DEFER_AND_FUSE")
    or "COMPILED" (the loss's forward and backward and the optimizer step under ``torch.compile``,
    the few ops around them in strict eager) or "COMPILED_OPTIMIZER" (only the optimizer step compiled,
    the rest strict eager), e.g. {"vae": "COMPILED_OPTIMIZER", "transformer": "COMPILED"};
    a stage not named runs in the current mode.

    With ``resume`` (a folder saved by an earlier run), the components of the stages not trained now
    are taken from there (their config must agree with ``mcfg``).
    """
    from diffusers import FluxPipeline

    out_path = pathlib.Path(out)
    pipe = _model.build_pipeline(mcfg, cfg.seed)
    info: dict = {}
    if resume:
        # Components this run does not train come from ``resume`` (e.g. a VAE trained earlier).
        saved = FluxPipeline.from_pretrained(resume, local_files_only=True)
        info = json.loads((pathlib.Path(resume) / "torch_tpu_demo.json").read_text())
        keep = {"vae": "vae", "transformer": "transformer"}
        for stage, name in keep.items():
            if stage not in stages:
                mine, theirs = getattr(pipe, name).config, getattr(saved, name).config
                differ = [k for k in ("block_out_channels", "latent_channels", "in_channels", "num_layers",
                                      "num_single_layers", "attention_head_dim", "num_attention_heads")
                          if k in mine and tuple(np.atleast_1d(mine[k])) != tuple(np.atleast_1d(theirs[k]))]
                if differ:
                    raise ValueError(f"--resume {resume}: its {name} differs from the requested config in {differ}")
                pipe.register_modules(**{name: getattr(saved, name)})
        for k in list(info.get("stages", {})):
            if k in stages:
                del info["stages"][k]
        del saved
    info.update(model_config=dataclasses.asdict(mcfg), generation=_model.generation_kwargs(mcfg),
                prompts=list(_shapes.PROMPTS))
    info.setdefault("stages", {})
    pipe.set_progress_bar_config(disable=True)
    pipe.to(device)
    if "vae" in stages:
        with _stage_mode(device, modes, "vae"):
            loss, step = _compiled(device, modes, "vae")
            stats = train_vae(pipe.vae, cfg, device, progress, compile=loss, compile_update=step)
            shift, scale = fit_latent_stats(pipe.vae, device, cfg.seed * 1000 + 5)
        stats.update(shift_factor=shift, scaling_factor=scale, config=_stage_cfg(cfg, "vae"), device=device,
                     mode=(modes or {}).get("vae") if device == "tpu" else None)
        info["stages"]["vae"] = stats
        _print_stage("vae", stats)
        _save(pipe, out_path, info)
    if "transformer" in stages:
        with _stage_mode(device, modes, "transformer"):
            loss, step = _compiled(device, modes, "transformer")
            stats = train_transformer(pipe, mcfg, cfg, device, progress, compile=loss, compile_update=step)
        stats.update(config=_stage_cfg(cfg, "transformer"), device=device,
                     mode=(modes or {}).get("transformer") if device == "tpu" else None)
        info["stages"]["transformer"] = stats
        _print_stage("transformer", stats)
        _save(pipe, out_path, info)
    return info


def _stage_mode(device: str, modes: dict[str, str] | None, stage: str):
    """The tpu eager mode ``modes[stage]`` for the duration of a stage (nothing on CPU or when unnamed)."""
    import contextlib

    name = (modes or {}).get(stage)
    if device != "tpu" or name is None:
        return contextlib.nullcontext()
    import torch_tpu

    if name in (COMPILED, COMPILED_OPTIMIZER):
        name = "DEFER_NEVER"  # what runs outside the compiled programs
    return torch.tpu.set_eager_mode(getattr(torch_tpu.EagerMode, name))


def _compiled(device: str, modes: dict[str, str] | None, stage: str) -> tuple[bool, bool]:
    """(compile the loss, compile the optimizer step) of ``stage``."""
    name = (modes or {}).get(stage) if device == "tpu" else None
    return name == COMPILED, name in (COMPILED, COMPILED_OPTIMIZER)


def _stage_cfg(cfg: TrainConfig, stage: str) -> dict:
    d = dataclasses.asdict(cfg)
    other = "transformer" if stage == "vae" else "vae"
    return {k: v for k, v in d.items() if not k.startswith(other)}


def _print_stage(name: str, stats: dict) -> None:
    print(f"{name}: {stats['steps']} steps in {stats['seconds']:.1f} s ({stats['steps_per_s']:.2f} steps/s), "
          f"final loss {stats['final_loss']:.5f}", flush=True)

"""The demo model: a small FluxPipeline (CLIP + T5 text encoders, Flux transformer, Flux-style VAE).

Built offline from hand-written configs, in the standard diffusers layout, so ``save_pretrained`` writes
a folder that ``FluxPipeline.from_pretrained`` loads like any Hub model.  The text encoders and
tokenizers are the offline tiny ones of ``torch_tpu.testing.tiny_pipelines`` (random, frozen, fixed seed:
the twelve demo prompts embed differently, which is all the transformer needs); the VAE and the
transformer are trained by ``torch_tpu.demo.train``.

    DemoConfig                 sizes of every component (the defaults are the shipped model's)
    build_pipeline(cfg, seed)  an untrained FluxPipeline on CPU, float32
    generation_kwargs(cfg)     the FluxPipeline call arguments the model was trained for
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import shapes as _shapes

__all__ = ["DemoConfig", "build_pipeline", "generation_kwargs", "latent_tokens", "time_shift"]


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    image_size: int = _shapes.IMAGE_SIZE
    # VAE: len(vae_channels) levels give the spatial factor 2 ** (levels - 1).
    vae_channels: tuple[int, ...] = (8, 16, 32, 32)
    vae_groups: int = 4
    latent_channels: int = 8
    vae_mid_attention: bool = True
    # Transformer: inner dim = heads * head_dim; rope axes are even and sum to head_dim.
    heads: int = 4
    head_dim: int = 32
    rope: tuple[int, int, int] = (8, 12, 12)
    double_layers: int = 2
    single_layers: int = 2
    # Text: T5 tokens the transformer sees (FluxPipeline's max_sequence_length; the longest prompt,
    # "a yellow triangle", is 11 tokens; the pipeline's default 512 would make a step ~15x dearer and
    # draw what the model never saw: the T5 tokenizer caps every request at this length).
    max_sequence_length: int = 16
    num_inference_steps: int = 20

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.vae_channels) - 1)


def latent_tokens(cfg: DemoConfig) -> int:
    """Image tokens of the transformer: the latent grid packed 2x2."""
    side = cfg.image_size // cfg.vae_scale_factor // 2
    return side * side


def generation_kwargs(cfg: DemoConfig = DemoConfig()) -> dict[str, Any]:
    """Arguments for ``FluxPipeline.__call__`` matching how the model was trained."""
    return dict(
        height=cfg.image_size,
        width=cfg.image_size,
        num_inference_steps=cfg.num_inference_steps,
        max_sequence_length=cfg.max_sequence_length,
    )


def time_shift(scheduler, image_seq_len: int) -> float:
    """exp(mu): FluxPipeline's sigma shift for ``image_seq_len`` tokens, sigma' = s*t / (1 + (s-1)*t)."""
    import math

    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    c = scheduler.config
    mu = calculate_shift(image_seq_len, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                         c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    return math.exp(mu)


def build_pipeline(cfg: DemoConfig = DemoConfig(), seed: int = 0):
    """An untrained demo FluxPipeline (CPU, float32), deterministic in ``seed``."""
    from diffusers import AutoencoderKL, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    from ..integrations.tokenizers import CappedT5Tokenizer
    from ..testing.tiny_pipelines import encoders, specs, tokenizers

    if sum(cfg.rope) != cfg.head_dim or any(a % 2 for a in cfg.rope):
        raise ValueError(f"rope axes {cfg.rope} must be even and sum to head_dim {cfg.head_dim}")
    if cfg.image_size % (2 * cfg.vae_scale_factor):
        raise ValueError(f"image size {cfg.image_size} must be a multiple of {2 * cfg.vae_scale_factor}")
    text_spec = specs.SIZE_SPECS["tiny"]  # CLIP hidden 32, T5 d_model 64
    with torch.random.fork_rng(devices=[]):
        tokenizer = tokenizers.make_clip_tokenizer()
        # never more T5 tokens than trained on, whatever max_sequence_length FluxPipeline is called with
        tokenizer_2 = tokenizers.make_t5_tokenizer(cfg.max_sequence_length, cls=CappedT5Tokenizer)
        torch.manual_seed(specs.component_seed(seed, 1))
        text_encoder = CLIPTextModel(encoders.clip_config(text_spec, tokenizer)).eval()
        text_encoder_2 = encoders.t5_encoder(text_spec, tokenizer_2, specs.component_seed(seed, 2))

        torch.manual_seed(specs.component_seed(seed, 3))
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=4 * cfg.latent_channels,
            num_layers=cfg.double_layers,
            num_single_layers=cfg.single_layers,
            attention_head_dim=cfg.head_dim,
            num_attention_heads=cfg.heads,
            joint_attention_dim=text_spec["t5_d_model"],
            pooled_projection_dim=text_spec["clip_hidden"],
            guidance_embeds=False,  # schnell-style: no guidance input, plain conditional flow
            axes_dims_rope=tuple(cfg.rope),
        )

        torch.manual_seed(specs.component_seed(seed, 4))
        n = len(cfg.vae_channels)
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * n,
            up_block_types=("UpDecoderBlock2D",) * n,
            block_out_channels=tuple(cfg.vae_channels),
            layers_per_block=1,
            act_fn="silu",
            latent_channels=cfg.latent_channels,
            norm_num_groups=cfg.vae_groups,
            sample_size=cfg.image_size,
            # Replaced by the latent statistics measured after VAE training.
            scaling_factor=1.0,
            shift_factor=0.0,
            use_quant_conv=False,
            use_post_quant_conv=False,
            mid_block_add_attention=cfg.vae_mid_attention,
            force_upcast=False,
        )
    return FluxPipeline(
        scheduler=encoders.flow_scheduler(dynamic=True),  # FLUX.1's: the shift grows with image tokens
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )

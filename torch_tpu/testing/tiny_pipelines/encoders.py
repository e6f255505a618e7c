"""Text encoders (CLIP, T5, Mistral3), VAEs and flow-matching schedulers with tiny configs."""
from __future__ import annotations

from typing import Any

import torch

from .specs import MISTRAL_LAYERS
from .tokenizers import MISTRAL_SPECIALS, vocab_size

# ----------------------------------------------------------------------------------------------
# Text encoders
# ----------------------------------------------------------------------------------------------


def clip_config(spec: dict, tokenizer, projection_dim: int | None = None):
    from transformers import CLIPTextConfig

    hidden = spec["clip_hidden"]
    return CLIPTextConfig(
        vocab_size=vocab_size(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=spec["clip_layers"],
        num_attention_heads=spec["clip_heads"],
        max_position_embeddings=77,
        projection_dim=projection_dim or hidden,
        hidden_act="quick_gelu",
        layer_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def t5_encoder(spec: dict, tokenizer, seed: int):
    from transformers import T5Config, T5EncoderModel

    d_model = spec["t5_d_model"]
    heads = spec["t5_heads"]
    config = T5Config(
        vocab_size=vocab_size(tokenizer),
        d_model=d_model,
        d_kv=d_model // heads,
        d_ff=d_model * 2,
        num_layers=spec["t5_layers"],
        num_heads=heads,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.0,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    return T5EncoderModel(config).eval()


def mistral3_encoder(spec: dict, tokenizer, seed: int):
    from transformers import (
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        MistralConfig,
        PixtralVisionConfig,
    )

    hidden = spec["mistral_hidden"]
    text_config = MistralConfig(
        vocab_size=vocab_size(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=MISTRAL_LAYERS,
        num_attention_heads=spec["mistral_heads"],
        num_key_value_heads=spec["mistral_kv_heads"],
        head_dim=spec["mistral_head_dim"],
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        sliding_window=None,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    vh = spec["vision_hidden"]
    vision_config = PixtralVisionConfig(
        hidden_size=vh,
        intermediate_size=vh * 2,
        num_hidden_layers=1,
        num_attention_heads=2,
        head_dim=vh // 2,
        patch_size=14,
        image_size=112,
        num_channels=3,
    )
    config = Mistral3Config(
        text_config=text_config,
        vision_config=vision_config,
        image_token_index=MISTRAL_SPECIALS.index("[IMG]"),
        spatial_merge_size=2,
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return Mistral3ForConditionalGeneration(config).eval()


# ----------------------------------------------------------------------------------------------
# VAEs and schedulers
# ----------------------------------------------------------------------------------------------


def vae_kwargs(spec: dict) -> dict[str, Any]:
    return dict(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=tuple(spec["vae_channels"]),
        layers_per_block=1,
        act_fn="silu",
        latent_channels=spec["latent_channels"],
        norm_num_groups=spec["vae_groups"],
        sample_size=spec["default_image"],
    )


def autoencoder_kl(spec: dict, seed: int, shift: float, scale: float):
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        **vae_kwargs(spec),
        scaling_factor=scale,
        shift_factor=shift,
        use_quant_conv=False,
        use_post_quant_conv=False,
        force_upcast=False,
    ).eval()


def flow_scheduler(dynamic: bool):
    from diffusers import FlowMatchEulerDiscreteScheduler

    if dynamic:  # as in the FLUX.1 / FLUX.2 scheduler configs
        return FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=1000,
            shift=3.0,
            use_dynamic_shifting=True,
            base_shift=0.5,
            max_shift=1.15,
            base_image_seq_len=256,
            max_image_seq_len=4096,
        )
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)  # SD3

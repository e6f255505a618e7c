"""Building, saving and loading the offline pipelines (Flux, SD3, Flux2)."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile

import torch

from .encoders import autoencoder_kl, clip_config, flow_scheduler, mistral3_encoder, t5_encoder, vae_kwargs
from .specs import FLUX2_TEXT_OUT_LAYERS, FORMAT_VERSION, KINDS, SIZE_SPECS, check, component_seed, default_root
from .tokenizers import make_clip_tokenizer, make_mistral_tokenizer, make_t5_tokenizer

# ----------------------------------------------------------------------------------------------
# Pipelines
# ----------------------------------------------------------------------------------------------


def _build_flux(spec: dict, seed: int):
    from diffusers import FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    tokenizer = make_clip_tokenizer()
    tokenizer_2 = make_t5_tokenizer()
    torch.manual_seed(component_seed(seed, 1))
    text_encoder = CLIPTextModel(clip_config(spec, tokenizer)).eval()
    text_encoder_2 = t5_encoder(spec, tokenizer_2, component_seed(seed, 2))
    torch.manual_seed(component_seed(seed, 3))
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4 * spec["latent_channels"],
        num_layers=spec["double_layers"],
        num_single_layers=spec["single_layers"],
        attention_head_dim=spec["head_dim"],
        num_attention_heads=spec["heads"],
        joint_attention_dim=spec["t5_d_model"],
        pooled_projection_dim=spec["clip_hidden"],
        guidance_embeds=True,
        axes_dims_rope=tuple(spec["flux_rope"]),
    ).eval()
    vae = autoencoder_kl(spec, component_seed(seed, 4), shift=0.1159, scale=0.3611)
    return FluxPipeline(
        scheduler=flow_scheduler(dynamic=True),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


def _build_sd3(spec: dict, seed: int):
    from diffusers import SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    tokenizer = make_clip_tokenizer()
    tokenizer_2 = make_clip_tokenizer()
    tokenizer_3 = make_t5_tokenizer()
    clip_hidden = spec["clip_hidden"]
    torch.manual_seed(component_seed(seed, 1))
    text_encoder = CLIPTextModelWithProjection(clip_config(spec, tokenizer)).eval()
    torch.manual_seed(component_seed(seed, 2))
    text_encoder_2 = CLIPTextModelWithProjection(clip_config(spec, tokenizer_2)).eval()
    text_encoder_3 = t5_encoder(spec, tokenizer_3, component_seed(seed, 3))
    # The pipeline concatenates both CLIPs' hidden states and zero-pads them to T5's width.
    if 2 * clip_hidden > spec["t5_d_model"]:
        raise AssertionError("SD3: joint_attention_dim must be >= the sum of the CLIP hidden sizes")
    latent_size = spec["default_image"] // 8
    torch.manual_seed(component_seed(seed, 4))
    transformer = SD3Transformer2DModel(
        sample_size=latent_size,
        patch_size=2,
        in_channels=spec["latent_channels"],
        out_channels=spec["latent_channels"],
        num_layers=spec["sd3_layers"],
        attention_head_dim=spec["head_dim"],
        num_attention_heads=spec["heads"],
        caption_projection_dim=spec["heads"] * spec["head_dim"],
        joint_attention_dim=spec["t5_d_model"],
        pooled_projection_dim=2 * clip_hidden,
        pos_embed_max_size=64,
    ).eval()
    vae = autoencoder_kl(spec, component_seed(seed, 5), shift=0.0609, scale=1.5305)
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=flow_scheduler(dynamic=False),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        text_encoder_3=text_encoder_3,
        tokenizer_3=tokenizer_3,
    )


def _build_flux2(spec: dict, seed: int):
    from diffusers import AutoencoderKLFlux2, Flux2Pipeline, Flux2Transformer2DModel

    tokenizer = make_mistral_tokenizer()
    text_encoder = mistral3_encoder(spec, tokenizer, component_seed(seed, 1))
    torch.manual_seed(component_seed(seed, 2))
    transformer = Flux2Transformer2DModel(
        patch_size=1,
        # The pipeline patchifies the VAE latents 2x2 (the VAE's batch norm runs on those patches).
        in_channels=4 * spec["latent_channels"],
        num_layers=spec["double_layers"],
        num_single_layers=spec["single_layers"],
        attention_head_dim=spec["head_dim"],
        num_attention_heads=spec["heads"],
        joint_attention_dim=len(FLUX2_TEXT_OUT_LAYERS) * spec["mistral_hidden"],
        timestep_guidance_channels=256,
        axes_dims_rope=tuple(spec["flux2_rope"]),
        guidance_embeds=True,
    ).eval()
    torch.manual_seed(component_seed(seed, 3))
    vae = AutoencoderKLFlux2(
        **vae_kwargs(spec),
        use_quant_conv=True,
        use_post_quant_conv=True,
        patch_size=(2, 2),
    ).eval()
    return Flux2Pipeline(
        scheduler=flow_scheduler(dynamic=True),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )


_BUILDERS = {"flux": _build_flux, "sd3": _build_sd3, "flux2": _build_flux2}


def pipeline_class(kind: str):
    """The diffusers pipeline class of ``kind``: FluxPipeline, StableDiffusion3Pipeline or Flux2Pipeline."""
    import diffusers

    names = {"flux": "FluxPipeline", "sd3": "StableDiffusion3Pipeline", "flux2": "Flux2Pipeline"}
    if kind not in names:
        raise ValueError(f"unknown pipeline kind {kind!r}; expected one of {KINDS}")
    return getattr(diffusers, names[kind])


def build_pipeline_dir(
    kind: str,
    size: str = "tiny",
    root: str | os.PathLike | None = None,
    seed: int = 0,
) -> pathlib.Path:
    """Build (once) and return the directory of a saved pipeline.

    Cached: if ``<root>/<kind>-<size>-seed<seed>/model_index.json`` exists, it is returned without
    rebuilding.  Otherwise the pipeline is built into a temporary directory beside it and renamed
    into place atomically, so concurrent builders are safe (the first rename wins).  The default
    root is ``$TORCH_TPU_TINY_PIPELINES_DIR``, else ``~/.cache/torch_tpu/tiny-pipelines``.
    """
    check(kind, size)
    root_path = pathlib.Path(root).expanduser() if root is not None else default_root()
    final = root_path / f"{kind}-{size}-seed{int(seed)}"
    if (final / "model_index.json").is_file():
        return final

    root_path.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root_path))
    try:
        spec = SIZE_SPECS[size]
        with torch.random.fork_rng(devices=[]):
            pipe = _BUILDERS[kind](spec, int(seed))
        pipe.save_pretrained(tmp, safe_serialization=True)
        (tmp / "torch_tpu_tiny_pipeline.json").write_text(
            json.dumps(
                {"kind": kind, "size": size, "seed": int(seed), "format_version": FORMAT_VERSION},
                indent=2,
            )
            + "\n"
        )
        del pipe
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is meant to be shared
        if final.exists() and not (final / "model_index.json").is_file():
            # Not ours (our directories appear complete, by rename): a leftover from an interrupted
            # copy or a manual edit. Replace it.
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            # Someone else renamed a finished build into place first; use theirs.
            if not (final / "model_index.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_pipeline(
    kind: str,
    size: str = "tiny",
    dtype: torch.dtype = torch.float32,
    root: str | os.PathLike | None = None,
    seed: int = 0,
):
    """``build_pipeline_dir`` then ``pipeline_class(kind).from_pretrained(path, dtype=dtype)``, on CPU."""
    path = build_pipeline_dir(kind, size=size, root=root, seed=seed)
    pipe = pipeline_class(kind).from_pretrained(str(path), dtype=dtype, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe

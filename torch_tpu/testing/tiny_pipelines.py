"""Tiny, small and medium *real* diffusers pipelines with random weights, built offline.

No Hugging Face Hub access is needed (or attempted): every component -- text encoders, tokenizers,
transformer, VAE and scheduler -- is constructed from a hand-written config with deterministic random
weights, saved with ``save_pretrained`` and loaded back with ``from_pretrained``.  The results are
meant for tests and offline demos of the ``torch_tpu`` backend, not for producing pretty pictures.

Public API::

    KINDS = ("flux", "sd3", "flux2")
    SIZES = ("tiny", "small", "medium")
    build_pipeline_dir(kind, size="tiny", root=None, seed=0) -> pathlib.Path
    pipeline_class(kind) -> diffusers pipeline class
    load_pipeline(kind, size="tiny", dtype=torch.float32, root=None, seed=0) -> pipeline on CPU

Sizes:

* ``tiny``: transformer inner dim 32 (2 heads x 16), 1 double + 1 single block (SD3: 2 layers),
  VAE (8, 8, 8, 8) with 4 latent channels. 2 steps at 64x64 take well under a second on a CPU.
* ``small``: inner dim 256 (4 heads x 64), 2 double + 2 single blocks (SD3: 4 layers),
  T5 d_model 256, VAE (16, 32, 32, 32) with 16 latent channels.
* ``medium``: inner dim 512 (8 heads x 64), 2 double + 4 single blocks (SD3: 6 layers), else as small.

All VAEs keep four levels, i.e. the real spatial factor 8.

This module imports only torch, diffusers, transformers and tokenizers (the last three lazily), never
other ``torch_tpu`` submodules.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

import torch

__all__ = [
    "KINDS",
    "SIZES",
    "build_pipeline_dir",
    "default_root",
    "load_pipeline",
    "pipeline_class",
]

KINDS = ("flux", "sd3", "flux2")
SIZES = ("tiny", "small", "medium")

_ENV_ROOT = "TORCH_TPU_TINY_PIPELINES_DIR"
# Recorded in each built directory (torch_tpu_tiny_pipeline.json); bump when the construction changes.
_FORMAT_VERSION = 1

# ----------------------------------------------------------------------------------------------
# Size specifications
# ----------------------------------------------------------------------------------------------

_SIZE_SPECS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        heads=2,
        head_dim=16,
        double_layers=1,
        single_layers=1,
        sd3_layers=2,
        flux_rope=(4, 4, 8),
        flux2_rope=(4, 4, 4, 4),
        clip_hidden=32,
        clip_layers=2,
        clip_heads=4,
        t5_d_model=64,
        t5_heads=4,
        t5_layers=2,
        mistral_hidden=16,
        mistral_heads=4,
        mistral_kv_heads=2,
        mistral_head_dim=4,
        vision_hidden=16,
        vae_channels=(8, 8, 8, 8),
        vae_groups=4,
        latent_channels=4,
        default_image=64,
    ),
    "small": dict(
        heads=4,
        head_dim=64,
        double_layers=2,
        single_layers=2,
        sd3_layers=4,
        flux_rope=(16, 24, 24),
        flux2_rope=(16, 16, 16, 16),
        clip_hidden=64,
        clip_layers=2,
        clip_heads=4,
        t5_d_model=256,
        t5_heads=4,
        t5_layers=2,
        mistral_hidden=64,
        mistral_heads=4,
        mistral_kv_heads=2,
        mistral_head_dim=16,
        vision_hidden=16,
        vae_channels=(16, 32, 32, 32),
        vae_groups=8,
        latent_channels=16,
        default_image=256,
    ),
}
_SIZE_SPECS["medium"] = dict(
    _SIZE_SPECS["small"],
    heads=8,
    double_layers=2,
    single_layers=4,
    sd3_layers=6,
)

# Flux2Pipeline reads hidden states 10, 20 and 30 of the Mistral text model by default.
_FLUX2_TEXT_OUT_LAYERS = (10, 20, 30)
_MISTRAL_LAYERS = 30

# ----------------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------------


def default_root() -> pathlib.Path:
    """``$TORCH_TPU_TINY_PIPELINES_DIR`` if set, else ``~/.cache/torch_tpu/tiny-pipelines``."""
    env = os.environ.get(_ENV_ROOT)
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path("~/.cache/torch_tpu/tiny-pipelines").expanduser()


def _check(kind: str, size: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown pipeline kind {kind!r}; expected one of {KINDS}")
    if size not in SIZES:
        raise ValueError(f"unknown pipeline size {size!r}; expected one of {SIZES}")


def _component_seed(seed: int, index: int) -> int:
    # A distinct, deterministic seed per component (so e.g. SD3's two CLIP encoders differ).
    return (int(seed) * 1009 + index) % (2**63)


# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------

_WORDS = (
    "a an the of and in on with at to is it this that for from by as are be was or "
    "cat dog photo picture painting image red blue green yellow black white small large big "
    "sky sun moon tree house car city street mountain river sea water forest flower "
    "man woman person child girl boy face hand light dark night day sign says hello world "
    "you ai reasons about descriptions give structured responses focusing object objects "
    "relationships attribution actions without speculation"
).split()


def _byte_alphabet() -> list[str]:
    """The 256 printable characters GPT-2 style byte-level BPE uses for the bytes 0..255, by byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _left_to_right_merges(symbol_lists: list[list[str]]) -> list[tuple[str, str]]:
    """Merges that glue each symbol list together from the left: [a, b, c] -> (a, b), (ab, c)."""
    merges: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for symbols in symbol_lists:
        acc = symbols[0]
        for sym in symbols[1:]:
            pair = (acc, sym)
            if pair not in seen:
                seen.add(pair)
                merges.append(pair)
            acc = acc + sym
    return merges


def _make_clip_tokenizer(model_max_length: int = 77):
    """A CLIP byte-level BPE tokenizer with a tiny vocabulary (a few hundred entries)."""
    from transformers import CLIPTokenizer

    alphabet = _byte_alphabet()
    vocab: dict[str, int] = {}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    for ch in alphabet:
        vocab.setdefault(ch + "</w>", len(vocab))
    # CLIP appends "</w>" to the last symbol of each word.
    words = [w for w in _WORDS if len(w) > 1]
    merges = _left_to_right_merges([list(w[:-1]) + [w[-1] + "</w>"] for w in words])
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab.setdefault("<|startoftext|>", len(vocab))
    vocab.setdefault("<|endoftext|>", len(vocab))
    return CLIPTokenizer(
        vocab=vocab,
        merges=list(merges),
        model_max_length=model_max_length,
    )


def _make_t5_tokenizer(model_max_length: int = 512):
    """A T5 (Unigram) tokenizer: <pad>=0, </s>=1, <unk>=2, then single characters and a few words."""
    from transformers import T5TokenizerFast

    pieces: list[tuple[str, float]] = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    chars = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    pieces += [(c, -5.0) for c in chars]
    pieces += [("\u2581" + c, -4.5) for c in chars]
    pieces += [("\u2581" + w, -3.0) for w in _WORDS if len(w) > 1]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=model_max_length)


# Mistral (Tekken) control tokens at their real ids.
_MISTRAL_SPECIALS = (
    "<unk>",  # 0
    "<s>",  # 1
    "</s>",  # 2
    "[INST]",  # 3
    "[/INST]",  # 4
    "[AVAILABLE_TOOLS]",  # 5
    "[/AVAILABLE_TOOLS]",  # 6
    "[TOOL_RESULTS]",  # 7
    "[/TOOL_RESULTS]",  # 8
    "[TOOL_CALLS]",  # 9
    "[IMG]",  # 10
    "<pad>",  # 11
    "[IMG_BREAK]",  # 12
    "[IMG_END]",  # 13
    "[PREFIX]",  # 14
    "[MIDDLE]",  # 15
    "[SUFFIX]",  # 16
    "[SYSTEM_PROMPT]",  # 17
    "[/SYSTEM_PROMPT]",  # 18
    "[TOOL_CONTENT]",  # 19
)
_MISTRAL_NUM_SPECIALS = 32  # 20..31 are "<SPECIAL_i>" placeholders, like the real tokenizer's.

# Accepts message contents given as a string or as a list of {"type": "text"|"image", ...} items,
# which is what Flux2Pipeline's ``format_input`` produces.
_MISTRAL_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}"
    "{%- set content = message['content'] %}"
    "{%- else %}"
    "{%- set ns = namespace(text='') %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %}{%- set ns.text = ns.text + item['text'] %}"
    "{%- elif item['type'] == 'image' %}{%- set ns.text = ns.text + '[IMG]' %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- set content = ns.text %}"
    "{%- endif %}"
    "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + content + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{- '[INST]' + content + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}{{- content + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}"
)


def _make_mistral_tokenizer(model_max_length: int = 2048):
    """A byte-level BPE with Mistral's control tokens, wrapped in PreTrainedTokenizerFast."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = list(_MISTRAL_SPECIALS) + [
        f"<SPECIAL_{i}>" for i in range(len(_MISTRAL_SPECIALS), _MISTRAL_NUM_SPECIALS)
    ]
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(specials)}
    alphabet = _byte_alphabet()
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    space = alphabet[ord(" ")]  # "Ġ"
    words = [space + w for w in _WORDS] + [w.capitalize() for w in _WORDS if len(w) > 1]
    merges = _left_to_right_merges([list(w) for w in words])
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        chat_template=_MISTRAL_CHAT_TEMPLATE,
        model_max_length=model_max_length,
        padding_side="left",
    )


def _vocab_size(tokenizer, multiple: int = 64) -> int:
    n = len(tokenizer)
    return ((n + multiple - 1) // multiple) * multiple


# ----------------------------------------------------------------------------------------------
# Text encoders
# ----------------------------------------------------------------------------------------------


def _clip_config(spec: dict, tokenizer, projection_dim: int | None = None):
    from transformers import CLIPTextConfig

    hidden = spec["clip_hidden"]
    return CLIPTextConfig(
        vocab_size=_vocab_size(tokenizer),
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


def _t5_encoder(spec: dict, tokenizer, seed: int):
    from transformers import T5Config, T5EncoderModel

    d_model = spec["t5_d_model"]
    heads = spec["t5_heads"]
    config = T5Config(
        vocab_size=_vocab_size(tokenizer),
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


def _mistral3_encoder(spec: dict, tokenizer, seed: int):
    from transformers import (
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        MistralConfig,
        PixtralVisionConfig,
    )

    hidden = spec["mistral_hidden"]
    text_config = MistralConfig(
        vocab_size=_vocab_size(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=_MISTRAL_LAYERS,
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
        image_token_index=_MISTRAL_SPECIALS.index("[IMG]"),
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


def _vae_kwargs(spec: dict) -> dict[str, Any]:
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


def _autoencoder_kl(spec: dict, seed: int, shift: float, scale: float):
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        **_vae_kwargs(spec),
        scaling_factor=scale,
        shift_factor=shift,
        use_quant_conv=False,
        use_post_quant_conv=False,
        force_upcast=False,
    ).eval()


def _flow_scheduler(dynamic: bool):
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


# ----------------------------------------------------------------------------------------------
# Pipelines
# ----------------------------------------------------------------------------------------------


def _build_flux(spec: dict, seed: int):
    from diffusers import FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    tokenizer = _make_clip_tokenizer()
    tokenizer_2 = _make_t5_tokenizer()
    torch.manual_seed(_component_seed(seed, 1))
    text_encoder = CLIPTextModel(_clip_config(spec, tokenizer)).eval()
    text_encoder_2 = _t5_encoder(spec, tokenizer_2, _component_seed(seed, 2))
    torch.manual_seed(_component_seed(seed, 3))
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
    vae = _autoencoder_kl(spec, _component_seed(seed, 4), shift=0.1159, scale=0.3611)
    return FluxPipeline(
        scheduler=_flow_scheduler(dynamic=True),
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

    tokenizer = _make_clip_tokenizer()
    tokenizer_2 = _make_clip_tokenizer()
    tokenizer_3 = _make_t5_tokenizer()
    clip_hidden = spec["clip_hidden"]
    torch.manual_seed(_component_seed(seed, 1))
    text_encoder = CLIPTextModelWithProjection(_clip_config(spec, tokenizer)).eval()
    torch.manual_seed(_component_seed(seed, 2))
    text_encoder_2 = CLIPTextModelWithProjection(_clip_config(spec, tokenizer_2)).eval()
    text_encoder_3 = _t5_encoder(spec, tokenizer_3, _component_seed(seed, 3))
    # The pipeline concatenates both CLIPs' hidden states and zero-pads them to T5's width.
    if 2 * clip_hidden > spec["t5_d_model"]:
        raise AssertionError("SD3: joint_attention_dim must be >= the sum of the CLIP hidden sizes")
    latent_size = spec["default_image"] // 8
    torch.manual_seed(_component_seed(seed, 4))
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
    vae = _autoencoder_kl(spec, _component_seed(seed, 5), shift=0.0609, scale=1.5305)
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=_flow_scheduler(dynamic=False),
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

    tokenizer = _make_mistral_tokenizer()
    text_encoder = _mistral3_encoder(spec, tokenizer, _component_seed(seed, 1))
    torch.manual_seed(_component_seed(seed, 2))
    transformer = Flux2Transformer2DModel(
        patch_size=1,
        # The pipeline patchifies the VAE latents 2x2 (the VAE's batch norm runs on those patches).
        in_channels=4 * spec["latent_channels"],
        num_layers=spec["double_layers"],
        num_single_layers=spec["single_layers"],
        attention_head_dim=spec["head_dim"],
        num_attention_heads=spec["heads"],
        joint_attention_dim=len(_FLUX2_TEXT_OUT_LAYERS) * spec["mistral_hidden"],
        timestep_guidance_channels=256,
        axes_dims_rope=tuple(spec["flux2_rope"]),
        guidance_embeds=True,
    ).eval()
    torch.manual_seed(_component_seed(seed, 3))
    vae = AutoencoderKLFlux2(
        **_vae_kwargs(spec),
        use_quant_conv=True,
        use_post_quant_conv=True,
        patch_size=(2, 2),
    ).eval()
    return Flux2Pipeline(
        scheduler=_flow_scheduler(dynamic=True),
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
    _check(kind, size)
    root_path = pathlib.Path(root).expanduser() if root is not None else default_root()
    final = root_path / f"{kind}-{size}-seed{int(seed)}"
    if (final / "model_index.json").is_file():
        return final

    root_path.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root_path))
    try:
        spec = _SIZE_SPECS[size]
        with torch.random.fork_rng(devices=[]):
            pipe = _BUILDERS[kind](spec, int(seed))
        pipe.save_pretrained(tmp, safe_serialization=True)
        (tmp / "torch_tpu_tiny_pipeline.json").write_text(
            json.dumps(
                {"kind": kind, "size": size, "seed": int(seed), "format_version": _FORMAT_VERSION},
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

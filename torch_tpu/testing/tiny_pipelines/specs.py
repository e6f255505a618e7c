"""Size specifications, kinds, paths and seeds of the offline pipelines."""
from __future__ import annotations

import pathlib
from typing import Any

from ... import config

KINDS = ("flux", "sd3", "flux2")
SIZES = ("tiny", "small", "medium")

# Recorded in each built directory (torch_tpu_tiny_pipeline.json); bump when the construction changes.
FORMAT_VERSION = 1

# ----------------------------------------------------------------------------------------------
# Size specifications
# ----------------------------------------------------------------------------------------------

SIZE_SPECS: dict[str, dict[str, Any]] = {
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
SIZE_SPECS["medium"] = dict(
    SIZE_SPECS["small"],
    heads=8,
    double_layers=2,
    single_layers=4,
    sd3_layers=6,
)

# Flux2Pipeline reads hidden states 10, 20 and 30 of the Mistral text model by default.
FLUX2_TEXT_OUT_LAYERS = (10, 20, 30)
MISTRAL_LAYERS = 30

# ----------------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------------


def default_root() -> pathlib.Path:
    """``$TORCH_TPU_TINY_PIPELINES_DIR`` if set, else ``~/.cache/torch_tpu/tiny-pipelines``."""
    env = config.settings().tiny_pipelines_dir
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path(config.default_cache_root(), "tiny-pipelines")


def check(kind: str, size: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown pipeline kind {kind!r}; expected one of {KINDS}")
    if size not in SIZES:
        raise ValueError(f"unknown pipeline size {size!r}; expected one of {SIZES}")


def component_seed(seed: int, index: int) -> int:
    # A distinct, deterministic seed per component (so e.g. SD3's two CLIP encoders differ).
    return (int(seed) * 1009 + index) % (2**63)

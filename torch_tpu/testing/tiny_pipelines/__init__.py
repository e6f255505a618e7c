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

This package imports only torch, diffusers, transformers and tokenizers (the last three lazily) and
``torch_tpu.config``.
"""
from __future__ import annotations

from .builders import build_pipeline_dir, load_pipeline, pipeline_class
from .specs import KINDS, SIZE_SPECS, SIZES, default_root

__all__ = ["KINDS", "SIZES", "SIZE_SPECS", "build_pipeline_dir", "default_root", "load_pipeline",
           "pipeline_class"]

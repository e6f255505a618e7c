"""Testing helpers for ``torch_tpu``.

``torch_tpu.testing.tiny_pipelines`` builds tiny / small / medium real Hugging Face diffusers pipelines
(Flux, SD3, Flux2) offline with deterministic random weights.  Nothing here imports the rest of the
``torch_tpu`` package, and the heavy libraries (diffusers, transformers) are only imported when a
pipeline is built or loaded.
"""

from .tiny_pipelines import KINDS, SIZES, build_pipeline_dir, load_pipeline, pipeline_class

__all__ = ["KINDS", "SIZES", "build_pipeline_dir", "load_pipeline", "pipeline_class"]

"""``python -m torch_tpu``: generate an image with a diffusers pipeline, show the platform, point to benchmarks.

    python -m torch_tpu info
    python -m torch_tpu generate                          # the shipped demo model draws "a red circle"
    python -m torch_tpu generate --kind flux --steps 2 --height 64 --width 64 --output out.png
    python -m torch_tpu generate --model black-forest-labs/FLUX.1-schnell --dtype bfloat16 --offload
    python -m torch_tpu bench

Without ``--model`` the pipeline is the demo model shipped in the package (``--kind demo``, the default: a
small FluxPipeline trained on the tpu device to draw coloured shapes, ``torch_tpu.demo``), or with
``--kind flux|sd3|flux2`` a tiny/small/medium offline pipeline with random weights
(``torch_tpu.testing.tiny_pipelines``), built on first use and cached.

The parts, each testable alone: ``arguments`` (the parser and the checks that run before anything loads),
``loading`` (the pipeline loaded and placed on the device), ``timed_run`` (the timed calls), ``report`` (the
lines printed), ``generate`` (the command that strings them together), ``info`` (``info`` and ``bench``),
``commands`` (``main``: the subcommand run, its failure reported as one line).
"""
from .commands import main

__all__ = ["main"]

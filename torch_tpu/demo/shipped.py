"""The demo model shipped inside the package (``torch_tpu/demo/weights``, package data).

A FluxPipeline folder written by ``python -m torch_tpu.demo train --device tpu`` (``save_pretrained`` from
the device): it loads with ``FluxPipeline.from_pretrained`` like any Hub model, offline.
``torch_tpu_demo.json`` beside ``model_index.json`` records how it was trained and the call arguments it
was trained for (64x64, 20 steps, max_sequence_length 16: the pipeline's own defaults, 1024x1024 and
512 T5 tokens, do not suit it).

    WEIGHTS                  the folder
    DEFAULT_PROMPT           "a red circle"
    generation_kwargs(path)  the FluxPipeline call arguments of a demo model folder
    unknown_prompt(prompt, path)  a warning when the model was not trained on ``prompt`` (else None)
    load_pipeline(path)      FluxPipeline.from_pretrained(path, local_files_only=True)
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

__all__ = ["DEFAULT_PROMPT", "WEIGHTS", "generation_kwargs", "info", "is_demo_folder", "load_pipeline",
           "unknown_prompt"]

WEIGHTS = pathlib.Path(__file__).resolve().with_name("weights")
DEFAULT_PROMPT = "a red circle"
_INFO = "torch_tpu_demo.json"  # (integrations.tokenizers.DEMO_RECORD: its tokenizer reads the prompts there)


def is_demo_folder(path) -> bool:
    """Whether ``path`` is a pipeline folder written by the demo trainer."""
    p = pathlib.Path(path).expanduser()
    return (p / _INFO).is_file() and (p / "model_index.json").is_file()


def _require(path) -> pathlib.Path:
    p = pathlib.Path(path).expanduser()
    if not is_demo_folder(p):
        raise FileNotFoundError(
            f"no demo model at {p} (model_index.json and {_INFO} expected). The package ships it under "
            f"torch_tpu/demo/weights; train one with `python -m torch_tpu.demo train --device tpu --out DIR` "
            f"and pass --model DIR")
    return p


def info(path=WEIGHTS) -> dict:
    """The training record of a demo model folder (stages, steps, seconds, device, configs)."""
    return json.loads((_require(path) / _INFO).read_text())


def generation_kwargs(path=WEIGHTS) -> dict[str, Any]:
    """height, width, num_inference_steps and max_sequence_length the model was trained for."""
    return dict(info(path)["generation"])


def unknown_prompt(prompt: str, path=WEIGHTS) -> str | None:
    """A one-line warning when the model in ``path`` was not trained on ``prompt`` (it draws only the
    prompts of its training record); None for one of them (case and spacing aside)."""
    from ..integrations import tokenizers

    message = tokenizers.unknown_prompt(prompt, info(path).get("prompts") or [])
    return None if message is None else f"warning: {message}"


def load_pipeline(path=WEIGHTS, **kwargs):
    """The demo FluxPipeline (CPU, float32 unless ``dtype`` says otherwise), loaded offline."""
    from diffusers import FluxPipeline

    return FluxPipeline.from_pretrained(str(_require(path)), local_files_only=True, **kwargs)

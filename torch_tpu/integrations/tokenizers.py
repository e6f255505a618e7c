"""A T5 tokenizer that never makes a sequence longer than its ``model_max_length``.

FluxPipeline pads every T5 prompt to ``max_sequence_length`` (512 unless the caller says otherwise). A
model trained on shorter sequences (the demo model: 16 tokens) then sees hundreds of padding tokens it
never saw and draws something else, and each step costs ~15x more. ``CappedT5Tokenizer`` is the T5
tokenizer with one rule more: a requested ``max_length`` above ``model_max_length`` becomes
``model_max_length``, so the pipeline's defaults give the model the sequences it was trained on. A
prompt longer than that is cut (with a warning naming the length), as any tokenizer cuts at its limit.

Its sequences are capped on every call that does not ask otherwise, the pipeline's check for a cut prompt
(the same prompt tokenized again with ``padding="longest"``) included: diffusers compared the two and warned
that a part was cut, naming the wrong part (it slices T5's tokens at CLIP's length), beside transformers'
"Token indices sequence length is longer than the specified maximum" for a sequence the pipeline never runs.
The warning that a prompt was cut is this tokenizer's own, once per prompt, at the user's line.

A demo model folder (``torch_tpu_demo.json`` beside the tokenizer's folder, as ``python -m torch_tpu.demo train``
writes it) knows the prompts it was trained on: a prompt outside them is warned about where the pipeline encodes
it, with the words ``python -m torch_tpu generate`` prints (``unknown_prompt``), so a library user who loads the
demo with ``FluxPipeline.from_pretrained`` hears it too.

A pipeline folder names the class in ``model_index.json`` (``["torch_tpu.integrations.tokenizers",
"CappedT5Tokenizer"]``). diffusers loads a component class only from a module already imported, so
torch_tpu's registration (run at ``import torch``) imports this module; transformers itself is imported
only when the class is first looked up (module ``__getattr__``), never at ``import torch``.
"""
from __future__ import annotations

import json
import logging
import os
import pathlib
import sys

from ..errors import warn_at_user

__all__ = ["CappedT5Tokenizer", "demo_prompts", "unknown_prompt"]

DEMO_RECORD = "torch_tpu_demo.json"  # a demo model folder's training record (torch_tpu.demo)
# frames outside these are the user's: the line a warning about a prompt names (the pipeline's call)
_LIBRARIES = ("torch_tpu", "torch", "transformers", "diffusers", "tokenizers")


def demo_prompts(folder) -> list:
    """The prompts the demo model in ``folder`` was trained on ([] for a folder that is no demo model)."""
    path = pathlib.Path(folder).expanduser() / DEMO_RECORD
    try:
        return list(json.loads(path.read_text()).get("prompts") or [])
    except (OSError, ValueError):
        return []


def unknown_prompt(prompt: str, known: list):
    """The warning for a prompt a demo model was not trained on (it draws only ``known``), else None (one
    of them, case and spacing aside)."""
    if not known or " ".join(prompt.lower().split()) in known:
        return None
    return (f"the demo model knows only the {len(known)} prompts it was trained on "
            f"({', '.join(repr(p) for p in known[:3])}, ... {known[-1]!r}); {prompt!r} is not one of them, "
            "so the picture follows no prompt")

# the transformers base classes diffusers' loader looks up in a component's module to pick its load
# method (``from_pretrained``/``save_pretrained``)
_LOADER_BASES = ("PreTrainedTokenizer", "PreTrainedTokenizerFast")
_CLASS = None


def _build():
    from transformers import T5TokenizerFast

    class CappedT5Tokenizer(T5TokenizerFast):
        """T5 tokenizer whose sequences never exceed ``model_max_length`` tokens."""

        def __call__(self, *args, max_length=None, **kwargs):
            cap = self.model_max_length
            text = args[0] if args else kwargs.get("text")
            if max_length is not None and cap and max_length > cap:
                max_length = cap
            if max_length is None and kwargs.get("truncation") is None and cap and text is not None:
                max_length, kwargs["truncation"] = cap, True  # (a call that does not ask otherwise: capped)
            out = super().__call__(*args, max_length=max_length, **kwargs)
            if text is not None:
                self._check_demo_prompt(text)
                if kwargs.get("truncation") and max_length == cap:
                    self._warn_if_cut(text, cap)
            return out

        def already_warned(self, prompt: str) -> None:
            """``prompt`` was warned about already (``python -m torch_tpu generate`` checks it before loading)."""
            self.__dict__.setdefault("_told", set()).add(prompt)

        def _check_demo_prompt(self, text) -> None:
            known = self.__dict__.get("_demo_prompts")
            if known is None:  # (read once: the demo record beside this tokenizer's folder)
                folder = pathlib.Path(str(self.name_or_path or "")).expanduser()
                known = self.__dict__["_demo_prompts"] = demo_prompts(folder.parent) if folder.is_dir() else []
            if not known:
                return
            told = self.__dict__.setdefault("_told", set())
            for prompt in [text] if isinstance(text, str) else list(text or ()):
                if isinstance(prompt, str) and prompt not in told:
                    told.add(prompt)
                    message = unknown_prompt(prompt, known)
                    if message:
                        warn_at_user(f"torch_tpu: {message}", UserWarning, _LIBRARIES)

        def save_pretrained(self, save_directory, *args, **kwargs):
            # the folder's tokenizer_config names plain T5Tokenizer, so AutoTokenizer still loads it
            # (diffusers reads the class from model_index.json)
            import json
            import pathlib

            out = super().save_pretrained(save_directory, *args, **kwargs)
            path = pathlib.Path(save_directory) / "tokenizer_config.json"
            if path.is_file():
                cfg = json.loads(path.read_text())
                cfg["tokenizer_class"] = "T5Tokenizer"
                path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
            return out

        def _warn_if_cut(self, text, cap: int) -> None:
            texts = [t for t in ([text] if isinstance(text, str) else list(text or ())) if isinstance(t, str)]
            if not texts:
                return
            if self.__dict__.get("_cut_told") == texts:  # (the pipeline tokenizes each prompt twice)
                return
            lengths = super().__call__(texts, verbose=False)["input_ids"]
            longest = max(len(ids) for ids in lengths)
            if longest > cap:
                self.__dict__["_cut_told"] = texts
                warn_at_user(f"torch_tpu: this model reads {cap} T5 tokens; a prompt of {longest} tokens was "
                             f"cut to {cap}", UserWarning, _LIBRARIES)

    CappedT5Tokenizer.__module__ = __name__
    CappedT5Tokenizer.__qualname__ = "CappedT5Tokenizer"
    _quiet_pipeline_length_check()
    return CappedT5Tokenizer


class _PipelineLengthCheck(logging.Filter):
    """Drops transformers' "Token indices sequence length is longer than the specified maximum sequence
    length ... will result in indexing errors" while a diffusers pipeline encodes a prompt: the pipeline
    tokenizes the prompt once more without truncation only to report what it cuts (its own warning says
    that), and never runs those tokens through the model."""

    def filter(self, record) -> bool:
        if not str(record.msg).startswith("Token indices sequence length is longer"):
            return True
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name.endswith("prompt_embeds") and f"diffusers{_SEP}pipelines" in code.co_filename:
                return False
            frame = frame.f_back
        return True


_SEP = os.sep


def _quiet_pipeline_length_check() -> None:
    """Installed with the class (a pipeline using this tokenizer is being loaded); once."""
    logger = logging.getLogger("transformers.tokenization_utils_base")
    if not any(isinstance(f, _PipelineLengthCheck) for f in logger.filters):
        logger.addFilter(_PipelineLengthCheck())


def __getattr__(name: str):
    global _CLASS
    if name == "CappedT5Tokenizer":
        if _CLASS is None:
            _CLASS = _build()
        return _CLASS
    if name in _LOADER_BASES:
        import transformers

        return getattr(transformers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

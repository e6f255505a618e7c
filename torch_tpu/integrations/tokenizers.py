"""A T5 tokenizer that never makes a sequence longer than its ``model_max_length``.

FluxPipeline pads every T5 prompt to ``max_sequence_length`` (512 unless the caller says otherwise). A
model trained on shorter sequences (the demo model: 16 tokens) then sees hundreds of padding tokens it
never saw and draws something else, and each step costs ~15x more. ``CappedT5Tokenizer`` is the T5
tokenizer with one rule more: a requested ``max_length`` above ``model_max_length`` becomes
``model_max_length``, so the pipeline's defaults give the model the sequences it was trained on. A
prompt longer than that is cut (with a warning naming the length), as any tokenizer cuts at its limit.

A pipeline folder names the class in ``model_index.json`` (``["torch_tpu.integrations.tokenizers",
"CappedT5Tokenizer"]``). diffusers loads a component class only from a module already imported, so
torch_tpu's registration (run at ``import torch``) imports this module; transformers itself is imported
only when the class is first looked up (module ``__getattr__``), never at ``import torch``.
"""
from __future__ import annotations

import warnings

__all__ = ["CappedT5Tokenizer"]

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
            if max_length is not None and cap and max_length > cap:
                max_length = cap
            out = super().__call__(*args, max_length=max_length, **kwargs)
            if kwargs.get("truncation") and max_length == cap:
                self._warn_if_cut(args[0] if args else kwargs.get("text"), cap)
            return out

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
            lengths = super().__call__(texts, verbose=False)["input_ids"]
            longest = max(len(ids) for ids in lengths)
            if longest > cap:
                warnings.warn(f"torch_tpu: this model reads {cap} T5 tokens; a prompt of {longest} tokens was "
                              f"cut to {cap}", stacklevel=3)

    CappedT5Tokenizer.__module__ = __name__
    CappedT5Tokenizer.__qualname__ = "CappedT5Tokenizer"
    return CappedT5Tokenizer


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

"""diffusers' ``apply_rotary_emb`` on tpu tensors as one op (``tpu::rotary_embedding``, ops/rotary.py).

diffusers computes FLUX's rotary embedding in Python from 8 aten ops; a backend sees them one at a time and
cannot join them (strict eager mode runs one program per op). So ``diffusers.models.embeddings`` gets a
``apply_rotary_emb`` that sends the calls it can serve exactly to the one op and every other call to
diffusers' own function, unchanged:

* served: ``use_real=True`` with ``use_real_unbind_dim=-1`` (FLUX, FLUX.2 and the others that pair
  neighbouring channels), ``x`` a 4-d floating tensor of the tpu device itself (not a subclass such as a
  DTensor) with an even last dimension, ``cos``/``sin`` 2-d floating tensors of shape (sequence, channels)
  for ``sequence_dim`` 1 or 2, nothing that needs a gradient (grad mode off, or no input requiring one), no
  torch.func transform, and not while dynamo traces (compiled mode builds one XLA program from diffusers'
  ops already);
* everything else: diffusers' function, its errors included.

When: ``install()`` runs at ``import torch`` (torch_tpu's registration) and imports nothing of diffusers. If
``diffusers.models.embeddings`` is already imported (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and diffusers
imported first), it is patched now, with every diffusers module that had imported the function by name;
otherwise an import hook patches it as soon as diffusers executes that module, before any model module
imports the name from it. A diffusers whose ``apply_rotary_emb`` takes other parameters is left alone.
"""
from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys
from importlib.machinery import PathFinder

import torch

from ..eager.attention import transformed
from ..tensor.tensor import TpuTensor

TARGET = "diffusers.models.embeddings"
_PARAMETERS = ("x", "freqs_cis", "use_real", "use_real_unbind_dim", "sequence_dim")
_REAL_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_STATE: dict = {}  # "original": diffusers' function, "wrapper": ours, "finder": the import hook


def _served(x, cos, sin, use_real, unbind_dim, sequence_dim) -> bool:
    if use_real is not True or unbind_dim != -1 or sequence_dim not in (1, 2):
        return False
    if type(x) is not TpuTensor or x.dim() != 4 or x.dtype not in _REAL_FLOATS or x.shape[-1] % 2:
        return False
    expected = (x.shape[sequence_dim], x.shape[-1])
    for t in (cos, sin):
        if not isinstance(t, torch.Tensor) or t.dtype not in _REAL_FLOATS or tuple(t.shape) != expected:
            return False
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return False
    return not transformed(x, cos, sin)


def _one_op(x, freqs_cis, use_real, unbind_dim, sequence_dim):
    """The one op's result for a call it serves exactly, else None."""
    if torch.compiler.is_compiling() or not isinstance(freqs_cis, (tuple, list)) or len(freqs_cis) != 2:
        return None
    cos, sin = freqs_cis
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)):
        return None
    cos, sin = cos.to(x.device), sin.to(x.device)  # as diffusers does (a no-op for tpu tensors)
    if not _served(x, cos, sin, use_real, unbind_dim, sequence_dim):
        return None
    if sequence_dim == 1:  # x (B, S, H, D)
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    else:  # x (B, H, S, D)
        cos, sin = cos[None, None], sin[None, None]
    return torch.ops.tpu.rotary_embedding.default(x, cos, sin)


def _wrap(original):
    defaults = {name: p.default for name, p in inspect.signature(original).parameters.items()}

    @functools.wraps(original)
    def apply_rotary_emb(x, freqs_cis, *args, **kwargs):
        given = dict(zip(_PARAMETERS[2:], args))
        given.update(kwargs)
        if len(args) <= 3 and set(given) <= set(_PARAMETERS[2:]):
            out = _one_op(x, freqs_cis, given.get("use_real", defaults["use_real"]),
                          given.get("use_real_unbind_dim", defaults["use_real_unbind_dim"]),
                          given.get("sequence_dim", defaults["sequence_dim"]))
            if out is not None:
                return out
        return original(x, freqs_cis, *args, **kwargs)

    apply_rotary_emb.__torch_tpu_original__ = original
    return apply_rotary_emb


def _patch(module) -> bool:
    """Replace ``module.apply_rotary_emb`` (diffusers.models.embeddings) and the copies other loaded
    diffusers modules imported by name. False when its parameters are not the ones this knows."""
    original = getattr(module, "apply_rotary_emb", None)
    if original is None or hasattr(original, "__torch_tpu_original__"):
        return False
    if tuple(inspect.signature(original).parameters) != _PARAMETERS:
        return False
    wrapper = _wrap(original)
    _STATE.update(original=original, wrapper=wrapper)
    module.apply_rotary_emb = wrapper
    for name, other in list(sys.modules.items()):
        if name.startswith("diffusers.") and getattr(other, "apply_rotary_emb", None) is original:
            other.apply_rotary_emb = wrapper
    return True


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ``diffusers.models.embeddings`` right after diffusers executes it (then steps aside)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        _remove_finder()
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            try:
                _patch(module)
            except Exception:  # noqa: BLE001 - diffusers keeps its own function
                pass

        loader.exec_module = exec_module
        return spec


def _remove_finder() -> None:
    finder = _STATE.pop("finder", None)
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)


def install() -> None:
    """Route diffusers' rotary embedding on tpu tensors to the one op (see the module's docstring)."""
    from ..ops import rotary

    rotary.define()
    if "wrapper" in _STATE or "finder" in _STATE:
        return
    module = sys.modules.get(TARGET)
    if module is not None:
        _patch(module)
        return
    _STATE["finder"] = _Finder()
    sys.meta_path.insert(0, _STATE["finder"])


def installed() -> bool:
    """Whether diffusers' function is the wrapper now."""
    module = sys.modules.get(TARGET)
    return module is not None and hasattr(getattr(module, "apply_rotary_emb", None), "__torch_tpu_original__")

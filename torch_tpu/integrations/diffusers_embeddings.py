"""diffusers' position embeddings on tpu tensors as one op each (ops/position_embeddings.py).

diffusers computes FLUX's position embeddings in Python from aten ops: the rotary position tables
(``get_1d_rotary_pos_embed``, 13 ops per axis), their application to queries and keys (``apply_rotary_emb``,
8 ops) and the sinusoidal timestep embedding (``get_timestep_embedding``, 11 ops). A backend sees them one at
a time and cannot join them (strict eager mode runs one program per op), so ``diffusers.models.embeddings``
gets functions that send the calls they can serve exactly to ``tpu::rotary_table``,
``tpu::rotary_embedding`` and ``tpu::timestep_embedding`` and every other call to diffusers' own function,
unchanged:

* ``apply_rotary_emb``, served: ``use_real=True`` with ``use_real_unbind_dim=-1`` (FLUX, FLUX.2 and the others
  that pair neighbouring channels), ``x`` a 4-d floating tensor of the tpu device itself (not a subclass such
  as a DTensor) with an even last dimension, ``cos``/``sin`` 2-d floating tensors of shape (sequence,
  channels) for ``sequence_dim`` 1 or 2;
* ``get_1d_rotary_pos_embed``, served: ``use_real=True, repeat_interleave_real=True``, ``pos`` a 1-d real
  tensor of the tpu device, an even ``dim``, Python numbers for theta and the factors, float32 or float64
  frequencies;
* ``get_timestep_embedding``, served: ``timesteps`` a 1-d real tensor of the tpu device, an ``embedding_dim``
  of at least 2, a bool ``flip_sin_to_cos``, Python numbers for the shift, scale and period (a positive period,
  a shift that leaves the exponent's divisor nonzero);
* all: nothing that needs a gradient (grad mode off, or no input requiring one), no torch.func transform;
  while dynamo traces (compiled and regional modes) a traced tensor of the tpu device stands for the
  TpuTensor, so the op is one node of the graph and the compiled program takes the same lowering as the
  eager modes (the float64 rotary table's, made for a TPU, among them);
* everything else: diffusers' function, its errors included.

When: ``install()`` runs at ``import torch`` (torch_tpu's registration) and imports nothing of diffusers. If
``diffusers.models.embeddings`` is already imported (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and diffusers
imported first), it is patched now, with every diffusers module that had imported the function by name;
otherwise an import hook (``diffusers_hook``) patches it as soon as diffusers executes that module, before any
model module imports the name from it. A diffusers whose ``apply_rotary_emb`` takes other parameters is left alone.
"""
from __future__ import annotations

import functools
import inspect
import sys

import torch

from ..eager.attention import needs_backward
from ..ops.position_embeddings import real_numbers
from ..runtime.dtypes import REAL_FLOATS
from ..tensor.tensor import TpuTensor
from . import diffusers_hook

TARGET = "diffusers.models.embeddings"
_STATE: dict = {}  # "wrappers": name -> the function put in diffusers' place


def _on_device(t) -> bool:
    """A plain tensor of the tpu device: a TpuTensor in the eager modes; while dynamo traces (compiled mode),
    a traced tensor of the tpu device that is not a subclass such as a DTensor, so that the one op becomes one
    node of the compiled graph, lowered by the same table."""
    if torch.compiler.is_compiling():
        return isinstance(t, torch.Tensor) and t.device.type == "tpu" and type(t) in (torch.Tensor, TpuTensor)
    return type(t) is TpuTensor


def _served(x, cos, sin, use_real, unbind_dim, sequence_dim) -> bool:
    if use_real is not True or unbind_dim != -1 or sequence_dim not in (1, 2):
        return False
    if not _on_device(x) or x.dim() != 4 or x.dtype not in REAL_FLOATS or x.shape[-1] % 2:
        return False
    expected = (x.shape[sequence_dim], x.shape[-1])
    for t in (cos, sin):
        if not isinstance(t, torch.Tensor) or t.dtype not in REAL_FLOATS or tuple(t.shape) != expected:
            return False
    return not needs_backward(x, cos, sin)


def _one_op(x, freqs_cis, use_real, unbind_dim, sequence_dim):
    """The one op's result for a call it serves exactly, else None."""
    if (not _on_device(x) or not isinstance(freqs_cis, (tuple, list))
            or len(freqs_cis) != 2):
        return None  # (before moving the tables: a call left to diffusers moves them itself)
    cos, sin = freqs_cis
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)):
        return None
    cos, sin = cos.to(x.device), sin.to(x.device)  # as diffusers does (a no-op for tpu tensors)
    if not _served(x, cos, sin, use_real, unbind_dim, sequence_dim):
        return None
    # one reshape each (a view of a contiguous table): indexing with None twice dispatched two views
    shape = (1, cos.shape[0], 1, cos.shape[1]) if sequence_dim == 1 else (1, 1, cos.shape[0], cos.shape[1])
    return torch.ops.tpu.rotary_embedding.default(x, cos.reshape(shape), sin.reshape(shape))


def _table(dim, pos, theta, use_real, linear_factor, ntk_factor, repeat_interleave_real, freqs_dtype):
    """``get_1d_rotary_pos_embed``'s (cos, sin) from the one op for a call it serves exactly, else None."""
    numbers = (int, float)
    if (use_real is not True or repeat_interleave_real is not True
            or not _on_device(pos) or pos.dim() != 1 or not real_numbers(pos)
            or type(dim) is not int or dim <= 0 or dim % 2 or freqs_dtype not in (torch.float32, torch.float64)
            or any(type(v) not in numbers for v in (theta, linear_factor, ntk_factor))):
        return None
    if needs_backward(pos):
        return None
    theta = theta * ntk_factor  # (in Python, as diffusers does)
    return torch.ops.tpu.rotary_table.default(pos, dim, float(theta), float(linear_factor), freqs_dtype)


def _timesteps(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period):
    """``get_timestep_embedding`` from the one op for a call it serves exactly, else None."""
    numbers = (int, float)
    if (not _on_device(timesteps) or timesteps.dim() != 1
            or not real_numbers(timesteps)
            or type(embedding_dim) is not int or embedding_dim < 2 or type(flip_sin_to_cos) is not bool
            or any(type(v) not in numbers for v in (downscale_freq_shift, scale, max_period))
            or max_period <= 0 or embedding_dim // 2 == downscale_freq_shift):
        return None  # (diffusers' own: its assert, math.log's error, a division by zero)
    if needs_backward(timesteps):
        return None
    return torch.ops.tpu.timestep_embedding.default(timesteps, embedding_dim, flip_sin_to_cos,
                                                    float(downscale_freq_shift), float(scale), float(max_period))


# diffusers' function -> (its parameters, the one-op version: its arguments in that order, or None)
_SERVED = {
    "apply_rotary_emb": (("x", "freqs_cis", "use_real", "use_real_unbind_dim", "sequence_dim"), _one_op),
    "get_1d_rotary_pos_embed": (("dim", "pos", "theta", "use_real", "linear_factor", "ntk_factor",
                                 "repeat_interleave_real", "freqs_dtype"), _table),
    "get_timestep_embedding": (("timesteps", "embedding_dim", "flip_sin_to_cos", "downscale_freq_shift", "scale",
                                "max_period"), _timesteps),
}


def _wrap(original, parameters, one_op):
    signature = inspect.signature(original)
    defaults = [signature.parameters[name].default for name in parameters]
    positions = {name: i for i, name in enumerate(parameters)}

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if len(args) <= len(parameters) and all(k in positions for k in kwargs):
            values = list(args) + defaults[len(args):]
            for name, value in kwargs.items():
                if positions[name] < len(args):  # given twice: diffusers' own TypeError
                    return original(*args, **kwargs)
                values[positions[name]] = value
            if all(v is not inspect.Parameter.empty for v in values):
                out = one_op(*values)
                if out is not None:
                    return out
        return original(*args, **kwargs)

    wrapper.__torch_tpu_original__ = original
    return wrapper


def _patch(module) -> bool:
    """Replace the functions of ``_SERVED`` in ``module`` (diffusers.models.embeddings) and in the loaded
    diffusers modules that imported them by name; a function whose parameters are not the ones known here
    stays diffusers' own. Whether any was replaced."""
    replaced = []

    def patch_one(name):
        parameters, one_op = _SERVED[name]
        original = getattr(module, name, None)
        if original is None or hasattr(original, "__torch_tpu_original__"):
            return
        if tuple(inspect.signature(original).parameters) != parameters:
            return
        wrapper = _wrap(original, parameters, one_op)
        holders = diffusers_hook.modules_holding(name, original)
        _STATE.setdefault("wrappers", {})[name] = wrapper
        setattr(module, name, wrapper)
        for other in holders:
            setattr(other, name, wrapper)
        replaced.append(name)

    diffusers_hook.patch_each(_SERVED, patch_one)
    return bool(replaced)


def install() -> None:
    """Route diffusers' rotary embedding on tpu tensors to the one op (see the module's docstring)."""
    from ..ops import position_embeddings

    position_embeddings.define()
    if "wrappers" not in _STATE and not diffusers_hook.waiting(TARGET):
        diffusers_hook.when_executed(TARGET, _patch)


def installed() -> bool:
    """Whether diffusers' functions are the wrappers now."""
    module = sys.modules.get(TARGET)
    return module is not None and all(hasattr(getattr(module, name, None), "__torch_tpu_original__")
                                      for name in _SERVED)

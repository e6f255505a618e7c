"""``torch.fft``: the three aten primitives every ``torch.fft.*`` function (and ``torch.stft``) reaches.

``normalization`` is torch's fft_norm_mode, applied the same way forward and backward: 0 none, 1 divide
by sqrt(n), 2 divide by n (n: the product of the transformed sizes of the signal). JAX's transforms run
unnormalised here (``norm="backward"`` forward, ``norm="forward"`` inverse) and the scale comes after.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..runtime import dtypes
from .registry import aten, register


def _scaled(out, n, normalization):
    if normalization == 1:
        return out / math.sqrt(n)
    if normalization == 2:
        return out / n
    return out


@register(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    axes = tuple(d % x.ndim for d in dim)
    if not axes:
        return x
    out = jnp.fft.fftn(x, axes=axes, norm="backward") if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scaled(out, math.prod(x.shape[a] for a in axes), normalization)


@register(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    axes = tuple(d % x.ndim for d in dim)
    n = math.prod(x.shape[a] for a in axes)
    if onesided:
        out = jnp.fft.rfftn(x, axes=axes, norm="backward")
    else:
        out = jnp.fft.fftn(x, axes=axes, norm="backward")
    return _scaled(out, n, normalization)


@register(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    axes = tuple(d % x.ndim for d in dim)
    sizes = [x.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    out = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    return _scaled(out, math.prod(sizes), normalization)


def _freq_dtype(dtype):
    import torch

    return dtypes.to_jax_dtype(dtype if dtype is not None else torch.get_default_dtype())


@register(aten.fft_fftfreq.default)
def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """torch's formula: [0, 1, ..., -(n // 2), ..., -1] times 1 / (n * d), in the result dtype."""
    want = _freq_dtype(dtype)
    k = jnp.concatenate([jnp.arange((n + 1) // 2), jnp.arange(-(n // 2), 0)]).astype(want)
    return k * (1.0 / (n * d)).astype(want) if hasattr(d, "astype") else k * jnp.asarray(1.0 / (n * d), want)


@register(aten.fft_rfftfreq.default)
def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    want = _freq_dtype(dtype)
    k = jnp.arange(n // 2 + 1).astype(want)
    return k * (1.0 / (n * d)).astype(want) if hasattr(d, "astype") else k * jnp.asarray(1.0 / (n * d), want)

"""Discrete Fourier transforms: the three aten primitives every ``torch.fft`` function reduces to.

``_fft_r2c`` (real -> complex, optionally one-sided), ``_fft_c2r`` (one-sided complex -> real) and
``_fft_c2c``. torch's composites (fft, rfftn, ihfft, fftshift, stft, ...) and their autograd formulas
are written in terms of these three, so lowering them covers the whole module.

Each transform runs unnormalised (numpy's ``norm="backward"`` forward, ``norm="forward"`` inverse) and
is then scaled by torch's ``normalization`` code: 0 none, 1 by 1/sqrt(n), 2 by 1/n, where n is the
product of the transformed (signal) sizes.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from .registry import aten, register
from ._util import jdtype


def _scaled(y, signal_sizes, normalization: int):
    if normalization == 0:
        return y
    n = math.prod(signal_sizes)
    scale = 1.0 / math.sqrt(n) if normalization == 1 else 1.0 / n
    return y * jnp.asarray(scale, jnp.real(y).dtype)


def _axes(x, dim):
    return [d % x.ndim for d in dim]


@register(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    axes = _axes(x, dim)
    transform = jnp.fft.rfftn if onesided else jnp.fft.fftn
    return _scaled(transform(x, axes=axes, norm="backward"), [x.shape[a] for a in axes], normalization)


@register(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    axes = _axes(x, dim)
    sizes = [x.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    # the inverse without numpy's 1/n; torch's normalization code scales it
    y = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    return _scaled(y, sizes, normalization)


@register(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    axes = _axes(x, dim)
    if not axes:
        return x
    # both unnormalised: the forward with numpy's "backward" norm, the inverse with its "forward" norm
    y = jnp.fft.fftn(x, axes=axes, norm="backward") if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scaled(y, [x.shape[a] for a in axes], normalization)


def _freqs(ints, scale, dtype):
    # torch: an integer ramp in the result dtype, times 1 / (n * d) in that dtype
    dt = jdtype(dtype or torch.get_default_dtype())
    return ints.astype(dt) * jnp.asarray(scale, dt)


@register(aten.fft_fftfreq.default)
def fftfreq(n, d=1.0, dtype=None, layout=None, device=None, pin_memory=None):
    ints = jnp.concatenate([jnp.arange((n - 1) // 2 + 1), jnp.arange(-(n // 2), 0)])
    return _freqs(ints, 1.0 / (n * d), dtype)


@register(aten.fft_rfftfreq.default)
def rfftfreq(n, d=1.0, dtype=None, layout=None, device=None, pin_memory=None):
    return _freqs(jnp.arange(n // 2 + 1), 1.0 / (n * d), dtype)

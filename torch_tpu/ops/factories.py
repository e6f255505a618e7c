"""Lowerings of value-producing factory ops (arange, linspace, eye, ...)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .registry import aten, register
from ._util import jdtype


@register(aten.arange.default)
def arange(end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_start_step(0, end, 1, dtype)


@register(aten.arange.start)
def arange_start(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_start_step(start, end, 1, dtype)


@register(aten.arange.start_step)
def arange_start_step(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    n = int(np.ceil((end - start) / step)) if step != 0 else 0
    n = max(n, 0)
    if all(isinstance(v, int) for v in (start, end, step)) and (dtype is None or not dtype.is_floating_point):
        return start + jnp.arange(n, dtype=jnp.int64) * step
    # torch computes start + i * step in double precision
    return start + jnp.arange(n, dtype=jnp.float64) * step


@register(aten.linspace.default)
def linspace(start, end, steps, dtype=None, layout=None, device=None, pin_memory=None):
    if steps == 1:
        return jnp.full((1,), start, jnp.float64)
    i = jnp.arange(steps, dtype=jnp.float64)
    step = (end - start) / (steps - 1)
    half = steps // 2
    # torch fills the first half from start and the second from end (symmetric rounding)
    out = jnp.where(i < half, start + step * i, end - step * (steps - 1 - i))
    if dtype is not None and not dtype.is_floating_point and not dtype.is_complex:
        return out.astype(jdtype(dtype))
    return out


@register(aten.logspace.default)
def logspace(start, end, steps, base=10.0, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.power(base, linspace(start, end, steps))


@register(aten.eye.default)
def eye(n, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, dtype=jdtype(dtype) or jnp.float32)


@register(aten.eye.m)
def eye_m(n, m, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, m, dtype=jdtype(dtype) or jnp.float32)


@register(aten.tril_indices.default)
def tril_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    r, c = np.tril_indices(row, offset, col)
    return jnp.asarray(np.stack([r, c]).astype(np.int64))


@register(aten.triu_indices.default)
def triu_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    r, c = np.triu_indices(row, offset, col)
    return jnp.asarray(np.stack([r, c]).astype(np.int64))


@register(aten.scalar_tensor.default)
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.asarray(s, dtype=jdtype(dtype) or jnp.float32)


@register(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.full(tuple(size), fill_value, jdtype(dtype))


# Uninitialised allocations met in compiled graphs (eager allocates lazily through the factory kernels):
# torch leaves their contents unspecified, zeros is one valid choice; the layout arguments describe
# strides, which a compiled program's values do not have.
@register(aten.empty.memory_format)
def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(tuple(size), jdtype(dtype) or jnp.float32)


@register(aten.empty_strided.default)
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(size), jdtype(dtype) or jnp.float32)


@register(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(size), jdtype(dtype) or jnp.float32)


# The same in compiled backward graphs: CopySlices' backward allocates its result with
# ``new_empty_strided`` (then fills it), ``sgn``/``angle``'s backward gives a known zero as
# ``_efficientzerotensor`` (eager allocates both through its storage and factory kernels).
@register(aten.new_empty_strided.default)
def new_empty_strided(x, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(size), jdtype(dtype) or x.dtype)


@register(aten._efficientzerotensor.default)
def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(tuple(size), jdtype(dtype) or jnp.float32)


@register(aten.kaiser_window)
def kaiser_window(window_length, periodic=True, beta=12.0, dtype=None, layout=None, device=None, pin_memory=None):
    import jax.scipy.special

    dt = jdtype(dtype) or jnp.float32
    if window_length <= 1:
        return jnp.ones((window_length,), dt)
    n = window_length + 1 if periodic else window_length  # periodic: the symmetric window one longer, cut
    alpha = (n - 1) / 2.0
    k = jnp.arange(n, dtype=dt)
    ratio = (k - jnp.asarray(alpha, dt)) / jnp.asarray(alpha, dt)
    beta = jnp.asarray(beta, dt)
    w = jax.scipy.special.i0(beta * jnp.sqrt(jnp.maximum(1 - ratio * ratio, 0))) / jax.scipy.special.i0(beta)
    return w[:window_length]

"""GradScaler's two ops (torch.amp.GradScaler("tpu")): unscale gradients while checking them for
inf/NaN, and update the loss scale. Same arithmetic as CUDA's kernels (float32 scale)."""
from __future__ import annotations

import torch

from ..runtime import platform
from .registry import register

aten = torch.ops.aten


@register(aten._amp_foreach_non_finite_check_and_unscale.default)
def non_finite_check_and_unscale(grads, found_inf, inv_scale):
    """Every gradient times inv_scale; found_inf becomes 1 if any gradient holds an inf or NaN."""
    jnp = platform.jax().numpy
    out, found = [], jnp.zeros((), jnp.bool_)
    for g in grads:
        found = found | ~jnp.all(jnp.isfinite(g))
        out.append((g * inv_scale.reshape(()).astype(g.dtype)) if g.dtype != inv_scale.dtype
                   else g * inv_scale.reshape(()))
    found_out = jnp.where(found, jnp.ones_like(found_inf), found_inf)
    return out, found_out


@register(aten._amp_update_scale.default)
def update_scale(scale, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                 growth_interval):
    """Back off after an inf/NaN; grow after ``growth_interval`` clean steps (if the result is finite)."""
    jnp = platform.jax().numpy
    bad = found_inf.reshape(()) != 0
    successful = growth_tracker + 1
    grow = jnp.logical_and(~bad, successful == growth_interval)
    grown = (scale * scale_growth_factor).astype(scale.dtype)
    new_scale = jnp.where(bad, (scale * scale_backoff_factor).astype(scale.dtype),
                          jnp.where(jnp.logical_and(grow, jnp.isfinite(grown)), grown, scale))
    new_tracker = jnp.where(jnp.logical_or(bad, grow), jnp.zeros_like(growth_tracker), successful)
    return new_scale, new_tracker.astype(growth_tracker.dtype)

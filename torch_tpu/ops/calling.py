"""How every executor calls a lowering and shapes its results: one way, shared by eager and compile.

``invoke`` passes the extra inputs a lowering declares (a PRNG key for random ops, the float32 matmul
precision for matmul-like ops); ``conform`` casts a result to what torch's meta kernel promised and
checks its shape, so dtype promotion and shapes always follow torch.
"""
from __future__ import annotations

import torch

from ..errors import OpError, leaves
from ..runtime import dtypes, platform
from . import elementary
from .registry import Lowering


def invoke(low: Lowering, args, kwargs: dict, *, rng_key=None, precision=None, results=None):
    """``low.fn(*args, **kwargs)`` plus ``rng_key=`` (random ops) and ``precision=`` (matmul ops).
    ``results``: the op's results as torch describes them (meta tensors), where known; an op whose floating
    results are all bfloat16 computes its float32 internals with XLA's own transcendental functions."""
    if low.random:
        kwargs["rng_key"] = rng_key
    if low.matmul:
        kwargs["precision"] = precision
    with elementary.results_in_bfloat16(bfloat16_results(results)):
        return low.fn(*args, **kwargs)


def bfloat16_results(results) -> bool:
    """Whether ``results`` (meta tensors, None, or nested lists of them) hold a floating tensor and every
    floating one is bfloat16."""
    floats = [r.dtype for r in leaves(results) if isinstance(r, torch.Tensor) and r.dtype.is_floating_point]
    return bool(floats) and all(d == torch.bfloat16 for d in floats)


def matmul_precision(low: Lowering):
    """The precision a matmul-like lowering runs at (part of its program key), else None."""
    return torch.get_float32_matmul_precision() if low.matmul else None


# ops whose CPU kernel returns empty tensors where the meta kernel promises shaped ones (inference batch
# norm's saved statistics); graphs traced with the meta shapes get zeros of that shape (nothing reads them)
_EMPTY_ON_CPU = {torch.ops.aten._native_batch_norm_legit_no_training.default}


def conform(func, result, meta: torch.Tensor, broadcast: bool = False):
    """One output of ``func``'s lowering, cast to ``meta``'s dtype; its shape must be ``meta``'s. Only a
    value written into a tensor in place (``broadcast``: ``x.add_(scalar_shaped)``) broadcasts to it: a
    result of another shape is a lowering or meta kernel bug (``any(x, dim=())`` reduced every dim and
    the total was broadcast to x's shape), raised rather than silently spread."""
    jax = platform.jax()
    want = dtypes.to_jax_dtype(meta.dtype)
    if isinstance(result, jax.core.Tracer) and result.dtype == want and result.shape == meta.shape:
        return result  # (what tracing meets almost always: nothing to convert)
    jnp = jax.numpy
    result = jnp.asarray(result)
    if result.dtype != want:
        result = dtypes.astype(result, want)
    shape = tuple(meta.shape)
    if tuple(result.shape) != shape:
        if result.size == 0 and func in _EMPTY_ON_CPU:
            return jnp.zeros(shape, want)
        try:
            if not broadcast:
                raise ValueError
            result = jnp.broadcast_to(result, shape)
        except ValueError:
            raise OpError(f"tpu lowering of {func} produced shape {tuple(result.shape)}, torch expects "
                          f"{shape} (an internal error of the tpu backend: please report it)") from None
    return result

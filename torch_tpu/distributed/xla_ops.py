"""The collectives as JAX functions over one mesh axis (``spmd.AXIS``): what runs inside ``shard_map``.

Each builder returns a function of this process's local arrays. Eager collectives, fused graphs and
compiled graphs (``_c10d_functional`` lowerings) all use these, so the three modes compute the same
thing. ``None`` means "no XLA form": the caller stages that collective through the host.
"""
from __future__ import annotations

import functools

from ..runtime import platform, spmd

AXIS = spmd.AXIS
REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")


def _lax():
    return platform.jax().lax


def _jnp():
    return platform.jax().numpy


def _is_bool(dtype) -> bool:
    return _jnp().dtype(dtype) == _jnp().bool_


def _is_inexact(dtype) -> bool:
    jnp = _jnp()
    return jnp.issubdtype(dtype, jnp.inexact)


def _is_complex(dtype) -> bool:
    jnp = _jnp()
    return jnp.issubdtype(dtype, jnp.complexfloating)


@functools.lru_cache(maxsize=None)
def supports_reduce(op: str, dtype) -> bool:
    if op not in REDUCE_OPS:
        return False
    if op in ("band", "bor", "bxor"):
        return not _is_inexact(dtype)
    if op in ("min", "max"):
        return not _is_complex(dtype)
    if op == "avg":
        return not _is_bool(dtype)
    return True


def _gathered(x):
    """(size,) + x.shape: every member's x, in group rank order."""
    return _lax().all_gather(x, AXIS, axis=0, tiled=False)


def reduce(x, op: str, size: int):
    """The elementwise reduction of every member's x (the value all_reduce leaves on every member)."""
    lax, jnp = _lax(), _jnp()
    if _is_bool(x.dtype):
        as_int = x.astype(jnp.int8)
        if op in ("sum", "max", "bor"):
            return lax.pmax(as_int, AXIS).astype(jnp.bool_)
        if op in ("min", "product", "band"):
            return lax.pmin(as_int, AXIS).astype(jnp.bool_)
        if op == "bxor":
            return (lax.psum(as_int.astype(jnp.int32), AXIS) % 2).astype(jnp.bool_)
    if op == "sum":
        return lax.psum(x, AXIS)
    if op == "avg":
        total = lax.psum(x, AXIS)
        if _is_inexact(x.dtype):
            return (total / size).astype(x.dtype)
        return lax.div(total, jnp.asarray(size, x.dtype))  # integers: truncating, as NCCL's avg
    if op == "max":
        return lax.pmax(x, AXIS)
    if op == "min":
        return lax.pmin(x, AXIS)
    # no lax primitive: gather every member's value and reduce locally (moves size x the bytes)
    fold = {"product": jnp.multiply, "band": jnp.bitwise_and, "bor": jnp.bitwise_or,
            "bxor": jnp.bitwise_xor}[op]
    g = _gathered(x)
    return functools.reduce(fold, [g[i] for i in range(size)]).astype(x.dtype)


# Every builder's function runs in the order of the program's collectives (``spmd.in_order``).


def all_reduce(op: str, size: int):
    return spmd.in_order(lambda x: reduce(x, op, size), f"all_reduce({op})")


def all_gather(size: int, out_shape: tuple):
    """Members' x concatenated along dim 0 (0-d: stacked), reshaped to ``out_shape``."""
    def fn(x):
        if x.ndim == 0:
            return _gathered(x).reshape(out_shape)
        return _lax().all_gather(x, AXIS, axis=0, tiled=True).reshape(out_shape)
    return spmd.in_order(fn, "all_gather")


def all_gather_list(size: int):
    """Members' x, one output each (``dist.all_gather`` into a list)."""
    def fn(x):
        g = _gathered(x)
        return tuple(g[i] for i in range(size))
    return spmd.in_order(fn, "all_gather_list")


def _own_block(r, size: int):
    lax = _lax()
    n = r.shape[0] // size
    return lax.dynamic_slice_in_dim(r, lax.axis_index(AXIS) * n, n, 0)


def _reduce_scatter(x, op: str, size: int, out_shape: tuple):
    flat = x.reshape((size, -1))
    if op == "sum" and not _is_bool(x.dtype):
        mine = _lax().psum_scatter(flat, AXIS, scatter_dimension=0, tiled=True)
    else:
        mine = _own_block(reduce(flat, op, size), size)
    return mine.reshape(out_shape)


def reduce_scatter(op: str, size: int, out_shape: tuple):
    """Reduce every member's x (dim 0 = size blocks), keep this member's block, reshaped."""
    return spmd.in_order(lambda x: _reduce_scatter(x, op, size, out_shape), f"reduce_scatter({op})")


def reduce_scatter_list(op: str, size: int):
    """``dist.reduce_scatter``: size inputs; member i keeps the reduction of everybody's input i."""
    def fn(*xs):
        return _reduce_scatter(_jnp().stack(xs), op, size, tuple(xs[0].shape))
    return spmd.in_order(fn, f"reduce_scatter_list({op})")


def all_to_all(size: int, out_shape: tuple):
    """Even all_to_all_single: block j of member i's x goes to member j, at block i."""
    def fn(x):
        flat = x.reshape((size, -1))
        return _lax().all_to_all(flat, AXIS, 0, 0, tiled=True).reshape(out_shape)
    return spmd.in_order(fn, "all_to_all")


def all_to_all_list(size: int):
    def fn(*xs):
        jnp = _jnp()
        out = _lax().all_to_all(jnp.stack(xs), AXIS, 0, 0, tiled=True)
        return tuple(out[i] for i in range(size))
    return spmd.in_order(fn, "all_to_all_list")


def broadcast(src: int):
    """Member ``src``'s x on every member, bit for bit (-0.0 and NaN payloads included)."""
    def fn(x):
        lax, jnp = _lax(), _jnp()
        mine = lax.axis_index(AXIS) == src
        if _is_complex(x.dtype) or x.dtype.itemsize not in (1, 2, 4, 8):
            return lax.psum(jnp.where(mine, x, jnp.zeros_like(x)), AXIS)
        if _is_bool(x.dtype):
            bits = x.astype(jnp.uint8)
        else:
            bits = lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32,
                                                8: jnp.uint64}[x.dtype.itemsize])
        total = lax.psum(jnp.where(mine, bits, jnp.zeros_like(bits)), AXIS)
        return total.astype(jnp.bool_) if _is_bool(x.dtype) else lax.bitcast_convert_type(total, x.dtype)
    return spmd.in_order(fn, f"broadcast(src={src})")

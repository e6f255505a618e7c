"""A deferred device value of fused eager (``fused.py``): the j-th output of a recorded node, or, once its
graph ran, a concrete array."""
from __future__ import annotations

import numpy as np

_MATERIALIZE = [None]  # fused.materialize: the concrete array of a lazy value (flushing what it needs)


def set_materializer(fn) -> None:
    _MATERIALIZE[0] = fn


class LazyArray:
    """A deferred device value: the j-th output of a recorded node (or, after a flush, a concrete array)."""

    __slots__ = ("shape", "dtype", "node", "out", "concrete", "error", "launch", "__weakref__")

    def __init__(self, shape, dtype, node, out):
        self.shape = shape if type(shape) is tuple else tuple(shape)
        # a NumPy dtype, as a concrete array's: program keys hold ``array.dtype``, and JAX's scalar type
        # (``jnp.bool_``, what avals carry) hashes differently from ``np.dtype(bool)``, so a cast keyed on a
        # pending value missed the program keyed on the same value computed (a new program every call)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.node = node
        self.out = out
        self.concrete = None
        self.error = None  # set when the graph that computes it failed (see recovery.py)
        self.launch = None  # the _Launch of its flushed graph while that graph's program compiles

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(_MATERIALIZE[0](self))
        return arr if dtype is None else arr.astype(dtype)

    def block_until_ready(self):
        return _MATERIALIZE[0](self).block_until_ready()

    def __repr__(self):
        state = "ready" if self.concrete is not None else "pending"
        return f"LazyArray({self.shape}, {self.dtype}, {state})"

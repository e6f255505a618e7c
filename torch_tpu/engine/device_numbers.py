"""Python numbers a strict op passes to its program (``x + 0.5``, ``alpha=``), as device scalars kept by value.

A dynamic Scalar is an input of its op's program (``eager/arguments.py``), so one program serves every
value. Handed to the program as a Python number, JAX converts it to a device buffer at every call, which
cost several times a tensor input from inside torch's dispatch. A number seen a second time is kept here
as the device array JAX would have made (64-bit, weakly typed: what the program was traced with) and
passed as that. Numbers are told apart as fused graphs' constants are (``graph_sets.value_key``: by type
and exact value, ``0.0`` and ``-0.0`` apart); NaN is passed as it is (its sign and payload would be lost),
and so is an int JAX cannot hold in int64 (the program call raises for it as before).
"""
from __future__ import annotations

from ..runtime import caches, platform, program_cache
from .graph_sets import value_key

_NUMBERS = (int, float, complex)
_SEEN = caches.register("device numbers", {})  # value key -> None (seen once) or its device scalar
_LIMIT = 2048  # values kept (a loop counter passes a new one at every call: then the table starts over)
_DTYPES = {int: "int64", float: "float64", complex: "complex128"}


# id(op entry) -> (its program key, the positions of its program inputs that are Python numbers), read by
# the strict launcher (a dict lookup, no walk over the inputs of ops that take none). By id, so that no
# dropped entry (and its program) is kept alive; the key object tells an entry made later under the same id
POSITIONS: dict = caches.register("op number positions", caches.Bounded(program_cache.max_programs))


def positions(entry, arrays: list) -> tuple:
    """Where ``entry``'s program inputs are Python numbers (the same at every call: the op's key says)."""
    found = tuple(i for i, a in enumerate(arrays) if type(a) in _NUMBERS)
    POSITIONS[id(entry)] = (entry.key, found)
    return found


def inputs(arrays: list, at: tuple) -> list:
    """``arrays`` (an op's program inputs) with each Python number at ``at`` seen before replaced by its
    device scalar."""
    out = None
    for i in at:
        a = arrays[i]
        if type(a) in _NUMBERS:
            d = device_scalar(a)
            if d is not None:
                if out is None:
                    out = list(arrays)
                out[i] = d
    return arrays if out is None else out


def device_scalar(value):
    """The device scalar of a Python number seen before (None the first time, for NaN, or for an int outside
    int64)."""
    key = value_key(value)
    found = _SEEN.get(key, _MISSING)
    if found is not _MISSING:
        if found is None:
            found = _SEEN[key] = _make(value)
        return None if found is _NEVER else found
    if value != value or (type(value) is int and not -2 ** 63 <= value < 2 ** 63):
        return None
    if len(_SEEN) >= _LIMIT:
        _SEEN.clear()
    _SEEN[key] = None
    return None


_MISSING = object()
_NEVER = object()  # a value JAX would not make a 64-bit weakly typed scalar of: passed as it is


def _make(value):
    """The array JAX makes of ``value`` as a program argument: 64-bit, weakly typed, on the device."""
    jax = platform.jax()
    prev = platform.X64.swap(True)
    try:
        arr = jax.device_put(value, platform.jax_device())
    finally:
        platform.X64.restore(prev)
    if not arr.weak_type or str(arr.dtype) != _DTYPES[type(value)]:  # (not what the program was traced with)
        return _NEVER
    return arr

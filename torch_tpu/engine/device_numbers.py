"""Python numbers a strict op passes to its program (``x + 0.5``, ``alpha=``), the storage offsets of its view
inputs, and the numbers a fused graph's program takes as inputs (``graph_sets.dynamic_numbers``: a timestep),
as device scalars kept per place.

A dynamic Scalar is an input of its op's program (``eager/arguments.py``), so one program serves every
value. Handed to the program as a Python number, JAX converts it to a device buffer at every call, which
cost several times a tensor input from inside torch's dispatch (~4 us on 2 CPU cores, ~160 us on a TPU
host). So each op entry keeps, per number it takes, the last few values passed there (as fused graphs keep
a number's history per place in the code, ``graph_sets.dynamic_numbers``): a value seen there before is
passed as the device array JAX would have made of it (64-bit, weakly typed: what the program was traced
with), made at its second sighting. A number that changes at every call (a step count) replaces the oldest
value, so nothing grows. Values are told apart as fused graphs' constants are (``graph_sets.value_key``: by
type and exact value, ``0.0`` and ``-0.0`` apart); NaN is passed as it is (its sign and payload would be
lost), and so is an int JAX cannot hold in int64 (the program call raises for it as before).
"""
from __future__ import annotations

import numpy as np

from ..runtime import caches, platform, program_cache
from .graph_sets import value_key

# Python numbers, complex Scalars passed as complex64 (``eager/arguments.py``) and the storage offsets of view
# inputs (numpy int64, ``strided.read``: a slice or a chunk at the same place at every step, converted at every
# call as well); the numpy ones are strongly typed
_NUMBERS = (int, float, complex, np.int64, np.complex64)
_STRONG = (np.int64, np.complex64)
_PER_PLACE = 4  # values kept per number an op entry takes
_DTYPES = {int: "int64", float: "float64", complex: "complex128", np.int64: "int64", np.complex64: "complex64"}
_NEVER = object()  # a value JAX would not make a 64-bit weakly typed scalar of: passed as it is

# id(op entry) -> (its program key, the positions of its program inputs that are Python numbers, for each
# its last values [[value key, device scalar or None (seen once)], ...]), read by the strict launcher (a dict
# lookup, no walk over the inputs of ops that take none). By id, so that no dropped entry (and its program)
# is kept alive; the key object tells an entry made later under the same id
PLACES: dict = caches.register("op number places", caches.Bounded(program_cache.max_programs))


# a small program's key (a view read or write, ``launchers.Strict.launch``) or a fused graph's program key
# (``fused._Launch``) -> the same record as PLACES'
LAUNCH_PLACES: dict = caches.register("small program number places", caches.Bounded(program_cache.max_programs))


def places(entry, arrays: list) -> tuple:
    """``entry``'s record in PLACES, made from its inputs (where the numbers are: the same at every call)."""
    found = PLACES[id(entry)] = _record(entry.key, arrays)
    return found


def launch_places(key, args) -> tuple:
    """A small program's record in LAUNCH_PLACES, made from its inputs."""
    found = LAUNCH_PLACES[key] = _record(key, args)
    return found


def _record(key, arrays) -> tuple:
    at = tuple(i for i, a in enumerate(arrays) if type(a) in _NUMBERS)
    return (key, at, [[] for _ in at])


def inputs(arrays: list, record: tuple) -> list:
    """``arrays`` (an op's program inputs) with each Python number seen at its place before replaced by its
    device scalar."""
    out = None
    for i, kept in zip(record[1], record[2]):
        a = arrays[i]
        if type(a) in _NUMBERS:
            d = scalar_for(kept, a)
            if d is not None:
                if out is None:
                    out = list(arrays)
                out[i] = d
    return arrays if out is None else out


def scalar_for(kept: list, value):
    """The device scalar of ``value`` if ``kept`` (a place's last values) holds it, made at its second
    sighting; else None, and ``value`` joins ``kept`` (the oldest leaves once it holds ``_PER_PLACE``)."""
    key = value_key(value)
    for slot in kept:
        if slot[0] == key:
            d = slot[1]
            if d is None:
                d = slot[1] = _make(value)
            return None if d is _NEVER else d
    if value != value or (type(value) is int and not -2 ** 63 <= value < 2 ** 63):
        return None
    if len(kept) >= _PER_PLACE:
        del kept[0]
    kept.append([key, None])
    return None


def release() -> None:
    """Drop every kept device scalar (``torch.tpu.empty_cache()``): the next calls make them again."""
    PLACES.clear()
    LAUNCH_PLACES.clear()


def kept() -> int:
    """How many device scalars the places hold (live device buffers that are no tensor's)."""
    return sum(1 for table in (PLACES, LAUNCH_PLACES) for _, _, places in list(table.values())
               for slots in places for slot in slots if slot[1] is not None and slot[1] is not _NEVER)


def _make(value):
    """The array JAX makes of ``value`` as a program argument, on the device: 64-bit and weakly typed for a
    Python number, strongly typed for a numpy one (an offset's int64, a complex Scalar's complex64)."""
    jax = platform.jax()
    prev = platform.X64.swap(True)
    try:
        arr = jax.device_put(value, platform.jax_device())
    finally:
        platform.X64.restore(prev)
    weak = type(value) not in _STRONG
    if arr.weak_type != weak or str(arr.dtype) != _DTYPES[type(value)]:  # (not what the program was traced with)
        return _NEVER
    return arr

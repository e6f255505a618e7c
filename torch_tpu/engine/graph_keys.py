"""The parts of a fused graph's key that describe values: a node's output signature, an input's abstract
value for tracing, the output avals of a recorded program (cached by its key), and the check that a
graph's program returns the shapes its values were recorded with."""
from __future__ import annotations

import weakref

import numpy as np

from ..runtime import caches, platform, program_cache, stable_keys
from .recovery import FusedGraphError

_AVALS: dict = caches.register("fused output avals", caches.Bounded(program_cache.max_programs))
# A graph's key is persistent when every node's key is (node keys of other kinds stay in this process).
stable_keys.register_kind("fused", check=lambda key: all(stable_keys.is_stable(node[0]) for node in key[1]))

PY_NUMBERS = (int, float, complex, bool)

# a graph key's long parts, one object per content (see interned)
# bounded like every cache of program keys (TORCH_TPU_MAX_CACHED_PROGRAMS): a part evicted and seen again is
# interned anew; keys still holding the old object stay equal to it by value (Hashed is a tuple)
_INTERNED: dict = caches.register("fused key parts", caches.Bounded(program_cache.max_programs))


def interned(part: tuple) -> tuple:
    """``part`` (a graph's structure, its inputs' signature) as a tuple that hashes once, the same object
    for every equal part seen before: the keys holding it are looked up in several tables per flush, and
    equal keys then compare by identity instead of item by item."""
    hashed = stable_keys.Hashed(part)
    found = _INTERNED.get(hashed)
    if found is None:
        found = _INTERNED[hashed] = hashed
    return found


def abstract(a):
    """What tracing needs of an input: a ShapeDtypeStruct, or a Python number itself (weakly typed)."""
    if type(a) in PY_NUMBERS:
        return a
    return platform.jax().ShapeDtypeStruct(np.shape(a), dtype_of(a))


_OUT_SIGNATURES: dict = {}
_BY_IDENTITY: dict = {}  # id(avals) -> (avals, signature): an op entry passes the same avals at every call


def out_signature(avals) -> tuple:
    """A node's outputs as ((shape, dtype name), ...): part of its graph's key."""
    found = _BY_IDENTITY.get(id(avals))
    if found is not None and found[0] is avals:
        return found[1]
    sig = _signature(avals)
    if len(_BY_IDENTITY) > 4096:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[id(avals)] = (avals, sig)
    return sig


def _signature(avals) -> tuple:
    try:
        sig = _OUT_SIGNATURES.get(avals)
    except TypeError:  # shapes given as lists
        avals = tuple((tuple(a[0]), *a[1:]) for a in avals)
        sig = _OUT_SIGNATURES.get(avals)
    if sig is None:
        if len(_OUT_SIGNATURES) > 4096:
            _OUT_SIGNATURES.clear()
        sig = _OUT_SIGNATURES[avals] = tuple((tuple(a[0]), np.dtype(a[1]).name) for a in avals)
    return sig


def out_avals(key, fn, args):
    """(shape, dtype) of each output of fn(*args), cached by the program key."""
    avals = _AVALS.get(key)
    if avals is None:
        jax = platform.jax()
        shapes = jax.eval_shape(fn, *[abstract(a) for a in args])
        leaves = shapes if isinstance(shapes, (tuple, list)) else [shapes]
        avals = tuple((tuple(s.shape), s.dtype) for s in leaves)
        _AVALS[key] = avals
    return avals


def dtype_of(a):
    dt = getattr(a, "dtype", None)
    if dt is None:
        return np.asarray(a).dtype
    return dt


_DTYPE_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """An input's dtype in its graph's key (``str(np.dtype(dtype))``, kept per dtype object)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(np.dtype(dtype))
    return name


# id(program) -> (weak ref to it, the graph key it passed check_program_shapes for): a graph's key fixes its
# values' shapes, so a program run again for an equal key needs no second look (reading out_info builds its
# outputs' structs); weak, so that a program the cache dropped is freed
_CHECKED = caches.register("fused programs checked", caches.Bounded(program_cache.max_programs))


def check_program_shapes(prog, key, donate, out_sig, live) -> None:
    """A program (compiled now or found on disk) must return the shapes its graph's values were recorded
    with; one that does not (a wrong cache entry) is forgotten before it runs, and the graph runs op by op
    (the error goes to the replay)."""
    found = _CHECKED.get(id(prog))
    if found is not None and found[0]() is prog and found[1] == key:
        return
    _check_program_shapes(prog, key, donate, out_sig, live)
    try:
        _CHECKED[id(prog)] = (weakref.ref(prog), key)
    except TypeError:  # (a program object that takes no weak reference: checked at every run)
        pass


def _check_program_shapes(prog, key, donate, out_sig, live) -> None:
    try:
        info = getattr(prog, "out_info", None)
    except AssertionError:
        # JAX asserts on output layouts it does not know: a program holding Pallas kernels in JAX's TPU interpret
        # mode (TORCH_TPU_BUILD_FOR=tpu off a TPU), whose host callbacks have none. Such a program is not checked.
        info = None
    if info is None:
        return
    shapes = [tuple(s.shape) for s in info] if isinstance(info, (tuple, list)) else None
    position = {o: k for k, o in enumerate(out_sig)}
    for i, j, la in live:
        k = position[(i, j)]
        if shapes is None or k >= len(shapes) or shapes[k] != la.shape:
            program_cache.discard(key, donate=donate)
            got = "another structure" if shapes is None or k >= len(shapes) else f"shape {shapes[k]}"
            raise FusedGraphError(f"tpu fused eager: the graph's program returns {got} for a value recorded "
                                  f"as {la.shape} (internal error; the program is dropped)")


def collectives_of(nodes) -> str:
    """How the compile log names a graph holding collectives."""
    names = [n.where[0] for n in nodes if isinstance(n.key, tuple) and n.key[:1] == ("collective",)]
    return f"a fused graph of {len(nodes)} ops with collectives {', '.join(names[:6])}"

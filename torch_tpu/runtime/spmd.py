"""Programs over a mesh of several processes' devices, called with this process's local arrays.

A collective is an SPMD program: every member of a process group runs the same program over a 1-D mesh
of the group's devices (axis ``AXIS``). Each process holds only its own (local) arrays; the global array
of an input is the members' local arrays concatenated along dim 0 (``NamedSharding(mesh, P(AXIS))``),
so the local shard *is* the local array: no copy and no reshape. 0-d values are replicated-spec
(``P()``) so that no reshape is needed either. Inside ``shard_map`` the traced function sees exactly the
local shapes, so the same function (a fused graph, a compiled aten graph, one collective) runs
unchanged, with ``lax.psum(x, AXIS)`` and friends where it communicates.

One helper serves every executor: eager collectives, fused-mode flushes that hold collectives, and
compiled graphs with functional collectives.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from . import caches, collective_order, counters, multiprocess, platform, program_cache, tpu_lowering

AXIS = "g"
_PY_NUMBERS = (int, float, complex, bool)
_SHARDINGS: dict = caches.register("spmd shardings", {})


class _Order(threading.local):
    tracing = False  # an SPMD program is being traced on this thread
    last = None      # an output of the collective traced last in it
    seen = None      # descriptions of its collectives, in order (a list while tracing)


_ORDER = _Order()


def in_order(body, label: str):
    """A collective's body (``label``: what it does), made to run after the collective traced before it
    in the same program.

    Each process issues its collectives in the order its code calls them, but cuts them into programs its
    own way (a fused graph flushed early on one rank, a program cache warm on one and cold on the other).
    XLA combines independent all-reduces of one program into one and schedules independent collectives in
    any order, so two ranks whose programs differ put other messages on the wire, and gloo aborts the
    process ("Received data size doesn't match expected size"). Each collective's input therefore depends on
    the previous collective's output (one element of it, selected by a condition that always holds but that
    XLA cannot evaluate): the program runs its collectives one by one, in the order they were called, each
    with its own size, whatever else the program holds. The program keeps their descriptions: before it
    launches, the ranks compare them (``collective_order``)."""
    @functools.wraps(body)
    def ordered(*xs):
        if not _ORDER.tracing:
            return body(*xs)
        _ORDER.seen.append(f"{label} " + " ".join(f"{x.dtype}{list(x.shape)}" for x in xs))
        if _ORDER.last is not None:
            go = _always(_ORDER.last)
            xs = tuple(_after(x, go) for x in xs)
        out = body(*xs)
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if o.size:
                _ORDER.last = o
                break
        return out
    return ordered


def _always(prev):
    """True, computed from ``prev``'s first element (so after it) in a way XLA does not fold."""
    jax = platform.jax()
    jnp, lax = jax.numpy, jax.lax
    first = prev.reshape(-1)[0]
    if jnp.issubdtype(first.dtype, jnp.complexfloating):
        first = first.real
    if first.dtype == jnp.bool_:
        bits = first.astype(jnp.uint8)
    else:
        bits = lax.bitcast_convert_type(first, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32,
                                                8: jnp.uint64}[first.dtype.itemsize])
    return (bits | 1) != 0


def _after(x, go):
    """``x``, its first element passed through ``where(go, ...)``: the same value, depending on ``go``."""
    jax = platform.jax()
    jnp, lax = jax.numpy, jax.lax
    if not x.size:
        return x
    if not x.ndim:
        return jnp.where(go, x, jnp.zeros((), x.dtype))
    start = (0,) * x.ndim
    head = lax.slice(x, start, (1,) * x.ndim)
    return lax.dynamic_update_slice(x, jnp.where(go, head, jnp.zeros_like(head)), start)


_EARLIER: list = [None]  # the engine's function launching collectives recorded before (a pending fused graph's)


def launch_earlier_collectives_with(fn) -> None:
    """``fn()`` runs before any SPMD program launches: it launches the collectives this process recorded
    earlier and has not launched yet (a fused graph still pending), so programs put their collectives on
    the wire in the order the code called them."""
    _EARLIER[0] = fn


def _traced_in_order(fn, collectives: list):
    """``fn`` (a program's body over local arrays), whose collectives run in order whenever it is traced
    (by ``lower`` or by a call that traces again); ``collectives`` receives their descriptions."""
    @functools.wraps(fn)
    def traced(*args):
        previous = _ORDER.tracing, _ORDER.last, _ORDER.seen
        _ORDER.tracing, _ORDER.last, _ORDER.seen = True, None, []
        try:
            out = fn(*args)
            collectives[:] = _ORDER.seen
            return out
        finally:
            _ORDER.tracing, _ORDER.last, _ORDER.seen = previous
    return traced


@functools.lru_cache(maxsize=None)
def mesh(device_ids: tuple):
    """The 1-D mesh (axis AXIS) of these global device ids, in this order (group rank order)."""
    jax = platform.jax()
    by_id = {d.id: d for d in jax.devices()}
    missing = [i for i in device_ids if i not in by_id]
    if missing:
        raise RuntimeError(f"tpu_dist: device ids {missing} are not in JAX's global device list "
                           f"{sorted(by_id)}")
    return jax.sharding.Mesh(np.array([by_id[i] for i in device_ids]), (AXIS,))


def _sharding(device_ids: tuple, ndim: int):
    key = (device_ids, ndim > 0)
    sh = _SHARDINGS.get(key)
    if sh is None:
        jax = platform.jax()
        P = jax.sharding.PartitionSpec
        sh = jax.sharding.NamedSharding(mesh(device_ids), P(AXIS) if ndim > 0 else P())
        _SHARDINGS[key] = sh
    return sh


def _spec(ndim: int):
    P = platform.jax().sharding.PartitionSpec
    return P(AXIS) if ndim > 0 else P()


def global_shape(shape: tuple, size: int) -> tuple:
    return (shape[0] * size,) + tuple(shape[1:]) if shape else ()


def to_global(x, device_ids: tuple):
    """This process's array -> the global array over the mesh whose local shard it is."""
    jax = platform.jax()
    if not isinstance(x, jax.Array):  # a constant (numpy value, Python number) of a fused graph
        x = jax.device_put(np.asarray(x), platform.jax_device())
    shape = global_shape(tuple(x.shape), len(device_ids))
    sharding = _sharding(device_ids, x.ndim)
    fast = _fast_global()
    if fast is not None:
        return fast(shape, sharding, x)
    return jax.make_array_from_single_device_arrays(shape, sharding, [x])


@functools.lru_cache(maxsize=None)
def _fast_global():
    """JAX's array constructor without its consistency checks (half the host time of
    ``make_array_from_single_device_arrays``, which runs them for every input of every call); None when
    this JAX lacks it. Our inputs are consistent by construction: one local array on its own device."""
    try:
        from jax._src import array as _array
        from jax._src import core as _core

        ctor = _array.ArrayImpl

        def fast(shape, sharding, x):
            return ctor(_core.ShapedArray(shape, x.dtype), sharding, [x], committed=True, _skip_checks=True)

        jax = platform.jax()
        probe = jax.device_put(np.zeros((1,), np.float32), platform.jax_device())
        ids = (platform.jax_device().id,)
        fast((1,), _sharding(ids, 1), probe).block_until_ready()
        return fast
    except Exception:
        return None


def local(y):
    """A global result -> this process's shard (a plain single-device array)."""
    return y.addressable_data(0)


def _abstract_global(a, device_ids: tuple):
    jax = platform.jax()
    shape = tuple(np.shape(a))
    dtype = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
    return jax.ShapeDtypeStruct(global_shape(shape, len(device_ids)), dtype,
                                sharding=_sharding(device_ids, len(shape)))


def compile_program(key, fn, example_args: tuple, device_ids: tuple, out_ndims=None, donate: tuple = (),
                    what: str = "a collective program"):
    """Compile ``fn`` (local arrays -> tuple of local arrays, may use ``AXIS`` collectives) as one SPMD
    program over the mesh of ``device_ids``; cache it under ``key``. Returns a callable over local arrays
    that returns a tuple of local arrays.

    ``out_ndims``: the rank of each output (needed for its sharding); traced when not given."""
    jax = platform.jax()
    counters.counters["cache_misses"] += 1
    the_mesh = mesh(device_ids)
    in_specs = tuple(_spec(len(np.shape(a))) for a in example_args)
    if out_ndims is None:
        out_ndims = _trace_out_ndims(fn, example_args, device_ids, in_specs)
    out_specs = tuple(_spec(n) for n in out_ndims)

    collectives: list = []
    fn = _traced_in_order(fn, collectives)
    weak = tuple(type(a) in _PY_NUMBERS for a in example_args)
    if any(weak):  # a Python number (fused graphs) arrives as a 0-d array: weakly typed again, as traced
        from jax._src.lax import lax as _lax

        def body(*args):
            args = [_lax._convert_element_type(a, a.dtype, weak_type=True) if w else a
                    for a, w in zip(args, weak)]
            return _as_tuple(fn(*args))
    else:
        def body(*args):
            return _as_tuple(fn(*args))

    if tpu_lowering.enabled():
        tpu_lowering.check_spmd(body, example_args, len(device_ids), AXIS, in_specs, out_specs, what)
    mapped = jax.shard_map(body, mesh=the_mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    prog = jax.jit(mapped, donate_argnums=donate) if donate else jax.jit(mapped)
    lowered = prog.lower(*[_abstract_global(a, device_ids) for a in example_args])
    if platform.platform() == "tpu":  # what XLA:TPU cannot compile is an error naming the program, not a crash
        tpu_lowering.refuse_uncompilable(lowered.as_text(), what)
    lowered.compile()
    runner = _Runner(prog, device_ids, what, collectives)
    program_cache.store(key, runner)
    return runner


def _as_tuple(res) -> tuple:
    return tuple(res) if isinstance(res, (tuple, list)) else (res,)


def _trace_out_ndims(fn, example_args, device_ids, in_specs) -> tuple:
    jax = platform.jax()
    ndims = []

    def probe(*args):
        outs = _as_tuple(fn(*args))
        ndims[:] = [o.ndim for o in outs]
        return tuple(o.reshape((1,)) if o.ndim == 0 else o for o in outs)

    P = jax.sharding.PartitionSpec
    mapped = jax.shard_map(probe, mesh=mesh(device_ids), in_specs=in_specs, out_specs=P(AXIS),
                           check_vma=False)
    jax.eval_shape(mapped, *[_abstract_global(a, device_ids) for a in example_args])
    return tuple(ndims)


class _Runner:
    """Local arrays in, local arrays out; a failed collective is reported by name. Before it launches, the
    ranks agree on its collectives (``collective_order``)."""

    __slots__ = ("prog", "device_ids", "what", "collectives")

    def __init__(self, prog, device_ids, what, collectives: list):
        self.prog = prog
        self.device_ids = device_ids
        self.what = what
        self.collectives = collectives

    def __call__(self, *arrays):
        ids = self.device_ids
        if _EARLIER[0] is not None:
            _EARLIER[0]()
        collective_order.before_launch(ids, self.collectives)
        try:
            outs = self.prog(*[to_global(a, ids) for a in arrays])
        except Exception as exc:
            err = multiprocess.collective_error(exc, self.what)
            if err is exc:
                raise
            raise err from exc
        return tuple(o.addressable_data(0) for o in outs)

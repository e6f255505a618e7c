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

import numpy as np

from . import caches, counters, multiprocess, platform, program_cache, tpu_lowering

AXIS = "g"
_PY_NUMBERS = (int, float, complex, bool)
_SHARDINGS: dict = caches.register("spmd shardings", {})


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
    prog.lower(*[_abstract_global(a, device_ids) for a in example_args]).compile()
    runner = _Runner(prog, device_ids, what)
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
    """Local arrays in, local arrays out; a failed collective is reported by name."""

    __slots__ = ("prog", "device_ids", "what")

    def __init__(self, prog, device_ids, what):
        self.prog = prog
        self.device_ids = device_ids
        self.what = what

    def __call__(self, *arrays):
        ids = self.device_ids
        try:
            outs = self.prog(*[to_global(a, ids) for a in arrays])
        except Exception as exc:
            err = multiprocess.collective_error(exc, self.what)
            if err is exc:
                raise
            raise err from exc
        return tuple(o.addressable_data(0) for o in outs)

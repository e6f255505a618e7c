"""Reading and writing a strided view of a storage with XLA operations.

A view is torch metadata (size, stride, storage offset, dtype) over its storage's memory. Most views
(transpose, permute, slicing, select, reshape, expand, unsqueeze, chunk, unbind ...) are *regular*:
once their dimensions are sorted by stride, each stride divides the previous one and rows do not
overlap. The offset is a runtime argument so that ``x[i]`` for many ``i`` shares one program. How a
view is placed in its storage picks the program (``placement``):

- ``"zero"``: at offset 0 and spanning its whole storage (a reshape or transpose of it): no offset input;
- ``"box"``: a box of the storage's array once its dims are split at the view's strides (a slice, a chunk,
  ``select``, a head split, ...): one multi-dimensional ``dynamic_slice`` (``dynamic_update_slice`` to
  write) of the array in its own shape, starts computed from the offset inside the program. TPUs lay
  arrays out in tiles, so this keeps XLA from flattening, padding and reshaping the whole storage;
- ``"window"``: any other regular view: a window of the flat storage, reshaped, sliced and transposed.

Anything else (diagonal, overlapping ``unfold``, exotic ``as_strided``) uses an index gather / scatter.

Why one module: reading and writing views share one model of a view (its box of the storage, offsets, memory order).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..engine.launchers import launch
from ..runtime import caches, dtypes, platform, program_cache, stable_keys


def strided_indices(size, stride, offset):
    from ..ops.shape import strided_indices  # the op table's helper (imports JAX: not at import time)

    return strided_indices(size, stride, offset)


def _layout(size, stride):
    """Split view dims into (sorted real dims, broadcast dims); None when not regular."""
    real = [(k, s, st) for k, (s, st) in enumerate(zip(size, stride)) if s > 1 and st != 0]
    real.sort(key=lambda d: -d[2])
    for (ka, sa, ta), (kb, sb, tb) in zip(real, real[1:]):
        if ta % tb != 0 or ta < tb * sb:
            return None
    return real


def _units(storage_dtype: torch.dtype, view_dtype: torch.dtype) -> float:
    """How many view elements one storage element holds."""
    return storage_dtype.itemsize / view_dtype.itemsize


def _reinterpret(flat, want):
    """A 1-D array's bytes as dtype ``want`` (torch's ``view(dtype)``), as a 1-D array: complex values
    are their (real, imag) pairs, bool is a byte (read back as ``!= 0``)."""
    jax = platform.jax()
    jnp = jax.numpy
    want = jnp.dtype(want)
    if flat.dtype == want:
        return flat
    if jnp.issubdtype(flat.dtype, jnp.complexfloating):
        flat = jnp.stack([jnp.real(flat), jnp.imag(flat)], axis=-1).reshape(-1)
    elif flat.dtype == jnp.bool_:
        flat = flat.astype(jnp.uint8)
    if jnp.issubdtype(want, jnp.complexfloating):
        pairs = _reinterpret(flat, jnp.finfo(want).dtype).reshape(-1, 2)
        return jax.lax.complex(pairs[:, 0], pairs[:, 1]).astype(want)
    if want == jnp.bool_:
        return _reinterpret(flat, jnp.uint8) != 0
    a, b = flat.dtype.itemsize, want.itemsize
    if a == b:
        return jax.lax.bitcast_convert_type(flat, want)
    # XLA's simplifier merges two width-changing bitcast-converts into one of the wrong shape (an HLO
    # verifier error): keep each one apart
    flat = jax.lax.optimization_barrier(flat)
    if a > b:
        return jax.lax.bitcast_convert_type(flat, want).reshape(-1)
    return jax.lax.bitcast_convert_type(flat.reshape(-1, b // a), want)


def _to_flat(arr, storage_dtype, view_dtype):
    flat = arr.reshape(-1)
    if view_dtype == storage_dtype:
        return flat
    return _reinterpret(flat, dtypes.to_jax_dtype(view_dtype))


def _from_flat(flat, storage_shape, storage_dtype, view_dtype):
    if view_dtype != storage_dtype:
        flat = _reinterpret(flat, dtypes.to_jax_dtype(storage_dtype))
    return flat.reshape(storage_shape)


def _window_geometry(real, n_flat, offset_is_zero):
    """Shape of the window that holds a regular view, its length and the padding it needs."""
    t1 = real[0][2]
    length = real[0][1] * t1
    shape = [real[0][1]]
    for (_, _, ta), (_, _, tb) in zip(real, real[1:]):
        shape.append(ta // tb)
    shape.append(real[-1][2])
    whole = offset_is_zero and length == n_flat
    pad = 0 if whole else t1
    return shape, length, pad, whole


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def _box_geometry(storage_shape, size, stride):
    """How a view is a box of its storage's array, or None.

    The array is reshaped (the same memory in another shape) to refined dims: its own dims, split where a
    view stride falls inside one (a ``(L, H*D)`` array read as ``(L, H, D)`` heads) and merged where a view
    dim spans several (a ``(L, H, D)`` array read as ``(L, H*D)`` rows). Every view dim of extent > 1 must
    then be one refined dim, each a different one, with its stride. Returns (refined shape, refined strides,
    (refined dim, view dim) pairs in refined order)."""
    real = [(k, n, st) for k, (n, st) in enumerate(zip(size, stride)) if n > 1]
    if any(st <= 0 for _, _, st in real):
        return None
    numel = math.prod(storage_shape)
    bounds = {numel, 1, *(st for _, _, st in real)}
    bounds.update(cs for n, cs in zip(storage_shape, _contiguous_strides(storage_shape)) if n > 1)
    for _, n, st in real:  # a view dim is one refined dim: no boundary inside its span
        bounds = {b for b in bounds if not st < b < st * n}
    chain = sorted(bounds, reverse=True)
    if chain[0] != numel or any(hi % lo for hi, lo in zip(chain, chain[1:])):
        return None
    refined = tuple(hi // lo for hi, lo in zip(chain, chain[1:]))
    refined_strides = tuple(chain[1:])
    by_stride = {st: r for r, st in enumerate(refined_strides)}
    mapping = []
    for k, n, st in real:
        r = by_stride.get(st)
        if r is None or n > refined[r]:
            return None
        mapping.append((r, k))
    mapping.sort()
    if len({r for r, _ in mapping}) != len(mapping):
        return None
    return refined, refined_strides, tuple(mapping)


def _box_starts(geometry, offset):
    """Per refined dim, where the box starts for a storage ``offset`` (host ints or traced values)."""
    refined, refined_strides, _ = geometry
    if isinstance(offset, int):
        return [(offset // st) % n for n, st in zip(refined, refined_strides)]
    # A traced offset is a 64-bit integer. XLA:TPU emulates 64-bit division and remainder, and a program
    # holding them compiled for 2.5-7.5 s there instead of ~0.1-0.7 s (the demo's scheduler reads and every
    # op taking a view at a moving offset). An offset is non-negative and below the storage's length, so
    # when that length fits 32 bits the arithmetic is done there, truncating (no floor's sign fix-up).
    lax = platform.jax().lax
    if math.prod(refined) < 2 ** 31:
        offset = lax.convert_element_type(offset, np.int32)
    kind = offset.dtype.type
    starts = []
    for n, st in zip(refined, refined_strides):
        q = offset if st == 1 else lax.div(offset, kind(st))
        starts.append(lax.rem(q, kind(n)))
    return starts


def _box_fits(geometry, size, offset: int) -> bool:
    """Whether the view at ``offset`` is inside the box (no dim wraps into the next)."""
    refined = geometry[0]
    starts = _box_starts(geometry, offset)
    return all(starts[r] + size[k] <= refined[r] for r, k in geometry[2])


def _box_extents(geometry, size):
    """(refined shape, the box's extent in each refined dim, the view dims in refined order)."""
    refined, _, mapping = geometry
    sizes = [1] * len(refined)
    for r, k in mapping:
        sizes[r] = size[k]
    return refined, sizes, [k for _, k in mapping]


def _box_read_fn(storage_shape, size, geometry):
    jax = platform.jax()
    jnp = jax.numpy
    refined, sizes, kept = _box_extents(geometry, size)
    perm = sorted(range(len(kept)), key=lambda i: kept[i])  # -> view order
    expanded = [size[k] if k in kept else 1 for k in range(len(size))]

    def fn(arr, offset):
        if 0 in size:
            return jnp.zeros(size, arr.dtype)
        box = jax.lax.dynamic_slice(arr.reshape(refined), _box_starts(geometry, offset), sizes)
        box = jnp.transpose(box.reshape([size[k] for k in kept]), perm)
        return jnp.broadcast_to(box.reshape(expanded), size)

    return fn


def _box_write_fn(storage_shape, size, geometry):
    jax = platform.jax()
    jnp = jax.numpy
    refined, sizes, kept = _box_extents(geometry, size)
    in_view_order = sorted(kept)

    def fn(arr, value, offset):
        if 0 in size:
            return arr
        box = value.reshape([size[k] for k in in_view_order])
        box = jnp.transpose(box, [in_view_order.index(k) for k in kept]).reshape(sizes)
        new = jax.lax.dynamic_update_slice(arr.reshape(refined), box.astype(arr.dtype),
                                           _box_starts(geometry, offset))
        return new.reshape(storage_shape)

    return fn


def _read_fn(storage_shape, storage_dtype, size, stride, view_dtype, placement):
    jax = platform.jax()
    jnp = jax.numpy
    if placement == "box":
        return _box_read_fn(storage_shape, size, _box_geometry(storage_shape, size, stride))
    offset_is_zero = placement == "zero"
    real = _layout(size, stride)

    def fn(arr, offset):
        flat = _to_flat(arr, storage_dtype, view_dtype)
        if 0 in size:
            return jnp.zeros(size, flat.dtype)
        if real is None:
            return flat[strided_indices(size, stride, offset)]
        if not real:
            val = jax.lax.dynamic_index_in_dim(flat, offset, keepdims=False)
            return jnp.broadcast_to(val, size)
        shape, length, pad, whole = _window_geometry(real, flat.shape[0], offset_is_zero)
        if whole:
            window = flat
        else:
            window = jax.lax.dynamic_slice_in_dim(jnp.pad(flat, (0, pad)), offset, length)
        window = window.reshape(shape)
        index = (slice(None),) + tuple(slice(0, d[1]) for d in real[1:]) + (0,)
        box = window[index]
        order = [d[0] for d in real]
        # put real dims back in their original order, then restore size-1 and broadcast dims
        perm = sorted(range(len(order)), key=lambda i: order[i])
        box = jnp.transpose(box, perm)
        kept = sorted(order)
        expanded_shape = [size[k] if k in kept else 1 for k in range(len(size))]
        return jnp.broadcast_to(box.reshape(expanded_shape), size)

    return fn


def _write_fn(storage_shape, storage_dtype, size, stride, view_dtype, placement):
    jax = platform.jax()
    jnp = jax.numpy
    if placement == "box":
        return _box_write_fn(storage_shape, size, _box_geometry(storage_shape, size, stride))
    offset_is_zero = placement == "zero"
    real = _layout(size, stride)

    def fn(arr, value, offset):
        flat = _to_flat(arr, storage_dtype, view_dtype)
        n = flat.shape[0]
        if 0 in size:
            return arr
        if real is None:
            new_flat = flat.at[strided_indices(size, stride, offset).reshape(-1)].set(value.reshape(-1))
            return _from_flat(new_flat, storage_shape, storage_dtype, view_dtype)
        if not real:
            new_flat = jax.lax.dynamic_update_index_in_dim(flat, value.reshape(-1)[:1], offset, 0)
            return _from_flat(new_flat, storage_shape, storage_dtype, view_dtype)
        shape, length, pad, whole = _window_geometry(real, n, offset_is_zero)
        order = [d[0] for d in real]
        box = value.reshape([size[k] for k in sorted(order)])
        # original order of the kept dims -> sorted-by-stride order
        kept = sorted(order)
        box = jnp.transpose(box, [kept.index(k) for k in order])
        box = box.reshape(box.shape + (1,))
        if whole:
            window = flat.reshape(shape)
            new_flat = jax.lax.dynamic_update_slice(window, box, (0,) * len(shape)).reshape(-1)
        else:
            padded = jnp.pad(flat, (0, pad))
            window = jax.lax.dynamic_slice_in_dim(padded, offset, length).reshape(shape)
            window = jax.lax.dynamic_update_slice(window, box, (0,) * len(shape))
            new_flat = jax.lax.dynamic_update_slice_in_dim(padded, window.reshape(-1), offset, 0)[:n]
        return _from_flat(new_flat, storage_shape, storage_dtype, view_dtype)

    return fn


stable_keys.register_kind("view-read")  # every part of the layout is in the key
stable_keys.register_kind("view-write")
stable_keys.register_kind("view-write-whole")
_FNS: dict = caches.register("view programs", caches.Bounded(program_cache.max_programs))  # program functions by key (traced again only when a fused graph needs them)


_PLACEMENT: dict = caches.register("view placements", caches.Bounded(program_cache.max_programs))


def placement(size, stride, offset: int, storage_shape, storage_dtype, view_dtype) -> str:
    """How a view's read or write program finds it in its storage (see the module's docstring): ``"zero"``
    (specialised on offset 0: a view at offset 0 whose window is its whole storage; no offset input),
    ``"box"`` or ``"window"`` (the offset a runtime input, so ``x[0]`` and ``x[i]`` share one program: a
    scheduler reading ``sigmas[step]`` makes the same graph at the first denoising step as at the next).
    ``storage_shape`` is the shape of the array the view is read from."""
    key = (size, stride, storage_shape, storage_dtype, view_dtype)
    found = _PLACEMENT.get(key)
    if found is None:
        real = _layout(size, stride)
        numel = math.prod(storage_shape)
        n_flat = int(numel * _units(storage_dtype, view_dtype))
        whole = bool(real) and 0 not in size and real[0][1] * real[0][2] == n_flat
        box = None
        if storage_dtype == view_dtype and 0 not in size and numel:
            box = _box_geometry(tuple(storage_shape), size, stride)
        found = _PLACEMENT[key] = (whole, box)
    whole, box = found
    if whole and offset == 0:
        return "zero"
    if box is not None and _box_fits(box, size, offset):
        return "box"
    return "window"


def offset_arg(offset: int):
    return np.int64(offset)


def read_fn(storage_shape, storage_dtype, size, stride, view_dtype, placement):
    """The traceable ``fn(storage_array, offset)`` that reads one view geometry (cached). An op's
    program calls it on a view input it was given as its storage's array (``eager/arguments.py``)."""
    key = ("view-read", storage_shape, storage_dtype, view_dtype, size, stride, placement)
    fn = _FNS.get(key)
    if fn is None:
        fn = _FNS[key] = _read_fn(storage_shape, storage_dtype, size, stride, view_dtype, placement)
    return fn


def reader(storage, t) -> tuple:
    """(key, fn, args) of the program reading view ``t`` from ``storage``: ``fn(*args)`` is its value. A
    program that reads and then computes (a cast: ``tensor.kernels.convert_value``) builds on them."""
    size = tuple(t.shape)
    stride = tuple(t.stride())
    offset = t.storage_offset()
    where = placement(size, stride, offset, storage.shape, storage.dtype, t.dtype)
    key = ("view-read", storage.shape, storage.dtype, t.dtype, size, stride, where)
    fn = read_fn(storage.shape, storage.dtype, size, stride, t.dtype, where)
    return key, fn, (storage.value(), offset_arg(offset))


def read(storage, t):
    key, fn, args = reader(storage, t)
    return launch(key, fn, args, (tuple(t.shape), dtypes.to_jax_dtype(t.dtype)), "view read")


def memory_order(size, stride):
    """For an op result torch lays out densely but not contiguously (channels_last, a transposed
    input's order): the permutation of its dims from outermost to innermost in memory. None when the
    layout is contiguous (the common case), has gaps or overlaps, or holds at most one element."""
    if len(size) < 2 or math.prod(size) <= 1:
        return None
    expected = 1
    for st, sz in sorted((st, sz) for sz, st in zip(size, stride) if sz != 1):
        if st != expected:
            return None
        expected *= sz
    # outermost first; size-1 dims (no extent in memory) last
    order = sorted(range(len(size)), key=lambda k: (-stride[k] if size[k] != 1 else 0, k))
    real = [k for k in order if size[k] != 1]
    if real == sorted(real):  # the dims of extent > 1 already in order: contiguous memory
        return None
    return tuple(order)


def to_memory_order(array, order, shape=(-1,)):
    """Inside a program: a value in logical shape as its memory (see memory_order), in ``shape`` (flat,
    or the shape of the storage it fills)."""
    return platform.jax().numpy.transpose(array, order).reshape(shape)


_OVERLAP_MSG = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                "single memory location. Please clone() the tensor before performing the operation.")


def _dense_range(t):
    """(start, end) in elements of a non-overlapping, dense tensor's memory; None for others (torch
    calls their overlap "too hard" and lets them through)."""
    pairs = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1)
    expected = 1
    for st, sz in pairs:
        if st != expected:
            return None
        expected *= sz
    return t.storage_offset(), t.storage_offset() + t.numel()


def tpu_storage_of(t):
    return getattr(t, "_tpu_storage", None)


def check_no_partial_overlap(written, inputs, storage_of=tpu_storage_of) -> None:
    """torch's rule for an op that writes ``written`` while reading ``inputs``: an input sharing some
    but not all of the written memory, or all of it in another order (``x.t().add_(x)``), raises (the
    result would depend on the order of the writes). ``storage_of``: a tensor's storage identity (a
    compiled graph's fake tensors are checked with their fake storages)."""
    storage = storage_of(written)
    for a in inputs:
        if a is written or storage is None or storage_of(a) is not storage or not a.numel() \
                or not written.numel():
            continue
        w, r = _dense_range(written), _dense_range(a)
        if w is None or r is None or (w == r and tuple(a.stride()) == tuple(written.stride())):
            continue  # torch's "full" overlap: the same memory in the same layout (x.add_(x[:]))
        if w[0] < r[1] and r[0] < w[1]:
            raise RuntimeError(_OVERLAP_MSG)


def check_no_overlap(written, inputs, storage_of=tpu_storage_of) -> None:
    """The stricter rule of ops such as ``cat(out=)``: no input may share any of the written memory
    (the written tensor itself included)."""
    storage = storage_of(written)
    w = _dense_range(written)
    for a in inputs:
        if a is written or (storage is not None and storage_of(a) is storage):
            r = _dense_range(a)
            if w is None or r is None or (w[0] < r[1] and r[0] < w[1] and a.numel() and written.numel()):
                raise RuntimeError(_OVERLAP_MSG)


_SELF_OVERLAP: dict = caches.register("self-overlapping layouts", caches.Bounded(program_cache.max_programs))


def self_overlapping(shape, stride) -> bool:
    """Do two elements of a view with this size and stride share a memory location?"""
    dims = sorted((st, sz) for sz, st in zip(shape, stride) if sz > 1)
    reach = 0  # the furthest offset the smaller strides reach
    for st, sz in dims:
        if st <= reach:
            break
        reach += st * (sz - 1)
    else:
        return False
    if any(st == 0 for st, _ in dims) or int(np.prod([sz for _, sz in dims])) > (1 << 22):
        return True  # too many elements to list: refused as if they overlapped
    offs = np.zeros(1, dtype=np.int64)  # exact: the offsets of every element
    for st, sz in dims:
        offs = (offs[:, None] + np.arange(sz, dtype=np.int64) * st).reshape(-1)
    return np.unique(offs).size < offs.size


def check_no_internal_overlap(t, op) -> None:
    """An op that computes each written element from values (``x.unfold(0, 3, 1).add_(1)``) into a view
    whose elements share memory: CPU torch runs such writes one element after the other, each reading
    what the earlier ones wrote, an order an XLA program does not have. Refused (clearly) rather than
    computed another way; ``fill_``/``zero_`` (one value for every element) and copies are allowed."""
    check_writable(t)  # an expanded view: torch's own error
    key = (tuple(t.shape), tuple(t.stride()))
    hit = _SELF_OVERLAP.get(key)
    if hit is None:
        hit = _SELF_OVERLAP[key] = self_overlapping(*key)
    if hit:
        raise RuntimeError(
            f"tpu: {op} writes a view whose elements share memory (size {key[0]}, stride {key[1]}): CPU "
            "torch computes such writes one element after the other, each seeing the earlier ones; the tpu "
            "cannot reproduce that order. clone() the view, or write a tensor without overlap.")


def check_writable(t) -> None:
    for s, st in zip(t.shape, t.stride()):
        if st == 0 and s > 1:
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a "
                "single memory location. Please clone() the tensor before performing the operation.")


def write(storage, t, value):
    size = tuple(t.shape)
    stride = tuple(t.stride())
    offset = t.storage_offset()
    if offset == 0 and t.dtype == storage.dtype and math.prod(size) == math.prod(storage.shape):
        order = memory_order(size, stride)
        if order is not None:
            # the view is its whole storage in another order (``empty_like`` of a transposed tensor, then
            # written): the new value is the written one in memory order, the old one is not read (an empty
            # storage's zeros were a program of their own, launched at every such write)
            key = ("view-write-whole", storage.shape, storage.dtype, size, order)
            fn = _FNS.get(key)
            if fn is None:
                shape = storage.shape
                fn = _FNS[key] = lambda v: to_memory_order(v, order, shape)
            return launch(key, fn, (value,), (storage.shape, dtypes.to_jax_dtype(storage.dtype)), "view write")
    where = placement(size, stride, offset, storage.shape, storage.dtype, t.dtype)
    key = ("view-write", storage.shape, storage.dtype, t.dtype, size, stride, where)
    fn = _FNS.get(key)
    if fn is None:
        fn = _FNS[key] = _write_fn(storage.shape, storage.dtype, size, stride, t.dtype, where)
    return launch(key, fn, (storage.value(), value, offset_arg(offset)),
                  (storage.shape, dtypes.to_jax_dtype(storage.dtype)), "view write")


"""The per-op path of eager mode: structural key -> cached entry -> program, in every eager mode.

Per op: build a structural key (op, input shapes and dtypes, static arguments); on a miss, ask torch's
meta kernel what the op returns (this also raises torch's own errors for bad input), wrap the op
table's lowering into a traceable function and let the launcher prepare it (strict: compile now;
fused: check it traces); on a hit, the launcher runs the program (strict) or records it (fused) and the
outputs are wrapped as tpu tensors. JAX dispatch is asynchronous, so nothing waits for the device
until a value is read.
"""
from __future__ import annotations

import warnings

import torch

from ..engine import deferred_errors, fused, launchers
from ..errors import OpError, describe, leaves, no_lowering
from ..ops import calling, checks, refusals, registry, validate
from ..runtime import caches, counters, dtypes, generators, platform, program_cache, rng, stable_keys
from ..runtime.stable_keys import ProcessLocal
from . import op_store
from ..tensor import kernels, strided
from ..tensor.tensor import TpuTensor, new_full, new_strided, write, write_storage
from .arguments import fill, keep_scalars_static, key_and_inputs, templates, to_meta
from .fallbacks import data_dependent_entry, python_entry
from .overlap_rules import OVERLAP_UNCHECKED, refuse_partial_overlap

_counters = counters.counters
_ENTRIES: dict = caches.register("op entries", caches.Bounded(program_cache.max_programs))


class LoweredEntry:
    """One op signature: its traceable function, its compiled program (strict), output avals,
    the arguments it writes back."""

    __slots__ = ("func", "key", "fn", "compiled", "avals", "out_dtypes", "rebuild", "writes", "random",
                 "n_out", "returns_scalar", "check", "recipe", "loaded", "device_checks", "layouts",
                 "write_orders", "plain", "what")

    def __call__(self, args, kwargs, arrays):
        if self.plain:  # one output, nothing to check, draw or write (most ops: the hot path)
            return new_full(launchers.current.run_op(self, arrays, args, kwargs)[0], self.out_dtypes[0])
        if self.check is not None:  # a dynamic Scalar that must fit the output's dtype
            self.check(args, kwargs)
        if self.random:  # the op's key: from its generator=torch.Generator("tpu"), else the device's RNG
            gen = kwargs.get("generator")
            arrays.append(rng.next_key_data() if gen is None else generators.next_key_data(generators.tpu_generator(gen)))
        if self.writes and self.func not in OVERLAP_UNCHECKED:
            refuse_partial_overlap(self.func, self.writes, args, kwargs)
        outs = launchers.current.run_op(self, arrays, args, kwargs)
        written = False
        if self.device_checks:  # the last output says whether the op's device-side checks held
            outs, code = outs[:-1], outs[-1]
            deferred_errors.add(code, self.device_checks, self.describe_inputs, self._checked_values(outs))
            if launchers.current.verifies_each_op:
                # launch blocking: raise at the op, after its writes (as in the other modes, a failed
                # write leaves its in-range entries written and drops the others)
                self._write_back(args, kwargs, outs)
                written = True
                deferred_errors.verify()
        if self.returns_scalar:
            return deferred_errors.read_scalar(outs[0])
        writes = self.writes
        if writes:
            targets = [kwargs[name] if name in kwargs else args[pos] for pos, name in writes]
            if not written:
                self._write(targets, outs[self.n_out:])
            if self.n_out == 0:  # (rrelu_with_noise_ writes self and noise, returns self)
                return targets[0] if len(targets) == 1 or len(self.func._schema.returns) == 1 else tuple(targets)
        dts = self.out_dtypes
        if self.layouts is not None:  # results torch lays out densely in another order (channels_last)
            results = [new_full(o, d) if lay is None else new_strided(o, lay[0], lay[1], d)
                       for o, d, lay in zip(outs[: self.n_out], dts, self.layouts)]
            return results[0] if self.rebuild is None else self.rebuild(results)
        if self.rebuild is None:
            return new_full(outs[0], dts[0])
        return self.rebuild([new_full(o, d) for o, d in zip(outs[: self.n_out], dts)])

    def _checked_values(self, outs):
        """The values a failed device-side check poisons: what the op returns (and writes into out=), never
        what an in-place form writes (in-range entries written and the others dropped, as CPU's partial
        write leaves them)."""
        return outs[: self.n_out] if self.func._opname.endswith("_") else outs

    def _write_back(self, args, kwargs, outs) -> None:
        if self.writes:
            targets = [kwargs[name] if name in kwargs else args[pos] for pos, name in self.writes]
            self._write(targets, outs[self.n_out:])

    def _write(self, targets, arrays) -> None:
        if self.write_orders is None:
            for t, arr in zip(targets, arrays):
                _store(t, arr)
            return
        for t, arr, order in zip(targets, arrays, self.write_orders):
            if order is None:
                _store(t, arr)
            else:  # the program returned the storage's new memory (see _write_orders)
                write_storage(t, arr)

    def describe_inputs(self) -> str:
        """The op and its inputs' shapes and dtypes, from the program key (no tensor is kept alive)."""
        parts = [f"tpu{list(k[0])}:{str(k[1]).replace('torch.', '')}" for k in self.key[2]
                 if type(k) is tuple and len(k) == 2 and type(k[1]) is torch.dtype]
        return f"{self.func} ({', '.join(parts) or 'no tensors'})"

    def trace(self, *arrs):
        """The traceable function; an entry loaded from disk builds it on first need (a fused graph or
        a program that is not on disk), from torch's meta kernel as a fresh entry would."""
        fn = self.fn
        if fn is None:
            func, meta_args, meta_kwargs, example, tmpl = self.recipe
            low, target_func = registry.resolve(func)
            fn = self.fn = _plan(func, low, target_func, meta_args, meta_kwargs, example, tmpl,
                                 self.write_orders, self.device_checks)[0]
        return fn(*arrs)

    def compile(self, arrays, args, kwargs, background: bool = False):
        """The entry's program, compiled now; ``background``: XLA's compile may run on a compile thread,
        and a ``Future`` of the program is returned then (kept by ``program_cache.in_flight``)."""
        try:
            # the entry knows its checks (traced, or from its description): found by key with them
            prog = program_cache.compile_program(self.key, self.trace, tuple(arrays), checks=self.device_checks,
                                                 background=background)
        except (OpError, NotImplementedError, torch.OutOfMemoryError):
            raise
        except Exception as exc:
            raise OpError(f"tpu: could not lower {self.func} ({describe(args, kwargs)}): "
                          f"{type(exc).__name__}: {exc}") from exc
        if callable(prog):  # (not a Future)
            self.compiled = prog
        return prog


def _store(t, arr) -> None:
    """An op's result into the tensor it writes: an out= tensor of another shape is resized first, with
    CPU torch's deprecation warning when it held elements (``_plan`` refused views of another shape)."""
    shape = tuple(arr.shape)
    if tuple(t.shape) != shape:
        if t.numel():
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(t.shape)}, which "
                f"does not match the required output shape {list(shape)}. This behavior is deprecated, and in "
                "a future PyTorch release outputs will not be resized unless they have zero elements. You can "
                "explicitly reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
                UserWarning, stacklevel=4)
        if t._tpu_full:
            kernels.resize_whole(t, shape)
        else:  # a view: a contiguous view of the new shape at its offset (_plan checked it fits)
            kernels.resize_view(t, shape)
    write(t, arr)


def _program_key(func, key, low):
    """The entry's program key: the op by name (not by id), so the key means the same in every process
    (``stable_keys``) when the lowering is torch_tpu's own."""
    name = op_store.op_name(func)
    parts = ("op", name, key[1:], calling.matmul_precision(low))
    if not op_store.is_own_lowering(low):  # a lowering registered from outside: this process only
        parts += (ProcessLocal(id(low.fn)),)
    return parts


def _functional_of(func):
    """``aten.addr.default`` for ``aten.addr_.default``; None for an op that is not in-place."""
    name = func._schema.name.split("::", 1)[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, func._overloadname, None) if packet is not None else None


def _build_entry(func, args, kwargs, key, arrays):
    from .. import ops

    ops.load()
    low, target_func = registry.resolve(func)
    if low is None:
        entry = python_entry(func)
        if entry is None:
            raise no_lowering(func, args, kwargs)
        validate.run(func, args, kwargs)  # (a decomposition computes where CPU's kernel refuses a dtype)
        functional = _functional_of(func)
        if functional is not None:
            # an in-place op run by a decomposition (addr_): the checks of a lowered in-place op (self was
            # resized to a result of another shape, which CPU refuses)
            refusals.check_inplace_result(func, functional, to_meta(list(args)),
                                          {k: to_meta(v) for k, v in kwargs.items()})
        _ENTRIES[key] = entry
        return entry
    if low.data_dependent:
        validate.run(target_func, args, kwargs)
        entry = _ENTRIES[key] = data_dependent_entry(func, low)
        return entry

    program_key = _program_key(func, key, low)
    try:
        return _build_lowered(func, low, target_func, args, kwargs, key, arrays, program_key)
    except BaseException:
        # a refused call (shape, dtype, a validator) keeps no entry: its key's text must not stay either
        # (the text cache holds keys by identity, so every failed call would add one)
        stable_keys.forget(program_key)
        raise


def _build_lowered(func, low, target_func, args, kwargs, key, arrays, program_key):
    example = list(arrays)
    if low.random:  # compiling must not consume random state (the run draws the key)
        example.append(rng.peek_key_data())
    # an op described on disk passed these checks for this key in an earlier process (they depend on the
    # key only: a second call with the key in this process skips them too, through _ENTRIES)
    entry = _load_entry(func, low, args, kwargs, program_key, example)
    if entry is not None:
        _ENTRIES[key] = entry
        return entry
    validate.run(target_func, args, kwargs)  # checks torch's CPU kernels make and its meta kernels don't

    write_orders = _write_orders(func, args, kwargs)
    fn, out_leaves, write_metas, meta_out, in_place, device_checks, layouts = _plan(
        func, low, target_func, args, kwargs, example, None, write_orders)
    writes = registry.mutated_arguments(func)
    returns_scalar = (len(out_leaves) == 1 and out_leaves[0] is not None
                      and not isinstance(out_leaves[0], torch.Tensor))
    tensor_leaves = [m for m in out_leaves if isinstance(m, torch.Tensor)]
    entry = LoweredEntry()
    entry.func = func
    entry.key = program_key
    entry.fn = fn
    entry.recipe = None
    entry.loaded = False
    entry.compiled = None
    entry.layouts = layouts
    entry.avals = tuple((tuple(m.shape) if layouts is None or layouts[k] is None else (m.numel(),),
                         dtypes.to_jax_dtype(m.dtype)) for k, m in enumerate(tensor_leaves))
    entry.write_orders = write_orders
    entry.avals += tuple((tuple(m.shape) if write_orders is None or write_orders[k] is None
                          else write_orders[k][1], dtypes.to_jax_dtype(m.dtype))
                         for k, m in enumerate(write_metas) if isinstance(m, torch.Tensor))
    entry.random = low.random
    entry.writes = writes
    entry.returns_scalar = returns_scalar
    entry.n_out = len(tensor_leaves)
    entry.out_dtypes = tuple(m.dtype for m in tensor_leaves)
    entry.rebuild = None if (in_place or isinstance(meta_out, torch.Tensor)) else _rebuilder(meta_out)
    check_meta = (tensor_leaves + write_metas)[0] if writes or tensor_leaves else None
    entry.check = _per_call_check(func, target_func, check_meta, args, kwargs, arrays)
    entry.device_checks = device_checks
    try:
        launchers.current.prepare(entry, example, args, kwargs)
    except Exception as exc:
        if any(not hasattr(a, "shape") for a in arrays) and _branches_on_a_value(exc):
            raise _StaticScalarsNeeded() from exc
        raise
    if device_checks:  # tracing (or the program's disk entry) found checks: one more output
        entry.avals += (((), dtypes.to_jax_dtype(torch.int32)),)
    _finish(entry)
    op_store.save(program_key, entry, meta_out, in_place, check_meta)  # with the checks' messages
    _ENTRIES[key] = entry
    return entry


def _per_call_check(func, target_func, check_meta, args, kwargs, arrays):
    """The entry's per-call check (``validate.per_call_check``), or None where no call can fail it but
    this one: it reads the values of dynamic Scalars only, so an entry whose key has none (``x + y``, its
    alpha the default) runs it here, once, not on every call."""
    check = validate.per_call_check(func, target_func, check_meta)
    if check is not None and not any(type(a) in _NUMBERS for a in arrays):
        check(args, kwargs)
        return None
    return check


_NUMBERS = (int, float, complex)


def _finish(entry: LoweredEntry) -> None:
    """What the hot path reads of a complete entry."""
    entry.what = str(entry.func)  # (fused mode names each node)
    entry.plain = (entry.check is None and not entry.random and not entry.writes and not entry.device_checks
                   and not entry.returns_scalar and entry.layouts is None and entry.rebuild is None)


def _load_entry(func, low, args, kwargs, program_key, example):
    """The entry of ``program_key`` from its description on disk (no meta kernel, no tracing), or None."""
    desc = op_store.load(program_key)
    if desc is None:
        return None
    entry = LoweredEntry()
    entry.func = func
    entry.key = program_key
    entry.fn = None
    # the templates come from the real arguments: a folded view's slot reads it from its storage
    entry.recipe = (func, to_meta(list(args)), {k: to_meta(v) for k, v in kwargs.items()},
                    [fused.abstract(a) for a in example], templates(func, args, kwargs))
    entry.loaded = True
    entry.compiled = None
    entry.avals = tuple((shape, dtypes.to_jax_dtype(dt)) for shape, dt in desc.avals)
    entry.random = low.random
    entry.writes = registry.mutated_arguments(func)
    entry.write_orders = _write_orders(func, args, kwargs)
    entry.returns_scalar = desc.returns_scalar
    entry.n_out = len(desc.out_dtypes)
    entry.out_dtypes = desc.out_dtypes
    entry.rebuild = None if desc.structure is None else _rebuilder(desc.structure)
    entry.layouts = desc.layouts
    check_meta = None if desc.check_dtype is None else _scalar_meta(desc.check_dtype)
    entry.check = _per_call_check(func, registry.resolve(func)[1], check_meta, args, kwargs, example)
    entry.device_checks = list(desc.device_checks)  # (the checks setting is part of its disk key)
    launchers.current.prepare(entry, example, args, kwargs)
    _finish(entry)
    return entry


_SCALAR_METAS: dict = {}


def _scalar_meta(dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim meta tensor of ``dtype`` (only its dtype is read): one per dtype, not one per op entry."""
    found = _SCALAR_METAS.get(dtype)
    if found is None:
        found = _SCALAR_METAS[dtype] = torch.empty((), dtype=dtype, device="meta")
    return found


def _write_orders(func, args, kwargs):
    """Per argument an op writes, None or (memory order, storage shape) when it is a whole storage seen
    in another order than its memory (``x.t().add_(1)``, a channels_last tensor): the program then returns
    the storage's new memory itself, so the write needs no program of its own. Everything this depends on
    (view geometry, storage shape and dtype) is part of the op's key."""
    writes = registry.mutated_arguments(func)
    if not writes:
        return None
    orders = []
    for pos, name in writes:
        t = kwargs[name] if name in kwargs else args[pos] if pos < len(args) else None
        order = None
        if isinstance(t, TpuTensor) and not t._tpu_full and t.storage_offset() == 0:
            storage = t._tpu_storage
            if t.dtype == storage.dtype and t.numel() * t.dtype.itemsize == storage.nbytes:
                order = strided.memory_order(tuple(t.shape), t.stride())
        orders.append(None if order is None else (order, storage.shape))
    return tuple(orders) if any(o is not None for o in orders) else None


def _plan(func, low, target_func, args, kwargs, example, tmpl=None, write_orders=None, device_checks=None):
    """What torch says ``func`` returns for these arguments (its meta kernel, which also raises torch's
    errors for bad input), and the traceable function computing it with the op table's lowering:
    (fn, out_leaves, write_metas, meta_out, in_place, device_checks, layouts); device_checks (the
    messages of the lowering's ``require`` calls; the given list, when known already) is filled when fn is
    first traced; layouts is None, or per tensor output None or the (size, stride) torch gives a result
    laid out densely in another order than contiguous (channels_last, the order of transposed inputs): fn
    returns those in memory order."""
    writes = registry.mutated_arguments(func)
    meta_args = to_meta(list(args))
    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    if writes:
        refusals.check_inplace_result(func, target_func, meta_args, meta_kwargs)
    try:
        with warnings.catch_warnings():  # a resized out= warns once per call, in _store
            warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
            meta_out = validate.corrected_meta(target_func, args, kwargs, func(*meta_args, **meta_kwargs))
        has_meta = True
    except NotImplementedError:
        meta_out, has_meta = None, False

    tmpl_args, tmpl_kwargs, n_inputs = templates(func, args, kwargs) if tmpl is None else tmpl
    in_place = bool(writes) and _is_inplace_or_out(func)
    write_metas = [meta_kwargs[name] if name in meta_kwargs else meta_args[pos] for pos, name in writes]
    if has_meta:  # torch's meta kernel resized a wrongly shaped out= tensor: a view cannot be resized
        for (pos, name), m in zip(writes, write_metas):
            target = kwargs[name] if name in kwargs else args[pos]
            # (an entry read from disk traces from meta arguments: its real call made this check)
            if isinstance(m, torch.Tensor) and isinstance(target, TpuTensor) \
                    and tuple(m.shape) != tuple(target.shape) and not target._tpu_full \
                    and not kernels.view_resizable(target, tuple(m.shape)):
                raise RuntimeError(
                    f"tpu: {func}: the out= tensor is a view of shape {tuple(target.shape)} but the result "
                    f"has shape {tuple(m.shape)}, which does not fit in its base's storage from its offset (a tpu "
                    f"storage cannot grow in place); pass an out= tensor of the result's shape "
                    f"({describe(args, kwargs)})")

    # The functional call of an in-place/out= op drops the out= arguments.
    call_args, call_kwargs = tmpl_args, dict(tmpl_kwargs)
    computes_in = None
    if target_func is not func:
        out_names = {a.name for a in func._schema.arguments if a.is_out}
        for name in out_names:
            call_kwargs.pop(name, None)
        if out_names:
            call_args = [a for a, s in zip(tmpl_args, func._schema.arguments) if not s.is_out]
            _out_dtype_computes(target_func, call_args, call_kwargs, write_metas)
            computes_in = _functional_dtypes(func, target_func, meta_args, meta_kwargs, call_args, call_kwargs,
                                             write_metas)
    precision = calling.matmul_precision(low)

    def call_lowering(arrs):
        key_data = arrs[n_inputs] if low.random else None
        return calling.invoke(low, fill(call_args, arrs), {n: fill(v, arrs) for n, v in call_kwargs.items()},
                              rng_key=None if key_data is None else rng.make_key(key_data), precision=precision)

    if in_place:
        out_leaves = []
    elif has_meta:
        out_leaves = list(leaves(meta_out))
    else:
        # no meta kernel: ask the lowering itself for output shapes and dtypes
        try:
            shapes = platform.jax().eval_shape(lambda *arrs: call_lowering(arrs), *example)
        except Exception as exc:
            if any(not hasattr(a, "shape") for a in example) and _branches_on_a_value(exc):
                raise _StaticScalarsNeeded() from exc
            raise OpError(f"tpu: lowering {func} failed ({describe(args, kwargs)}): {exc}") from exc
        if writes:
            shapes = shapes[0]
        out_leaves = [None if s is None else torch.empty(s.shape, dtype=dtypes.to_torch_dtype(s.dtype),
                                                         device="meta")
                      for s in leaves(shapes)]  # None: an undefined output (a gradient with no input)
        meta_out = out_leaves if len(out_leaves) != 1 else out_leaves[0]

    orders = [strided.memory_order(tuple(m.shape), m.stride()) if isinstance(m, torch.Tensor) else None
              for m in out_leaves] if has_meta else []
    orders = [None if o is None else (o, (m.numel(),)) for o, m in zip(orders, out_leaves)]
    layouts = None
    if any(o is not None for o in orders):
        layouts = tuple(None if o is None else (tuple(m.shape), tuple(m.stride()))
                        for m, o in zip(out_leaves, orders) if isinstance(m, torch.Tensor))
    else:
        orders = None
    device_checks = [] if device_checks is None else device_checks

    def fn(*arrs):
        with checks.collecting() as found:
            result = call_lowering(arrs)
        if found and not device_checks:
            device_checks.extend(message for _, message in found)
        if in_place:
            updates, result = result, ()
            if computes_in is not None:  # rounded to the dtype torch computes in, then cast to out='s
                updates = _round_to(updates, computes_in)
        elif writes:
            result, updates = result
        else:
            updates = ()
        outs = _conform_all(func, result, out_leaves, orders)
        if writes:
            outs += _conform_all(func, updates, write_metas, write_orders, broadcast=True)
        if found:
            outs += (checks.first_failure(found),)
        return outs

    fn.__name__ = fn.__qualname__ = str(func)  # the program's name in traces and the compile log
    return fn, out_leaves, write_metas, meta_out, in_place, device_checks, layouts


def _out_dtype_computes(target_func, call_args, call_kwargs, write_metas) -> None:
    """A reduction's out= tensor without ``dtype=`` sets the dtype it computes in, as on the CPU:
    ``torch.sum(x_float, 1, out=int64_out)`` sums the inputs cast to int64 (the functional call gets
    ``dtype=``), not the float sum rounded afterwards."""
    names = [a.name for a in target_func._schema.arguments]
    if "dtype" not in names or not write_metas or not isinstance(write_metas[0], torch.Tensor):
        return
    at = names.index("dtype")
    if at < len(call_args):
        if call_args[at] is None:
            call_args[at] = write_metas[0].dtype
    elif call_kwargs.get("dtype") is None:
        call_kwargs["dtype"] = write_metas[0].dtype


def _functional_dtypes(func, target_func, meta_args, meta_kwargs, call_args, call_kwargs, write_metas):
    """The dtypes the functional overload of an out= op returns, where one differs from its out=
    tensor's (else None). CPU computes in the inputs' dtype and casts into out=: ``exp(f16, out=f32)``
    overflows to inf; lowerings that compute half types in float32 must be rounded before the cast."""
    fargs = [a for a, s in zip(meta_args, func._schema.arguments) if not s.is_out]
    # (a dtype= that _out_dtype_computes filled in is the call's own)
    fargs = [c if isinstance(c, torch.dtype) else a for a, c in zip(fargs, call_args)]
    fkwargs = {k: meta_kwargs.get(k, v) if not isinstance(v, torch.dtype) else v for k, v in call_kwargs.items()}
    try:
        result = target_func(*fargs, **fkwargs)
    except Exception:  # noqa: BLE001 - the out= call's own meta kernel decided already
        return None
    dts = [r.dtype if isinstance(r, torch.Tensor) else None for r in leaves(result)]
    if len(dts) != len(write_metas) or all(
            d is None or not isinstance(m, torch.Tensor) or d == m.dtype for d, m in zip(dts, write_metas)):
        return None
    return dts


def _round_to(updates, dts):
    jnp = platform.jax().numpy
    res = list(leaves(updates)) if isinstance(updates, (tuple, list)) else [updates]
    if len(res) != len(dts):
        return updates
    out = [r if d is None or r is None else dtypes.astype(jnp.asarray(r), dtypes.to_jax_dtype(d))
           for r, d in zip(res, dts)]
    return out if isinstance(updates, (tuple, list)) else out[0]


class _StaticScalarsNeeded(Exception):
    """The lowering branched on a dynamic Scalar's value while tracing: key its Scalars by value."""


def _branches_on_a_value(exc) -> bool:
    jax = platform.jax()
    while exc is not None:
        if isinstance(exc, (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _is_inplace_or_out(func) -> bool:
    name = func._schema.name
    return name.endswith("_") or any(a.is_out for a in func._schema.arguments)


def _conform_all(func, result, metas, orders=None, broadcast=False):
    """Flatten a lowering's result against torch's expected leaves, each conformed to its meta (and
    put in memory order where ``orders`` names one)."""
    jnp = platform.jax().numpy
    res_leaves = list(leaves(result)) if isinstance(result, (tuple, list)) else [result]
    if len(res_leaves) != len(metas):
        raise OpError(f"lowering of {func} returned {len(res_leaves)} outputs, torch expects {len(metas)}")
    outs = []
    for k, (r, m) in enumerate(zip(res_leaves, metas)):
        if isinstance(m, torch.Tensor):
            out = calling.conform(func, r, m, broadcast)
            order = None if orders is None else orders[k]
            if order is not None:  # (permutation, shape of the memory): a result's or a storage's
                out = strided.to_memory_order(out, *order)
            outs.append(out)
        elif m is not None and r is not None:  # a Python scalar result (e.g. .item()-like ops)
            outs.append(jnp.asarray(r))
    return tuple(outs)


def _rebuilder(meta_out):
    def build(tensors, x=meta_out, it=None):
        it = iter(tensors) if it is None else it
        if isinstance(x, torch.Tensor):
            return next(it)
        if type(x) in (list, tuple):
            return type(x)(build(None, e, it) for e in x)
        return x

    return lambda tensors: build(tensors)


def run_op(func, args, kwargs):
    """The hot path: one aten call on tpu tensors."""
    key, arrays = key_and_inputs(func, args, kwargs)
    entry = _ENTRIES.get(key)
    if entry is None:
        try:
            entry = _build_entry(func, args, kwargs, key, arrays)
        except _StaticScalarsNeeded:
            keep_scalars_static(func)
            key, arrays = key_and_inputs(func, args, kwargs)
            entry = _ENTRIES.get(key) or _build_entry(func, args, kwargs, key, arrays)
    else:
        _counters["cache_hits"] += 1
    return entry(args, kwargs, arrays)

"""Strict eager (DEFER_NEVER): each aten op runs at once, asynchronously, as a cached compiled program.

Per op: build a structural key (op, input shapes and dtypes, static arguments); on a miss, ask torch's
meta kernel what the op returns (this also raises torch's own errors for bad input), trace the op
table's lowering into a program and compile it; on a hit, launch the program and wrap its outputs.
JAX dispatch is asynchronous, so nothing waits for the device until a value is read.
"""
from __future__ import annotations

import os
import warnings

import torch

from .. import compile_cache
from .. import counters as stats
from .._tensor import TpuTensor, new_full, value_of, write, wrap
from ..ops import registry
from ..runtime import dtypes, platform, rng
from . import fused, modes
from .fused import LazyArray

_counters = stats.counters
_ENTRIES: dict = {}


# ---------------------------------------------------------------------------------------------
# Argument walking: the structural key and the dynamic (array) inputs, in one pass.
# ---------------------------------------------------------------------------------------------
class _Slot:
    """Placeholder for a dynamic array input in an argument template."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def device_mismatch(func, other: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, tpu:0 and "
        f"{other.device}! (when checking arguments for {func})")


def _walk(func, x, sig, arrays, allow_cpu):
    if isinstance(x, TpuTensor):
        sig.append((x.shape, x.dtype))
        arr = value_of(x)
        if type(arr) is LazyArray and not modes._State.fused:
            arr = fused.materialize(arr)
        arrays.append(arr)
    elif isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise RuntimeError(f"{func}: cannot mix meta and tpu tensors")
        if x.dim() != 0 and not allow_cpu:
            raise device_mismatch(func, x)
        sig.append(("cpu", x.shape, x.dtype))
        arrays.append(dtypes.host_to_device(x, platform.jax_device()))
    elif type(x) in (list, tuple):
        sig.append((type(x), len(x)))
        for e in x:
            _walk(func, e, sig, arrays, allow_cpu)
    elif isinstance(x, torch.Generator):
        raise RuntimeError(
            f"{func}: expected a 'tpu' device type for generator but found '{x.device.type}'. "
            "Create random tensors on the CPU with that generator and move them, as diffusers does.")
    else:
        sig.append(x)


_CPU_INDEX_OPS = {id(op) for op in (torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default,
                                    torch.ops.aten.index_put_.default, torch.ops.aten._index_put_impl_.default)}


def signature(func, args, kwargs):
    """(structural key, dynamic arrays) of a call. Hot path: plain tpu tensors are inlined."""
    sig = [id(func)]  # id: OpOverload.__hash__ is Python code
    arrays = []
    allow_cpu = id(func) in _CPU_INDEX_OPS
    for a in args:
        if type(a) is TpuTensor and a._tpu_full:
            storage = a._tpu_storage
            arr = storage.array
            if arr is None:
                arr = storage.value()
            elif type(arr) is LazyArray and not modes._State.fused:
                arr = storage.array = fused.materialize(arr)
            sig.append((arr.shape, a.dtype))
            arrays.append(arr)
        else:
            _walk(func, a, sig, arrays, allow_cpu)
    if kwargs:
        for k, v in kwargs.items():
            sig.append(k)
            _walk(func, v, sig, arrays, allow_cpu)
    return tuple(sig), arrays


def _template(x, counter):
    if isinstance(x, torch.Tensor):
        s = _Slot(counter[0])
        counter[0] += 1
        return s
    if type(x) in (list, tuple):
        return type(x)(_template(e, counter) for e in x)
    return x


def _fill(x, arrays):
    if isinstance(x, _Slot):
        return arrays[x.index]
    if type(x) in (list, tuple):
        return type(x)(_fill(e, arrays) for e in x)
    return x


def _to_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("meta")
    if type(x) in (list, tuple):
        return type(x)(_to_meta(e) for e in x)
    return x


def _leaves(x):
    if type(x) in (list, tuple):
        for e in x:
            yield from _leaves(e)
    else:
        yield x


def describe(args, kwargs) -> str:
    parts = []
    for x in _leaves(list(args) + list((kwargs or {}).values())):
        if isinstance(x, torch.Tensor):
            parts.append(f"{x.device.type}{list(x.shape)}:{str(x.dtype).replace('torch.', '')}")
    return ", ".join(parts) or "no tensors"


class OpError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Entries: what a cache hit runs.
# ---------------------------------------------------------------------------------------------
class _LoweredEntry:
    """One op signature: its program (compiled on first strict use), output avals, write-backs."""

    __slots__ = ("func", "key", "program", "prog", "avals", "out_dtypes", "rebuild", "writes", "random",
                 "n_out", "returns_scalar")

    def __call__(self, args, kwargs, arrays):
        if self.random:
            arrays.append(rng.next_key_data())
        state = modes._State
        if state.fused and not self.returns_scalar:
            outs = fused.record(self.key, self.program, arrays, self.avals, what=str(self.func))
        else:
            if state.fused:  # a Python scalar result needs the value now
                arrays = [fused.materialize(a) for a in arrays]
            prog = self.prog
            if prog is None:
                prog = self.compile(arrays, args, kwargs)
            try:
                outs = prog(*arrays)
            except Exception as exc:
                raise OpError(f"tpu: {self.func} failed to run ({describe(args, kwargs)}): {exc}") from exc
            _counters["executions"] += 1
            if state.launch_blocking:
                _block(self.func, outs, args, kwargs)
            if self.returns_scalar:
                return outs[0].item()
        writes = self.writes
        if writes:
            targets = _write_targets(writes, args, kwargs)
            for t, arr in zip(targets, outs[self.n_out:]):
                write(t, arr)
            if self.n_out == 0:
                return targets[0] if len(targets) == 1 else tuple(targets)
        dts = self.out_dtypes
        if self.rebuild is None:
            return new_full(outs[0], dts[0])
        return self.rebuild([new_full(o, d) for o, d in zip(outs[: self.n_out], dts)])

    def compile(self, arrays, args, kwargs):
        try:
            self.prog = compile_cache.compile_program(self.key, self.program, tuple(arrays))
        except (OpError, NotImplementedError):
            raise
        except Exception as exc:
            raise OpError(f"tpu: could not lower {self.func} ({describe(args, kwargs)}): "
                          f"{type(exc).__name__}: {exc}") from exc
        return self.prog


def _write_targets(writes, args, kwargs):
    out = []
    for pos, name in writes:
        if name in kwargs:
            out.append(kwargs[name])
        else:
            out.append(args[pos])
    return out


def _block(func, outs, args, kwargs):
    try:
        for o in outs:
            o.block_until_ready()
    except Exception as exc:
        raise OpError(f"tpu: {func} failed on the device ({describe(args, kwargs)}): {exc}") from exc


class _PythonEntry:
    """Runs Python code that calls other aten ops (a decomposition or a CPU fallback)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, args, kwargs, arrays):
        return self.fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Building entries on a cache miss.
# ---------------------------------------------------------------------------------------------
def _has_composite_implicit(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


_FALLBACK_WARNED: set = set()


def _cpu_fallback(func):
    def run(*args, **kwargs):
        if func not in _FALLBACK_WARNED:
            _FALLBACK_WARNED.add(func)
            warnings.warn(f"torch_tpu: {func} has no tpu lowering; running it on the CPU "
                          "(TORCH_TPU_CPU_FALLBACK=1)", stacklevel=3)
        _counters["cpu_fallbacks"] += 1
        return cpu_fallback_call(func, args, kwargs)

    return run


def cpu_fallback_call(func, args, kwargs):
    def to_cpu(x):
        if isinstance(x, TpuTensor):
            return x.detach().cpu()
        if type(x) in (list, tuple):
            return type(x)(to_cpu(e) for e in x)
        return x

    cargs = to_cpu(list(args))
    ckwargs = {k: to_cpu(v) for k, v in kwargs.items()}
    result = func(*cargs, **ckwargs)
    # write back mutated arguments
    for pos, name in registry.mutated_arguments(func):
        src = ckwargs[name] if name in ckwargs else cargs[pos]
        dst = kwargs[name] if name in kwargs else args[pos]
        if isinstance(dst, TpuTensor):
            dst.copy_(src)

    def back(x):
        if isinstance(x, torch.Tensor):
            return x.to("tpu")
        if type(x) in (list, tuple):
            return type(x)(back(e) for e in x)
        return x

    return back(result)


def no_lowering_error(func, args, kwargs) -> NotImplementedError:
    return NotImplementedError(
        f"torch_tpu: the aten op {func} has no tpu lowering (inputs: {describe(args, kwargs)}). "
        "Set TORCH_TPU_CPU_FALLBACK=1 to run such ops on the CPU (slow, counted in "
        "torch_tpu.stats()['cpu_fallbacks']), or report the op.")


_IN_COMPOSITE: set = set()


def _composite_explicit(func):
    key = torch._C.DispatchKey.CompositeExplicitAutograd

    def run(*args, **kwargs):
        if func in _IN_COMPOSITE:  # the composite kernel calls back into itself (via out=)
            raise no_lowering_error(func, args, kwargs)
        _IN_COMPOSITE.add(func)
        try:
            return func._op_dk(key, *args, **kwargs)
        finally:
            _IN_COMPOSITE.discard(func)

    return run


def _python_entry(func):
    """Decomposition (torch's own tables) or CPU fallback, or None."""
    if _has_composite_implicit(func):
        return _PythonEntry(lambda *a, **k: func.decompose(*a, **k))
    from torch._decomp import decomposition_table

    decomp = decomposition_table.get(func)
    if decomp is not None:
        return _PythonEntry(decomp)
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd"):
        # e.g. rand_like, _foreach_* (loops of per-tensor aten ops): torch's own composite kernel
        return _PythonEntry(_composite_explicit(func))
    if os.environ.get("TORCH_TPU_CPU_FALLBACK", "0") not in ("", "0"):
        return _PythonEntry(_cpu_fallback(func))
    return None


def _build_entry(func, args, kwargs, key, arrays):
    from .. import ops

    ops.load()

    low = registry.lookup(func)
    writes = registry.mutated_arguments(func)
    target_func = func
    if low is None and writes:
        fv = registry.functional_variant(func)
        if fv is not None:
            low = registry.lookup(fv)
            target_func = fv
    if low is None:
        entry = _python_entry(func)
        if entry is None:
            raise no_lowering_error(func, args, kwargs)
        _ENTRIES[key] = entry
        return entry
    if low.data_dependent:
        entry = _PythonEntry(_data_dependent_runner(func, target_func, low, writes))
        _ENTRIES[key] = entry
        return entry

    # What does torch say this op returns? (Also raises torch's errors for bad input.)
    meta_args = _to_meta(list(args))
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    try:
        meta_out = func(*meta_args, **meta_kwargs)
        has_meta = True
    except NotImplementedError:
        meta_out, has_meta = None, False

    counter = [0]
    tmpl_args = _template(list(args), counter)
    tmpl_kwargs = {k: _template(v, counter) for k, v in kwargs.items()}
    n_inputs = counter[0]
    in_place = bool(writes) and _is_inplace_or_out(func)
    write_metas = [meta_kwargs[name] if name in meta_kwargs else meta_args[pos] for pos, name in writes]
    if has_meta:  # torch's meta kernel resized a wrongly shaped out= tensor; we cannot resize
        for (pos, name), m in zip(writes, write_metas):
            target = kwargs[name] if name in kwargs else args[pos]
            if isinstance(m, torch.Tensor) and tuple(m.shape) != tuple(target.shape):
                raise RuntimeError(
                    f"tpu: {func}: the out= tensor has shape {tuple(target.shape)} but the result "
                    f"has shape {tuple(m.shape)}; tpu tensors cannot be resized in place, pass an "
                    f"out= tensor of the result's shape ({describe(args, kwargs)})")

    # The functional call of an in-place/out= op drops the out= arguments.
    call_args, call_kwargs = tmpl_args, dict(tmpl_kwargs)
    if target_func is not func:
        out_names = {a.name for a in func._schema.arguments if a.is_out}
        for name in out_names:
            call_kwargs.pop(name, None)
        if out_names:
            call_args = [a for a, s in zip(tmpl_args, func._schema.arguments) if not s.is_out]
    precision = torch.get_float32_matmul_precision() if low.matmul else None

    def call_lowering(arrs):
        a = _fill(call_args, arrs)
        k = {n: _fill(v, arrs) for n, v in call_kwargs.items()}
        if low.random:
            k["rng_key"] = rng.make_key(arrs[n_inputs])
        if precision is not None:
            k["precision"] = precision
        return low.fn(*a, **k)

    example = list(arrays)
    if low.random:  # compiling must not consume random state (the run below draws the key)
        example.append(rng.peek_key_data())
    if in_place:
        out_leaves = []
    elif has_meta:
        out_leaves = list(_leaves(meta_out))
    else:
        # no meta kernel: ask the lowering itself for output shapes and dtypes
        try:
            shapes = platform.jax().eval_shape(lambda *arrs: call_lowering(arrs), *example)
        except Exception as exc:
            raise OpError(f"tpu: lowering {func} failed ({describe(args, kwargs)}): {exc}") from exc
        if writes:
            shapes = shapes[0]
        out_leaves = [torch.empty(s.shape, dtype=dtypes.to_torch_dtype(s.dtype), device="meta")
                      for s in _leaves(shapes)]
        meta_out = out_leaves if len(out_leaves) != 1 else out_leaves[0]
    returns_scalar = (len(out_leaves) == 1 and out_leaves[0] is not None
                      and not isinstance(out_leaves[0], torch.Tensor))

    def program(*arrs):
        result = call_lowering(arrs)
        if in_place:
            updates, result = result, ()
        elif writes:
            result, updates = result
        else:
            updates = ()
        outs = _match(func, result, out_leaves)
        if writes:
            outs += _match(func, updates, write_metas)
        return outs

    tensor_leaves = [m for m in out_leaves if isinstance(m, torch.Tensor)]
    entry = _LoweredEntry()
    entry.func = func
    entry.key = ("op", key, precision)
    entry.program = program
    entry.prog = None
    entry.avals = tuple((tuple(m.shape), dtypes.to_jax_dtype(m.dtype))
                        for m in tensor_leaves + [w for w in write_metas if isinstance(w, torch.Tensor)])
    entry.random = low.random
    entry.writes = writes
    entry.returns_scalar = returns_scalar
    entry.n_out = len(tensor_leaves)
    entry.out_dtypes = tuple(m.dtype for m in tensor_leaves)
    entry.rebuild = None if (in_place or isinstance(meta_out, torch.Tensor)) else _rebuilder(meta_out)
    if modes._State.fused and not returns_scalar:
        # no single-op program in fused mode, but trace once so a bad lowering fails here, at the op
        try:
            platform.jax().eval_shape(program, *[_spec(a) for a in example])
        except Exception as exc:
            raise OpError(f"tpu: could not lower {func} ({describe(args, kwargs)}): "
                          f"{type(exc).__name__}: {exc}") from exc
    else:
        entry.compile([fused.materialize(a) for a in example], args, kwargs)
    _ENTRIES[key] = entry
    return entry


def _spec(a):
    import numpy as np

    return platform.jax().ShapeDtypeStruct(np.shape(a), a.dtype)


def _is_inplace_or_out(func) -> bool:
    name = func._schema.name
    return name.endswith("_") or any(a.is_out for a in func._schema.arguments)


def _match(func, result, metas):
    """Flatten a lowering's result against torch's expected leaves: cast dtypes, check shapes."""
    jnp = platform.jax().numpy
    res_leaves = list(_leaves(result)) if isinstance(result, (tuple, list)) else [result]
    if len(res_leaves) != len(metas):
        raise OpError(f"lowering of {func} returned {len(res_leaves)} outputs, torch expects {len(metas)}")
    outs = []
    for r, m in zip(res_leaves, metas):
        if not isinstance(m, torch.Tensor):
            if m is not None and r is not None:
                outs.append(jnp.asarray(r))
            continue
        r = jnp.asarray(r)
        want = dtypes.to_jax_dtype(m.dtype)
        if r.dtype != want:
            r = r.astype(want)
        if tuple(r.shape) != tuple(m.shape):
            try:  # in-place results broadcast to their target (x.add_(scalar-shaped y))
                r = jnp.broadcast_to(r, tuple(m.shape))
            except ValueError:
                raise OpError(f"lowering of {func} produced shape {tuple(r.shape)}, torch expects "
                              f"{tuple(m.shape)}") from None
        outs.append(r)
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


def _data_dependent_runner(func, target_func, low, writes):
    """Ops whose output shape depends on values: computed eagerly on concrete device arrays."""

    def run(*args, **kwargs):
        _counters["executions"] += 1
        counter = [0]
        tmpl_args = _template(list(args), counter)
        tmpl_kwargs = {k: _template(v, counter) for k, v in kwargs.items()}
        _, arrays = signature(func, args, kwargs)
        arrays = [fused.materialize(a) for a in arrays]
        result = low.fn(*_fill(tmpl_args, arrays), **{k: _fill(v, arrays) for k, v in tmpl_kwargs.items()})

        def back(x):
            if x is None or isinstance(x, (int, float, bool)):
                return x
            if type(x) in (list, tuple):
                return type(x)(back(e) for e in x)
            return wrap(x)

        return back(result)

    return run


# ---------------------------------------------------------------------------------------------
# The hot path.
# ---------------------------------------------------------------------------------------------
def run_op(func, args, kwargs):
    key, arrays = signature(func, args, kwargs)
    entry = _ENTRIES.get(key)
    if entry is None:
        entry = _build_entry(func, args, kwargs, key, arrays)
    else:
        _counters["cache_hits"] += 1
    return entry(args, kwargs, arrays)


def clear() -> None:
    _ENTRIES.clear()

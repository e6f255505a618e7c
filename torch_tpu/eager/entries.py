"""An op entry: one op signature's traceable function, program, output avals and what it writes back,
and the call that runs it (the hot path of every eager op). Built by ``LoweredEntry.from_plan`` (a plan
made now, ``plans.plan``) or ``LoweredEntry.from_description`` (a description stored on disk by an earlier
process, ``op_store``), then prepared by the current launcher and finished."""
from __future__ import annotations

import math
import warnings

import torch

from ..engine import deferred_errors, launchers
from ..errors import OpError, describe
from ..ops import registry
from ..runtime import dtypes, generators, program_cache, rng
from ..tensor import kernels
from ..tensor.tensor import new_full, new_output, new_strided, write, write_storage
from .overlap_rules import OVERLAP_UNCHECKED, refuse_partial_overlap
from .plans import plan

class LoweredEntry:
    """One op signature: its traceable function, its compiled program (strict), output avals,
    the arguments it writes back."""

    __slots__ = ("func", "key", "fn", "compiled", "avals", "out_dtypes", "rebuild", "writes", "random",
                 "n_out", "returns_scalar", "check", "recipe", "loaded", "device_checks", "layouts",
                 "write_orders", "plain", "output", "what")

    def __init__(self, func, key, *, fn, recipe, avals, out_dtypes, rebuild, random, returns_scalar, check,
                 device_checks, layouts, write_orders):
        self.func = func
        self.key = key  # the program key (``op_path.program_key``)
        self.fn = fn  # the traceable function; None until first needed for an entry from a description
        self.recipe = recipe  # (func, meta args, meta kwargs, example avals, templates) to plan it then
        self.loaded = recipe is not None
        self.compiled = None
        self.avals = avals  # the outputs' (shape, dtype): results, written values, the device checks' code
        self.out_dtypes = out_dtypes  # the results' torch dtypes
        self.n_out = len(out_dtypes)
        self.rebuild = rebuild  # None, or tensors -> the op's result structure
        self.writes = registry.mutated_arguments(func)
        self.write_orders = write_orders  # see ``plans.write_orders``
        self.random = random
        self.returns_scalar = returns_scalar
        self.check = check  # the per-call check of dynamic Scalars, or None
        self.device_checks = device_checks  # the messages of the lowering's device-side checks
        self.layouts = layouts  # see ``plans.Plan.layouts``
        self.what = str(func)  # (fused mode names each node)
        self.plain = False  # set by finish()
        self.output = None  # the result of an entry with one: (shape, torch dtype, bytes), set by finish()

    @classmethod
    def from_plan(cls, func, key, p, random: bool, write_orders, check) -> LoweredEntry:
        """The entry of a plan made in this process (``plans.plan``)."""
        tensor_leaves = [m for m in p.out_leaves if isinstance(m, torch.Tensor)]
        layouts = p.layouts
        avals = tuple((tuple(m.shape) if layouts is None or layouts[k] is None else (m.numel(),),
                       dtypes.to_jax_dtype(m.dtype)) for k, m in enumerate(tensor_leaves))
        avals += tuple((tuple(m.shape) if write_orders is None or write_orders[k] is None else write_orders[k][1],
                        dtypes.to_jax_dtype(m.dtype))
                       for k, m in enumerate(p.write_metas) if isinstance(m, torch.Tensor))
        returns_scalar = (len(p.out_leaves) == 1 and p.out_leaves[0] is not None
                          and not isinstance(p.out_leaves[0], torch.Tensor))
        rebuild = None if (p.in_place or isinstance(p.meta_out, torch.Tensor)) else rebuilder(p.meta_out)
        return cls(func, key, fn=p.fn, recipe=None, avals=avals, out_dtypes=tuple(m.dtype for m in tensor_leaves),
                   rebuild=rebuild, random=random, returns_scalar=returns_scalar, check=check,
                   device_checks=p.device_checks, layouts=layouts, write_orders=write_orders)

    @classmethod
    def from_description(cls, func, key, desc, random: bool, recipe, write_orders, check) -> LoweredEntry:
        """The entry of a description an earlier process stored (``op_store.OpDescription``); it plans
        the op from ``recipe`` when its traceable function is first needed."""
        avals = tuple((shape, dtypes.to_jax_dtype(dt)) for shape, dt in desc.avals)
        rebuild = None if desc.structure is None else rebuilder(desc.structure)
        return cls(func, key, fn=None, recipe=recipe, avals=avals, out_dtypes=desc.out_dtypes, rebuild=rebuild,
                   random=random, returns_scalar=desc.returns_scalar, check=check,
                   device_checks=list(desc.device_checks),  # (the checks setting is part of its disk key)
                   layouts=desc.layouts, write_orders=write_orders)

    def finish(self) -> None:
        """After the launcher prepared it: the output of the device-side checks tracing found (an entry
        from a description has it among its avals), and whether the call takes the plain branch."""
        if self.device_checks and not self.loaded:
            self.avals += (((), dtypes.to_jax_dtype(torch.int32)),)
        self.plain = (self.check is None and not self.random and not self.writes and not self.device_checks
                      and not self.returns_scalar and self.layouts is None and self.rebuild is None)
        if self.n_out == 1 and self.layouts is None:
            # its program returns its result in the shape of the first aval (the lowering's result is
            # conformed to the meta kernel's, ``ops.calling``; a deferred value has it too): the result's
            # wrapper needs no more
            shape = tuple(self.avals[0][0])
            dtype = self.out_dtypes[0]
            self.output = (shape, dtype, math.prod(shape) * dtype.itemsize)

    def __call__(self, args, kwargs, arrays):
        if self.plain:  # one output, nothing to check, draw or write (most ops: the hot path)
            return new_output(launchers.current.run_op(self, arrays, args, kwargs)[0], *self.output)
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
            out = self.output
            return new_full(outs[0], dts[0]) if out is None else new_output(outs[0], *out)
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
                store(t, arr)
            return
        for t, arr, order in zip(targets, arrays, self.write_orders):
            if order is None:
                store(t, arr)
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
            fn = self.fn = plan(func, low, target_func, meta_args, meta_kwargs, example, tmpl,
                                self.write_orders, self.device_checks).fn
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


def store(t, arr) -> None:
    """An op's result into the tensor it writes: an out= tensor of another shape is resized first, with
    CPU torch's deprecation warning when it held elements (``plans.plan`` refused views of another shape)."""
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
        else:  # a view: a contiguous view of the new shape at its offset (plans.plan checked it fits)
            kernels.resize_view(t, shape)
    write(t, arr)


def rebuilder(meta_out):
    def build(tensors, x=meta_out, it=None):
        it = iter(tensors) if it is None else it
        if isinstance(x, torch.Tensor):
            return next(it)
        if type(x) in (list, tuple):
            return type(x)(build(None, e, it) for e in x)
        return x

    return lambda tensors: build(tensors)


_SCALAR_METAS: dict = {}


def scalar_meta(dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim meta tensor of ``dtype`` (only its dtype is read): one per dtype, not one per op entry."""
    found = _SCALAR_METAS.get(dtype)
    if found is None:
        found = _SCALAR_METAS[dtype] = torch.empty((), dtype=dtype, device="meta")
    return found

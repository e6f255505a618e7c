"""Ops the op table does not lower directly: torch's own decompositions and composite kernels (which
call other aten ops), ops with data-dependent output shapes (run eagerly on concrete arrays), and the
opt-in CPU fallback (TORCH_TPU_CPU_FALLBACK=1)."""
from __future__ import annotations


import torch

from .. import config
from ..engine import deferred_errors, fused, poisoned
from ..errors import no_lowering, warn_at_user
from ..ops import registry
from ..runtime import caches, counters
from ..tensor import strided
from ..tensor.tensor import TpuTensor, wrap
from .arguments import fill, key_and_inputs, templates, to_meta

_counters = counters.counters


class PythonEntry:
    """Runs Python code that calls other aten ops (a decomposition or a CPU fallback)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, args, kwargs, arrays):
        return self.fn(*args, **kwargs)


def has_composite_implicit(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


_FALLBACK_WARNED: set = caches.register("cpu fallback warnings", set())


def _cpu_fallback(func):
    def run(*args, **kwargs):
        return cpu_fallback(func, args, kwargs)

    return run


def cpu_fallback(func, args, kwargs):
    """``func`` run on the CPU (TORCH_TPU_CPU_FALLBACK=1): warned once per op, counted in total and by
    op name (``stats()["cpu_fallbacks"]``, ``stats()["cpu_fallback_ops"]``)."""
    if func not in _FALLBACK_WARNED:
        _FALLBACK_WARNED.add(func)
        warn_at_user(f"torch_tpu: {func} has no tpu lowering; running it on the CPU "
                     "(TORCH_TPU_CPU_FALLBACK=1)")
    counters.count_fallback(func.name())
    return cpu_fallback_call(func, args, kwargs)


def cpu_fallback_call(func, args, kwargs):
    """Run ``func`` on CPU copies of its tpu arguments; write mutated arguments back (resized like an
    out= tensor where the CPU kernel resized them); results to tpu."""
    writes = registry.mutated_arguments(func)
    written = {name for _, name in writes}
    schema = func._schema.arguments
    by_name = {a.name: a for a in schema}

    def to_cpu(x, mutable=False):
        if isinstance(x, TpuTensor):
            # a copy the CPU kernel may resize (.cpu() of a tpu tensor can wrap memory it cannot grow)
            return x.detach().cpu().clone() if mutable else x.detach().cpu()
        if type(x) in (list, tuple):
            return type(x)(to_cpu(e, mutable) for e in x)
        return x

    def as_schema(x, arg):
        # torch hands a wrapped number (a composite kernel's Scalar made a 0-dim tensor) to Python as a
        # number: the CPU kernel's Tensor argument needs it back as a tensor
        if arg is not None and isinstance(x, (bool, int, float, complex)) and \
                isinstance(arg.type, torch.TensorType):
            return torch.tensor(x)
        return x

    positional = [schema[i] if i < len(schema) else None for i in range(len(args))]
    cargs = [as_schema(to_cpu(a, arg is not None and arg.name in written), arg) for a, arg in zip(args, positional)]
    ckwargs = {k: as_schema(to_cpu(v, k in written), by_name.get(k)) for k, v in kwargs.items()}
    result = func(*cargs, **ckwargs)
    mine = {}  # CPU copy -> the tpu tensor it stands for (an in-place or out= op returns its target)
    for pos, name in writes:
        src = ckwargs[name] if name in ckwargs else cargs[pos]
        dst = kwargs[name] if name in kwargs else args[pos]
        for d, c in (zip(dst, src) if type(dst) in (list, tuple) else ((dst, src),)):
            if isinstance(d, TpuTensor):
                if d.shape != c.shape:
                    d.resize_(c.shape)
                d.copy_(c)
                mine[id(c)] = d

    def back(x):
        if isinstance(x, torch.Tensor):
            target = mine.get(id(x))
            return target if target is not None else x.to("tpu")
        if type(x) in (list, tuple):
            return type(x)(back(e) for e in x)
        return x

    return back(result)


_IN_COMPOSITE: set = set()


def _composite_explicit(func):
    key = torch._C.DispatchKey.CompositeExplicitAutograd

    def run(*args, **kwargs):
        if func in _IN_COMPOSITE:  # the composite kernel calls back into itself (via out=, or a prim
            # whose kernel calls the aten op that decomposes to it: prims.bessel_j0)
            if config.settings().cpu_fallback:
                return cpu_fallback(func, args, kwargs)
            raise no_lowering(func, args, kwargs)
        _IN_COMPOSITE.add(func)
        try:
            return func._op_dk(key, *args, **kwargs)
        finally:
            _IN_COMPOSITE.discard(func)

    return run


def python_entry(func):
    """Decomposition (torch's own tables), composite kernel or CPU fallback for ``func``, or None; with
    the op's per-call checks (``parity.decomposition_check``: CPU raises for them, a decomposition would
    compute: celu with alpha 0, hardshrink's lambda past float16)."""
    entry = _python_entry(func)
    if entry is None:
        return None
    from .. import parity

    check = parity.decomposition_check(func, to_meta)
    if check is None:
        return entry
    run = entry.fn

    def checked(*args, **kwargs):
        check(args, kwargs)
        return run(*args, **kwargs)

    return PythonEntry(checked)


def _python_entry(func):
    route = eager_route(func)
    return None if route is None else PythonEntry(route[1])


def eager_route(func):
    """(how, fn): how eager runs an op the table does not lower, or None when it cannot."""
    if has_composite_implicit(func):
        return "with its composite kernel", lambda *a, **k: func.decompose(*a, **k)
    from torch._decomp import decomposition_table

    decomp = decomposition_table.get(func)
    if decomp is not None:
        return "with torch's decomposition", decomp
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd"):
        # e.g. rand_like, _foreach_* (loops of per-tensor aten ops): torch's own composite kernel
        return "with torch's CompositeExplicitAutograd kernel", _composite_explicit(func)
    if config.settings().cpu_fallback:
        return "on the CPU (TORCH_TPU_CPU_FALLBACK=1)", _cpu_fallback(func)
    return None


def data_dependent_entry(func, low):
    """Ops whose output shape depends on values: computed eagerly on concrete device arrays."""

    out_names = [a.name for a in func._schema.arguments if a.is_out]

    def run(*args, **kwargs):
        _counters["executions"] += 1
        tmpl_args, tmpl_kwargs, _ = templates(func, args, kwargs)
        _, held = key_and_inputs(func, args, kwargs)
        arrays = [fused.materialize(a) for a in held]
        deferred_errors.verify()  # the values are read on the host: a point that waits
        if poisoned.active:  # an input computed from a failed device-side check raises
            poisoned.lineage(held, func)
        result = low.fn(*fill(tmpl_args, arrays), **{k: fill(v, arrays) for k, v in tmpl_kwargs.items()
                                                     if k not in out_names})

        def back(x):
            if x is None or isinstance(x, (int, float, bool)):
                return x
            if type(x) in (list, tuple):
                return type(x)(back(e) for e in x)
            return wrap(x)

        if not out_names:
            return back(result)
        return _into_out(func, back(result), [kwargs[n] for n in out_names], args)

    return PythonEntry(run)


def _into_out(func, results, outs, args):
    """An out= form of a data-dependent op (``masked_select(x, m, out=o)``; the lowering computes the
    functional result, which raised ``unexpected keyword argument 'out'``): resized and copied into the
    out= tensors, with the CPU kernels' same-dtype check."""
    results = results if isinstance(results, (tuple, list)) else (results,)
    read = [a for a in args if isinstance(a, TpuTensor)]
    for o in outs:  # CPU: an out= tensor sharing memory with an input is refused
        strided.check_no_overlap(o, read)
    for r, o in zip(results, outs):
        if o.dtype != r.dtype:
            name = func._schema.name.split("::")[-1]
            raise RuntimeError(f"{name}(): self and result must have the same scalar type" if name == "masked_select"
                               else f"Expected out tensor to have dtype {r.dtype}, but got {o.dtype} instead")
        if o.shape != r.shape:
            o.resize_(r.shape)
        o.copy_(r)
    return outs[0] if len(outs) == 1 else tuple(outs)

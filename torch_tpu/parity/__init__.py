"""CPU parity: what torch's CPU kernels do that its meta kernels do not, so the tpu does the same.

torch's meta kernels give an op's result dtype and shape, and raise torch's errors for most bad input;
CPU kernels refuse more (a dtype without a kernel instance, an argument out of range, a Python number
that does not fit the dtype, an in-place result ``self`` cannot hold) and sometimes return another dtype,
shape or layout. This package holds those checks and corrections, one module per kind:

- ``validators``: the table of checks per aten overload (``@validates``, ``@validates_each_call``) and how
  an in-place or out= overload, a decomposition or a Python kernel reaches its functional overload's;
- ``arguments``, ``refusals``, ``integral_refusals``, ``index_dtypes``, ``dim_checks``: the validators;
  ``cpu_kernel_dtypes``: the dtypes each CPU kernel has no instance for, recorded from torch by
  ``scripts/record_cpu_kernel_dtypes.py`` (data, not code);
- ``scalars``: Python numbers a CPU kernel stores in the result's dtype (checked on every call);
- ``writes``: what CPU refuses of a tensor an op writes (in-place results, out= dtypes);
- ``meta_results``: the meta kernel's result corrected to the CPU kernel's.

The entry point is ``check_call``: eager mode calls it once when it builds an op's entry (before the meta
kernel), a compiled graph once per call node. Everything here is torch only (no JAX): it runs on the
host, once per program key, with the call's own arguments.
"""
from __future__ import annotations

import torch

from . import validators
from . import arguments, dim_checks, index_dtypes, integral_refusals, refusals  # noqa: F401 (their validators)
from . import cpu_kernel_dtypes, meta_results, scalars, writes
from ..ops import registry

cpu_kernel_dtypes.register()

# what the executors call besides check_call
check_fits = scalars.check_fits
cpu_meta = meta_results.cpu_meta
per_call_check = scalars.per_call_check
refuse_inplace_cast = writes.refuse_inplace_cast
refuse_inplace_shape = writes.refuse_inplace_shape
python_kernels_validated = validators.python_kernels_validated
checked_decompositions = validators.checked_decompositions


def check_call(func, target_func, args, kwargs, *, metas=None, result=None) -> None:
    """Every host check CPU torch makes of one call of ``func`` that torch's meta kernel does not make;
    raises torch's CPU error. ``target_func``: the overload that computes it (an in-place or out= op's
    functional overload, where the op table lowers that; else ``func``).

    ``metas`` (eager: the arguments as meta tensors, ``(args, kwargs)``): a tensor the op writes is checked
    against the result (its dtype and shape: ``int_tensor.mul_(1.5)``, an out= tensor of another dtype).
    ``result`` (a compiled graph's call node: its fake value): the per-call checks of the call's Python
    numbers run now too (eager builds them once with ``per_call_check`` and runs them on every call)."""
    validators.run(target_func, args, kwargs)
    if metas is not None and registry.mutated_arguments(func):
        functional = target_func if target_func is not func else registry.functional_variant(func)
        if functional is not None:
            writes.check_inplace_result(func, functional, *metas)
    if result is not None:
        check = scalars.per_call_check(func, target_func, result)
        if check is not None:
            check(args, kwargs)


def decomposition_check(func, to_meta):
    """The per-call check of an op a decomposition or composite kernel computes (CPU raises, the
    decomposition would compute: celu with alpha 0, hardshrink's lambda past float16, an out= tensor of a
    wider dtype where the CPU kernel demands the result's): ``check(args, kwargs)``, or None. ``to_meta``
    turns an argument into its meta stand-in."""
    target = func if func in validators.EACH_CALL else registry.functional_variant(func) if \
        registry.mutated_arguments(func) else None
    exact_out = writes.demands_exact_out(func)
    if not exact_out and (target is None or target not in validators.EACH_CALL):
        return None

    def check(args, kwargs):
        if exact_out:  # (the decomposition would cast its result into a wider out= tensor)
            writes.check_exact_out(func, registry.functional_variant(func), to_meta(list(args)),
                                   {k: to_meta(v) for k, v in kwargs.items()})
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None and target in validators.EACH_CALL:
            validators.each_call(target, first.dtype)(args, kwargs)

    return check

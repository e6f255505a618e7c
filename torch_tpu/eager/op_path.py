"""The per-op path of eager mode: structural key -> cached entry -> program, in every eager mode.

Per op: build a structural key (op, input shapes and dtypes, static arguments); on a miss, build the
key's entry (``entries.LoweredEntry``) from the op's description on disk, or check the call as CPU torch
does (``parity.check_call``) and plan it (``plans.plan``: torch's meta kernel says what the op returns and
raises torch's own errors for bad input; the op table's lowering becomes a traceable function), and let
the launcher prepare it (strict: compile now; fused: check it traces); on a hit, the entry runs: the
launcher runs the program (strict) or records it (fused) and the outputs are wrapped as tpu tensors. JAX
dispatch is asynchronous, so nothing waits for the device until a value is read.
"""
from __future__ import annotations

from .. import ops, parity
from ..engine import fused, launchers
from ..errors import no_lowering
from ..ops import calling, registry
from ..runtime import caches, counters, program_cache, rng, stable_keys
from ..runtime.stable_keys import ProcessLocal
from . import op_store
from .arguments import SCALAR_INPUTS, keep_scalars_static, key_and_inputs, templates, to_meta
from .entries import LoweredEntry, scalar_meta
from .fallbacks import data_dependent_entry, python_entry
from .plans import StaticScalarsNeeded, branches_on_a_value, plan, write_orders

_counters = counters.counters
_ENTRIES: dict = caches.register("op entries", caches.Bounded(program_cache.max_programs))


def program_key(func, key, low):
    """The entry's program key: the op by name (not by id), so the key means the same in every process
    (``stable_keys``) when the lowering is torch_tpu's own."""
    name = op_store.op_name(func)
    parts = ("op", name, key[1:], calling.matmul_precision(low))
    if not op_store.is_own_lowering(low):  # a lowering registered from outside: this process only
        parts += (ProcessLocal(id(low.fn)),)
    return parts


def _build_entry(func, args, kwargs, key, arrays):
    """The entry of a key not seen before. An op described on disk passed CPU's checks for this key in an
    earlier process (they depend on the key only: a second call with the key in this process skips them
    too, through ``_ENTRIES``); any other is checked once here (``parity.check_call``), then planned."""
    ops.load()
    low, target_func = registry.resolve(func)
    lowered = low is not None and not low.data_dependent
    if not lowered:
        entry = python_entry(func) if low is None else data_dependent_entry(func, low)
        if entry is None:
            raise no_lowering(func, args, kwargs)
        # (a decomposition computes where CPU's kernel refuses a dtype, or writes a result self cannot hold)
        _check(func, target_func, args, kwargs)
        _ENTRIES[key] = entry
        return entry
    pkey = program_key(func, key, low)
    try:
        example = list(arrays)
        if low.random:  # compiling must not consume random state (the run draws the key)
            example.append(rng.peek_key_data())
        entry = _described_entry(func, low, target_func, args, kwargs, pkey, example)
        if entry is None:
            _check(func, target_func, args, kwargs)
            entry = _planned_entry(func, low, target_func, args, kwargs, arrays, pkey, example)
    except BaseException:
        # a refused call (shape, dtype, a validator) keeps no entry: its key's text must not stay either
        # (the text cache holds keys by identity, so every failed call would add one)
        stable_keys.forget(pkey)
        raise
    _ENTRIES[key] = entry
    return entry


def _check(func, target_func, args, kwargs) -> None:
    metas = (to_meta(list(args)), {k: to_meta(v) for k, v in kwargs.items()}) \
        if registry.mutated_arguments(func) else None
    parity.check_call(func, target_func, args, kwargs, metas=metas)


def _planned_entry(func, low, target_func, args, kwargs, arrays, pkey, example):
    orders = write_orders(func, args, kwargs)
    p = plan(func, low, target_func, args, kwargs, example, None, orders)
    check_meta = p.check_meta()
    entry = LoweredEntry.from_plan(func, pkey, p, low.random, orders,
                                   _per_call_check(func, target_func, check_meta, args, kwargs, arrays))
    try:
        launchers.current.prepare(entry, example, args, kwargs)
    except Exception as exc:
        if any(not hasattr(a, "shape") for a in arrays) and branches_on_a_value(exc):
            raise StaticScalarsNeeded() from exc
        raise
    entry.finish()
    op_store.save(pkey, entry, p.meta_out, p.in_place, check_meta)  # with the checks' messages
    return entry


def _described_entry(func, low, target_func, args, kwargs, pkey, example):
    """The entry of ``pkey`` from its description on disk (no meta kernel, no tracing), or None."""
    desc = op_store.load(pkey)
    if desc is None:
        return None
    # the templates come from the real arguments: a folded view's slot reads it from its storage
    recipe = (func, to_meta(list(args)), {k: to_meta(v) for k, v in kwargs.items()},
              [fused.abstract(a) for a in example], templates(func, args, kwargs))
    check_meta = None if desc.check_dtype is None else scalar_meta(desc.check_dtype)
    entry = LoweredEntry.from_description(func, pkey, desc, low.random, recipe, write_orders(func, args, kwargs),
                                          _per_call_check(func, target_func, check_meta, args, kwargs, example))
    launchers.current.prepare(entry, example, args, kwargs)
    entry.finish()
    return entry


def _per_call_check(func, target_func, check_meta, args, kwargs, arrays):
    """The entry's per-call check (``parity.per_call_check``), or None where no call can fail it but
    this one: it reads the values of dynamic Scalars only, so an entry whose key has none (``x + y``, its
    alpha the default) runs it here, once, not on every call."""
    check = parity.per_call_check(func, target_func, check_meta)
    if check is not None and not any(type(a) in SCALAR_INPUTS for a in arrays):
        check(args, kwargs)
        return None
    return check




def run_op(func, args, kwargs):
    """The hot path: one aten call on tpu tensors."""
    key, arrays = key_and_inputs(func, args, kwargs)
    entry = _ENTRIES.get(key)
    if entry is None:
        try:
            entry = _build_entry(func, args, kwargs, key, arrays)
        except StaticScalarsNeeded:
            keep_scalars_static(func)
            key, arrays = key_and_inputs(func, args, kwargs)
            entry = _ENTRIES.get(key) or _build_entry(func, args, kwargs, key, arrays)
    else:
        _counters["cache_hits"] += 1
    return entry(args, kwargs, arrays)

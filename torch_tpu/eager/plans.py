"""An op's plan: what torch says the op returns for these arguments (its meta kernel, which also raises
torch's errors for bad input; ``parity.cpu_meta`` where CPU's kernel returns otherwise) and the traceable
function computing it with the op table's lowering, its outputs conformed to torch's dtypes and shapes
(``ops.calling``), in-place and out= forms computed by their functional overload and written back."""
from __future__ import annotations

import dataclasses
import warnings

import torch

from .. import parity
from ..errors import OpError, describe, leaves
from ..ops import calling, checks, registry
from ..runtime import dtypes, platform, rng
from ..tensor import kernels, strided
from ..tensor.tensor import TpuTensor
from .arguments import fill, templates, to_meta


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What ``plan`` found for one op signature."""
    fn: object  # the traceable function: input arrays -> the op's outputs (results, then written values)
    out_leaves: list  # torch's result tensors (meta; None for an undefined output); [] for in-place forms
    write_metas: list  # the tensors the op writes (meta)
    meta_out: object  # torch's result, structure included
    in_place: bool  # an in-place or out= form: it returns what it writes
    device_checks: list  # the messages of the lowering's ``require`` calls, filled when fn is first traced
    # None, or per tensor result None or the (size, stride) torch gives a result laid out densely in another
    # order than contiguous (channels_last, the order of transposed inputs): fn returns those in memory order
    layouts: tuple | None

    def check_meta(self):
        """The tensor whose dtype a dynamic Scalar of the call must fit: the first result, else the first
        written tensor; None when the op returns no tensor."""
        tensors = [m for m in self.out_leaves if isinstance(m, torch.Tensor)] + list(self.write_metas)
        return tensors[0] if tensors else None


def write_orders(func, args, kwargs):
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


def plan(func, low, target_func, args, kwargs, example, tmpl=None, write_orders=None, device_checks=None) -> Plan:
    """The plan of ``func`` for these arguments (real ones, or an entry's stored meta stand-ins) and
    ``example``, the program's example inputs. ``tmpl``: the argument templates, where known already;
    ``write_orders``: see ``write_orders``; ``device_checks``: the messages, where known already."""
    writes = registry.mutated_arguments(func)
    meta_args = to_meta(list(args))
    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings():  # a resized out= warns once per call, in entries.store
            warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
            meta_out = parity.cpu_meta(target_func, args, kwargs, func(*meta_args, **meta_kwargs))
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
    result_metas = []  # the results torch promises (known below; unknown while eval_shape asks the lowering)

    def call_lowering(arrs):
        key_data = arrs[n_inputs] if low.random else None
        return calling.invoke(low, fill(call_args, arrs), {n: fill(v, arrs) for n, v in call_kwargs.items()},
                              rng_key=None if key_data is None else rng.make_key(key_data), precision=precision,
                              results=result_metas)

    if in_place:
        out_leaves = []
    elif has_meta:
        out_leaves = list(leaves(meta_out))
    else:
        # no meta kernel: ask the lowering itself for output shapes and dtypes
        try:
            shapes = platform.jax().eval_shape(lambda *arrs: call_lowering(arrs), *example)
        except Exception as exc:
            if any(not hasattr(a, "shape") for a in example) and branches_on_a_value(exc):
                raise StaticScalarsNeeded() from exc
            raise OpError(f"tpu: lowering {func} failed ({describe(args, kwargs)}): {exc}") from exc
        if writes:
            shapes = shapes[0]
        out_leaves = [None if s is None else torch.empty(s.shape, dtype=dtypes.to_torch_dtype(s.dtype),
                                                         device="meta")
                      for s in leaves(shapes)]  # None: an undefined output (a gradient with no input)
        meta_out = out_leaves if len(out_leaves) != 1 else out_leaves[0]

    result_metas.extend(out_leaves)
    result_metas.extend(write_metas)
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
    return Plan(fn, out_leaves, write_metas, meta_out, in_place, device_checks, layouts)


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


class StaticScalarsNeeded(Exception):
    """The lowering branched on a dynamic Scalar's value while tracing: key its Scalars by value."""


def branches_on_a_value(exc) -> bool:
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

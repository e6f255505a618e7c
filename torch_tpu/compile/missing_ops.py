"""The error for aten ops a compiled graph holds and the op table does not lower: it says, op by op, what
does run them, and only what does.

Whether strict eager runs such an op is found out, not assumed: its eager route (torch's decomposition, a
composite kernel) is run once on meta tensors of the node's shapes, every op it calls routed as eager
routes it; a route that reaches an op without a lowering or a route, or calls back into an op it is
inside of (``prims.bessel_j0``'s CompositeExplicitAutograd kernel calls ``special_bessel_j0``, whose
decomposition is ``prims.bessel_j0``), is one strict eager raises for. ``TORCH_TPU_CPU_FALLBACK=1`` runs
any of them: the graph holding it then runs op by op (``compile/__init__._cpu_fallback_ops``)."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..eager import fallbacks
from ..eager.factories import KERNELS as _FACTORY_KERNELS
from ..eager.router import has_own_route
from ..ops import registry

_FALLBACK = ("TORCH_TPU_CPU_FALLBACK=1 runs it on the CPU (the compiled graph holding it then runs op by op, "
             "eagerly, with a warning)")


def error(missing: list) -> NotImplementedError:
    """``missing``: the graph's ops without a lowering (fx nodes calling OpOverloads, OpOverloads, or
    descriptions of wrapped calls)."""
    said: dict = {}
    for item in missing:
        op = item.target if isinstance(item, torch.fx.Node) else item
        name = str(op)
        if name in said:
            continue
        said[name] = _what_runs(op, item if isinstance(item, torch.fx.Node) else None)
    return NotImplementedError("torch.compile(backend='tpu'): no tpu lowering for aten op(s) "
                               + ", ".join(sorted(said)) + ". " + " ".join(said[n] for n in sorted(said)))


def _what_runs(op, node) -> str:
    name = str(op)
    if not isinstance(op, torch._ops.OpOverload):
        return f"{name}: no tpu lowering, in strict eager either; {_FALLBACK}."
    route = fallbacks.eager_route(op)
    if route is None:
        return f"{name}: strict eager has no lowering for it either; {_FALLBACK}."
    runs, why = _eager_runs(op, node)
    if runs is True:
        return (f"{name}: strict eager runs it {route[0]}, which a compiled program cannot hold: run it outside "
                "the compiled function (a function of yours around it under torch.compiler.disable, or a graph "
                "break there without fullgraph=True), or set TORCH_TPU_CPU_FALLBACK=1 (the compiled graph holding "
                "it then runs op by op, eagerly, with a warning).")
    if runs is False:
        return (f"{name}: strict eager cannot run it either (torch's route for it, {route[0]}, {why}); "
                f"{_FALLBACK}, or compute it on the CPU yourself (.cpu() before it, .to('tpu') after).")
    return f"{name}: strict eager tries it {route[0]}, which a compiled program cannot hold; {_FALLBACK}."


class _Unrunnable(Exception):
    pass


class _Unknown(Exception):
    pass


def _direct(func) -> bool:
    """Eager runs ``func`` without a route of torch's: a lowering (data-dependent ones too), a handler, a
    factory kernel."""
    if registry.resolve(func)[0] is not None or has_own_route(func):
        return True
    name = func.name().partition("::")[2]
    return name in _FACTORY_KERNELS


class _Probe(TorchDispatchMode):
    """Routes every op called inside an eager route as eager would, on meta tensors."""

    def __init__(self, inside: tuple):
        super().__init__()
        self.inside = inside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _direct(func):
            return func(*args, **kwargs)
        if func in self.inside:
            raise _Unrunnable(f"calls back into {func}, which it is inside of")
        route = fallbacks.eager_route(func)
        if route is None:
            raise _Unrunnable(f"reaches {func}, which has no lowering")
        with _Probe(self.inside + (func,)):
            return route[1](*args, **kwargs)


def _eager_runs(op, node) -> tuple:
    """(True / False, why not): whether strict eager's route for ``op`` runs on the tpu, tried on meta
    tensors of the node's values; None when it cannot be told (no shapes, a symbolic size, the probe itself
    failed)."""
    if node is None:
        return None, ""

    def meta(x):
        if isinstance(x, torch.fx.Node):
            x = x.meta.get("val")
        if isinstance(x, torch.Tensor):
            if any(not isinstance(s, int) for s in (*x.shape, *x.stride())):
                raise _Unknown()
            return torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(meta(e) for e in x) if isinstance(x, tuple) else [meta(e) for e in x]
        if isinstance(x, torch.SymInt):
            raise _Unknown()
        return x

    try:
        args = meta(tuple(node.args))
        kwargs = {k: meta(v) for k, v in node.kwargs.items()}
        route = fallbacks.eager_route(op)
        with _Probe((op,)):
            route[1](*args, **kwargs)
        return True, ""
    except _Unrunnable as exc:
        return False, str(exc)
    except Exception:  # noqa: BLE001 - the probe's own limits (meta kernels missing ...): say nothing false
        return None, ""

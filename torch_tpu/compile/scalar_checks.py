"""Python floats that became program inputs, checked at every call as eager checks them.

A float that changes between calls becomes an input of the compiled program (``floats.py``): dynamo
passes it as a host 0-d float64 tensor read with ``.item()``, and AOTAutograd turns the symbolic float
into tensor operations (``torch.add(x, y, alpha=s)`` becomes ``x + y * s``). Eager's per-call checks of a
Scalar's value (``parity/scalars.py``: ``alpha``, a clamp bound, a fill value or an activation's parameter
must fit the dtype the CPU kernel converts it to) ran at compile time on the graph's constants only, so
``torch.add(x, x, alpha=1e308)`` on float32, refused by CPU torch, returned inf once ``alpha`` was an input.

``guard`` wraps the compiled callable of a dynamo graph with such inputs: when a call brings values not
checked before, the graph's calls that take them (directly, or through Python arithmetic on them such as
``-lr``) run once on meta tensors with the concrete values, under a dispatch mode that runs eager's
checks of each aten call; a refused value raises eager's error before the program runs. Values already
checked cost a dictionary lookup.
"""
from __future__ import annotations

import operator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_MEMO_SIZE = 64


class _Refused(Exception):
    pass


class _Check(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from .. import parity
        from ..ops import registry

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(func, torch._ops.OpOverload):
            _, target = registry.resolve(func)
            try:
                parity.check_call(func, target, args, kwargs, result=out)
            except RuntimeError as exc:
                raise _Refused(exc) from exc
        return out


def _float_inputs(gm: torch.fx.GraphModule, example_inputs) -> dict:
    """{placeholder position: its ``.item()`` nodes} for the host 0-d float tensors read only by ``.item()``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    found = {}
    for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0 and x.is_floating_point() \
                and node.users and all(u.op == "call_method" and u.target == "item" for u in node.users):
            found[i] = list(node.users)
    return found


def _meta(v):
    if isinstance(v, torch.Tensor):
        if any(isinstance(s, torch.SymInt) for s in (*v.shape, *v.stride())):
            raise _Skip()
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Skip()
    return v


class _Skip(Exception):
    pass


def _relevant(gm: torch.fx.GraphModule, items) -> list:
    """The calls of ``gm`` that take the float values (the ``.item()`` nodes ``items``) or Python numbers
    computed from them, in graph order: computed once per graph."""
    scalars = set(items)
    found = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if any(isinstance(a, torch.fx.Node) and a in scalars
               for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))):
            found.append(node)
            example = node.meta.get("example_value")
            if not isinstance(example, (torch.Tensor, list, tuple)):
                scalars.add(node)  # Python arithmetic on the values (``-lr``, ``1 - beta``)
    return found


def _ordinary(v) -> bool:
    """A number no per-call check refuses whatever the dtype it is converted to: finite, not zero (celu's
    alpha), within int8's and float16's range and away from float16's underflow."""
    return type(v) in (int, float) and 2.0 ** -24 <= abs(v) <= 127.0


def _check(nodes: list, values: dict) -> None:
    """Run ``nodes`` (``_relevant``) on meta tensors with the float values (``values``: {item node:
    float}) where a value is not ordinary; raise eager's error for a value eager refuses."""
    scalars = dict(values)
    for node in nodes:
        def arg(a):
            if isinstance(a, torch.fx.Node):
                if a in scalars:
                    return scalars[a]
                return _meta(a.meta.get("example_value"))
            return a

        example = node.meta.get("example_value")
        arithmetic = not isinstance(example, (torch.Tensor, list, tuple))
        if not arithmetic and all(_ordinary(scalars[a]) for a in torch.utils._pytree.tree_leaves(
                (node.args, node.kwargs)) if isinstance(a, torch.fx.Node) and a in scalars):
            continue
        try:
            args = torch.fx.node.map_aggregate(node.args, arg)
            kwargs = dict(torch.fx.node.map_aggregate(node.kwargs, arg))
        except _Skip:
            continue
        if "device" in kwargs:  # a factory (torch.tensor(s, device=x.device)): nothing real is made
            kwargs["device"] = "meta"
        if arithmetic:
            try:
                fn = node.target if node.op == "call_function" else getattr(type(args[0]), node.target)
                value = fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - not plain arithmetic: its users are not checked
                continue
            if isinstance(value, (int, float, bool)):
                scalars[node] = value
            continue
        fn = node.target if node.op == "call_function" else getattr(torch.Tensor, node.target, None)
        if fn is None or fn is operator.getitem:
            continue
        if node.target in (torch.where, "where") and isinstance(example, torch.Tensor):
            _where_scalars(args, kwargs, example.dtype)
        try:
            with _Check(), torch.no_grad():
                fn(*args, **kwargs)
        except _Refused as exc:
            raise exc.args[0] from None
        except Exception:  # noqa: BLE001 - not runnable on meta tensors: its values stay unchecked
            continue


def _where_scalars(args, kwargs, dtype) -> None:
    """``torch.where(c, x, s)``: CPU's kernel makes the Scalar a tensor of the result's dtype (checked, as
    ``torch.scalar_tensor(s, dtype=...)``; one float16/bfloat16 element is not), which the meta kernel's
    decomposition does in float64 (not checked)."""
    from .. import parity

    if dtype in (torch.float16, torch.bfloat16):
        return
    for v in (*args[1:], *(kwargs[k] for k in ("input", "other", "self") if k in kwargs)):
        if type(v) in (int, float):
            parity.check_fits(v, dtype)


def check_constants(gm: torch.fx.GraphModule) -> None:
    """The Python numbers dynamo kept constant in ``torch.where`` calls (it specialises the float of a
    where): eager's check at compile time (the aten graph's ``scalar_tensor`` of it is also what a lifted
    ``torch.tensor(s)`` becomes, which is not checked)."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or node.target not in (torch.where, "where"):
            continue
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor):
            _where_scalars(node.args, node.kwargs, example.dtype)


def checks_floats(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether ``guard`` wraps a graph: it has float inputs that reach a check."""
    floats = _float_inputs(gm, example_inputs)
    return bool(floats) and bool(_relevant(gm, [item for items in floats.values() for item in items]))


def guard(compiled, gm: torch.fx.GraphModule, example_inputs):
    """``compiled`` itself, or a callable that checks the graph's float inputs as eager would first."""
    floats = _float_inputs(gm, example_inputs)
    if not floats:
        return compiled
    nodes = _relevant(gm, [item for items in floats.values() for item in items])
    if not nodes:
        return compiled
    checked: dict = {}

    def run(*args):
        values = tuple(args[i].item() for i in floats)
        if values not in checked:
            _check(nodes, {item: v for v, items in zip(values, floats.values()) for item in items})
            if len(checked) >= _MEMO_SIZE:
                checked.clear()
            checked[values] = True
        return compiled(*args)

    return run

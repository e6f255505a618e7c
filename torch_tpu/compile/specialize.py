"""Graphs with symbolic inputs from dynamo's *automatic* dynamic shapes, compiled once per concrete shape.

With ``torch.compile(..., dynamic=None)`` (the default), dynamo recompiles a function whose input shape
(or Python int argument) changed with that dimension symbolic. XLA programs have static shapes, so the
backend does not compile such a graph as it is: it returns a ``PerShape`` callable, which at each call
looks at the concrete sizes and ints it is given, and compiles (once per signature, cached) the same
dynamo graph with those values substituted for its symbolic inputs, through the static path (AOTAutograd,
one XLA program per aten graph; training included). This is what ``dynamic=False`` does, without dynamo
recompiling the frame for every new shape. Explicit dynamism (``dynamic=True``, ``mark_dynamic``) is
still refused by the backend.
"""
from __future__ import annotations

import copy
import struct
import weakref

import torch

from ..runtime import caches, program_cache


class _LiveCaches:
    """The per-signature caches of the PerShape callables still alive, held weakly: a graph dynamo dropped
    (``torch._dynamo.reset()``, a function compiled anew) takes its programs with it. ``clear()``
    (``torch_tpu.reset_caches()``) empties each of them."""

    def __init__(self):
        self._caches = weakref.WeakValueDictionary()  # by id: dicts are unhashable (and equal when empty)

    def add(self, cache) -> None:
        self._caches[id(cache)] = cache

    def clear(self) -> None:
        for cache in list(self._caches.values()):
            cache.clear()

    def __len__(self) -> int:  # programs held, as every registered cache counts (not graphs alive)
        return sum(len(cache) for cache in list(self._caches.values()))

    def graphs_alive(self) -> int:
        return len(self._caches)

    def __iter__(self):
        return iter(list(self._caches.values()))


_LIVE = caches.register("per-shape compiled graphs", _LiveCaches())


def is_symbolic_scalar(x) -> bool:
    return isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool))


def has_symbolic_inputs(example_inputs) -> bool:
    for x in example_inputs:
        if is_symbolic_scalar(x):
            return True
        if isinstance(x, torch.Tensor) and any(
                isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())):
            return True
    return False


def _arg_key(x):
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.stride(), x.dtype, x.device.type, x.requires_grad)
    return value_key(x)


def value_key(x):
    """A Python number as a key of the program specialised on it: by type and bits. By ``==`` ``0.0`` and
    ``-0.0`` are one key (the program made for ``0.0`` filled ``torch.full(.., -0.0)`` with ``+0.0``,
    ``copysign`` took the wrong sign), and a NaN never finds its own program again."""
    t = type(x)
    if t is float:
        return (float, struct.pack("<d", x))
    if t is complex:
        return (complex, struct.pack("<dd", x.real, x.imag))
    return (t, x)


class _Cache(caches.Bounded):
    """Programs by concrete signature, bounded as the program cache is: a loop over ever new sequence
    lengths recompiles old ones past the bound, never keeps every one (a weakly referenced class)."""

    def __init__(self):
        super().__init__(program_cache.max_programs)


class PerShape:
    """The callable the backend returns for a graph with symbolic inputs: a program per signature."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, compile_static):
        self.gm = gm
        self.compile_static = compile_static  # (gm, example inputs, fake_mode) -> callable
        self.scalar_positions = [i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor)]
        # host 0-d tensors only read with ``.item()``: Python floats dynamo left unspecialised. Outside
        # dynamo's fake mode their ``.item()`` is no longer a symbolic float AOTAutograd turns back into
        # tensor ops but an op no program can run (``x[0] = s`` after a shape change raised "no tpu
        # lowering for aten._local_scalar_dense"): each value gets its program, as a specialised float
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.item_positions = [i for i, x in enumerate(example_inputs)
                               if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0
                               and i < len(placeholders) and _only_read_by_item(placeholders[i])]
        self.compiled = _Cache()
        _LIVE.add(self.compiled)

    def __call__(self, *args):
        key = (torch.is_grad_enabled(), tuple(_arg_key(a) for a in args),
               tuple(value_key(args[i].item()) for i in self.item_positions))
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.compiled[key] = self._compile(args)
        skip = self.scalar_positions + self.item_positions
        return fn(*[a for i, a in enumerate(args) if i not in skip]) if skip else fn(*args)

    def _compile(self, args):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        gm = specialised(self.gm, {i: args[i] for i in self.scalar_positions},
                         {i: args[i].item() for i in self.item_positions})
        skip = self.scalar_positions + self.item_positions
        tensors = [a for i, a in enumerate(args) if i not in skip]
        # a shape environment, as dynamo's own: AOTAutograd turns Python floats that dynamo passed as
        # 0-d tensors (unspecialised floats) back into tensor operations with it
        # tensors static: a real tensor converted to a fake one under a shape environment gets symbolic sizes
        # (a CPU weight captured by the function became a (s26, 3, 3, 3) input: "unhashable SymInt")
        return self.compile_static(gm, tensors, FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True))


def _only_read_by_item(node: torch.fx.Node) -> bool:
    return bool(node.users) and all(u.op == "call_method" and u.target == "item" for u in node.users)


def _replace_uses(node: torch.fx.Node, value) -> None:
    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, lambda n: value if n is node else n)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: value if n is node else n)


def specialised(gm: torch.fx.GraphModule, values: dict, items: dict | None = None) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose placeholders at the positions in ``values`` (symbolic ints, floats, bools)
    are replaced by those concrete values, and removed; so are the placeholders at the positions in
    ``items`` (host 0-d tensors read only by ``.item()``), their ``.item()`` replaced by the value."""
    graph = copy.deepcopy(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for pos, value in (items or {}).items():
        node = placeholders[pos]
        for user in list(node.users):
            _replace_uses(user, value)
            graph.erase_node(user)
        graph.erase_node(node)
    for pos, value in values.items():
        node = placeholders[pos]
        value = _concrete(value)
        _replace_uses(node, value)
        graph.erase_node(node)
    for node in graph.nodes:  # the graph no longer describes symbolic inputs
        if node.op == "placeholder":
            node.meta.pop("example_value", None)
            node.meta.pop("val", None)
    # no dynamo metadata: AOTAutograd would match it to the placeholders dynamo made (guards of the
    # trace that already ran), and this graph is compiled outside dynamo, for these values only
    return torch.fx.GraphModule(gm, graph)


def _concrete(value):
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    return value

"""In-place writes inside a compiled graph that eager refuses for overlapping memory.

CPU torch refuses an in-place op whose input shares part of the memory it writes (``x[1:].add_(x[:-1])``,
``x[1:] = x[:-1]``, ``x.index_add_(0, i, x[:2])``, ``torch.mul(x[1:], 2, out=x[:-1])``, ``x.t().add_(x)``)
and tpu eager refuses it the same way (``eager/op_path.py``). AOTAutograd's functionalisation turns such
writes into pure ops on copies, so the compiled program computed them silently. Fake tensors keep the
storage relations of views made inside the graph, so dynamo's graph is run once on fakes of the example
inputs with eager's overlap rules checked at every aten call that writes. A graph that breaks them runs
eagerly (dynamo's torch-level graph on the tpu tensors): the failing op raises eager's error, after the
writes before it landed, as on CPU. Inputs that are views of one tensor are handled by ``aliasing.py``.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Overlap(Exception):
    pass


class _Check(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.storages: dict = {}  # fake storage address -> one object per storage (compared with ``is``)

    def storage_of(self, t):
        return self.storages.setdefault(t.untyped_storage()._cdata, object())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor

        from ..eager import overlap_rules
        from ..ops import registry
        from ..tensor import strided

        kwargs = kwargs or {}
        if isinstance(func, torch._ops.OpOverload) and func._schema.is_mutable:
            try:
                overlap_rules.refuse_overlapping_writes(func, args, kwargs, FakeTensor, self.storage_of)
            except RuntimeError as exc:
                raise _Overlap(str(exc)) from exc
            for pos, name in registry.mutated_arguments(func):
                t = kwargs[name] if name in kwargs else args[pos] if pos < len(args) else None
                if isinstance(t, FakeTensor) and strided.self_overlapping(tuple(t.shape), tuple(t.stride())):
                    # functionalisation refuses it (x.unfold(0, 3, 1).fill_(2)); eager fills it
                    raise _Overlap(f"{func} writes a view whose elements share memory")
        return func(*args, **kwargs)


def eager_refuses(gm: torch.fx.GraphModule, example_inputs) -> str | None:
    """The message of eager's overlap refusal that running ``gm`` would raise, or None (also when the
    graph cannot be run on fake tensors: best effort, the compiled program then runs as before). Inputs
    and the graph's attributes (an optimizer's parameters and state) become fakes: nothing real is
    touched, and a real tensor reaching an op stops the check."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode()
    memo: dict = {}

    def fake(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in memo:
            meta = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
            memo[id(x)] = (x, FakeTensor(mode, meta, x.device))
        return memo[id(x)][1]

    class Fakes(torch.fx.Interpreter):
        def get_attr(self, target, args, kwargs):
            return torch.utils._pytree.tree_map(fake, super().get_attr(target, args, kwargs))

        def call_module(self, target, args, kwargs):
            raise _Unchecked()  # a module's real parameters: not checked

    try:
        with mode:
            fakes = [fake(x) for x in example_inputs]
            with _Check(), torch.no_grad():
                Fakes(gm).run(*fakes)
    except _Overlap as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - a graph fakes cannot run (data-dependent ops...): not checked
        return None
    return None


class _Unchecked(Exception):
    pass


def refused(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Does ``gm`` write in place into memory one of its inputs shares, as eager refuses? Then the
    backend returns ``gm`` itself (run eagerly: the failing op raises, the writes before it landed)."""
    from . import aliasing

    if any(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in example_inputs):
        return False
    if not any(aliasing.node_may_write(n) and _may_overlap(n) for n in gm.graph.nodes):
        return False  # (an optimizer step: each write reads tensors of other storages)
    return eager_refuses(gm, example_inputs) is not None


def _may_overlap(node) -> bool:
    """From dynamo's traced values: may this writing call's tensors share memory (two of them one storage,
    or one whose elements overlap)? True when unknown."""
    from ..tensor import strided

    if "out" in node.kwargs:
        return True  # some out= ops refuse any overlap, the written tensor passed as an input too
    seen = set()
    nodes = dict.fromkeys(a for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
                          if isinstance(a, torch.fx.Node))  # one node twice: the same tensor (x.add_(x))
    for a in nodes:
        v = a.meta.get("example_value")
        if a.op == "get_attr":  # a real tensor (an optimizer's state): its tpu storage tells
            v = getattr(a.graph.owning_module, a.target, None)
            if isinstance(v, torch.Tensor) and hasattr(v, "_tpu_storage"):
                key = id(v._tpu_storage)
                if key in seen or strided.self_overlapping(tuple(v.shape), tuple(v.stride())):
                    return True
                seen.add(key)
                continue
        if v is None:
            return True
        if not isinstance(v, torch.Tensor):
            continue
        try:
            key = v.untyped_storage()._cdata
            overlapping = strided.self_overlapping(tuple(v.shape), tuple(v.stride()))
        except Exception:  # noqa: BLE001 - no storage to tell (a subclass, symbolic sizes)
            return True
        if key in seen or overlapping:
            return True
        seen.add(key)
    return False

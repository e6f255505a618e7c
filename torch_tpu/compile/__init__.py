"""Compiled mode: ``torch.compile(module, backend="tpu")``.

Dynamo hands us a torch-level FX graph (parameters and buffers lifted to inputs). AOTAutograd
functionalises it and decomposes it to core aten on meta stand-ins (static shapes), giving a forward
graph (and a backward graph when gradients are needed). Each aten graph becomes ONE XLA program built
from the same op table as eager (``lowering.py``), compiled ahead of time for the example shapes
through ``compile_cache`` (so identical graphs, e.g. repeated transformer blocks, share a program).
AOTAutograd's runtime wrappers write mutated inputs back (``copy_`` on the tpu tensor) and glue
forward and backward into a ``torch.autograd.Function``.

Registered as the dynamo backend "tpu" through the ``torch_dynamo_backends`` entry point, so
``import torch`` never imports dynamo.
"""
from __future__ import annotations

import torch

__all__ = ["tpu_backend", "StaticShapeError"]


class StaticShapeError(RuntimeError):
    pass


_STATIC_MSG = (
    "torch.compile(backend='tpu') requires static shapes: compile with dynamic=False "
    "(a new input shape then compiles once and seen shapes reuse their program). {what}")


def _is_symbolic(v) -> bool:
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not isinstance(getattr(v.node, "maybe_as_int", lambda: None)(), int)
    if isinstance(v, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in v.shape) or any(
            isinstance(s, torch.SymInt) for s in v.stride())
    return False


def _check_static(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        if _is_symbolic(val):
            what = (f"Input {node.target!r} has a dynamic dimension {tuple(val.shape)}"
                    if isinstance(val, torch.Tensor) else f"Input {node.target!r} is a symbolic size")
            raise StaticShapeError(_STATIC_MSG.format(what=what + " (dynamic=True, mark_dynamic, or "
                                                       "automatic dynamic shapes after a shape change)."))


def _tpu_to_meta(x):
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("meta")
    if isinstance(x, str) and (x == "tpu" or x.startswith("tpu:")):
        return torch.device("meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_tpu_to_meta(e) for e in x)
    return x


def _retarget_devices(gm: torch.fx.GraphModule) -> None:
    """Device constants "tpu" -> "meta": the graph is traced on meta stand-ins."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            node.args = _tpu_to_meta(node.args)
            node.kwargs = {k: _tpu_to_meta(v) for k, v in node.kwargs.items()}
    gm.recompile()


def _check_inputs(example_inputs) -> None:
    from ..tensor.tensor import TpuTensor

    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and not isinstance(x, TpuTensor) and x.dim() > 0 \
                and x.device.type not in ("tpu", "meta"):
            raise RuntimeError(
                f"torch.compile(backend='tpu'): graph input {i} is a {x.device} tensor "
                f"{tuple(x.shape)}; move the module and its inputs to 'tpu' first")


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend "tpu" (static shapes, ahead-of-time XLA compilation)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._guards import TracingContext

    from . import attention, lowering

    import torch._dynamo.config as dynamo_config

    # dynamic=True patches this flag while dynamo traces (torch.compile -> _optimize)
    if options.get("dynamic") or not dynamo_config.assume_static_by_default:
        raise StaticShapeError(_STATIC_MSG.format(what="dynamic=True was requested."))
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and getattr(x, "_dynamo_dynamic_indices", None):
            raise StaticShapeError(_STATIC_MSG.format(
                what=f"Graph input {i} {tuple(x.shape)} has dimension(s) "
                     f"{sorted(x._dynamo_dynamic_indices)} marked dynamic (torch._dynamo.mark_dynamic)."))
    _check_static(gm)
    _check_inputs(example_inputs)
    _retarget_devices(gm)
    attention.rewrite_graph(gm)  # attention stays one op (tpu.attention) through AOTAutograd

    ctx = TracingContext.try_get()
    fake_mode = ctx.fake_mode if ctx is not None else None
    if fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode()

    def stand_in(x):
        if not isinstance(x, torch.Tensor):
            return x
        m = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        if x.requires_grad:
            m.requires_grad_(True)
        return fake_mode.from_tensor(m, static_shapes=True)

    fakes = [stand_in(x) for x in example_inputs]
    return aot_module_simplified(
        gm, fakes,
        fw_compiler=lowering.graph_compiler("forward"),
        bw_compiler=lowering.graph_compiler("backward"),
        inference_compiler=lowering.graph_compiler("inference"),
        decompositions=lowering.decompositions(),
    )

"""The dynamo backend "tpu": what a graph dynamo hands over becomes (a program per graph; dynamo's graph
itself when it holds no tpu tensor or eager must run it; per concrete shape under automatic dynamic shapes),
and the context dynamo enters around its calls (no automatic dynamic shapes).
"""
from __future__ import annotations

import torch

from .aot import compile_static
from .inplace_checks import check_inplace_calls
from .static_shapes import check_static, has_symbolic_placeholders, refuse_requested_dynamism


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend "tpu" (static shapes, ahead-of-time XLA compilation)."""
    from torch._guards import TracingContext

    from . import aliasing, floats, overlaps, replay, scalar_checks, specialize

    from . import warm_start

    floats.install(tpu_backend)  # a float that changes between calls becomes an input from its second value on
    floats.note_frame()  # (and a constant zero's guard keeps its sign)
    refuse_requested_dynamism(example_inputs, options)
    capturing = warm_start.capturing()  # (for a later process: serialized.py)
    if _host_only(gm, example_inputs):
        if capturing:
            raise warm_start.NotCapturable("the graph has no tpu tensor")
        return gm  # no tpu tensor anywhere (a CPU tensor passed to a function compiled for the tpu)
    check_inplace_calls(gm)
    scalar_checks.check_constants(gm)
    if overlaps.refused(gm, example_inputs):
        if capturing:
            raise warm_start.NotCapturable("the graph runs eagerly")
        return gm  # eager refuses a write into memory its input shares: run eagerly, the op raises
    if specialize.has_symbolic_inputs(example_inputs) or has_symbolic_placeholders(gm):
        if capturing:
            raise warm_start.NotCapturable("the graph has symbolic shapes")
        # symbolic only through automatic dynamic shapes (requested dynamism was refused above):
        # compiled per concrete signature when called
        return replay.on_check_failure(aliasing.guard(specialize.PerShape(gm, example_inputs, compile_static), gm), gm)
    check_static(gm)
    ctx = TracingContext.try_get()
    compiled = compile_static(gm, example_inputs, ctx.fake_mode if ctx is not None else None)
    # a float input's value is checked as eager checks it (alpha=1e308 on float32 raises)
    live = scalar_checks.guard(replay.on_check_failure(aliasing.guard(compiled, gm), gm), gm, example_inputs)
    if capturing:
        from . import serialized

        return serialized.backend_result(compiled, live, gm, example_inputs)
    return live


def _host_only(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """A graph that neither takes nor makes a tpu tensor (the function compiled for the tpu called with
    CPU tensors): it runs as dynamo's graph, on the CPU, which gives what the function gives uncompiled
    (a program would run on the device and return device tensors)."""
    if not any(isinstance(x, torch.Tensor) for x in example_inputs):
        return False
    if any(isinstance(x, torch.Tensor) and x.device.type != "cpu" for x in example_inputs):
        return False
    for node in gm.graph.nodes:
        for v in torch.utils._pytree.tree_leaves(node.meta.get("example_value", node.meta.get("val"))):
            if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                return False
    return True


def _static_unless_asked():
    """dynamo enters this around every call of a function compiled with backend="tpu" (the documented
    ``backend_ctx_ctor`` hook): no *automatic* dynamic shapes, so with the default ``dynamic=None`` a
    new input shape (or a changed Python int) recompiles for that shape, exactly as ``dynamic=False``
    does, instead of turning the dimension symbolic. Only this backend's calls are affected; an explicit
    ``dynamic=True`` or ``mark_dynamic`` still reaches the backend, which refuses it by name.
    dynamo reads ``backend_ctx_ctor`` only from the backend object it is given: ``torch.compile(fn,
    backend="tpu")`` gives it torch's ``_TorchCompileWrapper``, which has none, so this applies to
    ``torch._dynamo.optimize("tpu")`` only; with ``torch.compile`` and ``dynamic=None`` a changed shape is
    traced symbolic and compiled per concrete shape by ``specialize.PerShape``."""
    import torch._dynamo.config as dynamo_config

    return dynamo_config.patch(automatic_dynamic_shapes=False)


tpu_backend.backend_ctx_ctor = _static_unless_asked

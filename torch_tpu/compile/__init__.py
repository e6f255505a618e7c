"""Compiled mode: ``torch.compile(module, backend="tpu")``.

Dynamo hands us a torch-level FX graph (parameters and buffers lifted to inputs). AOTAutograd
functionalises it and decomposes it to core aten on fake tensors of the tpu device (static shapes), giving
a forward graph (and a backward graph when gradients are needed). Each aten graph becomes ONE XLA program built
from the same op table as eager (``lowering.py``), compiled ahead of time for the example shapes
through the runtime's program cache (``runtime/program_cache.py``: identical graphs, e.g. repeated transformer
blocks, share a program).
AOTAutograd's runtime wrappers write mutated inputs back (``copy_`` on the tpu tensor) and glue
forward and backward into a ``torch.autograd.Function``.

Registered as the dynamo backend "tpu" through the ``torch_dynamo_backends`` entry point, so
``import torch`` never imports dynamo.

Why one module: the backend's entry and the wrappers AOTAutograd calls share its per-graph state.
"""
from __future__ import annotations

import operator

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


def _has_symbolic_placeholders(gm: torch.fx.GraphModule) -> bool:
    """A placeholder whose traced value is symbolic while the example inputs are not (after a shape
    change, dynamo traced ``y`` of (3, 4) with sizes it shares with no size input): also compiled per
    shape (it was refused as "dynamic" although no dynamism was asked for)."""
    return any(node.op == "placeholder" and _is_symbolic(node.meta.get("example_value", node.meta.get("val")))
               for node in gm.graph.nodes)


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


_INPLACE_OPERATORS = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.iand: operator.and_, operator.ior: operator.or_,
    operator.ixor: operator.xor, operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}


# in-place methods that change metadata or autograd state, not values
_METADATA_INPLACE = {"requires_grad_", "detach_", "share_memory_", "resize_", "resize_as_", "set_", "as_strided_",
                     "squeeze_", "unsqueeze_", "transpose_", "t_", "swapdims_", "swapaxes_", "retain_grad_"}

# in-place methods whose CPU kernels resize self to their result (no broadcast-shape check)
_RESIZING_INPLACE = {"addbmm_"}


def _check_inplace_calls(gm: torch.fx.GraphModule) -> None:
    """In-place calls AOTAutograd's functionalisation gets wrong, checked on dynamo's graph (the
    torch-level calls, with their example values), so the compiled program refuses what eager refuses:
    ``int_tensor.mul_(1.5)`` / ``int_tensor *= 1.5`` (eager refuses a result dtype that cannot be cast to
    self's; functionalised into ``mul`` + ``copy_``, it cast silently), and writes into an expanded view
    (``x[:1].expand(3, 6).add_(1)``: eager refuses; ``fill_`` came back as garbage)."""
    from .. import parity

    def meta(a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("example_value", a.meta.get("val"))
            if isinstance(v, torch.Tensor) and not _is_symbolic(v):
                return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(meta(e) for e in a)
        return a

    for node in gm.graph.nodes:
        if node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_") \
                and not node.target.startswith("_"):
            fn = getattr(torch.Tensor, node.target[:-1], None)
        elif node.op == "call_function" and node.target in _INPLACE_OPERATORS:
            fn = _INPLACE_OPERATORS[node.target]
        else:
            continue
        if not node.args or "out" in node.kwargs:
            continue
        args = [meta(a) for a in node.args]
        if not isinstance(args[0], torch.Tensor) or args[0].device.type != "meta":
            continue
        if node.target not in _METADATA_INPLACE and any(
                st == 0 and sz > 1 for sz, st in zip(args[0].shape, args[0].stride())):
            # eager CPU refuses most such writes with this message; AOTAutograd computes the ones it
            # allows (fill_, zero_) wrong (the expanded view's write comes back as garbage)
            name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a single "
                f"memory location. Please clone() the tensor before performing the operation. "
                f"(torch.compile(backend='tpu'): {name} writes an expanded view of size "
                f"{tuple(args[0].shape)}, stride {tuple(args[0].stride())})")
        if fn is None:
            continue
        try:
            result = fn(*args, **{k: meta(v) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 - not a plain functional counterpart; eager reports its own errors
            continue
        if isinstance(result, torch.Tensor):
            if node.target not in _METADATA_INPLACE and node.target not in _RESIZING_INPLACE:
                # ``(x * 2).clamp_max_(y)``, x [5, 1], y [5]: torch's fake kernel resized the intermediate
                # to the broadcast result (its example value reads [5, 5] now; functionalised, the graph
                # returned [5, 5]); eager refuses. Its producer, run again, gives the shape it had.
                parity.refuse_inplace_shape(result.shape, _produced_shape(node.args[0], meta, args[0].shape))
            parity.refuse_inplace_cast(result.dtype, args[0].dtype)


def _produced_shape(node, meta, recorded):
    """The shape ``node``'s own call gives on meta tensors (its example value may have been resized by
    a later in-place call during dynamo's fake run), or ``recorded`` when it cannot be run again."""
    if not isinstance(node, torch.fx.Node) or node.op not in ("call_function", "call_method"):
        return recorded
    fn = getattr(torch.Tensor, node.target, None) if node.op == "call_method" else node.target
    if fn is None or (node.op == "call_method" and node.target.endswith("_")):
        return recorded
    try:
        out = fn(*[meta(a) for a in node.args], **{k: meta(v) for k, v in node.kwargs.items()})
    except Exception:  # noqa: BLE001 - not runnable on meta tensors: keep what dynamo recorded
        return recorded
    return tuple(out.shape) if isinstance(out, torch.Tensor) and out.device.type == "meta" else recorded


def _is_dtensor(x) -> bool:
    return type(x).__name__ == "DTensor" and hasattr(x, "_local_tensor") and hasattr(x, "_spec")


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend "tpu" (static shapes, ahead-of-time XLA compilation)."""
    from torch._guards import TracingContext

    from . import aliasing, floats, overlaps, replay, scalar_checks, specialize

    from . import warm_start

    floats.install(tpu_backend)  # a float that changes between calls becomes an input from its second value on
    floats.note_frame()  # (and a constant zero's guard keeps its sign)
    _refuse_requested_dynamism(example_inputs, options)
    capturing = warm_start.capturing()  # (for a later process: serialized.py)
    if _host_only(gm, example_inputs):
        if capturing:
            raise warm_start.NotCapturable("the graph has no tpu tensor")
        return gm  # no tpu tensor anywhere (a CPU tensor passed to a function compiled for the tpu)
    _check_inplace_calls(gm)
    scalar_checks.check_constants(gm)
    if overlaps.refused(gm, example_inputs):
        if capturing:
            raise warm_start.NotCapturable("the graph runs eagerly")
        return gm  # eager refuses a write into memory its input shares: run eagerly, the op raises
    if specialize.has_symbolic_inputs(example_inputs) or _has_symbolic_placeholders(gm):
        if capturing:
            raise warm_start.NotCapturable("the graph has symbolic shapes")
        # symbolic only through automatic dynamic shapes (requested dynamism was refused above):
        # compiled per concrete signature when called
        return replay.on_check_failure(aliasing.guard(specialize.PerShape(gm, example_inputs, _compile_static), gm), gm)
    _check_static(gm)
    ctx = TracingContext.try_get()
    compiled = _compile_static(gm, example_inputs, ctx.fake_mode if ctx is not None else None)
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


def _refuse_requested_dynamism(example_inputs, options) -> None:
    import torch._dynamo.config as dynamo_config

    # dynamic=True patches this flag while dynamo traces (torch.compile -> _optimize)
    if options.get("dynamic") or not dynamo_config.assume_static_by_default:
        raise StaticShapeError(_STATIC_MSG.format(what="dynamic=True was requested."))
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            continue
        for attr, how in (("_dynamo_dynamic_indices", "marked dynamic (torch._dynamo.mark_dynamic)"),
                          ("_dynamo_unbacked_indices", "marked unbacked (torch._dynamo.mark_unbacked)")):
            dims = getattr(x, attr, None)
            if dims:
                raise StaticShapeError(_STATIC_MSG.format(
                    what=f"Graph input {i} {tuple(x.shape)} has dimension(s) {sorted(dims)} {how}."))


def _holds_tpu_tensors(x) -> bool:
    """A traceable tensor subclass (not the tpu tensor itself) whose inner tensors are on the tpu."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    from ..tensor.tensor import TpuTensor

    if isinstance(x, TpuTensor) or not is_traceable_wrapper_subclass(x) or _is_dtensor(x):
        return False
    names, _ = x.__tensor_flatten__()
    return any(isinstance(getattr(x, name), TpuTensor) for name in names)


def _compile_static(gm: torch.fx.GraphModule, example_inputs, fake_mode=None):
    """AOTAutograd over stand-ins of static shape; each aten graph -> one XLA program."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._subclasses.fake_tensor import FakeTensor

    from ..eager import attention
    from . import composites, lowering

    attention.rewrite_graph(gm)  # attention stays one op (tpu.attention) through AOTAutograd

    if fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode()

    def stand_in(x):
        if not isinstance(x, torch.Tensor):
            return x
        if _is_dtensor(x):  # keep the subclass (its ops trace to functional collectives); fake its shard
            from torch.distributed.tensor import DTensor

            local = x._local_tensor
            m = torch.empty_strided(tuple(local.shape), tuple(local.stride()), dtype=local.dtype, device="meta")
            return DTensor(FakeTensor(fake_mode, m, local.device), x._spec, requires_grad=x.requires_grad)
        if _holds_tpu_tensors(x):
            # a tensor subclass over tpu tensors (torchao's and optimum-quanto's quantized weights): the same
            # subclass over stand-ins of its inner tensors, so the graph is traced through its own ops
            # (int8 -> bfloat16, matmul, scale: one program, XLA fuses the dequantization into the product)
            # and AOTAutograd passes the inner tpu tensors to the program (a dense stand-in of the outer
            # traced a plain linear, and the program was then handed the subclass itself)
            names, ctx = x.__tensor_flatten__()
            inner = {name: stand_in(getattr(x, name)) for name in names}
            return type(x).__tensor_unflatten__(inner, ctx, x.size(), x.stride())
        if x.device.type != "tpu":
            # a host scalar (dynamo passes an unspecialised Python float as a 0-d tensor): dynamo's fake
            # of it remembers the symbolic float its .item() gave, which AOTAutograd turns back into
            # tensor operations (static_shapes=True would make a new fake that forgot it)
            return fake_mode.from_tensor(x)
        # a fake tensor on the tpu device (meta underneath): the trace sees what eager sees, so device
        # constants stay "tpu" and torch.autocast("tpu") applies its policy (kernels keyed on the device)
        meta = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        fake = FakeTensor(fake_mode, meta, x.device)
        if x.requires_grad:
            fake.requires_grad_(True)
            if not x.is_leaf:
                # a non-leaf stays one (as dynamo's own fakes do): AOTAutograd writes a leaf's mutation
                # back with ``detach().copy_()``, hidden from autograd (``x.mul_(s)`` on ``w * 1`` then
                # left ``x`` with its old grad_fn: the gradient skipped the multiplication)
                with torch.enable_grad():
                    fake = torch._C._functions.DelayedError(
                        "Internal error: Tried to backward() through example input", 1)(fake)
        return fake

    fakes = [stand_in(x) for x in example_inputs]

    def compile_with(keep_mutations: bool):
        return aot_module_simplified(
            gm, fakes,
            fw_compiler=_graph_compiler(lowering.graph_compiler("forward")),
            bw_compiler=_graph_compiler(lowering.graph_compiler("backward"), backward=True),
            inference_compiler=_graph_compiler(lowering.graph_compiler("inference"), inference=True),
            decompositions=_decompositions(),
            # an inference graph's writes to its inputs stay in the graph (the program writes them back)
            keep_inference_input_mutations=keep_mutations,
        )

    from .. import parity

    with parity.python_kernels_validated():
        try:
            return compile_with(True)
        except _MisplacedInputOutput:
            return compile_with(False)


_DECOMPOSITIONS = None


def _decompositions() -> dict:
    """The graphs' decomposition table; a decomposed call is validated as eager validates it."""
    global _DECOMPOSITIONS
    if _DECOMPOSITIONS is None:
        from .. import parity
        from . import composites, lowering

        _DECOMPOSITIONS = parity.checked_decompositions({**lowering.decompositions(), **composites.decompositions()})
    return _DECOMPOSITIONS


class _MisplacedInputOutput(Exception):
    """AOTAutograd (torch 2.13) traced a graph that returns an input it writes in the graph, beside
    inputs whose new values the runtime writes back: it put that input among the graph's outputs at the
    position of the user output in the list *without* the written-back inputs' new values, over one of
    them (``x.mul_(2); y[0] = s; return y``, ``x`` requiring grad: ``x`` was overwritten with ``y``).
    The backend then compiles the function again with every input mutation written back by the runtime."""


def _check_input_outputs() -> None:
    from torch._functorch._aot_autograd.schemas import MutationType, OutputType
    from torch._guards import TracingContext

    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    if meta is None or not meta.num_mutated_inp_runtime_indices:
        return
    for info in meta.output_info:
        if info.output_type == OutputType.is_input and info.base_idx is not None \
                and meta.input_info[info.base_idx].mutation_type == MutationType.MUTATED_IN_GRAPH:
            raise _MisplacedInputOutput()


def _graph_compiler(graph_compiler, inference=False, backward=False):
    """AOTAutograd's compiler for one aten graph (``lowering.graph_compiler``), run outside the fake mode
    AOTAutograd traced in (graph constants are real tensors). The program computes every output on the
    device; an output torch puts on the CPU (``x.cpu()`` inside the compiled region) is copied there, as
    eager would return it; an inference graph's outputs that view another output are made views of it
    (``_output_views``)."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        if not backward:
            _check_input_outputs()
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        n_outputs = len(out_node.args[0])
        views = _output_views(gm, out_node) if inference else []  # may add hidden base outputs
        from . import lowering

        with unset_fake_temporarily():
            fallback = _cpu_fallback_ops(gm)
            if fallback:  # TORCH_TPU_CPU_FALLBACK=1 and ops without a lowering: the graph runs eagerly
                run = lowering._op_by_op(gm, "backward" if backward else "inference" if inference else "forward",
                                         fallback)
            else:
                run = graph_compiler(gm, example_inputs)
        host = [i for i, o in enumerate(out_node.args[0][:n_outputs])
                if isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor)
                and o.meta["val"].device.type == "cpu"]
        from . import graph_outputs, warm_start

        if warm_start.capturing():  # kept for later processes: AOTAutograd bundles it (serialized.py)
            from . import serialized

            return serialized.GraphCode(run, n_outputs, views, host)
        return graph_outputs.with_host_outputs(run, n_outputs, views, host)

    return compile_graph




def _cpu_fallback_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Under TORCH_TPU_CPU_FALLBACK=1, the graph's aten ops without a lowering (each runs on the CPU, as in
    eager mode, so the graph runs op by op); empty otherwise (the program build names them in its error)."""
    from .. import config, ops
    from ..ops import registry

    if not config.settings().cpu_fallback:
        return []
    ops.load()
    return sorted({f"{n.target} (no tpu lowering: TORCH_TPU_CPU_FALLBACK=1 runs it on the CPU)"
                   for n in gm.graph.nodes if n.op == "call_function"
                   and isinstance(n.target, torch._ops.OpOverload) and n.target.namespace in ("aten", "prims")
                   and registry.resolve(n.target)[0] is None})


def _output_views(gm, out_node) -> list:
    """Outputs of an inference graph that are views of another output (``a = x * 2; return a, a[0],
    a.t()``): eager returns views of ``a``, so writing through one is seen through ``a``. AOTAutograd
    regenerates such views only when they require grad (its ``alias_of_intermediate`` outputs); other
    backends keep them views because their graphs run view ops on real storage, while the program
    returns each output as its own array. Found on the traced values (one fake storage) and made views
    of the base output with the same size, stride and offset: [(output, base output, size, stride,
    offset)]. The base is an output that covers its whole storage, contiguous; where no output does
    (``return a[0:2], a[1:3]``), the graph node that made that storage becomes a hidden extra output
    (the caller drops it after making the views)."""
    from torch._functorch._aot_autograd.schemas import OutputType
    from torch._guards import TracingContext
    from torch.multiprocessing.reductions import StorageWeakRef

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return []
    vals = out_node.args[0]
    first = meta.num_mutated_inp_runtime_indices
    groups: dict = {}
    for j, info in enumerate(meta.output_info):
        k = first + j
        if info.output_type != OutputType.non_alias or k >= len(vals) or not isinstance(vals[k], torch.fx.Node):
            continue
        v = vals[k].meta.get("val")
        if isinstance(v, torch.Tensor) and v.device.type != "cpu" and v.layout == torch.strided:
            groups.setdefault(StorageWeakRef(v.untyped_storage()), []).append((k, v))
    views = []
    for members in groups.values():
        if len(members) < 2:
            continue
        def whole(v):
            return (isinstance(v, torch.Tensor) and v.storage_offset() == 0 and v.is_contiguous()
                    and v.numel() * v.element_size() == v.untyped_storage().nbytes())

        base = next(((k, v) for k, v in members if whole(v)), None)
        if base is None:
            storage = StorageWeakRef(members[0][1].untyped_storage())
            node = next((n for n in gm.graph.nodes if n.op == "call_function" and whole(n.meta.get("val"))
                         and StorageWeakRef(n.meta["val"].untyped_storage()) == storage), None)
            if node is None:
                continue
            out_node.args = (tuple(out_node.args[0]) + (node,),) + tuple(out_node.args[1:])
            base = (len(out_node.args[0]) - 1, node.meta["val"])
        for k, v in members:
            if k != base[0] and v.dtype == base[1].dtype:
                views.append((k, base[0], tuple(v.shape), tuple(v.stride()), v.storage_offset()))
    return views


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

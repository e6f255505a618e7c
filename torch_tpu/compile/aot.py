"""AOTAutograd over stand-ins of the example inputs (fake tensors on the tpu device, static shapes): the graph
functionalised and decomposed to core aten, each aten graph (forward, backward, inference) handed to
``lowering.graph_compiler`` and so made ONE XLA program; outputs torch puts on the CPU copied there, outputs
that view another output made views of it.
"""
from __future__ import annotations

import torch


def _is_dtensor(x) -> bool:
    return type(x).__name__ == "DTensor" and hasattr(x, "_local_tensor") and hasattr(x, "_spec")


def _holds_tpu_tensors(x) -> bool:
    """A traceable tensor subclass (not the tpu tensor itself) whose inner tensors are on the tpu."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    from ..tensor.tensor import TpuTensor

    if isinstance(x, TpuTensor) or not is_traceable_wrapper_subclass(x) or _is_dtensor(x):
        return False
    names, _ = x.__tensor_flatten__()
    return any(isinstance(getattr(x, name), TpuTensor) for name in names)


def compile_static(gm: torch.fx.GraphModule, example_inputs, fake_mode=None):
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
            fw_compiler=graph_compiler_for(lowering.graph_compiler("forward")),
            bw_compiler=graph_compiler_for(lowering.graph_compiler("backward"), backward=True),
            inference_compiler=graph_compiler_for(lowering.graph_compiler("inference"), inference=True),
            decompositions=decompositions(),
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


def decompositions() -> dict:
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


def graph_compiler_for(graph_compiler, inference=False, backward=False):
    """AOTAutograd's compiler for one aten graph (``lowering.graph_compiler``), run outside the fake mode
    AOTAutograd traced in (graph constants are real tensors). The program computes every output on the
    device; an output torch puts on the CPU (``x.cpu()`` inside the compiled region) is copied there, as
    eager would return it; an inference graph's outputs that view another output are made views of it
    (``output_views``)."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        if not backward:
            _check_input_outputs()
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        n_outputs = len(out_node.args[0])
        views = output_views(gm, out_node) if inference else []  # may add hidden base outputs
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


def output_views(gm, out_node) -> list:
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

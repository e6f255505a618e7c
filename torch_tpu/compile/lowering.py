"""An aten FX graph -> one XLA program, built from the op table eager mode uses.

Why one module: an aten graph's per-node resolution and the program built from it are read together; what could
stand apart already does (special_nodes.py, graph_outputs.py, missing_ops.py ...).
"""
from __future__ import annotations

import operator
import sys

import torch

from .. import parity
from ..errors import warn_at_user
from ..engine import deferred_errors, fused
from ..ops import calling, checks, registry
from ..runtime import caches, counters, dtypes, platform, program_cache, rng, spmd, stable_keys
from ..engine.lazy_values import LazyArray
from ..tensor import strided
from ..tensor.views import MATH_BITS_SEEN
from ..tensor.tensor import TpuTensor, new_full, new_strided, value_of, write
from ..eager import math_bits
from . import data_dependent, graph_outputs, missing_ops, norm_rope, replay, special_nodes, stream_nodes

_counters = counters.counters
_DECOMPS = None
# a compiled graph's program is found on disk by its key: the graph's code (constants digested), its inputs'
# shapes and dtypes, the matmul precision, its collectives' devices and its outputs' layouts
stable_keys.register_kind("graph")


def decompositions() -> dict:
    """Core-aten decompositions, minus ops the op table lowers directly (keeps fused lowerings)."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions

        from .. import ops

        ops.load()
        _DECOMPS = {op: fn for op, fn in core_aten_decompositions().items() if registry.lookup(op) is None}
        _DECOMPS.update(_functional_decompositions(_DECOMPS))
        for op in (torch.ops.aten._linalg_det.default, torch.ops.aten._linalg_slogdet.default):
            _DECOMPS[op] = _det_of_strided(op)
    return _DECOMPS


def _det_of_strided(op):
    """As eager's ``rewrites.det_of_strided``: a real non-contiguous A is factored as itself (the lowering
    factors the transpose of its input), because torch's backward then solves with ``adjoint=True``."""
    def decomposition(A):
        if A.is_complex() or A.is_contiguous():
            return NotImplemented
        return op(A.mT.contiguous())

    return decomposition


_NOT_DECOMPOSED = {"lift", "sym_numel", "is_same_size", "new_empty_strided"}


def _functional_decompositions(taken: dict) -> dict:
    """torch's other decompositions of functional, non-random ops the op table does not lower (training
    batch norm's ``_native_batch_norm_legit_functional``, ``grid_sampler_2d``, ...): eager mode falls back
    to the same table, so the compiled program computes what eager computes."""
    from torch._decomp import decomposition_table

    def functional(op) -> bool:
        s = op._schema
        return not (s.is_mutable or any(r.alias_info is not None for r in s.returns)
                    or any(a.alias_info is not None for a in s.arguments)
                    or torch.Tag.nondeterministic_seeded in op.tags)

    return {op: fn for op, fn in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload) and op not in taken and registry.lookup(op) is None
            and op._opname not in _NOT_DECOMPOSED and functional(op)}


class _Plan:
    """What the program needs per node, resolved once at compile time."""

    def __init__(self, gm: torch.fx.GraphModule):
        from .. import ops

        ops.load()
        data_dependent.refuse(gm)  # x[mask] under fullgraph=True: an error naming it and the ways out
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.lowerings = {}
        self.effects: set = set()  # with_effects(_linalg_check_errors) nodes: device-side checks
        self.tokens: set = set()   # their effect-token placeholders
        self.collectives = {}  # functional-collective node -> fn(args, kwargs) (distributed/compiled.py)
        self.mesh = None       # device ids of their group: the graph is then one SPMD program over it
        self.random = False
        self.device_checks: list = []  # messages of the ops' device-side checks, filled when traced
        self.constants = {}
        # AOTAutograd keeps an inference graph's writes to its inputs in the graph (the last uses:
        # ``copy_(input, new value)``): the program returns the new values, the runner writes them into
        # the input tensors (one storage update each instead of an eager ``copy_`` per input)
        self.writebacks: list[tuple[int, torch.fx.Node]] = []  # (placeholder position, copy_ node)
        # activation checkpointing's recomputed random ops: ``run_and_save_rng_state(op, *args)`` in the
        # forward returns (its rng state, op's outputs); ``run_with_rng_state(state, op, *args)`` in the
        # backward replays op with that state. The state is the op's key data (``special_nodes``); its
        # nodes (torch describes them as CPU tensors) are exempt from the host-tensor check
        self.rng_states: set = set()
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        missing = []
        for node in self.nodes:
            if node.op == "get_attr":
                val = getattr(gm, node.target)
                if isinstance(val, torch.Tensor):
                    if val.device.type == "meta":
                        raise RuntimeError(f"torch.compile(backend='tpu'): graph constant {node.target} "
                                           "has no value (meta)")
                    self.constants[node] = val.detach().cpu()
                continue
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            func = node.target
            if func is torch.ops.higher_order.with_effects:
                self._add_effect(node)
                continue
            if func in special_nodes.RNG_HOPS:
                missing += self._add_rng_hop(node, placeholders)
                continue
            if not isinstance(func, torch._ops.OpOverload):
                raise RuntimeError(f"torch.compile(backend='tpu'): unexpected call {func} in the aten graph")
            if func is torch.ops.aten.copy_.default and node.args[0] in placeholders:
                self.writebacks.append((placeholders.index(node.args[0]), node))
                continue
            if func.namespace in _COLLECTIVE_NAMESPACES:
                self._add_collective(node)
                continue
            low, target = registry.resolve(func)
            if low is not None and target is not func and registry.mutated_arguments(func):
                raise RuntimeError(f"torch.compile(backend='tpu'): in-place {func} left in a "
                                   "functionalised graph")
            if low is None:
                missing.append(node)  # (missing_ops tries eager's route for it on the node's shapes)
                continue
            if low.data_dependent:
                low = special_nodes.static_variant(node, func, low)
            if low.data_dependent:
                raise NotImplementedError(
                    f"torch.compile(backend='tpu'): {func} has a data-dependent output shape and cannot "
                    "be part of a static-shape program; run it eagerly (a graph break) instead")
            self.random |= low.random
            self.lowerings[node] = low
            _check_like_eager(node, func, target)
        _check_host_tensors(placeholders, self.nodes[-1], self.rng_states)
        if missing:
            raise missing_ops.error(missing)
        self.written = {node for _, node in self.writebacks}
        self.precision = torch.get_float32_matmul_precision()

    def _add_effect(self, node) -> None:
        """An ordered side effect AOTAutograd threads a token through: ``_linalg_check_errors`` (a
        device-side check of ``info``); nothing else is supported."""
        op = node.args[1]
        if op is not torch.ops.aten._linalg_check_errors.default:
            raise NotImplementedError(f"torch.compile(backend='tpu'): the side-effecting op {op} "
                                      "(with_effects) is not supported in compiled graphs")
        self.effects.add(node)
        if node.args[0].op == "placeholder":  # the effect token: an input without a value (None at run time)
            self.tokens.add(node.args[0])

    def _add_rng_hop(self, node, placeholders) -> list:
        saving = node.target is special_nodes.RNG_HOPS[0]
        op = node.args[0] if saving else node.args[1]
        low = registry.resolve(op)[0] if isinstance(op, torch._ops.OpOverload) else None
        if low is None:
            return [f"{node.target}({op})"]
        self.random |= low.random
        self.lowerings[node] = low
        if saving:  # getitem(node, 0): the state
            self.rng_states.update(u for u in node.users if u.target is operator.getitem and u.args[1] == 0)
        elif isinstance(node.args[0], torch.fx.Node):
            self.rng_states.add(node.args[0])
        return []

    def _add_collective(self, node) -> None:
        from ..distributed import compiled

        fn, mesh = compiled.lowering_for(node)
        self.collectives[node] = fn
        if mesh is not None and self.mesh not in (None, mesh):
            raise NotImplementedError(
                f"torch.compile(backend='tpu'): collectives over two process groups in one graph "
                f"(devices {self.mesh} and {mesh}) are not supported yet")
        self.mesh = mesh if mesh is not None else self.mesh

    def program(self, *arrays):
        """Run the graph over jax arrays (traced once by jax.jit)."""
        jax = platform.jax()
        env = {}
        it = iter(arrays)
        key = None
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        for n in placeholders:
            env[n] = None if _is_opaque(n.meta.get("val")) or n in self.tokens else next(it)
        if self.random:
            key = rng.make_key(next(it))

        def load(a):
            if isinstance(a, torch.fx.Node):
                return env[a]
            if isinstance(a, (list, tuple)):  # fx's immutable_list too
                return [load(e) for e in a] if isinstance(a, list) else tuple(load(e) for e in a)
            return a

        result = None
        with checks.collecting() as found:
            result = self._interpret(jax, env, load, key, found)
        if self.writebacks:  # the inputs' new values, after the graph's outputs
            result = tuple(result) + tuple(
                calling.conform(node.target, load(node.args[1]), node.args[0].meta["val"], broadcast=True)
                for _, node in self.writebacks)
        if found:  # device-side checks of the graph's ops: one more output
            self.device_checks[:] = [message for _, message in found]  # (the list compile_program was given)
            result = tuple(result) + (checks.first_failure(found),)
        return tuple(result)

    def _interpret(self, jax, env, load, key, found):
        result = None
        for idx, node in enumerate(self.nodes):
            if node.op == "get_attr":
                c = self.constants.get(node)
                if c is not None:
                    env[node] = dtypes.host_to_device(c, platform.jax_device())
                continue
            if node.op == "call_function":
                if node in self.written:  # an input's new value: returned after the outputs (``program``)
                    env[node] = load(node.args[1])  # the graph may also return it (``copy_``'s result)
                    continue
                if node.target is operator.getitem:
                    env[node] = load(node.args[0])[node.args[1]]
                    continue
                args = load(node.args)
                kwargs = {k: load(v) for k, v in node.kwargs.items()}
                if node in self.effects:  # with_effects(token, _linalg_check_errors, info, api_name, ...)
                    from ..ops import linalg  # (JAX: never imported at ``import torch``)

                    linalg.check_errors(args[2], args[3] if len(args) > 3 else node.kwargs["api_name"])
                    env[node] = (args[0],)
                    continue
                collective = self.collectives.get(node)
                if collective is not None:
                    env[node] = collective(args, kwargs)
                    continue
                if node.target in special_nodes.RNG_HOPS:
                    env[node] = special_nodes.run_hop(self, jax, node, args, kwargs, key, idx, _conform_like)
                    continue
                low = self.lowerings[node]
                first_check = len(found)
                try:
                    out = calling.invoke(low, args, kwargs, precision=self.precision,
                                         rng_key=jax.random.fold_in(key, idx) if low.random else None,
                                         results=node.meta.get("val"))
                except Exception as exc:
                    shapes = ", ".join(f"{tuple(a.meta['val'].shape)}:{a.meta['val'].dtype}"
                                       for a in node.all_input_nodes
                                       if isinstance(a.meta.get("val"), torch.Tensor))
                    raise RuntimeError(f"torch.compile(backend='tpu'): lowering {node.target} "
                                       f"({shapes}) failed: {type(exc).__name__}: {exc}") from exc
                for k in range(first_check, len(found)):  # name the op in its checks' messages
                    found[k] = (found[k][0], f"{node.target} in a compiled graph: {found[k][1]}")
                env[node] = _conform_like(node, out)
            elif node.op == "output":
                result = load(node.args[0])
        return result



def _is_host(val) -> bool:
    """A CPU tensor with elements (0-dim ones are scalars; an empty one is, e.g., an effect token)."""
    return isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dim() > 0 and val.numel() > 0


_CPU_INDEX_USERS = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
                    torch.ops.aten._unsafe_index.Tensor, torch.ops.aten._unsafe_index_put.default}


def _check_host_tensors(placeholders, output, rng_states=frozenset()) -> None:
    """CPU tensors may enter the program only to be moved to the device (a CPU mask captured by a
    compiled function and moved with ``.to(x.device)``: the runner uploads it with the call); CPU
    computation inside the graph, or a CPU result, would run on the device and come back on it."""
    for i, p in enumerate(placeholders):
        if p in rng_states or not _is_host(p.meta.get("val")):
            continue
        for user in p.users:
            if user.target in _CPU_INDEX_USERS and p is not user.args[0] and p not in user.args[2:]:
                continue  # an index of a device tensor (x[cpu_index], as eager and CUDA allow): uploaded
            device = user.kwargs.get("device") if user.target is torch.ops.aten._to_copy.default else None
            if device is None or torch.device(device).type != "tpu":
                raise RuntimeError(
                    f"torch.compile(backend='tpu'): graph input {i} is a cpu tensor "
                    f"{tuple(p.meta['val'].shape)} that {user.target} uses on the CPU; move it (and the "
                    "module) to 'tpu' first, or compute it outside the compiled function")
    for node in torch.utils._pytree.tree_leaves(output.args):
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else node
        if node not in rng_states and _is_host(val) and not _read_back(node):
            raise RuntimeError(f"torch.compile(backend='tpu'): the graph returns a cpu tensor "
                               f"{tuple(val.shape)} computed inside it; compute it outside the compiled function")


def _read_back(node) -> bool:
    """A CPU result that comes from a tpu value copied to the host inside the graph (``x.cpu()``,
    ``x.tolist()``, ``.numpy()``: dynamo puts the copy in the graph), possibly viewed or computed on
    after the copy: the program computes it on the device and the runner copies it to the host
    (``aot.graph_compiler_for``), which gives what eager gives."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if not isinstance(n, torch.fx.Node) or n in seen:
            continue
        seen.add(n)
        if n.target is torch.ops.aten._to_copy.default and isinstance(n.args[0], torch.fx.Node):
            src = n.args[0].meta.get("val")
            if isinstance(src, torch.Tensor) and src.device.type != "cpu":
                return True
        todo.extend(n.all_input_nodes)
    return False


def _check_like_eager(node, func, target) -> None:
    """Eager mode's argument checks for this call (torch's CPU kernels make them, its meta kernels don't:
    ``float32 @ float64``, ``int ** -1``), on the nodes' fake values: a compiled program refuses what
    eager refuses, at compile time."""
    def fake(a):
        if isinstance(a, torch.fx.Node):
            return a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(fake(e) for e in a) if isinstance(a, tuple) else [fake(e) for e in a]
        return a

    parity.check_call(func, target, fake(node.args), {k: fake(v) for k, v in node.kwargs.items()},
                      result=node.meta.get("val"))


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")


def _is_opaque(x) -> bool:
    """A script object input (a DeviceMesh's process groups under DTensor): no value in the program."""
    return isinstance(x, torch.ScriptObject) or type(x).__name__ == "FakeScriptObject"


def _conform_like(node, out):
    """A lowering's outputs, conformed to the dtypes and shapes torch promises (node.meta['val'])."""
    val = node.meta.get("val")  # (an in-place node's value broadcasts into its tensor, as in eager)
    spread = isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    if isinstance(val, (list, tuple)):
        return type(out)(calling.conform(node.target, o, v, spread) if isinstance(v, torch.Tensor) else o
                         for o, v in zip(out, val)) if isinstance(out, (list, tuple)) else out
    return calling.conform(node.target, out, val, spread) if isinstance(val, torch.Tensor) else out


def _signature(gm: torch.fx.GraphModule, inputs) -> tuple:
    sig = []
    for x in inputs:
        if _is_opaque(x):
            sig.append(("opaque",))
        elif isinstance(x, torch.Tensor):
            sig.append((tuple(x.shape), x.dtype))
        else:
            sig.append(("const", x))
    return tuple(sig)


def _user_kernel_ops(gm) -> list[str]:
    """The ops of ``gm`` that eager tpu runs as Python code, which no program can hold: a user's kernel
    for the tpu device (``torch.library`` custom op with ``register_kernel("tpu")``), or a custom op with
    no lowering whose default implementation is Python (functionalised ones too, if mutating)."""
    from .. import ops
    from ..eager.router import has_user_kernel

    ops.load()
    hops = {torch.ops.higher_order.auto_functionalized, getattr(torch.ops.higher_order, "auto_functionalized_v2", None)}
    found = set()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        op = n.args[0] if n.target in hops else n.target
        if not isinstance(op, torch._ops.OpOverload) or op.namespace in ("aten", "prims", "tpu") \
                or op.namespace in _COLLECTIVE_NAMESPACES:
            continue
        if has_user_kernel(op) or registry.resolve(op)[0] is None:
            found.add(str(op))
    return sorted(found)


def _op_by_op(gm, kind: str, ops: list[str]):
    """A graph holding user kernels runs as eager tpu ops (each op as strict or fused eager runs it)."""
    warn_at_user(f"torch.compile(backend='tpu'): the {kind} graph calls {', '.join(ops)}, which no XLA program "
                 "can hold; that graph runs op by op (eagerly), not as one program", RuntimeWarning)

    from torch._higher_order_ops import auto_functionalize as af

    dense = {af.auto_functionalized: af.auto_functionalized_dense}
    if hasattr(af, "auto_functionalized_v2"):
        dense[af.auto_functionalized_v2] = af.auto_functionalized_v2_dense

    class Eager(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            fn = dense.get(target)  # a functionalised mutating op: clone, run the op, return the clones
            return fn(*args, **kwargs) if fn is not None else super().call_function(target, args, kwargs)

    def run(args):
        return Eager(gm).run(*args)

    run._boxed_call = True
    return run


def graph_compiler(kind: str):
    """AOTAutograd's fw/bw/inference compiler: the aten graph -> a boxed callable over tpu tensors."""

    @platform.with_x64
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        for x in example_inputs:
            if not isinstance(x, (torch.Tensor, type(None), int, float, bool)) and not _is_opaque(x):
                raise RuntimeError(f"torch.compile(backend='tpu'): unsupported graph input {type(x)}")
        stream_calls = stream_nodes.take(gm)  # run on the host beside the program (compile/stream_nodes.py)
        user = _user_kernel_ops(gm)
        if user:
            return stream_nodes.around(_op_by_op(gm, kind, user), *stream_calls)
        norm_rope.fuse(gm)  # FLUX's q/k norm and rotary embedding as one op (one kernel on a TPU)
        plan = _Plan(gm)
        jax = platform.jax()
        tokens = {i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder") if n in plan.tokens}
        tensor_pos = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and i not in tokens]
        example_inputs = special_nodes.concrete_rng_states(gm, plan, example_inputs)
        specs = [jax.ShapeDtypeStruct(tuple(example_inputs[i].shape), dtypes.to_jax_dtype(example_inputs[i].dtype))
                 for i in tensor_pos]
        if plan.random:
            key_data = rng.peek_key_data()  # the key data the runner passes (rng.next_key_data)
            specs.append(jax.ShapeDtypeStruct(key_data.shape, key_data.dtype))
        # identical graphs (repeated blocks) share one program: the key is the graph's code + inputs
        # graph constants (a lifted ``torch.tensor(s)``) are baked into the program: keyed by their
        # contents (keyed by ``id(gm)``, a freed graph's id reused by a new one ran the old constants)
        code_key = gm.code if not plan.constants else (gm.code, _constants_key(plan.constants))
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        out_vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in out_node.args[0]]
        layouts = _user_output_layouts(kind, out_vals)
        key = ("graph", kind, code_key, _signature(gm, example_inputs), plan.precision, plan.mesh, layouts)
        program = plan.program if layouts is None else _in_memory_order(plan.program, layouts)
        # the checks' messages are learnt when the program is traced: a program whose messages were
        # forgotten (a bounded cache) is traced again, never run without its checks
        prog = program_cache.lookup(key) if key in _DEVICE_CHECKS else None
        if prog is None:
            if len(tensor_pos) + len(tokens) != len([x for x in example_inputs if not _is_opaque(x)]):
                raise RuntimeError("torch.compile(backend='tpu'): non-tensor graph inputs are not supported "
                                   "with static shapes")
            if plan.mesh is None:
                # the checks' messages are learnt by tracing the program, or come with it when it is found
                # on disk by its key (a warm process, which then does not trace it)
                prog = program_cache.compile_program(key, _named(program, kind), tuple(specs),
                                                     checks=plan.device_checks)
            else:  # functional collectives: one SPMD program over the group's devices
                prog = spmd.compile_program(key, _named(program, kind), tuple(specs), plan.mesh,
                                            what=f"a compiled {kind} graph with collectives")
            counters.add("graph_compiles", 1)
            _DEVICE_CHECKS[key] = plan.device_checks

        out_dtypes = [v.dtype if isinstance(v, torch.Tensor) else _scalar_type(v) for v in out_vals]
        what = f"the compiled graph {_named(program, kind).__name__}"
        spec = GraphProgram(key, _DEVICE_CHECKS.get(key, []), dict(
            out_dtypes=out_dtypes, random=plan.random, what=what, written=[i for i, _ in plan.writebacks],
            layouts=layouts, tokens=frozenset(tokens),
            aliases=graph_outputs.output_aliases(gm, out_node, {i for i, _ in plan.writebacks}),
            in_vals=[n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"], out_vals=out_vals))
        return stream_nodes.around(spec.runner(prog), *stream_calls)

    return compile_graph


class GraphProgram:
    """One compiled graph's program (by its key) and how its runner calls it: everything the runner needs
    but the executable, in plain values, so a later process rebuilds the runner from disk without the graph
    (``warm_start.py`` keeps it with the compiled module's guards)."""

    def __init__(self, key, device_checks, how: dict):
        self.key, self.device_checks = key, list(device_checks)
        how = dict(how)
        how["aliases"] = {k: (src, i, graph_outputs.TensorMeta.of(view)) for k, (src, i, view) in how["aliases"].items()}
        used = {("in" if src == "in" else "out", i) for src, i, _ in how["aliases"].values()}
        how["in_vals"] = [graph_outputs.TensorMeta.of(v) if ("in", i) in used else None
                          for i, v in enumerate(how["in_vals"])]
        how["out_vals"] = [graph_outputs.TensorMeta.of(v) if ("out", i) in used else None
                           for i, v in enumerate(how["out_vals"])]
        self.how = how

    def runner(self, prog):
        run = _runner(prog, device_checks=self.device_checks, **self.how)
        run._boxed_call = True  # AOTAutograd passes one list (and lets us free it)
        run.program = self
        return run

    @platform.with_x64
    def load(self):
        """The runner over this program as memory or the disk cache holds it under its key (never traced),
        or None when neither holds it with the same device-side checks."""
        prog = program_cache.lookup(self.key)
        if prog is None or list(_DEVICE_CHECKS.get(self.key, ())) != self.device_checks:
            found = program_cache.load_by_key(self.key)
            if found is None or list(found[1]) != self.device_checks:
                return None
            prog = found[0]
            program_cache.store(self.key, prog)
            _DEVICE_CHECKS[self.key] = list(self.device_checks)
        return self.runner(prog)


def _constants_key(constants: dict) -> tuple:
    import hashlib

    key = []
    for node, c in constants.items():
        data = c.detach().reshape(-1).contiguous()
        digest = hashlib.sha256(data.view(torch.uint8).numpy() if data.numel() else b"").hexdigest()
        key.append((node.target, tuple(c.shape), str(c.dtype), digest))
    return tuple(key)


_DEVICE_CHECKS: dict = caches.register("compiled graph checks", caches.Bounded(program_cache.max_programs))  # program key -> check messages


def _named(program, kind: str):
    """The graph's program named after what was compiled (status line, traces, compile log), as fused mode
    names its graphs after the module: compiled.<module class or function>.<forward|backward|inference>."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    codes = getattr(ctx, "traced_code", None) or []
    where = _compiled_what(codes[0]) if codes else "graph"

    def fn(*arrays):
        return program(*arrays)

    fn.__name__ = fn.__qualname__ = f"compiled.{where}.{kind}"
    return fn


def _compiled_what(first) -> str:
    """The class of the module whose call is being compiled, else the compiled function's name. dynamo's
    first traced code is the frame it compiled: a module's ``forward`` or a decorator's wrapper around it
    (diffusers' ``apply_lora_scale``: ``...<locals>.wrapper``, which named every transformer's graph
    "compiled.wrapper"), or a function. The module is the innermost one being called on this thread (its
    ``__call__`` waits for the compile; ``torch.compile(module)``'s wrapper is unwrapped)."""
    method = bool(first.co_argcount) and first.co_varnames[0] == "self"
    if method or "<locals>" in first.co_qualname:
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_argcount and code.co_varnames[0] == "self":
                this = frame.f_locals.get("self")
                if isinstance(this, torch.nn.Module) and not isinstance(this, torch.fx.GraphModule):
                    return type(getattr(this, "_orig_mod", this)).__name__
            frame = frame.f_back
    return first.co_qualname.rpartition("<locals>.")[2]


def _user_output_layouts(kind: str, out_vals):
    """Per graph output, None or the (size, stride) of a user-visible result torch lays out densely in
    another order than contiguous (channels_last ...), as eager mode keeps it (``strided.memory_order``);
    None when there is none. Mutated inputs' new values and tensors saved for backward keep the logical
    order (the runtime copies or reads them back)."""
    if kind == "backward":
        return None
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return None
    first = meta.num_mutated_inp_runtime_indices
    end = first + meta.num_outputs + meta.num_intermediate_bases
    layouts = [None] * len(out_vals)
    for k in range(first, min(end, len(out_vals))):
        v = out_vals[k]
        if isinstance(v, torch.Tensor) and strided.memory_order(tuple(v.shape), v.stride()) is not None:
            layouts[k] = (tuple(v.shape), tuple(v.stride()))
    return tuple(layouts) if any(layouts) else None


def _in_memory_order(program, layouts):
    def fn(*arrays):
        outs = program(*arrays)
        return tuple(o if lay is None else strided.to_memory_order(o, strided.memory_order(*lay))
                     for o, lay in zip(outs, layouts)) + tuple(outs[len(layouts):])

    return fn


def _scalar_type(v):
    """The Python type of a graph output that is a number (a size computed from a shape a per-shape
    program fixed, ``specialize.py``): the program returns it as an array, the caller gets the number."""
    if isinstance(v, (bool, torch.SymBool)):
        return bool
    if isinstance(v, (int, torch.SymInt)):
        return int
    if isinstance(v, (float, torch.SymFloat)):
        return float
    return None


def _stored_array(x: TpuTensor, new):
    """The array a view with math bits stores for the values ``new`` it is to mean (a compiled graph's
    write into an input computed on ``resolved`` values): conj and neg are their own inverses."""
    if x.is_conj():
        new = platform.jax().numpy.conj(new)
    if x.is_neg():
        new = -new
    return new


def _runner(prog, out_dtypes, random: bool, device_checks: list, what: str, written: list[int], layouts=None,
            tokens=frozenset(), aliases=None, in_vals=(), out_vals=()):
    device = None
    aliases = aliases or {}
    in_aliased = sorted({i for src, i, _ in aliases.values() if src == "in"})

    @platform.with_x64
    def run(args):
        nonlocal device
        targets = [args[i] for i in written]  # inputs the graph writes (their new values come last)
        for t in targets:
            if isinstance(t, torch.Tensor) and t.is_inference() and not torch.is_inference_mode_enabled():
                # eager's in-place kernels refuse this; the program's write-back bypasses them
                raise RuntimeError(
                    "torch.compile(backend='tpu'): inplace update to inference tensor outside InferenceMode "
                    f"is not allowed (a graph input {tuple(t.shape)}:{t.dtype} the graph writes). You can "
                    "make a clone to get a normal tensor before doing inplace update.")
        arrays, deferred = [], []  # (deferred: the values as held, with their device-side checks' lineage)
        no_math_bits = not MATH_BITS_SEEN[0]
        for i, x in enumerate(args):
            if i in tokens:  # an effect token (None, or an empty tensor): no value in the program
                continue
            if type(x) is TpuTensor and no_math_bits and x._tpu_full:
                # the usual input (a parameter, an activation): its storage's computed array, as is
                arr = x._tpu_storage.array
                if arr is not None and type(arr) is not LazyArray:
                    deferred.append(arr)
                    arrays.append(arr)
                    continue
            if isinstance(x, TpuTensor):
                x = math_bits.resolved(x) if x.is_conj() or x.is_neg() else x  # the values a bit view means
                deferred.append(value_of(x))
                arrays.append(fused.materialize(deferred[-1]))  # a value deferred by fused mode runs first
            elif isinstance(x, torch.Tensor):
                if device is None:
                    device = platform.jax_device()
                arrays.append(dtypes.host_to_device(x.detach(), device))
        inputs = {i: args[i] for i in in_aliased}
        args.clear()  # boxed convention: let inputs die early
        if random:
            arrays.append(rng.next_key_data())
        outs = replay.launch(prog, arrays, what, deferred)
        program_cache.note_launch(outs, prog)
        _counters["executions"] += 1
        if device_checks:
            # a failure poisons the results (the call raised on CPU); inputs it wrote stay readable, as
            # eager's in-place writes with a bad index do
            outs, code = outs[:-1], outs[-1]
            deferred_errors.add(code, device_checks, "torch.compile(backend='tpu') graph",
                                outs[:len(outs) - len(targets)])
            replay.verify_now()  # launch blocking: a failed check raises before any write-back
        if targets:
            news = outs[len(outs) - len(targets):]
            outs = outs[:len(outs) - len(targets)]
            for t, new in zip(targets, news):
                if isinstance(t, TpuTensor):
                    write(t, _stored_array(t, new))
                else:  # a host tensor input
                    t.copy_(new_full(new, t.dtype).cpu())
        result = []
        for k, (o, dt, lay) in enumerate(zip(outs, out_dtypes, layouts or [None] * len(out_dtypes))):
            if dt in (bool, int, float):  # a Python number the graph returns (x.shape[0] * 3)
                result.append(o if o is None or type(o) is dt else dt(o))
            elif dt is None or o is None:
                result.append(o)
            else:
                result.append(new_full(o, dt) if lay is None else new_strided(o, lay[0], lay[1], dt))
        for k, (src, i, view) in aliases.items():  # outputs aliasing an input or an earlier output
            if src == "in":
                alias = graph_outputs.alias_of(inputs[i], in_vals[i], view)
            else:
                alias = graph_outputs.alias_of(result[i], out_vals[i], view)
            if alias is not None:
                result[k] = alias
        return result

    return run

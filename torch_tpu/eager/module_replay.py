"""Module calls recorded once and replayed as one program: eager speed for any model from what its modules
really run, with no copy of a model's code.

Which calls: the repeated blocks of a model (diffusers' ``_repeated_blocks``, the children of a ``ModuleList``
of one class: ``module_graphs.repeated_blocks``), found when a model moves to the device (``module.to("tpu")``)
or is first called in fused mode. Each gets a ``Replayer`` as its ``_compiled_call_impl`` (the slot
``module.compile()`` uses: torch's ``Module.__call__`` calls it in place of ``_call_impl``; dynamo ignores it
when it traces a parent, and a ``compile()`` of the block replaces it).

Recording: a block's call, in strict or fused eager, without grad mode (``torch.no_grad``,
``torch.inference_mode``), runs its Python as it is (hooks, patches and all) with every op recorded into one
fused graph (``engine/fused.py``), which then compiles and runs as one program. The recording keeps where each
of the program's inputs comes from (an argument, a tensor of the module tree, or a constant the call made),
where each output goes (a returned tensor, a view of one, a tensor of the tree written in place) and what the
call depended on (``replay_guards.py``: its arguments' layouts, the module tree's state, global state, the code
that ran and what that code looked up).

Replay: a later call whose arguments have the same signature and whose guards all hold runs the program on the
current values of those inputs (one launch, no Python of the block), and returns tensors laid out as the
recorded call returned them. Anything that changed records again.

A call is not recorded (it runs its Python; after two refusals the block stops trying) when a replay could
differ from running the Python: it reads a value on the host (``.item()``, ``.cpu()``, a data-dependent op),
draws random numbers, keeps a value it computed anywhere but in its
result or a tensor it writes (a cache, a list, an attribute), changes its module's state, prints or logs, reads
a tensor that is neither an argument nor its module's, or when hooks watch it or its submodules (diffusers' hooks
around a block's own forward excepted: its replayer then takes that forward's place inside them, ``_hooked_forward``).

Strict eager keeps one op at a time outside recorded blocks; a recorded block is one program, and an error
while it runs falls back to the block's Python, op by op, so the error names the op. ``TORCH_TPU_MODULE_REPLAY=0``
turns replay off; ``TORCH_TPU_REPLAY_VERIFY=1`` runs the Python beside every replay and raises
``ReplayMismatch`` where the two differ (the test suite sets it).

Why one module: recording, replaying and verifying a call share the record's structure; the guards live apart
(replay_guards.py).
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import types
import weakref

import numpy as np
import torch

from .. import config
from ..engine import deferred_errors, fused, graph_keys, launchers, module_graphs, poisoned, strict_line
from ..engine.fused import LazyArray
from ..engine.graph_sets import value_key
from ..runtime import counters, platform, program_cache
from ..tensor.tensor import TpuStorage, TpuTensor, new_view, value_of
from . import autocast, replay_guards
from .replay_guards import Refused

_counters = counters.counters
_LOG = logging.getLogger("torch_tpu")
_Future = concurrent.futures.Future
_MAX_REFUSALS = 2   # recordings refused before a block stops trying (until it moves to the device again)
_NUMBERS = graph_keys.PY_NUMBERS


replay_guards.own_hook(module_graphs.is_own_hook)


class ReplayMismatch(RuntimeError):
    """Under ``TORCH_TPU_REPLAY_VERIFY=1``: a replayed module call and its Python disagreed."""


class _Thread(threading.local):
    recording = 0   # depth of module calls being recorded on this thread (a block inside one runs its Python)


_THREAD = _Thread()


# --- installing ---------------------------------------------------------------------------------------------
class Replayer:
    """A block's ``_compiled_call_impl``: its call, replayed where a recording serves it. Or, for a block whose
    forward diffusers' hooks wrap (group offloading: ``inner``), the innermost forward they call: the hooks' Python
    runs around it at every call (the onload of this group and the prefetch of the next, the offload after)."""

    __slots__ = ("module", "glue", "inner", "replays", "refusals", "reason", "__weakref__")

    def __init__(self, module, glue: bool, inner=None):
        self.module = weakref.ref(module)
        self.glue = glue  # a model's child around its blocks (an embedding), not a block: see ``candidates``
        self.inner = inner        # the module's own forward, bound (hooks around it), or None (the whole call)
        self.replays: dict = {}   # call signature -> Replay
        self.refusals = 0
        self.reason = ""          # why the latest recording was refused

    def python(self, m):
        """What runs the call's Python: the module's whole call, or its own forward inside the hooks."""
        return self.inner if self.inner is not None else m._call_impl

    def __call__(self, *args, **kwargs):
        m = self.module()
        if torch.compiler.is_compiling():  # dynamo traces the block itself: its Python, as always
            return self.python(m)(*args, **kwargs)
        return _call(m, self, args, kwargs)

    def __reduce__(self):  # (a pickled or copied module holds no replayer: Module.__getstate__ drops it too;
        if self.inner is not None:  # inside hooks, the copy's hooks call its own forward)
            return (types.MethodType, (self.inner.__func__, self.inner.__self__))
        return (_no_replayer, ())


def _no_replayer():
    return None


def candidates(root) -> list:
    """(module, glue) of the modules of ``root`` whose calls are recorded and replayed: its repeated blocks
    (glue False), and its direct children that hold no block (glue True: a model's embeddings and the norms
    around its blocks, one program each rather than one op at a time in strict eager, or ops recorded at every
    call in fused eager). A layer with parameters and no submodule (a Linear, a norm: one op or two) and torch's
    own parameterless layers (SiLU, Dropout) are left to run as they are: a replay's checks would cost more than
    their op, and in fused eager they join their neighbours' graph (a recording refused for its size split that
    graph in the first calls only, and the graph whole was a new program in the third call)."""
    blocks = module_graphs.repeated_blocks(root)
    inside = {id(m) for b in blocks for m in b.modules()}
    found = [(b, False) for b in blocks]
    for child in root.children():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)) or id(child) in inside:
            continue
        if any(id(m) in inside for m in child.modules()):
            continue  # it holds blocks: those are recorded, and its own glue runs op by op
        if next(child.children(), None) is None and (next(child.parameters(), None) is not None
                                                     or type(child).__module__.startswith("torch.nn.")):
            continue  # a layer, or one of torch's own parameterless layers (an activation, a dropout)
        found.append((child, True))
    return found


def _hooked_forward(block):
    """The innermost forward of a block whose forward diffusers' hooks wrap (``HookRegistry``: group offloading),
    as the hooks hold it (the function reference whose ``forward`` attribute it is), if a replayer may take its
    place: the block's own class forward, bound, or a replayer already there."""
    registry = block.__dict__.get("_diffusers_hook")
    refs = getattr(registry, "_fn_refs", None)
    if not refs or "forward" not in block.__dict__ or getattr(refs[0], "original_forward", None) is not None:
        return None  # (a hook that replaces the forward itself: a cache, its Python decides)
    forward = refs[0].forward
    if type(forward) is Replayer or (getattr(forward, "__self__", None) is block
                                     and getattr(forward, "__func__", None) is type(block).forward):
        return refs[0]
    return None


def install(root) -> int:
    """Give each candidate module of ``root`` a replayer (modules with a compiled call of their own keep it);
    returns how many have one."""
    count = 0
    for block, glue in candidates(root):
        ref = _hooked_forward(block)
        if ref is not None:
            if type(block.__dict__.get("_compiled_call_impl")) is Replayer:
                block._compiled_call_impl = None  # (given before the hooks: it would refuse them at every call)
            if type(ref.forward) is Replayer:
                ref.forward.refusals = 0
            else:
                ref.forward = Replayer(block, glue, inner=ref.forward)
            count += 1
            continue
        current = block.__dict__.get("_compiled_call_impl")
        if current is None:
            block._compiled_call_impl = Replayer(block, glue)
            count += 1
        elif type(current) is Replayer:
            current.refusals = 0  # moved again: a refused block may serve now (its tensors were elsewhere)
            count += 1
    return count


def replayers(root) -> list:
    """(name, Replayer) of every block of ``root`` that has one (for tests and ``status``)."""
    found = []
    for name, m in root.named_modules():
        ref = _hooked_forward(m)
        r = ref.forward if ref is not None else m.__dict__.get("_compiled_call_impl")
        if type(r) is Replayer:
            found.append((name, r))
    return found


def status(root) -> list:
    """One line per block with a replayer: its recordings and, where refused, why (for users and tests)."""
    lines = []
    for name, r in replayers(root):
        state = f"{len(r.replays)} recorded" + (f"; refused {r.refusals}x: {r.reason}" if r.refusals else "")
        lines.append(f"{name}: {state}")
    return lines


# --- a call ---------------------------------------------------------------------------------------------------
def _serves(m) -> bool:
    """Whether a call of ``m`` may be recorded or replayed at all (cheap, checked first)."""
    if torch.is_grad_enabled() or _THREAD.recording:
        return False
    current = launchers.current
    if current is launchers.LAUNCH_BLOCKING or current is launchers.FORKED:
        return False
    return config.settings().module_replay


def _call(m, replayer: Replayer, args, kwargs):
    if not _serves(m):
        return replayer.python(m)(*args, **kwargs)
    sig, leaves = replay_guards.signature(args, kwargs)
    if sig is None:
        return replayer.python(m)(*args, **kwargs)
    replay = replayer.replays.get(sig)
    if replay is not None:
        if replay.holds():
            try:
                if config.settings().replay_verify:
                    return _verify(m, replayer, replay, args, kwargs, leaves)
                return _replay(m, replayer, replay, args, kwargs, leaves)
            except _Stale as stale:
                _LOG.debug("torch_tpu: %s records again: its input %s is stale", type(m).__name__, stale)
        else:
            _LOG.debug("torch_tpu: %s records again: %s", type(m).__name__, replay.difference())
        del replayer.replays[sig]
    if replayer.refusals >= _MAX_REFUSALS:
        return replayer.python(m)(*args, **kwargs)
    result, replay = _record(m, replayer, args, kwargs, leaves, 3 if replayer.glue else 1)
    if isinstance(replay, Replay):
        replayer.replays[sig] = replay
    else:
        replayer.refusals += 1
        replayer.reason = replay
        _counters["module_replay_refusals"] += 1
        _LOG.debug("torch_tpu: %s's call is not replayed: %s", type(m).__name__, replay)
    return result


# --- what a recording keeps -----------------------------------------------------------------------------------
class Replay:
    """A recorded call: its guards, its program and where the program's inputs and outputs go."""

    __slots__ = ("state", "tree", "watch", "key", "prog", "inputs", "read", "structure", "outputs", "avals",
                 "storages", "results", "spec", "what")

    def holds(self) -> bool:
        return (replay_guards.global_state() == self.state and self.tree.holds() and self.watch.holds())

    def difference(self) -> str:
        if replay_guards.global_state() != self.state:
            return "grad mode, autocast, the default dtype, matmul precision, a mode or the eager mode changed"
        return self.tree.difference() or self.watch.difference() or "nothing"


class _Stale(Exception):
    """A program input the recording read from a value computed on the side (a storage read whole in another
    shape) that a write since made stale: the call records again."""


def _tensor_of(kind: str, index: int, leaves, tree):
    return leaves[index] if kind == "arg" else tree.tensor(index)


def _fetch(source, leaves, tree):
    """The current value of one program input."""
    kind = source[0]
    if kind == "const":
        return source[1]
    t = _tensor_of(kind, source[1], leaves, tree)
    storage = t._tpu_storage
    rep = source[2]
    if rep == "array":
        a = storage.array
        if a is None:
            return storage.value()
    elif rep == "cache":
        a = value_of(t)  # (a module's view written in place since: its value computed again)
    else:
        reshaped = storage.reshaped
        a = reshaped[1] if reshaped is not None and reshaped[0] == storage.version else None
        if a is None:  # a module's storage written in place since it was read whole in another shape
            raise _Stale(source)
    if type(a) is LazyArray and a.concrete is not None:
        return a.concrete
    return a


# --- replay ---------------------------------------------------------------------------------------------------
def _replay(m, replayer: Replayer, replay: Replay, args, kwargs, leaves):
    if launchers.current is launchers.FUSED:
        module_graphs.start_block(args, kwargs)  # (the glue before it is a graph of its own, as for its Python)
    tree = replay.tree
    with platform.X64():
        arrays = [_fetch(s, leaves, tree) for s in replay.inputs]
        # values computed from device-side checks not read yet give the results that lineage (and one
        # computed from a failed check raises here, as the call's first op would: engine/poisoned.py)
        taken = poisoned.lineage(arrays, replay.what) if poisoned.active else None
        try:
            outs = _launch(replay, arrays)
            if taken is not None:
                poisoned.mark(outs, taken, arrays)
        except Exception as exc:  # noqa: BLE001  (the call's Python raises the op's own error, op by op)
            _LOG.debug("torch_tpu: %s's recorded program failed (%s): its Python runs", type(m).__name__, exc)
            replayer.replays.clear()
            replayer.refusals = _MAX_REFUSALS
            replayer.reason = f"its recorded program failed: {type(exc).__name__}: {exc}"
            return replayer.python(m)(*args, **kwargs)
        _counters["module_replays"] += 1
        return _results(replay, outs, leaves)


def _launch(replay: Replay, arrays: list):
    prog = replay.prog
    if type(prog) is not _Future or prog.done():
        if type(prog) is _Future:
            prog = replay.prog = program_cache.adopt(replay.key, prog)
        if not fused.waiting_graphs() and not any(type(a) is LazyArray for a in arrays):
            outs = prog(*arrays)
            _counters["executions"] += 1
            program_cache.note_launch(outs, prog)
            return outs
    # values still computing in line (strict ops or graphs waiting for their programs), or its program
    # still compiling: it waits in line behind them, as any launch would
    arrays = [a if type(a) is not LazyArray or strict_line.pending(a) else fused.materialize(a) for a in arrays]
    return launchers.queue_program(replay.key, prog, arrays, replay.avals, replay.what)


def _results(replay: Replay, outs, leaves):
    tree = replay.tree
    storages = [TpuStorage(outs[k], shape, dtype) for k, shape, dtype in replay.storages]
    made = []
    for spec in replay.results:
        kind = spec[0]
        if kind == "new":
            _, s, size, stride, offset, dtype, full = spec
            made.append(new_view(storages[s], size, stride, offset, dtype, full))
        elif kind == "same":
            made.append(_tensor_of(spec[1], spec[2], leaves, tree))
        elif kind == "view":
            _, owner, index, size, stride, offset, dtype, full = spec
            made.append(new_view(_tensor_of(owner, index, leaves, tree)._tpu_storage, size, stride, offset, dtype,
                                 full))
        else:
            made.append(spec[1])
    for action in replay.outputs:
        kind, k = action[0], action[1]
        if kind == "write":
            target = _tensor_of(action[2], action[3], leaves, tree)
            target._tpu_storage.set(outs[k])
            if not target.is_inference():
                torch.autograd.graph.increment_version(target)
        elif kind == "cache":
            t = made[action[2]]
            t._tpu_cache, t._tpu_cache_version = outs[k], t._tpu_storage.version
        elif kind == "reshaped":
            storage = made[action[2]]._tpu_storage
            storage.reshaped = (storage.version, outs[k])
        elif kind == "check":  # raised at the next wait if it failed; every result computed here is poisoned
            deferred_errors.add(outs[k], action[2], action[3], outputs=tuple(outs))
    return torch.utils._pytree.tree_unflatten(made, replay.spec)


# --- recording ------------------------------------------------------------------------------------------------
class _Recording:
    """Told of every fused graph flushed while a call is recorded (``fused.capture``)."""

    def __init__(self):
        self.graph = None
        self.launches: list = []

    def flushed(self, graph, launch) -> None:
        self.launches.append((graph, launch))


def _sources(leaves, tree) -> tuple:
    """id of each array a call's inputs hold -> where it comes from; and the ids held by two storages."""
    found: dict = {}
    owners: dict = {}
    ambiguous: set = set()

    def add(a, source, storage):
        if a is None:
            return
        ids = [id(a)]
        if type(a) is LazyArray and a.concrete is not None:
            ids.append(id(a.concrete))
        for i in ids:
            if i in found and owners[i] is not storage:
                ambiguous.add(i)
            elif i not in found:
                found[i], owners[i] = source, storage

    tensors = [("arg", i, t) for i, t in enumerate(leaves) if type(t) is TpuTensor]
    tensors += [("mod", j, t) for j, t in enumerate(tree.live_tensors())]
    for kind, index, t in tensors:
        storage = t._tpu_storage
        add(storage.array, (kind, index, "array"), storage)
        if t._tpu_cache is not None and t._tpu_cache_version == storage.version:
            add(t._tpu_cache, (kind, index, "cache"), storage)
        if storage.reshaped is not None and storage.reshaped[0] == storage.version:
            add(storage.reshaped[1], (kind, index, "reshaped"), storage)
    return found, ambiguous, tensors


def _settle(tensors) -> None:
    """Make the inputs' values that earlier fused graphs computed concrete (or leave them waiting in line),
    and give never-written storages their zeros, so the recording sees each input as a replay will."""
    for _, _, t in tensors:
        storage = t._tpu_storage
        a = storage.array
        if a is None:
            storage.value()
        elif type(a) is LazyArray and a.concrete is None and a.launch is None and a.error is None:
            fused.materialize(a)


def _record(m, replayer: Replayer, args, kwargs, leaves, least: int = 1):
    """Run the call's Python with its ops recorded into one graph; returns (its result, a Replay or why not).
    A graph of fewer than ``least`` ops is not worth a replay's checks (a module that is one op)."""
    fused_mode = launchers.current is launchers.FUSED
    if fused_mode:
        module_graphs.start_block(args, kwargs)
    python = replayer.python(m)
    try:
        tree = replay_guards.ModuleTree(m, inside_hooks=replayer.inner is not None)
    except Refused as why:
        return python(*args, **kwargs), str(why)
    found, ambiguous, tensors = _sources(leaves, tree)
    _settle(tensors)
    found, ambiguous, tensors = _sources(leaves, tree)
    jax = platform.jax()
    before = {id(a) for a in jax.live_arrays()}
    state = replay_guards.global_state()
    watch = replay_guards.CodeWatch()
    marks = (_counters["device_to_host_reads"], _counters["random_draws"])
    checks: list = []  # device-side checks its ops add: the program's check codes, added again at each replay
    recording = _Recording()
    previous = launchers.current
    try:
        watch.start()
    except Refused as why:
        return python(*args, **kwargs), str(why)
    launchers.current = launchers.FUSED
    fused.capture(recording)
    deferred_errors.record_adds(checks)
    _THREAD.recording += 1
    try:
        result = python(*args, **kwargs)
    except BaseException:
        watch.stop()
        _THREAD.recording -= 1
        fused.capture(None)
        deferred_errors.record_adds(None)
        if not fused_mode:
            try:
                fused.flush()  # the ops before the error ran, as they would have one by one
            finally:
                launchers.current = _restored(previous)
        raise
    watch.stop()
    watch.freeze()
    _THREAD.recording -= 1
    try:
        if fused.pending_graph() is recording.graph and fused.pending_nodes():
            fused.flush_for(type(m).__name__)
    finally:
        fused.capture(None)
        deferred_errors.record_adds(None)
        if not fused_mode:
            launchers.current = _restored(previous)
    try:
        replay = _analyse(m, result, leaves, tree, found, ambiguous, tensors, before, state, watch, marks,
                          recording, least, checks)
    except Refused as why:
        return result, str(why)
    _counters["module_recordings"] += 1
    return result, replay


def _restored(previous):
    """The strict launcher to go back to: the line's while launches wait in it."""
    if previous in (launchers.STRICT, launchers.LINE):
        return launchers.LINE if fused.waiting_graphs() else launchers.STRICT
    return previous


def _analyse(m, result, leaves, tree, found, ambiguous, tensors, before, state, watch, marks, recording, least,
             checks):
    if watch.refusal:
        raise Refused(watch.refusal)
    now = (_counters["device_to_host_reads"], _counters["random_draws"])
    if now != marks:
        names = ("reads a value on the host", "draws random numbers")
        raise Refused(", ".join(n for n, a, b in zip(names, marks, now) if a != b))
    graphs = [g for g, _ in recording.launches]
    if len(recording.launches) != 1 or graphs[0] is not recording.graph:
        raise Refused(f"its ops made {len(recording.launches)} graphs (a value was needed in the middle of "
                      "the call, or the graph passed TORCH_TPU_FUSED_MAX_NODES)")
    launch = recording.launches[0][1]
    if launch is None:
        raise Refused("it computes nothing that outlives it")
    if len(launch.nodes) < least:
        raise Refused(f"it is {len(launch.nodes)} op(s): a replay's checks would cost more than it saves")
    if isinstance(launch.prog, Exception):
        raise Refused(f"its graph did not compile as one program ({launch.prog})")
    if launch.mesh is not None:
        raise Refused("it runs collectives")
    if replay_guards.global_state() != state:
        raise Refused("it changes grad mode, autocast, the default dtype or another global setting")
    if not tree.holds(follow=False):  # (a tensor the call itself put in its module's place is a change)
        raise Refused(f"it changes its module's state ({tree.difference()})")
    if not watch.holds():
        raise Refused(f"it changes what its code looks up ({watch.difference()})")
    replay = Replay()
    replay.state, replay.tree, replay.watch, replay.key = state, tree, watch, launch.key
    replay.prog = launch.prog
    replay.what = f"{type(m).__name__} (a recorded module call)"
    replay.inputs, replay.read = _input_sources(launch, found, ambiguous, before)
    replay.structure = launch.key[1]
    _output_targets(replay, launch, result, leaves, tree, tensors, checks)
    return replay


def _input_sources(launch, found, ambiguous, before) -> tuple:
    """(where each of the program's parameters comes from, where each of the graph's inputs does: its Python
    numbers by value, the arrays by source; the second says what the call read, whichever of its numbers the
    program takes as constants)."""
    inputs = launch.inputs
    read = []
    for a in inputs:
        if type(a) in _NUMBERS:
            read.append(("number", value_key(a)))
            continue
        key = id(a)
        if key in ambiguous:
            raise Refused("it reads a value two of its tensors hold (their storages share an array)")
        source = found.get(key)
        if source is None:
            if type(a) is LazyArray or key in before:
                raise Refused("it reads a tensor that is neither an argument nor its module's (a global, a cache)")
            source = ("const", a)  # made during the call (a constant it uploaded or created)
        read.append(source)
    params = launch.params if launch.params is not None else range(len(inputs))
    args = launch._program_args(inputs)
    sources = [("const", args[position]) if read[p][0] == "number" else read[p] for position, p in enumerate(params)]
    return sources, [r if r[0] != "const" else ("const",) for r in read]


def _output_targets(replay, launch, result, leaves, tree, tensors, checks) -> None:
    lazy_index = {id(la): (i, j) for i, j, la in launch.live}
    position = {ij: k for k, ij in enumerate(launch.out_sig)}
    owners = {}
    for kind, index, t in tensors:
        owners.setdefault(id(t._tpu_storage), (kind, index))
    objects = {id(t): (kind, index) for kind, index, t in tensors}
    flat, spec = torch.utils._pytree.tree_flatten(result)
    targets: dict = {}   # program output position -> action
    storages: list = []  # (program output position, shape, dtype) of each storage a replay makes
    storage_index: dict = {}
    results = []

    def claim(a, action):
        ij = lazy_index.get(id(a))
        if ij is None:
            return False
        k = position[ij]
        targets.setdefault(k, action(k))
        return True

    for n, leaf in enumerate(flat):
        if type(leaf) is TpuTensor:
            same = objects.get(id(leaf))
            if same is not None:
                results.append(("same", *same))
                continue
            storage = leaf._tpu_storage
            geometry = (tuple(leaf.shape), leaf.stride(), leaf.storage_offset(), leaf.dtype, leaf._tpu_full)
            owner = owners.get(id(storage))
            if owner is not None:
                results.append(("view", *owner, *geometry))
            else:
                s = storage_index.get(id(storage))
                if s is None:
                    if not claim(storage.array, lambda k: ("storage", k)):
                        raise Refused("it returns a tensor whose value it did not compute (a new holder of "
                                      "an input's data)")
                    s = storage_index[id(storage)] = len(storages)
                    k = position[lazy_index[id(storage.array)]]
                    storages.append((k, storage.shape, storage.dtype))
                results.append(("new", s, *geometry))
            if leaf._tpu_cache is not None and leaf._tpu_cache_version == storage.version:
                claim(leaf._tpu_cache, lambda k, n=n: ("cache", k, n))
            if storage.reshaped is not None and storage.reshaped[0] == storage.version:
                claim(storage.reshaped[1], lambda k, n=n: ("reshaped", k, n))
        elif isinstance(leaf, torch.Tensor):
            raise Refused(f"it returns a {leaf.device} tensor")
        elif type(leaf) in replay_guards._IMMUTABLE or type(leaf) in (float, complex):
            results.append(("const", leaf))
        else:
            raise Refused(f"it returns a {type(leaf).__name__}, which a replay would share between calls")
    for kind, index, t in tensors:  # tensors it wrote in place: the program's new values go back into them
        array = t._tpu_storage.array
        if type(array) is LazyArray and id(array) in lazy_index:
            claim(array, lambda k, kind=kind, index=index: ("write", k, kind, index))
    for code, messages, what in checks:  # the device-side checks of its ops: their codes are program outputs
        if not claim(code, lambda k, messages=messages, what=what: ("check", k, messages, what)):
            raise Refused("it runs a device-side check outside its graph")
    casts = autocast.cached_values()
    for i, j, la in launch.live:
        k = position[(i, j)]
        if k not in targets and id(la) not in casts:
            raise Refused("it keeps a value it computed outside its result (in a cache, a list or an attribute)")
    replay.outputs = [a for k, a in sorted(targets.items()) if a[0] != "storage"]
    replay.storages = storages
    replay.results = results
    replay.spec = spec
    replay.avals = tuple((tuple(la_shape), la_dtype) for la_shape, la_dtype in _out_avals(launch, position))


def _out_avals(launch, position):
    """(shape, dtype) of each program output, in its order."""
    by_ij = {(i, j): la for i, j, la in launch.live}
    avals = [None] * len(position)
    for ij, k in position.items():
        la = by_ij.get(ij)
        if la is not None:
            avals[k] = (la.shape, la.dtype)
        else:  # an output kept for an earlier flush of the same graph (graph_sets.outputs_for)
            shape, dtype = launch.nodes[ij[0]].out_sig[ij[1]]
            avals[k] = (tuple(shape), platform.jax().numpy.dtype(dtype))
    return avals


# --- verify ---------------------------------------------------------------------------------------------------
def _verify(m, replayer, replay, args, kwargs, leaves):
    """Run the call's Python (recorded again) and its replay on the same inputs; raise where they differ."""
    if launchers.current is launchers.FUSED:
        module_graphs.start_block(args, kwargs)
    with platform.X64():
        arrays = [fused.materialize(a) if type(a) is LazyArray else a
                  for a in (_fetch(s, leaves, replay.tree) for s in replay.inputs)]
    result, fresh = _record(m, replayer, args, kwargs, leaves)
    name = type(m).__name__
    if not isinstance(fresh, Replay):
        raise ReplayMismatch(f"{name}: a replayed call could not be recorded again: {fresh}")
    # (the program keys may differ where only the recordings' history does: a number that varied at its place
    # since is an input of the newer program; what the ops, their numbers and their tensors are may not)
    if fresh.structure != replay.structure:
        raise ReplayMismatch(f"{name}: the call's Python ran other ops than its recording (the guards missed a "
                             "change)")
    if fresh.read != replay.read:
        raise ReplayMismatch(f"{name}: the call's Python read other tensors or numbers than its recording")
    written = sorted(a[2:] for a in fresh.outputs if a[0] == "write")
    if fresh.results != replay.results or written != sorted(a[2:] for a in replay.outputs if a[0] == "write"):
        raise ReplayMismatch(f"{name}: the call's Python returned or wrote other tensors than its recording")
    # the check is the backend's own work: what the counters say is the Python's run (a test counting programs
    # or the bytes read back sees the same numbers with the check as without it)
    counted = dict(_counters)
    try:
        with platform.X64():
            outs = _launch(replay, arrays)
            got = torch.utils._pytree.tree_flatten(_results_detached(replay, outs, leaves))[0]
        want = torch.utils._pytree.tree_flatten(result)[0]
        for n, (g, w) in enumerate(zip(got, want)):
            if isinstance(w, torch.Tensor) and not _same_bits(g, w):
                raise ReplayMismatch(f"{name}: the replay's result {n} differs from the call's Python's")
        for action in replay.outputs:
            if action[0] == "write":
                target = _tensor_of(action[2], action[3], leaves, replay.tree)
                storage = target._tpu_storage
                written = TpuTensor(TpuStorage(outs[action[1]], storage.shape, storage.dtype), storage.shape)
                if not _same_bits(written, TpuTensor(storage, storage.shape)):
                    raise ReplayMismatch(f"{name}: the replay wrote other values into a tensor than the call's "
                                         "Python")
    finally:
        _counters.update(counted)
    _counters["module_replays"] += 1
    return result


def _same_bits(a, b) -> bool:
    """Equal shapes, dtypes and bits (NaNs equal where their bits are)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        a, b = a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(a, b)


def _results_detached(replay, outs, leaves):
    """A replay's results without its writes into the module's or the arguments' tensors (verify compares them
    after the Python made its own)."""
    saved = replay.outputs
    replay.outputs = [a for a in saved if a[0] not in ("write", "check")]
    try:
        return _results(replay, outs, leaves)
    finally:
        replay.outputs = saved

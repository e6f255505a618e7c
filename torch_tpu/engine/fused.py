"""Fused eager (DEFER_AND_FUSE): programs are recorded, not run, and fused into one XLA program when
a value is needed.

Every launch that strict eager would make (an op's program, a view read or write, a cast) is
recorded here as a node ``(key, fn, inputs)`` whose outputs are ``LazyArray``s of known shape and
dtype. A flush replays the recorded nodes inside one ``jax.jit`` function and returns the values of
the lazy arrays that are still alive: dead intermediates are never materialised. Graphs are cached
by structure (node keys, wiring, input shapes and dtypes, which outputs are live), never by values,
so a repeated denoising step hits the cache.

Flushes happen when a value is read (``.cpu()``, ``.item()``, printing, data-dependent ops, a copy to
another device), at ``torch_tpu.sync()``, when the outermost ``nn.Module`` call starts and returns (so each
transformer call of a denoising loop is a graph of its own, without the glue before it, and repeated
steps have identical graphs), around each outermost repeated block (identical blocks share one program),
and when the pending graph passes a size bound (TORCH_TPU_FUSED_MAX_NODES, default 2000: XLA's compile time
grows faster than a graph's size, a 4500-op elementwise chain took 18 s on CPU; models' graphs are cut at
block boundaries long before).

Why one module: the pending graph's recording, flushing, compiling and running are one object's states; what could
stand apart already does (graph_keys.py, graph_sets.py, recovery.py, call_sites.py, module_graphs.py).
"""
from __future__ import annotations

import collections
import concurrent.futures
import sys
import threading
import weakref

import numpy as np

from .. import config
from ..runtime import counters, platform, program_cache, spmd
from . import recovery
from . import device_numbers, graph_keys, graph_sets
from .call_sites import number_site as _number_site, op_sites as _op_sites
from .call_sites import user_location as _user_location
from .graph_keys import PY_NUMBERS as _PY_NUMBERS, abstract, dtype_of as _dtype_of, out_avals  # noqa: F401 (abstract: fused.abstract)
from .graph_keys import out_signature as _out_signature
from .graph_sets import donation_for as _donation_for, outputs_for as _outputs_for
from .lazy_values import LazyArray, set_materializer
from .recovery import FusedGraphError  # noqa: F401  (re-exported: the error fused mode raises)

_counters = counters.counters


class _Node:
    __slots__ = ("key", "fn", "inputs", "outputs", "where", "out_sig")

    def __init__(self, key, fn, inputs, outputs, where, out_sig):
        self.key = key
        self.fn = fn
        self.inputs = inputs      # tuple of ("i", input index) or ("n", node index, output index)
        self.out_sig = out_sig    # ((shape, dtype name), ...) of its outputs: part of the graph's key
        self.outputs = outputs    # list of weakrefs to the LazyArrays it produced
        self.where = where        # (aten op or program name, user file:line) for error reports


class _Graph:
    def __init__(self):
        self.nodes: list[_Node] = []
        self.inputs: list = []
        self.input_ids: dict[int, int] = {}
        self.max_nodes = 0  # read from the settings when the first node is recorded
        # (weak ref to a storage, its previous value, the LazyArray written into it): undone when the
        # graph fails before that write (recovery.py)
        self.writes: list = []
        self.mesh = None    # device ids of the group whose collectives the graph holds (one per graph)
        self.number_sites: dict = {}  # input position of a Python number -> (op name, (file, line), argument)
        self.offset_reads: dict = {}  # (op name, (file, line), argument) -> view offsets that entered there


class _STATE:
    # One pending graph per process, not per thread: autograd runs backward on its own device
    # thread, and its ops consume values the forward recorded on the main thread.
    graph = _Graph()
    lock = threading.RLock()
    last_flush = (0, 0)  # (nodes, materialised outputs) of the latest flush, for tests and debugging
    last_constants = 0   # Python numbers the latest flushed graph's program took as constants


def _graph() -> _Graph:
    return _STATE.graph


def pending_nodes() -> int:
    return len(_graph().nodes)


def last_flush() -> tuple[int, int]:
    """(recorded nodes, values materialised) of the latest flush."""
    return _STATE.last_flush


def last_flush_constants() -> int:
    """How many Python numbers the latest flushed graph's program took as constants (not as inputs)."""
    return _STATE.last_constants


def _input_ref(g: _Graph, value):
    if type(value) in _PY_NUMBERS:
        # never shared by identity: which numbers happen to be one object (small ints, constants)
        # must not change the graph's structure from one step to the next
        g.inputs.append(value)
        return ("i", len(g.inputs) - 1)
    key = id(value)
    idx = g.input_ids.get(key)
    if idx is None:
        idx = len(g.inputs)
        g.inputs.append(value)
        g.input_ids[key] = idx
    return ("i", idx)


def record(key, fn, args, avals=None, what: str = "", mesh=None):
    """Record ``fn(*args)`` as a node; returns a tuple of LazyArrays (one per output).

    ``mesh``: the global device ids of a collective's group (``fn`` then uses ``spmd.AXIS``); the graph
    runs as one SPMD program over that mesh. A collective over another group flushes the graph first."""
    with _STATE.lock:
        if mesh is not None:
            if _graph().mesh not in (None, mesh):
                flush()
            _graph().mesh = mesh
        return _record(key, fn, args, avals, what, None)


def record_op(key, fn, args, avals, what: str):
    """``record`` of an op's program from the op path (``launchers.Fused.run_op``, called by the op's entry
    from ``__torch_dispatch__``): the user's frames are found from the dispatch's (``call_sites.op_sites``)."""
    with _STATE.lock:
        return _record(key, fn, args, avals, what, _OP_DEPTH)


_OFFSET = np.int64  # how the strict path passes a view's storage offset to its program

# frames from _record out to __torch_dispatch__ on the op path: record_op, Fused.run_op, the entry's
# __call__, op_path.run_op, then the dispatch (call_sites.op_sites checks that it is)
_OP_DEPTH = 5


def _record(key, fn, args, avals, what, depth):
    g = _STATE.graph
    if avals is None:
        avals = out_avals(key, fn, args)
    nodes = g.nodes
    idx = len(nodes)
    refs = []
    numbers = None
    offsets = None
    for a in args:
        ta = type(a)
        if ta is _OFFSET:
            # a view's storage offset (eager/arguments.py, strided.read): a number of the graph like any
            # other, a constant of its program unless it changes where it enters (as an array input, every
            # view read sliced at a runtime offset and every launch copied each offset to the device)
            a = int(a)
            ta = int
            if offsets is None:
                offsets = [len(refs)]
            else:
                offsets.append(len(refs))
        if ta is LazyArray:
            if a.concrete is not None:
                i = g.input_ids.get(id(a))  # an input already, taken while its graph was waiting
                refs.append(("i", i) if i is not None else _input_ref(g, a.concrete))
                continue
            n = a.node
            if n is not None and n < idx:
                outputs = nodes[n].outputs
                j = a.out
                if j < len(outputs) and outputs[j]() is a:  # a value of this graph
                    refs.append(("n", n, j))
                    continue
            if a.launch is not None and a.error is None:
                # computed by a flushed graph whose program is still compiling: an input of this graph
                # (read when this one launches), so recording goes on without waiting for the compiler
                refs.append(_input_ref(g, a))
            else:  # a value from an abandoned graph: materialise it first
                refs.append(_input_ref(g, materialize(a)))
        elif ta in _PY_NUMBERS:
            # never shared by identity: which numbers happen to be one object (small ints, constants)
            # must not change the graph's structure from one step to the next
            inputs = g.inputs
            inputs.append(a)
            refs.append(("i", len(inputs) - 1))
            if numbers is None:
                numbers = [len(refs) - 1]
            else:
                numbers.append(len(refs) - 1)
        else:
            i = g.input_ids.get(id(a))
            if i is None:
                inputs = g.inputs
                i = g.input_ids[id(a)] = len(inputs)
                inputs.append(a)
            refs.append(("i", i))
    if idx == 0:
        g.max_nodes = config.settings().fused_max_nodes
    if len(avals) == 1:
        shape, dtype = avals[0]
        outs = (LazyArray(shape, dtype, idx, 0),)
        weak = [weakref.ref(outs[0])]
    else:
        outs = tuple(LazyArray(shape, dtype, idx, j) for j, (shape, dtype) in enumerate(avals))
        weak = [weakref.ref(o) for o in outs]
    op = what or str(key[0] if isinstance(key, tuple) and key else key)
    if depth is None:
        location = _user_location()
        site = _number_site() if numbers else None
    else:
        location, site = _op_sites(depth, numbers is not None)
    if numbers:  # where each enters the graph: a number that changes there is a program input (graph_sets)
        for k in numbers:
            g.number_sites[refs[k][1]] = (op, site, k)
        if offsets:
            # one line reads several views of one storage (``emb.chunk(6)``): each offset's place is also
            # which of that line's reads in this graph it is, so six fixed offsets stay six constants
            counts = g.offset_reads
            for k in offsets:
                place = (op, site, k)
                n = counts.get(place, 0)
                counts[place] = n + 1
                g.number_sites[refs[k][1]] = (op, site, k, n)
    nodes.append(_Node(key, fn, tuple(refs), weak, (op, location), _out_signature(avals)))
    if idx + 1 >= g.max_nodes:
        flush()
    return outs


def materialize(a):
    """The concrete jax array of a (possibly lazy) value; flushes the pending graph if needed."""
    if type(a) is not LazyArray:
        return a
    if a.concrete is None:
        first = None
        if a.launch is None and a.error is None:
            try:
                flush()
            except Exception as exc:  # an earlier graph failed: raised once this value's graph ran (complete)
                first = exc
        if a.launch is not None:  # its graph waits for its program (or for earlier graphs)
            try:
                a.launch.complete()
            except Exception:
                if first is None:
                    raise
        if first is not None:
            raise first
        if a.error is not None:
            raise a.error
        if a.concrete is None:
            raise RuntimeError("tpu fused eager: a deferred value was lost (internal error)")
    return a.concrete


set_materializer(materialize)


def note_write(storage, old, new: LazyArray) -> None:
    """A storage's value is replaced by a pending one: remember how to undo it if the graph (or the strict
    op waiting in line, ``strict_line.py``) that computes it fails."""
    with _STATE.lock:
        if new.error is None and new.concrete is None:
            if new.node is not None:
                _graph().writes.append((weakref.ref(storage), old, new))
            elif new.launch is not None:
                new.launch.wrote(storage, old, new)


def flush() -> None:
    """Compile (or reuse) and run the pending graph; fill in every live lazy array. A graph whose
    program must be compiled is handed to a compile thread and runs once that is done (see _Launch):
    its values are filled in then, or when one of them is needed."""
    with _STATE.lock, platform.X64():  # JAX's 64-bit mode for this thread (platform.X64)
        _flush()
        _launch_ready()


def finish() -> None:
    """``flush()``, then run every graph still waiting for its program (sync, a mode change)."""
    with _STATE.lock, platform.X64():
        _flush()
        while _LAUNCHES:
            _LAUNCHES[0].complete()


def waiting_graphs() -> int:
    """Flushed graphs waiting for their programs to compile (for tests and debugging)."""
    return len(_LAUNCHES)


def _flush() -> None:
    g = _graph()
    if not g.nodes:
        return
    _STATE.graph = _Graph()
    try:
        _run(g)
    except BaseException as exc:
        # interrupted (Ctrl-C, anywhere in here; inside a C callback it is a SystemError) before any result:
        # the work stays pending (else lost); an op's error has already been given to the values (recovery.py)
        interrupt = not isinstance(exc, Exception) or isinstance(exc.__cause__, KeyboardInterrupt)
        resolved = any(la is not None and la.node is None for n in g.nodes for la in (r() for r in n.outputs))
        if interrupt and not _STATE.graph.nodes and not resolved:
            _STATE.graph = g
        raise


def _run(g: _Graph) -> None:
    if g.writes:
        # the undo records of storages that died since (an in-place op on a temporary: torch's rms_norm
        # adds eps to its mean in place): nothing can read them, and the values they hold are no outputs
        g.writes = [w for w in g.writes if w[0]() is not None]
    live = []          # (node index, output index, LazyArray)
    parts = []         # each node's part of the graph's structure
    for i, node in enumerate(g.nodes):
        for j, ref in enumerate(node.outputs):
            la = ref()
            if la is not None and la.concrete is None:
                live.append((i, j, la))
        # the outputs' shapes too: an op key does not say whether its result comes in torch's layout or
        # as its flat memory (a program found on disk returned (25,) where the graph expected (5, 5))
        parts.append((node.key, node.inputs, node.out_sig))
    _STATE.last_flush = (len(g.nodes), len(live))
    if not live:
        if _CAPTURE[0] is not None:
            _CAPTURE[0].flushed(g, None)
        return
    if g.mesh is not None:  # an SPMD program over several processes: no background compile
        while _LAUNCHES:
            _LAUNCHES[0].complete()
        g.inputs = [materialize(a) for a in g.inputs]
    # values of graphs that launched meanwhile enter as their arrays, as they would have had their
    # graphs not waited: the same donation set, so the same program as in a process that compiled nothing
    inputs = g.inputs = [a.concrete if type(a) is LazyArray and a.concrete is not None else a for a in g.inputs]
    # Python numbers are constants of the program unless their values change where they enter (graph_sets);
    # not in an SPMD program over several processes: every process runs the same program, and a number may
    # differ between them (``torch.full((3,), rank + 1)``), so there each is an input (local data)
    constants = {}
    firsts = ()
    if g.number_sites and g.mesh is None:
        numbers = {i: inputs[i] for i in g.number_sites}
        dynamic, firsts = graph_sets.dynamic_numbers(g.number_sites, numbers)
        constants = {i: v for i, v in numbers.items() if i not in dynamic}
    in_sig = []
    waits = False  # an input is a value of a graph waiting to launch
    for i, a in enumerate(inputs):
        t = type(a)
        if t in _PY_NUMBERS:
            in_sig.append(graph_sets.number_key(a) if i in constants else t)
        elif t is LazyArray:  # keyed as its array will be
            in_sig.append((a.shape, graph_keys.dtype_name(a.dtype)))
            waits = True
        else:
            in_sig.append((np.shape(a), graph_keys.dtype_name(_dtype_of(a))))
    # both hashed once and kept as one object per content: the graph's keys below (and its program's)
    # are looked up in several tables per flush, and a 1000-node tuple hashes in tens of us
    in_sig = tuple(in_sig)
    structure = graph_keys.interned(tuple(parts))
    if firsts and not graph_sets.known_with_constants(structure, in_sig):
        # first values of varying numbers: constants only in the program compiled with them (graph_sets)
        for i in firsts:
            del constants[i]
        in_sig = tuple(type(inputs[i]) if i in firsts else k for i, k in enumerate(in_sig))
    in_sig = graph_keys.interned(in_sig)
    if constants:
        graph_sets.flushed_with_constants(structure, in_sig)
    _STATE.last_constants = len(constants)
    # the program's parameters: the inputs less its constants (None: all of them)
    params = tuple(i for i in range(len(inputs)) if i not in constants) if constants else None
    live_sig = tuple((i, j) for i, j, _ in live)
    capture = _CAPTURE[0]
    if capture is not None and capture.graph is g:
        # a module call being recorded (eager/module_replay.py): its program runs again on later calls,
        # whose inputs are held by their callers, so it donates nothing
        donate = ()
    else:
        donate = _donation_for(("fused", structure, in_sig, g.mesh),
                               _donatable(inputs, [la for _, _, la in live], g.writes))
    for i in donate:
        _counters["donated_bytes"] += _nbytes(inputs[i])
    if params is not None:  # (numbers are never donated) as positions among the program's parameters
        donate = tuple(params.index(i) for i in donate)
    out_sig = _outputs_for(("fused", structure, in_sig, donate, g.mesh), live_sig)
    key = ("fused", structure, in_sig, out_sig, donate, g.mesh)
    nodes = g.nodes
    _counters["flushes"] += 1

    def graph_fn(*args):
        if constants:
            given = iter(args)
            args = [_constant(constants[i]) if i in constants else next(given) for i in range(len(inputs))]
        env: list[tuple] = []
        for node in nodes:
            vals = [args[r[1]] if r[0] == "i" else env[r[1]][r[2]] for r in node.inputs]
            res = node.fn(*vals)
            env.append(res if isinstance(res, (tuple, list)) else (res,))
        return tuple(env[i][j] for i, j in out_sig)

    graph_fn.__name__ = graph_fn.__qualname__ = _graph_name()  # in traces and the compile log
    launch = _Launch(key, inputs, params, live, out_sig, live_sig, nodes, g.writes, donate, g.mesh)
    if capture is not None:
        capture.flushed(g, launch)
    prog_inputs = inputs if params is None else [inputs[i] for i in params]
    prog = program_cache.lookup(key)
    if prog is None and g.mesh is None:
        prog = program_cache.in_flight(key)  # the same graph flushed before, still compiling
    try:
        if prog is None:
            if g.mesh is None:
                # its ops' device-side checks are known to their entries (recorded with them), so
                # the graph has none of its own to learn: found by key even when it holds some
                prog = program_cache.compile_program(key, graph_fn, tuple(_example(a) for a in prog_inputs),
                                                     donate=donate, checks=[], background=True)
            else:
                prog = spmd.compile_program(key, graph_fn, tuple(prog_inputs), g.mesh, donate=donate,
                                            out_ndims=[len(la.shape) for _, _, la in live],
                                            what=graph_keys.collectives_of(nodes))
    except Exception as exc:  # tracing or lowering failed: the graph runs op by op (the error goes there)
        launch.prog = exc
    else:
        launch.prog = prog
    del prog_inputs  # (a reference to an input buffer would keep it from being donated)
    if _LAUNCHES or type(launch.prog) is concurrent.futures.Future or waits:
        # its program is compiling, or an earlier graph's is (its values may be inputs here, and graphs
        # launch in the order they were recorded): it waits in line; recording goes on meanwhile
        _LAUNCHES.append(launch)
        try:
            _wait_in_line(live, launch)
        except BaseException:  # interrupted halfway: values left neither pending nor waiting were lost
            _wait_in_line(live, launch)
            raise
        return
    launch.execute()


def _constant(number):
    """A number a program takes as a constant, as its lowerings get it: a Python number, as compiled mode
    passes them (the lowerings keep XLA from folding what it would fold wrongly, ``x + 0.0`` of -0.0); a
    complex as a weakly typed array, which fills a float tensor with its real part as the traced number
    did (JAX refuses a Python complex there)."""
    if type(number) is complex:
        return platform.jax().numpy.asarray(number)
    return number


_LAUNCHES: "collections.deque" = collections.deque()  # flushed graphs waiting to launch, in record order

# the recording of a module call (``eager/module_replay.py``), told of every graph flushed while it records:
# an object with ``graph`` (the graph it records) and ``flushed(graph, launch)``; None when none records
_CAPTURE: list = [None]


def capture(recording) -> None:
    """Tell ``recording`` (or nobody, with None) of every graph flushed from now on (see ``_CAPTURE``); its
    ``graph`` is the pending graph now, which donates no input (its program runs again on other inputs)."""
    if recording is not None:
        recording.graph = _STATE.graph
    _CAPTURE[0] = recording


def pending_graph():
    """The graph recording now (an opaque object: ``pending_nodes`` counts its ops)."""
    return _STATE.graph


_MAX_WAITING = 64  # graphs in line at most (each holds its inputs): then the oldest is waited for


def _launch_ready() -> None:
    """Launch the waiting graphs at the head of the line whose programs are compiled (waits only when
    the line is full)."""
    while _LAUNCHES and (_LAUNCHES[0].ready() or len(_LAUNCHES) > _MAX_WAITING):
        _LAUNCHES[0].complete()


def _example(a):
    """What compiling needs of an input: its shape and dtype (a value still being computed has no
    array yet; and the compile thread must not hold input buffers: it would keep them from donation)."""
    if type(a) in _PY_NUMBERS:
        return a
    jax = platform.jax()
    sharding = getattr(a, "sharding", None) if type(a) is not LazyArray else None
    return jax.ShapeDtypeStruct(tuple(a.shape), _dtype_of(a), sharding=sharding)


def _nbytes(a) -> int:
    n = np.dtype(a.dtype).itemsize
    for d in a.shape:
        n *= d
    return n


class _Launch:
    """A flushed graph: its program (or the Future of one compiling, or the error tracing it raised),
    inputs (arrays, numbers, values of earlier graphs) and the values it fills in."""

    __slots__ = ("key", "prog", "inputs", "params", "live", "out_sig", "live_sig", "nodes", "writes", "donate",
                 "mesh", "done")

    def __init__(self, key, inputs, params, live, out_sig, live_sig, nodes, writes, donate, mesh):
        self.key, self.inputs, self.live, self.out_sig, self.live_sig = key, inputs, live, out_sig, live_sig
        self.params = params  # the positions of the inputs its program takes (None: every one)
        self.nodes, self.writes, self.donate, self.mesh = nodes, writes, donate, mesh
        self.prog = None
        self.done = False

    def ready(self) -> bool:
        return type(self.prog) is not concurrent.futures.Future or self.prog.done()

    def wrote(self, storage, old, new) -> None:
        """A value of this graph was written into a storage after its flush: not undone (its graph's own
        writes are, ``recovery``)."""

    def complete(self) -> None:
        """Launch this graph, after every graph recorded before it (waits for its program). An earlier
        graph's error is raised once this one has run too: a graph that used its values undoes its writes
        then, so the tensors it wrote read their old values after this one error (not after a second)."""
        with _STATE.lock, platform.X64():
            first = None
            while not self.done:
                if not _LAUNCHES:
                    raise RuntimeError("tpu fused eager: a graph waiting to launch was lost (internal error)")
                head = _LAUNCHES[0]
                if type(head.prog) is concurrent.futures.Future:
                    head.prog.exception()  # wait here, where an interrupt leaves it in line
                _LAUNCHES.popleft()
                try:
                    head.execute()
                except Exception as exc:
                    first = first or exc
            if first is not None:
                raise first

    def execute(self) -> None:
        self.done = True
        live = self.live
        results = None
        try:
            try:
                inputs = [materialize(a) if type(a) is LazyArray else a for a in self.inputs]
            except Exception as exc:  # an earlier graph computing an input failed
                recovery.fail(live, self.writes, exc, self.nodes)
                return
            prog = self.prog
            try:
                if type(prog) is concurrent.futures.Future:
                    prog = program_cache.adopt(self.key, prog)
                elif isinstance(prog, Exception):
                    raise prog
                graph_keys.check_program_shapes(prog, self.key, self.donate, self.out_sig, live)
                results = prog(*self._program_args(inputs))
                program_cache.note_launch(results, prog)
                _counters["executions"] += 1
            except Exception as exc:
                if self.mesh is not None:  # collectives: no op-by-op run; the SPMD runner named them
                    for _, _, la in live:
                        la.error = exc
                        la.node = la.launch = None
                    raise
                error = recovery.run_op_by_op(self.nodes, inputs, live, self.writes, exc)
                if error is not None:
                    raise error from exc
                return
        except BaseException:
            # interrupted (Ctrl-C) after the program ran: its values are kept; before it ran (or while an
            # earlier graph's value was awaited, or while running op by op), the graph waits at the head
            # of the line again (its values were lost: "a deferred value was lost")
            if results is not None:
                _fill(live, results, self.out_sig, self.live_sig)
            elif not any(la.concrete is not None or la.error is not None for *_, la in live):
                self.done = False
                for _, _, la in live:
                    la.node, la.launch = None, self
                if not _LAUNCHES or _LAUNCHES[0] is not self:
                    _LAUNCHES.appendleft(self)
                if type(self.prog) is concurrent.futures.Future and self.prog.done() and self.prog.exception():
                    self.prog = FusedGraphError("its program's compilation was interrupted")  # runs op by op
            raise
        try:
            _fill(live, results, self.out_sig, self.live_sig)
        except BaseException:  # interrupted while filling in: finish (the inputs may be donated, gone)
            _fill(live, results, self.out_sig, self.live_sig)
            raise

    def _program_args(self, inputs: list) -> list:
        """The program's arguments: its inputs less its constants, each Python number it takes (a value that
        changes at its place: a timestep, a loop's counter) that was seen there before passed as a kept
        device scalar, as strict ops do (JAX converts a Python argument at every call: ~160 us each on a
        TPU host). Not in an SPMD program over several processes: each process's number is its own."""
        args = inputs if self.params is None else [inputs[i] for i in self.params]
        if self.mesh is not None:
            return args
        record = device_numbers.LAUNCH_PLACES.get(self.key)
        if record is None:
            record = device_numbers.launch_places(self.key, args)
        return device_numbers.inputs(args, record) if record[1] else args


def _fill(live, results, out_sig, live_sig) -> None:
    if out_sig != live_sig:
        position = {o: k for k, o in enumerate(out_sig)}
        results = [results[position[o]] for o in live_sig]
    for (_, _, la), arr in zip(live, results):
        la.concrete = arr
        la.node = la.launch = None


def _wait_in_line(live, launch) -> None:
    for _, _, la in live:
        la.node, la.launch = None, launch


def _donatable(inputs: list, outputs: list, writes: list) -> tuple:
    """Input buffers nothing outside this graph can reach any more (a temporary whose tensor died; with
    TORCH_TPU_FUSED_DONATE_INPLACE=1 also a buffer overwritten in place), each matching a live output's
    shape and dtype: donating them lets XLA write that output into their memory instead of allocating."""
    jax = platform.jax()
    held = {}  # references the graph's undo records hold (the value a failed write is undone to)
    for _, old, _ in writes:
        if type(old) is LazyArray and old.concrete is not None:  # a value of an earlier graph
            old = old.concrete  # (its array is referenced through it)
        held[id(old)] = held.get(id(old), 0) + 1
    if not config.settings().fused_donate_inplace:
        held = {k: None for k in held}  # not safe to lose: never donated
    # an input of a graph waiting in line is free once that graph has launched, which is before this one
    # (graphs launch in record order): so the same set is donated as when nothing waits
    waiting: dict = {}
    for launch in _LAUNCHES:
        for a in launch.inputs:
            if type(a) not in _PY_NUMBERS:
                waiting[id(a)] = waiting.get(id(a), 0) + 1
    wanted: dict = {}
    for la in outputs:
        k = (la.shape, np.dtype(la.dtype))
        wanted[k] = wanted.get(k, 0) + 1
    donate = []
    for i in range(len(inputs)):
        a = inputs[i]
        # three references: the graph's input list, ``a`` and getrefcount's own argument
        extra = held.get(id(a), 0)
        if extra is None:
            continue
        extra += waiting.get(id(a), 0)
        if type(a) is LazyArray:  # a value of a graph still waiting to launch
            if a.launch is None or a.error is not None:
                continue
            extra += 1  # the reference its graph's launch keeps (to fill it in)
        elif not isinstance(a, jax.Array):
            continue
        elif a is program_cache.last_launched():
            extra += 1  # the reference sync keeps to the last launched program's output
        if sys.getrefcount(a) == 3 + extra:
            k = (tuple(a.shape), np.dtype(a.dtype))
            if wanted.get(k, 0) > 0:
                wanted[k] -= 1
                donate.append(i)
    return tuple(donate)



class _Naming(threading.local):
    module = None  # the module whose call ended the graph being flushed (names its program)


_NAMING = _Naming()


def flush_for(module_name) -> None:
    """``flush()``, naming the program after the module whose call ends the graph."""
    _NAMING.module = module_name
    try:
        flush()
    finally:
        _NAMING.module = None


def _graph_name() -> str:
    """A fused program's name: after the module whose call ended it, else plain "fused"."""
    module = _NAMING.module
    return f"fused.{module}" if module else "fused"

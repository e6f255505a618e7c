"""When a fused graph fails as a whole: replay it op by op, so that its failure behaves like the
failing op's error on CPU torch.

Ops recorded before the first failing op get their values (as if they had run one by one); the failing
op and everything recorded after it are failed: reading such a value raises the error, naming the op and
the user's file:line where it was created; and writes recorded from that point are undone, so every
tensor holds the value it had just before the failing op, as when an eager op raises. A graph that only
fails whole (e.g. out of memory) but whose ops all succeed alone is completed op by op.

That is why a graph never reuses (donates) the buffer of a value an in-place write replaced: it is
what the write is undone to. Only with TORCH_TPU_FUSED_DONATE_INPLACE=1 are those reused (less memory);
then a graph that fails while running (not while compiling) may have consumed them, and values that
needed them report that they were lost.
"""
from __future__ import annotations

import warnings
import weakref

from ..errors import out_of_memory
from ..runtime import caches, counters, program_cache


class FusedGraphError(RuntimeError):
    pass


def _run_alone(node, vals):
    prog = program_cache.lookup(node.key)
    if prog is None:
        prog = program_cache.compile_program(node.key, node.fn, tuple(vals))
    res = prog(*vals)
    return tuple(res) if isinstance(res, (tuple, list)) else (res,)


def _lost(value) -> bool:
    return getattr(value, "is_deleted", None) is not None and value.is_deleted()


def replay(nodes, inputs, live, writes, exc) -> RuntimeError | None:
    """Fill ``live`` (node, output, LazyArray) op by op; undo failed writes; the error to raise, or None
    when every op succeeded alone."""
    env: list = []
    failed: RuntimeError | None = None
    for node in nodes:
        if failed is not None:  # on CPU torch the program would have stopped at the failing op
            env.append(failed)
            continue
        op, where = node.where
        vals = []
        for ref in node.inputs:
            v = inputs[ref[1]] if ref[0] == "i" else env[ref[1]][ref[2]]
            if _lost(v):
                failed = FusedGraphError(
                    f"tpu fused eager: the graph of {len(nodes)} ops failed while running ({exc}); an input "
                    f"of {op} (created at {where}) was a buffer handed to that graph for reuse and is lost")
                break
            vals.append(v)
        if failed is None:
            try:
                res = _run_alone(node, vals)
                for r in res:  # wait: a failure while running (out of memory) belongs to this op
                    r.block_until_ready()
                env.append(res)
                continue
            except Exception as inner:  # noqa: BLE001 - reported with the op's name below
                failed = out_of_memory(inner, f"running {op} (created at {where}) in a fused graph") or \
                    FusedGraphError(f"tpu fused eager: {op} (created at {where}) failed: {inner}")
                failed.__cause__ = inner
        env.append(failed)
    for i, j, la in live:
        out = env[i]
        if isinstance(out, BaseException):
            la.error = out
        else:
            la.concrete = out[j]
        la.node = la.launch = None
    if failed is not None:
        undo(writes)
    else:
        counters.counters["fused_graph_replays"] += 1
        warnings.warn(f"tpu fused eager: a graph of {len(nodes)} ops failed as a whole ({exc}); it ran op "
                      "by op instead", RuntimeWarning, stacklevel=4)
    return failed


def undo(writes) -> None:
    """Undo the recorded writes ((storage ref, old value, new value)) whose new value failed, latest first."""
    for storage_ref, old, new in reversed(writes):
        storage = storage_ref()
        if storage is not None and storage.array is new and new.error is not None:
            storage.set(old)  # the tensor holds its value from before the failing op


def fail(live, writes, cause: BaseException, nodes) -> None:
    """A graph whose input an earlier graph failed to compute (it launched later, see fused._Launch):
    every value it computes fails with that cause, and its writes are undone."""
    op, where = nodes[0].where if nodes else ("?", "?")
    error = FusedGraphError(f"tpu fused eager: the graph of {len(nodes)} ops from {op} (created at {where}) "
                            f"did not run: an earlier graph computing one of its inputs failed ({cause})")
    error.__cause__ = cause
    for _, _, la in live:
        la.error = error
        la.node = la.launch = None
    undo(writes)


# id(program) -> (weak ref to it, the graph key it passed check_program_shapes for): a graph's key fixes its
# values' shapes, so a program run again for an equal key needs no second look (reading out_info builds its
# outputs' structs); weak, so that a program the cache dropped is freed
_CHECKED = caches.register("fused programs checked", caches.Bounded(program_cache.max_programs))


def check_program_shapes(prog, key, donate, out_sig, live) -> None:
    """A program (compiled now or found on disk) must return the shapes its graph's values were recorded
    with; one that does not (a wrong cache entry) is forgotten before it runs, and the graph runs op by op
    (the error goes to the replay)."""
    found = _CHECKED.get(id(prog))
    if found is not None and found[0]() is prog and found[1] == key:
        return
    _check_program_shapes(prog, key, donate, out_sig, live)
    try:
        _CHECKED[id(prog)] = (weakref.ref(prog), key)
    except TypeError:  # (a program object that takes no weak reference: checked at every run)
        pass


def _check_program_shapes(prog, key, donate, out_sig, live) -> None:
    info = getattr(prog, "out_info", None)
    if info is None:
        return
    shapes = [tuple(s.shape) for s in info] if isinstance(info, (tuple, list)) else None
    position = {o: k for k, o in enumerate(out_sig)}
    for i, j, la in live:
        k = position[(i, j)]
        if shapes is None or k >= len(shapes) or shapes[k] != la.shape:
            program_cache.discard(key, donate=donate)
            got = "another structure" if shapes is None or k >= len(shapes) else f"shape {shapes[k]}"
            raise FusedGraphError(f"tpu fused eager: the graph's program returns {got} for a value recorded "
                                  f"as {la.shape} (internal error; the program is dropped)")


def collectives_of(nodes) -> str:
    names = [n.where[0] for n in nodes if isinstance(n.key, tuple) and n.key[:1] == ("collective",)]
    return f"a fused graph of {len(nodes)} ops with collectives {', '.join(names[:6])}"

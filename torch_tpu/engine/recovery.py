"""When a fused graph fails as a whole: run its ops one by one, so that its failure behaves like the
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

from ..errors import out_of_memory
from ..runtime import counters, program_cache


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


def run_op_by_op(nodes, inputs, live, writes, exc) -> RuntimeError | None:
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
        counters.counters["fused_graph_replays"] += 1  # (the stats key keeps its name: users read it)
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


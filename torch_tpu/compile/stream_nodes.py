"""Dynamo's stream ops in a graph compiled for the tpu (``torch.ops.streams.*``: a stream's or event's
``synchronize``, ``record_event``, ``wait_event``, ``wait_stream``, ``fork``/``join`` of the current stream,
``record_stream``; an event recorded after some work arrives wrapped in the ``control_deps`` higher-order op).

Dynamo puts them into the graph when the compiled code touches a stream: diffusers' group offloading with
``use_stream=True`` waits for the stream that prefetched a block's weights in the hook that runs before the
block (``torch.tpu.Stream``, ``engine/streams.py``). None of them belongs inside an XLA program: the program
runs whole, and PJRT already orders it after the uploads of its inputs. So they run on the host, beside the
program: before it when no computing op precedes them in the graph (the prefetch wait), after it otherwise (an
event recorded after the work, which then covers the whole program). ``record_stream`` (and ``sync_dealloc``,
its form with an event) does nothing on the tpu and is dropped. The graph without them is compiled as one
program (with them it ran op by op).
"""
from __future__ import annotations

import operator

import torch

_DROPPED = ("record_stream", "sync_dealloc")  # take a tensor; nothing to do on the tpu (engine/streams.py)


def _is_stream_op(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.namespace == "streams"


def _is_control_deps(target) -> bool:
    return getattr(target, "__name__", None) == "control_deps" or getattr(target, "_name", None) == "control_deps"


def _host_call(node):
    """(op, args) to run on the host for a stream node, or None where it does nothing on the tpu."""
    if node.target._opname in _DROPPED:
        return None
    if any(isinstance(a, torch.fx.Node) for a in node.args) or node.kwargs:
        raise NotImplementedError(f"torch.compile(backend='tpu'): stream op {node.target} with tensor arguments")
    return node.target, tuple(node.args)


def _stream_only_subgraph(gm, node):
    """For ``control_deps(deps, subgraph, *args)`` whose subgraph holds only stream ops: the host calls, and
    for each element of its output the outer argument it passes through (None for a stream op's None)."""
    sub = getattr(gm, node.args[1].target, None) if isinstance(node.args[1], torch.fx.Node) else None
    if not isinstance(sub, torch.fx.GraphModule):
        return None
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    calls, passthrough = [], []
    for n in sub.graph.nodes:
        if n.op == "call_function":
            if not _is_stream_op(n.target):
                return None
            call = _host_call(n)
            if call is not None:
                calls.append(call)
        elif n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
            for o in outs:
                if isinstance(o, torch.fx.Node) and o.op == "placeholder":
                    passthrough.append(node.args[2 + placeholders.index(o)])
                elif o is None or (isinstance(o, torch.fx.Node) and _is_stream_op(o.target)):
                    passthrough.append(None)
                else:
                    return None
    return calls, passthrough


def take(gm: torch.fx.GraphModule) -> tuple[list, list]:
    """Remove the stream ops from ``gm``: the host calls to make before and after its program."""
    before, after = [], []
    computed = False
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if _is_stream_op(node.target) and not node.users:
            call = _host_call(node)
            if call is not None:
                (after if computed else before).append(call)
            gm.graph.erase_node(node)
            changed = True
            continue
        if _is_control_deps(node.target):
            found = _stream_only_subgraph(gm, node)
            if found is not None:
                calls, passthrough = found
                for user in list(node.users):
                    if user.target is not operator.getitem or passthrough[user.args[1]] is None and user.users:
                        break
                else:
                    for user in list(node.users):
                        replacement = passthrough[user.args[1]]
                        if replacement is not None:
                            user.replace_all_uses_with(replacement)
                        gm.graph.erase_node(user)
                    gm.graph.erase_node(node)
                    after.extend(calls)
                    changed = True
                    continue
        if node.target is not operator.getitem:
            computed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return before, after


def around(run, before: list, after: list):
    """``run`` (a boxed graph runner) with the host calls around it."""
    if not before and not after:
        return run

    def run_with_stream_calls(args):
        for op, op_args in before:
            op(*op_args)
        out = run(args)
        for op, op_args in after:
            op(*op_args)
        return out

    run_with_stream_calls._boxed_call = True
    return run_with_stream_calls

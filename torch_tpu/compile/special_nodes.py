"""Graph nodes the op table cannot take as they are: activation checkpointing's rng higher-order ops
(``run_and_save_rng_state`` / ``run_with_rng_state``) and data-dependent ops whose output shape the graph
fixes anyway."""
from __future__ import annotations

import operator

import torch

from ..ops import calling
from ..runtime import platform, rng


RNG_HOPS = (torch.ops.higher_order.run_and_save_rng_state, torch.ops.higher_order.run_with_rng_state)


class OpOutputs:
    """The node an rng HOP's op outputs conform to: the HOP node's own value (``run_with_rng_state``) or
    its ``getitem(node, 1)`` user's (``run_and_save_rng_state`` returns (state, outputs))."""

    def __init__(self, node, op):
        val = node.meta.get("val")
        if node.target is RNG_HOPS[0]:
            users = [u for u in node.users if u.target is operator.getitem and u.args[1] == 1]
            val = users[0].meta.get("val") if users else None
        self.meta = {"val": val}
        self.target = op


def rng_state(jax, rng_key):
    """A key as the uint8 vector torch's rng state is (its key data's bytes)."""
    data = jax.random.key_data(rng_key).reshape(-1)
    return jax.lax.bitcast_convert_type(data, jax.numpy.uint8).reshape(-1)


def rng_key_of_state(jax, state):
    data = jax.lax.bitcast_convert_type(state.reshape(-1, 4), jax.numpy.uint32)
    return rng.make_key(data)


def run_hop(plan, jax, node, args, kwargs, key, idx, conform_like):
    low = plan.lowerings[node]
    if node.target is RNG_HOPS[0]:
        op, op_args, rng_key = args[0], args[1:], jax.random.fold_in(key, idx)
    else:
        op, op_args, rng_key = args[1], args[2:], rng_key_of_state(jax, args[0])
    try:
        out = calling.invoke(low, op_args, kwargs, precision=plan.precision, rng_key=rng_key,
                             results=node.meta.get("val"))
    except Exception as exc:
        raise RuntimeError(f"torch.compile(backend='tpu'): lowering {op} ({node.target}) failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    out = conform_like(OpOutputs(node, op), out)
    return (rng_state(jax, rng_key), out) if node.target is RNG_HOPS[0] else out


def concrete_rng_states(gm, plan, example_inputs):
    """A backward graph's saved rng states (``run_with_rng_state``) come with a symbolic size (torch
    describes a CPU generator state); the program takes a key's bytes (``rng_state``)."""
    if not plan.rng_states:
        return example_inputs
    jax = platform.jax()
    nbytes = jax.random.key_data(rng.make_key(rng.peek_key_data())).size * 4
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [torch.empty(nbytes, dtype=torch.uint8, device="meta") if p in plan.rng_states else x
            for p, x in zip(placeholders, example_inputs)]


def static_variant(node, func, low):
    """A data-dependent op whose output shape the graph fixes anyway (``repeat_interleave(repeats,
    output_size=n)``: the backward of repeat_interleave with output_size, too): its traceable lowering."""
    if func is torch.ops.aten.repeat_interleave.Tensor:
        size = node.kwargs.get("output_size", node.args[1] if len(node.args) > 1 else None)
        if isinstance(size, int):
            import dataclasses

            from ..ops import indexing

            return dataclasses.replace(low, fn=indexing.repeat_interleave_tensor_sized, data_dependent=False)
    return low

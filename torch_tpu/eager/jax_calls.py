"""``torch_tpu.call_jax``: a JAX function (a Pallas kernel, a JAX library op) called on tpu tensors inside a
torch program, differentiable through JAX's VJP (torchax names it so).

The tensors' arrays are handed to the function without a copy (``to_jax``), its arrays come back as tpu
tensors without a copy (``from_jax``). When an input requires grad, the call is ``jax.vjp`` of the
function and autograd's backward calls the VJP with the outputs' gradients: a model can train through
the JAX code. The function runs with JAX's own settings (32-bit unless the caller turned 64-bit on).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils import _pytree as pytree

from ..runtime import dynamo_frames, platform
from ..tensor.interop import from_jax, to_jax
from ..tensor.tensor import TpuTensor

__all__ = ["call_jax"]


class _Call:
    """The function and the non-tensor parts of its arguments; what the forward learnt for backward."""

    __slots__ = ("fn", "spec", "leaves", "slots", "out_spec", "out_static", "vjp", "diff", "out_kinds")

    def __init__(self, fn, spec, leaves, slots):
        self.fn, self.spec, self.leaves, self.slots = fn, spec, leaves, slots
        self.out_spec = self.out_static = self.vjp = self.diff = self.out_kinds = None

    def call(self, arrays):
        """fn(*args, **kwargs) with the tensor leaves replaced by ``arrays``: the flat leaves it returns."""
        leaves = list(self.leaves)
        for slot, a in zip(self.slots, arrays):
            leaves[slot] = a
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        out = self.fn(*args, **kwargs)
        jax = platform.jax()
        flat, self.out_spec = jax.tree_util.tree_flatten(out)
        self.out_kinds = [isinstance(x, jax.Array) for x in flat]
        self.out_static = [None if k else x for x, k in zip(flat, self.out_kinds)]
        return tuple(x for x, k in zip(flat, self.out_kinds) if k)


class _JaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _Call, *tensors):
        jax = platform.jax()
        arrays = [to_jax(t) for t in tensors]
        diff = [i for i, need in enumerate(ctx.needs_input_grad[1:])
                if need and (tensors[i].dtype.is_floating_point or tensors[i].dtype.is_complex)]
        call.diff = diff
        if diff:
            def differentiable(*diff_arrays):
                full = list(arrays)
                for i, a in zip(diff, diff_arrays):
                    full[i] = a
                return call.call(full)

            outs, call.vjp = jax.vjp(differentiable, *[arrays[i] for i in diff])
        else:
            outs = call.call(arrays)
        results = tuple(from_jax(o) for o in outs)
        ctx.call = call
        ctx.out_meta = [(tuple(o.shape), o.dtype) for o in outs]
        ctx.mark_non_differentiable(*[r for r in results if not (r.dtype.is_floating_point or r.dtype.is_complex)])
        return results

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        if call.vjp is None:  # no floating input required grad
            return (None,) * len(ctx.needs_input_grad)
        jax = platform.jax()
        jnp = jax.numpy
        cotangents = []
        for g, (shape, dtype) in zip(grads, ctx.out_meta):
            if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.complexfloating)):
                cotangents.append(np.zeros(shape, dtype=jax.dtypes.float0))
            elif g is None:
                cotangents.append(jnp.zeros(shape, dtype))
            else:
                cotangents.append(to_jax(g.contiguous() if isinstance(g, TpuTensor) else g.to("tpu")))
        in_grads = call.vjp(tuple(cotangents))
        out = [None] * (len(ctx.needs_input_grad) - 1)
        for i, g in zip(call.diff, in_grads):
            out[i] = from_jax(g)
        return (None, *out)


def call_jax(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with every tpu tensor among the arguments (in any list, tuple or dict) given
    to ``fn`` as its ``jax.Array`` and every ``jax.Array`` it returns given back as a tpu tensor (same
    structure). Differentiable: if an input requires grad, autograd's backward is JAX's VJP of ``fn``."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    slots, tensors = [], []
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor):
            if not isinstance(x, TpuTensor):
                raise TypeError(f"torch_tpu.call_jax takes tpu tensors; argument leaf {i} is a {x.device} "
                                "tensor: move it with .to('tpu') first")
            slots.append(i)
            tensors.append(x)
    call = _Call(fn, spec, leaves, slots)
    results = _JaxFunction.apply(call, *tensors)
    jax = platform.jax()
    it = iter(results)
    flat = [next(it) if kind else static for kind, static in zip(call.out_kinds, call.out_static)]
    return jax.tree_util.tree_unflatten(call.out_spec, flat)


# torch.compile: a call_jax is a graph break (the JAX function is opaque to dynamo; under fullgraph=True
# dynamo says so), and runs as plain Python in the compiled function (the attribute is what
# torch.compiler.disable sets, without importing dynamo at import torch)
call_jax._torchdynamo_disable = True
call_jax._torchdynamo_disable_msg = "torch_tpu.call_jax runs a JAX function: a graph break"
dynamo_frames.keep_out(call_jax)

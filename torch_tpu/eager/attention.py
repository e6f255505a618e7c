"""``scaled_dot_product_attention`` on tpu tensors as ONE op (``tpu::attention``), forward and backward.

torch 2.13 picks SDPA's kernel in C++ (``_fused_sdp_choice_stub``, a DispatchStub Python cannot fill),
so a Python backend would get the math decomposition (about 14 aten ops: bmm, _safe_softmax, copies of
the score matrix) unless it intercepts the op before its CompositeImplicitAutograd kernel runs:

* a kernel for ``aten::scaled_dot_product_attention`` at the AutogradPrivateUse1 key (a backend
  autograd kernel wins over the composite one) calls ``tpu::attention``, whose Autograd kernel is a
  ``torch.autograd.Function`` with ``tpu::attention_backward`` as its backward;
* under inference_mode the autograd keys are skipped and the aten op itself reaches
  ``__torch_dispatch__``: ``sdpa_without_autograd`` (a rewrite) sends it to the op path, where the same
  lowering computes it (``ops/attention.py``).

Compiled mode keeps attention as one op too: ``rewrite_graph`` turns SDPA calls in dynamo's torch-level
graph into ``tpu::attention`` before AOTAutograd, which would otherwise decompose SDPA into its math path
on the meta stand-ins; the aten graphs then hold ``tpu.attention`` (and ``tpu.attention_backward`` in a
backward graph, from its autograd kernel here), lowered by ``ops/attention.py`` as in eager mode.

Dropout (p > 0), and a float mask that needs a gradient, keep torch's own decomposition.
Torch only: ``define()`` runs at ``import torch`` (``_registration``).
"""
from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

from ..ops import attention as attention_op
from ..runtime import dynamo_frames

# the op path is imported where it runs: this module loads at ``import torch``, the op path at the
# first op

_LIBS: list = []


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal, scale, enable_gqa):
        with torch._C._AutoDispatchBelowAutograd():
            out = torch.ops.tpu.attention.default(q, k, v, attn_mask, is_causal, scale, enable_gqa)
        ctx.save_for_backward(q, k, v, attn_mask)
        ctx.static = (is_causal, scale, enable_gqa)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, attn_mask = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: a backward that is itself differentiable
            return (*_differentiable_backward(grad_out, q, k, v, attn_mask, *ctx.static), None, None, None, None)
        gq, gk, gv = torch.ops.tpu.attention_backward.default(grad_out, q, k, v, attn_mask, *ctx.static)
        return gq, gk, gv, None, None, None, None


def _differentiable_backward(grad_out, q, k, v, attn_mask, is_causal, scale, enable_gqa):
    """The gradients through torch's decomposition of SDPA, recorded by autograd (double backward,
    gradient penalties): the one-op backward above is a single program autograd cannot see into."""
    # each input through its own alias: autograd.grad then gives the partial derivative through that
    # argument only. With q, k, v themselves it gave the total one: a v computed from q (``v = q * 0.5
    # + k``), or one tensor passed as q, k and v (self-attention), counted the other arguments' paths again
    # (gradients 3x too large in self-attention), and autograd added them once more
    qkv = [t.view_as(t) if t.requires_grad else t.detach().requires_grad_() for t in (q, k, v)]
    out = torch.ops.aten.scaled_dot_product_attention.default.decompose(
        *qkv, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa)
    return torch.autograd.grad(out, qkv, grad_out, create_graph=True)


def _attention_autograd(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        raise RuntimeError("tpu::attention: attn_mask requires grad, which tpu::attention does not "
                           "compute; call torch.nn.functional.scaled_dot_product_attention instead")
    return _Attention.apply(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def needs_decomposition(attn_mask, dropout_p) -> bool:
    """Dropout, or a mask gradient: torch's decomposition computes these, not tpu::attention."""
    return (not isinstance(dropout_p, (int, float)) or dropout_p > 0.0
            or (attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled()))


def transformed(*tensors) -> bool:
    """A torch.func transform (grad, vjp, jacrev, jvp, jacfwd, hessian: ``_Attention`` is a one-op
    autograd.Function these cannot see into) or a forward-mode AD tangent on an input (``_Attention`` has
    no jvp): torch's decomposition computes these, as on CPU (``_Attention`` would raise)."""
    if torch._C._are_functorch_transforms_active():
        return True
    if fwAD._current_level < 0:
        return False
    return any(t is not None and fwAD.unpack_dual(t).tangent is not None for t in tensors)


def needs_backward(*tensors) -> bool:
    """Whether autograd must see into an op over ``tensors`` (None entries skipped): grad mode on with one
    requiring grad, or a torch.func transform or forward-AD tangent (``transformed``). A one-op lowering without
    a derivative of its own serves only calls where this is False."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return True
    return transformed(*tensors)


def _sdpa_autograd_tpu(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    if needs_decomposition(attn_mask, dropout_p) or transformed(q, k, v, attn_mask):
        return torch.ops.aten.scaled_dot_product_attention.default.decompose(
            q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return torch.ops.tpu.attention.default(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def sdpa_without_autograd(func, args, kwargs):
    """aten SDPA reaching ``__torch_dispatch__`` (inference_mode): the lowering, or torch's
    decomposition when dropout is on."""
    dropout = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    if needs_decomposition(None, dropout):
        return func.decompose(*args, **kwargs)
    from .op_path import run_op

    return run_op(func, args, kwargs)


def define() -> None:
    """Define the tpu ops and route aten SDPA on tpu tensors to them (once per process)."""
    if _LIBS:
        return
    attention_op.define()
    lib = torch.library.Library("tpu", "IMPL")
    lib.impl("attention", _attention_autograd, "Autograd")
    aten_lib = torch.library.Library("aten", "IMPL")
    aten_lib.impl("scaled_dot_product_attention", _sdpa_autograd_tpu, "AutogradPrivateUse1")
    _LIBS.extend([lib, aten_lib])
    # torch calls these from C++ when the op runs eagerly inside a compiled region (runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([_attention_autograd, _sdpa_autograd_tpu, _Attention.forward, _Attention.backward])


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def rewrite_graph(gm: torch.fx.GraphModule) -> int:
    """SDPA calls (constant dropout_p == 0) -> tpu::attention, in place. Returns how many."""
    define()
    targets = {torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention,
               torch.ops.aten.scaled_dot_product_attention.default}
    n = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in targets:
            continue
        bound = dict(zip(_SDPA_ARGS, node.args))
        bound.update(node.kwargs)
        if set(bound) - set(_SDPA_ARGS) or not {"query", "key", "value"} <= set(bound):
            continue  # a call this rewrite does not understand: left to AOTAutograd
        dropout = bound.get("dropout_p", 0.0)
        if not isinstance(dropout, (int, float)) or dropout > 0.0:
            continue  # torch's decomposition draws the dropout mask
        mask = bound.get("attn_mask")
        if isinstance(mask, torch.fx.Node) and getattr(mask.meta.get("example_value"), "requires_grad", False):
            continue  # a mask that needs a gradient: torch's decomposition computes it
        node.target = torch.ops.tpu.attention.default
        node.args = (bound["query"], bound["key"], bound["value"])
        node.kwargs = {"attn_mask": mask, "is_causal": bound.get("is_causal", False),
                       "scale": bound.get("scale"), "enable_gqa": bound.get("enable_gqa", False)}
        n += 1
    if n:
        gm.recompile()
    return n

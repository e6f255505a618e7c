"""Compiled mode keeps attention as one op: SDPA calls in dynamo's graph become ``tpu::attention``.

Run on dynamo's torch-level graph before AOTAutograd, which would otherwise decompose SDPA into its
math path on the meta stand-ins. The aten graphs then hold ``tpu.attention`` (and
``tpu.attention_backward`` in a backward graph, from its autograd kernel: ``eager/attention.py``),
lowered by ``ops/attention.py`` like in eager mode. Dropout (p > 0) keeps torch's decomposition.
"""
from __future__ import annotations

import torch

from ..eager import attention as eager_attention

_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def rewrite_graph(gm: torch.fx.GraphModule) -> int:
    """SDPA calls (constant dropout_p == 0) -> tpu::attention, in place. Returns how many."""
    eager_attention.define()
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

"""torch_tpu's own ops (namespace ``tpu``): their schemas and meta kernels.

``tpu::attention`` is ``scaled_dot_product_attention`` without dropout, kept as ONE op in every mode
so that it is lowered as one computation (``ops/attention.py``) instead of torch's math
decomposition (about 14 aten ops, the score matrix materialised several times);
``tpu::attention_backward`` is its gradient for query, key and value. The eager layer routes SDPA to
them (``eager/attention.py``), the compile layer rewrites dynamo graphs to them
(``compile/attention.py``).

Torch only (defined at ``import torch``, before any lowering module imports JAX): the op table
registers lowerings for these ops, so their definition sits in its layer.
"""
from __future__ import annotations

import torch

_LIBS: list = []

ATTENTION_SCHEMA = ("attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
                    "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> Tensor")
ATTENTION_BACKWARD_SCHEMA = (
    "attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
    "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> (Tensor, Tensor, Tensor)")


def _meta_like(t):
    if t is None:
        return None
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _attention_meta(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    # torch's own argument checks and result shape: SDPA's math path on meta stand-ins. CPU torch's
    # kernel accepts a mask together with is_causal (it applies both, as the lowering does); the math
    # path alone refuses that pair, so the mask is checked without is_causal.
    out = torch.ops.aten.scaled_dot_product_attention.default(
        _meta_like(q), _meta_like(k), _meta_like(v), _meta_like(attn_mask), 0.0,
        is_causal and attn_mask is None, scale=scale, enable_gqa=enable_gqa)
    return q.new_empty(out.shape)


def _attention_backward_meta(grad_out, q, k, v, attn_mask=None, is_causal=False, scale=None,
                             enable_gqa=False):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def define() -> list:
    """Define the ``tpu`` ops once per process; returns the libraries (kept alive here)."""
    if not _LIBS:
        lib = torch.library.Library("tpu", "DEF")
        lib.define(ATTENTION_SCHEMA)
        lib.define(ATTENTION_BACKWARD_SCHEMA)
        lib.impl("attention", _attention_meta, "Meta")
        lib.impl("attention_backward", _attention_backward_meta, "Meta")
        _LIBS.append(lib)
    return _LIBS

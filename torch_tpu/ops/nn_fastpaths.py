"""The inference fast paths of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``.

torch takes them on every device it lists, the tpu (PrivateUse1) included, whenever autograd is off
and the module is in eval mode: one native op per layer instead of the module's Python code. The masks
arrive as ``merge_masks`` leaves them (mask type 0: (L, S), 1: a (B, S) key padding mask, 2: (B, H, L,
S)), boolean (True masks out) or additive. The softmax is a plain one, as in torch's kernels: a fully
masked row gives NaN.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ._util import upcast
from .nn import linear, native_layer_norm
from .registry import aten, register


def _attention_scores_mask(s, mask, mask_type):
    if mask is None:
        return s
    if mask_type == 1 or (mask_type is None and mask.ndim == 2 and mask.shape[0] == s.shape[0] != s.shape[-2]):
        mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])  # key padding: (B, S) -> (B, 1, 1, S)
    if mask.dtype == jnp.bool_:
        return jnp.where(mask, -jnp.inf, s)
    return s + upcast(mask)


@register(aten._native_multi_head_attention.default, matmul=True)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None, precision=None):
    e = embed_dim
    if key is query and value is query:
        q, k, v = jnp.split(linear(query, qkv_weight, qkv_bias, precision), 3, axis=-1)
    else:
        w, b = jnp.split(qkv_weight, 3, axis=0), jnp.split(qkv_bias, 3, axis=0)
        q, k, v = (linear(t, w[i], b[i], precision) for i, t in enumerate((query, key, value)))

    def heads(t):  # (B, L, E) -> (B, H, L, E/H)
        return t.reshape(t.shape[0], t.shape[1], num_head, e // num_head).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    s = jnp.einsum("bhqd,bhkd->bhqk", upcast(q), upcast(k)) / math.sqrt(e // num_head)
    p = jax.nn.softmax(_attention_scores_mask(s, mask, mask_type), axis=-1)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, upcast(v)).astype(query.dtype)
    out = out.transpose(0, 2, 1, 3).reshape(query.shape[0], query.shape[1], e)
    out = linear(out, proj_weight, proj_bias, precision)
    if not need_weights:
        return out, jnp.zeros((0,), query.dtype)  # the meta kernel's empty weights (eager returns None)
    weights = p.mean(axis=1) if average_attn_weights else p
    return out, weights.astype(query.dtype)


@register(aten._transformer_encoder_layer_fwd.default, matmul=True)
def transformer_encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                              use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                              norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                              mask_type=None, precision=None):
    def norm(x, w, b):
        return native_layer_norm(x, (embed_dim,), w, b, eps)[0]

    def attention(x):
        return native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                           proj_bias, mask, False, True, mask_type, precision)[0]

    def feed_forward(x):
        h = linear(x, ffn_weight_1, ffn_bias_1, precision)
        h = jax.nn.gelu(h, approximate=False) if use_gelu else jnp.maximum(h, 0)
        return linear(h, ffn_weight_2, ffn_bias_2, precision)

    if norm_first:
        x = src + attention(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attention(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)

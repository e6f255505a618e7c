"""The fused LSTM and GRU cells that ``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` call on
every device but the CPU, and their backwards.

The forward's ``workspace`` output holds what the backward needs (the activated gates, and for the GRU
the previous hidden state and the hidden new-gate); only these lowerings read it, so its layout is ours.
Activations run in float32 for half types, like torch's accumulate type.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from . import elementary
from ._util import upcast
from .registry import aten, register


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    g = upcast(input_gates) + upcast(hidden_gates)
    if input_bias is not None:
        g = g + upcast(input_bias)
    if hidden_bias is not None:
        g = g + upcast(hidden_bias)
    return g


@register(aten._thnn_fused_lstm_cell.default)
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    i, f, g, o = jnp.split(_gates(input_gates, hidden_gates, input_bias, hidden_bias), 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), elementary.tanh(g), jax.nn.sigmoid(o)
    cy = f * upcast(cx) + i * g
    hy = o * elementary.tanh(cy)
    dt = input_gates.dtype
    return hy.astype(dt), cy.astype(dt), jnp.concatenate([i, f, g, o], axis=1).astype(dt)


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = jnp.split(upcast(workspace), 4, axis=1)
    cy32 = upcast(cy)
    tanh_cy = elementary.tanh(cy32)
    ghy = jnp.zeros_like(cy32) if grad_hy is None else upcast(grad_hy)
    gcy = jnp.zeros_like(cy32) if grad_cy is None else upcast(grad_cy)
    gc = ghy * o * (1 - tanh_cy * tanh_cy) + gcy  # the cell state's whole gradient
    gi = gc * g * i * (1 - i)
    gf = gc * upcast(cx) * f * (1 - f)
    gg = gc * i * (1 - g * g)
    go = ghy * tanh_cy * o * (1 - o)
    dt = workspace.dtype
    grad_gates = jnp.concatenate([gi, gf, gg, go], axis=1)
    grad_bias = grad_gates.sum(0).astype(dt) if has_bias else None
    return grad_gates.astype(dt), (gc * f).astype(cx.dtype), grad_bias


@register(aten._thnn_fused_gru_cell.default)
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    gi = upcast(input_gates) + (0 if input_bias is None else upcast(input_bias))
    gh = upcast(hidden_gates) + (0 if hidden_bias is None else upcast(hidden_bias))
    i_r, i_z, i_n = jnp.split(gi, 3, axis=1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=1)
    r = jax.nn.sigmoid(i_r + h_r)
    z = jax.nn.sigmoid(i_z + h_z)
    n = elementary.tanh(i_n + r * h_n)
    h = upcast(hx)
    hy = n + z * (h - n)
    dt = input_gates.dtype
    return hy.astype(dt), jnp.concatenate([r, z, n, h, h_n], axis=1).astype(dt)


@register(aten._thnn_fused_gru_cell_backward.default)
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, h, h_n = jnp.split(upcast(workspace), 5, axis=1)
    g = upcast(grad_hy)
    g_z = g * (h - n) * z * (1 - z)
    g_n = g * (1 - z) * (1 - n * n)  # through tanh: the input's new-gate gradient
    g_r = g_n * h_n * r * (1 - r)
    dt = workspace.dtype
    grad_input = jnp.concatenate([g_r, g_z, g_n], axis=1)
    grad_hidden = jnp.concatenate([g_r, g_z, g_n * r], axis=1)
    grad_hx = (g * z).astype(dt)
    if has_bias:
        return (grad_input.astype(dt), grad_hidden.astype(dt), grad_hx,
                grad_input.sum(0).astype(dt), grad_hidden.sum(0).astype(dt))
    return grad_input.astype(dt), grad_hidden.astype(dt), grad_hx, None, None

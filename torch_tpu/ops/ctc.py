"""CTC loss: the forward (alpha) recursion and torch's backward formula, as ``lax.scan`` over time.

The lengths are static (``int[]`` in the aten schema: ``F.ctc_loss`` reads tensor lengths to the host
first, as on CPU), so every index below is built on the host; only the targets' values are traced.
Each batch element's extended label sequence is blank, t1, blank, t2, ..., tL, blank, padded to
2 * max(L) + 1 states; log_alpha has torch's shape (batch, time, states).

The backward is CPU's formula, not the derivative of the forward: it is the gradient with respect to the
logits under a log_softmax (``exp(lp) - exp(log_alpha + log_beta + nll - lp)`` summed over the states of
each class), which is what torch returns for ``log_probs``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .registry import aten, register

_NEG_INF = -jnp.inf


def _target_table(targets, target_lengths):
    """(batch, max L) target labels (0 past each length), from padded 2-d or concatenated 1-d targets."""
    n, max_len = len(target_lengths), max(list(target_lengths) + [0])
    if targets.ndim == 2:
        return targets[:, :max_len] if targets.shape[1] >= max_len else jnp.pad(
            targets, ((0, 0), (0, max_len - targets.shape[1])))
    offsets = np.concatenate([[0], np.cumsum(target_lengths)[:-1]]).astype(np.int64)
    pos = offsets[:, None] + np.arange(max_len)[None, :]
    valid = np.arange(max_len)[None, :] < np.asarray(target_lengths)[:, None]
    flat = targets[np.where(valid, pos, 0).reshape(-1)].reshape(n, max_len)
    return jnp.where(valid, flat, 0)


def _extended(targets, target_lengths, blank):
    """Extended labels (batch, S), a mask of the states each element uses, and whether state s may skip
    from s - 2 (a label different from the label two states before)."""
    table = _target_table(targets, target_lengths).astype(jnp.int32)
    n, max_len = table.shape
    states = 2 * max_len + 1
    labels = jnp.full((n, states), blank, jnp.int32)
    labels = labels.at[:, 1::2].set(table) if max_len else labels
    used = np.arange(states)[None, :] < (2 * np.asarray(target_lengths, np.int64) + 1)[:, None]
    prev2 = jnp.concatenate([jnp.full((n, 2), blank, jnp.int32), labels[:, :-2]], axis=1)
    skip = (labels != blank) & (labels != prev2) & (np.arange(states)[None, :] >= 2)
    return labels, jnp.asarray(used), skip


def _shift(a, k):
    """a[..., s - k] (-inf where s < k)."""
    return jnp.concatenate([jnp.full(a.shape[:-1] + (k,), _NEG_INF, a.dtype), a[..., :-k]], axis=-1)


def _unshift(a, k):
    """a[..., s + k] (-inf past the end)."""
    return jnp.concatenate([a[..., k:], jnp.full(a.shape[:-1] + (k,), _NEG_INF, a.dtype)], axis=-1)


def _lse(*xs):
    m = xs[0]
    for x in xs[1:]:
        m = jnp.maximum(m, x)
    safe = jnp.where(jnp.isneginf(m), 0, m)
    total = sum(jnp.exp(x - safe) for x in xs)
    return jnp.where(jnp.isneginf(m), _NEG_INF, safe + jnp.log(total))


def _emissions(log_probs, labels):
    """(time, batch, S): each state's log probability at each step."""
    return jnp.take_along_axis(log_probs, jnp.broadcast_to(labels[None], (log_probs.shape[0],) + labels.shape),
                               axis=2)


def _forward(log_probs, targets, input_lengths, target_lengths, blank):
    lp = log_probs if log_probs.ndim == 3 else log_probs[:, None]
    labels, used, skip = _extended(targets, target_lengths, blank)
    emit = _emissions(lp, labels)
    n, states = labels.shape
    start = np.full((n, states), -np.inf, np.float32)
    start[:, 0] = 0
    start[np.asarray(target_lengths) > 0, 1] = 0
    alpha0 = jnp.where(jnp.asarray(np.isfinite(start)), emit[0], _NEG_INF)

    def step(alpha, e):
        nxt = e + _lse(alpha, _shift(alpha, 1), jnp.where(skip, _shift(alpha, 2), _NEG_INF))
        nxt = jnp.where(used, nxt, _NEG_INF)
        return nxt, nxt

    _, rest = jax.lax.scan(step, alpha0, emit[1:])
    alphas = jnp.concatenate([alpha0[None], rest], axis=0)  # (time, batch, S)
    last_t = np.maximum(np.asarray(input_lengths, np.int64) - 1, 0)
    end = 2 * np.asarray(target_lengths, np.int64)
    final = alphas[last_t, np.arange(n)]  # (batch, S)
    a_end = final[np.arange(n), end]
    a_prev = jnp.where(jnp.asarray(end > 0), final[np.arange(n), np.maximum(end - 1, 0)], _NEG_INF)
    nll = -_lse(a_end, a_prev)
    return nll, jnp.moveaxis(alphas, 0, 1), labels, used, skip, emit


@register(aten._ctc_loss.default)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    nll, log_alpha = _forward(log_probs, targets, input_lengths, target_lengths, blank)[:2]
    if log_probs.ndim == 2:
        nll = nll[0]
    return nll, log_alpha


@register(aten._ctc_loss_backward.default)
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                      blank, zero_infinity=False):
    lp = log_probs if log_probs.ndim == 3 else log_probs[:, None]
    nll, alphas, labels, used, skip, emit = _forward(log_probs, targets, input_lengths, target_lengths, blank)
    time, n, classes = lp.shape
    lengths = np.asarray(input_lengths, np.int64)
    end = 2 * np.asarray(target_lengths, np.int64)
    # beta at each element's last step: the last blank and the last label; then backwards in time
    t_idx = np.arange(time)[:, None, None]
    s_idx = np.arange(labels.shape[1])[None, None, :]
    is_last = t_idx == (lengths - 1)[None, :, None]
    at_end = (s_idx == end[None, :, None]) | ((s_idx == (end - 1)[None, :, None]) & (end[None, :, None] > 0))
    skip_next = jnp.concatenate([skip[:, 2:], jnp.zeros((n, 2), bool)], axis=1)  # state s + 2 may skip to s

    def step(beta, inputs):
        e, last, active = inputs
        nxt = e + _lse(beta, _unshift(beta, 1), jnp.where(skip_next, _unshift(beta, 2), _NEG_INF))
        nxt = jnp.where(used & active, nxt, _NEG_INF)
        nxt = jnp.where(last, jnp.where(at_end[0], e, _NEG_INF), nxt)
        return nxt, nxt

    active = jnp.asarray(t_idx < lengths[None, :, None])
    init = jnp.full(labels.shape, _NEG_INF, lp.dtype)
    _, betas = jax.lax.scan(step, init, (emit, jnp.asarray(is_last), active), reverse=True)
    both = jnp.moveaxis(alphas, 0, 1) + betas  # (time, batch, S)
    # log-sum of alpha * beta over the states of each class
    onehot = labels[None, :, :, None] == jnp.arange(classes)[None, None, None, :]
    lcab = jax.nn.logsumexp(jnp.where(onehot, both[..., None], _NEG_INF), axis=2)
    g = jnp.broadcast_to(jnp.reshape(grad, (-1,)), (n,))  # per element (a 0-d grad when unbatched)
    out = (jnp.exp(lp) - jnp.exp(lcab + nll[None, :, None] - lp)) * g[None, :, None]
    out = jnp.where(jnp.asarray(t_idx < lengths[None, :, None]), out, 0)
    if zero_infinity:
        out = jnp.where(jnp.isinf(nll)[None, :, None], 0, out)
    return out if log_probs.ndim == 3 else out[:, 0]


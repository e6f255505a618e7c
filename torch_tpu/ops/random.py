"""Random ops. Each receives ``rng_key`` (derived in-program from the device RNG state)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .checks import require
from .registry import aten, register
from ._util import jdtype


def _float_dtype(dt):
    return jnp.float32 if dt in (jnp.bfloat16, jnp.float16) else dt


@register(aten.normal_.default, random=True)
def normal_(x, mean=0.0, std=1.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    return (jax.random.normal(rng_key, x.shape, dt) * std + mean).astype(x.dtype)


def _uniform(rng_key, shape, dt, lo=0.0, hi=1.0):
    """Uniform in [lo, hi) in dtype ``dt``. bf16/fp16 draw in float32; a draw that rounds up to ``hi`` in
    the narrow dtype becomes the largest value below it, so the range stays half-open as on CPU."""
    v = jax.random.uniform(rng_key, shape, _float_dtype(dt), minval=lo, maxval=hi)
    if v.dtype == dt:
        return v
    r = v.astype(dt)
    top = jnp.asarray(hi, jnp.float32).astype(dt)
    below = jnp.nextafter(top, jnp.asarray(-jnp.inf, dt))
    return jnp.where((r >= top) & (below >= jnp.asarray(lo, jnp.float32).astype(dt)), below, r)


@register(aten.uniform_.default, random=True)
def uniform_(x, from_=0.0, to=1.0, generator=None, *, rng_key, **kw):
    lo = kw.get("from", from_)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return jax.random.uniform(rng_key, x.shape, jnp.float32, minval=lo, maxval=to).astype(x.dtype)
    return _uniform(rng_key, x.shape, x.dtype, lo, to)


@register(aten.exponential_.default, random=True)
def exponential_(x, lambd=1.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    return (jax.random.exponential(rng_key, x.shape, dt) / lambd).astype(x.dtype)


def _probabilities(p):
    if hasattr(p, "shape"):  # a tensor of probabilities (a float p is checked on the host)
        require((p >= 0) & (p <= 1), "Expected p_in >= 0 && p_in <= 1 to be true, but got false.")


@register(aten.bernoulli_.float, aten.bernoulli_.Tensor, random=True)
def bernoulli_(x, p=0.5, generator=None, *, rng_key):
    _probabilities(p)
    return jax.random.bernoulli(rng_key, p, x.shape).astype(x.dtype)


@register(aten.bernoulli.default, random=True)
def bernoulli(x, generator=None, *, rng_key):
    _probabilities(x)
    return jax.random.bernoulli(rng_key, x, x.shape).astype(x.dtype)


@register(aten.bernoulli.p, random=True)
def bernoulli_p(x, p, generator=None, *, rng_key):
    return jax.random.bernoulli(rng_key, p, x.shape).astype(x.dtype)


@register(getattr(aten.random_, "from"), aten.random_.to, aten.random_.default, random=True)
def random_(x, *args, generator=None, rng_key, **kw):
    ints = [a for a in args if a is None or isinstance(a, int)]
    if len(ints) == 2:
        lo, hi = ints
    elif len(ints) == 1:
        lo, hi = 0, ints[0]
    else:
        lo, hi = 0, None
    if hi is None:
        if jnp.issubdtype(x.dtype, jnp.floating):
            hi = 2 ** jnp.finfo(x.dtype).nmant + 1
        elif x.dtype == jnp.bool_:
            hi = 2
        else:
            hi = int(jnp.iinfo(x.dtype).max) + 1 if x.dtype != jnp.int64 else 2 ** 63 - 1
    vals = jax.random.randint(rng_key, x.shape, lo, hi, dtype=jnp.int64)
    return vals.astype(x.dtype)


@register(aten.native_dropout.default, random=True)
def native_dropout(x, p, train, *, rng_key):
    if not train or p == 0:
        return x, jnp.ones(x.shape, jnp.bool_)
    keep = jax.random.bernoulli(rng_key, 1.0 - p, x.shape)
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    return jnp.where(keep, x * scale, 0).astype(x.dtype), keep


@register(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    return grad * mask.astype(grad.dtype) * scale


@register(aten.randperm.default, random=True)
def randperm(n, dtype=None, layout=None, device=None, pin_memory=None, *, rng_key):
    return jax.random.permutation(rng_key, n).astype(jdtype(dtype) or jnp.int64)


@register(aten.multinomial.default, random=True)
def multinomial(probs, num_samples, replacement=False, generator=None, *, rng_key):
    p = probs.astype(jnp.float32)
    require(jnp.isfinite(p) & (p >= 0), "probability tensor contains either `inf`, `nan` or element < 0")
    require(jnp.sum(p, axis=-1) > 0, "invalid multinomial distribution (sum of probabilities <= 0)")
    logits = jnp.log(p)
    if replacement:
        shape = probs.shape[:-1] + (num_samples,)
        return jax.random.categorical(rng_key, logits[..., None, :], axis=-1,
                                      shape=shape).astype(jnp.int64)
    # Gumbel top-k: sampling without replacement
    g = jax.random.gumbel(rng_key, probs.shape, jnp.float32)
    return jax.lax.top_k(logits + g, num_samples)[1].astype(jnp.int64)


# --- *_like factories (CompositeExplicit in torch, no decomposition reaches the op table) ------------
def _like_dtype(x, dtype):
    return jdtype(dtype) or x.dtype


@register(aten.randn_like.default, random=True)
def randn_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, *, rng_key):
    dt = _like_dtype(x, dtype)
    return jax.random.normal(rng_key, x.shape, _float_dtype(dt)).astype(dt)


@register(aten.rand_like.default, random=True)
def rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, *, rng_key):
    return _uniform(rng_key, x.shape, _like_dtype(x, dtype))


@register(aten.randint_like.default, aten.randint_like.low_dtype, random=True)
def randint_like(x, *bounds, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None,
                 rng_key):
    lo, hi = (0, bounds[0]) if len(bounds) == 1 else bounds
    return jax.random.randint(rng_key, x.shape, lo, hi, dtype=jnp.int64).astype(_like_dtype(x, dtype))


# --- factories as compiled graphs hold them (eager builds them as empty + normal_/uniform_/random_) -------
def _factory_dtype(dtype, default=None):
    import torch

    return jdtype(dtype) or jdtype(default or torch.get_default_dtype())


@register(aten.randn.default, aten.randn.generator, random=True)
def randn(size, *, rng_key, dtype=None, **_):
    dt = _factory_dtype(dtype)
    return normal_(jnp.zeros(tuple(size), dt), rng_key=rng_key)


@register(aten.rand.default, aten.rand.generator, random=True)
def rand(size, *, rng_key, dtype=None, **_):
    return _uniform(rng_key, tuple(size), _factory_dtype(dtype))


@register(aten.randint.default, aten.randint.generator, random=True)
def randint(high, size, *, rng_key, dtype=None, **_):
    import torch

    return jax.random.randint(rng_key, tuple(size), 0, high, dtype=jnp.int64).astype(
        _factory_dtype(dtype, torch.int64))


@register(aten.randint.low, aten.randint.low_generator, random=True)
def randint_low(low, high, size, *, rng_key, dtype=None, **_):
    import torch

    return jax.random.randint(rng_key, tuple(size), low, high, dtype=jnp.int64).astype(
        _factory_dtype(dtype, torch.int64))


@register(aten.normal_functional.default, random=True)
def normal_functional(x, mean=0.0, std=1.0, *, rng_key, generator=None):
    return normal_(x, mean, std, rng_key=rng_key)

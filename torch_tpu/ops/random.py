"""Random ops. Each receives ``rng_key`` (derived in-program from the device RNG state)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .checks import require
from .registry import aten, register
from ._util import jdtype


def _float_dtype(dt):
    return jnp.float32 if dt in (jnp.bfloat16, jnp.float16) else dt


# In-place random ops register their functional overloads too: a compiled graph holds those (AOTAutograd
# functionalises ``x.uniform_()`` into ``aten.uniform``), and both forms must draw from the same lowering.


@register(aten.normal_.default, aten.normal_functional.default, random=True)
def normal_(x, mean=0.0, std=1.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    return (jax.random.normal(rng_key, x.shape, dt) * std + mean).astype(x.dtype)


@register(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, random=True)
def normal_of_tensors(mean, std=1.0, generator=None, *, rng_key):
    """``torch.normal(mean, std)`` with a tensor mean or std (broadcast together)."""
    if hasattr(std, "shape"):  # a float std is checked on the host (torch's meta kernel)
        require(std >= 0, "normal expects all elements of std >= 0.0")
    dt = _float_dtype(jnp.result_type(*[v for v in (mean, std) if hasattr(v, "shape")]))
    shape = jnp.broadcast_shapes(jnp.shape(mean), jnp.shape(std))
    return jax.random.normal(rng_key, shape, dt) * jnp.asarray(std, dt) + jnp.asarray(mean, dt)


@register(aten.normal.float_float, random=True)
def normal_sized(mean, std, size, *, rng_key, dtype=None, **_):
    dt = _factory_dtype(dtype)
    return (jax.random.normal(rng_key, tuple(size), _float_dtype(dt)) * std + mean).astype(dt)


@register(aten.log_normal_.default, aten.log_normal.default, random=True)
def log_normal_(x, mean=1.0, std=2.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    return jnp.exp(jax.random.normal(rng_key, x.shape, dt) * std + mean).astype(x.dtype)


@register(aten.cauchy_.default, aten.cauchy.default, random=True)
def cauchy_(x, median=0.0, sigma=1.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    u = jax.random.uniform(rng_key, x.shape, dt)
    return (median + sigma * jnp.tan(jnp.pi * (u - 0.5))).astype(x.dtype)


@register(aten.geometric_.default, aten.geometric.default, random=True)
def geometric_(x, p, generator=None, *, rng_key):
    """The number of Bernoulli(p) trials up to the first success (1, 2, ...), as CPU draws it: for
    integer tensors too."""
    dt = x.dtype if x.dtype == jnp.float64 else jnp.float32
    u = jax.random.uniform(rng_key, x.shape, dt)
    return (jnp.floor(jnp.log1p(-u) / jnp.log1p(jnp.asarray(-p, dt))) + 1).astype(x.dtype)


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


@register(aten.uniform_.default, aten.uniform.default, random=True)
def uniform_(x, from_=0.0, to=1.0, generator=None, *, rng_key, **kw):
    lo = kw.get("from", from_)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return jax.random.uniform(rng_key, x.shape, jnp.float32, minval=lo, maxval=to).astype(x.dtype)
    return _uniform(rng_key, x.shape, x.dtype, lo, to)


@register(aten.exponential_.default, aten.exponential.default, random=True)
def exponential_(x, lambd=1.0, generator=None, *, rng_key):
    dt = _float_dtype(x.dtype)
    return (jax.random.exponential(rng_key, x.shape, dt) / lambd).astype(x.dtype)


def _probabilities(p):
    if hasattr(p, "shape"):  # a tensor of probabilities (a float p is checked on the host)
        require((p >= 0) & (p <= 1), "Expected p_in >= 0 && p_in <= 1 to be true, but got false.")


@register(aten.bernoulli_.float, aten.bernoulli_.Tensor, aten.bernoulli.Tensor, random=True)
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


@register(getattr(aten.random_, "from"), aten.random_.to, aten.random_.default, getattr(aten.random, "from"),
          aten.random.to, aten.random.default, random=True)
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


@register(aten.randperm.default, aten.randperm.generator, random=True)
def randperm(n, dtype=None, layout=None, device=None, pin_memory=None, *, rng_key, generator=None):
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


# --- torch.distributions' samplers (Gamma, Chi2, StudentT, Beta, Dirichlet, Poisson, Binomial) -------
def _tiny_floor(sample, dt):
    """CPU's gamma and Dirichlet samplers clamp to the smallest normal number (alpha <= 0 or NaN gives it)."""
    tiny = jnp.finfo(dt).tiny
    return jnp.where(sample > tiny, sample, jnp.where(jnp.isposinf(sample), sample, tiny))


@register(aten._standard_gamma.default, random=True)
def standard_gamma(alpha, generator=None, *, rng_key):
    a = jnp.where(alpha > 0, alpha, 1)
    sample = jax.random.gamma(rng_key, a, dtype=alpha.dtype)
    return _tiny_floor(jnp.where(alpha > 0, sample, 0), alpha.dtype)


@register(aten._standard_gamma_grad.default)
def standard_gamma_grad(alpha, sample):
    """d sample / d alpha at fixed CDF (the implicit reparameterization gradient torch uses)."""
    return jax.lax.random_gamma_grad(alpha, sample)


@register(aten._sample_dirichlet.default, random=True)
def sample_dirichlet(alpha, generator=None, *, rng_key):
    dt = _float_dtype(alpha.dtype)
    a = alpha.astype(dt)
    g = _tiny_floor(jnp.where(a > 0, jax.random.gamma(rng_key, jnp.where(a > 0, a, 1), dtype=dt), 0), dt)
    return _tiny_floor(g / jnp.sum(g, axis=-1, keepdims=True), dt).astype(alpha.dtype)


@register(aten.poisson.default, random=True)
def poisson(rates, generator=None, *, rng_key):
    require(rates >= 0, "invalid Poisson rate, expected rate to be non-negative")
    lam = jnp.where(rates >= 0, rates, 0).astype(_float_dtype(rates.dtype))
    # JAX's poisson takes threefry keys only: one derived from this op's rbg key
    key = jax.random.wrap_key_data(jax.random.bits(rng_key, (2,), jnp.uint32), impl="threefry2x32")
    return jax.random.poisson(key, lam, rates.shape, dtype=jnp.int32).astype(rates.dtype)


@register(aten.binomial.default, random=True)
def binomial(count, prob, generator=None, *, rng_key):
    dt = _float_dtype(count.dtype)
    n = jnp.broadcast_to(count, prob.shape).astype(dt)
    return jax.random.binomial(rng_key, n, prob.astype(dt), shape=prob.shape, dtype=dt).astype(count.dtype)


# Dirichlet.rsample's backward: torch's approximation of the reparameterized Beta gradient
# (ATen/native/Distributions.h, dirichlet_grad_one), every branch computed and the one torch takes selected.
_DIRICHLET_C = (
    (((1.003668233, -0.01061107488, -0.0657888334, 0.01201642863),
      (0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033),
      (-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013)),
     ((0.221950385, -0.3187676331, 0.01799915743, 0.01074823814),
      (-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057),
      (0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05)),
     ((-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565),
      (0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181),
      (0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05))),
    (((1, -0.02924021934, -0.04438342661, 0.007285809825),
      (0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521),
      (-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149)),
     ((0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273),
      (0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956),
      (-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05)),
     ((0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05),
      (0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05),
      (-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06))))


def _beta_grad_alpha_small(x, alpha, beta):
    dg = jax.scipy.special.digamma
    factor = dg(alpha) - dg(alpha + beta) - jnp.log(x)
    numer = jnp.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * (i - beta) * x / i
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    result = x * jnp.power(1 - x, -beta) * series
    return jnp.where(jnp.isnan(result), 0, result)


def _beta_grad_beta_small(x, alpha, beta):
    dg = jax.scipy.special.digamma
    factor = dg(alpha + beta) - dg(beta)
    numer, betas, dbetas, series = jnp.ones_like(x), jnp.ones_like(x), jnp.zeros_like(x), factor / alpha
    for i in range(1, 9):
        numer = numer * -x / i
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    result = -jnp.power(1 - x, 1 - beta) * series
    return jnp.where(jnp.isnan(result), 0, result)


def _beta_grad_alpha_mid(x, alpha, beta):
    total = alpha + beta
    mean = alpha / total
    std = jnp.sqrt(alpha * beta / (total + 1)) / total
    poly = 47 * x * (beta * beta) * (beta * beta) + alpha * (
        (43 + 20 * (16 + 27 * beta) * x) * (beta * beta) * beta + alpha * (
            3 * (59 + 180 * beta - 90 * x) * (beta * beta) + alpha * (
                (453 + 1620 * beta * (1 - x) - 455 * x) * beta + alpha * (8 * (1 - x) * (135 * beta - 11)))))
    prefactor_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    prefactor_den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    near_mean = prefactor_num / (1 - x) * poly / prefactor_den
    prefactor = -x / jnp.sqrt(2 * alpha * beta / total)
    stirling = ((1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) * (1 + 1 / (12 * beta) + 1 / (288 * beta * beta))
                / (1 + 1 / (12 * total) + 1 / (288 * total * total)))
    term1_num = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * (beta * beta)
    axbx = alpha * (x - 1) + beta * x
    term1 = term1_num / (jnp.sqrt(2 * alpha / beta) * jnp.power(total, 1.5) * axbx * axbx)
    term2 = 0.5 * jnp.log(alpha / (total * x))
    term3 = jnp.sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
    term4 = jnp.power(beta * jnp.log(beta / (total * (1 - x))) + alpha * jnp.log(alpha / (total * x)), -1.5)
    far = stirling * prefactor * (term1 + term2 * (term3 + jnp.where(x < mean, term4, -term4)))
    return jnp.where((mean - 0.1 * std <= x) & (x <= mean + 0.1 * std), near_mean, far)


@register(aten._dirichlet_grad.default)
def dirichlet_grad(x, alpha, total):
    dt = x.dtype
    acc = jnp.promote_types(dt, jnp.float32)
    x, alpha, total = (jnp.broadcast_to(v, jnp.broadcast_shapes(x.shape, alpha.shape, total.shape)).astype(acc)
                       for v in (x, alpha, total))
    beta = total - alpha
    boundary = total * x * (1 - x)
    u = jnp.log(x)
    a = jnp.log(alpha) - u
    b = jnp.log(total) - a
    p = q = 0.0
    for i, pu in enumerate((1.0, u, u * u)):
        for j, pa in enumerate((1.0, a, a * a)):
            cp, cq = _DIRICHLET_C[0][i][j], _DIRICHLET_C[1][i][j]
            p = p + pu * pa * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
            q = q + pu * pa * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
    dg = jax.scipy.special.digamma
    rational = p / q * (x * (dg(total) - dg(alpha)) / beta)
    out = jnp.where(
        (x <= 0.5) & (boundary < 2.5), _beta_grad_alpha_small(x, alpha, beta),
        jnp.where((x >= 0.5) & (boundary < 0.75), -_beta_grad_beta_small(1 - x, beta, alpha),
                  jnp.where((alpha > 6) & (beta > 6), _beta_grad_alpha_mid(x, alpha, beta), rational)))
    return out.astype(dt)


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

"""The logarithms, tanh and what is built from them, as every lowering calls them: XLA's own, or the float32
versions of ``precise_f32`` where the target platform's are coarser than CPU torch's.

Measured on a TPU v5e (``bench/tpu_probe.py``, ``bench/results/tpu/probe.json``): XLA:TPU's float32 ``log``
is off by up to ~4000 ulps (1.2e-4 absolute near 0.75), ``tanh`` by ~1400, and everything computed from them
inherits it (log1p, log2, log10, acosh, asinh, atanh, logaddexp, softplus, log_sigmoid, mish, log_softmax,
logsumexp, cross entropy ...): beyond float32's tolerance of CPU torch. The precise versions stay within 5
ulps of float64 there (tanh and softplus within ~80, from XLA:TPU's exp), and cost about the same as XLA's
on large arrays (memory-bound; log1p 1.7x, acosh 2x in isolation).

``TORCH_TPU_F32_MATH``: ``auto`` (default) uses them for float32 when the program is built for a TPU (also
while ``TORCH_TPU_CHECK_LOWERING=tpu`` traces a program for a TPU on another platform), ``precise``
everywhere (how CI tests them on the CPU), ``native`` never (XLA's own, faster where log-heavy float32 code
is the bottleneck). lgamma, digamma and erfinv are built on log in XLA too, and follow the same rule.
float32 ``exp``/``exp2``/``expm1`` reduce their argument exactly first (XLA:TPU's exp is tens of ulps off
even near 0, its expm1 ~1700; tanh, softplus and logaddexp use these). sin/cos/tan are XLA's own everywhere:
within 3/3/6 ulps of float64 up to 65000 radians on the chip.
An op whose floating results are all bfloat16 (``calling.invoke`` says so with
``results_in_bfloat16``) computes its float32 internals with XLA's own functions: their error (at most
~1e-4 relative on the chip) vanishes in the rounding to bfloat16's 8 bits, and the precise ones cost vector-unit
time that XLA:TPU may spend many times over: a bfloat16 FLUX.1-width feed-forward's tanh-GELU, fused into the
next matmul's operand, made that matmul 2.8x slower on the chip, and the compiled transformer 1.11x. float16
keeps them (its 11 bits see XLA:TPU's log error near 1). float64 and complex values always use XLA's.
"""
from __future__ import annotations

import contextlib
import threading

import jax
import jax.numpy as jnp

from .. import config
from ..runtime import platform
from . import precise_f32


_OP_RESULTS = threading.local()  # .bfloat16: the lowering traced on this thread rounds its results to bf16


@contextlib.contextmanager
def results_in_bfloat16(bfloat16: bool):
    """While a lowering traces: whether every floating result of its op is bfloat16."""
    before = getattr(_OP_RESULTS, "bfloat16", False)
    _OP_RESULTS.bfloat16 = bfloat16
    try:
        yield
    finally:
        _OP_RESULTS.bfloat16 = before


def _coarse_target(xs) -> bool:
    """Whether float32 values ``xs`` meet functions coarser than CPU torch's unless the precise ones stand in."""
    mode = config.settings().f32_math
    if mode == "native" or any(jnp.result_type(x) != jnp.float32 for x in xs):
        return False
    return mode == "precise" or platform.target() == "tpu"


def precise(*xs) -> bool:
    """Whether float32 values ``xs`` take the precise functions in the program being built."""
    return not getattr(_OP_RESULTS, "bfloat16", False) and _coarse_target(xs)


def coarse_for_bfloat16(*xs) -> bool:
    """Whether float32 values ``xs`` of an op with bfloat16 results take the target's coarse functions (the
    bfloat16 rule above): a formula that cancels (1 + tanh(u) in a GELU's negative tail) must not amplify
    their error there."""
    return getattr(_OP_RESULTS, "bfloat16", False) and _coarse_target(xs)


def _pick(native, name):
    fn = precise_f32.FUNCTIONS[name]

    def call(*xs):
        return fn(*xs) if precise(*xs) else native(*xs)

    call.__name__ = name
    call.__doc__ = f"{name}: XLA's, or precise_f32.{name} for float32 where the target is a TPU."
    return call


exp = _pick(jnp.exp, "exp")
exp2 = _pick(jnp.exp2, "exp2")
expm1 = _pick(jnp.expm1, "expm1")
log = _pick(jnp.log, "log")
log1p = _pick(jnp.log1p, "log1p")
log2 = _pick(jnp.log2, "log2")
log10 = _pick(jnp.log10, "log10")
tanh = _pick(jnp.tanh, "tanh")
arctanh = _pick(jnp.arctanh, "atanh")
arcsinh = _pick(jnp.arcsinh, "asinh")
arccosh = _pick(jnp.arccosh, "acosh")
logaddexp = _pick(jnp.logaddexp, "logaddexp")
logaddexp2 = _pick(jnp.logaddexp2, "logaddexp2")
softplus = _pick(jax.nn.softplus, "softplus")
log_sigmoid = _pick(jax.nn.log_sigmoid, "log_sigmoid")
lgamma = _pick(jax.scipy.special.gammaln, "lgamma")
erfinv = _pick(jax.scipy.special.erfinv, "erfinv")
digamma = _pick(lambda x: jnp.where(x == 0, jnp.copysign(jnp.inf, -x), jax.scipy.special.digamma(x)), "digamma")


def logsumexp(x, axis=None, keepdims=False):
    if not precise(x):
        return jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)
    m = jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)  # (an empty axis: -inf, as jax.nn's)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    out = log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else jnp.squeeze(out, axis=axis)


def log_softmax(x, axis=-1):
    if not precise(x):
        return jax.nn.log_softmax(x, axis=axis)
    shifted = x - jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf))
    return shifted - log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))

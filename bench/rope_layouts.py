"""What FLUX's rotary embedding costs on the device in each JAX formulation, inside the piece of a block it lives
in (the query projection, its RMSNorm in float32, the rotation, the transpose to attention's head-major
layout), so that XLA's layout choices around it are the real ones.

diffusers' ``apply_rotary_emb`` (use_real_unbind_dim=-1) pairs neighbouring channels: it reshapes the head dim
to [..., 64, 2], unbinds, stacks ``[-imag, real]`` and flattens back. On a TPU a trailing dimension of 2 gets
a (2, 128) tiling, and XLA:TPU's profile of the compiled FLUX.1-width transformer shows that reshape and the
transposing copies around it among the costliest non-matmul ops. Formulations timed here:

  pairs     diffusers' own: reshape [..., 64, 2], unbind, stack, flatten (what torch_tpu lowers today)
  roll      the pair swap as two lane rotations and a select: where(even, -roll(x, -1), roll(x, 1))
  matmul    the pair swap as a matmul by the fixed signed permutation (exact: one nonzero term per output)
  none      no rotation at all (the projection, the norm and the transpose alone: the floor of the piece)

    python bench/rope_layouts.py [--tokens 4608] [--heads 24] [--reps 20] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def _swap_pairs(x, how):
    if how == "pairs":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        real, imag = pairs[..., 0], pairs[..., 1]
        return jnp.stack([-imag, real], axis=-1).reshape(x.shape)
    if how == "roll":
        even = (jnp.arange(x.shape[-1]) % 2) == 0
        return jnp.where(even, -jnp.roll(x, -1, axis=-1), jnp.roll(x, 1, axis=-1))
    if how == "matmul":
        d = x.shape[-1]
        perm = np.zeros((d, d), np.float32)
        perm[np.arange(1, d, 2), np.arange(0, d, 2)] = -1.0  # out[2i] = -x[2i+1]
        perm[np.arange(0, d, 2), np.arange(1, d, 2)] = 1.0  # out[2i+1] = x[2i]
        return jnp.matmul(x, jnp.asarray(perm, x.dtype), precision=jax.lax.Precision.HIGHEST)
    raise ValueError(how)


def _piece(how, heads):
    def piece(h, w, norm_w, cos, sin):
        q = (h @ w).reshape(1, h.shape[0], heads, 128)
        qf = q.astype(jnp.float32)
        qn = (qf * jax.lax.rsqrt(jnp.mean(qf * qf, axis=-1, keepdims=True) + 1e-6) * norm_w).astype(q.dtype)
        if how != "none":
            x = qn.astype(jnp.float32)
            qn = (x * cos[None, :, None, :] + _swap_pairs(x, how) * sin[None, :, None, :]).astype(q.dtype)
        return qn.transpose(0, 2, 1, 3)
    return jax.jit(piece)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4608)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    width = args.heads * 128
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    h = jax.random.normal(k1, (args.tokens, width), jnp.bfloat16)
    w = (jax.random.normal(k2, (width, width), jnp.float32) * width ** -0.5).astype(jnp.bfloat16)
    norm_w = jnp.ones((128,), jnp.float32)
    angles = jax.random.uniform(k3, (args.tokens, 64), jnp.float32) * 6.28
    cos = jnp.repeat(jnp.cos(angles), 2, axis=-1)
    sin = jnp.repeat(jnp.sin(angles), 2, axis=-1)
    result = {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
              "tokens": args.tokens, "heads": args.heads, "ms": {}, "max_abs_diff_vs_pairs": {}}
    reference = None
    for how in ("pairs", "roll", "matmul", "none"):
        fn = _piece(how, args.heads)
        out = fn(h, w, norm_w, cos, sin).block_until_ready()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn(h, w, norm_w, cos, sin).block_until_ready()
            times.append(time.perf_counter() - t0)
        result["ms"][how] = round(1e3 * sorted(times)[len(times) // 2], 3)
        if how == "pairs":
            reference = np.asarray(out.astype(jnp.float32))
        elif how != "none":
            result["max_abs_diff_vs_pairs"][how] = float(np.max(np.abs(np.asarray(out.astype(jnp.float32))
                                                                         - reference)))
        print(how, result["ms"][how], "ms", result["max_abs_diff_vs_pairs"].get(how, ""), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

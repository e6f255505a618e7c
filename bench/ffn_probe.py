"""What a FLUX.1-width feed-forward costs on the device in each JAX formulation of its activation, so that
the lowering of ``gelu(approximate="tanh")`` for bf16 activations is chosen on measurements.

XLA:TPU's profile of the compiled FLUX.1-width transformer shows the image stream's feed-forward down
projection (a (4096, 12288) x (12288, 3072) GEMM) taking ~1.9x its FLOP time: the activation is fused into
the GEMM's operand and recomputed for every tile of the output. The piece timed here is diffusers'
``FeedForward`` in a double block, bf16: ``resid + gate * (gelu(h @ w1 + b1) @ w2 + b2)``, with:

  native    jnp.tanh in the tanh approximation (XLA:TPU's own float32 tanh)
  precise   the project's float32 tanh (ops/precise_f32.py: what bf16 inputs take on a TPU today)
  native+barrier, precise+barrier   the activation's bf16 result materialised (an optimization barrier)
  gemms     no activation (the floor of the piece)

Only JAX is imported (the TPU host has no torch); ``precise_f32.py`` is loaded from its path.

    python bench/ffn_probe.py [--tokens 4096] [--width 3072] [--reps 20] [--out F.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

_SPEC = importlib.util.spec_from_file_location(
    "precise_f32", Path(__file__).resolve().parent.parent / "torch_tpu" / "ops" / "precise_f32.py")
precise_f32 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(precise_f32)

VARIANTS = ("native", "precise", "native+barrier", "precise+barrier", "gemms")


def _gelu(y, tanh):
    y = y.astype(jnp.float32)
    inner = np.float32(0.7978845608028654) * (y + np.float32(0.044715) * y * y * y)
    return 0.5 * y * (1 + tanh(inner))


def _piece(how):
    tanh = precise_f32.tanh if how.startswith("precise") else jnp.tanh

    def piece(h, w1, b1, w2, b2, gate, resid):
        y = (h @ w1 + b1).astype(jnp.bfloat16)
        if how != "gemms":
            y = _gelu(y, tanh).astype(jnp.bfloat16)
            if how.endswith("barrier"):
                y = jax.lax.optimization_barrier(y)
        z = (y @ w2 + b2).astype(jnp.bfloat16)
        return resid + gate * z

    return jax.jit(piece)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--width", type=int, default=3072)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    t, w = args.tokens, args.width
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    bf = jnp.bfloat16
    h = jax.random.normal(keys[0], (t, w), bf)
    w1 = (jax.random.normal(keys[1], (w, 4 * w), jnp.float32) * w ** -0.5).astype(bf)
    b1 = (jax.random.normal(keys[2], (4 * w,), jnp.float32) * 0.1).astype(bf)
    w2 = (jax.random.normal(keys[3], (4 * w, w), jnp.float32) * (4 * w) ** -0.5).astype(bf)
    b2 = jnp.zeros((w,), bf)
    gate = jax.random.normal(keys[4], (w,), bf)
    resid = jax.random.normal(keys[5], (t, w), bf)
    gemm_tflop = 2 * 2 * t * w * 4 * w / 1e12
    result = {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind, "tokens": t,
              "width": w, "gemm_tflop": gemm_tflop, "ms": {}, "max_abs_diff_vs_precise": {}}
    outs = {}
    for how in VARIANTS:
        fn = _piece(how)
        outs[how] = fn(h, w1, b1, w2, b2, gate, resid).block_until_ready()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn(h, w1, b1, w2, b2, gate, resid).block_until_ready()
            times.append(time.perf_counter() - t0)
        result["ms"][how] = round(1e3 * sorted(times)[len(times) // 2], 3)
        print(how, result["ms"][how], "ms", flush=True)
    reference = np.asarray(outs["precise"].astype(jnp.float32))
    for how in ("native", "native+barrier", "precise+barrier"):
        result["max_abs_diff_vs_precise"][how] = float(np.max(np.abs(np.asarray(outs[how].astype(jnp.float32))
                                                                     - reference)))
    print(result["max_abs_diff_vs_precise"])
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""JAX-only: ways to compute a float32 3x3 convolution at float32 accuracy, by compile seconds, run time and error.

    python3 bench/conv_forms_probe.py --out bench/results/tpu/conv_forms_probe.json

On a TPU, strict eager's float32 convolutions (HIGHEST precision, torch's float32 default) were the slowest
programs of the demo's first image to compile (5.4 s each for 16 channels at 64x64). Each form below computes
the same convolution; the error is the largest difference from a float64 convolution on the CPU, relative to
the largest output. Forms: XLA's convolution at HIGHEST, HIGH and DEFAULT precision; the operands split into
bfloat16 parts and multiplied pairwise (six or three products, or all nine in one convolution); and a matmul over
the unfolded input (the input's window at each of the 9 kernel taps, stacked), at HIGHEST. Every compile is of a
program not compiled before in the process (JAX's persistent cache is off). What ops/spatial.py does on a TPU
follows from the TPU's figures: see ``_as_matmul_on_tpu`` there.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

DIMENSIONS = ("NCHW", "OIHW", "NCHW")


def _conv(x, w, precision=None, preferred=None):
    return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=DIMENSIONS,
                                    precision=precision, preferred_element_type=preferred)


def _bf16_parts(a, count):
    """``a`` as ``count`` bfloat16 numbers whose sum is ``a`` (each the rounding of what is left)."""
    parts, rest = [], a
    for _ in range(count):
        part = rest.astype(jnp.bfloat16)
        parts.append(part)
        rest = rest - part.astype(jnp.float32)
    return parts


def _pairwise(x, w, pairs):
    xs, ws = _bf16_parts(x, 3), _bf16_parts(w, 3)
    out = None
    for i, j in pairs:  # the smallest terms first
        term = _conv(xs[i], ws[j], preferred=jnp.float32)
        out = term if out is None else out + term
    return out


def _nine_in_one(x, w):
    """Every pair of the three parts in one convolution: the batch is x's part, the output channel w's."""
    n, o = x.shape[0], w.shape[0]
    y = _conv(jnp.concatenate(_bf16_parts(x, 3), 0), jnp.concatenate(_bf16_parts(w, 3), 0),
              preferred=jnp.float32).reshape(3, n, 3, o, *x.shape[2:])
    return ((y[2, :, 0] + y[1, :, 1] + y[0, :, 2]) + (y[1, :, 0] + y[0, :, 1])) + y[0, :, 0]


def _unfolded(x, w, precision):
    n, c, h, wd = x.shape
    padded = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = jnp.stack([padded[:, :, i:i + h, j:j + wd] for i in range(3) for j in range(3)], 2)
    cols = cols.reshape(n, c * 9, h * wd)
    return jnp.einsum("ok,nkp->nop", w.reshape(w.shape[0], c * 9), cols, precision=precision).reshape(
        n, w.shape[0], h, wd)


FORMS = {
    "highest": lambda x, w: _conv(x, w, lax.Precision.HIGHEST),
    "high": lambda x, w: _conv(x, w, lax.Precision.HIGH),
    "default": lambda x, w: _conv(x, w),
    "bf16_parts_6_products": lambda x, w: _pairwise(x, w, [(2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0)]),
    "bf16_parts_3_products": lambda x, w: _pairwise(x, w, [(1, 0), (0, 1), (0, 0)]),
    "bf16_parts_9_in_one_conv": _nine_in_one,
    "unfolded_matmul_highest": lambda x, w: _unfolded(x, w, lax.Precision.HIGHEST),
}
SIZES = ((16, 64), (32, 32), (128, 128))  # (channels, height = width): the demo VAE's and a larger layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cpu = jax.devices("cpu")[0]
    jax.jit(lambda a: a + 1).lower(np.ones(3, np.float32)).compile()  # the compiler's first use
    result = {"benchmark": "conv_forms_probe", "platform": jax.devices()[0].platform,
              "device": jax.devices()[0].device_kind, "jax": jax.__version__, "forms": {}}
    for channels, size in SIZES:
        x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
        w = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
        with jax.default_device(cpu):
            exact = np.asarray(_conv(jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64),
                                     lax.Precision.HIGHEST))
        for name, form in FORMS.items():
            t0 = time.perf_counter()
            compiled = jax.jit(lambda a, b, form=form: form(a, b)).lower(x, w).compile()
            compile_s = time.perf_counter() - t0
            xd, wd = jax.device_put(x), jax.device_put(w)
            out = compiled(xd, wd)
            out.block_until_ready()
            t0 = time.perf_counter()
            for _ in range(args.runs):
                out = compiled(xd, wd)
            out.block_until_ready()
            run_ms = (time.perf_counter() - t0) / args.runs * 1e3
            error = float(np.max(np.abs(np.asarray(out, np.float64) - exact)) / np.max(np.abs(exact)))
            result["forms"][f"{channels}ch_{size}px/{name}"] = {
                "compile_s": round(compile_s, 3), "run_ms": round(run_ms, 3), "max_error_relative": error}
            print(f"{channels:4d} ch {size:4d} px  {name:26s} compile {compile_s:6.3f} s  run {run_ms:7.3f} ms  "
                  f"error {error:.2e}", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

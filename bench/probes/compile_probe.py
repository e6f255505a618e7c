"""JAX-only: what one small program costs to compile on this platform, and how compiles scale over threads.

    python3 bench/probes/compile_probe.py --out bench/results/tpu/compile_probe.json

Strict eager builds one program per op signature, so a cold first image is bound by how long XLA takes to
compile a small program and by how many compile at once. Each case below is the shape of a program the demo
pipeline builds (with 64-bit types on, as the backend runs JAX): an elementwise op, one with a float64 scalar
argument, a concatenation, reads at int64 and int32 positions and offsets, int64 arithmetic, a group norm, 3x3
convolutions (from a 4-d value, from a flat buffer reshaped, channels-last, in bfloat16, and at HIGHEST precision
as strict mode compiles a float32 one, from a channels-last storage as after an upsample), matmuls.
Every compile is of a program not seen before in the process (no cache: the persistent compilation cache
is off). Then ``threads``: the same set of distinct convolutions compiled on 1, 2, 4, 8 and 12 threads,
wall seconds for all of them: whether compiling on several threads at once gains on this host.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def _group_norm(x, w, b):
    n, c, h, wd = x.shape
    g = x.reshape(n, 8, -1)
    m = g.mean(-1, keepdims=True)
    v = ((g - m) ** 2).mean(-1, keepdims=True)
    return ((g - m) * jax.lax.rsqrt(v + 1e-6)).reshape(x.shape) * w[:, None, None] + b[:, None, None]


def _conv(x, w, b, precision=None):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                     precision=precision)
    return y + b[:, None, None]


_HIGHEST = jax.lax.Precision.HIGHEST


def _conv_from_nhwc_storage(c, h, w, precision):
    """The strict op's program for a channels-last tpu tensor (torch's layout after an upsample): the flat
    storage read as NCHW, the convolution, the result written back channels-last."""
    def fn(flat, wt, b):
        x = flat.reshape(h, w, c).transpose(2, 0, 1)[None]
        y = _conv(x, wt, b, precision)
        return y[0].transpose(1, 2, 0).reshape(-1)
    return fn


def _conv_nhwc(x, w, b):
    """The same convolution computed channels-last (transposes around it)."""
    y = jax.lax.conv_general_dilated(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return (y + b).transpose(0, 3, 1, 2)


def _cases(variant: int):
    """(name, function, example arguments). ``variant`` changes every shape a little, so no two rounds
    compile the same program."""
    k = variant
    f32, i64 = jnp.float32, jnp.int64
    z = lambda *s, d=f32: jax.ShapeDtypeStruct(s, d)  # noqa: E731
    c = 32 + 8 * k
    return [
        ("add_f32", lambda a, b: a + b, (z(1, 77 + k, 32), z(1, 77 + k, 32))),
        ("mul_f64_scalar", lambda a, s: (a * s).astype(f32), (z(1, 77 + k, 128), z(d=jnp.float64))),
        ("cat_f32", lambda a, b: jnp.concatenate([a, b]), (z(20 + k), z(1))),
        ("read_two_at_int64", lambda a, i, j: a[j] - a[i], (z(21 + k), z(d=i64), z(d=i64))),
        ("read_two_at_int32", lambda a, i, j: a[j] - a[i], (z(21 + k), z(d=jnp.int32), z(d=jnp.int32))),
        ("slice_at_int64_offset", lambda a, o: jax.lax.dynamic_slice(a, (o,), (4096,)).reshape(1, 32, 128) * 2,
         (z(8192 + k), z(d=i64))),
        ("slice_at_int32_offset", lambda a, o: jax.lax.dynamic_slice(a, (o,), (4096,)).reshape(1, 32, 128) * 2,
         (z(8192 + k), z(d=jnp.int32))),
        ("int64_arith", lambda a, b: jnp.abs(a - b[:, None]) * 3 + 1, (z(16 + k, d=i64), z(16 + k, d=i64))),
        ("group_norm", _group_norm, (z(1, c, 8, 8), z(c), z(c))),
        ("conv3x3", _conv, (z(1, c, 8, 8), z(c, c, 3, 3), z(c))),
        ("conv3x3_flat_input", lambda x, w, b: _conv(x.reshape(1, c, 8, 8), w, b), (z(c * 64), z(c, c, 3, 3), z(c))),
        ("conv3x3_64px", _conv, (z(1, 16, 64 + 8 * k, 64), z(16, 16, 3, 3), z(16))),
        ("conv3x3_64px_nhwc", _conv_nhwc, (z(1, 16, 64 + 8 * k, 64), z(16, 16, 3, 3), z(16))),
        ("conv3x3_64px_highest", functools.partial(_conv, precision=_HIGHEST),
         (z(1, 16, 64 + 8 * k, 64), z(16, 16, 3, 3), z(16))),
        ("conv3x3_64px_highest_from_nhwc_storage", _conv_from_nhwc_storage(16, 64 + 8 * k, 64, _HIGHEST),
         (z(16 * 64 * (64 + 8 * k)), z(16, 16, 3, 3), z(16))),
        ("conv3x3_64px_default_from_nhwc_storage", _conv_from_nhwc_storage(16, 64 + 8 * k, 64, None),
         (z(16 * 64 * (64 + 8 * k)), z(16, 16, 3, 3), z(16))),
        ("conv3x3_64px_bf16", _conv, (z(1, 16, 64 + 8 * k, 64, d=jnp.bfloat16), z(16, 16, 3, 3, d=jnp.bfloat16),
                                      z(16, d=jnp.bfloat16))),
        ("matmul_f32", lambda a, b: a @ b, (z(1, 16 + k, 128), z(128, 128))),
        ("matmul_bf16", lambda a, b: a @ b, (z(1, 16 + k, 128, d=jnp.bfloat16), z(128, 128, d=jnp.bfloat16))),
    ]


def _compile_seconds(fn, args) -> float:
    t0 = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t0


def per_case(rounds: int, only=()) -> dict:
    _compile_seconds(lambda a: a + 1, (jax.ShapeDtypeStruct((3,), jnp.float32),))  # the compiler's first use
    seconds = {}
    for r in range(rounds):
        for name, fn, args in _cases(r):
            if only and name not in only:
                continue
            seconds.setdefault(name, []).append(_compile_seconds(fn, args))
    return {name: {"median_s": statistics.median(v), "all_s": [round(x, 4) for x in v]} for name, v in seconds.items()}


def threads(counts, programs: int) -> dict:
    out = {}
    for n in counts:
        # distinct programs for every thread count: no compile is of a program seen before
        base = 40 + 97 * n
        work = [(_conv, (jax.ShapeDtypeStruct((1, base + i, 8, 8), jnp.float32),
                         jax.ShapeDtypeStruct((base + i, base + i, 3, 3), jnp.float32),
                         jax.ShapeDtypeStruct((base + i,), jnp.float32))) for i in range(programs)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            each = list(pool.map(lambda w: _compile_seconds(*w), work))
        wall = time.perf_counter() - t0
        out[str(n)] = {"wall_s": wall, "sum_of_compiles_s": sum(each), "per_program_wall_s": wall / programs}
        print("threads", n, json.dumps(out[str(n)]), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--programs", type=int, default=24)
    p.add_argument("--threads", default="1,2,4,8,12", help="thread counts to compare ('': none)")
    p.add_argument("--only", default="", help="comma-separated case names (default: every case)")
    args = p.parse_args()
    result = {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
              "jax": jax.__version__, "cpus": os.cpu_count()}
    result["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    result["per_case"] = per_case(args.rounds, [c for c in args.only.split(",") if c])
    for name, v in result["per_case"].items():
        print(f"{name:22s} {v['median_s'] * 1000:8.1f} ms  {v['all_s']}", flush=True)
    if args.threads:
        result["threads"] = threads([int(t) for t in args.threads.split(",")], args.programs)
    text = json.dumps(result, indent=1)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    np.random.seed(0)
    main()

"""JAX-only: what a warm process pays per program before its first result, beyond the steady run.

    python3 bench/load_probe.py --out bench/results/tpu/load_probe.json

A warm process loads every program from the disk cache instead of compiling it, yet its first pipeline
call stays slower than the steady call. This separates, per program, the three costs that a loaded program
adds on its first use: deserialising the executable, JAX's first call of it (its Python path, before the
C++ fast path takes over), and the runtime's first execution. The programs are small ones of the kinds strict
eager builds (elementwise, matmul, reduction); each is compiled and serialised in this process, then loaded
twice: the first copy's first call pays every first-use cost, the second copy of the same program shows what
stays per copy. Every figure is the median over the programs, in milliseconds, beside the steady call.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)

import jax.numpy as jnp  # noqa: E402
from jax.experimental import serialize_executable  # noqa: E402


def _programs(count: int):
    """``count`` distinct small programs (a constant in each makes it distinct) and their argument."""
    x = jnp.ones((64, 64), jnp.float32)
    kinds = (lambda i: lambda a: jnp.sin(a * i + 1.0),
             lambda i: lambda a: (a + i) @ a.T,
             lambda i: lambda a: jnp.sum(a * i, axis=-1))
    return [jax.jit(kinds[i % len(kinds)](i)).lower(x).compile() for i in range(count)], x


def _ms(fn, items) -> list:
    out = []
    for item in items:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(item))
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=60)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    compiled, x = _programs(args.programs)
    blobs = [serialize_executable.serialize(c) for c in compiled]
    del compiled
    load_ms = _ms(lambda b: serialize_executable.deserialize_and_load(*b), blobs)
    first_copy = [serialize_executable.deserialize_and_load(*b) for b in blobs]
    first_ms = _ms(lambda c: c(x), first_copy)
    second_ms = _ms(lambda c: c(x), first_copy)
    steady_ms = _ms(lambda c: c(x), first_copy)
    second_copy = [serialize_executable.deserialize_and_load(*b) for b in blobs]
    copy_first_ms = _ms(lambda c: c(x), second_copy)

    def med(v):
        return round(statistics.median(v), 4)

    result = {
        "benchmark": "load_probe", "platform": jax.devices()[0].platform, "device": str(jax.devices()[0]),
        "jax": jax.__version__, "cpu_count": os.cpu_count(), "programs": args.programs,
        "median_ms": {"deserialize": med(load_ms), "first_call": med(first_ms), "second_call": med(second_ms),
                      "steady_call": med(steady_ms), "first_call_of_a_second_copy": med(copy_first_ms)},
        "total_first_call_excess_ms": round(sum(first_ms) - sum(steady_ms), 2),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

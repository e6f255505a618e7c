"""Which JAX operations XLA compiles and runs on this platform, per dtype: JAX alone, no torch (a TPU host has none).

    python3 bench/probes/tpu_dtype_probe.py --out bench/results/tpu/tpu_dtype_probe.json [--dtypes float64,complex128]

Written for the TPU, where some 64-bit programs fail to compile ("Only F32 and C64 types are implemented in
LuDecomposition") and some make the compiler abort the whole process (a failed CHECK): each case runs in a child
process that writes what it starts and how it ends, and a child that dies is replaced by the next one, which
goes on after the case that killed it (recorded as "aborted"). What this found on a TPU v5e is what
torch_tpu/runtime/tpu_lowering.py refuses before XLA:TPU sees it, and why ops/linalg.py has its own LU.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DTYPES = ("float32", "float64", "complex64", "complex128")


def _cases(jnp, lax_linalg, np):
    eye = lambda a: jnp.eye(4, dtype=a.dtype)  # noqa: E731
    return {
        "lu": lambda a: lax_linalg.lu(a),
        "inv": lambda a: jnp.linalg.inv(a),
        "solve": lambda a: jnp.linalg.solve(a, a),
        "det": lambda a: jnp.linalg.det(a),
        "qr": lambda a: jnp.linalg.qr(a),
        "householder_product": lambda a: lax_linalg.householder_product(a, a[:, 0]),
        "eigh": lambda a: jnp.linalg.eigh(a + a.T.conj()),
        "cholesky": lambda a: lax_linalg.cholesky(a @ a.T.conj() + 4 * eye(a)),
        "triangular_solve": lambda a: lax_linalg.triangular_solve(a + 4 * eye(a), a, left_side=True, lower=True),
        "tridiagonal_solve": lambda a: lax_linalg.tridiagonal_solve(a[0], a[1], a[2], a[:, :1]),
        "qdwh": lambda a: lax_linalg.qdwh(a)[0],
        "svd": lambda a: jnp.linalg.svd(a),
        "matmul": lambda a: jnp.matmul(a, a, precision="highest"),
        "multiply_sum": lambda a: jnp.sum(a[:, :, None] * a[None], 1),
        "cumsum": lambda a: jnp.cumsum(a, 0),
        "sort": lambda a: jnp.sort(a.real, 0),
        "fft": lambda a: jnp.fft.fft(a),
        "exp_abs": lambda a: jnp.exp(a) + jnp.abs(a),
        "where": lambda a: jnp.where(a.real > 0, a, 0),
        "convert_from_bool": lambda a: (a.real > 0).astype(a.dtype),
        "convert_from_int32": lambda a: jnp.arange(16, dtype=np.int32).reshape(4, 4).astype(a.dtype) + a,
        "convert_from_float32": lambda a: jnp.ones((4, 4), np.float32).astype(a.dtype) + a,
        "convert_to_bool": lambda a: a.astype(bool),
    }


def _child(dtypes, progress: Path) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)  # as every program of torch_tpu
    started = {line.split()[0] for line in progress.read_text().splitlines()} if progress.exists() else set()
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        a = rng.standard_normal((4, 4))
        if np.dtype(dtype).kind == "c":
            a = a + 1j * rng.standard_normal((4, 4))
        a = a.astype(dtype)
        for name, fn in _cases(jnp, jax.lax.linalg, np).items():
            key = f"{dtype}/{name}"
            if key in started:
                continue
            with progress.open("a") as f:
                f.write(f"{key} started\n")
            t = time.perf_counter()
            try:
                jax.block_until_ready(jax.jit(fn)(a))
                result = "ok"
            except Exception as exc:  # what XLA says, first line
                result = "error: " + str(exc).splitlines()[0][:300]
            with progress.open("a") as f:
                f.write(f"{key} {time.perf_counter() - t:.2f}s {result}\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--max-children", type=int, default=40)
    args = p.parse_args()
    dtypes = args.dtypes.split(",")
    if args.child:
        _child(dtypes, Path(args.child))
        return
    progress = Path(args.out).with_suffix(".progress")
    progress.unlink(missing_ok=True)
    children = 0
    for children in range(1, args.max_children + 1):
        done = subprocess.run([sys.executable, __file__, "--out", args.out, "--dtypes", args.dtypes,
                               "--child", str(progress)], capture_output=True, text=True)
        if done.returncode == 0:
            break
    results: dict[str, dict] = {}
    for line in progress.read_text().splitlines():
        key, _, rest = line.partition(" ")
        if rest == "started":
            results.setdefault(key, {"result": "aborted: the process died compiling or running it"})
        else:
            seconds, _, result = rest.partition(" ")
            results[key] = {"result": result, "seconds": float(seconds[:-1])}
    import jax

    payload = {"benchmark": "tpu_dtype_probe", "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "jax": jax.__version__,
               "platform": jax.default_backend(), "children": children, "results": results}
    Path(args.out).write_text(json.dumps(payload, indent=1))
    for key, r in results.items():
        print(f"{key:40s} {r['result'][:150]}")


if __name__ == "__main__":
    main()

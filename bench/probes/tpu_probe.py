"""JAX-only measurements for the TPU (no torch needed): the Pallas flash-attention kernel's block sizes and
padding, float32 elementary functions' error against float64, and their cost.

    python3 bench/probes/tpu_probe.py --out bench/results/tpu/probe.json [--quick]

Runs on any JAX platform (the kernel parts only on a TPU, or lowered with ``jax.export`` elsewhere). Its
results chose the block-size table in ``torch_tpu/ops/attention.py`` and the float32 functions of
``torch_tpu/ops/precise_f32.py``; the JSON is committed under ``bench/results/tpu/``.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

HERE = Path(__file__).resolve().parent


def _precise_module():
    spec = importlib.util.spec_from_file_location("precise_f32", HERE.parents[1] / "torch_tpu/ops/precise_f32.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _timed(fn, *args, repeat=5):
    out = fn(*args)
    jax.block_until_ready(out)
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        best.append(time.perf_counter() - t0)
    return float(np.median(best))


# --- attention ------------------------------------------------------------------------------------
def _flash(block, causal=False, pad_to=None):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = None if block is None else fa.BlockSizes(
        block_q=block, block_k_major=block, block_k=block, block_b=1,
        block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block,
        block_k_major_dq=block, block_k_dq=block, block_q_dq=block)

    def run(q, k, v):
        lq, lk = q.shape[2], k.shape[2]
        seg = None
        if pad_to is not None:
            pq, pk = (-lq) % pad_to, (-lk) % pad_to
            q = jnp.pad(q, ((0, 0), (0, 0), (0, pq), (0, 0)))
            k = jnp.pad(k, ((0, 0), (0, 0), (0, pk), (0, 0)))
            v = jnp.pad(v, ((0, 0), (0, 0), (0, pk), (0, 0)))
            seg = fa.SegmentIds(q=jnp.zeros(q.shape[:1] + q.shape[2:3], jnp.int32),
                                kv=(jnp.arange(k.shape[2]) >= lk).astype(jnp.int32)[None].repeat(k.shape[0], 0))
        out = fa.flash_attention(q, k, v, segment_ids=seg, causal=causal, sm_scale=1 / math.sqrt(q.shape[-1]),
                                 block_sizes=sizes)
        return out[:, :, :lq]

    return run


def _xla_attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32).astype(q.dtype)


def _fwd_bwd(f):
    def loss(q, k, v):
        return jnp.sum(f(q, k, v).astype(jnp.float32))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def attention_sweep(quick: bool) -> list:
    rows = []
    key = jax.random.PRNGKey(0)
    shapes = [(1, 24, 4608, 128), (1, 24, 4096, 128), (2, 24, 4429, 64), (1, 24, 1024, 128), (1, 24, 256, 128)]
    if not quick:
        shapes += [(1, 24, 2048, 128), (2, 24, 4096, 64), (1, 24, 512, 128), (1, 24, 8192, 128)]
    blocks = [None, 128, 256, 512, 1024] + ([] if quick else [2048])
    prev = jax.enable_x64.swap_local(False)
    try:
        for shape in shapes:
            b, h, length, d = shape
            q, k, v = (jax.random.normal(kk, shape, jnp.bfloat16) for kk in jax.random.split(key, 3))
            flops = 4 * b * h * length * length * d
            row = {"shape": list(shape), "xla_fwd_ms": None}
            try:
                row["xla_fwd_ms"] = 1e3 * _timed(jax.jit(_xla_attention), q, k, v)
            except Exception as exc:  # noqa: BLE001 - out of memory at large sizes is a result too
                row["xla_fwd_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            for block in blocks:
                label = "default" if block is None else str(block)
                pad = None
                if block is not None and length % block:
                    pad = block
                if block is None and length % 128:
                    pad = 128
                try:
                    fwd = jax.jit(_flash(block, pad_to=pad))
                    t = _timed(fwd, q, k, v)
                    row[f"fwd_ms_{label}"] = 1e3 * t
                    row[f"fwd_tflops_{label}"] = flops / t / 1e12
                    tb = _timed(_fwd_bwd(_flash(block, pad_to=pad)), q, k, v, repeat=3)
                    row[f"fwd_bwd_ms_{label}"] = 1e3 * tb
                    if pad:
                        row[f"padded_{label}"] = pad
                except Exception as exc:  # noqa: BLE001 - a block the kernel or VMEM refuses
                    row[f"error_{label}"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            # accuracy of the kernel against float64 at this shape (bf16 inputs)
            if length <= 4608:
                out = np.asarray(jax.jit(_flash(512 if length % 512 == 0 else 128,
                                                pad_to=None if length % 128 == 0 else 128))(q, k, v), np.float64)
                qs, ks, vs = (np.asarray(x[:, :2], np.float64) for x in (q, k, v))
                s = np.einsum("bhqd,bhkd->bhqk", qs, ks) / math.sqrt(d)
                s = np.exp(s - s.max(-1, keepdims=True))
                ref = np.einsum("bhqk,bhkd->bhqd", s / s.sum(-1, keepdims=True), vs)
                row["max_abs_err_vs_f64"] = float(np.max(np.abs(out[:, :2] - ref)))
            rows.append(row)
            print(json.dumps(row), flush=True)
        # float32 inputs: the kernel's error (does it keep float32's precision?)
        shape = (1, 4, 1024, 128)
        q, k, v = (jax.random.normal(kk, shape, jnp.float32) for kk in jax.random.split(key, 3))
        qs, ks, vs = (np.asarray(x, np.float64) for x in (q, k, v))
        s = np.einsum("bhqd,bhkd->bhqk", qs, ks) / math.sqrt(128)
        s = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("bhqk,bhkd->bhqd", s / s.sum(-1, keepdims=True), vs)
        f32 = {"shape": list(shape), "dtype": "float32"}
        for label, fn in (("kernel", _flash(512)), ("xla_default", _xla_attention)):
            f32[f"max_abs_err_{label}"] = float(np.max(np.abs(np.asarray(jax.jit(fn)(q, k, v), np.float64) - ref)))
        with jax.default_matmul_precision("highest"):
            f32["max_abs_err_xla_highest"] = float(np.max(np.abs(
                np.asarray(jax.jit(_xla_attention)(q, k, v), np.float64) - ref)))
        rows.append(f32)
        print(json.dumps(f32), flush=True)
    finally:
        jax.enable_x64.set_local(prev)
    return rows


def x64_lowering() -> dict:
    """The kernel traced under x64 fails to lower for TPU; traced with it off, it lowers."""
    from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention

    s = jax.ShapeDtypeStruct((1, 24, 4608, 128), jnp.bfloat16)
    result = {}
    for label, off in (("x64_on", False), ("x64_off_inside", True)):
        def f(q, k, v, off=off):
            prev = jax.enable_x64.swap_local(False) if off else None
            try:
                return flash_attention(q, k, v, sm_scale=0.088)
            finally:
                if off:
                    jax.enable_x64.set_local(prev)

        prev = jax.enable_x64.swap_local(True)
        try:
            jax.export.export(jax.jit(f), platforms=("tpu",))(s, s, s)
            result[label] = "ok"
        except Exception as exc:  # noqa: BLE001 - the failure is the measurement
            result[label] = f"{type(exc).__name__}: {str(exc)[:120]}"
        finally:
            jax.enable_x64.set_local(prev)
    return result


# --- float32 elementary functions -------------------------------------------------------------------
def _inputs(rng, lo, hi, n):
    parts = [rng.uniform(lo, hi, n)]
    m = max(abs(lo), abs(hi))
    mags = np.exp(rng.uniform(np.log(1e-30), np.log(m), n))
    parts.append(mags if lo >= 0 else mags * np.sign(rng.uniform(-1, 1, n)))
    parts.append(rng.uniform(max(lo, -4), min(hi, 4), n))
    x = np.clip(np.concatenate(parts), lo, hi).astype(np.float32)
    return x[(x == 0) | (np.abs(x) >= np.float32(1.1754944e-38))]


def _errors(got, ref, x):
    got = got.astype(np.float64)
    ref32 = ref.astype(np.float32)
    ok = np.isfinite(ref32) & ((ref32 == 0) | (np.abs(ref32) >= 1.1754944e-38))
    spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), 2.0 ** -149)
    with np.errstate(invalid="ignore"):
        ulp = np.where(ok, np.abs(got - ref) / spacing, 0.0)
        tol = np.where(ok, np.abs(got - ref) / (1e-5 + 1e-5 * np.abs(ref)), 0.0)
    ulp = np.nan_to_num(ulp, nan=np.inf)
    tol = np.nan_to_num(tol, nan=np.inf)
    special_bad = int(np.sum(~np.isfinite(ref32) & ~((got == ref32) | (np.isnan(got) & np.isnan(ref32)))))
    i = int(np.argmax(ulp))
    j = int(np.argmax(tol))
    return {"max_ulp": float(ulp[i]), "worst_ulp_input": float(x[i]) if x.ndim == 1 else None,
            "tol_violations": int(np.sum(tol > 1)), "max_tol_ratio": float(tol[j]),
            "worst_tol_input": float(x[j]) if x.ndim == 1 else None, "special_mismatches": special_bad}


def numerics(quick: bool) -> dict:
    import scipy.special as sp

    pf = _precise_module()
    rng = np.random.default_rng(0)
    n = 100_000 if quick else 400_000
    unary = {
        "log": (np.log, 0, 3e38), "log2": (np.log2, 0, 3e38), "log10": (np.log10, 0, 3e38),
        "log1p": (np.log1p, -1, 3e38), "exp": (np.exp, -87, 88), "expm1": (np.expm1, -87, 88),
        "exp2": (np.exp2, -126, 127), "tanh": (np.tanh, -30, 30), "sinh": (np.sinh, -88, 88),
        "cosh": (np.cosh, -88, 88), "asinh": (np.arcsinh, -3e38, 3e38), "acosh": (np.arccosh, 1, 3e38),
        "atanh": (np.arctanh, -1, 1), "sin": (np.sin, -65000, 65000), "cos": (np.cos, -65000, 65000),
        "tan": (np.tan, -65000, 65000), "asin": (np.arcsin, -1, 1), "acos": (np.arccos, -1, 1),
        "atan": (np.arctan, -1e6, 1e6), "sqrt": (np.sqrt, 0, 3e38), "rsqrt": (lambda x: 1 / np.sqrt(x), 0, 3e38),
        "reciprocal": (lambda x: 1 / x, -3e38, 3e38), "sigmoid": (sp.expit, -100, 100),
        "erf": (sp.erf, -10, 10), "erfc": (sp.erfc, -10, 10), "erfinv": (sp.erfinv, -1, 1),
        "lgamma": (sp.gammaln, -30, 1e6), "digamma": (sp.psi, -30, 1e6),
        "gelu": (lambda x: 0.5 * x * (1 + sp.erf(x / np.sqrt(2))), -20, 20),
        "softplus": (lambda x: np.logaddexp(0, x), -100, 100),
        "log_sigmoid": (lambda x: -np.logaddexp(0, -x), -100, 100),
        "mish": (lambda x: x * np.tanh(np.logaddexp(0, x)), -20, 20),
    }
    jax_fns = {
        "log": jnp.log, "log2": jnp.log2, "log10": jnp.log10, "log1p": jnp.log1p, "exp": jnp.exp,
        "expm1": jnp.expm1, "exp2": jnp.exp2, "tanh": jnp.tanh, "sinh": jnp.sinh, "cosh": jnp.cosh,
        "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh, "sin": jnp.sin, "cos": jnp.cos,
        "tan": jnp.tan, "asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "sqrt": jnp.sqrt,
        "rsqrt": jax.lax.rsqrt, "reciprocal": jnp.reciprocal, "sigmoid": jax.nn.sigmoid,
        "erf": jax.scipy.special.erf, "erfc": jax.scipy.special.erfc, "erfinv": jax.scipy.special.erfinv,
        "lgamma": jax.scipy.special.gammaln, "digamma": jax.scipy.special.digamma, "gelu": functools.partial(jax.nn.gelu, approximate=False),
        "softplus": jax.nn.softplus, "log_sigmoid": jax.nn.log_sigmoid,
        "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    }
    precise = dict(pf.FUNCTIONS)
    precise["mish"] = lambda x: x * pf.tanh(pf.softplus(x))
    out = {}
    for name, (ref_fn, lo, hi) in unary.items():
        x = _inputs(rng, lo, hi, n)
        with np.errstate(all="ignore"):
            ref = ref_fn(x.astype(np.float64))
        row = {"xla": _errors(np.asarray(jax.jit(jax_fns[name])(x)), ref, x)}
        if name in precise:
            row["precise"] = _errors(np.asarray(jax.jit(precise[name])(x)), ref, x)
        out[name] = row
        print(name, json.dumps(row), flush=True)
    for name, ref_fn in (("logaddexp", np.logaddexp), ("logaddexp2", np.logaddexp2)):
        a = _inputs(rng, -100, 100, n)
        b = rng.permutation(a)
        ref = ref_fn(a.astype(np.float64), b.astype(np.float64))
        row = {"xla": _errors(np.asarray(jax.jit(getattr(jnp, name))(a, b)), ref, a),
               "precise": _errors(np.asarray(jax.jit(precise[name])(a, b)), ref, a)}
        out[name] = row
        print(name, json.dumps(row), flush=True)
    # what the precise functions cost: one pass over 32M float32 values
    big = jnp.asarray(rng.uniform(0.01, 100, 1 << 25).astype(np.float32))
    cost = {}
    for name in ("log", "log1p", "tanh", "log2", "acosh"):
        tx = _timed(jax.jit(jax_fns[name]), big)
        tp = _timed(jax.jit(precise[name]), big)
        cost[name] = {"xla_ms": 1e3 * tx, "precise_ms": 1e3 * tp, "ratio": tp / tx}
    cost["copy_ms"] = 1e3 * _timed(jax.jit(lambda x: x * 2), big)
    out["cost_32M"] = cost
    print("cost", json.dumps(cost), flush=True)
    # float32 matmul precision: DEFAULT vs HIGH vs HIGHEST against float64
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mm = {}
    for p in ("DEFAULT", "HIGH", "HIGHEST"):
        prec = getattr(jax.lax.Precision, p)
        got = np.asarray(jax.jit(lambda x, y, prec=prec: jnp.matmul(x, y, precision=prec))(a, b), np.float64)
        mm[p] = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    out["matmul_f32_rel_err"] = mm
    print("matmul", json.dumps(mm), flush=True)
    return out


# float64 on the chip: each case in a child process (an XLA:TPU compiler abort ends the process that compiles)
_F64_CASES = {
    "add": "lambda a: a + a", "mul": "lambda a: a * 3.0", "compare": "lambda a: a > 0.5",
    "where": "lambda a: jnp.where(a > 0.5, a, 0.0)", "max_reduce": "lambda a: jnp.max(a, axis=-1)",
    "sum_reduce": "lambda a: jnp.sum(a)", "divide": "lambda a: 1 / (a + 1)", "sqrt": "jnp.sqrt", "exp": "jnp.exp",
    "log": "jnp.log", "cast_to_f32": "lambda a: a.astype(jnp.float32)", "matmul": "lambda a: a @ a.T",
    "cumsum": "lambda a: jnp.cumsum(a, axis=-1)",
    "f32_times_f64_scalar": "lambda a: a.astype(jnp.float32) * jnp.asarray(1e-7, jnp.float64)",
    "pinv_f32_f64_tol": "lambda a: _pinv_like(a.astype(jnp.float32))",
    "svd_f32": "lambda a: jnp.linalg.svd(a.astype(jnp.float32), full_matrices=False)[1]",
}
_F64_CHILD = """
import sys, json, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
def _pinv_like(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    tol = jnp.asarray(1e-7, jnp.float64) * s[..., :1]
    inv = jnp.where(s > tol, 1 / jnp.where(s == 0, 1, s), 0).astype(a.dtype)
    return jnp.matmul(jnp.swapaxes(vh, -1, -2) * inv[..., None, :], jnp.swapaxes(u, -1, -2))
fn = eval(sys.argv[1])
a = jnp.asarray(np.random.default_rng(0).uniform(0, 1, (8, 8)))
out = jax.jit(fn)(a)
ref = jax.jit(fn, backend="cpu")(np.asarray(a))
got, want = np.asarray(out, np.float64), np.asarray(ref, np.float64)
print(json.dumps({"ok": True, "dtype": str(out.dtype), "max_abs_err": float(np.max(np.abs(got - want)))}))
"""


def float64_support() -> dict:
    import subprocess
    import sys

    out = {}
    for name, fn in _F64_CASES.items():
        proc = subprocess.run([sys.executable, "-c", _F64_CHILD, fn], capture_output=True, text=True, timeout=120)
        last = proc.stdout.strip().splitlines()[-1:] or [""]
        try:
            out[name] = json.loads(last[0])
        except ValueError:
            err = [l for l in proc.stderr.splitlines() if l.strip()][-3:]
            out[name] = {"ok": False, "rc": proc.returncode, "stderr": err}
        print("float64", name, json.dumps(out[name]), flush=True)
    return out


def matmul_precision(quick: bool) -> dict:
    """What XLA's dot precision costs and gives for half operands at a FLUX.1 feed-forward's shape: the
    project asks for HIGHEST whenever torch's float32 matmul precision is "highest" (its default) or the
    operands are 16-bit; measured here against DEFAULT, with the error against a float64 product."""
    m, k, n = (1024, 3072, 3072) if quick else (4096, 12288, 3072)
    rng = np.random.default_rng(0)
    a64, b64 = rng.standard_normal((m, k)), rng.standard_normal((k, n)) / math.sqrt(k)
    out = {"shape": [m, k, n]}
    for dtype in ("bfloat16", "float16", "float32"):
        a, b = jnp.asarray(a64, dtype), jnp.asarray(b64, dtype)
        exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
        for prec in ("DEFAULT", "HIGH", "HIGHEST"):
            f = jax.jit(functools.partial(jnp.matmul, precision=getattr(jax.lax.Precision, prec),
                                          preferred_element_type=jnp.float32))
            ms = _timed(f, a, b) * 1e3
            err = np.abs(np.asarray(f(a, b), np.float64) - exact).max() / np.abs(exact).max()
            out[f"{dtype}/{prec}"] = {"ms": round(ms, 3), "tflops": round(2 * m * k * n / ms / 1e9, 1),
                                      "max_rel_err": float(err)}
            print("matmul", dtype, prec, json.dumps(out[f"{dtype}/{prec}"]), flush=True)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(HERE.parent / "results/tpu/probe.json"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: attention,numerics,float64,matmul")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    # first, while this process has not opened the device (a TPU is held by one process; each float64 case
    # runs in a child of its own)
    float64 = None if "float64" in skip else float64_support()
    result = {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
              "jax": jax.__version__, "date": time.strftime("%Y-%m-%d")}
    result["x64_lowering"] = x64_lowering()
    print(json.dumps(result), flush=True)
    if "matmul" not in skip:
        result["matmul_precision"] = matmul_precision(args.quick)
    if "numerics" not in skip:
        result["numerics"] = numerics(args.quick)
    if float64 is not None:
        result["float64"] = float64
    if "attention" not in skip and result["platform"] == "tpu":
        result["attention"] = attention_sweep(args.quick)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()

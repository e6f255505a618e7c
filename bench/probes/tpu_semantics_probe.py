"""Where XLA:TPU's elementwise results differ from XLA:CPU's on special values: JAX alone, no torch.

    python3 bench/probes/tpu_semantics_probe.py --out bench/results/tpu/tpu_semantics_probe.json

Every op runs jitted on the default device (the TPU) and on the host's CPU device over the same inputs (zeros of
both signs, infinities, NaN, subnormals, large and ordinary values, every pair of them for binary ops), and the
results are compared class by class: NaN against a number, an infinity against a finite value, the sign of a zero,
a subnormal flushed to zero, or a relative difference over 1e-3. What XLA:CPU computes here is what torch's CPU
kernels compute for these ops, so each difference is one torch_tpu must not pass on. Found on a TPU v5e:
fmod(x, +-inf) is NaN there (x on CPU) and fmod(-0.0, y) is +0.0 -- torch_tpu's fmod/remainder/floor_divide take
that into account (ops/elementwise.py).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.5, 250.0, float("inf"), float("-inf"), float("nan"),
            1e-40, -1e-40, 1e-30, 3.0e38, -3.0e38]


def _unary(jnp, lax):
    return {
        "floor": jnp.floor, "ceil": jnp.ceil, "trunc": jnp.trunc, "round_half_even": jnp.round,
        "sign": jnp.sign, "abs": jnp.abs, "neg": jnp.negative, "reciprocal": lambda x: 1 / x,
        "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "cbrt": jnp.cbrt, "exp": jnp.exp, "exp2": jnp.exp2,
        "expm1": jnp.expm1, "log": jnp.log, "log2": jnp.log2, "log1p": jnp.log1p,
        "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "asin": jnp.arcsin, "acos": jnp.arccos,
        "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh, "tanh": jnp.tanh, "asinh": jnp.arcsinh,
        "acosh": jnp.arccosh, "atanh": jnp.arctanh, "logistic": lax.logistic, "erf": lax.erf,
        "erfinv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma,
        "is_finite": jnp.isfinite, "to_int32": lambda x: x.astype(jnp.int32),
        "to_uint8": lambda x: x.astype(jnp.uint8), "to_bfloat16": lambda x: x.astype(jnp.bfloat16),
        "to_float16": lambda x: x.astype(jnp.float16), "square": jnp.square,
        "identity_add_zero": lambda x: x + 0.0, "times_one": lambda x: x * 1.0,
    }


def _binary(jnp, lax):
    return {
        "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "rem": lax.rem,
        "fmod": jnp.fmod, "remainder": jnp.remainder, "floor_divide": jnp.floor_divide,
        "pow": jnp.power, "atan2": jnp.arctan2, "max": lax.max, "min": lax.min, "fmax": jnp.fmax,
        "fmin": jnp.fmin, "nextafter": jnp.nextafter, "copysign": jnp.copysign, "hypot": jnp.hypot,
        "eq": jnp.equal, "lt": jnp.less, "xlogy": lambda x, y: jnp.where(x == 0, 0.0, x * jnp.log(y)),
    }


def _int_binary(jnp, lax):
    return {"div": lax.div, "rem": lax.rem, "floor_divide": jnp.floor_divide, "remainder": jnp.remainder,
            "shift_left": lax.shift_left, "shift_right_arithmetic": lax.shift_right_arithmetic,
            "shift_right_logical": lax.shift_right_logical, "pow": lax.integer_pow_like}


def _reductions(jnp, lax):
    """Functions of the whole SPECIAL vector (NaN propagation, orderings of -0.0/+0.0/NaN, inf - inf)."""
    return {
        "max": jnp.max, "min": jnp.min, "argmax": jnp.argmax, "argmin": jnp.argmin, "sum": jnp.sum,
        "prod_of_ordinary": lambda x: jnp.prod(x[2:10]), "cumsum": jnp.cumsum, "cummax": lax.cummax,
        "cumprod_of_ordinary": lambda x: jnp.cumprod(x[2:10]), "sort": jnp.sort, "argsort_stable":
        lambda x: jnp.argsort(x, stable=True), "top_k": lambda x: lax.top_k(x, 5)[0],
        "top_k_indices": lambda x: lax.top_k(x, 5)[1], "max_without_nan": lambda x: jnp.max(x[:12]),
        "argmax_without_nan": lambda x: jnp.argmax(x[:12]), "logsumexp": jax_logsumexp,
        "softmax_without_nan": lambda x: jax_softmax(x[:12]), "clamp": lambda x: jnp.clip(x, -1.0, 2.0),
        "clamp_nan_bounds": lambda x: jnp.clip(x, x[::-1], None), "mean_of_ordinary": lambda x: jnp.mean(x[2:10]),
        "var_of_ordinary": lambda x: jnp.var(x[2:10]), "where_nan": lambda x: jnp.where(x > 0, x, -x),
    }


def _small_ints(jnp, lax):
    """Integer arithmetic at its limits (wrapping, shifts by the width, the most negative value)."""
    return {
        "int8_add_wraps": lambda a: (a.astype(jnp.int8) + jnp.int8(100)),
        "int8_mul_wraps": lambda a: (a.astype(jnp.int8) * jnp.int8(77)),
        "uint8_sub_wraps": lambda a: (a.astype(jnp.uint8) - jnp.uint8(200)),
        "int16_mul_wraps": lambda a: a.astype(jnp.int16) * jnp.int16(3000),
        "int32_mul_wraps": lambda a: a * jnp.int32(65537),
        "int32_abs_neg": lambda a: jnp.stack([jnp.abs(a), -a]),
        "int32_to_float32": lambda a: a.astype(jnp.float32),
        "int32_to_int8": lambda a: a.astype(jnp.int8),
        "int64_mul": lambda a: a.astype(jnp.int64) * jnp.int64(2 ** 33 + 1),
        "int64_floor_divide": lambda a: jnp.floor_divide(a.astype(jnp.int64) * 2 ** 33, jnp.int64(-7)),
        "int64_to_float32": lambda a: (a.astype(jnp.int64) * (2 ** 31 + 3)).astype(jnp.float32),
    }


def _float_to_int(jnp, lax):
    return {"to_int64": lambda x: x.astype(jnp.int64), "to_int8": lambda x: x.astype(jnp.int8),
            "to_bool": lambda x: x.astype(bool), "round_to_int32": lambda x: jnp.round(x).astype(jnp.int32)}


def _classify(a, b, np, precise=False):
    """Why two results differ ("" when they agree for torch's purposes)."""
    if a.dtype.kind in "biu":
        return "" if a == b else "value"
    a, b = float(a), float(b)
    if precise:  # float64 on ordinary values: how far XLA:TPU's emulated float64 is from XLA:CPU's
        return "" if abs(a - b) <= 1e-13 * max(abs(a), abs(b), 1e-300) or (np.isnan(a) and np.isnan(b)) else \
            "float64_precision"
    if np.isnan(a) or np.isnan(b):
        return "" if np.isnan(a) and np.isnan(b) else "nan"
    if np.isinf(a) or np.isinf(b):
        return "" if a == b else "inf"
    if a == 0 and b == 0:
        return "" if np.signbit(a) == np.signbit(b) else "signed_zero"
    tiny = float(np.finfo(np.float32).tiny)
    if (abs(a) < tiny) != (abs(b) < tiny) and (a == 0 or b == 0):
        return "subnormal"
    return "" if abs(a - b) <= 1e-3 * max(abs(a), abs(b)) else "value"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    jax.config.update("jax_enable_x64", True)
    global jax_logsumexp, jax_softmax
    jax_logsumexp, jax_softmax = jax.nn.logsumexp, jax.nn.softmax
    rng = np.random.default_rng(0)
    lax.integer_pow_like = lambda x, y: jnp.power(x, jnp.abs(y) % 5)  # an integer power that cannot raise
    accel, cpu = jax.devices()[0], jax.devices("cpu")[0]
    x = np.array(SPECIALS, np.float32)
    xs, ys = (a.ravel() for a in np.meshgrid(x, x, indexing="ij"))
    ints = np.array([0, 1, -1, 7, -7, 2**31 - 1, -2**31, 31, 32, 33], np.int32)
    ixs, iys = (a.ravel() for a in np.meshgrid(ints, ints, indexing="ij"))
    cases = [(f"float32.{n}", f, (x,)) for n, f in _unary(jnp, lax).items()]
    cases += [(f"bfloat16.{n}", f, (x.astype(jnp.bfloat16),)) for n, f in _unary(jnp, lax).items()
              if n not in ("to_bfloat16", "to_float16")]
    cases += [(f"float32.{n}", f, (xs, ys)) for n, f in _binary(jnp, lax).items()]
    cases += [(f"bfloat16.{n}", f, (xs.astype(jnp.bfloat16), ys.astype(jnp.bfloat16)))
              for n, f in _binary(jnp, lax).items() if n != "nextafter"]
    cases += [(f"int32.{n}", f, (ixs, iys)) for n, f in _int_binary(jnp, lax).items()]
    x64 = x.astype(np.float64)
    x64s, y64s = xs.astype(np.float64), ys.astype(np.float64)
    cases += [(f"float64.{n}", f, (x64,)) for n, f in _unary(jnp, lax).items()]  # (XLA:TPU emulates float64)
    cases += [(f"float64.{n}", f, (x64s, y64s)) for n, f in _binary(jnp, lax).items()]
    ordinary = rng.standard_normal(4096) * np.exp(rng.uniform(-20, 20, 4096))
    cases += [("float64.precision_ordinary_" + n, fn, (ordinary,)) for n, fn in (
        ("exp_scaled", lambda v: jnp.exp(v / jnp.max(jnp.abs(v)) * 50)), ("log", lambda v: jnp.log(jnp.abs(v))),
        ("sqrt", lambda v: jnp.sqrt(jnp.abs(v))), ("div", lambda v: v / v[::-1]), ("sin", lambda v: jnp.sin(v[:64])),
        ("tanh", jnp.tanh), ("pow", lambda v: jnp.abs(v) ** 0.37), ("sum", jnp.sum), ("cumsum", jnp.cumsum),
        ("matmul", lambda v: v[:4096].reshape(64, 64) @ v[::-1].reshape(64, 64)))]
    cases += [(f"float32.whole_{n}", f, (x,)) for n, f in _reductions(jnp, lax).items()]
    cases += [(f"bfloat16.whole_{n}", f, (x.astype(jnp.bfloat16),)) for n, f in _reductions(jnp, lax).items()]
    cases += [(f"float32.{n}", f, (x,)) for n, f in _float_to_int(jnp, lax).items()]
    cases += [(n, f, (ints,)) for n, f in _small_ints(jnp, lax).items()]
    report = {"platform": accel.platform, "device_kind": accel.device_kind, "jax": jax.__version__,
              "inputs": [repr(v) for v in SPECIALS], "differences": {}, "errors": {}, "agree": []}
    start = time.perf_counter()
    for name, fn, operands in cases:
        try:
            on_accel = np.asarray(jax.jit(fn)(*(jax.device_put(o, accel) for o in operands)))
            on_cpu = np.asarray(jax.jit(fn)(*(jax.device_put(o, cpu) for o in operands)))
        except Exception as e:  # noqa: BLE001 -- recorded, the probe goes on
            report["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        rows = []
        for i in range(on_cpu.size):
            why = _classify(on_accel.ravel()[i], on_cpu.ravel()[i], np, precise="precision_ordinary" in name)
            if why:
                args_i = ([repr(o.ravel()[i].item()) for o in operands] if on_cpu.size == operands[0].size
                          else [f"output {i}"])
                rows.append({"args": args_i, "tpu": repr(on_accel.ravel()[i].item()),
                             "cpu": repr(on_cpu.ravel()[i].item()), "why": why})
        if rows:
            report["differences"][name] = rows[:40] + ([{"more": len(rows) - 40}] if len(rows) > 40 else [])
        else:
            report["agree"].append(name)
    report["seconds"] = round(time.perf_counter() - start, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    for name, rows in report["differences"].items():
        rows = [r for r in rows if "why" in r]
        kinds = sorted({r["why"] for r in rows})
        print(f"{name}: {len(rows)} differ ({', '.join(kinds)}); e.g. {rows[0]['args']} tpu {rows[0]['tpu']} "
              f"cpu {rows[0]['cpu']}")
    for name, err in report["errors"].items():
        print(f"{name}: ERROR {err[:160]}")
    print(f"{len(report['agree'])} agree, {len(report['differences'])} differ, {len(report['errors'])} errors, "
          f"{report['seconds']} s")


if __name__ == "__main__":
    main()

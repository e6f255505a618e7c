"""Random op calls on the edges of values, run on CPU torch and on tpu (strict and fused eager; compiled for a
few seeds) from one seed, through ``differential.check``: results equal (NaN-aware), or both raise.

Inputs mix special values (NaN, +-inf, -0.0, subnormals, the largest and smallest finite values, integer
minima and maxima including INT_MIN, ties and duplicates) in every dtype (bool, uint8, int8..int64, float16,
bfloat16, float32, float64, complex64), as empty, 0-dim, contiguous and non-contiguous tensors (transposed,
sliced with a step, expanded). Op families: unary math, integer and float division/remainder, casts,
reductions (with dim=, keepdim=, dtype=, empty dims), scans, sort/topk/median/mode/unique, searchsorted,
clamp/where/maximum/fmax, isclose/equal, nan_to_num, histc/bincount, bitwise ops and shifts.

What CPU torch leaves undefined is not compared, each case saying so where it is built:
  * float -> integer casts of NaN, infinities and out-of-range values (README: the tpu saturates, x86 wraps):
    cast inputs are made finite and in range first;
  * indices of ties where torch does not promise an order (sort/argsort without stable=True, topk,
    kthvalue, median, mode): only values are compared there; sort with stable=True, argmax/argmin and
    max/min(dim) (first occurrence, documented) compare indices too;
  * INT_MIN / -1 in integer division (CPU's int32 trunc division dies of SIGFPE): the pair is avoided;
  * subnormal float32/bfloat16 values are flushed to zero by XLA (README): the CPU reference runs under
    ``torch.set_flush_denormal(True)``, which computes the documented behaviour;
  * sums and scans of floats are compared with tolerances (summation order differs), low-precision
    reductions with wider ones;
  * CPU torch's median/nanmedian along a dim of an expanded tensor returns garbage (a CPU bug): its
    reference gets a contiguous copy; its median of no integers is NaN cast to the dtype (the tpu refuses);
  * NaN boundaries of searchsorted/bucketize: CPU's binary search answers by its path;
  * documented differences (README), kept out of the inputs: var/std of complex64 values whose squares
    overflow float32 (CPU computes them in float64), prod of float16/bfloat16 whose partial products
    overflow the dtype (CPU multiplies in it), histc of float16 values whose (v - min) * bins overflows;
  * an in-place integer division by zero raises on both; what CPU leaves in self is not compared.

An integer division by zero raises on CPU (ZeroDivisionError); on the tpu it is a device-side check
(``DeviceAssertError`` naming ZeroDivisionError at the next wait): ``differential`` reads and synchronises
inside the case, so it counts as "both raise". A found seed becomes a named case below (regressions)."""
from __future__ import annotations

import math
import os
import random
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import fuzz_seeds, per_device, PerDevice, t

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]

SEEDS = fuzz_seeds(120)
COMPILED_SEEDS = range(int(os.environ.get("TORCH_TPU_FUZZ_COMPILED_SEEDS", "6")))

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REAL = [torch.bool] + INTS + FLOATS
ALL = REAL + [torch.complex64]
LOW = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------------------------------
# values


def _pool(dtype):
    """Special values of ``dtype`` (as Python numbers) plus a few ordinary ones."""
    if dtype == torch.bool:
        return [True, False]
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        return [info.min, info.max, info.min + 1, info.max - 1, 0, 1, 2, 3, 7, -1, -2, -3, -7, 100, -100]
    real = torch.float32 if dtype == torch.complex64 else dtype
    info = torch.finfo(real)
    return [math.nan, math.inf, -math.inf, 0.0, -0.0, info.max, -info.max, info.tiny, -info.tiny,
            info.tiny / 4, -info.tiny / 4, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0, 0.1, 1e4, -7.25]


def _values(r: random.Random, dtype, n: int, special: float = 0.5) -> torch.Tensor:
    """n values of dtype, about ``special`` of them from the pool (others small, with repeats: ties)."""
    pool = _pool(dtype)
    ordinary = ([r.choice([True, False]) for _ in range(4)] if dtype == torch.bool else
                [r.randint(-5, 5) for _ in range(4)] if not (dtype.is_floating_point or dtype.is_complex)
                else [round(r.uniform(-4, 4), 2) for _ in range(4)])
    vals = [r.choice(pool) if r.random() < special else r.choice(ordinary) for _ in range(n)]
    if dtype == torch.uint8:
        vals = [v % 256 for v in vals]
    if dtype.is_complex:
        im = [r.choice(pool) if r.random() < special / 2 else r.choice(ordinary) for _ in range(n)]
        return torch.complex(torch.tensor(vals, dtype=torch.float32), torch.tensor(im, dtype=torch.float32))
    return torch.tensor(vals, dtype=torch.float64 if dtype.is_floating_point else
                        torch.int64 if dtype != torch.bool else torch.bool).to(dtype)


_FLUSH = [False]  # set while the CPU reference runs with subnormal inputs flushed (see run_seed)


def _subnormal(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return _subnormal(t.real) | _subnormal(t.imag)
    if not t.is_floating_point():
        return torch.zeros(t.shape, dtype=torch.bool)
    return (t != 0) & (t.abs() < torch.finfo(t.dtype).tiny)


def _flush_subnormals(t: torch.Tensor) -> torch.Tensor:
    """t's subnormal values as zeros of their sign, written into t's memory (views stay views)."""
    if not (t.is_floating_point() or t.is_complex()):
        return t
    base = t._base if t._base is not None else t
    if base.is_complex():
        parts = torch.view_as_real(base)
        parts.copy_(torch.where(_subnormal(parts), parts * 0, parts))
    else:
        base.copy_(torch.where(_subnormal(base), base * 0, base))
    return t


SHAPES = [(5,), (3, 4), (2, 3, 2), (), (0,), (3, 0), (1, 5), (4, 1)]
LAYOUTS = ["contiguous", "contiguous", "transposed", "step", "expanded"]


def _tensor(r: random.Random, dtype, shape, layout=None, special=0.5, values=None) -> PerDevice:
    """A tensor of ``shape`` on each device, built the same way: contiguous, a transposed view, a view
    sliced with step 2, or an expanded view (a stride 0 dimension). Returns a PerDevice with a label."""
    layout = layout or r.choice(LAYOUTS)
    if len(shape) == 0 or 0 in shape:
        layout = "contiguous"
    if layout == "transposed" and len(shape) < 2:
        layout = "step"
    n = math.prod(shape)
    if layout == "expanded":
        inner = shape[1:] if len(shape) > 1 else (1,)
        v = values if values is not None else _values(r, dtype, math.prod(inner), special)
        base = v.reshape(inner)

        def make(d, base=base):
            b = base.clone().to(d)
            return b.expand(*shape) if len(shape) > 1 else b.expand(shape[0])
    elif layout == "transposed":
        v = values if values is not None else _values(r, dtype, n, special)
        base = v.reshape(shape).transpose(-1, -2).contiguous()

        def make(d, base=base):
            return base.clone().to(d).transpose(-1, -2)
    elif layout == "step":
        v = values if values is not None else _values(r, dtype, n, special)
        wide = torch.stack([v.reshape(shape), v.reshape(shape)], -1).reshape(*shape[:-1], 2 * shape[-1])

        def make(d, wide=wide):
            return wide.clone().to(d)[..., ::2]
    else:
        v = values if values is not None else _values(r, dtype, n, special)
        base = v.reshape(shape)

        def make(d, base=base):
            return base.clone().to(d)
    p = per_device(lambda d, make=make: _flush_subnormals(make(d)) if d == "cpu" and _FLUSH[0] else make(d))
    p.label = f"{str(dtype)[6:]}{list(shape)}{'' if layout == 'contiguous' else ':' + layout}"
    p.cpu_value = make("cpu")
    return p


# ----------------------------------------------------------------------------------------------------
# the op families: each builds (label, fn, args, check options) from the rng


def _dim(r, shape):
    return r.randrange(-max(1, len(shape)), max(1, len(shape)))


def _unary(r):
    name, fn, dtypes = r.choice(UNARY)
    dtype = r.choice(dtypes)
    x = _tensor(r, dtype, r.choice(SHAPES))
    return f"{name}({x.label})", fn, [x], {}


def _r(name, f):
    f.__name__ = name
    return f


UNARY = [
    ("abs", torch.abs, ALL), ("neg", torch.neg, ALL), ("sign", torch.sign, REAL), ("sgn", torch.sgn, ALL),
    ("sqrt", torch.sqrt, ALL), ("rsqrt", torch.rsqrt, REAL), ("log", torch.log, ALL), ("log2", torch.log2, REAL),
    ("log1p", torch.log1p, REAL), ("exp", torch.exp, ALL), ("exp2", torch.exp2, REAL), ("expm1", torch.expm1, REAL),
    ("round", torch.round, REAL), ("round1", lambda x: torch.round(x, decimals=1), REAL),
    ("round-1", lambda x: torch.round(x, decimals=-1), REAL), ("round3", lambda x: torch.round(x, decimals=3), REAL),
    ("trunc", torch.trunc, REAL), ("floor", torch.floor, REAL), ("ceil", torch.ceil, REAL),
    ("frac", torch.frac, REAL), ("reciprocal", torch.reciprocal, ALL), ("square", torch.square, ALL),
    ("sigmoid", torch.sigmoid, REAL), ("tanh", torch.tanh, REAL), ("signbit", torch.signbit, REAL),
    ("isnan", torch.isnan, ALL), ("isinf", torch.isinf, ALL), ("isfinite", torch.isfinite, ALL),
    ("isposinf", torch.isposinf, REAL), ("isneginf", torch.isneginf, REAL), ("logical_not", torch.logical_not, ALL),
    ("bitwise_not", torch.bitwise_not, REAL), ("nan_to_num", torch.nan_to_num, ALL),
    ("nan_to_num(1,2,3)", lambda x: torch.nan_to_num(x, 1.0, 2.0, -3.0), ALL),
    ("angle", torch.angle, ALL), ("pow2", lambda x: x ** 2, ALL), ("pow0.5", lambda x: x ** 0.5, REAL),
    ("pow-1", lambda x: x ** -1, REAL), ("rpow2", lambda x: 2 ** x, REAL), ("pow0", lambda x: torch.pow(x, 0), ALL),
    ("erf", torch.erf, REAL), ("sinh", torch.sinh, REAL), ("atanh", torch.atanh, REAL),
    ("positive", torch.positive, REAL), ("fix", torch.fix, REAL), ("count_nonzero", torch.count_nonzero, ALL),
    ("abs_", lambda x: x.abs_(), ALL), ("neg_", lambda x: x.neg_(), ALL), ("floor_", lambda x: x.floor_(), REAL),
    ("deg2rad", torch.deg2rad, REAL), ("logit", torch.logit, REAL), ("relu", torch.relu, REAL),
    ("xlogy(x,x)", lambda x: torch.xlogy(x, x), REAL), ("exp_overflow", lambda x: torch.exp(x * 100), FLOATS),
]


def _cast(r):
    src, dst = r.choice(ALL), r.choice(ALL)
    x = _tensor(r, src, r.choice(SHAPES))
    label = f"to({x.label} -> {str(dst)[6:]})"
    if (src.is_floating_point or src.is_complex) and not (dst.is_floating_point or dst.is_complex) \
            and dst != torch.bool:
        # undefined on CPU (x86 wraps, the tpu saturates: README): only finite, in-range values
        lo, hi = (0, 200) if dst == torch.uint8 else (-100, 100)
        fin = x.cpu_value.real if src.is_complex else x.cpu_value
        fin = torch.nan_to_num(fin.double(), 0.0, 0.0, 0.0).clamp(lo, hi)
        x = _tensor(r, src, tuple(fin.shape), "contiguous", values=fin.reshape(-1).to(src))
        label += " (finite, in range)"
    return label, (lambda t: t.to(dst)), [x], {}


def _pair(r, dtypes, same=True, zero_ok=True):
    da = r.choice(dtypes)
    db = da if same or r.random() < 0.5 else r.choice(dtypes)
    shape = r.choice(SHAPES)
    a = _tensor(r, da, shape)
    b = _tensor(r, db, r.choice([shape, shape, shape[-1:], ()]))
    if not zero_ok:
        b = _nonzero(b, db)
    return a, b


def _nonzero(p, dtype):
    v = p.cpu_value.clone()
    v = torch.where(v == 0, torch.ones_like(v), v) if dtype != torch.bool else torch.ones_like(v)
    return _tensor(random.Random(0), dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())


def _no_int_min_by_minus_one(a, b):
    """INT_MIN / -1 overflows: CPU's int32 trunc division dies of SIGFPE (undefined): the divisor becomes 1."""
    x, y = a.cpu_value, b.cpu_value
    if x.dtype.is_floating_point or y.dtype.is_floating_point or x.dtype == torch.bool or y.dtype == torch.bool:
        return b
    dt = torch.promote_types(x.dtype, y.dtype)
    if dt == torch.uint8:
        return b
    bad = (x.to(dt) == torch.iinfo(dt).min) & (y.to(dt) == -1)
    if not bad.any():
        return b
    v = torch.where((y == -1) & bad.reshape(-1)[:1].any(), torch.ones_like(y), y)
    return _tensor(random.Random(0), y.dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())


DIVISION = [
    ("div", torch.div), ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")), ("//", lambda a, b: a // b),
    ("%", lambda a, b: a % b), ("fmod", torch.fmod), ("remainder", torch.remainder),
    ("floor_divide_", lambda a, b: a.floor_divide_(b)), ("fmod_", lambda a, b: a.fmod_(b)),
]


def _division(r):
    name, fn = r.choice(DIVISION)
    a, b = _pair(r, INTS + FLOATS + [torch.bool], same=r.random() < 0.7, zero_ok=r.random() < 0.3)
    b = _no_int_min_by_minus_one(a, b)
    # an in-place integer division by zero raises on both; what CPU leaves in self is what its loop wrote
    # before the zero (an order of its own): self is not compared then
    kw = {"check_inputs": False} if name.endswith("_") and bool((b.cpu_value == 0).any()) else {}
    return f"{name}({a.label}, {b.label})", fn, [a, b], kw


BINARY = [
    ("maximum", torch.maximum, REAL), ("minimum", torch.minimum, REAL), ("fmax", torch.fmax, REAL),
    ("fmin", torch.fmin, REAL), ("where", lambda a, b: torch.where(a > 0 if a.dtype != torch.bool else a, a, b), REAL),
    ("isclose", torch.isclose, ALL), ("isclose_nan", lambda a, b: torch.isclose(a, b, equal_nan=True), ALL),
    ("allclose", lambda a, b: torch.tensor(torch.allclose(a, b)), FLOATS),
    ("equal", lambda a, b: torch.tensor(torch.equal(a, b)), ALL), ("eq", torch.eq, ALL), ("lt", torch.lt, REAL),
    ("ne", torch.ne, ALL), ("bitwise_and", torch.bitwise_and, INTS + [torch.bool]),
    ("bitwise_xor", torch.bitwise_xor, INTS + [torch.bool]),
    ("<<", lambda a, b: a << b, INTS), (">>", lambda a, b: a >> b, INTS),
    ("lshift_scalar", lambda a, b: a << 70, INTS), ("rshift_scalar", lambda a, b: a >> 65, INTS),
    ("rshift_neg", lambda a, b: a >> -1, INTS), ("lshift_neg", lambda a, b: a << -2, INTS),
    ("copysign", torch.copysign, REAL), ("atan2", torch.atan2, REAL), ("hypot", torch.hypot, FLOATS),
    ("pow", torch.pow, REAL), ("float_power", torch.float_power, REAL), ("logaddexp", torch.logaddexp, FLOATS),
    ("nextafter", torch.nextafter, [torch.float32, torch.float64]), ("ldexp", torch.ldexp, FLOATS),
    ("xlogy", torch.xlogy, FLOATS), ("heaviside", torch.heaviside, REAL), ("gcd", torch.gcd, INTS),
    ("lcm", torch.lcm, INTS), ("logical_xor", torch.logical_xor, ALL),
]


def _binary(r):
    name, fn, dtypes = r.choice(BINARY)
    a, b = _pair(r, dtypes, same=r.random() < 0.7)
    if name in ("<<", ">>"):  # shift counts: negative and at least the bit width (CPU defines them: 0 or -1)
        counts = torch.tensor([r.choice([-1, 0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 65, -64]) for _ in range(
            math.prod(b.cpu_value.shape))], dtype=torch.int64).to(b.cpu_value.dtype).reshape(b.cpu_value.shape)
        b = _tensor(r, b.cpu_value.dtype, tuple(counts.shape), "contiguous", values=counts.reshape(-1))
    return f"{name}({a.label}, {b.label})", fn, [a, b], {}


def _clamp(r):
    dtype = r.choice(REAL[1:])
    x = _tensor(r, dtype, r.choice(SHAPES))
    pool = _pool(dtype) if dtype.is_floating_point else _pool(dtype)[:8] + [0.5, -2.5]
    lo, hi = r.choice(pool + [None]), r.choice(pool + [None])
    if lo is None and hi is None:
        lo = 0
    if r.random() < 0.3 and dtype.is_floating_point:  # tensor bounds (NaN bounds, min > max per element)
        lo_t = _tensor(r, dtype, tuple(x.cpu_value.shape[-1:]), "contiguous")
        return f"clamp({x.label}, tensor, {hi})", (lambda t, m: torch.clamp(t, m, hi)), [x, lo_t], {}
    return f"clamp({x.label}, {lo}, {hi})", (lambda t: torch.clamp(t, lo, hi)), [x], {}


def _reduction(r):
    dtype = r.choice(ALL)
    shape = r.choice(SHAPES)
    x = _tensor(r, dtype, shape)
    dim = _dim(r, shape)
    keep = r.random() < 0.3
    name = r.choice(REDUCTIONS)
    if name in ("var", "std_all", "var_mean", "std_dim", "std_mean") and dtype == torch.complex64:
        # CPU computes a complex64 var/std in float64; the tpu in float32: a square of a value near float32's
        # largest overflows only there (documented difference): values up to 1e4 here
        v = x.cpu_value
        v = torch.where(v.abs() > 1e30, torch.sgn(v) * 1e4, v) if not v.is_complex() else \
            torch.complex(*(torch.where(q.abs() > 1e30, q.sign() * 1e4, q) for q in (v.real, v.imag)))
        x = _tensor(r, dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())
    out_dt = r.choice([None, None, torch.int64, torch.float64, torch.float32, torch.float16, torch.int16])
    if name.startswith(("prod", "cumprod")) and (dtype in LOW or out_dt in LOW):
        # CPU multiplies float16/bfloat16 in the dtype (an intermediate product past 65504 is inf, times 0 nan),
        # the tpu in float32, rounded once (documented difference): factors up to 2 in size here
        v = x.cpu_value
        v = v.clamp(-2, 2) if not v.is_complex() else v
        x = _tensor(r, dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())
    corr = r.choice([0, 1, 2, 7])
    p = r.choice([0, 1, 2, 3, math.inf, -math.inf, 0.5])
    fns = {
        "sum": lambda t: t.sum(), "sum_dim": lambda t: t.sum(dim, keepdim=keep),
        "sum_dtype": lambda t: t.sum(dim, dtype=out_dt), "sum_dims": lambda t: t.sum((0, -1)),
        "prod": lambda t: t.prod(), "prod_dim": lambda t: t.prod(dim, keepdim=keep, dtype=out_dt),
        "mean": lambda t: t.mean(), "mean_dim": lambda t: t.mean(dim, keepdim=keep),
        "amax": lambda t: t.amax(dim, keepdim=keep), "amin_all": lambda t: t.amin(),
        "max": lambda t: t.max(), "min": lambda t: t.min(),
        "max_dim": lambda t: tuple(t.max(dim, keepdim=keep)), "min_dim": lambda t: tuple(t.min(dim)),
        "argmax": lambda t: t.argmax(), "argmin_dim": lambda t: t.argmin(dim, keepdim=keep),
        "aminmax": lambda t: tuple(torch.aminmax(t)),
        "cumsum": lambda t: t.cumsum(dim), "cumsum_dtype": lambda t: t.cumsum(dim, dtype=out_dt),
        "cumprod": lambda t: t.cumprod(dim), "logcumsumexp": lambda t: t.logcumsumexp(dim),
        "cummax": lambda t: tuple(t.cummax(dim)), "cummin": lambda t: tuple(t.cummin(dim)),
        "max_dim_nan_first": lambda t: tuple(t.max(-1)), "argmax_dim": lambda t: t.argmax(dim),
        "argmin": lambda t: t.argmin(), "amax_dims": lambda t: t.amax((0, -1)), "amin_keep": lambda t: t.amin(dim, True),
        "sum_all_dtype": lambda t: t.sum(dtype=out_dt), "mean_dtype": lambda t: t.mean(dim, dtype=out_dt),
        "prod_all_dtype": lambda t: t.prod(dtype=out_dt), "logsumexp_all": lambda t: t.logsumexp((0, -1)),
        "norm_keep": lambda t: torch.linalg.vector_norm(t, p, dim, keepdim=True, dtype=torch.float64),
        "cumprod_dtype": lambda t: t.cumprod(dim, dtype=out_dt), "std_mean": lambda t: tuple(torch.std_mean(t, dim)),
        "nanmean_all": lambda t: t.nanmean(), "any": lambda t: t.any(), "all_dim": lambda t: t.all(dim),
        "var": lambda t: t.var(dim, correction=corr, keepdim=keep), "std_all": lambda t: t.std(correction=corr),
        "var_mean": lambda t: tuple(torch.var_mean(t, dim, correction=corr)),
        "nansum": lambda t: t.nansum(dim), "nanmean": lambda t: t.nanmean(dim, keepdim=keep),
        "nansum_all": lambda t: t.nansum(), "logsumexp": lambda t: t.logsumexp(dim, keepdim=keep),
        "norm": lambda t: torch.linalg.vector_norm(t, p), "norm_dim": lambda t: torch.linalg.vector_norm(t, p, dim),
        "all": lambda t: t.all(), "any_dim": lambda t: t.any(dim), "count_nonzero_dim": lambda t: t.count_nonzero(dim),
        "std_dim": lambda t: t.std(dim, correction=corr),
    }
    label = f"{name}({x.label}, dim={dim}, keepdim={keep}, dtype={out_dt}, correction={corr}, p={p})"
    return label, fns[name], [x], {}


REDUCTIONS = ["sum", "sum_dim", "sum_dtype", "sum_dims", "prod", "prod_dim", "mean", "mean_dim", "amax", "amin_all",
              "max", "min", "max_dim", "min_dim", "argmax", "argmin_dim", "aminmax", "cumsum", "cumsum_dtype",
              "cumprod", "logcumsumexp", "cummax", "cummin", "var", "std_all", "var_mean", "nansum", "nanmean",
              "nansum_all", "logsumexp", "norm", "norm_dim", "all", "any_dim", "count_nonzero_dim", "std_dim",
              "max_dim_nan_first", "argmax_dim", "argmin", "amax_dims", "amin_keep", "sum_all_dtype", "mean_dtype",
              "prod_all_dtype", "logsumexp_all", "norm_keep", "cumprod_dtype", "std_mean", "nanmean_all", "any",
              "all_dim"]


def _ordering(r):
    dtype = r.choice(REAL)
    shape = r.choice(SHAPES)
    x = _tensor(r, dtype, shape, special=r.choice([0.2, 0.6]))
    dim = _dim(r, shape)
    desc = r.random() < 0.5
    size = x.cpu_value.shape[dim] if x.cpu_value.dim() else 1
    k = r.randint(0, max(size, 1))
    name = r.choice(ORDERING)
    if name == "unique_dim" and dtype.is_floating_point and bool(x.cpu_value.isnan().any()):
        # CPU sorts the slices with a comparator to which NaN equals everything (no strict weak order:
        # std::sort's result is undefined): NaN-free slices here
        v = torch.nan_to_num(x.cpu_value, nan=0.0, posinf=math.inf, neginf=-math.inf)
        x = _tensor(r, dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())
    if name in ("median", "nanmedian") and x.cpu_value.numel() == 0 and not dtype.is_floating_point:
        name = "sort"  # CPU's median of no integers is NaN cast to the integer dtype (undefined); tpu refuses
    fns = {
        # without stable=True the order of ties is not defined: values only
        "sort": lambda t: t.sort(dim, descending=desc).values,
        "sort_stable": lambda t: tuple(t.sort(dim=dim, descending=desc, stable=True)),
        "argsort_stable": lambda t: t.argsort(dim=dim, descending=desc, stable=True),
        "topk": lambda t: t.topk(k, dim, largest=not desc).values,
        "kthvalue": lambda t: _cpu_dense(t).kthvalue(max(k, 1), dim).values,
        "median": lambda t: t.median(), "median_dim": lambda t: _cpu_dense(t).median(dim).values,
        "nanmedian": lambda t: t.nanmedian(), "nanmedian_dim": lambda t: _cpu_dense(t).nanmedian(dim).values,
        "mode": lambda t: _cpu_dense(t).mode(dim).values, "msort": lambda t: torch.msort(t),
        "unique": lambda t: tuple(torch.unique(t, sorted=True, return_inverse=True, return_counts=True)),
        "unique_dim": lambda t: tuple(torch.unique(t, dim=dim, return_inverse=True, return_counts=True)),
        "unique_consecutive": lambda t: tuple(torch.unique_consecutive(t, return_inverse=True, return_counts=True)),
        "unique_consecutive_dim": lambda t: tuple(torch.unique_consecutive(t, dim=dim, return_counts=True)),
        "topk_unsorted": lambda t: t.topk(k, dim, largest=desc, sorted=False).values.sort(dim).values,
        "kthvalue_keep": lambda t: _cpu_dense(t).kthvalue(max(k, 1), dim, keepdim=True).values,
        "argsort": lambda t: t.gather(dim, t.argsort(dim, descending=desc)) if t.dim() else t.argsort(),
        "unique_unsorted_counts": lambda t: tuple(torch.unique(t, return_counts=True)),
        "mode_all": lambda t: _cpu_dense(t).reshape(-1).mode().values,
    }
    label = f"{name}({x.label}, dim={dim}, descending={desc}, k={k})"
    return label, fns[name], [x], {}


def _cpu_dense(t):
    """CPU torch's median/nanmedian/kthvalue/mode along a dim read an expanded input wrong (garbage values:
    ``torch.tensor([2.]).expand(5).median(-1)`` is not 2): CPU's reference gets a contiguous copy."""
    return t.contiguous() if t.device.type == "cpu" else t


ORDERING = ["sort", "sort_stable", "argsort_stable", "topk", "kthvalue", "median", "median_dim", "nanmedian",
            "nanmedian_dim", "mode", "msort", "unique", "unique_dim", "unique_consecutive", "unique_consecutive_dim",
            "topk_unsorted", "kthvalue_keep", "argsort", "unique_unsorted_counts", "mode_all"]


def _search(r):
    dtype = r.choice(REAL[1:])
    n = r.randint(0, 6)
    seq = _values(r, dtype, n, special=0.4)
    if dtype.is_floating_point:  # NaN boundaries: CPU's binary search answers by its path (not compared)
        seq = torch.where(seq.isnan(), torch.zeros_like(seq), seq)
    right = r.random() < 0.5
    vals = _tensor(r, dtype, r.choice([(5,), (2, 3), ()]))
    if r.random() < 0.5:  # sorter=
        order = torch.sort(seq, stable=True).indices
        s = _tensor(r, dtype, (n,), "contiguous", values=seq)
        o = _tensor(r, torch.int64, (n,), "contiguous", values=order)
        return (f"searchsorted({s.label}, sorter, {vals.label}, right={right})",
                lambda a, srt, v: torch.searchsorted(a, v, right=right, sorter=srt), [s, o, vals], {})
    s = _tensor(r, dtype, (n,), "contiguous", values=torch.sort(seq).values)
    if r.random() < 0.5:
        return f"bucketize({vals.label}, {s.label}, right={right})", (
            lambda a, v: torch.bucketize(v, a, right=right)), [s, vals], {}
    return f"searchsorted({s.label}, {vals.label}, right={right})", (
        lambda a, v: torch.searchsorted(a, v, right=right)), [s, vals], {}


def _histogram(r):
    if r.random() < 0.5:
        dtype = r.choice(FLOATS + INTS)
        x = _tensor(r, dtype, r.choice(SHAPES), special=0.3)
        if dtype in LOW:  # CPU computes the bin in the dtype: (v - lo) * bins overflowing it is undefined there
            v = x.cpu_value
            v = torch.where(v.abs() > 1e3, v.sign() * 1e3, v)
            x = _tensor(r, dtype, tuple(v.shape), "contiguous", values=v.reshape(-1).contiguous())
        bins = r.choice([1, 3, 5, 37])
        lo, hi = r.choice([(0, 0), (-1, 1), (0, 3), (2, 1), (-4.5, 4.5), (2, 2)])
        return f"histc({x.label}, {bins}, {lo}, {hi})", (lambda t: torch.histc(t, bins, lo, hi)), [x], {}
    dtype = r.choice([torch.uint8, torch.int16, torch.int32, torch.int64])
    n = r.randint(0, 6)
    v = torch.tensor([r.choice([0, 1, 2, 5, 2, -1] if r.random() < 0.2 else [0, 1, 2, 5, 2])
                      for _ in range(n)], dtype=torch.int64).to(dtype)
    x = _tensor(r, dtype, (n,), "contiguous", values=v)
    minlength = r.choice([0, 3, 8])
    if r.random() < 0.4:
        w = _tensor(r, r.choice(FLOATS[2:] + [torch.int64]), (n,), "contiguous", special=0.2)
        return (f"bincount({x.label}, weights={w.label}, minlength={minlength})",
                lambda t, ww: torch.bincount(t, ww, minlength=minlength), [x, w], {})
    return f"bincount({x.label}, minlength={minlength})", (lambda t: torch.bincount(t, minlength=minlength)), [x], {}


NUMBERS = [300, -129, 255, 256, 2**31, 2**31 - 1, -2**31 - 1, 2**63 - 1, -2**63, 1e10, 1e40, math.nan, math.inf,
           -math.inf, -0.0, 0.0, True, False, 0.5, -2.5, 1e-45, 3, -1, 1 + 2j, 70000.0]
SCALAR_OPS = [
    ("add", lambda x, s: x + s), ("rsub", lambda x, s: s - x), ("mul", lambda x, s: x * s), ("div", lambda x, s: x / s),
    ("floordiv", lambda x, s: x // s), ("rfloordiv", lambda x, s: s // x), ("mod", lambda x, s: x % s),
    ("fmod", torch.fmod), ("pow", lambda x, s: x ** s), ("rpow", lambda x, s: s ** x), ("eq", lambda x, s: x == s),
    ("lt", lambda x, s: x < s), ("ge", lambda x, s: x >= s), ("fill_", lambda x, s: x.fill_(s)),
    ("masked_fill", lambda x, s: x.masked_fill(torch.ones_like(x, dtype=torch.bool), s)),
    ("where", lambda x, s: torch.where(torch.ones_like(x, dtype=torch.bool), x, s)),
    ("where_scalar_first", lambda x, s: torch.where(torch.zeros_like(x, dtype=torch.bool), s, x)),
    ("clamp_min", lambda x, s: x.clamp(min=s)), ("clamp_max", lambda x, s: x.clamp(max=s)),
    ("full_like", lambda x, s: torch.full_like(x, s)), ("add_", lambda x, s: x.add_(s)), ("mul_", lambda x, s: x.mul_(s)),
    ("index_fill", lambda x, s: x.index_fill(-1, torch.tensor([0], device=x.device), s) if x.dim() else x),
    ("maximum_tensor", lambda x, s: torch.maximum(x, torch.tensor(s, device=x.device))),
    ("add_alpha", lambda x, s: torch.add(x, x, alpha=s)), ("bitwise_and", lambda x, s: x & s),
    ("lshift", lambda x, s: x << s), ("remainder", torch.remainder), ("div_trunc",
                                                                      lambda x, s: torch.div(x, s, rounding_mode="trunc")),
    ("isclose", lambda x, s: torch.isclose(x, torch.full_like(x, s) if not isinstance(s, complex) else x)),
    ("nan_to_num", lambda x, s: torch.nan_to_num(x, nan=s) if not isinstance(s, complex) else x),
    ("xlogy_scalar", lambda x, s: torch.xlogy(s, x)), ("copysign", lambda x, s: torch.copysign(x, s)),
]


def _scalar(r):
    """A tensor and a Python number from the edges (out of the dtype's range, NaN, -0.0, huge ints)."""
    name, fn = r.choice(SCALAR_OPS)
    dtype = r.choice(ALL)
    x = _tensor(r, dtype, r.choice(SHAPES))
    s = r.choice(NUMBERS)
    return f"{name}({x.label}, {s!r})", (lambda t: fn(t, s)), [x], {}


FAMILIES = [(_scalar, 4), (_unary, 5), (_cast, 2), (_division, 3), (_binary, 3), (_clamp, 1), (_reduction, 5), (_ordering, 3),
            (_search, 1), (_histogram, 1)]


def case(seed: int):
    r = random.Random(seed)
    family = r.choices([f for f, _ in FAMILIES], [w for _, w in FAMILIES])[0]
    return family(r)


# ----------------------------------------------------------------------------------------------------
# running


def _tolerances(args):
    low = any(isinstance(a, PerDevice) and a.cpu_value.dtype in LOW for a in args)
    return dict(atol={torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5},
                rtol={torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 2e-5}) if low else \
        dict(atol={torch.float32: 1e-5}, rtol={torch.float32: 2e-5})


def _flushing(fn):
    """fn; on CPU with subnormal inputs flushed to zero and torch.set_flush_denormal(True) (XLA flushes
    subnormals where it computes with them: README)."""
    def run(*args):
        if not any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
            return fn(*args)
        torch.set_flush_denormal(True)
        try:
            return fn(*args)
        finally:
            torch.set_flush_denormal(False)
    return run


def _has_subnormals(args) -> bool:
    return any(isinstance(a, PerDevice) and bool(_subnormal(a.cpu_value).any()) for a in args)


def run_seed(seed: int, modes) -> str | None:
    """None if seed's case matches CPU in every mode, else the failure message. A case with subnormal
    inputs may match either CPU's own result or CPU's result with the subnormals flushed (XLA flushes them
    in arithmetic but compares and sorts them as they are)."""
    label, fn, args, kw = case(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            D.check(fn, *args, modes=modes, signed_zeros=True, **_tolerances(args), **kw)
        except pytest.fail.Exception as exc:
            if not _has_subnormals(args):
                return f"seed {seed}: {label}: {str(exc)[:600]}"
            _FLUSH[0] = True
            try:
                D.check(_flushing(fn), *args, modes=modes, signed_zeros=True, **_tolerances(args), **kw)
            except pytest.fail.Exception as exc2:
                return f"seed {seed}: {label}: {str(exc)[:400]}\n  (subnormals flushed: {str(exc2)[:400]})"
            finally:
                _FLUSH[0] = False
    return None


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_random_values_match_cpu(mode):
    problems = [p for seed in SEEDS if (p := run_seed(seed, [mode])) is not None]
    assert not problems, f"{len(problems)} of {len(SEEDS)} seeds differ from CPU:\n" + "\n".join(problems[:20])


def test_random_values_match_cpu_compiled():
    problems = [p for seed in COMPILED_SEEDS if (p := run_seed(seed, ["compiled"])) is not None]
    assert not problems, f"{len(problems)} of {len(COMPILED_SEEDS)} seeds differ from CPU:\n" + "\n".join(problems)


# ----------------------------------------------------------------------------------------------------
# seeds of the sweep kept as named cases

EAGER = ["strict", "fused"]
ALL_MODES = ["strict", "fused", "compiled"]


def _halves(seed=0, n=300):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g) * 10 - 5


REGRESSIONS = {
    # round(decimals=) has no integer kernel on CPU: the tpu returned values
    "round_decimals_int": (lambda x: torch.round(x, decimals=-1), [t(15, -25, 7)], True),
    "round_decimals0_int8": (lambda x: torch.round(x, decimals=0), [t(1, 2, dtype=torch.int8)], True),
    # histc has no integer kernel on CPU: the tpu counted
    "histc_int64": (lambda x: torch.histc(x, 3, 0, 3), [t(1, 2, 2)], True),
    "histc_uint8": (lambda x: torch.histc(x, 5), [t(1, 2, 9, dtype=torch.uint8)], True),
    # histc of float16/bfloat16: CPU computes the bin in the dtype; the tpu's float32 bins put values near an
    # edge into the next bin; min == max (not only 0 == 0) means the data's range
    "histc_half_edges": (lambda x: torch.histc(x, 37, -4.5, 4.5), [_halves().half()], False),
    "histc_bf16_edges": (lambda x: torch.histc(x, 100, -1, 1), [_halves(1).bfloat16()], False),
    "histc_min_eq_max": (lambda x: torch.histc(x, 5, 2, 2), [_halves(2, 20)], False),
    # nansum of complex: CPU refuses, the tpu summed
    "nansum_complex": (lambda x: torch.nansum(x), [torch.tensor([1j, 2])], True),
    "nansum_complex_dim": (lambda x: torch.nansum(x, 0), [torch.tensor([1j, 2])], True),
    # unique(dim=) of a 0-dim tensor: numpy's AxisError leaked out
    "unique_dim_0dim": (lambda x: torch.unique(x, dim=0), [torch.tensor(3)], True),
    # logcumsumexp of an empty complex tensor: the lowering failed (IndexError inside the scan)
    "logcumsumexp_empty_complex": (lambda x: torch.logcumsumexp(x, 0), [torch.zeros(0, dtype=torch.complex64)],
                                   False),
    "unique_dim_empty_other_dim": (lambda x: torch.unique(x, dim=0), [torch.zeros(3, 0, dtype=torch.bool)], True),
    # bincount of no values with weights: CPU returns int64 zeros (the tpu: the weights' dtype)
    "bincount_empty_weights": (lambda x, w: torch.bincount(x, w, minlength=3),
                               [torch.zeros(0, dtype=torch.int16), torch.zeros(0, dtype=torch.float64)], False),
    # float16 ** 0.5 / ** -0.5: CPU's half kernel calls std::pow ((-inf) ** 0.5 is inf, (-0.) ** 0.5 is 0.)
    "pow_half_sqrt": (lambda x: (x ** 0.5, x ** -0.5), [torch.tensor([-math.inf, -0.0, 0.0, -1.0, 4.0]).half()],
                      False),
    # round(decimals=) of float16: computed in float16 (65504 * 1000 overflowed, 2.5 came back 2.502); negative
    # decimals multiplied by 0.1 (inexact) where CPU divides by 10
    "round_decimals_half": (lambda x: (torch.round(x, decimals=3), torch.round(x, decimals=-1)),
                            [torch.tensor([2.5, -1.5, 65504.0, 25.0, 35.0, 0.125]).half()], False),
    "round_decimals_float": (lambda x: (torch.round(x, decimals=-1), torch.round(x, decimals=2)),
                             [torch.arange(-400, 400, dtype=torch.float32) / 8], False),
    # a rounding division of bools: CPU has no kernel, the tpu divided (or asserted a zero divisor)
    "div_trunc_bool": (lambda x: torch.div(x, True, rounding_mode="trunc"), [t(True, False)], True),
    # Scalars past the dtype's range: CPU raises (c10::checked_convert), the tpu stored or computed with inf
    "fill_half_overflow": (lambda x: x.fill_(70000.0), [torch.zeros(3, dtype=torch.float16)], True),
    "full_float_overflow": (lambda x: torch.full_like(x, 1e40), [torch.zeros(2)], True),
    "masked_fill_bf16_overflow": (lambda x: x.masked_fill(x == 0, 1e40), [torch.zeros(2, dtype=torch.bfloat16)],
                                  True),
    "index_fill_half_overflow": (lambda x: x.index_fill(0, torch.tensor([0], device=x.device), 2**31),
                                 [torch.zeros(3, dtype=torch.float16)], True),
    "scatter_value_overflow": (lambda x: x.scatter(0, torch.tensor([0], device=x.device), 70000.0),
                               [torch.zeros(3, dtype=torch.float16)], True),
    "threshold_value_overflow": (lambda x: torch.threshold(x, 0.5, 300), [t(1, 0, 3, dtype=torch.int8)], True),
    "hardtanh_half_overflow": (lambda x: torch.nn.functional.hardtanh(x, -1e10, 1e10),
                               [torch.zeros(3, dtype=torch.float16)], True),
    # integer hardtanh: bounds past the dtype raise on CPU (the tpu clamped with them); negative bounds of
    # uint8 raise (the tpu raised for the first call's key only, then clamped)
    # activations' parameters past the type CPU computes in raise there (the tpu computed with inf); celu's
    # alpha 0 raises (celu, hardshrink, softshrink are decomposed: their checks ran for no decomposed op)
    # float32 var/std: CPU accumulates in float64 (a square past float32's range is no overflow, a std of a
    # variance past it is finite, a variance of 1e-30s is not 0); var_mean's mean is Welford's (float64, NaN
    # after an infinity); var over all elements takes float32's mean first (inf when its sum overflows)
    "var_std_float32_range": (lambda x: (x.var(), x.std(), x.var(0), x.std(1), torch.var_mean(x), torch.std_mean(x, 1),
                                         x.var((0, 1))),
                              [torch.tensor([[1e20, 0.0, 0.0, 1.0], [2e19, 1.0, 2.0, 3.0]])], False),
    "std_mean_float32_extremes": (lambda x: (x.std(), torch.var_mean(x), torch.std_mean(x)),
                                  [torch.tensor([3e38, -3e38, 1.0, 2.0])], False),
    "var_std_float32_tiny": (lambda x: (x.var(), x.std(), x.std(0), torch.std_mean(x)),
                             [torch.tensor([[1e-30, 2e-30], [3e-30, 5e-30]])], False),
    "var_mean_float32_sum_overflow": (lambda x: (x.var(), x.var(1), torch.var_mean(x), torch.var_mean(x, 1)),
                                      [torch.full((2, 4), 3e38)], False),
    "var_mean_infinities": (lambda x: (torch.var_mean(x, 1), torch.std_mean(x, 1), x.var(1)),
                            [torch.tensor([[1.0, float("inf"), 3.0], [1.0, 2.0, float("-inf")],
                                           [float("inf"), float("inf"), 1.0]])], False),
    "var_mean_float64_welford": (lambda x: (torch.var_mean(x, 1), torch.std_mean(x[0, 0]), torch.var_mean(-x[1, 1])),
                                 [torch.tensor([[1.0, float("inf"), 3.0], [-0.0, -0.0, 0.0]], dtype=torch.float64)], False),
    "leaky_relu_slope_overflow": (lambda x: F.leaky_relu(x, 1e40), [t(-1.0, 2.0)], True),
    "elu_alpha_overflow": (lambda x: F.elu(x.half(), 1e40), [t(-1.0, 2.0)], True),
    "elu_input_scale_overflow": (lambda x: torch.ops.aten.elu(x, 1, 1, 1e40), [t(-1.0, 2.0)], True),
    "softplus_beta_overflow": (lambda x: F.softplus(x, 1e40), [t(-1.0, 2.0)], True),
    "celu_alpha_zero": (lambda x: F.celu(x, 0.0), [t(-1.0, 2.0)], True),
    "celu_alpha_zero_inplace": (lambda x: F.celu_(x, 0.0), [t(-1.0, 2.0)], True),
    "celu_alpha_overflow": (lambda x: F.celu(x, 1e40), [t(-1.0, 2.0).bfloat16()], True),
    "hardshrink_half_lambda": (lambda x: F.hardshrink(x, 70000.0), [t(-1.0, 2.0).half()], True),
    "softshrink_lambda_overflow": (lambda x: F.softshrink(x, 1e40), [t(-1.0, 2.0)], True),
    "activation_parameters_in_range": (lambda x: (F.leaky_relu(x, 7e4), F.elu(x, 3e38), F.celu(x, 0.25),
                                                  F.hardshrink(x, 1.5), F.softshrink(x.double(), 1e40)),
                                       [t(-1.0, 2.0, 0.1)], False),
    "hardtanh_uint8_overflow": (lambda x: torch.nn.functional.hardtanh(x, 0.0, 300.0), [t(1, 200, dtype=torch.uint8)],
                                True),
    "hardtanh_int8_overflow": (lambda x: torch.nn.functional.hardtanh(x, -200, 1), [t(1, -100, dtype=torch.int8)],
                               True),
    "hardtanh_uint8_in_range_then_negative": (
        lambda x: (torch.nn.functional.hardtanh(x, 0.5, 2.5), torch.nn.functional.hardtanh(x, -1.0, 1.0)),
        [t(1, 200, dtype=torch.uint8)], True),
    "clamp_float_overflow": (lambda x: x.clamp(min=1e40), [t(1, 2)], True),
    "add_alpha_half_overflow": (lambda x: torch.add(x, x, alpha=70000.0), [torch.ones(2, dtype=torch.float16)], True),
    "addcmul_value_overflow": (lambda x: torch.addcmul(x, x, x, value=1e40), [torch.ones(2)], True),
    "addcmul_int_value_overflow": (lambda x: torch.addcmul(x, x, x, value=300), [t(1, 2, dtype=torch.int8)], True),
    "lerp_weight_overflow": (lambda x: torch.lerp(x, x, 1e40), [torch.ones(2, dtype=torch.float16)], True),
    "pow_half_exponent_overflow": (lambda x: x ** 70000.0, [torch.ones(2, dtype=torch.float16)], True),
    # (the other side of the check: CPU fills one float16 element unchecked, its scalar_fill path, as
    # torch.where's scalar does)
    "full_half_one_element": (lambda x: (torch.full_like(x, 70000.0), torch.where(x > 0, 70000.0, x)),
                              [torch.zeros((), dtype=torch.float16)], False),
    # dtypes CPU kernels refuse: threshold of bool/complex, addcmul of bools, arange in bool/complex
    "threshold_bool": (lambda x: torch.threshold(x, 0, 1), [t(True, False)], True),
    "threshold_complex": (lambda x: torch.threshold(x, 0, 1), [torch.tensor([1j])], True),
    "addcmul_bool": (lambda x: torch.addcmul(x, x, x), [t(True, False)], True),
    "arange_bool": (lambda x: torch.arange(3, dtype=torch.bool, device=x.device), [torch.zeros(1)], True),
    "arange_complex": (lambda x: torch.arange(0, 3, dtype=torch.complex64, device=x.device), [torch.zeros(1)],
                       True),
    # float16/bfloat16 * / a Python number: CPU computes in float32 with the number unrounded (bf16 x * 1.0039
    # was x * 1.0 on the tpu; float16 x / 70000 was x / inf = 0)
    "mul_bf16_by_number": (lambda x: (x * 1.0039, 1.0039 * x, x.mul(1.004)),
                           [torch.tensor([100.0, 3.0, -7.0, 0.3, 1000.0, 4.5]).bfloat16()], False),
    "div_half_by_number": (lambda x: (x / 70000.0, x * 70000.0), [torch.tensor([100.0, 3.0, -7.0, 0.3]).half()],
                           False),
    # an int64 divided with a float16 0-dim tensor: torch converts it to float16 first (past its range: inf, so
    # the floor quotient is nan); the tpu converted it to float32 and got a finite quotient (inf as float16)
    "floordiv_int64_by_half": (lambda x, y: (x // y, torch.div(x, y, rounding_mode="trunc")),
                               [torch.tensor([2**63 - 1, -100, 7, -7]), torch.tensor(2.0, dtype=torch.float16)], False),
    # xlogy of float64 by a float16 tensor: the log was taken in float16
    "xlogy_double_half": (lambda x, y: torch.xlogy(x, y), [torch.tensor([1.0, 0.3, 3.0], dtype=torch.float64),
                                                            torch.tensor([0.3, 2.0, 7.1], dtype=torch.float16)], False),
    # heaviside of tensors of different dtypes: CPU refuses, torch's decomposition on the tpu computed
    "heaviside_dtypes": (lambda x, v: torch.heaviside(x, v), [t(0.0, 2.0, -1.0), t(1, 1, 1, dtype=torch.int16)],
                         True),
    # torch.unique keeps every NaN as a value of its own (numpy's unique merged them: counts and inverse off)
    "unique_nans": (lambda x: torch.unique(x, return_inverse=True, return_counts=True),
                    [torch.tensor([math.nan, 1.0, math.nan, -0.0, 0.0, 1.0])], False),
    # ... and has no complex kernel on CPU (the tpu sorted complex values)
    "unique_complex": (lambda x: torch.unique(x), [torch.tensor([1j, 1j, 2])], True),
    "unique_dim_complex": (lambda x: torch.unique(x, dim=0), [torch.tensor([1j, 1j, 2])], True),
    "unique_consecutive_complex": (lambda x: torch.unique_consecutive(x), [torch.tensor([1j, 1j, 2])], True),
    # xlogy with a Python number: CPU takes it in the result's dtype first (70000 is inf as a float16)
    "xlogy_half_number": (lambda x: torch.xlogy(x, 70000.0), [torch.tensor([1.0, 0.0, 3.0]).half()], False),
    "xlogy_bf16_number": (lambda x: torch.xlogy(x, 1.0039), [torch.tensor([1.0, 0.0, 3.0]).bfloat16()], False),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_found_values_match_cpu(name):
    fn, args, raises = REGRESSIONS[name]
    modes = ALL_MODES if name.startswith(("histc", "pow", "round", "nansum", "logcumsumexp", "mul", "xlogy",
                                          "clamp", "fill", "div_half", "floordiv", "heaviside")) else EAGER
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        D.check(fn, *args, modes=modes, expect_raise=raises, signed_zeros=True, atol=0, rtol=0)  # bit-exact

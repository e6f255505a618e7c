"""Special values (signed zeros, infinities, NaN, huge values) in programs built for a TPU, checked without a TPU.

On a TPU v5e (bench/probes/tpu_semantics_probe.py, bench/results/tpu/tpu_semantics_probe.json) XLA:TPU's results differ
from CPU's: its remainder is NaN for x over +-inf (C's fmod gives x) and +0.0 for -0.0 over y, so torch.fmod,
remainder and floor_divide by an infinity were NaN there (tests/ops/test_scalar_arguments.py caught it on the
chip); inf / y is NaN for |y| past 2**126; atan2 and hypot of huge operands are wrong (atan2(3e38, -3e38) pi,
hypot(3e38, 3e38) finite); sinh(-0.0) is +0.0. The lowerings are traced here as for a TPU and compared with CPU
torch; the remainder and the division also with XLA:TPU's behaviour put in place of XLA:CPU's."""
import itertools

import jax
import jax._src.lax.lax as lax_internal  # (jax.lax's functions are this module's: jnp's call them here)
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from torch_tpu.ops import elementary, elementwise
from torch_tpu.runtime import platform

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.5, 250.0, float("inf"), float("-inf"), float("nan"),
           1e-30, -1e-30, 3.0e38, -3.0e38, 1e20, -1e20]  # (no subnormals: a TPU has none)
DTYPES = {"float32": (torch.float32, jnp.float32), "bfloat16": (torch.bfloat16, jnp.bfloat16)}


def _pairs(dtype, max_quotient=float("inf")):
    """Every pair of SPECIAL values but those of a finite quotient past ``max_quotient`` or float32's range:
    CPU torch's own fmod is NaN for 3e38 over 0.5 in its vectorised loop and 0.0 in its scalar one."""
    pairs = [(x, y) for x, y in itertools.product(SPECIAL, SPECIAL)
             if not (np.isfinite(x) and np.isfinite(y) and y != 0 and abs(x / y) > min(max_quotient, 3.4e38))]
    xs, ys = zip(*pairs)
    return torch.tensor(xs, dtype=dtype), torch.tensor(ys, dtype=dtype)


@pytest.fixture(autouse=True)
def _on_the_host_cpu():
    """Every computation here on the host's CPU, on a TPU host too: these tests put XLA:TPU's behaviour in place of
    XLA:CPU's, which on the chip itself would be emulated twice (the chip's own results are what the tests of
    tests/ops/test_scalar_arguments.py and the probe check there)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _as_jax(t, jdtype):
    return jnp.asarray(t.float().numpy()).astype(jdtype)


def _for_tpu(fn, *args):
    with platform.Targeting("tpu"), platform.X64():
        return jax.jit(lambda *a: fn(*a))(*args)  # (a new function: traced again, never a cached trace)


@pytest.fixture
def as_on_a_tpu(monkeypatch):
    """Puts XLA:TPU's behaviour of a lax/jnp function in place of XLA:CPU's: ``as_on_a_tpu(module, name, fn)``.
    JAX's trace caches are cleared before and after, so that no trace holds the other behaviour (jnp's own
    functions are jitted and cached)."""
    def put(module, name, fn):
        monkeypatch.setattr(module, name, fn)
        jax.clear_caches()

    yield put
    monkeypatch.undo()
    jax.clear_caches()


def _flushed(t):
    """Subnormal values as zeros of their sign: a TPU has none (nor do XLA:CPU's results, where CPU torch's do)."""
    return torch.where(t.float().abs() < torch.finfo(torch.float32).tiny, t * 0, t)


def _assert_as_cpu(got, want, rtol=0.0):
    """Equal to CPU torch: NaN where it is NaN, the same infinities and zero signs, values within rtol."""
    got = _flushed(torch.from_numpy(np.array(got.astype(jnp.float32))).to(want.dtype))
    want = _flushed(want)
    torch.testing.assert_close(got, want, rtol=rtol, atol=0.0, equal_nan=True)
    zeros = want == 0
    assert torch.equal(got[zeros].signbit(), want[zeros].signbit()), "signs of zeros differ from CPU"


def _assert_floor_quotients_as_cpu(got, want, exact_below=2.0 ** 22):
    """floor_divide's results with XLA:TPU's division: exact below ``exact_below`` (the quotient of the exact
    x - fmod(x, y) by y, within 2 ulps, rounds to the integer it is), within 2 ulps beyond it."""
    got = torch.from_numpy(np.array(got.astype(jnp.float32))).to(want.dtype)
    inexact = want.float().abs() >= exact_below
    for part, rtol in ((inexact, 2 * 2.0 ** -23), (~inexact, 0.0)):
        _assert_as_cpu(jnp.asarray(got[part].float().numpy()), want[part], rtol=rtol)


def _tpu_rem(x, y):
    """XLA:TPU's remainder as the probe found it: x - trunc(x / y) * y (NaN over an infinity), zeros +0.0."""
    r = x - jnp.trunc(x / y) * y
    return jnp.where(r == 0, jnp.zeros_like(r), r)


_XLA_DIV = lax_internal.div


def _tpu_div(x, y):
    """XLA:TPU's division of floating operands as the probe found it: x times the divisor's reciprocal, flushed to
    zero past 2**126 (3e38 / 3e38 is 0, inf / 3e38 NaN); XLA's own for other dtypes."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    if not jnp.issubdtype(jnp.result_type(x, y), jnp.floating):
        return _XLA_DIV(x, y)
    recip = _XLA_DIV(jnp.ones_like(y), y)
    return x * jnp.where(jnp.abs(y) > 2.0 ** 126, jnp.copysign(jnp.zeros_like(recip), recip), recip)


def _emulate_tpu_division(as_on_a_tpu):
    """Every floating division traced from here on as XLA:TPU computes it (``/`` of arrays, jnp.true_divide and
    lax.div all reach ``lax.div``), with the remainder XLA:TPU builds from it."""
    for module in (jax.lax, lax_internal):
        as_on_a_tpu(module, "div", _tpu_div)
        as_on_a_tpu(module, "rem", _tpu_rem)


REM_OPS = {"fmod": (elementwise.fmod, torch.fmod), "remainder": (elementwise.remainder, torch.remainder),
           "floor_divide": (elementwise.floor_divide, torch.floor_divide)}


@pytest.mark.parametrize("tpu_arithmetic", [False, True], ids=["xla_cpu", "xla_tpu"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(REM_OPS))
def test_remainders_by_infinities_and_of_negative_zero_as_cpu(op, dtype, tpu_arithmetic, as_on_a_tpu):
    """Every pair of special values, huge ones too: floor_divide(3e38, 3e38) was 0 on the chip (its quotient's
    division by a reciprocal flushed to zero), CPU 1."""
    if tpu_arithmetic:
        _emulate_tpu_division(as_on_a_tpu)
    ours, theirs = REM_OPS[op]
    tdt, jdt = DTYPES[dtype]

    def check(got, want):
        if op == "floor_divide" and tpu_arithmetic:
            _assert_floor_quotients_as_cpu(got, want)
        else:
            _assert_as_cpu(got, want)

    limit = 3.4e38  # (float32's range: past it CPU torch's own fmod is NaN in its vectorised loop)
    x, y = _pairs(tdt, max_quotient=limit)
    check(_for_tpu(ours, _as_jax(x, jdt), _as_jax(y, jdt)), theirs(x, y))
    for scalar in (float("inf"), float("-inf"), 2.5, -0.5):  # a Scalar divisor, weakly typed as torch's
        x = torch.tensor([v for v in SPECIAL if not (np.isfinite(v) and abs(v / scalar) > limit)], dtype=tdt)
        check(_for_tpu(lambda a: ours(a, scalar), _as_jax(x, jdt)), theirs(x, scalar))


@pytest.mark.parametrize("op", list(REM_OPS))
def test_remainders_by_inexact_divisors_are_exact_for_a_tpu(op, as_on_a_tpu):
    """XLA:TPU's float32 remainder rounds (``x - trunc(x / y) * y``): on the chip fmod(993, 0.7) was 6e-5 off and
    285 of 288 ``int % 0.7`` results differed from CPU. For a TPU the lowerings compute it exactly
    (elementary._exact_rem); with XLA:TPU's rounding remainder emulated in place of XLA:CPU's they still equal
    CPU torch bit for bit, up to quotients of 2**40."""
    _emulate_tpu_division(as_on_a_tpu)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1e4, 1e4, 3000), rng.uniform(-1, 1, 500) * 2.0 ** 40,
                        rng.standard_normal(500) * 1e-30]).astype(np.float32)
    y = np.concatenate([rng.choice([0.7, 0.1, -3.3, 1e-3, 2.5e-7, 123.456, -0.3], 3000),
                        rng.choice([1.0, 0.7, -3.3], 500), rng.standard_normal(500) * 1e-33]).astype(np.float32)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    ours, theirs = REM_OPS[op]
    # (floor quotients: exact below 2**22, within the TPU's division's 2 ulps beyond)
    check = _assert_floor_quotients_as_cpu if op == "floor_divide" else _assert_as_cpu
    check(_for_tpu(ours, _as_jax(x, jnp.float32), _as_jax(y, jnp.float32)), theirs(x, y))
    for scalar in (0.7, -0.1):  # a Scalar divisor, and bfloat16 (computed in float32, rounded once)
        check(_for_tpu(lambda a: ours(a, scalar), _as_jax(x, jnp.float32)), theirs(x, scalar))
    xb = x[:3000].to(torch.bfloat16)
    _assert_as_cpu(_for_tpu(lambda a: ours(a, 0.7), _as_jax(xb, jnp.bfloat16)), theirs(xb, 0.7))


@pytest.mark.parametrize("tpu_divide", [False, True], ids=["xla_cpu_divide", "xla_tpu_divide"])
def test_truncated_division_as_cpu(tpu_divide, as_on_a_tpu):
    """trunc(x / y) as CPU torch: the quotient rounded correctly, then truncated. XLA:CPU divides by a broadcast
    scalar as a reciprocal's product, and a TPU divides so always: ``torch.div(x, 0.3, rounding_mode="trunc")``
    was off by one in 35 of 286 elements on the CPU platform (3 / 0.3 on the wrong side of 10). For a TPU (with its
    reciprocal division emulated) and for the CPU, bit for bit, quotients below 2**20 (beyond, a TPU's own
    division, within 2 ulps)."""
    import functools

    if tpu_divide:
        _emulate_tpu_division(as_on_a_tpu)
    rng = np.random.default_rng(1)
    x = np.concatenate([np.arange(-1000, 1000, 7), rng.uniform(-1e5, 1e5, 2000), rng.uniform(-1, 1, 500) * 1e-3,
                        rng.integers(-3000, 3000, 2000) * np.float32(0.1)]).astype(np.float32)
    ys = [0.3, -0.7, 0.1, 3.0, 1e-3, 0.5]
    y = np.resize(np.array(ys, np.float32), x.shape)
    keep = np.abs(x / y) < 2.0 ** 20
    x, y = torch.from_numpy(x[keep]), torch.from_numpy(y[keep])
    trunc = functools.partial(elementwise.div_mode, rounding_mode="trunc")
    build = _for_tpu if tpu_divide else (lambda fn, *a: jax.jit(fn)(*a))
    _assert_as_cpu(build(trunc, _as_jax(x, jnp.float32), _as_jax(y, jnp.float32)),
                   torch.div(x, y, rounding_mode="trunc"))
    for scalar in ys:  # a Scalar divisor: XLA:CPU's reciprocal rewrite applies to a broadcast one
        xs = x[(x / scalar).abs() < 2.0 ** 20]
        _assert_as_cpu(build(lambda a: trunc(a, scalar), _as_jax(xs, jnp.float32)),
                       torch.div(xs, scalar, rounding_mode="trunc"))
    xb = x[:2000].to(torch.bfloat16)
    _assert_as_cpu(build(lambda a: trunc(a, 0.3), _as_jax(xb, jnp.bfloat16)), torch.div(xb, 0.3, rounding_mode="trunc"))


def test_the_emulated_tpu_remainder_is_what_the_chip_gave():
    """The emulation above against the chip's results recorded by the probe (so the test stays honest)."""
    import json
    from pathlib import Path

    probe = json.loads((Path(__file__).parents[2] / "bench/results/tpu/tpu_semantics_probe.json").read_text())
    rows = [r for r in probe["differences"]["float32.rem"] if r["why"] != "subnormal"]
    assert rows, "the probe recorded no remainder difference"
    for r in rows:
        x, y = (np.float32(float(a)) for a in r["args"])
        x64, y64 = float(x), float(y)
        if any(abs(v) < 1.2e-38 and v != 0 for v in (x, y)) or (np.isfinite(y64) and y64 != 0 and abs(x64 / y64) > 2.0 ** 24):
            continue
        got = float(_tpu_rem(jnp.float32(x), jnp.float32(y)))
        chip = float(r["tpu"])
        assert (np.isnan(got) and np.isnan(chip)) or (got == chip and np.signbit(got) == np.signbit(chip)), r


@pytest.mark.parametrize("tpu_divide", [False, True], ids=["xla_cpu_divide", "xla_tpu_divide"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_division_by_huge_values_as_cpu(dtype, tpu_divide, as_on_a_tpu):
    """Every pair of special values: on the chip 3e38 / 3e38 was 0 and inf / 3e38 NaN (the reciprocal of a divisor
    past 2**126 flushed to zero). Quotients below float32's normal range compare as zeros (a TPU has none)."""
    if tpu_divide:
        _emulate_tpu_division(as_on_a_tpu)
    tdt, jdt = DTYPES[dtype]
    x, y = _pairs(tdt)
    # (x times 1 / y rounds twice: within 2 ulps)
    ulp = 2.0 ** -23 if dtype == "float32" else 2.0 ** -7
    _assert_as_cpu(_for_tpu(elementwise.div, _as_jax(x, jdt), _as_jax(y, jdt)), torch.div(x, y),
                   rtol=2 * ulp if tpu_divide else 0.0)
    trunc = _for_tpu(lambda a, b: elementwise.div_mode(a, b, rounding_mode="trunc"), _as_jax(x, jdt), _as_jax(y, jdt))
    _assert_as_cpu(trunc, torch.div(x, y, rounding_mode="trunc"), rtol=2 * ulp if tpu_divide else 0.0)
    if tpu_divide:  # the emulation gives the chip's results when the correction is off
        huge = jnp.float32(3e38)
        assert np.isnan(float(jax.jit(_tpu_div)(jnp.float32(np.inf), huge)))
        assert float(jax.jit(lambda a, b: a / b)(huge, huge)) == 0.0


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["atan2", "hypot"])
def test_atan2_and_hypot_of_huge_values_as_cpu(op, dtype):
    ours = {"atan2": elementary.arctan2, "hypot": elementary.hypot}[op]
    tdt, jdt = DTYPES[dtype]
    x, y = _pairs(tdt)
    got = _for_tpu(ours, _as_jax(x, jdt), _as_jax(y, jdt))
    _assert_as_cpu(got, getattr(torch, op)(x, y), rtol=1e-6 if dtype == "float32" else 1e-2)
    # the operands really were scaled: 3e38 and -3e38 at 3pi/4 and hypot's overflow to inf
    huge = jnp.asarray([3e38], jdt)
    want = {"atan2": 3 * np.pi / 4, "hypot": np.inf}[op]
    assert np.allclose(np.asarray(_for_tpu(ours, huge, -huge).astype(jnp.float32)), want, rtol=1e-2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sinh", "expm1"])
def test_sinh_and_expm1_keep_their_arguments_sign(op, dtype):
    tdt, jdt = DTYPES[dtype]
    x = torch.tensor(SPECIAL, dtype=tdt)
    lowering = elementwise._float_unary(getattr(elementary, op))
    got = _for_tpu(lambda a: lowering(a).astype(jdt), _as_jax(x, jdt))
    _assert_as_cpu(got, getattr(torch, op)(x), rtol=1e-6 if dtype == "float32" else 1e-2)


def test_complex_sinh_and_expm1_for_a_tpu():
    z = torch.tensor([-0.0 + 1j, 0.5 - 2j, -1 + 0j], dtype=torch.complex64)
    for op in ("sinh", "expm1"):
        got = _for_tpu(elementwise._float_unary(getattr(elementary, op)), jnp.asarray(z.numpy()))
        torch.testing.assert_close(torch.from_numpy(np.array(got)), getattr(torch, op)(z), rtol=1e-6, atol=1e-6)

"""The precise float32 functions used on TPUs (ops/precise_f32.py, chosen by ops/elementary.py): within a few
ulps of float64 on every platform, torch's special values, and the ops built from them equal CPU torch
when forced on here (TORCH_TPU_F32_MATH=precise). Their error on the chip itself is measured by
bench/probes/tpu_probe.py (bench/results/tpu/probe.json)."""
import jax
import numpy as np
import pytest
import torch

from torch_tpu.ops import precise_f32
from torch_tpu.runtime import platform

MIN_NORMAL = np.float32(1.1754944e-38)


def _sample(lo, hi, n=60_000, seed=0):
    rng = np.random.default_rng(seed)
    mags = np.exp(rng.uniform(np.log(1e-30), np.log(max(abs(lo), abs(hi))), n))
    x = np.concatenate([rng.uniform(lo, hi, n), mags if lo >= 0 else mags * rng.choice([-1, 1], n),
                        rng.uniform(max(lo, -4), min(hi, 4), n)])
    x = np.clip(x, lo, hi).astype(np.float32)
    return x[(x == 0) | (np.abs(x) >= MIN_NORMAL)]  # XLA treats subnormal operands as zero


def _max_ulps(got, ref):
    ref32 = ref.astype(np.float32)
    ok = np.isfinite(ref32) & ((ref32 == 0) | (np.abs(ref32) >= MIN_NORMAL))
    spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), 2.0 ** -149)
    with np.errstate(invalid="ignore"):  # (inf - inf where both are infinite: not counted)
        return float(np.max(np.where(ok, np.abs(got.astype(np.float64) - ref) / spacing, 0.0)))


UNARY = {"exp": (np.exp, -87, 88.7), "exp2": (np.exp2, -126, 127.9), "expm1": (np.expm1, -87, 88.7),
         "log": (np.log, 0, 3e38), "log2": (np.log2, 0, 3e38), "log10": (np.log10, 0, 3e38),
         "log1p": (np.log1p, -1, 3e38), "tanh": (np.tanh, -30, 30), "atanh": (np.arctanh, -1, 1),
         "sinh": (np.sinh, -89.4, 89.4), "cosh": (np.cosh, -89.4, 89.4),
         "asinh": (np.arcsinh, -3e38, 3e38), "acosh": (np.arccosh, 1, 3e38),
         "softplus": (lambda x: np.logaddexp(0, x), -100, 100),
         "log_sigmoid": (lambda x: -np.logaddexp(0, -x), -100, 100)}
SPECIAL_FUNCTIONS = ["lgamma", "digamma", "erfinv"]  # float32 tolerance: ulps mean little near their roots


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_within_a_few_ulps_of_float64(name):
    ref_fn, lo, hi = UNARY[name]
    x = _sample(lo, hi)
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
    got = np.asarray(jax.jit(precise_f32.FUNCTIONS[name])(x))
    assert _max_ulps(got, ref) <= 4, name


@pytest.mark.parametrize("name", SPECIAL_FUNCTIONS)
def test_special_functions_within_float32_tolerance(name):
    import scipy.special

    ref_fn = {"lgamma": scipy.special.gammaln, "digamma": scipy.special.psi, "erfinv": scipy.special.erfinv}[name]
    x = _sample(-1, 1) if name == "erfinv" else _sample(-30, 1e6)
    x = x[(x != np.floor(x)) | (x > 0)]  # (poles: checked with the special values)
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
    got = np.asarray(jax.jit(precise_f32.FUNCTIONS[name])(x)).astype(np.float64)
    ok = np.isfinite(ref)
    assert np.all(np.abs(got - ref)[ok] <= 1e-5 + 1e-5 * np.abs(ref[ok])), name


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_binary_within_tolerance(name):
    a = _sample(-100, 100)
    b = np.random.default_rng(1).permutation(a)
    ref = getattr(np, name)(a.astype(np.float64), b.astype(np.float64))
    got = np.asarray(jax.jit(precise_f32.FUNCTIONS[name])(a, b)).astype(np.float64)
    # ulps mean little where the result cancels to near 0: float32's relative tolerance, 1e-6 absolute
    assert np.all(np.abs(got - ref) <= 1e-6 + 2e-7 * np.abs(ref)), name


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf, np.nan, 1e30, -1e30, 3.4e38], np.float32)


@pytest.mark.parametrize("name", ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "atanh", "asinh", "acosh", "lgamma",
                                  "digamma", "erfinv", "sinh", "cosh"])
def test_special_values_as_cpu_torch(name):
    x = SPECIAL.clip(-1, 1) if name == "erfinv" else SPECIAL
    got = torch.from_numpy(np.array(jax.jit(precise_f32.FUNCTIONS[name])(x)))
    want = getattr(torch, name)(torch.from_numpy(x))
    torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=1e-6)
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()])), name  # -0.0


def test_log2_exact_at_powers_of_two():
    x = np.float32(2.0) ** np.arange(-126, 128, dtype=np.float32)
    assert np.array_equal(np.asarray(jax.jit(precise_f32.log2)(x)), np.arange(-126, 128, dtype=np.float32))


def test_log1p_tiny_and_huge_arguments():
    x = np.array([1e-30, -1e-20, 3e-8, 1e20, 3e38], np.float32)
    got = np.asarray(jax.jit(precise_f32.log1p)(x)).astype(np.float64)
    assert np.allclose(got, np.log1p(x.astype(np.float64)), rtol=3e-7, atol=0)


@pytest.fixture
def precise_everywhere(monkeypatch, fresh_programs):
    monkeypatch.setenv("TORCH_TPU_F32_MATH", "precise")


OPS = [torch.exp, torch.exp2, torch.expm1, lambda x: torch.sinh(x / 2), lambda x: torch.nn.functional.elu(x),
       lambda x: torch.sin(100 * torch.exp(-x.abs() / 2)),  # a timestep embedding's angles (~1000 rad: 1e-4)
       torch.log, torch.log2, torch.log10, torch.log1p, torch.tanh, torch.asinh, torch.special.log_ndtr,
       torch.lgamma, torch.digamma, lambda x: torch.erfinv(x.clamp(-0.999, 0.999) * 0.999),
       lambda x: torch.acosh(1 + x.abs()), lambda x: torch.atanh(x.clamp(-0.99, 0.99)),
       torch.nn.functional.softplus, torch.nn.functional.logsigmoid, torch.nn.functional.mish,
       lambda x: torch.nn.functional.gelu(x, approximate="tanh"), lambda x: torch.log_softmax(x, -1),
       lambda x: torch.logsumexp(x, -1), lambda x: torch.logaddexp(x, x.flip(-1)),
       lambda x: torch.logcumsumexp(x, 0), lambda x: torch.logcumsumexp(x.masked_fill(x < -1, -float("inf")), 1),
       lambda x: torch.nn.functional.cross_entropy(x, torch.arange(x.shape[0], device=x.device) % x.shape[1]),
       lambda x: torch.sin(x * 100), lambda x: torch.cos(x * 100), lambda x: torch.tan(x * 100),
       lambda x: torch.special.spherical_bessel_j0(x * 100),
       lambda x: torch.polar(x.abs(), x * 100).real, lambda x: torch.polar(x.abs(), x * 100).imag]  # (up to ~1000 radians: timestep embeddings)


def test_ops_equal_cpu_torch_with_the_precise_functions(precise_everywhere):
    """What a TPU computes for these ops, computed here: CPU torch's values at float32's tolerance."""
    x = torch.linspace(-6, 6, 97 * 8).reshape(97, 8) ** 3 / 20
    positive = x.abs() + 1e-3
    for i, op in enumerate(OPS):
        for arg in (x, positive):
            with np.errstate(all="ignore"):
                want = op(arg)
            got = op(arg.to("tpu")).cpu()
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, equal_nan=True,
                                       msg=lambda m, i=i: f"OPS[{i}]: {m}")
    assert platform.target() == platform.platform()  # (forced by the setting, not by a TPU target)


def test_reductions_over_an_empty_axis_with_the_precise_functions(precise_everywhere):
    """log_softmax and logsumexp over an axis of length 0 (an empty batch): CPU torch gives empty results and
    -inf; the precise forms (a TPU's) failed to build their program there ("zero-size array to reduction
    operation max"), in every mode."""
    x = torch.zeros(0, 4)
    for op in (lambda t: torch.log_softmax(t, 0), lambda t: torch.log_softmax(t, 1),
               lambda t: torch.softmax(t, 0), lambda t: torch.logsumexp(t, 0), lambda t: torch.logsumexp(t, 1)):
        torch.testing.assert_close(op(x.to("tpu")).cpu(), op(x))


@pytest.mark.parametrize("op,prim", [(torch.ops.aten.tanh.default, "tanh"), (torch.ops.aten.exp.default, "exp"),
                                     (torch.ops.aten.log1p.default, "log1p")])
def test_ops_with_bfloat16_results_take_xlas_functions(precise_everywhere, op, prim):
    """An op whose results are bfloat16 computes in float32 with XLA's own function (its error vanishes in the
    rounding to 8 bits; the precise ones cost vector time a TPU matmul prologue repeats); float16 and float32
    results take the precise one."""
    import jax.numpy as jnp

    from torch_tpu import ops
    from torch_tpu.ops import calling, registry

    ops.load()
    low = registry.lookup(op)

    def primitives(x, result_dtype):
        meta = torch.empty(x.shape, dtype=result_dtype, device="meta")
        jaxpr = jax.make_jaxpr(lambda a: calling.invoke(low, [a], {}, results=[meta]))(x)
        return {e.primitive.name for e in jaxpr.jaxpr.eqns}

    assert prim in primitives(jnp.ones(8, jnp.bfloat16), torch.bfloat16)
    assert prim not in primitives(jnp.ones(8, jnp.float16), torch.float16)
    assert prim not in primitives(jnp.ones(8, jnp.float32), torch.float32)


HALF_OPS = [torch.tanh, torch.exp, lambda x: torch.expm1(x / 8), lambda x: torch.log1p(x.abs()),
            lambda x: torch.nn.functional.gelu(x, approximate="tanh"), torch.nn.functional.mish,
            torch.nn.functional.softplus, torch.nn.functional.logsigmoid]


def test_half_results_of_precise_ops_equal_cpu_torch(precise_everywhere):
    """The same ops on bfloat16 and float16 tensors, eager and in a compiled graph: CPU torch's values at the
    half type's tolerance."""
    x = torch.linspace(-6, 6, 97 * 8).reshape(97, 8) ** 3 / 20
    for i, op in enumerate(HALF_OPS):
        torch.compiler.reset()  # (builtins compile through one wrapper frame: one op at a time)
        compiled = torch.compile(op, backend="tpu", fullgraph=True)
        for dtype in (torch.bfloat16, torch.float16):
            want = op(x.to(dtype))
            for fn in (op, compiled):
                torch.testing.assert_close(fn(x.to(dtype).to("tpu")).cpu(), want, equal_nan=True,
                                           msg=lambda m, i=i, d=dtype: f"HALF_OPS[{i}] {d}: {m}")


def test_bfloat16_tanh_gelu_does_not_cancel(precise_everywhere):
    """tanh-GELU with bfloat16 results takes x * sigmoid(2u): with the target's coarse tanh (~1e-4 off on a TPU)
    0.5 x (1 + tanh(u)) cancels in the negative tail (4.8e-5 off CPU torch there on the chip); float32 keeps
    the precise tanh."""
    import jax.numpy as jnp

    from torch_tpu import ops
    from torch_tpu.ops import calling, registry

    ops.load()
    low = registry.lookup(torch.ops.aten.gelu.default)

    def primitives(x, result_dtype):
        meta = torch.empty(x.shape, dtype=result_dtype, device="meta")
        jaxpr = jax.make_jaxpr(lambda a: calling.invoke(low, [a], {"approximate": "tanh"}, results=[meta]))(x)
        return {e.primitive.name for e in jaxpr.jaxpr.eqns}

    bf16 = primitives(jnp.ones(8, jnp.bfloat16), torch.bfloat16)
    assert "logistic" in bf16 and "tanh" not in bf16
    f32 = primitives(jnp.ones(8, jnp.float32), torch.float32)
    assert "logistic" not in f32 and "tanh" not in f32  # (the precise tanh: exact reduction, polynomial)


def _primitives(jaxpr) -> set:
    """Every primitive of a jaxpr, inner jaxprs (pjit, custom_jvp ...) included."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for inner in value if isinstance(value, (list, tuple)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    names |= _primitives(inner)
    return names


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_a_graphs_gelu_between_matmuls_follows_its_results_dtype(precise_everywhere, dtype):
    """Where the choice mattered (a feed-forward: linear, tanh-GELU, linear, one compiled graph): the GELU of a
    bfloat16 graph takes x * sigmoid(2u) with XLA's functions, a float32 one the precise tanh; both compute
    CPU torch's values."""
    import torch_tpu

    torch.manual_seed(0)
    ff = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(32, 8))
    ff = ff.to(dtype)
    x = torch.randn(4, 8).to(dtype)
    params, fn = torch_tpu.extract_jax(ff)
    xj = torch_tpu.to_jax(x.to("tpu"))
    found = _primitives(jax.make_jaxpr(fn)(params, xj).jaxpr)
    assert ("logistic" in found) == (dtype == torch.bfloat16), found
    assert "tanh" not in found
    with torch.no_grad():
        want = ff(x)
    torch.testing.assert_close(torch.from_numpy(np.asarray(fn(params, xj).astype(np.float32))).to(dtype), want)


_DERIVATIVE_REFERENCES = {
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10",
    "log1p": "log1p", "tanh": "tanh", "atanh": "arctanh", "asinh": "arcsinh", "acosh": "arccosh", "sinh": "sinh",
    "cosh": "cosh",
    "logaddexp": "logaddexp", "logaddexp2": "logaddexp2"}


def _reference(name):
    import jax.numpy as jnp

    if name in _DERIVATIVE_REFERENCES:
        return getattr(jnp, _DERIVATIVE_REFERENCES[name])
    return {"softplus": jax.nn.softplus, "log_sigmoid": jax.nn.log_sigmoid, "lgamma": jax.scipy.special.gammaln,
            "digamma": jax.scipy.special.digamma, "erfinv": jax.scipy.special.erfinv}[name]


@pytest.mark.parametrize("name", list(precise_f32.FUNCTIONS))
def test_first_and_second_derivatives_match_float64(name):
    """JAX's differentiation of these functions was wrong (the exponent read from the bits has no derivative:
    d log(x)/dx was 1/(m x) for the mantissa m alone, 0.71 off), and on a TPU the lowerings use them: softplus,
    mish and log_sigmoid's backward (VJPs of the forward) and torch.func's jvp/hessian through them were wrong
    there. Every function now carries its derivative; first and second derivatives within float32's tolerance
    of float64's."""
    import jax.numpy as jnp

    x = np.linspace(-4, 4, 41, dtype=np.float32)
    domain = {"log": np.abs(x) + 0.1, "log2": np.abs(x) + 0.1, "log10": np.abs(x) + 0.1, "log1p": np.abs(x) - 0.5,
              "lgamma": np.abs(x) + 0.1, "digamma": np.abs(x) + 0.1, "atanh": x / 4.5, "erfinv": x / 4.5,
              "acosh": np.abs(x) + 1.1}.get(name, x)
    fn, ref = precise_f32.FUNCTIONS[name], _reference(name)
    args = (domain, domain[::-1].copy()) if name.startswith("logaddexp") else (domain,)
    wide = tuple(a.astype(np.float64) for a in args)
    with platform.X64():
        for order in (1, 2):
            got, want = fn, ref
            for _ in range(order):
                got, want = jax.grad(got), jax.grad(want)
            got_v = np.asarray(jax.vmap(got)(*args), np.float64)
            want_v = np.asarray(jax.vmap(want)(*wide))
            assert np.allclose(got_v, want_v, rtol=2e-5, atol=2e-5), (name, order, np.max(np.abs(got_v - want_v)))

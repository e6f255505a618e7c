"""64-bit floats and complex128 in programs built for a TPU, checked without a TPU.

On a TPU v5e (bench/probes/tpu_dtype_probe.py, bench/results/tpu/tpu_dtype_probe.json):
- XLA:TPU's LU (the LuDecomposition custom call) takes float32 and complex64 only, so torch.linalg.det, slogdet,
  solve, inv, lu_factor, lu and matrix_exp of float64 failed to compile; their LU for a TPU is now ours
  (ops/linalg.py), traced here as for a TPU and run against CPU torch;
- complex128 made XLA:TPU's compiler abort the whole process (converts, selects, exp/abs, decompositions) or
  refuse it (FFT): a program holding complex128 is refused before XLA:TPU compiles it, with an error naming the
  op, both by the TPU lowering check (how CI finds one) and on a TPU itself."""
import jax
import numpy as np
import pytest
import torch

import torch_tpu
from torch_tpu.ops import linalg as linalg_lowering
from torch_tpu.runtime import platform, program_cache, tpu_lowering


def _for_tpu(fn, *args):
    """``fn`` traced as for a TPU and run here, and the module it lowers to for a TPU."""
    with platform.Targeting("tpu"), platform.X64():
        out = jax.jit(fn)(*args)
        specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
        text = jax.export.export(jax.jit(fn), platforms=("tpu",))(*specs).mlir_module()
    return out, text


def _matrix(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float64)
    return torch.complex(a, torch.randn(shape, generator=g, dtype=torch.float64)) if dtype.is_complex else a


LU_CASES = {"square": (5, 5), "batched-wide": (3, 4, 6), "tall": (6, 3), "singular": "singular", "zero": "zero",
            "one": (1, 1)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("case", list(LU_CASES), ids=list(LU_CASES))
def test_64_bit_lu_for_a_tpu_is_not_xlas_and_matches_cpu(case, dtype):
    shape = LU_CASES[case]
    if case == "singular":  # a zero column: a zero pivot, LAPACK's info, the elimination going on past it
        a = _matrix((4, 4), dtype)
        a[:, 1] = 0
    elif case == "zero":
        a = torch.zeros(3, 3, dtype=dtype)
    else:
        a = _matrix(shape, dtype)
    if dtype == torch.complex128 and platform.platform() == "tpu":
        # on a TPU itself complex128 is refused before XLA:TPU compiles it (running it aborted the process)
        with pytest.raises(tpu_lowering.TpuLoweringError, match="complex128"):
            tpu_lowering.check(linalg_lowering._lu, (a.numpy(),), "complex128 lu")
        return
    (lu, piv, _, info), text = _for_tpu(linalg_lowering._lu, a.numpy())
    assert "LuDecomposition" not in text
    want_lu, want_piv, want_info = torch.linalg.lu_factor_ex(a)
    torch.testing.assert_close(torch.from_numpy(np.array(lu)), want_lu, atol=1e-13, rtol=1e-13)
    assert np.array_equal(np.array(piv), want_piv.numpy()) and np.array_equal(np.array(info), want_info.numpy())


def test_32_bit_lu_for_a_tpu_stays_xlas():
    _, text = _for_tpu(linalg_lowering._lu, np.eye(3, dtype=np.float32))
    assert "LuDecomposition" in text


OPS_ON_LU = {  # torch op, its lowering, operands
    "det": (torch.linalg.det, lambda a: linalg_lowering.linalg_det(a)[0], 1),
    "slogdet": (lambda a: torch.linalg.slogdet(a)[1], lambda a: linalg_lowering.linalg_slogdet(a)[1], 1),
    "solve": (torch.linalg.solve, lambda a, b: linalg_lowering.linalg_solve_ex(a, b)[0], 2),
    "inv": (torch.linalg.inv, lambda a: linalg_lowering.linalg_inv_ex(a)[0], 1),
    "matrix_exp": (torch.linalg.matrix_exp, linalg_lowering.matrix_exp, 1),
}


@pytest.mark.parametrize("op", list(OPS_ON_LU), ids=list(OPS_ON_LU))
def test_float64_ops_on_lu_lower_for_a_tpu_and_match_cpu(op):
    torch_fn, lowering, arity = OPS_ON_LU[op]
    operands = [_matrix((2, 4, 4), torch.float64, seed=i) for i in range(arity)]
    got, text = _for_tpu(lowering, *[o.numpy() for o in operands])
    tpu_lowering.refuse_uncompilable(text, op)  # no LU XLA:TPU lacks
    torch.testing.assert_close(torch.from_numpy(np.array(got)), torch_fn(*operands), atol=1e-11, rtol=1e-11)


def test_float64_matrix_exp_of_zero_for_a_tpu_is_the_identity(monkeypatch):
    """On the chip torch.nn.utils.parametrizations.orthogonal of a float64 Linear was NaN in both eager modes: its
    first call is matrix_exp of a zero matrix, whose number of squarings JAX takes from log2 of the norm. Here
    log2 gives NaN at zero (what a float64 log of 0 giving NaN on the chip would do): exp(0) is still I, and
    nonzero matrices are untouched."""
    import jax.numpy as jnp
    from jax._src.scipy import linalg as jax_scipy_linalg  # (its expm's own numpy module, which it calls)

    real_log2 = jnp.log2
    monkeypatch.setattr(jax_scipy_linalg.jnp, "log2", lambda v: jnp.where(v == 0, jnp.nan, real_log2(v)))
    jax.clear_caches()
    try:
        for a in (torch.zeros(2, 4, 4, dtype=torch.float64), _matrix((2, 4, 4), torch.float64)):
            got, _ = _for_tpu(linalg_lowering.matrix_exp, a.numpy())
            torch.testing.assert_close(torch.from_numpy(np.array(got)), torch.linalg.matrix_exp(a), atol=1e-11,
                                       rtol=1e-11)
        torch.manual_seed(0)
        m = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(4, 4, dtype=torch.float64))
        x = _matrix((3, 4), torch.float64)
        want = m(x)
        with platform.Targeting("tpu"), torch.no_grad():
            got = m.to("tpu")(x.to("tpu")).cpu()
        torch.testing.assert_close(got, want)
    finally:
        monkeypatch.undo()
        jax.clear_caches()


def test_float64_frexp_for_a_tpu_shifts_no_64_bit_word():
    """jnp.frexp of float64 shifts the float's 64 bits, which XLA:TPU does not compile (the lowering check found it
    in torch.frexp): for a TPU the exponent comes from the high 32-bit word. CPU torch's results, normal values
    across float64's range (subnormals are zeros on a TPU)."""
    from torch_tpu.ops import special

    x = torch.tensor([0.0, -0.0, 1.0, -3.5, 0.75, 1e300, -1e-300, 2.0 ** -1022, 1.7976931348623157e308,
                      float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
    x = torch.cat([x, _matrix((50,), torch.float64) * 10.0 ** torch.arange(-150, 150, 6, dtype=torch.float64)])
    (mantissa, exponent), text = _for_tpu(special.frexp, x.numpy())
    tpu_lowering.refuse_uncompilable(text, "frexp")
    want_m, want_e = torch.frexp(x)
    torch.testing.assert_close(torch.from_numpy(np.array(mantissa)), want_m, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.from_numpy(np.array(exponent)), want_e)


def test_lowering_check_refuses_a_64_bit_lu_and_complex128():
    platform.jax()
    lu = lambda a: jax.lax.linalg.lu(a)  # noqa: E731
    for dtype, what in ((np.float64, "LuDecomposition"), (np.complex128, "complex128")):
        with pytest.raises(tpu_lowering.TpuLoweringError, match=what):
            tpu_lowering.check(lu, (jax.ShapeDtypeStruct((4, 4), dtype),), f"{dtype.__name__} lu")
    tpu_lowering.check(lu, (jax.ShapeDtypeStruct((4, 4), np.float32),), "float32 lu")
    exp = lambda a: jax.numpy.exp(a)  # noqa: E731
    with pytest.raises(tpu_lowering.TpuLoweringError, match="complex128.*use complex64"):
        tpu_lowering.check(exp, (jax.ShapeDtypeStruct((3,), np.complex128),), "complex128 exp")
    tpu_lowering.check(exp, (jax.ShapeDtypeStruct((3,), np.complex64),), "complex64 exp")
    tpu_lowering.check(exp, (jax.ShapeDtypeStruct((3,), np.float64),), "float64 exp")


def test_complex128_on_the_device_is_refused_by_the_check_naming_the_op(monkeypatch, fresh_programs):
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    z = torch.complex(torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            # (fused: the graph's error, naming the op that failed and where it was created)
            with pytest.raises(RuntimeError, match=r"aten\.exp.*XLA:TPU is known to fail on it.*complex128"):
                torch.exp(z.to("tpu")).cpu()
            torch.testing.assert_close(torch.exp(z.to(torch.complex64).to("tpu")).cpu(),
                                       torch.exp(z.to(torch.complex64)))


def test_on_a_tpu_complex128_is_refused_before_xla_compiles(monkeypatch, fresh_programs):
    """On a TPU, every program XLA is about to compile is scanned first (the check's last step): complex128
    is an error naming the op, not the process aborting inside XLA:TPU. Here the platform is made to say
    'tpu' for that step only (the program itself is this platform's)."""
    compiled = []
    real_compile = program_cache._compile_and_keep
    monkeypatch.setattr(program_cache, "_compile_and_keep", lambda lowered, done: compiled.append(done[5]) or
                        real_compile(lowered, done))
    monkeypatch.setattr(program_cache.platform, "platform", lambda: "tpu")
    z = torch.complex(torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))
    with pytest.raises(tpu_lowering.TpuLoweringError, match=r"aten\.exp.*XLA:TPU is known to fail on it.*complex128"):
        torch.exp(z.to("tpu")).cpu()
    assert not any("exp" in name for name in compiled)
    x = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(torch.exp(x.to("tpu")).cpu(), torch.exp(x))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.float32, torch.bfloat16, torch.int64],
                         ids=["complex64", "float32", "bfloat16", "int64"])
def test_a_complex_scalar_with_narrower_tensors_holds_no_complex128(monkeypatch, fresh_programs, dtype):
    """A Python complex Scalar reached strict mode's programs as JAX's complex128 (a dynamic input), so
    ``z * 1j`` of a complex64 ``z`` held complex128 and is refused for a TPU. Where the result is complex64
    anyway (no float64/complex128 tensor, float32 default dtype) the Scalar is a complex64 input: CPU's
    values, in every mode, under the TPU lowering check; a float64 tensor's product keeps its precision
    (complex128, refused for a TPU)."""
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    x = torch.arange(-3, 5).to(dtype) if dtype == torch.int64 else (torch.randn(8) * 3).to(dtype)
    calls = [lambda t: t * (1 / 3 + 1j), lambda t: t + (2.1 - 3j), lambda t: (1 + 1j) - t,
             lambda t: torch.add(t.to(torch.complex64), t.to(torch.complex64), alpha=0.5 - 1j)]
    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            for call in calls:
                want, got = call(x), call(x.to("tpu")).cpu()
                assert got.dtype == want.dtype == torch.complex64
                torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(tpu_lowering.TpuLoweringError, match="complex128"):
        (torch.randn(3, dtype=torch.float64).to("tpu") * (1 / 3 + 1j)).cpu()


def test_a_0d_complex128_cpu_tensor_beside_narrower_tensors_holds_no_complex128(monkeypatch, fresh_programs):
    """Autograd's wrapped numbers are 0-d complex128 CPU tensors (``fft(x * 1j)``'s backward multiplies by
    one); beside a tensor with dimensions they promote to complex64 only, so they reach the program as
    complex64: CPU's values and dtypes in both eager modes under the TPU lowering check, FFT gradients
    included. Beside a float64 tensor the result is complex128, refused for a TPU."""
    monkeypatch.setenv("TORCH_TPU_CHECK_LOWERING", "tpu")
    c = torch.tensor(1 / 3 + 1j, dtype=torch.complex128)
    z, f = torch.randn(6, dtype=torch.complex64), torch.randn(6)

    def fft_grad(x):
        x = x.clone().requires_grad_()
        (torch.fft.rfft(x).abs().sum() + torch.fft.fft(x * 1j).real.sum()).backward()
        return x.grad

    for mode in (torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.tpu.set_eager_mode(mode):
            for call, x in ((lambda t: t * c, z), (lambda t: t * c, f), (lambda t: torch.add(c, t), z),
                            (fft_grad, f)):
                want, got = call(x), call(x.to("tpu")).cpu()
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want)
    with pytest.raises(tpu_lowering.TpuLoweringError, match="complex128"):
        (torch.randn(3, dtype=torch.float64).to("tpu") * c).cpu()


def test_a_complex_scalar_beside_complex128_tensors_in_a_list_keeps_its_precision(fresh_programs):
    """A foreach op's tensors come in a list, which the test for a complex64 Scalar looks into
    (``arguments._tensors``): beside complex128 tensors the Scalar keeps complex128's precision (a complex64
    one would round the products). (The foreach op runs as one ``mul`` per tensor today, each with its tensor
    at the top level; this guards the list case should it become one program.)"""
    xs = [torch.randn(3, dtype=torch.complex128) for _ in range(2)]
    s = 1 / 3 + 1j / 7
    if platform.platform() == "tpu":  # complex128 is refused there
        with pytest.raises(tpu_lowering.TpuLoweringError, match="complex128"):
            torch._foreach_mul([x.to("tpu") for x in xs], s)[0].cpu()
        return
    got = [t.cpu() for t in torch._foreach_mul([x.to("tpu") for x in xs], s)]
    for g, want in zip(got, torch._foreach_mul(xs, s)):
        assert g.dtype == torch.complex128
        torch.testing.assert_close(g, want, rtol=1e-15, atol=0)

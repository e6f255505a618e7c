"""torch.linalg on the tpu device, in strict, fused and compiled mode, against CPU torch.

Every op raised NotImplementedError (no lowering), and compiled ``linalg.inv`` failed with "unexpected call
with_effects in the aten graph" (AOTAutograd threads an effect token through ``_linalg_check_errors``).
The saved factors are compared too where torch's backward reads them (``_linalg_det``'s LU and pivots:
the gradients below), singular and non-positive-definite inputs must raise as on the CPU (``info``), and
non-square inputs must raise torch's error.
"""
import warnings

import pytest
import torch

from tests.harness import differential as D
from tests.harness.inputs import per_device, rand
from tests.harness.isolated import assert_isolated_ok, run_isolated

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("watchdog"),
              pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")]

ALL = ["strict", "fused", "compiled"]
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 2e-4, torch.float64: 1e-9}


def _square(*batch, n=4, seed=0, dtype=torch.float64):
    """Well-conditioned square matrices (a random matrix plus n on the diagonal)."""
    return (rand(*batch, n, n, seed=seed, low=-1, high=1).double() + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def _spd(*batch, n=4, seed=0, dtype=torch.float64):
    a = rand(*batch, n, n, seed=seed, low=-1, high=1).double()
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def _lu_family(a, b):
    lu, piv = torch.linalg.lu_factor(a)
    return [*torch.ops.aten._linalg_det(a), *torch.ops.aten._linalg_slogdet(a), *torch.linalg.inv_ex(a),
            *torch.ops.aten._linalg_solve_ex(a, b), torch.linalg.solve(a, b[..., 0]),
            torch.linalg.solve(a, b.mT, left=False), lu, piv, *torch.linalg.lu(a),
            torch.linalg.lu_solve(lu, piv, b, adjoint=True), torch.linalg.lu_solve(lu, piv, b.mT, left=False),
            *torch.lu_unpack(lu, piv), *torch.ops.aten._linalg_det(a.mT)]


def _triangular_family(s, b):
    low = torch.linalg.cholesky(s)
    return [low, torch.linalg.cholesky(s, upper=True), *torch.linalg.cholesky_ex(s),
            torch.cholesky_solve(b, low), torch.cholesky_solve(b, low.mT, upper=True),
            torch.linalg.solve_triangular(low, b, upper=False),
            torch.linalg.solve_triangular(low.mT, b.mT, upper=True, left=False, unitriangular=True),
            *torch.triangular_solve(b, low, upper=False, transpose=True)]


def _spectral_family(s, r):
    w, v = torch.linalg.eigh(s)
    wu, vu = torch.linalg.eigh(s.triu(), UPLO="U")
    u, sv, vh = torch.linalg.svd(r, full_matrices=False)
    q, rr = torch.linalg.qr(r)
    qc, rc = torch.linalg.qr(r, mode="complete")
    tau = torch.linspace(0.5, 1.5, r.shape[-1], dtype=r.dtype, device=r.device).expand(*r.shape[:-2], r.shape[-1])
    # eigenvectors and singular vectors are defined up to sign: compared through sign-free forms
    return [w, v.abs(), (v * w[..., None, :]) @ v.mT, wu, vu.abs(), torch.linalg.eigvalsh(s),
            sv, (u * sv[..., None, :]) @ vh, u.abs(), vh.abs(), torch.linalg.svdvals(r),
            torch.linalg.svd(r)[1], q, rr, qc, rc, torch.linalg.qr(r, mode="r")[1],
            torch.linalg.pinv(r), torch.linalg.pinv(s, hermitian=True), torch.linalg.matrix_rank(r),
            torch.linalg.householder_product(r, tau)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lu_family(dtype):
    D.check(_lu_family, _square(2, 3, dtype=dtype), rand(2, 3, 4, 2, seed=5).to(dtype), modes=ALL,
            atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triangular_family(dtype):
    D.check(_triangular_family, _spd(3, dtype=dtype), rand(3, 4, 2, seed=5).to(dtype), modes=ALL,
            atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_spectral_family(dtype):
    D.check(_spectral_family, _spd(2, dtype=dtype), rand(2, 5, 3, seed=5, low=-1, high=1).to(dtype),
            modes=ALL, atol=TOL[dtype], rtol=TOL[dtype])


def test_rectangular_lu():
    r = rand(2, 5, 3, seed=7).double()
    D.check(lambda r: [*torch.linalg.lu_factor(r), *torch.linalg.lu(r), *torch.linalg.lu(r.mT),
                       *torch.linalg.lu_factor(r.mT)], r, modes=ALL)


# ---------------------------------------------------------------------------------------------------
# gradients (torch's formulas read the saved LU and pivots, the factors, the eigen/singular vectors)


def _grads(a, s, b):
    if a.dtype == torch.float32:  # the float64 case below covers every op; float32: the common ones
        outs = [torch.linalg.det(a), torch.linalg.inv(a), torch.linalg.solve(a, b), torch.linalg.cholesky(s),
                torch.linalg.eigvalsh(s), torch.linalg.svdvals(a)]
        return _weighted_grads(outs, (a, s, b))
    outs = [torch.linalg.det(a), torch.linalg.slogdet(a)[1], torch.linalg.inv(a), torch.linalg.solve(a, b),
            torch.linalg.det(a.mT), torch.linalg.slogdet(a.mT)[1], torch.linalg.solve(a.mT, b[..., 0]),
            torch.linalg.cholesky(s), torch.linalg.eigvalsh(s), torch.linalg.eigh(s)[0], torch.linalg.svdvals(a),
            torch.linalg.lu_factor(a)[0], torch.linalg.qr(a)[1], torch.linalg.pinv(a)]
    return _weighted_grads(outs, (a, s, b))


def _weighted_grads(outs, inputs):
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).reshape(o.shape)).sum()
               for o in outs)
    return list(torch.autograd.grad(loss, inputs))


def _grad_leaf(t):
    return per_device(lambda d: t.clone().to(d).requires_grad_())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients(dtype):
    D.check(_grads, _grad_leaf(_square(2, dtype=dtype)), _grad_leaf(_spd(2, seed=3, dtype=dtype)),
            _grad_leaf(rand(2, 4, 3, seed=5).to(dtype)), modes=ALL, atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10)


def test_gradient_of_strided_det():
    """A non-contiguous real A: torch keeps LU(A), not LU(A^T), and its backward solves with adjoint=True."""
    base = rand(2, 4, 8, seed=2).double() + torch.eye(4, 8, dtype=torch.float64) * 4

    def fn(x):
        a = x[..., ::2]
        return list(torch.autograd.grad(torch.linalg.det(a).sum() + torch.linalg.slogdet(a)[1].sum(), x))

    D.check(fn, _grad_leaf(base), modes=ALL)


# ---------------------------------------------------------------------------------------------------
# singular, not positive-definite, not square: raise as on the CPU (info), or return info as the CPU does

SINGULAR = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], dtype=torch.float64)
# singular in every elimination order: CPU torch's det/slogdet of SINGULAR round to -6.7e-16 (sign -1) or to 0
# by the LAPACK kernels the CPU has (while its lu_factor_ex finds the zero pivot)
ZERO_ROW = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]], dtype=torch.float64)
NOT_PD = torch.stack([torch.eye(3, dtype=torch.float64),
                      torch.tensor([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)])

RAISING = {
    "inv_singular": (torch.linalg.inv, SINGULAR),
    "solve_singular": (lambda a: torch.linalg.solve(a, a[..., :1]), SINGULAR),
    "lu_factor_singular": (lambda a: torch.linalg.lu_factor(a)[0], SINGULAR),
    "inv_batched_singular": (torch.linalg.inv, torch.stack([torch.eye(3, dtype=torch.float64), SINGULAR])),
    "cholesky_not_pd": (torch.linalg.cholesky, NOT_PD),
    "cholesky_f32_not_pd": (torch.linalg.cholesky, NOT_PD.float()),
    "inv_not_square": (torch.linalg.inv, torch.ones(2, 3)),
    "det_not_square": (torch.linalg.det, torch.ones(2, 3)),
    "slogdet_not_square": (torch.linalg.slogdet, torch.ones(4, 2, 3)),
    "cholesky_not_square": (torch.linalg.cholesky, torch.ones(2, 3)),
    "solve_not_square": (torch.linalg.solve, torch.ones(2, 3), torch.ones(2, 1)),
    "eigh_not_square": (torch.linalg.eigh, torch.ones(2, 3)),
    "deprecated_cholesky_not_pd": (torch.cholesky, NOT_PD),
    "deprecated_cholesky_half": (torch.cholesky, torch.eye(3, dtype=torch.float16)),
}


@pytest.mark.parametrize("name", list(RAISING))
def test_raises(name):
    fn, *args = RAISING[name]
    D.check_raises(fn, *[a.clone() for a in args], modes=ALL)


def test_deprecated_cholesky():
    """``torch.cholesky`` (deprecated, not a linalg composite) and ``cholesky_inverse`` had no lowering."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation warning
        D.check(lambda a: [torch.cholesky(a), torch.cholesky(a, upper=True), torch.cholesky_inverse(torch.cholesky(a)),
                           torch.cholesky_inverse(torch.cholesky(a, upper=True), upper=True),
                           torch.cholesky(a, out=torch.empty(0, dtype=a.dtype, device=a.device))],
                _spd(2, dtype=torch.float32), modes=ALL)


def test_info_without_raising():
    """``*_ex`` ops return LAPACK's info (the first zero pivot, the first minor that is not positive
    definite) and the values of a singular det/slogdet (0, and sign 0 with -inf) as the CPU does."""
    def fn(a, p):
        return [torch.linalg.inv_ex(a)[1], torch.linalg.lu_factor_ex(a)[2], torch.linalg.cholesky_ex(p)[1],
                torch.linalg.det(a), *torch.linalg.slogdet(a), torch.linalg.cholesky_ex(p.float())[1]]

    D.check(fn, ZERO_ROW.clone(), NOT_PD.clone(), modes=ALL)
    D.check(lambda a: [torch.linalg.inv_ex(a)[1], torch.linalg.lu_factor_ex(a)[2]], SINGULAR.clone(), modes=ALL)


def test_programs_loaded_from_disk_run(tmp_path):
    """A warm process runs linalg programs loaded from the persistent cache: jaxlib initializes its LAPACK
    kernels only while lowering, so such a program crashed the process (SIGSEGV) before any was lowered."""
    code = """
        import torch
        a = torch.tensor([[4.0, 1.0], [2.0, 3.0]], dtype=torch.float64)
        got, want = torch.linalg.det(a.to("tpu")).cpu(), torch.linalg.det(a)
        print("OK" if torch.allclose(got, want) else f"WRONG {got} {want}")
    """
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    assert_isolated_ok(run_isolated(code, env=env))  # cold: compiles and stores the programs
    assert_isolated_ok(run_isolated(code, env=env))  # warm: loads them from disk


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_exp_and_orthogonal_parametrization(dtype):
    """linalg.matrix_exp (no lowering before), batched and empty, its gradient, and the orthogonal
    parametrization that uses it."""
    def fn(a, b):
        out = torch.linalg.matrix_exp(a)
        (out * torch.linspace(-1, 1, out.numel(), device=a.device, dtype=a.dtype).reshape(out.shape)).sum().backward()
        return out, a.grad, torch.linalg.matrix_exp(b)

    a = per_device(lambda d: (rand(2, 3, 3, seed=3) * 0.5).to(dtype).to(d).requires_grad_())
    D.check(fn, a, torch.zeros(0, 2, 2, dtype=dtype), modes=ALL, atol=TOL[dtype], rtol=TOL[dtype])

    def orthogonal(d):
        torch.manual_seed(0)
        return torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(4, 4, dtype=dtype)).to(d)

    D.check(lambda m, x: [m(x), m.weight], per_device(orthogonal), rand(2, 4).to(dtype), modes=["strict"],
            atol=TOL[dtype], rtol=TOL[dtype])

"""torch.linalg: LU (det, slogdet, inv, solve, lu_factor, lu, lu_solve, lu_unpack), Cholesky, triangular
solves, QR, eigh, SVD, pinv, Householder products, as JAX's linear algebra.

torch's conventions are kept exactly, because torch's backward formulas read the saved factors: pivots are
LAPACK's sequential row swaps, 1-based int32; ``LU`` packs L (unit diagonal, below) and U; ``info`` is
LAPACK's (0, or the 1-based index of the first zero pivot of U / of the leading minor that is not positive
definite), and ``_linalg_check_errors`` turns a nonzero ``info`` into torch's error (eagerly: torch's own
kernel; compiled: a device-side check, ``compile/lowering.py``). ``_linalg_det`` and ``_linalg_slogdet``
of a real input factor A^T (torch does so for a contiguous A, and its backward then solves with
``adjoint=False``); for a real non-contiguous A torch keeps LU(A), so eager's ``rewrites.det_of_strided``
and compile's ``_det_of_strided`` call the lowering on A.mT. ``_linalg_solve_ex`` always keeps LU(A).

Why one module: the decompositions share torch's LAPACK conventions (pivots, ``info``, packed LU), written once
above.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..errors import LINALG_MARK
from ..runtime import platform
from .registry import aten, register

_lax = jax.lax.linalg
_HIGHEST = jax.lax.Precision.HIGHEST


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x)) if jnp.iscomplexobj(x) else _mT(x)


def _batch_broadcast(a, b):
    """``a`` and ``b`` (both batches of matrices) broadcast to common batch dimensions."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:])


def _first_index(bad):
    """LAPACK's info: 1 + the index of the first True along the last axis, 0 if none (int32)."""
    if bad.shape[-1] == 0:
        return jnp.zeros(bad.shape[:-1], jnp.int32)
    return jnp.where(bad.any(-1), jnp.argmax(bad, -1) + 1, 0).astype(jnp.int32)


# ---------------------------------------------------------------------------------------------------
# LU


def _lu(a):
    """(LU, 1-based int32 pivots, permutation, info) of a batch of m x n matrices."""
    m, n = a.shape[-2:]
    k = min(m, n)
    if a.size == 0:
        piv = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=jnp.int32), a.shape[:-2] + (k,))
        perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), a.shape[:-2] + (m,))
        return a, piv, perm, jnp.zeros(a.shape[:-2], jnp.int32)
    lu, piv, perm = _lu_by_elimination(a) if _lu_unsupported_by_xla(a) else _lax.lu(a)
    info = _first_index(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0)
    return lu, piv.astype(jnp.int32) + 1, perm, info


def _lu_unsupported_by_xla(a) -> bool:
    """XLA:TPU's LU (the LuDecomposition custom call) takes float32 and complex64 only ("Only F32 and C64
    types are implemented in LuDecomposition", on a v5e): a 64-bit matrix's LU for a TPU is ours."""
    return platform.target() == "tpu" and a.dtype in (jnp.float64, jnp.complex128)


def _lu_by_elimination(a):
    """``lax.linalg.lu`` (LU, 0-based pivots, permutation) by Gaussian elimination with partial pivoting, one
    column a step, as LAPACK's getf2: the pivot is the first row of largest magnitude (|re| + |im| for a
    complex matrix, LAPACK's i*amax), a zero pivot column is left as it is."""
    m, n = a.shape[-2:]
    flat = a.reshape((-1, m, n))
    rows, cols = jnp.arange(m), jnp.arange(n)
    magnitude = (lambda x: jnp.abs(x.real) + jnp.abs(x.imag)) if jnp.iscomplexobj(a) else jnp.abs

    def factor(x):
        def step(j, state):
            x, pivots, perm = state
            p = jnp.argmax(jnp.where(rows >= j, magnitude(x[:, j]), -1)).astype(jnp.int32)
            x = x.at[jnp.stack([j, p])].set(x[jnp.stack([p, j])])
            perm = perm.at[jnp.stack([j, p])].set(perm[jnp.stack([p, j])])
            d = x[j, j]
            below = (rows > j) & (d != 0)
            lower = jnp.where(below, x[:, j] / jnp.where(d != 0, d, 1), 0)
            upper = jnp.where(cols > j, x[j], 0)
            x = (x - lower[:, None] * upper[None, :]).at[:, j].set(jnp.where(below, lower, x[:, j]))
            return x, pivots.at[j].set(p), perm

        state = (x, jnp.zeros((min(m, n),), jnp.int32), jnp.arange(m, dtype=jnp.int32))
        return jax.lax.fori_loop(0, min(m, n), step, state)

    lu, pivots, perm = jax.vmap(factor)(flat)
    batch = a.shape[:-2]
    return lu.reshape(a.shape), pivots.reshape(batch + pivots.shape[-1:]), perm.reshape(batch + (m,))


def _perm_from_pivots(piv, m):
    """The row permutation (A[perm] = L U) of torch's 1-based pivots."""
    if piv.shape[-1] == 0:
        return jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), piv.shape[:-1] + (m,))
    return _lax.lu_pivots_to_permutation(piv.astype(jnp.int32) - 1, m)


def _rows(x, perm):
    """x[..., perm, :] per batch."""
    perm = jnp.broadcast_to(perm, x.shape[:-1])
    return jnp.take_along_axis(x, perm[..., None], axis=-2)


def _tri(a, b, lower, *, adjoint=False, unit=False):
    """op(a) x = b for triangular ``a`` (op: identity or conjugate transpose), batches broadcast."""
    a, b = _batch_broadcast(a, b)
    if b.size == 0 or a.size == 0:
        return jnp.zeros(b.shape, jnp.result_type(a, b))
    return _lax.triangular_solve(a, b, left_side=True, lower=lower, transpose_a=adjoint,
                                 conjugate_a=adjoint and jnp.iscomplexobj(a), unit_diagonal=unit)


def _lu_solve_left(lu, piv, b, adjoint):
    """A x = b (or A^H x = b) where P L U = A is given by (lu, piv)."""
    lu, b = _batch_broadcast(lu, b)
    piv = jnp.broadcast_to(piv, lu.shape[:-1])
    perm = _perm_from_pivots(piv, lu.shape[-1])
    if not adjoint:  # x = U^-1 L^-1 P^T b
        y = _tri(lu, _rows(b, perm), True, unit=True)
        return _tri(lu, y, False)
    y = _tri(lu, b, False, adjoint=True)  # x = P L^-H U^-H b
    y = _tri(lu, y, True, adjoint=True, unit=True)
    return _rows(y, jnp.argsort(perm, axis=-1))


def lu_solve(lu, piv, b, left=True, adjoint=False):
    if left:
        return _lu_solve_left(lu, piv, b, adjoint)
    # x A = b  <=>  A^H x^H = b^H ;  x A^H = b  <=>  A x^H = b^H
    return _mH(_lu_solve_left(lu, piv, _mH(b), not adjoint))


@register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a, pivot=True, check_errors=False):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the tpu "
                           "(as on the CPU)")
    lu, piv, _, info = _lu(a)
    return lu, piv, info


@register(aten.linalg_lu.default)
def linalg_lu(a, pivot=True):
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the tpu (as on the CPU)")
    m, n = a.shape[-2:]
    k = min(m, n)
    lu, _, perm, _ = _lu(a)
    p = _mT(jax.nn.one_hot(perm, m, dtype=a.dtype))
    low = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=a.dtype)
    return p, low, jnp.triu(lu[..., :k, :])


@register(aten.lu_unpack.default)
def lu_unpack(lu, piv, unpack_data=True, unpack_pivots=True):
    m, n = lu.shape[-2:]
    k = min(m, n)
    empty = jnp.zeros((0,), lu.dtype)
    low = up = p = empty
    if unpack_data:
        low = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
        up = jnp.triu(lu[..., :k, :])
    if unpack_pivots:
        p = _mT(jax.nn.one_hot(_perm_from_pivots(piv, m), m, dtype=lu.dtype))
    return p, low, up


@register(aten.linalg_lu_solve.default)
def linalg_lu_solve(lu, piv, b, left=True, adjoint=False):
    return lu_solve(lu, piv, b, left, adjoint)


def _parity_sign(piv, dtype):
    """(-1)^(number of row swaps) of 1-based pivots."""
    swaps = jnp.sum(piv != jnp.arange(1, piv.shape[-1] + 1, dtype=piv.dtype), axis=-1)
    return jnp.where(swaps % 2 == 1, -1, 1).astype(dtype)


def _factor_for_det(a):
    """The LU torch keeps for det/slogdet/solve: of A^T for a real A (see the module docstring)."""
    return _lu(a if jnp.iscomplexobj(a) else _mT(a))


@register(aten._linalg_det.default)
def linalg_det(a):
    lu, piv, _, _ = _factor_for_det(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    return jnp.prod(d, axis=-1) * _parity_sign(piv, a.dtype), lu, piv


def _sign_of(d):
    if jnp.iscomplexobj(d):
        mag = jnp.abs(d)
        return jnp.where(mag == 0, 0, d / jnp.where(mag == 0, 1, mag))
    return jnp.sign(d)


@register(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    lu, piv, _, _ = _factor_for_det(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    sign = jnp.prod(_sign_of(d), axis=-1) * _parity_sign(piv, a.dtype)
    return sign, jnp.sum(jnp.log(jnp.abs(d)), axis=-1), lu, piv


def is_vector_rhs(a_shape, b_shape) -> bool:
    """torch's ``linalg_solve_is_vector_rhs``."""
    return len(b_shape) == 1 or (len(a_shape) - 1 == len(b_shape) and tuple(b_shape) == tuple(a_shape[:-1]))


@register(aten._linalg_solve_ex.default)
def linalg_solve_ex(a, b, left=True, check_errors=False):
    vector = is_vector_rhs(a.shape, b.shape)
    b_ = b[..., None] if vector else b
    lu, piv, _, info = _lu(a)
    x = lu_solve(lu, piv, b_, left)
    return (x[..., 0] if vector else x), lu, piv, info


@register(aten.linalg_inv_ex.default)
def linalg_inv_ex(a, check_errors=False):
    lu, piv, _, info = _lu(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return lu_solve(lu, piv, eye), info


# ---------------------------------------------------------------------------------------------------
# Cholesky and triangular solves


def _hermitian_from(a, upper):
    """The Hermitian matrix whose lower (upper) triangle ``a`` holds: what LAPACK reads of it."""
    tri = jnp.triu(a) if upper else jnp.tril(a)
    strict = jnp.triu(a, 1) if upper else jnp.tril(a, -1)
    return tri + _mH(strict)


def _cholesky_info(h):
    """LAPACK potrf's info of Hermitian ``h``: the order of the first leading minor that is not positive
    definite (0 if none), by an unblocked elimination (only run when the factorization failed)."""
    n = h.shape[-1]
    flat = h.reshape((-1, n, n))
    idx = jnp.arange(n)

    def one(m):
        def step(k, state):
            m, info = state
            d = jnp.real(m[k, k])
            bad = ~(d > 0)
            info = jnp.where((info == 0) & bad, k + 1, info)
            col = jnp.where(idx > k, m[:, k] / jnp.sqrt(jnp.where(bad, 1, d)), 0)
            return m - jnp.outer(col, jnp.conj(col)), info

        return jax.lax.fori_loop(0, n, step, (m, jnp.int32(0)))[1]

    return jax.vmap(one)(flat).reshape(h.shape[:-2])


@register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a, upper=False, check_errors=False):
    h = _hermitian_from(a, upper)
    if a.size == 0:
        return a, jnp.zeros(a.shape[:-2], jnp.int32)
    low = _lax.cholesky(h, symmetrize_input=False)
    ok = jnp.all(jnp.isfinite(low))
    info = jax.lax.cond(ok, lambda: jnp.zeros(a.shape[:-2], jnp.int32), lambda: _cholesky_info(h))
    return (_mH(low) if upper else low), info


@register(aten.cholesky.default)
def cholesky(a, upper=False):
    """The deprecated ``torch.cholesky``: CPU's kernel raises when the input is not positive-definite;
    here that is a device-side check, raised at the next wait as for an index out of range."""
    factor, info = linalg_cholesky_ex(a, upper)
    check_errors(info, "cholesky")
    return factor


@register(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def cholesky_solve(b, factor, upper=False):
    if upper:  # A = U^H U
        return _tri(factor, _tri(factor, b, False, adjoint=True), False)
    return _tri(factor, _tri(factor, b, True), True, adjoint=True)  # A = L L^H


@register(aten.cholesky_inverse.default)
def cholesky_inverse(factor, upper=False):
    """(L L^H)^-1 (or (U^H U)^-1) from a Cholesky factor: a solve against the identity."""
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return cholesky_solve(eye, factor, upper)


@register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a, b, upper, left=True, unitriangular=False):
    if left:
        return _tri(a, b, not upper, unit=unitriangular)
    # x A = b  <=>  A^H x^H = b^H
    return _mH(_tri(a, _mH(b), not upper, adjoint=True, unit=unitriangular))


@register(aten.triangular_solve.default)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    a_b, b_b = _batch_broadcast(a, b)
    if b_b.size == 0 or a_b.size == 0:
        x = jnp.zeros(b_b.shape, jnp.result_type(a, b))
    else:
        x = _lax.triangular_solve(a_b, b_b, left_side=True, lower=not upper, transpose_a=transpose,
                                  unit_diagonal=unitriangular)
    return x, a_b


# ---------------------------------------------------------------------------------------------------
# QR, eigh, SVD, pinv, Householder


@register(aten.linalg_qr.default)
def linalg_qr(a, mode="reduced"):
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    return tuple(jnp.linalg.qr(a, mode=mode))


@register(aten._linalg_eigh.default)
def linalg_eigh(a, UPLO="L", compute_v=True):
    if a.size == 0:
        return jnp.zeros(a.shape[:-1], jnp.real(a).dtype), a
    # the triangle UPLO names, made Hermitian explicitly (what LAPACK reads, on every backend)
    vecs, vals = _eigh(_hermitian_from(a, UPLO == "U"))
    return vals, (vecs if compute_v else jnp.zeros((0,), a.dtype))


def _eigh(h):
    """(eigenvectors, eigenvalues ascending) of the Hermitian ``h``. For a TPU XLA is asked for them unsorted and
    they are sorted here: XLA:TPU's Jacobi eigh (the ``Eigh`` custom call, whose configuration carries the sort
    flag) returned a sorted one's values unsorted in a program that also held an unsorted one, which XLA:TPU's
    own SVD algorithm asks for (eigvalsh beside svdvals in one fused graph: eigenvalues permuted, their gradient
    0.68 off, on a v5e; bench/results/tpu/eigh_sort_probe.json). Every eigh of a program built for a TPU then
    asks for the same."""
    if platform.target() != "tpu":
        return _lax.eigh(h, symmetrize_input=False)
    vecs, vals = _lax.eigh(h, symmetrize_input=False, sort_eigenvalues=False)
    order = jnp.argsort(vals, axis=-1, stable=True)
    return jnp.take_along_axis(vecs, order[..., None, :], axis=-1), jnp.take_along_axis(vals, order, axis=-1)


def _svd(a, full_matrices=False, compute_uv=True):
    """jnp.linalg.svd; for a TPU, a 32-bit input's SVD is XLA:TPU's own algorithm (QDWH polar decomposition,
    then eigh) traced here with 64-bit mode off. The SVD primitive's TPU lowering is that Python algorithm
    traced when the program is *lowered*, where every program of this backend has 64-bit mode on: its loop
    counters and constants then were int64/float64 and XLA:TPU's compiler aborted ('Check failed: buffer !=
    nullptr') on every program holding it (torch.linalg.pinv at every shape, on a TPU v5e)."""
    if platform.target() == "tpu" and a.size and a.dtype not in (jnp.float64, jnp.complex128):
        tpu_svd = _tpu_svd_algorithm()
        if tpu_svd is not None:
            fn = functools.partial(tpu_svd, full_matrices=full_matrices, compute_uv=compute_uv)
            for _ in a.shape[:-2]:
                fn = jax.vmap(fn)
            return platform.traced_without_x64(fn, a)
    if platform.target() == "tpu" and a.size and a.dtype == jnp.float64:
        fn = functools.partial(_svd_by_polar_decomposition, full_matrices=full_matrices, compute_uv=compute_uv)
        for _ in a.shape[:-2]:
            fn = jax.vmap(fn)
        return fn(a)
    return jnp.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def _svd_by_polar_decomposition(a, full_matrices, compute_uv):
    """A float64 matrix's SVD for a TPU. JAX's own TPU algorithm multiplies the float64 vectors by an int64
    matrix of signs when it corrects a rank-deficient result, a dot XLA:TPU does not compile (64-bit integers;
    TORCH_TPU_CHECK_LOWERING refuses it). The same method, with the signs as float64 column scales: the polar
    decomposition a = U_p H (QDWH), H = V S V^T (eigh), U = U_p V, the singular values in descending order;
    where the smallest is negligible, U_p V need not be orthonormal and is re-orthonormalised by a QR that
    keeps each column's direction. A wide matrix is the transpose's SVD; a tall one with ``full_matrices`` is
    its R factor's, completed by the rest of Q."""
    m, n = a.shape
    if m < n:
        out = _svd_by_polar_decomposition(a.T, full_matrices, compute_uv)
        return out if not compute_uv else (out[2].T, out[1], out[0].T)
    if full_matrices and compute_uv and m > n:
        q, r = jnp.linalg.qr(a, mode="complete")
        u, s, vh = _svd_by_polar_decomposition(r[:n], False, True)
        return jnp.concatenate([jnp.matmul(q[:, :n], u, precision=_HIGHEST), q[:, n:]], axis=1), s, vh
    u_p, h, _, _ = jax.lax.linalg.qdwh(a)
    vectors, values = _eigh((h + h.T) / 2)  # ascending
    s = jnp.maximum(values[::-1], 0.0)  # (eigh may return tiny negatives for a singular matrix)
    if not compute_uv:
        return s
    v = vectors[:, ::-1]
    u = jnp.matmul(u_p, v, precision=_HIGHEST)

    def orthonormal(u):
        q, r = jnp.linalg.qr(u)
        return q * jnp.where(jnp.diagonal(r) >= 0, 1.0, -1.0)[None, :]

    deficient = s[-1] <= n * jnp.finfo(a.dtype).eps * s[0]
    u = jax.lax.cond(deficient, orthonormal, lambda u: u, u)
    return u, s, v.T


@functools.lru_cache(maxsize=None)
def _tpu_svd_algorithm():
    """jax's TPU SVD (``jax._src.tpu.linalg.svd.svd``: a private module), or None where this JAX lays it out
    otherwise: the primitive is then used, and tests/runtime/test_tpu_lowering.py, which checks that a
    32-bit SVD built for a TPU holds no float64, fails on the CPU."""
    try:
        from jax._src.tpu.linalg import svd as tpu_svd_module

        return tpu_svd_module.svd
    except (ImportError, AttributeError):
        return None


@register(aten._linalg_svd.default)
def linalg_svd(a, full_matrices=False, compute_uv=True, driver=None):
    if not compute_uv:
        return jnp.zeros((0,), a.dtype), _svd(a, compute_uv=False), jnp.zeros((0,), a.dtype)
    u, s, vh = _svd(a, full_matrices=full_matrices)
    return u, s, vh


@register(aten.linalg_householder_product.default)
def linalg_householder_product(a, tau):
    return _lax.householder_product(a, tau)


@register(aten._trilinear.default)
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """F.bilinear's kernel: the three inputs, each unsqueezed at its expand dims, multiplied (broadcast)
    and summed over ``sumdim``."""
    def expand(x, dims):
        for d in sorted(dims):
            x = jnp.expand_dims(x, d)
        return x

    acc = jnp.promote_types(i1.dtype, jnp.float32) if jnp.issubdtype(i1.dtype, jnp.floating) else i1.dtype
    prod = expand(i1, expand1).astype(acc) * expand(i2, expand2).astype(acc) * expand(i3, expand3).astype(acc)
    return (jnp.sum(prod, axis=tuple(sumdim)) if sumdim else prod).astype(i1.dtype)


@register(aten.geqrf.default)
def geqrf(a):
    """LAPACK's compact QR (reflectors below the diagonal, R on and above, the scalar factors): what
    torch.geqrf returns, and what parametrizations.orthogonal's right_inverse reads (torch swallows a
    NotImplementedError there, which left the parametrization broken)."""
    h, tau = jnp.linalg.qr(a, mode="raw")  # h is LAPACK's factor transposed
    return _mT(h), tau


@register(aten.ormqr.default)
def ormqr(a, tau, other, left=True, transpose=False):
    a, other = _batch_broadcast(a, other)
    tau = jnp.broadcast_to(tau, a.shape[:-2] + tau.shape[-1:])
    return _lax.ormqr(a, tau, other, left=left, transpose=transpose)


@register(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(a, atol=None, rtol=None, hermitian=False):
    m, n = a.shape[-2:]
    if a.size == 0:
        return jnp.zeros(a.shape[:-2] + (n, m), a.dtype)
    real = jnp.real(a).dtype
    if platform.target() == "tpu" and real != jnp.float64:
        # no 64-bit value in a program for a TPU where the input has none (see _svd): the tolerances are
        # in the input's precision (torch compares in float64: a singular value within a float32 rounding
        # of the cut-off may fall on the other side)
        atol, rtol = (None if t is None else t.astype(real) for t in (atol, rtol))
        return platform.traced_without_x64(_pinv, a, atol, rtol, hermitian, real)
    return _pinv(a, atol, rtol, hermitian, jnp.float64)


def _pinv(a, atol, rtol, hermitian, tol_dtype):
    """torch.linalg.pinv: singular values (eigenvalues' magnitudes, ``hermitian``) at or below
    max(atol, rtol * the largest) count as zero; rtol defaults to eps * max(m, n) unless atol > 0."""
    m, n = a.shape[-2:]
    real = jnp.real(a).dtype
    atol_ = jnp.zeros((), tol_dtype) if atol is None else jnp.asarray(atol, tol_dtype)
    if rtol is not None:
        rtol_ = jnp.asarray(rtol, tol_dtype)
    else:
        default = jnp.asarray(jnp.finfo(real).eps * max(m, n), tol_dtype)
        rtol_ = default if atol is None else jnp.where(atol_ > 0, 0.0, default).astype(tol_dtype)
    if hermitian:
        vecs, vals = _eigh(_hermitian_from(a, False))
        mag = jnp.abs(vals)
        tol = jnp.maximum(atol_[..., None], rtol_[..., None] * jnp.max(mag, axis=-1, keepdims=True))
        inv = jnp.where(mag > tol, 1 / jnp.where(mag == 0, 1, vals), 0).astype(a.dtype)
        return jnp.matmul(vecs * inv[..., None, :], _mH(vecs), precision=_HIGHEST)
    u, s, vh = _svd(a, full_matrices=False)
    tol = jnp.maximum(atol_[..., None], rtol_[..., None] * s[..., :1])
    inv = jnp.where(s > tol, 1 / jnp.where(s == 0, 1, s), 0).astype(a.dtype)
    return jnp.matmul(_mH(vh) * inv[..., None, :], _mH(u), precision=_HIGHEST)


# ---------------------------------------------------------------------------------------------------
# _linalg_check_errors in compiled graphs (eager runs torch's own kernel, which reads ``info``)

_FAILURES = {  # what torch's _linalg_check_errors says, per API, for info > 0 (the index is not known)
    "inv": "a diagonal element of U is zero, the inversion could not be completed because the input matrix "
           "is singular",
    "solve": "The solver failed because the input matrix is singular",
    "cholesky": "The factorization could not be completed because the input is not positive-definite",
    "lu_factor": "a diagonal element of U is zero: the matrix is singular, and using its LU factorization in "
                 "lu_solve would divide by zero",
    "eig": "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
           "repeated eigenvalues",
    "svd": "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
           "repeated singular values",
}


def check_errors(info, api_name: str) -> None:
    """A device-side check that every ``info`` is 0, with torch's message for ``api_name``."""
    from .checks import require

    what = next((m for key, m in _FAILURES.items() if key in api_name), "the operation failed (info > 0)")
    require(info == 0, f"{api_name}: {what} {LINALG_MARK}")


@register(aten.linalg_matrix_exp.default)
def matrix_exp(a):
    """exp(A) by scaling and squaring with a Pade approximant (JAX's expm), batched; half types in
    float32 (torch's backward reaches this too: the exponential of a 2n x 2n block matrix)."""
    from jax.scipy.linalg import expm

    x = a.astype(jnp.float32) if a.dtype in (jnp.bfloat16, jnp.float16) else a
    flat = x.reshape((-1,) + x.shape[-2:])
    if _lu_unsupported_by_xla(x) and _jax_expm_steps() is not None:
        expm = _expm_with_our_lu
    out = jax.vmap(expm)(flat) if flat.shape[0] else flat
    return out.reshape(x.shape).astype(a.dtype)


_MAX_SQUARINGS = 16  # jax.scipy.linalg.expm's default


@functools.lru_cache(maxsize=None)
def _jax_expm_steps():
    """(Pade approximant P, Q and the number of squarings; the squaring) of JAX's expm, private functions of
    ``jax._src.scipy.linalg``, or None where this JAX lays them out otherwise (then JAX's expm is used, and
    tests/ops/test_tpu_float64.py's float64 matrix_exp case, which refuses an XLA LU of float64, fails on the
    CPU)."""
    try:
        from jax._src.scipy import linalg as jax_scipy_linalg

        return jax_scipy_linalg._calc_P_Q, jax_scipy_linalg._squaring
    except (ImportError, AttributeError):
        return None


def _expm_with_our_lu(a):
    """JAX's expm of one 64-bit matrix for a TPU, its Pade step's solve Q^-1 P on ``_lu_by_elimination``
    (JAX's solves with XLA's LU, which XLA:TPU has for 32-bit types only)."""
    calc_p_q, squaring = _jax_expm_steps()
    # A zero matrix (the orthogonal parametrization's first call: exp(X - X^T) of X = -I) is I, given here: JAX
    # takes its number of squarings from log2 of the norm, which on the chip came out NaN for a float64 zero
    # (exp(0) was NaN there; log2(0) is -inf on the CPU). The steps below run on I instead, their result unused.
    zero = jnp.all(a == 0)
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    p, q, n_squarings = calc_p_q(jnp.where(zero, eye, a))
    lu, pivots, _ = _lu_by_elimination(q)
    r = _lu_solve_left(lu, pivots.astype(jnp.int32) + 1, p, adjoint=False)
    r = squaring(r, n_squarings, _MAX_SQUARINGS)
    return jnp.where(zero, eye, jnp.where(n_squarings > _MAX_SQUARINGS, jnp.full_like(r, jnp.nan), r))

"""Hostile round: the torch ecosystem utilities on the tpu device, in every executor where they add coverage.

torch.func (vmap, grad, jacrev/jacfwd, hessian, jvp/vjp, functional_call), forward-mode AD, activation
checkpointing, double backward, anomaly mode, saved-tensor hooks, tensor and module hooks, autocast,
every torch.optim optimizer (foreach on and off, state_dict round trips), gradient clipping,
parametrizations, swa_utils and torch.distributions. Every case compares with CPU torch through
``differential`` (equal results and inputs afterwards, or both raise); where the values are random
(dropout, sampling) the case compares a device-independent property computed on each device (a
checkpointed gradient minus the plain one, sample statistics, shapes).

Found here: ``torch.utils.checkpoint`` saved and replayed the device RNG state only when
``torch.tpu._initialized`` is true, and torch.tpu had no such attribute, so a checkpointed dropout drew a
new mask on recompute and the gradient was silently wrong (use_reentrant True and False).
``parametrizations.orthogonal`` crashed at the first forward (``None @ Tensor``): its right_inverse calls
``torch.geqrf``, which had no lowering, and torch swallows that NotImplementedError; geqrf and ormqr are
lowered now, and refuse the dtypes CPU's LAPACK kernels refuse (int, half: geqrf returned values).
"""
import pytest
import torch
import torch.nn.functional as F

import differential as D
from differential import watchdog  # noqa: F401

pytestmark = pytest.mark.usefixtures("watchdog")

ALL = ["strict", "fused", "compiled"]
EAGER = ["strict", "fused"]

A = D.rand(3, 4)
B = D.rand(3, 4, seed=2)
V = D.rand(4, seed=3)
M = D.rand(4, 4, seed=4)


def _leaf(t):
    return D.per_device(lambda d: t.clone().to(d).requires_grad_())


def _module(make, seed=0):
    """A module built the same way on each device (same seed, same parameters)."""
    def on(device):
        torch.manual_seed(seed)
        return make().to(device)
    return D.per_device(on)


# ---------------------------------------------------------------------------------------------------
# activation checkpointing: the recompute must replay the forward's dropout mask


def _dropout_block(x, m):
    return F.dropout((x @ m).tanh(), 0.5, training=True) * 2 + x


def _checkpoint_vs_plain(reentrant, preserve=True):
    """The checkpointed gradient minus the plain one on the same device (0 when the RNG is replayed);
    with preserve_rng_state=False only the shape of the check is compared (the masks differ)."""
    import torch.utils.checkpoint as ckpt

    def fn(x, m):
        torch.manual_seed(5)
        y = ckpt.checkpoint(_dropout_block, x, m, use_reentrant=reentrant, preserve_rng_state=preserve)
        y.sum().backward()
        g = (x.grad.clone(), m.grad.clone())
        x.grad = m.grad = None
        torch.manual_seed(5)
        y2 = _dropout_block(x, m)
        y2.sum().backward()
        return (g[0] - x.grad).abs().max(), (g[1] - m.grad).abs().max(), (y - y2).abs().max()
    return fn


def _checkpoint_sequential(x):
    import torch.utils.checkpoint as ckpt

    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 4), torch.nn.Tanh())
    with torch.no_grad():
        for p in seq.parameters():
            p.copy_(torch.linspace(-0.5, 0.5, p.numel()).reshape(p.shape))
    seq = seq.to(x.device)
    y = ckpt.checkpoint_sequential(seq, 2, x, use_reentrant=False)
    y.sum().backward()
    return y, x.grad, [p.grad for p in seq.parameters()]


def _checkpoint_compiled(x, m):
    import torch.utils.checkpoint as ckpt

    return ckpt.checkpoint(lambda a, b: (a @ b).sin() * a, x, m, use_reentrant=False).sum()


# ---------------------------------------------------------------------------------------------------
# parametrizations (orthogonal reads geqrf / householder_product), and the QR ops under them

LIN = lambda: torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))  # noqa: E731


def _orthogonal_default(x):
    from torch.nn.utils import parametrizations as PZ

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(D.rand(*p.shape, seed=10 + i))
    m = m.to(x.device)
    PZ.orthogonal(m[0], "weight")
    y = m(x)
    y.sum().backward()
    return y, m[0].weight, m[0].parametrizations.weight.original.grad


def _orthogonal_map(kind, use_trivialization=True):
    """A full-rank weight (a rank-deficient one has no unique QR), square where the trivialization
    completes a wide one with random columns."""
    def fn(x):
        from torch.nn.utils import parametrizations as PZ

        torch.manual_seed(0)
        out = 4 if use_trivialization else 3
        lin = torch.nn.Linear(4, out)
        with torch.no_grad():
            lin.weight.copy_(D.rand(out, 4, seed=7) + 2 * torch.eye(out, 4))
        lin = lin.to(x.device)
        PZ.orthogonal(lin, "weight", orthogonal_map=kind, use_trivialization=use_trivialization)
        w = lin.weight
        lin(x).sum().backward()
        return w, w @ w.T, lin.parametrizations.weight.original.grad
    return fn


def _weight_norm(m, x):
    from torch.nn.utils import parametrizations as PZ

    PZ.weight_norm(m[0], dim=0)
    y = m(x)
    y.sum().backward()
    return y, m[0].parametrizations.weight.original0.grad, m[0].parametrizations.weight.original1.grad


def _spectral_norm(m, x):
    """The parametrization's 15 power iterations at registration converge from any start vector, so the
    values match CPU's although the start vectors are random."""
    from torch.nn.utils import parametrizations as PZ

    PZ.spectral_norm(m[0])
    outs = [m(x) for _ in range(3)]
    m.eval()
    return outs + [m(x), torch.linalg.matrix_norm(m[0].weight, 2)]


def _custom_parametrization_cached(x):
    import torch.nn.utils.parametrize as P

    class Sym(torch.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.linspace(-1, 1, 16).reshape(4, 4))
    lin = lin.to(x.device)
    P.register_parametrization(lin, "weight", Sym())
    with P.cached():
        y = lin(x) + lin(x)
    y.sum().backward()
    grad = lin.parametrizations.weight.original.grad
    P.remove_parametrizations(lin, "weight", leave_parametrized=True)
    return y, lin.weight, grad


QR_A = D.rand(5, 3)


def _ormqr_all(a, c, ct):
    h, tau = torch.geqrf(a)
    return [torch.ormqr(h, tau, o, left=left, transpose=tr)
            for o, left in ((c, True), (ct, False)) for tr in (False, True)]


ISOLATED_CASES = {
    "checkpoint_dropout_reentrant": lambda: D.check(_checkpoint_vs_plain(True), _leaf(A), _leaf(M), modes=EAGER),
    "checkpoint_dropout_nonreentrant": lambda: D.check(_checkpoint_vs_plain(False), _leaf(A), _leaf(M),
                                                       modes=EAGER),
    "checkpoint_sequential": lambda: D.check(_checkpoint_sequential, _leaf(A), modes=EAGER, atol=1e-5),
    "checkpoint_compiled": lambda: D.check(_checkpoint_compiled, _leaf(A), _leaf(M), modes=["compiled"]),
    "orthogonal_default": lambda: D.check(_orthogonal_default, _leaf(A), modes=EAGER, atol=1e-5),
    "orthogonal_householder": lambda: D.check(_orthogonal_map("householder"), _leaf(A), modes=EAGER, atol=1e-5),
    "orthogonal_householder_no_trivialization": lambda: D.check(_orthogonal_map("householder", False), _leaf(A),
                                                                modes=EAGER, atol=1e-5),
    "orthogonal_cayley": lambda: D.check(_orthogonal_map("cayley"), _leaf(A), modes=EAGER, atol=1e-5),
    "orthogonal_matrix_exp": lambda: D.check(_orthogonal_map("matrix_exp"), _leaf(A), modes=EAGER, atol=1e-5),
    "weight_norm": lambda: D.check(_weight_norm, _module(LIN), _leaf(A), modes=EAGER, atol=1e-5),
    "spectral_norm": lambda: D.check(_spectral_norm, _module(LIN), A.clone(), modes=EAGER, atol=1e-5),
    "custom_parametrization_cached": lambda: D.check(_custom_parametrization_cached, _leaf(A), modes=EAGER),
    "geqrf": lambda: [D.check(torch.geqrf, a, modes=ALL, atol=1e-5)
                      for a in (QR_A.clone(), D.rand(2, 3, 5), torch.complex(D.rand(4, 3), D.rand(4, 3, seed=5)))],
    "ormqr": lambda: D.check(_ormqr_all, QR_A.clone(), D.rand(5, 2, seed=2), D.rand(2, 5, seed=3), modes=ALL,
                             atol=1e-5),
    "ormqr_batched_broadcast": lambda: D.check(lambda a, c: torch.ormqr(*torch.geqrf(a), c), D.rand(2, 5, 3),
                                               D.rand(5, 2), modes=EAGER, atol=1e-5),
    "qr_ops_refused_dtypes": lambda: [
        D.check(f, a, modes=ALL, expect_raise=True)
        for a in (QR_A.int(), QR_A.half(), QR_A.bfloat16(), QR_A > 0)
        for f in (torch.geqrf, lambda a: torch.ormqr(a, a[0], a),
                  lambda a: torch.linalg.householder_product(a, a[0]))],
    "ormqr_bad_shapes": lambda: D.check(lambda a, c: torch.ormqr(*torch.geqrf(a), c), QR_A.clone(), D.rand(4, 2),
                                        modes=EAGER, expect_raise=True),
}


@pytest.fixture(scope="module")
def results(request):
    return D.isolated_results(request, __file__, D.param_of("test_case"), timeout_per_case=180)


@pytest.mark.parametrize("name", list(ISOLATED_CASES))
def test_case(results, name):
    D.assert_isolated_result(results, name)

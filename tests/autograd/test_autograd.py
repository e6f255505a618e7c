"""Autograd and optimizers on the tpu device match CPU torch."""
import copy

import pytest

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.harness.compare import assert_low_precision_close

DEV = "tpu"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.fc1 = nn.Linear(8 + 4 * 4 * 4, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, tokens, img):
        e = self.emb(tokens).mean(1)
        c = F.silu(self.gn(self.conv(img))).flatten(1)
        h = F.gelu(self.fc1(torch.cat([e, c], 1)))
        h = self.ln(h)
        return F.softmax(self.fc2(h), dim=-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 10, (3, 6), generator=g)
    img = torch.randn(3, 2, 4, 4, generator=g)
    target = torch.randn(3, 5, generator=g)
    return tokens, img, target


def _close(a, b, **kw):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5, **kw)


def test_mlp_gradients_match_cpu():
    torch.manual_seed(0)
    ref = Net()
    dev = copy.deepcopy(ref).to(DEV)
    tokens, img, target = _inputs()
    loss_ref = F.mse_loss(ref(tokens, img), target)
    loss_ref.backward()
    loss = F.mse_loss(dev(tokens.to(DEV), img.to(DEV)), target.to(DEV))
    loss.backward()
    _close(loss, loss_ref)
    for (n, p), (_, q) in zip(ref.named_parameters(), dev.named_parameters()):
        assert q.grad is not None and q.grad.device.type == "tpu", n
        _close(q.grad, p.grad, msg=n)


def test_input_grad_and_retain():
    x = torch.randn(4, 3)
    xd = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    for t in (xc, xd):
        y = (t * t).sum(1)
        y.retain_grad()
        (y.exp().sum() + t[1:, :2].pow(3).sum()).backward()
    _close(xd.grad, xc.grad)
    assert xd.grad.device.type == "tpu"


def test_adamw_matches_cpu(foreach=None):  # None: foreach=True on non-CPU devices (_foreach_* ops)
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 2))
    dev = copy.deepcopy(ref).to(DEV)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, foreach=foreach)
    opt = torch.optim.AdamW(dev.parameters(), lr=1e-2, weight_decay=0.1, foreach=foreach)
    x = torch.randn(5, 6)
    y = torch.randn(5, 2)
    for _ in range(2):
        for m, o, xx, yy in ((ref, opt_ref, x, y), (dev, opt, x.to(DEV), y.to(DEV))):
            o.zero_grad()
            F.mse_loss(m(xx), yy).backward()
            o.step()
    for p, q in zip(ref.parameters(), dev.parameters()):
        assert isinstance(q, nn.Parameter) and q.device.type == "tpu"
        _close(q, p)
    st = opt.state[next(iter(dev.parameters()))]
    assert st["exp_avg"].device.type == "tpu"


def test_sgd_momentum_and_grad_clip():
    torch.manual_seed(2)
    ref = nn.Linear(4, 3)
    dev = copy.deepcopy(ref).to(DEV)
    x = torch.randn(6, 4)
    for m, xx in ((ref, x), (dev, x.to(DEV))):
        o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            o.zero_grad()
            m(xx).pow(2).sum().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            o.step()
    _close(dev.weight, ref.weight)
    _close(dev.bias, ref.bias)


def test_no_grad_and_detach():
    w = torch.ones(3, device=DEV, requires_grad=True)
    with torch.no_grad():
        y = w * 2
    assert not y.requires_grad
    z = (w * 3).detach()
    assert not z.requires_grad and z.device.type == "tpu"
    with torch.inference_mode():
        v = nn.functional.linear(torch.ones(2, 3, device=DEV), torch.ones(4, 3, device=DEV))
    assert v.cpu().tolist() == [[3.0] * 4] * 2


def _op_whose_backward_fails():
    """tputest::scale2 (lowered) whose backward calls tputest::nograd, which has no tpu lowering."""
    if hasattr(torch.ops, "tputest") and hasattr(torch.ops.tputest, "scale2"):
        return torch.ops.tputest.scale2
    from torch_tpu.ops import registry

    @torch.library.custom_op("tputest::nograd", mutates_args=(), device_types="cpu")
    def nograd(g: torch.Tensor) -> torch.Tensor:
        return g * 2

    nograd.register_fake(lambda g: torch.empty_like(g))

    @torch.library.custom_op("tputest::scale2", mutates_args=())
    def scale2(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    scale2.register_fake(lambda x: torch.empty_like(x))
    scale2.register_autograd(lambda ctx, g: torch.ops.tputest.nograd(g))
    registry.register(torch.ops.tputest.scale2.default)(lambda x: x * 2)
    return torch.ops.tputest.scale2


@pytest.mark.parametrize("how", ["backward", "autograd.grad"])
def test_an_error_in_backward_is_raised_not_fatal(how, eager_mode):
    """The op failing inside autograd's engine (no lowering for the backward op) raises from
    backward(); the process survives and the next backward works."""
    op = _op_whose_backward_fails()
    x = torch.ones(3, device="tpu", requires_grad=True)
    y = (op(x) * 3).sum()
    with pytest.raises(NotImplementedError, match="tputest.nograd"):
        if how == "backward":
            y.backward()
        else:
            torch.autograd.grad(y, x)
    z = torch.ones(3, device="tpu", requires_grad=True)
    (z * z).sum().backward()
    assert z.grad.cpu().tolist() == [2.0, 2.0, 2.0]


_SPATIAL = {
    "nearest2d": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    "nearest_size": lambda x: F.interpolate(x, size=(7, 5), mode="nearest"),
    "nearest_exact": lambda x: F.interpolate(x, size=(7, 5), mode="nearest-exact"),
    "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "bilinear_align": lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
    "bicubic": lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"),
    "linear1d": lambda x: F.interpolate(x.flatten(2), scale_factor=3, mode="linear"),
    "avg_pool": lambda x: F.avg_pool2d(x, 2),
    "avg_pool_pad": lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
    "adaptive_avg_pool": lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
    "max_pool": lambda x: F.max_pool2d(x, 2),
    "max_pool3d": lambda x: F.max_pool3d(x[:, None], 2),
    "grid_sample": lambda x: F.grid_sample(
        x, (torch.linspace(-1, 1, 18).reshape(1, 3, 3, 2)).to(x.device, x.dtype), align_corners=False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", sorted(_SPATIAL))
def test_spatial_backward_matches_cpu(op, dtype):
    """VAEs and U-Nets train through these (upsampling, pooling, grid sampling)."""
    x = torch.randn(1, 2, 4, 6, dtype=dtype, generator=torch.Generator().manual_seed(0))
    xc = x.clone().requires_grad_()
    (_SPATIAL[op](xc).float() ** 2).sum().backward()
    xt = x.to("tpu").requires_grad_()
    (_SPATIAL[op](xt).float() ** 2).sum().backward()
    if dtype == torch.float32:
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
        return
    x32 = x.float().requires_grad_()  # bf16: within CPU's own bf16 error (the pipelines' rule)
    (_SPATIAL[op](x32) ** 2).sum().backward()
    assert_low_precision_close(xt.grad, xc.grad, x32.grad, where=f"{op} input gradient")
